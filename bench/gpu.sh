#!/usr/bin/env bash
# GPU check and benchmark, in two steps (the GPU machine may have no network and no Rust):
#
#   bench/gpu.sh bundle         # here: build kiln with --features vulkan, pack bench/gpu-bundle/
#   bench/gpu.sh run [DIR]      # on a Linux machine with an NVIDIA GPU and its Vulkan driver,
#                               # from the unpacked bundle (DIR, default: the script's folder)
#
# `run` (1) trains each benchmark model for one epoch on the CPU, then evaluates those same
# weights on the CPU and on the GPU: the two test losses must agree to 1e-3 (relative) and the
# accuracies exactly or within 0.1 point; (2) trains each model 3 epochs on the GPU and reports
# samples/s of epochs 2-3, and PyTorch's on CUDA when `python3 -c "import torch"` works there.
# Results: results-gpu.jsonl next to the script, plus nvidia-smi's card and driver line.
#
# Each step is limited to KILN_GPU_STEP_TIMEOUT seconds (default 600), so a stuck driver
# cannot hold the machine.
#
# Not run in CI (no GPU). Record numbers in bench/README.md with the card and the driver.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

case "${1:-}" in
bundle)
  cd "$here/.."
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${KILN_CACHE_DIR:-$HOME/.cache/kiln}/target-vulkan}"
  cargo build --release -p kiln-cli --features vulkan
  out="$here/gpu-bundle"
  rm -rf "$out" && mkdir -p "$out/data" "$out/configs" "$out/peers"
  # Stripped and xz-compressed (about 125 MB -> 24 MB: wgpu and its shader compilers are
  # large), so the bundle fits small transfer limits; `run` unpacks it.
  strip -o "$out/kiln" "$CARGO_TARGET_DIR/release/kiln"
  xz -T0 -6 "$out/kiln"
  cp bench/configs/*.toml "$out/configs/"
  cp bench/peers/torch_bench.py bench/peers/fashion_mnist.py "$out/peers/"
  cp /usr/share/datasets/fashion-mnist/*.gz "$out/data/"
  cp "$0" "$out/gpu.sh"
  # The Vulkan loader, for machines that have the NVIDIA driver but not libvulkan1.
  cp /usr/lib/x86_64-linux-gnu/libvulkan.so.1* "$out/" 2>/dev/null || echo "note: libvulkan.so.1 not found here (apt-get install libvulkan1)"
  echo "bundle: $out ($(du -sh "$out" | cut -f1)); copy it to the GPU machine and run: ./gpu.sh run"
  ;;
run)
  dir="${2:-$here}"
  cd "$dir"
  if [ ! -x ./kiln ] && [ -f ./kiln.xz ]; then
    xz -dk ./kiln.xz && chmod +x ./kiln
  fi
  export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export KILN_DATA_DIR="$dir/data"
  out="$dir/results-gpu.jsonl"
  t="${KILN_GPU_STEP_TIMEOUT:-600}"
  : > "$out"
  (nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not found") \
    | sed 's/^/{"gpu": "/; s/$/"}/' | tee -a "$out"
  for model in mlp cnn; do
    run="$(mktemp -d)"
    timeout "$t" ./kiln train "configs/$model.toml" --epochs 1 --device cpu --data-dir "$dir/data" --run-dir "$run" >/dev/null
    cpu=$(timeout "$t" ./kiln evaluate "$run" --json --device cpu --data-dir "$dir/data")
    gpu=$(timeout "$t" ./kiln evaluate "$run" --json --device gpu --data-dir "$dir/data")
    python3 - "$model" "$cpu" "$gpu" <<'PY' | tee -a "$out"
import json, sys
m, c, g = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
ok = abs(c["loss"] - g["loss"]) <= 1e-3 * abs(c["loss"]) and abs(c["accuracy"] - g["accuracy"]) <= 1e-3
print(json.dumps({"check": "gpu_vs_cpu_evaluate", "model": m, "cpu": c, "gpu": g, "ok": ok}))
if not ok:
    sys.exit(1)
PY
    timeout "$t" ./kiln train "configs/$model.toml" --epochs 3 --device gpu --no-resume --data-dir "$dir/data" --run-dir "$run" >/dev/null
    python3 - "$run/history.json" "$model" <<'PY' | tee -a "$out"
import json, sys
h = json.load(open(sys.argv[1]))
s = h["samples_per_second"][1:]
print(json.dumps({"framework": "kiln", "device": "gpu", "model": sys.argv[2], "samples_per_second": sum(s) / len(s)}))
PY
    if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
      (cd peers && timeout "$t" python3 torch_bench.py --model "$model" --device cuda) | tail -1 | tee -a "$out"
    fi
    rm -rf "$run"
  done
  ;;
*)
  sed -n '2,16p' "$0"
  exit 2
  ;;
esac
