#!/usr/bin/env python3
"""Real `kiln train` runs interrupted and resumed: TensorBoard shows every step once.

    cargo build --release --workspace --bins --examples
    python tests/interop/tensorboard_resume_interop.py --kiln target/release/kiln

Trains a small MLP on 16,384 Fashion-MNIST images (256 batches of 64 per epoch, 3 epochs,
validation every epoch) with a TensorBoard callback writing batch_loss at every batch, in
three scenarios, each in its own run directory:

  sigterm  The first process gets SIGTERM once its epoch-1 checkpoint exists (inside epoch 2);
           it finishes the batch, checkpoints and exits 143. The resume continues where it
           stopped: no step is written twice, the second file's first batch follows the first
           file's last.
  older    A 2-epoch run finishes; its newest checkpoint (after 512 batches) is then damaged,
           so `kiln train --epochs 3` resumes from the epoch-1 checkpoint (256 batches) and
           writes epoch 1, batches 257..512 and their validation point a second time.
  sigkill  Checkpoints every 96 batches; the sixth checkpoint write (after 384 batches, inside
           epoch 2) is held halfway by KILN_TEST_CHECKPOINT_STALL (the test waits for its
           STALLED file) and the process is killed with SIGKILL there: batches 289..384 were
           flushed before that checkpoint (as before every one) but it never got committed,
           so the resume from the one after 288 batches writes them again.

In `older` and `sigkill` the event files do hold steps twice (checked), so the restart marker
kiln writes on resume (a SessionLog START event; see crates/kiln/src/summary/restart.rs) is
what the checks below test. Each scenario is read by the two ways TensorBoard's UI reads a
log directory:
  - plugin_event_multiplexer.EventMultiplexer (TensorBoard's UI with --load_fast=false),
  - the Rust data server (TensorBoard's UI by default) through its gRPC data provider,
and each must show:
  train/epoch_loss, epoch_accuracy: steps 0, 1, 2 once each, equal (float32) to history.json
      (the resumed run's values);
  train/batch_loss: steps 1..768 once each;
  validation/epoch_loss: steps 0, 1, 2 once each, equal to history.json's val_loss;
  validation/evaluation_loss_vs_iterations: steps 256, 512, 768 once each, equal to val_loss.

The older scripting API event_accumulator.EventAccumulator is not one of them: its purge on a
START (`_Purge`) filters only its `accumulated_attrs` (scalars, histograms, images, audio), never
its tensors, and TF2 scalars (Keras' and kiln's) are tensor summaries, so it shows orphans of any
restarted TF2 run, Keras' included. The script checks that it reads every value the files hold
(so the files are whole), nothing more.

Every wait is for an observable event (a checkpoint or STALLED file, a process exit, the data
server's "Finished load cycle" log line), each with a deadline. Exits non-zero on any
mismatch. Needs Fashion-MNIST (scripts/setup.sh) and tensorboard.
"""

import argparse
import glob
import json
import os
import queue
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tensorboard import context  # noqa: E402
from tensorboard.backend.event_processing import event_accumulator as ea  # noqa: E402
from tensorboard.backend.event_processing import plugin_event_accumulator as pea  # noqa: E402
from tensorboard.backend.event_processing import plugin_event_multiplexer as pem  # noqa: E402
from tensorboard.data import grpc_provider, server_ingester  # noqa: E402
from tensorboard.util import grpc_util, tensor_util  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
EPOCHS = 3
BATCHES = 256
DEADLINE_S = 300
CONFIG = """
name = "tb-resume"
seed = 11
[data]
data_dir = "{data}"
[data.train]
source = "idx"
files = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]
components = ["image", "label"]
x = "image"
y = "label"
take = {take}
map = [{{ op = "rescale", scale = 0.00392156862745098, component = "image" }}]
shuffle = {{ buffer_size = 4096, seed = 3 }}
batch_size = 64
[data.validation]
source = "idx"
files = ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
components = ["image", "label"]
x = "image"
y = "label"
take = 512
map = [{{ op = "rescale", scale = 0.00392156862745098, component = "image" }}]
batch_size = 256
[model]
layers = [
  {{ type = "Input", shape = [28, 28, 1] }},
  {{ type = "Flatten" }},
  {{ type = "Dense", units = 64, activation = "relu" }},
  {{ type = "Dense", units = 10 }},
]
[compile]
optimizer = "adamw"
loss = {{ type = "sparse_categorical_crossentropy", from_logits = true }}
metrics = ["accuracy"]
[fit]
epochs = {epochs}
[[callbacks]]
type = "TensorBoard"
update_freq = 1
{extra}
"""

FAILURES = []


def check(condition, what):
    print(f"  {'ok  ' if condition else 'FAIL'} {what}")
    if not condition:
        FAILURES.append(what)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def wait_for(what, condition, process=None):
    """Polls `condition` until it holds; fails when `process` exits first or at the deadline."""
    deadline = time.time() + DEADLINE_S
    while not condition():
        if process is not None and process.poll() is not None:
            raise SystemExit(f"the process exited ({process.returncode}) before {what}")
        if time.time() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.005)


