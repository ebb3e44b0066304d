#!/usr/bin/env bash
# Serving benchmark: wrk (Debian's) against `kiln serve` on loopback, on the Fashion-MNIST CNN
# (bench/configs/cnn.toml; weights from a short training run, which does not change the
# speed). One request = one 28x28x1 image in TF Serving's row format. For batching off and on,
# and 1, 8 and 64 connections: requests/s and p50/p99 latency. The floor: onnxruntime's raw
# inference time per batch on the same exported model (bench/peers/ort_floor.py).
#
#   bench/serve.sh [seconds per run]     # default 20
#
# Installs wrk (apt) and onnxruntime (bench/.venv-serve) if missing. Results:
# bench/results-serve.jsonl (one line per run) and a markdown table on stdout. Run it on an
# idle machine: the server and wrk share the CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN="${1:-20}"
scripts/setup.sh >/dev/null

if ! command -v wrk >/dev/null; then
  echo "bench: installing wrk (Debian package)"
  SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q wrk >/dev/null
fi
VENV=bench/.venv-serve
if ! "$VENV/bin/python" -c "import onnxruntime, numpy" 2>/dev/null; then
  echo "bench: installing onnxruntime, numpy into $VENV (once)"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q onnxruntime numpy
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${KILN_CACHE_DIR:-$HOME/.cache/kiln}/target}"
cargo build --release -q --workspace --bins --examples
KILN="$CARGO_TARGET_DIR/release/kiln"

WORK=$(mktemp -d)
SERVER_PID=""
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

# The CNN, trained briefly (serving speed does not depend on the weights' values).
sed 's/^epochs = 3$/epochs = 1\nsteps_per_epoch = 20/' bench/configs/cnn.toml > "$WORK/cnn.toml"
"$KILN" train "$WORK/cnn.toml" --run-dir "$WORK/run" > "$WORK/train.log"
"$KILN" export "$WORK/run" --out "$WORK/exports" > /dev/null
MODEL=bench-cnn
BASE="$WORK/exports/$MODEL"

# One test image as the request body, and wrk's script (POST it, report JSON at the end).
python3 - "$WORK/body.json" <<'PY'
import gzip, json, sys
d = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()[16:16 + 784]
json.dump({"instances": [[[[b / 255] for b in d[r * 28:r * 28 + 28]] for r in range(28)]]},
          open(sys.argv[1], "w"))
PY
cat > "$WORK/post.lua" <<LUA
local f = io.open("$WORK/body.json", "rb"); local body = f:read("*a"); f:close()
wrk.method = "POST"; wrk.body = body; wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests": %d, "duration_s": %.3f, "errors": %d, "non_2xx": %d, "p50_ms": %.3f, "p99_ms": %.3f}\n',
    summary.requests, summary.duration / 1e6, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
LUA
printf 'max_batch_size { value: 64 }\nbatch_timeout_micros { value: 0 }\nmax_enqueued_batches { value: 1000 }\nnum_batch_threads { value: 1 }\n' > "$WORK/batching.txt"

OUT=bench/results-serve.jsonl
: > "$OUT"
"$VENV/bin/python" bench/peers/ort_floor.py "$BASE/1/model.onnx" | tee -a "$OUT"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for batching in off on; do
  extra=()
  if [ "$batching" = on ]; then extra=(--batching-parameters-file "$WORK/batching.txt"); fi
  "$KILN" serve --model-name "$MODEL" --model-base-path "$BASE" --rest-api-port "$PORT" \
    --max-enqueued-requests 100000 "${extra[@]}" > "$WORK/serve-$batching.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null && break
    sleep 0.1
  done
  # Warm-up.
  wrk -t 2 -c 8 -d 2s -s "$WORK/post.lua" "http://127.0.0.1:$PORT/v1/models/$MODEL:predict" >/dev/null
  for c in 1 8 64; do
    t=$(( c < 4 ? c : 4 ))
    line=$(wrk -t "$t" -c "$c" -d "${SECONDS_PER_RUN}s" --timeout 10s -s "$WORK/post.lua" \
      "http://127.0.0.1:$PORT/v1/models/$MODEL:predict" | tail -n 1)
    echo "{\"peer\": \"kiln serve\", \"batching\": \"$batching\", \"connections\": $c, ${line#\{}" | tee -a "$OUT"
  done
  kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true; SERVER_PID=""
done

python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\n| batching | connections | requests/s | p50 ms | p99 ms | errors |")
print("|---|---|---|---|---|---|")
rps = {}
for r in rows:
    if r["peer"] != "kiln serve":
        continue
    v = r["requests"] / r["duration_s"]
    rps[(r["batching"], r["connections"])] = v
    print(f"| {r['batching']} | {r['connections']} | {v:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['errors'] + r['non_2xx']} |")
print("\n| onnxruntime batch | ms per batch | examples/s |")
print("|---|---|---|")
for r in rows:
    if r["peer"] == "onnxruntime":
        print(f"| {r['batch']} | {r['median_ms_per_batch']:.3f} | {r['examples_per_s']:,.0f} |")
if ("on", 64) in rps and ("off", 64) in rps:
    print(f"\nbatching at 64 connections: {rps[('on', 64)] / rps[('off', 64)]:.2f}x the requests/s without")
PY
