#!/usr/bin/env bash
# GPU check and benchmark, in two steps (the GPU machine may have no network and no Rust):
#
#   bench/gpu.sh bundle [cuda|vulkan]  # here: build kiln with that GPU feature (default cuda),
#                                      # pack bench/gpu-bundle/ (binary, data, configs, peers)
#   bench/gpu.sh run [DIR]             # on a Linux machine with an NVIDIA GPU, from the
#                                      # bundle (DIR, default: the script's folder)
#
# `run`, in this order, each step under its own timeout and all under one deadline:
#  1. what the machine has: the card, the driver, NVRTC and the CUDA headers it finds;
#  2. warm-up: every kiln run below trains one epoch, all at once, so that cubecl compiles
#     (NVRTC) and tunes their kernels on all the machine's cores in parallel, each model and
#     precision into its own cubecl environment (CUBECL_ENVIRONMENT, one database file each);
#  3. speed, one run at a time: the CNN, resnet-small, the Transformer and the MLP, 2 epochs,
#     samples/s of the second, on kiln and on PyTorch eager on CUDA (when `python3 -c "import
#     torch"` works there), each in float32, mixed_float16 (PyTorch: float16 autocast and a
#     GradScaler) and, on CUDA, mixed_bfloat16 (PyTorch: bfloat16 autocast); the peak GPU
#     memory nvidia-smi saw during each run (sampled every 100 ms, minus the idle reading);
#  4. an out-of-memory retry: resnet-small with three times the channels on all 60,000 images in
#     one batch, which does not fit the card's memory in one piece; kiln must split the batch and
#     go on;
#  5. correctness: each of the CNN and the MLP is trained one epoch on the CPU, then those same
#     weights are evaluated on the CPU and on the GPU (test loss within 1e-3 relative, accuracy
#     within 0.1 point); then one epoch from the same seed on the GPU, whose loss is put beside
#     the CPU's (reported, not a pass/fail: float sums differ in order).
# Results: results-gpu.jsonl in DIR, one JSON object a line; logs under DIR/logs/; the kernel
# cache as cubecl-cache.tgz (copy it to bench/gpu-cache/ here: the next bundle starts from it).
#
# KILN_GPU_PARTS (default "warm speed oom checks") picks parts 2-5 by name, KILN_GPU_MODELS and
# KILN_GPU_PRECISIONS the models and precisions of parts 2-3 (default: all); KILN_GPU_CACHE_DIR
# (default DIR/cubecl-cache) is where cubecl keeps its kernels. KILN_GPU_WARM_TIMEOUT (default
# 200) limits each warm-up run, KILN_GPU_STEP_TIMEOUT (default
# 240) each later step and KILN_GPU_DEADLINE (default 540) the
# whole run, in seconds, so a stuck driver cannot hold the machine; steps past the deadline are
# reported as skipped. Not run in CI (no GPU). Record numbers in bench/README.md.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

