#!/usr/bin/env bash
# multi_worker_mirrored on this machine: 1 vs 2 MPI processes training the Fashion-MNIST MLP.
#
#   bench/mpi.sh [epochs]    # default 3; needs OpenMPI and Fashion-MNIST (scripts/setup.sh)
#
# Runs, each on the full 60,000 training images at the global batch size 128 of
# bench/configs/mlp.toml (784-512-512-10, AdamW):
#   one_device   kiln train, no mpirun, RAYON_NUM_THREADS = all cores
#   mpi-1        mpirun -np 1 kiln train --strategy multi_worker_mirrored (all cores): the
#                strategy's own overhead (packing the gradients, a one-process all-reduce)
#   mpi-2        mpirun -np 2 ... (cores / 2 threads each: the same cores, split between
#                processes; each computes 64 of every 128 examples)
# and reports training samples/s (mean of epochs 2.., the first has warm-up) and the share of
# the training time spent communicating (the all-reduce, packing and unpacking, and waiting
# for the other worker: history.json's communication_seconds / train_seconds), plus the
# epoch's step-time diagnosis line. A last run gives the same MLP a deliberately tiny step
# (global batch 8: 4 examples per worker, 1,000 steps per epoch) on 2 processes: a Dense
# network's compute per step grows with examples × parameters, its all-reduce with parameters
# only, so its diagnosis should name communication as the bound.
# Then the ring model of `kiln estimate` is checked against the mpi-2 run: the
# MPI_Allreduce latency and bandwidth between two processes are measured alone
# (target/release/examples/allreduce), `kiln estimate --workers 2` projects the step from them
# and from mpi-2's measured compute per step, and the projection is printed beside what
# mpi-2 measured (all-reduce ms per step, samples/s).
# Results are appended to bench/results-mpi.jsonl; bench/README.md keeps the table.
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS=${1:-3}
TARGET=${CARGO_TARGET_DIR:-$HOME/.cache/kiln/target}
K=$TARGET/release/kiln
[ -x "$K" ] && [ -x "$TARGET/release/examples/allreduce" ] ||
  CARGO_TARGET_DIR=$TARGET cargo build --release --workspace --bins --examples
command -v mpirun >/dev/null || { echo "bench/mpi.sh needs mpirun: run scripts/setup.sh" >&2; exit 1; }
# As root (containers, CI) OpenMPI needs these; plain copies in the shared-memory transport
# work where cross-process memory access (CMA) is forbidden.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
CORES=$(nproc)
HALF=$(( CORES > 1 ? CORES / 2 : 1 ))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# summary RUN_DIR -> "samples/s comm_share"
summary() {
  python3 - "$1/history.json" <<'EOF'
import json, sys
h = json.load(open(sys.argv[1]))
sps = h["samples_per_second"][1:] or h["samples_per_second"]
hist = h["history"]
comm = hist.get("communication_seconds", [0.0] * len(h["samples_per_second"]))[1:] or hist.get("communication_seconds", [0.0])
train = hist.get("train_seconds", h["epoch_time_s"])[1:] or hist.get("train_seconds", h["epoch_time_s"])
print(f"{sum(sps) / len(sps):.0f} {sum(comm) / max(sum(train), 1e-9):.3f}")
EOF
}

cfg=bench/configs/mlp.toml
tiny=$work/tiny.toml
cat >"$tiny" <<'TOML'
name = "bench-mpi-tiny-step"
seed = 1
[data]
rescale = 0.00392156862745098
[model]
layers = [
  { type = "Input", shape = [28, 28, 1] },
  { type = "Flatten" },
  { type = "Dense", units = 512, activation = "relu" },
  { type = "Dense", units = 512, activation = "relu" },
  { type = "Dense", units = 10 },
]
[compile]
optimizer = "adamw"
loss = { type = "sparse_categorical_crossentropy", from_logits = true }
metrics = ["accuracy"]
[fit]
epochs = 3
batch_size = 8
steps_per_epoch = 1000
TOML

