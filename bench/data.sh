#!/usr/bin/env bash
# Input-pipeline benchmarks: kiln-data (`kiln data bench`, as a user runs it) against tf.data
# with AUTOTUNE, on three pipelines, same machine, same run:
#   fmnist   Fashion-MNIST IDX -> x/255 -> shuffle(10000) -> batch(128) -> prefetch
#   tfrecord 100k tf.train.Examples (3072-byte raw 32x32x3 image, int64 label) -> parse ->
#            decode_raw -> float32 -> random horizontal flip -> batch(128) -> prefetch
#   jpeg     20k 32x32 RGB JPEGs in class folders -> decode -> resize 64x64 bilinear ->
#            batch(128) -> prefetch
#
#   bench/data.sh [rounds]       # default 2 rounds: kiln, tf.data, kiln, tf.data, ... per pipeline
#
# Each run iterates its pipeline for 3 epochs (fresh iterators) and reports examples/s over
# epochs 2-3: the first, with thread start-up, tracing and a cold page cache, is the warm-up.
# The TFRecord file and the JPEG folder are written once (by TensorFlow) into
# ${KILN_CACHE_DIR:-$HOME/.cache/kiln}/bench-data. The peer runs in bench/.venv (tensorflow-cpu
# 2.21, installed on first use, as bench/run.sh does); KILN_BENCH_PYTHON=/path/to/python uses
# another interpreter that has tensorflow; KILN_BIN=/path/to/kiln skips the build and runs that
# binary.
# Results: bench/results-data.jsonl (one line per run, with kiln's per-stage statistics and
# the machine's load average) and a markdown table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-2}"
EPOCHS=3
scripts/setup.sh >/dev/null
CACHE="${KILN_CACHE_DIR:-$HOME/.cache/kiln}"

if [ -n "${KILN_BENCH_PYTHON:-}" ]; then
  PY="$KILN_BENCH_PYTHON"
else
  VENV=bench/.venv
  if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import tensorflow" 2>/dev/null; then
    echo "bench: installing tensorflow-cpu 2.21, numpy into $VENV (once)"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q "tensorflow-cpu==2.21.*" numpy
  fi
  PY="$VENV/bin/python"
fi
PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"

if [ -n "${KILN_BIN:-}" ]; then
  KILN="$KILN_BIN" # a kiln binary built already (from this checkout)
else
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
  # The whole workspace's feature set, examples included, so Burn is not built a second time.
  cargo build --release -q --workspace --bins --examples
  KILN="$CARGO_TARGET_DIR/release/kiln"
fi

export TF_CPP_MIN_LOG_LEVEL=3
(cd bench/peers && "$PY" tf_data_bench.py prepare --cache "$CACHE")

OUT=bench/results-data.jsonl
: > "$OUT"

kiln_run() {
  local bench=$1 args=()
  # Fashion-MNIST comes from the config's data_dir; the generated data from the cache.
  if [ "$bench" != fmnist ]; then args=(--data-dir "$CACHE/bench-data"); fi
  "$KILN" data bench "bench/configs/data-$bench.toml" "${args[@]}" --epochs "$EPOCHS" --json |
    "$PY" -c '
import json, sys
epochs = [json.loads(l) for l in sys.stdin if l.strip()]
rates = [e["examples_per_second"] for e in epochs]
timed = rates[1:] or rates
print(json.dumps({"framework": "kiln", "bench": sys.argv[1],
                  "examples_per_second": sum(timed) / len(timed),
                  "epoch_examples_per_second": rates,
                  "examples_per_epoch": epochs[-1]["examples"], "epochs_timed": len(timed),
                  "last_epoch_stages": epochs[-1]["stages"]}))' "$bench"
}

with_load() { # appends the 1-minute load average to each JSON line
  "$PY" -c '
import json, sys
load = float(open("/proc/loadavg").read().split()[0])
for l in sys.stdin:
    if l.strip():
        r = json.loads(l); r["load1_after"] = load; print(json.dumps(r))'
}

for round in $(seq "$ROUNDS"); do
  for bench in fmnist tfrecord jpeg; do
    echo "bench: round $round, $bench" >&2
    kiln_run "$bench" | with_load | tee -a "$OUT"
    (cd bench/peers && "$PY" tf_data_bench.py run --bench "$bench" --cache "$CACHE" --epochs "$EPOCHS") |
      tail -1 | with_load | tee -a "$OUT"
  done
done
"$PY" bench/summarize_data.py "$OUT"
