#!/usr/bin/env python3
"""A real `kiln train` stopped with SIGTERM and resumed: TensorBoard's step axis continues.

    cargo build --release --workspace --bins --examples
    python tests/interop/tensorboard_resume_interop.py --kiln target/release/kiln

Trains a small MLP on 32,768 Fashion-MNIST images (512 batches of 64 per epoch, 3 epochs: an
epoch long enough that a signal sent 50 ms after the epoch-1 checkpoint lands inside epoch 2
on a fast machine too; with 64 batches a whole epoch once passed first) with a
TensorBoard callback (update_freq = 1: batch_loss at every batch). The first process is sent
SIGTERM after its epoch-1 checkpoint, inside epoch 2; it finishes the batch, checkpoints and
exits 143. The same command then resumes the run to the end. With tensorboard's
EventAccumulator over each run directory (both processes' event files), checks:
  (a) two event files per run (one per process), each opening with brain.Event:2;
  (b) train/epoch_loss and epoch_accuracy have steps 0, 1, 2, each once, with the values of
      history.json (float32);
  (c) train/batch_loss has steps 1..192 (Keras' global batch count), each once: the resumed
      process starts where the stopped one ended, and the second file's first step is the
      first one's last step + 1;
  (d) validation/epoch_loss has steps 0, 1, 2, each once, equal to history.json's val_loss.

Exits non-zero on any mismatch. Needs Fashion-MNIST (scripts/setup.sh) and tensorboard.
"""

import argparse
import glob
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from tensorboard.backend.event_processing import event_accumulator as ea  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
EPOCHS = 3
BATCHES = 512
CONFIG = f"""
name = "tb-resume"
seed = 11
[data]
data_dir = "{DATA}"
[data.train]
source = "idx"
files = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]
components = ["image", "label"]
x = "image"
y = "label"
take = {BATCHES * 64}
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
epochs = {EPOCHS}
[[callbacks]]
type = "TensorBoard"
update_freq = 1
"""

FAILURES = []


def check(condition, what):
    print(f"  {'ok  ' if condition else 'FAIL'} {what}")
    if not condition:
        FAILURES.append(what)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def series(path, tag):
    acc = ea.EventAccumulator(path, size_guidance={ea.TENSORS: 0})
    acc.Reload()
    return [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]


def checkpoints(run):
    return sorted(glob.glob(os.path.join(run, "checkpoints", "ckpt-*")))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True, help="path to the kiln binary")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="kiln-tb-resume-")
    config = os.path.join(work, "config.toml")
    with open(config, "w") as f:
        f.write(CONFIG)
    run = os.path.join(work, "run")
    cmd = [args.kiln, "train", config, "--run-dir", run]
    print(f"run dir {run}")

    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    # Checkpoints: one at the start, one after epoch 1; stop inside epoch 2.
    while len(checkpoints(run)) < 2 and first.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    first.send_signal(signal.SIGTERM)
    err = first.communicate()[1].decode()
    check(first.returncode == 143, f"SIGTERM: exit 143 (got {first.returncode})\n{err}")
    time.sleep(1.1)  # a new second: event file names sort in write order
    second = subprocess.run(cmd, capture_output=True, text=True)
    check(second.returncode == 0, f"the resume finishes (exit {second.returncode})\n{second.stderr}")
    check("Resuming from" in second.stderr, "the second run resumed")

    history = json.load(open(os.path.join(run, "history.json")))["history"]
    logs = os.path.join(run, "logs")

    print("(a) one event file per process")
    for name in ["train", "validation"]:
        files = sorted(glob.glob(os.path.join(logs, name, "events.out.tfevents.*")))
        check(len(files) == 2, f"{name}: two event files (got {len(files)})")
        for f in files:
            one = ea.EventAccumulator(f)
            one.Reload()
            check(one.file_version == 2.0, f"{name}: {os.path.basename(f)} has brain.Event:2")

    train = os.path.join(logs, "train")
    print("(b) epoch scalars continue")
    for tag, key in [("epoch_loss", "loss"), ("epoch_accuracy", "accuracy")]:
        got = sorted(series(train, tag))
        want = [(e, f32(v)) for e, v in enumerate(history[key])]
        check(got == want, f"train/{tag} = history.json {key} at steps 0..2 (got {got}, want {want})")

    print("(c) batch steps continue across the resume")
    steps = [s for s, _ in series(train, "batch_loss")]
    check(sorted(steps) == list(range(1, EPOCHS * BATCHES + 1)),
          f"train/batch_loss steps 1..{EPOCHS * BATCHES}, each once (got {len(steps)} steps, "
          f"{len(set(steps))} distinct, min {min(steps, default=None)}, max {max(steps, default=None)})")
    files = sorted(glob.glob(os.path.join(train, "events.out.tfevents.*")))
    if len(files) == 2:
        a = [s for s, _ in series(files[0], "batch_loss")]
        b = [s for s, _ in series(files[1], "batch_loss")]
        check(a and b and min(b) == max(a) + 1 and BATCHES < max(a) < 2 * BATCHES,
              f"stopped inside epoch 2 at batch step {max(a) if a else None}; "
              f"resumed at {min(b) if b else None}")

    print("(d) validation")
    got = sorted(series(os.path.join(logs, "validation"), "epoch_loss"))
    want = [(e, f32(v)) for e, v in enumerate(history["val_loss"])]
    check(got == want, f"validation/epoch_loss = history.json val_loss (got {got}, want {want})")

    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
