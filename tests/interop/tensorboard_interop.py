#!/usr/bin/env python3
"""TensorBoard event files written by kiln, read by the real `tensorboard` package.

    cargo build --release -p kiln --example tb_write
    python tests/interop/tensorboard_interop.py --tb-write target/release/examples/tb_write

Runs tb_write twice into one log dir, like a training and its resumption in a new process:
"first" writes epochs 0..2 (global batches 1..12), "resume" epochs 3..4 (batches 13..20).
Then, with tensorboard's EventAccumulator (event_processing.event_accumulator, all tensors
kept), checks:
  (a) the runs are `train` and `validation`, every file is named
      events.out.tfevents.<10-digit secs>.<host>.<pid>.<n>.v2 and starts with
      file_version "brain.Event:2";
  (b) train: epoch_loss, epoch_accuracy, epoch_learning_rate, epoch_samples_per_second,
      epoch_input_wait_seconds at steps 0..4 and batch_loss at global batches 2, 4, ..., 20
      (update_freq = 2), with the values tb_write documents, as float32 scalars (rank-0
      DT_FLOAT) under the `scalars` plugin; epoch_steps_per_second > 0 at steps 0..4;
  (c) validation: epoch_loss, epoch_accuracy (the val_ values, prefix removed) at steps 0..4,
      evaluation_loss_vs_iterations at steps 4, 8, 12, 16, 20;
  (d) weight histograms `<path>/histogram` at steps 0..4 under the `histograms` plugin, equal
      to tf.summary.histogram's buckets for the same weights (TensorBoard's own `_buckets`);
  (e) the steps continue across the resumption: each series has each step exactly once;
  (f) with TensorFlow installed: a kiln scalar's Summary.Value serializes to the same bytes as
      the one tf.summary.scalar writes for the same tag and value.

Exits non-zero on any mismatch. Needs the `tensorboard` package (comes with tensorflow).
"""

import argparse
import glob
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
from tensorboard.backend.event_processing import event_accumulator as ea  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

FAILURES = []
BATCHES = 4
EPOCHS = range(5)


def check(condition, what):
    if condition:
        print(f"  ok   {what}")
    else:
        print(f"  FAIL {what}")
        FAILURES.append(what)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def load(run_dir):
    acc = ea.EventAccumulator(run_dir, size_guidance={ea.TENSORS: 0})
    acc.Reload()
    return acc


def series(acc, tag):
    """[(step, value)] of a scalar tag, checking each is a rank-0 float32 tensor."""
    out = []
    for ev in acc.Tensors(tag):
        arr = tensor_util.make_ndarray(ev.tensor_proto)
        if arr.dtype != np.float32 or arr.shape != ():
            check(False, f"{tag} step {ev.step} is a rank-0 float32 (got {arr.dtype} {arr.shape})")
        out.append((ev.step, float(arr)))
    return out


