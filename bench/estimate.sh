#!/usr/bin/env bash
# Checks `kiln estimate` against the real peak memory of `kiln train` on the CPU.
#
#   bench/estimate.sh            # needs Fashion-MNIST (scripts/setup.sh) and a release build
#
# For the Fashion-MNIST MLP, CNN and reduced ResNet (examples/fashion-mnist/), each trained for
# a few steps (steps_per_epoch, one epoch, then validation and test as usual), it measures the
# process's peak resident set (GNU time's "Maximum resident set size", VmHWM) minus the
# baseline of the same binary doing nothing (`kiln --version`), and prints it beside the
# estimate's "CPU run total" (model, activations, workspace, dataset and pipeline) for the same
# config. Results go to bench/results-estimate.jsonl; bench/README.md has the table.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-$HOME/.cache/kiln/target}
K=$TARGET/release/kiln
[ -x "$K" ] || cargo build --release --workspace --bins --examples
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "bench/estimate.sh needs GNU time (apt-get install time)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
base_kib=$($TIME -f %M "$K" --version 2>&1 >/dev/null | tail -1)
printf '%-14s %6s %14s %14s %7s\n' model batch "measured MiB" "estimate MiB" ratio
for spec in mlp:60 cnn:60 resnet-small:30; do
  model=${spec%%:*}
  steps=${spec##*:}
  cfg=$work/$model.toml
  sed "s/^epochs = .*/epochs = 1\nsteps_per_epoch = $steps/" "examples/fashion-mnist/$model.toml" >"$cfg"
  peak_kib=$($TIME -f %M "$K" train "$cfg" --run-dir "$work/run-$model" --no-resume 2>&1 >/dev/null | tail -1)
  batch=$(grep -m1 '^batch_size' "$cfg" | sed 's/.*= *//')
  est=$("$K" estimate "$cfg" | sed -n 's/.*CPU run total: //p')
  est_mib=$(awk -v v="${est% *}" -v u="${est#* }" 'BEGIN { m = (u == "GiB") ? v * 1024 : (u == "KiB" ? v / 1024 : v); printf "%.1f", m }')
  measured_mib=$(awk -v p="$peak_kib" -v b="$base_kib" 'BEGIN { printf "%.1f", (p - b) / 1024 }')
  ratio=$(awk -v e="$est_mib" -v m="$measured_mib" 'BEGIN { printf "%.3f", e / m }')
  printf '%-14s %6s %14s %14s %7s\n' "$model" "$batch" "$measured_mib" "$est_mib" "$ratio"
  printf '{"date":"%s","model":"%s","batch":%s,"steps":%s,"baseline_kib":%s,"peak_kib":%s,"measured_mib":%s,"estimate_mib":%s,"ratio":%s}\n' \
    "$(date -u +%FT%TZ)" "$model" "$batch" "$steps" "$base_kib" "$peak_kib" "$measured_mib" "$est_mib" "$ratio" >>bench/results-estimate.jsonl
done