printf '%-12s %10s %10s %14s\n' run processes samples/s communication
run() { # NAME NP THREADS CONFIG
  local name=$1 np=$2 threads=$3 config=$4 out=$work/$1.out
  local args=(train "$config" --epochs "$EPOCHS" --run-dir "$work/$name" --no-resume)
  if [ "$np" = 0 ]; then
    RAYON_NUM_THREADS=$threads "$K" "${args[@]}" >"$out" 2>&1
  else
    # --bind-to none: OpenMPI binds each process to one core when np <= 2, which would leave
    # mpi-1 a single core (measured: 12,080 against one_device's 16,309 samples/s).
    RAYON_NUM_THREADS=$threads mpirun -np "$np" --oversubscribe --bind-to none -x RAYON_NUM_THREADS \
      "$K" "${args[@]}" --strategy multi_worker_mirrored >"$out" 2>&1
  fi
  read -r sps comm < <(summary "$work/$name")
  printf '%-12s %10s %10s %13.1f%%\n' "$name" "$(( np == 0 ? 1 : np ))" "$sps" "$(awk -v c="$comm" 'BEGIN { print c * 100 }')"
  local line
  line=$(tr '\r' '\n' <"$out" | grep -a 'step time:' | tail -1 | sed 's/^ *//; s/ *$//' || true)
  [ -z "$line" ] || echo "             last epoch: $line"
  printf '{"date":"%s","run":"%s","processes":%s,"threads_per_process":%s,"epochs":%s,"samples_per_second":%s,"communication_share":%s}\n' \
    "$(date -u +%FT%TZ)" "$name" "$(( np == 0 ? 1 : np ))" "$threads" "$EPOCHS" "$sps" "$comm" >>bench/results-mpi.jsonl
}
run one_device 0 "$CORES" "$cfg"
run mpi-1 1 "$CORES" "$cfg"
run mpi-2 2 "$HALF" "$cfg"
run tiny-step-2 2 "$HALF" "$tiny"

# The ring model at N = 2, checked against mpi-2.
echo
echo "ring model check (N = 2):"
mpirun -np 2 --oversubscribe --bind-to none "$TARGET/release/examples/allreduce" 4 2678824 >"$work/allreduce.jsonl"
python3 - "$work/allreduce.jsonl" "$work/mpi-2/history.json" "$K" "$cfg" <<'EOF'
import json, math, subprocess, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
link = next(l for l in lines if l["bytes"] == 2678824)
alpha_us, gbit = link["alpha_s"] * 1e6, link["bandwidth_gbit_s"]
h = json.load(open(sys.argv[2]))["history"]
steps = math.ceil(60000 / 128)
epochs = range(1, len(h["train_seconds"])) or range(len(h["train_seconds"]))
per_step = lambda key: sum(h[key][e] for e in epochs) / (len(epochs) * steps)
train, comm, wait = per_step("train_seconds"), per_step("communication_seconds"), per_step("input_wait_seconds")
slowest, wire = per_step("communication_wait_seconds"), per_step("all_reduce_seconds")
compute = train - comm - wait
measured_sps = 128 / train
# One worker's rate at its 64 examples per step (what the model takes as input).
one = 64 / compute
out = subprocess.run([sys.argv[3], "estimate", sys.argv[4], "--workers", "2",
                      "--bandwidth", f"{gbit:.3f}Gbit", "--latency-us", f"{alpha_us:.3f}",
                      "--samples-per-second", f"{one:.1f}", "--batch-per-worker", "64"],
                     capture_output=True, text=True, check=True).stdout
row = next(l.split() for l in out.splitlines() if l.strip().startswith("2 "))
proj_ms, proj_sps = float(row[3]), float(row[4])
print(f"  MPI_Allreduce alone: alpha {alpha_us:.2f} us, {gbit:.2f} Gbit/s at 2,678,824 bytes ({link['seconds'] * 1e3:.2f} ms)")
print(f"  mpi-2 measured: compute {compute * 1e3:.2f} ms, communication {comm * 1e3:.2f} ms "
      f"(waiting for the other worker {slowest * 1e3:.2f}, MPI_Allreduce {wire * 1e3:.2f}, packing {(comm - slowest - wire) * 1e3:.2f}), "
      f"input wait {wait * 1e3:.2f} ms per step; {measured_sps:.0f} samples/s")
print(f"  kiln estimate --workers 2: all-reduce {proj_ms:.2f} ms per step ({(proj_ms / (wire * 1e3) - 1) * 100:+.1f}% vs the measured MPI_Allreduce), "
      f"{proj_sps:.0f} samples/s ({(proj_sps / measured_sps - 1) * 100:+.1f}% vs measured: the model has no packing or waiting)")
import datetime
with open("bench/results-mpi.jsonl", "a") as f:
    f.write(json.dumps({"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "run": "ring-model-check-2", "alpha_us": round(alpha_us, 3), "bandwidth_gbit_s": gbit,
                        "allreduce_alone_ms": round(link["seconds"] * 1e3, 3),
                        "measured_ms": {"compute": round(compute * 1e3, 3), "communication": round(comm * 1e3, 3),
                                        "wait": round(slowest * 1e3, 3), "all_reduce": round(wire * 1e3, 3)},
                        "measured_samples_per_second": round(measured_sps),
                        "projected_all_reduce_ms": proj_ms, "projected_samples_per_second": proj_sps}) + "\n")
EOF
