#!/usr/bin/env python3
"""A custom train step's logs in TensorBoard, read by the real tensorboard package.

    cargo build --release --workspace --bins
    python tests/interop/custom_step_tensorboard_interop.py --kiln-steps target/release/kiln-steps

Trains the DCGAN and the VAE of examples/custom-train-step (steps of their own: two models,
two optimizers; a loss with a KL term) with `kiln-steps train` on 512 Fashion-MNIST images
(8 batches of 64, 3 epochs, a TensorBoard point every batch), then reads each run's logs with
TensorBoard's UI loader (plugin_event_multiplexer.EventMultiplexer) and checks, for each of
the step's logs (loss, d_loss, g_loss; loss, reconstruction_loss, kl_loss):
  train/epoch_<key>: steps 0, 1, 2, equal (float32) to history.json;
  train/batch_<key>: steps 1..24 once each, finite;
  validation/epoch_<key> (the VAE, through its test_step): equal to history.json's val_<key>.
Exits non-zero on any mismatch. Needs Fashion-MNIST (scripts/setup.sh) and tensorboard.
"""

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tensorboard.backend.event_processing import plugin_event_accumulator as pea  # noqa: E402
from tensorboard.backend.event_processing import plugin_event_multiplexer as pem  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAILURES = []


def check(condition, what):
    print(f"  {'ok  ' if condition else 'FAIL'} {what}")
    if not condition:
        FAILURES.append(what)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def read(run, name):
    """{tag: [(step, value)]} of `name` (train or validation) with TensorBoard's UI loader."""
    mux = pem.EventMultiplexer(size_guidance={pea.TENSORS: 0})
    mux.AddRunsFromDirectory(os.path.join(run, "logs"))
    mux.Reload()
    return {tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
                  for e in mux.Tensors(name, tag)]
            for tag in mux.Runs()[name]["tensors"]}


def example(kiln_steps, work, name, keys, validation):
    """Trains example `name` small and checks its TensorBoard scalars against history.json."""
    with open(os.path.join(ROOT, "examples", "custom-train-step", f"{name}.toml")) as f:
        text = f.read()
    text = (text.replace("take = 6400", "take = 512")
                .replace("buffer_size = 6400", "buffer_size = 512")
                .replace("take = 1024", "take = 256")
                .replace("batch_size = 128", "batch_size = 64")
                .replace('type = "TensorBoard"', 'type = "TensorBoard"\nupdate_freq = 1'))
    config = os.path.join(work, f"{name}.toml")
    with open(config, "w") as f:
        f.write(text)
    run = os.path.join(work, name)
    done = subprocess.run([kiln_steps, "train", config, "--run-dir", run],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"kiln-steps train {name} failed:\n{done.stderr}")
    with open(os.path.join(run, "history.json")) as f:
        history = json.load(f)["history"]
    train = read(run, "train")
    print(f"== {name}: epoch logs")
    for key in keys:
        got = train.get(f"epoch_{key}")
        want = [(i, f32(v)) for i, v in enumerate(history[key])]
        check(got == want, f"train/epoch_{key} {got} == history.json {want}")
    print(f"== {name}: batch logs")
    for key in keys:
        got = train.get(f"batch_{key}", [])
        steps = [s for s, _ in got]
        check(steps == list(range(1, 25)), f"train/batch_{key} at steps 1..24 once each")
        check(all(math.isfinite(v) for _, v in got), f"train/batch_{key} finite")
    if validation:
        val = read(run, "validation")
        print(f"== {name}: validation logs (the step's test_step)")
        for key in keys:
            got = val.get(f"epoch_{key}")
            want = [(i, f32(v)) for i, v in enumerate(history[f"val_{key}"])]
            check(got == want, f"validation/epoch_{key} {got} == history.json val_{key}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln-steps", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        example(args.kiln_steps, work, "dcgan", ["loss", "d_loss", "g_loss"], False)
        example(args.kiln_steps, work, "vae", ["loss", "reconstruction_loss", "kl_loss"], True)
    if FAILURES:
        sys.exit(f"{len(FAILURES)} check(s) failed")
    print("custom step TensorBoard interop: all checks passed")


if __name__ == "__main__":
    main()