bundle() {
  local backend="${1:-cuda}"
  cd "$here/.."
  local out="$here/gpu-bundle" bin
  if [ -n "${KILN_BIN:-}" ]; then
    bin="$KILN_BIN" # a binary already built with --features $backend
  else
    export CARGO_TARGET_DIR="${KILN_CACHE_DIR:-$HOME/.cache/kiln}/target-$backend"
    cargo build --release -p kiln-cli --features "$backend" || exit 1
    bin="$CARGO_TARGET_DIR/release/kiln"
  fi
  rm -rf "$out" && mkdir -p "$out/data" "$out/configs" "$out/peers" "$out/lib"
  # Stripped and xz-compressed (about 157 MB -> 24 MB), so the bundle fits small transfer
  # limits; `run` unpacks it. The data too (xz packs the images 15% smaller than gzip).
  strip -o "$out/kiln" "$bin" && xz -T0 -9 "$out/kiln"
  for f in /usr/share/datasets/fashion-mnist/*.gz; do
    zcat "$f" | xz -T0 -9 >"$out/data/$(basename "$f" .gz).xz"
  done
  cp bench/configs/{mlp,cnn,resnet-small,transformer}.toml "$out/configs/"
  cp bench/peers/torch_bench.py bench/peers/fashion_mnist.py "$out/peers/"
  cp "$0" "$out/gpu.sh"
  # The shared libraries kiln links that a CUDA machine's image may lack (OpenMPI's, for
  # multi_worker_mirrored), and the Vulkan loader.
  ldd "$bin" | awk '/=> \// {print $3}' | grep -Ev '/lib(c|m|gcc_s|pthread|dl|rt)\.so' |
    xargs -r cp -L -t "$out/lib/"
  cp -L /usr/lib/x86_64-linux-gnu/libvulkan.so.1 "$out/lib/" 2>/dev/null || true
  cp bench/gpu-cache/cubecl-cache.tgz "$out/gpu-cache.tgz" 2>/dev/null || true
  echo "$backend" >"$out/backend"
  echo "$(git rev-parse --short HEAD)${KILN_BIN:+ (binary: $KILN_BIN)}" >"$out/commit"
  echo "bundle: $out ($(du -sh "$out" | cut -f1)); on the GPU machine: gpu.sh run"
}

# --- run -----------------------------------------------------------------------------------

# The first existing folder among the arguments.
first_dir() { for d in "$@"; do [ -d "$d" ] && { echo "$d"; return; }; done; }

# LD_LIBRARY_PATH and CUDA_PATH for the driver, NVRTC and the headers, wherever this machine
# keeps them (the toolkit's folder, or pip's nvidia-* wheels beside PyTorch); VK_DRIVER_FILES.
cuda_env() {
  local py nv
  py=$(python3 -c "import site; print(' '.join(site.getsitepackages()))" 2>/dev/null)
  for p in $py; do [ -d "$p/nvidia" ] && nv="$p/nvidia"; done
  local libs=(/usr/local/nvidia/lib64 /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
  [ -n "${nv:-}" ] && libs+=("$nv"/cuda_nvrtc/lib "$nv"/cu13/lib "$nv"/cuda_runtime/lib)
  local joined
  # The bundle's own libraries last: the machine's take precedence.
  joined=$(printf '%s:' "${libs[@]}")
  export LD_LIBRARY_PATH="${joined%:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:$dir/lib"
  # Vulkan: the NVIDIA driver's ICD where the loader does not find it by itself.
  local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ] && export VK_DRIVER_FILES="$icd"
  if [ -z "${CUDA_PATH:-}" ]; then
    for inc in /usr/local/cuda/include /usr/local/cuda/targets/x86_64-linux/include \
      ${nv:+"$nv"/cu13/include "$nv"/cuda_runtime/include}; do
      if [ -f "$inc/cuda_fp16.h" ]; then export CUDA_PATH="${inc%/include}"; break; fi
    done
  fi
}

# Emits one JSON line to the results file.
emit() { echo "$1" | tee -a "$results"; }

# `step NAME SECONDS CMD...`: runs CMD with its output in logs/NAME.log under the smaller of
# SECONDS and the time left; records a failure, a timeout or a skip past the deadline.
step() {
  local name="$1" limit="$2"
  shift 2
  local left=$((deadline - $(date +%s)))
  if [ "$left" -lt 15 ]; then
    emit "{\"step\": \"$name\", \"status\": \"skipped: deadline\"}"
    return 1
  fi
  [ "$left" -lt "$limit" ] && limit="$left"
  local t0 rc
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" >"$dir/logs/$name.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    emit "{\"step\": \"$name\", \"status\": \"failed rc=$rc\", \"seconds\": $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')}"
    tail -5 "$dir/logs/$name.log" | sed 's/^/    /'
  fi
  return $rc
}

# Waits (up to 60 s) until no process holds the GPU.
gpu_idle() {
  local i
  for i in $(seq 60); do
    [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null)" ] && return
    sleep 1
  done
}

# `measured NAME CMD...`: `step` with nvidia-smi sampling the GPU's used memory every 100 ms;
# leaves the peak, minus the reading before the start, in $peak_mib.
measured() {
  local name="$1"
  shift
  local base
  base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$dir/logs/$name.mem" &
  local sampler=$!
  step "$name" "$step_timeout" "$@"
  local rc=$?
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  peak_mib=$(sort -n "$dir/logs/$name.mem" | tail -1)
  peak_mib=$((${peak_mib:-0} - ${base:-0}))
  return $rc
}

# Samples/s of epochs 2.. and the first epoch's loss from a kiln run directory.
kiln_result() {
  python3 - "$1/history.json" "$2" "$3" "$4" "$5" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))
s = h["samples_per_second"][1:] or h["samples_per_second"]
print(json.dumps({"framework": "kiln", "backend": sys.argv[2], "model": sys.argv[3], "precision": sys.argv[4],
                  "samples_per_second": sum(s) / len(s), "epochs_timed": len(s), "steps_per_execution": 32,
                  "first_epoch_loss": h["history"]["loss"][0], "peak_gpu_mib": int(sys.argv[5])}))
PY
}

check_against_cpu() {
  local model="$1" run="$dir/runs/check-$model"
  step "cpu-train-$model" "$step_timeout" ./kiln train "configs/$model.toml" --epochs 1 --device cpu \
    --data-dir "$data" --run-dir "$run" || return
  step "cpu-eval-$model" "$step_timeout" ./kiln evaluate "$run" --json --device cpu --data-dir "$data" || return
  step "gpu-eval-$model" "$step_timeout" ./kiln evaluate "$run" --json --device gpu --data-dir "$data" || return
  python3 - "$model" "$dir/logs/cpu-eval-$model.log" "$dir/logs/gpu-eval-$model.log" <<'PY' | tee -a "$results"
import json, sys
last = lambda f: json.loads([l for l in open(f) if l.startswith("{")][-1])
m, c, g = sys.argv[1], last(sys.argv[2]), last(sys.argv[3])
ok = abs(c["loss"] - g["loss"]) <= 1e-3 * abs(c["loss"]) and abs(c["accuracy"] - g["accuracy"]) <= 1e-3
print(json.dumps({"check": "gpu_vs_cpu_evaluate", "model": m, "cpu": c, "gpu": g, "ok": ok}))
PY
  local cpu_loss
  cpu_loss=$(python3 -c "import json; print(json.load(open('$run/history.json'))['history']['loss'][0])")
  step "gpu-train1-$model" "$step_timeout" ./kiln train "configs/$model.toml" --epochs 1 --device gpu \
    --data-dir "$data" --run-dir "$dir/runs/train1-$model" || return
  python3 - "$model" "$cpu_loss" "$dir/runs/train1-$model/history.json" <<'PY' | tee -a "$results"
import json, sys
c, g = float(sys.argv[2]), json.load(open(sys.argv[3]))["history"]["loss"][0]
print(json.dumps({"check": "gpu_vs_cpu_first_epoch_loss", "model": sys.argv[1], "cpu": c, "gpu": g,
                  "relative_difference": abs(c - g) / abs(c)}))
PY
}

# Reads of the loss every 32 steps (Keras' compile(steps_per_execution=32)), not every step:
# the PyTorch loop reads once an epoch. mixed_float16 still reads each step (its loss scale).
gpu_config() {
  sed 's/^\[compile\]$/[compile]\nsteps_per_execution = 32/' "configs/$1.toml" >"configs/gpu-$1.toml"
}

# `warm_kiln MODEL PRECISION`: one epoch in the background, to compile (NVRTC) and tune the
# kernels that model needs into its own cubecl environment (one database file per model and
# precision, so that runs at the same time never share one); the timed run reuses it.
warm_kiln() {
  local model="$1" precision="$2"
  gpu_config "$model"
  CUBECL_ENVIRONMENT="kiln-$model-$precision" timeout -k 5 "$warm_timeout" ./kiln train \
    "configs/gpu-$model.toml" --epochs 1 --device gpu --precision "$precision" --no-resume \
    --data-dir "$data" --run-dir "$dir/runs/warm-$model-$precision" >"$dir/logs/warm-$model-$precision.log" 2>&1
  echo "{\"step\": \"warm-$model-$precision\", \"rc\": $?, \"seconds\": $(($(date +%s) - warm_start))}" >>"$results"
}

bench_kiln() {
  local model="$1" precision="$2" run="$dir/runs/bench-$1-$2"
  gpu_config "$model"
  # Two epochs: the kernels are warm (above), so both are timed the same way; samples/s of
  # the second, as PyTorch's below.
  CUBECL_ENVIRONMENT="kiln-$model-$precision" measured "kiln-$model-$precision" ./kiln train \
    "configs/gpu-$model.toml" --epochs 2 --device gpu --precision "$precision" --no-resume \
    --data-dir "$data" --run-dir "$run" || return
  kiln_result "$run" "$backend" "$model" "$precision" "$peak_mib" | tee -a "$results"
}

bench_torch() {
  local model="$1" precision="$2"
  measured "torch-$model-$precision" python3 peers/torch_bench.py --model "$model" --device cuda \
    --epochs 2 --precision "$precision" ${3:+--take "$3"} || return
  tail -1 "$dir/logs/torch-$model-$precision.log" |
    python3 -c "import json,sys; r=json.load(sys.stdin); r['peak_gpu_mib']=$peak_mib; print(json.dumps(r))" |
    tee -a "$results"
}

oom_retry() {
  # Three times the channels (96 and 192), so that one batch of 60,000 needs about 270 GB.
  sed -e 's/^take = 15360/take = 60000/' -e 's/filters = 32,/filters = 96,/' -e 's/filters = 64,/filters = 192,/' -e 's/buffer_size = 15360/buffer_size = 60000/' \
    -e 's/^batch_size = 128/batch_size = 60000/' configs/resnet-small.toml >configs/oom.toml
  CUBECL_ENVIRONMENT=kiln-oom measured "kiln-oom-retry" ./kiln train configs/oom.toml --epochs 1 --device gpu --no-resume \
    --data-dir "$data" --run-dir "$dir/runs/oom"
  local rc=$?
  [ -f "$dir/logs/kiln-oom-retry.log" ] || return
  python3 - "$rc" "$dir/logs/kiln-oom-retry.log" "$peak_mib" <<'PY' | tee -a "$results"
import json, sys
log = open(sys.argv[2], errors="replace").read().splitlines()
said = [l for l in log if "memory" in l.lower()][:5]
print(json.dumps({"check": "out_of_memory_retry", "rc": int(sys.argv[1]), "memory_lines": said,
                  "peak_gpu_mib": int(sys.argv[3])}))
PY
}

run() {
  dir="$(cd "${1:-$here}" && pwd)"
  cd "$dir" || exit 1
  [ -x ./kiln ] || { xz -dk ./kiln.xz && chmod +x ./kiln; } || exit 1
  data="$dir/data"
  for f in data/*.xz; do [ -f "${f%.xz}.gz" ] || xz -dc "$f" | gzip -1 >"${f%.xz}.gz"; done
  # cubecl compiles (NVRTC) and autotunes each kernel on first use and keeps the result in its
  # cache: on the H200 that first use cost 150 s for the CNN alone. Keep the cache here, and
  # start from the last run's when the bundle brought one.
  local cache="${KILN_GPU_CACHE_DIR:-$dir/cubecl-cache}"
  printf '[environment]\npath = { directory = "%s" }\n' "$cache" >cubecl.toml
  [ -f gpu-cache.tgz ] && [ ! -d "$cache" ] && mkdir -p "$cache" && tar xzf gpu-cache.tgz -C "$cache" --strip-components=1
  export KILN_DATA_DIR="$data"
  backend=$(cat backend 2>/dev/null || echo vulkan)
  step_timeout="${KILN_GPU_STEP_TIMEOUT:-240}"
  deadline=$(($(date +%s) + ${KILN_GPU_DEADLINE:-540}))
  results="$dir/results-gpu.jsonl"
  mkdir -p logs runs && : >"$results"
  cuda_env
  { ldconfig -p | grep -E 'libcuda|nvrtc'; ls -d /usr/local/cuda* "${CUDA_PATH:-/nonexistent}/include/cuda_fp16.h"; } >logs/env.log 2>&1
  emit "$(python3 - "$backend" "$(cat commit 2>/dev/null)" <<'PY'
import json, os, subprocess, sys
q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                   capture_output=True, text=True).stdout.strip()
try:
    import torch
    t = torch.__version__
except Exception as e:
    t = f"not importable: {e}"
print(json.dumps({"gpu": q, "backend": sys.argv[1], "kiln_commit": sys.argv[2], "torch": t,
                  "cpu_count": os.cpu_count(), "CUDA_PATH": os.environ.get("CUDA_PATH"),
                  "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH")}))
PY
)"
  local torch_ok= model precision take
  python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null && torch_ok=1
  local precisions="float32 mixed_float16"
  # bfloat16 arithmetic exists on CUDA; Vulkan has none (kiln would only emulate it there).
  [ "$backend" = cuda ] && precisions+=" mixed_bfloat16"
  precisions="${KILN_GPU_PRECISIONS:-$precisions}"
  local models="${KILN_GPU_MODELS:-cnn resnet-small transformer mlp}"
  # 1. Every kiln run's first epoch at once (the machine's cores compile in parallel); the
  #    tuning measurements then share the GPU, so a tuned choice may be a worse one.
  # KILN_GPU_PARTS picks the parts (all by default), e.g. "oom checks" for a second call.
  local parts=" ${KILN_GPU_PARTS:-warm speed oom checks} "
  if [[ "$parts" == *" warm "* ]]; then
    warm_timeout="${KILN_GPU_WARM_TIMEOUT:-200}"
    warm_start=$(date +%s)
    for precision in $precisions; do
      for model in $models; do warm_kiln "$model" "$precision" & done
    done
    wait
    emit "{\"step\": \"warm\", \"seconds\": $(($(date +%s) - warm_start))}"
    # Killed warm-ups release their memory some seconds later; the first measured run's idle
    # reading must not count it (on 2026-12-04 it read 6,394 MiB of theirs).
    gpu_idle
  fi
  # 2. Speed, one run at a time: the models of the acceptance first, the MLP last.
  [[ "$parts" == *" speed "* ]] && for model in $models; do
    for precision in $precisions; do
      take=
      [ "$model" = resnet-small ] || [ "$model" = transformer ] && take=15360
      bench_kiln "$model" "$precision"
      [ -n "$torch_ok" ] && bench_torch "$model" "$precision" "$take"
    done
  done
  [[ "$parts" == *" oom "* ]] && oom_retry
  # 3. The GPU's answers against the CPU's (float32's kernels are warm).
  [[ "$parts" == *" checks "* ]] && for model in cnn mlp; do
    CUBECL_ENVIRONMENT="kiln-$model-float32" check_against_cpu "$model"
  done
  # The compiled and tuned kernels, for the next run on such a machine (`bundle` takes
  # bench/gpu-cache/cubecl-cache.tgz along when it exists).
  tar czf cubecl-cache.tgz -C "$(dirname "$cache")" "$(basename "$cache")" 2>/dev/null && ls -la cubecl-cache.tgz
  echo "done: $results"
}

case "${1:-}" in
bundle) bundle "${2:-cuda}" ;;
run) run "${2:-}" ;;
*)
  sed -n '2,25p' "$0"
  exit 2
  ;;
esac
