#!/usr/bin/env bash
# Builds kiln with `--features cuda` offline (no LLVM download, no CUDA toolkit; docs/gpu.md)
# into its own target directory, then checks that the binary, on a machine without the CUDA
# run-time parts, refuses `--device gpu` with the one-line message naming them (exit code 2,
# nothing written) instead of crashing. On a machine with an NVIDIA GPU, NVRTC and the CUDA
# headers, the same run trains one epoch instead; both pass.
set -euo pipefail
cd "$(dirname "$0")/.."
base="${CARGO_TARGET_DIR:-${KILN_CACHE_DIR:-$HOME/.cache/kiln}/target}"
export CARGO_TARGET_DIR="$base-cuda"
# The packages of every feature, while the network is there; the build itself runs offline.
cargo fetch --locked
cargo build --release --locked --offline -p kiln-cli --features cuda
kiln="$CARGO_TARGET_DIR/release/kiln"
run_dir="$(mktemp -d)/run"
set +e
out="$("$kiln" train bench/configs/mlp.toml --device gpu --epochs 1 --run-dir "$run_dir" 2>&1)"
rc=$?
set -e
echo "$out" | tail -3
case $rc in
  0) echo "cuda-build-check: a GPU is here and trained one epoch" ;;
  2)
    if ! grep -q "^kiln: error: --device gpu (CUDA) cannot start; missing: " <<<"$out"; then
      echo "cuda-build-check: exit 2 without the CUDA start message" >&2
      exit 1
    fi
    if [ -e "$run_dir" ]; then
      echo "cuda-build-check: the refused run wrote $run_dir" >&2
      exit 1
    fi
    echo "cuda-build-check: no CUDA run time here; the binary said what is missing" ;;
  *)
    echo "cuda-build-check: --device gpu exited $rc (want 0 on a GPU machine, 2 elsewhere)" >&2
    exit 1 ;;
esac