class Run:
    """One run directory and the command that trains it."""

    def __init__(self, kiln, work, name, extra="", epochs=EPOCHS):
        self.dir = os.path.join(work, name)
        self.config = os.path.join(work, f"{name}.toml")
        with open(self.config, "w") as f:
            f.write(CONFIG.format(data=DATA, take=BATCHES * 64, epochs=epochs, extra=extra))
        self.cmd = [kiln, "train", self.config, "--run-dir", self.dir]
        self.logs = os.path.join(self.dir, "logs")

    def start(self, env=None):
        return subprocess.Popen(
            self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})})

    def run(self, *args):
        return subprocess.run(self.cmd + list(args), capture_output=True, text=True)

    def checkpoint(self, iterations):
        return os.path.join(self.dir, "checkpoints", f"ckpt-{iterations:012d}")

    def history(self):
        with open(os.path.join(self.dir, "history.json")) as f:
            return json.load(f)["history"]

    def event_files(self, name):
        return sorted(glob.glob(os.path.join(self.logs, name, "events.out.tfevents.*")))


def written_steps(path, tag):
    """Every value written to the one event file `path` (no restart rule: a file at a time)."""
    acc = ea.EventAccumulator(path, size_guidance={ea.TENSORS: 0}, purge_orphaned_data=False)
    acc.Reload()
    return [e.step for e in acc.Tensors(tag)] if tag in acc.Tags()["tensors"] else []


def read_classic(logs):
    """{run: {tag: [(step, value)]}} with event_accumulator.EventAccumulator per run dir."""
    out = {}
    for run in ["train", "validation"]:
        acc = ea.EventAccumulator(os.path.join(logs, run), size_guidance={ea.TENSORS: 0})
        acc.Reload()
        out[run] = {
            tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
            for tag in acc.Tags()["tensors"] if not tag.endswith("/histogram")
        }
    return out


def read_multiplexer(logs):
    """The same with TensorBoard's UI loader for --load_fast=false."""
    mux = pem.EventMultiplexer(size_guidance={pea.TENSORS: 0})
    mux.AddRunsFromDirectory(logs)
    mux.Reload()
    out = {}
    for run, tags in mux.Runs().items():
        out[run] = {
            tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
                  for e in mux.Tensors(run, tag)]
            for tag in tags["tensors"] if not tag.endswith("/histogram")
        }
    return out


def read_data_server(logs):
    """The same with TensorBoard's data server (--load_fast), through its gRPC provider."""
    binary = server_ingester.get_server_binary()
    with tempfile.TemporaryDirectory() as tmp:
        port_file = os.path.join(tmp, "port")
        server = subprocess.Popen(
            [binary.path, f"--logdir={logs}", "--reload=once", "--samples-per-plugin=scalars=all",
             "--port=0", f"--port-file={port_file}", "--die-after-stdin", "--verbose"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in server.stderr], daemon=True).start()
        deadline = time.time() + DEADLINE_S
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.time()))
            except queue.Empty:
                raise SystemExit("the data server did not finish loading in time")
            if "Finished load cycle" in line:
                break
        with open(port_file) as f:
            addr = f"localhost:{int(f.read())}"
        stub = server_ingester._make_stub(addr, grpc_util.ChannelCredsType.LOCAL)
        provider = grpc_provider.GrpcDataProvider(addr, stub)
        scalars = provider.read_scalars(
            context.RequestContext(), experiment_id="", plugin_name="scalars", downsample=10**6)
        server.stdin.close()
        server.wait(timeout=60)
    return {run: {tag: [(d.step, d.value) for d in data] for tag, data in tags.items()}
            for run, tags in scalars.items()}


def check_classic_holds_files(run):
    """EventAccumulator never purges tensor summaries: it shows each file's values, all of them."""
    shown = read_classic(run.logs)
    for name, tag in [("train", "batch_loss"), ("train", "epoch_loss"), ("validation", "epoch_loss")]:
        held = sorted(s for f in run.event_files(name) for s in written_steps(f, tag))
        got = sorted(s for s, _ in shown.get(name, {}).get(tag, []))
        check(got == held, f"classic: {name}/{tag} = every value of the files ({len(held)}, "
                           f"got {len(got)})")