def expect_series(acc, run, tag, expected):
    got = series(acc, tag)
    steps = [s for s, _ in got]
    check(len(steps) == len(set(steps)), f"{run}/{tag}: no step written twice ({steps})")
    got_sorted = sorted(got)
    want = [(s, f32(v)) for s, v in expected]
    check(
        got_sorted == want,
        f"{run}/{tag}: steps and values {want}" + ("" if got_sorted == want else f", got {got_sorted}"),
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tb-write", required=True, help="path to the tb_write example binary")
    args = parser.parse_args()

    log_dir = tempfile.mkdtemp(prefix="kiln-tb-interop-")
    print(f"log dir {log_dir}")
    for phase in ["first", "resume"]:
        subprocess.run([args.tb_write, log_dir, phase], check=True)
        if phase == "first":
            # A resumed run starts later; a new second keeps file-name order = write order.
            time.sleep(1.1)

    print("(a) runs, file names, file_version")
    runs = sorted(d for d in os.listdir(log_dir) if os.path.isdir(os.path.join(log_dir, d)))
    check(runs == ["train", "validation"], f"runs are train and validation (got {runs})")
    pattern = re.compile(r"^events\.out\.tfevents\.\d{10}\.[^/]+\.\d+\.\d+\.v2$")
    for run in runs:
        files = sorted(glob.glob(os.path.join(log_dir, run, "*")))
        check(len(files) == 2, f"{run}: one file per process (got {len(files)})")
        for f in files:
            check(pattern.match(os.path.basename(f)) is not None, f"{run}: name {os.path.basename(f)}")
            one = ea.EventAccumulator(f)
            one.Reload()
            check(one.file_version == 2.0, f"{run}: {os.path.basename(f)} has brain.Event:2")

    train = load(os.path.join(log_dir, "train"))
    val = load(os.path.join(log_dir, "validation"))

    print("(b) train scalars")
    scalars = train.PluginTagToContent("scalars")
    for tag in ["epoch_loss", "epoch_accuracy", "epoch_learning_rate", "epoch_samples_per_second",
                "epoch_input_wait_seconds", "epoch_steps_per_second", "batch_loss",
                "batch_steps_per_second"]:
        check(tag in scalars, f"train/{tag} is under the scalars plugin")
    check(
        not any(t.startswith("epoch_val_") for t in train.Tags()["tensors"]),
        "no val_ values in the train run",
    )
    expect_series(train, "train", "epoch_loss", [(e, 1 / (e + 1)) for e in EPOCHS])
    expect_series(train, "train", "epoch_accuracy", [(e, e / 10) for e in EPOCHS])
    expect_series(train, "train", "epoch_learning_rate", [(e, 0.1 * 0.5**e) for e in EPOCHS])
    expect_series(train, "train", "epoch_samples_per_second", [(e, 1000 + e) for e in EPOCHS])
    expect_series(train, "train", "epoch_input_wait_seconds", [(e, e / 2) for e in EPOCHS])
    sps = sorted(series(train, "epoch_steps_per_second"))
    check([s for s, _ in sps] == list(EPOCHS) and all(v > 0 for _, v in sps),
          "train/epoch_steps_per_second > 0 at steps 0..4")
    batch = []
    for g in range(2, 5 * BATCHES + 1, 2):
        e, b = divmod(g - 1, BATCHES)
        batch.append((g, e + b / 8))
    expect_series(train, "train", "batch_loss", batch)
    bsps = sorted(series(train, "batch_steps_per_second"))
    check([s for s, _ in bsps] == [g for g, _ in batch], "train/batch_steps_per_second steps")

    print("(c) validation scalars")
    expect_series(val, "validation", "epoch_loss", [(e, 2 / (e + 1)) for e in EPOCHS])
    expect_series(val, "validation", "epoch_accuracy", [(e, e / 20) for e in EPOCHS])
    expect_series(
        val, "validation", "evaluation_loss_vs_iterations",
        [((e + 1) * BATCHES, 2 / (e + 1)) for e in EPOCHS],
    )

    print("(d) histograms")
    from tensorboard.plugins.histogram import summary_v2 as hist

    hists = train.PluginTagToContent("histograms")
    for name in ["tb_write/dense/kernel", "tb_write/dense/bias"]:
        tag = f"{name}/histogram"
        check(tag in hists, f"{tag} is under the histograms plugin")
        events = sorted(train.Tensors(tag), key=lambda ev: ev.step)
        check([ev.step for ev in events] == list(EPOCHS), f"{tag} at steps 0..4")
        for ev in events:
            e = ev.step
            data = [1, 2, 2, 3, 10 + e] if name.endswith("kernel") else [4, 4]
            got = tensor_util.make_ndarray(ev.tensor_proto)
            want = hist.histogram_pb(tag, np.array(data, dtype=np.float32)).value[0].tensor
            want = tensor_util.make_ndarray(want)
            same = got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
            check(same, f"{tag} step {e}: [30, 3] buckets equal tensorboard's histogram_pb")

    print("(f) bytes against tf.summary.scalar")
    try:
        import tensorflow as tf
        from tensorflow.core.util import event_pb2
    except ImportError:
        print("  skip (no tensorflow)")
        tf = None
    if tf is not None:
        tf_dir = tempfile.mkdtemp(prefix="kiln-tb-tf-")
        w = tf.summary.create_file_writer(tf_dir)
        with w.as_default():
            tf.summary.scalar("epoch_loss", 1 / 3, step=2)
            tf.summary.histogram("tb_write/dense/kernel/histogram",
                                 np.array([1, 2, 2, 3, 12], dtype=np.float32), step=2)
        w.flush()
        tf_values = {}
        for f in glob.glob(os.path.join(tf_dir, "*")):
            for rec in tf.data.TFRecordDataset(f):
                ev = event_pb2.Event.FromString(rec.numpy())
                for v in ev.summary.value:
                    tf_values[v.tag] = v.SerializeToString()
        kiln_values = {}
        for f in sorted(glob.glob(os.path.join(log_dir, "train", "*"))):
            for rec in tf.data.TFRecordDataset(f):
                ev = event_pb2.Event.FromString(rec.numpy())
                if ev.step == 2:
                    for v in ev.summary.value:
                        kiln_values[v.tag] = v.SerializeToString()
        for tag in ["epoch_loss", "tb_write/dense/kernel/histogram"]:
            check(kiln_values.get(tag) == tf_values.get(tag),
                  f"{tag} at step 2: Summary.Value bytes equal TensorFlow's")

    if FAILURES:
        print(f"\n{len(FAILURES)} check(s) failed")
        sys.exit(1)
    print("\nall TensorBoard interop checks passed")


if __name__ == "__main__":
    main()
