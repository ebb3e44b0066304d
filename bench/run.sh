#!/usr/bin/env bash
# Side-by-side training benchmark on Fashion-MNIST: kiln (`kiln train`, as a user runs it),
# TensorFlow/Keras (model.fit + tf.data AUTOTUNE), PyTorch (plain loop) and a raw Burn loop,
# on the same models (bench/configs/*.toml), batch 128, AdamW: the MLP and the CNN on all 60,000
# training images, resnet-small, the LSTM and the Transformer encoder on the first 15,360 (120 batches an epoch).
#
#   bench/run.sh [rounds]        # default 2 rounds: A B C D A B C D ... so drift hits all alike
#
# BENCH_MODELS (default "mlp cnn resnet-small lstm transformer") picks the models; BENCH_PRECISIONS (default
# "float32") the dtype policies, e.g. "float32 mixed_bfloat16" (Keras' policy, PyTorch's
# autocast to bfloat16). The raw Burn loop has the MLP and the CNN only.
#
# Installs the peers (tensorflow-cpu 2.21, torch, numpy) in bench/.venv on first use. Each run
# trains 3 epochs and reports samples/s over epochs 2-3 (the first, with warm-up, is excluded).
# Results: bench/results.jsonl (one line per run; each invocation starts the file over, so name
# another with BENCH_OUT=bench/results-NAME.jsonl to keep an earlier one) and a markdown table on
# stdout. On AVX-512 machines kiln also runs with each forced path of BENCH_FORCED_PATHS (default
# "avx512 avx2"; "" runs the default path only).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-2}"
EPOCHS=3
scripts/setup.sh >/dev/null

# BENCH_VENV: an existing virtual environment with the peers (skips the install).
VENV="${BENCH_VENV:-bench/.venv}"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import tensorflow, torch" 2>/dev/null; then
  if [ -z "${BENCH_VENV:-}" ]; then
    echo "bench: installing tensorflow-cpu 2.21, torch, numpy into $VENV (once)"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q "tensorflow-cpu==2.21.*" torch numpy
  fi
fi
PY="$(cd "$VENV" && pwd)/bin/python"
HAS_TORCH=1
if ! "$PY" -c "import torch" 2>/dev/null; then
  HAS_TORCH=0
  echo "bench: torch is not importable in $VENV: the PyTorch rows are left out" >&2
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${KILN_CACHE_DIR:-$HOME/.cache/kiln}/target}"
# The whole workspace's feature set, examples included (as `cargo test --workspace` builds it,
# dev-dependencies and all), so Burn is not built a second time with other features.
cargo build --release -q --workspace --bins --examples
KILN="$CARGO_TARGET_DIR/release/kiln"
RAW="$CARGO_TARGET_DIR/release/kiln-bench-raw-burn"

OUT="${BENCH_OUT:-bench/results.jsonl}"
: > "$OUT"
export TF_CPP_MIN_LOG_LEVEL=3
"$PY" bench/peers/gemm.py | tee -a "$OUT"

# The machine: a ratio holds for one CPU kind (AVX2-only and AVX-512 machines both run here).
"$PY" - <<'PYEOF' | tee -a "$OUT"
import json
info = dict(l.split(":", 1) for l in open("/proc/cpuinfo").read().split("\n\n")[0].splitlines() if ":" in l)
flags = sorted(f for f in info.get("flags\t\t", "").split() if f.startswith(("avx", "fma", "amx")))
print(json.dumps({"cpu_model": info.get("model name\t", "?").strip(), "cpu_flags": flags}))
PYEOF

# kiln_run MODEL PRECISION [PATH]: kiln with the kernels the CPU prefers (framework "kiln"), or
# with KILN_CPU_PATH=PATH (framework "kiln-PATH": avx2 or avx512).
kiln_run() {
  local model=$1 precision=$2 path=${3:-} framework=kiln dir
  dir=$(mktemp -d)
  if [ -n "$path" ]; then framework="kiln-$path"; fi
  KILN_CPU_PATH="$path" "$KILN" train "bench/configs/$model.toml" --epochs "$EPOCHS" \
    --precision "$precision" --run-dir "$dir" >/dev/null
  "$PY" - "$dir/history.json" "$model" "$framework" "$precision" <<'PYEOF'
import json, sys
h = json.load(open(sys.argv[1]))
sps = h["samples_per_second"][1:]
print(json.dumps({"framework": sys.argv[3], "model": sys.argv[2], "precision": sys.argv[4],
                  "samples_per_second": sum(sps) / len(sps), "epochs_timed": len(sps)}))
PYEOF
  rm -rf "$dir"
}

# peer_run SCRIPT MODEL PRECISION: a peer's script on the same images as the model's config.
peer_run() {
  local take=()
  case $2 in resnet-small | lstm | transformer) take=(--take 15360) ;; esac
  (cd bench/peers && "$PY" "$1" --model "$2" --precision "$3" --epochs "$EPOCHS" "${take[@]}" 2>/dev/null) | tail -1
}

for round in $(seq "$ROUNDS"); do
  for model in ${BENCH_MODELS:-mlp cnn resnet-small lstm transformer}; do
    for precision in ${BENCH_PRECISIONS:-float32}; do
      echo "bench: round $round, $model, $precision" >&2
      kiln_run "$model" "$precision" | tee -a "$OUT"
      # On AVX-512 machines both forced paths too (the default is one of them, by CPU kind).
      if grep -q avx512f /proc/cpuinfo; then
        for path in ${BENCH_FORCED_PATHS-avx512 avx2}; do
          kiln_run "$model" "$precision" "$path" | tee -a "$OUT"
        done
      fi
      peer_run tf_bench.py "$model" "$precision" | tee -a "$OUT"
      if [ "$HAS_TORCH" = 1 ]; then
        peer_run torch_bench.py "$model" "$precision" | tee -a "$OUT"
      fi
      if [ "$precision" = float32 ] && { [ "$model" = mlp ] || [ "$model" = cnn ]; }; then
        "$RAW" "$model" "$EPOCHS" | tee -a "$OUT"
      fi
    done
  done
done
"$PY" bench/summarize.py "$OUT"