def check_once(run):
    """Every series shows each step once, with the values of history.json."""
    history = run.history()
    epochs = lambda key: [(e, f32(v)) for e, v in enumerate(history[key])]  # noqa: E731
    iterations = [(BATCHES * (e + 1), f32(v)) for e, v in enumerate(history["val_loss"])]
    check_classic_holds_files(run)
    for reader in [read_multiplexer, read_data_server]:
        shown = reader(run.logs)
        name = reader.__name__.removeprefix("read_")
        series = lambda r, tag: sorted(shown.get(r, {}).get(tag, []))  # noqa: E731
        for tag, key in [("epoch_loss", "loss"), ("epoch_accuracy", "accuracy")]:
            got = series("train", tag)
            check(got == epochs(key), f"{name}: train/{tag} = history.json {key} once each "
                                      f"(got {got})")
        steps = [s for s, _ in series("train", "batch_loss")]
        check(steps == list(range(1, EPOCHS * BATCHES + 1)),
              f"{name}: train/batch_loss steps 1..{EPOCHS * BATCHES} once each (got "
              f"{len(steps)} values, {len(set(steps))} distinct, "
              f"{min(steps, default=None)}..{max(steps, default=None)})")
        got = series("validation", "epoch_loss")
        check(got == epochs("val_loss"), f"{name}: validation/epoch_loss = val_loss (got {got})")
        got = series("validation", "evaluation_loss_vs_iterations")
        check(got == iterations,
              f"{name}: validation/evaluation_loss_vs_iterations at {[s for s, _ in iterations]} "
              f"(got {got})")


def sigterm(kiln, work):
    print("sigterm: SIGTERM inside epoch 2, then resume")
    run = Run(kiln, work, "sigterm")
    first = run.start()
    wait_for("the epoch-1 checkpoint", lambda: os.path.isdir(run.checkpoint(BATCHES)), first)
    first.send_signal(signal.SIGTERM)
    err = first.communicate()[1]
    check(first.returncode == 143, f"SIGTERM: exit 143 (got {first.returncode})\n{err}")
    second = run.run()
    check(second.returncode == 0, f"the resume finishes (exit {second.returncode})\n{second.stderr}")
    check("Resuming from" in second.stderr, "the second run resumed")
    files = run.event_files("train")
    check(len(files) == 2, f"train: one event file per process (got {len(files)})")
    if len(files) == 2:
        a, b = written_steps(files[0], "batch_loss"), written_steps(files[1], "batch_loss")
        check(a and b and min(b) == max(a) + 1 and BATCHES < max(a) < EPOCHS * BATCHES,
              f"stopped inside training at batch {max(a) if a else None}; resumed at "
              f"{min(b) if b else None}")
    check_once(run)


def older(kiln, work):
    print("older: a 2-epoch run whose newest checkpoint is damaged, resumed to 3 epochs")
    run = Run(kiln, work, "older", epochs=2)
    first = run.run()
    check(first.returncode == 0, f"2 epochs (exit {first.returncode})\n{first.stderr}")
    model = os.path.join(run.checkpoint(2 * BATCHES), "model.bpk")
    with open(model, "r+b") as f:
        byte = f.read(1)
        f.seek(0)
        f.write(bytes([byte[0] ^ 0xFF]))
    second = run.run("--epochs", str(EPOCHS))
    check(second.returncode == 0, f"the resume finishes (exit {second.returncode})\n{second.stderr}")
    check(f"Resuming from {run.checkpoint(BATCHES)}" in second.stderr,
          f"resumed from the epoch-1 checkpoint\n{second.stderr}")
    written = sum((written_steps(f, "epoch_loss") for f in run.event_files("train")), [])
    check(sorted(written) == [0, 1, 1, 2], f"the files hold epoch 1 twice (got {sorted(written)})")
    check_once(run)


def sigkill(kiln, work):
    print("sigkill: SIGKILL inside a checkpoint write in epoch 2, then resume")
    run = Run(kiln, work, "sigkill", extra='[[callbacks]]\ntype = "BackupAndRestore"\nsave_freq = 96\n')
    # Writes: the start, 96, 192, 256 (epoch end), 288, 384 <- held halfway.
    first = run.start({"KILN_TEST_CHECKPOINT_STALL": "6"})
    stalled = lambda: glob.glob(os.path.join(run.dir, "checkpoints", ".tmp-ckpt-*", "STALLED"))  # noqa: E731
    wait_for("the stalled checkpoint write", stalled, first)
    check("ckpt-000000000384" in stalled()[0], f"held at the checkpoint after 384 batches ({stalled()})")
    first.send_signal(signal.SIGKILL)
    first.communicate()
    second = run.run()
    check(second.returncode == 0, f"the resume finishes (exit {second.returncode})\n{second.stderr}")
    check(f"Resuming from {run.checkpoint(288)}" in second.stderr,
          f"resumed from the checkpoint after 288 batches\n{second.stderr}")
    written = sum((written_steps(f, "batch_loss") for f in run.event_files("train")), [])
    twice = sorted({s for s in written if written.count(s) > 1})
    check(twice == list(range(289, 385)), f"the files hold batches 289..384 twice (got "
                                          f"{twice[:1]}..{twice[-1:]}, {len(twice)} steps)")
    check_once(run)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True, help="path to the kiln binary")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="kiln-tb-resume-")
    print(f"run dirs in {work}")
    for scenario in [sigterm, older, sigkill]:
        scenario(args.kiln, work)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
