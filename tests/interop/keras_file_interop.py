"""kiln's Keras model files (`kiln import`, `kiln export --format keras`) checked by Keras 3 itself.

1. Import. Keras builds and saves (`model.save("x.keras")`) four models, `kiln import` reads
   each into a run directory and `kiln predict` on fixed random inputs (.npy) must equal Keras'
   `model.predict` within 1e-5 (max |diff|):
   a. a Sequential CNN on (28, 28, 1): Conv2D relu, MaxPooling2D, Conv2D, Flatten, Dropout,
      Dense softmax, compiled with Adam, sparse_categorical_crossentropy and accuracy;
   b. a functional ResNet-style model: Conv2D(use_bias=False), BatchNormalization, ReLU, two
      residual blocks with Add (the second one with a strided 1x1 projection conv),
      GlobalAveragePooling2D, Dense logits (from_logits=True); the BatchNormalization moving
      statistics are made non-trivial by one Keras epoch on 64 random examples first;
   c. a text model: Input((12,), int32), Embedding(50, 8), LSTM(16, return_sequences=True),
      BatchNormalization (trained moving statistics too), GlobalAveragePooling1D, Dense(3);
   d. Bidirectional(GRU), MultiHeadAttention (self-attention), Concatenate, LayerNormalization.
   `kiln predict` gives class probabilities: for a model compiled with from_logits=True it
   applies softmax to the logits, so the script compares with softmax(Keras' logits) there;
   for the others it is the raw output.
2. Export back. Each imported run goes through `kiln export RUN --format keras --out DIR`,
   `keras.saving.load_model` reads the file (no custom objects), and its predictions must equal
   kiln's (and the original Keras model's raw outputs) within 1e-5.
3. Fine-tune. The CNN of 1a, pretrained by Keras for one epoch on 6000 Fashion-MNIST images, is
   imported with `--config base.toml` (Fashion-MNIST [data] with rescale 1/255, [fit] one epoch
   of a few steps) and trained with `kiln train`: it must run, its loss be finite, its
   predictions change, and its first-epoch accuracy be clearly above that of the same config
   trained from fresh weights (so training started from the imported weights).
4. Bad input. Each must exit with code 2, print one stderr line `kiln: error: <file>: <entry>:
   ...` naming the file and the archive entry, and not create the --run-dir: a truncated
   .keras, a zip without config.json, a model.weights.h5 with a kernel of the wrong shape (the
   zip rewritten with an h5py-edited weights file), a model with a Lambda layer, a model with a
   custom registered layer class.

Failed checks are collected (every check runs) and listed at the end; the exit status is 1 if
any failed.

Usage: keras_file_interop.py --kiln target/release/kiln [--data-dir DIR] [--keep]
"""

import argparse
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.get_logger().setLevel("ERROR")  # no retracing warnings from the many small predicts

TOL = 1e-5
FAILURES = []


def check(cond, what, detail=""):
    if cond:
        print(f"ok: {what}")
    else:
        msg = f"{what}\n    {detail}" if detail else what
        print(f"FAILED: {msg}")
        FAILURES.append(msg)
    return cond


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


def describe(r):
    return (f"`{' '.join(r.args)}` exited {r.returncode}\n    stdout: {r.stdout.strip()[-2000:]}"
            f"\n    stderr: {r.stderr.strip()[-2000:]}")


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def maxdiff(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return math.inf
    return float(np.abs(a - b).max())


def kiln_predict(kiln, run_dir, npy):
    """kiln predict's rows, or None (the failure recorded)."""
    r = run([kiln, "predict", run_dir, npy])
    if r.returncode != 0:
        check(False, f"kiln predict {os.path.basename(run_dir)}", describe(r))
        return None
    try:
        return np.array(json.loads(r.stdout)["predictions"], dtype=np.float64)
    except Exception as e:  # noqa: BLE001
        check(False, f"kiln predict {os.path.basename(run_dir)} prints JSON predictions",
              f"{e}: {r.stdout[:300]}")
        return None


# -- the Keras models -------------------------------------------------------------------------

def cnn_model():
    L = keras.layers
    m = keras.Sequential([
        keras.Input((28, 28, 1)),
        L.Conv2D(8, 3, activation="relu"),
        L.MaxPooling2D(),
        L.Conv2D(16, 3),
        L.Flatten(),
        L.Dropout(0.25),
        L.Dense(10, activation="softmax"),
    ], name="keras_cnn")
    m.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])
    return m


def resnet_model(rng):
    L = keras.layers
    inp = keras.Input((16, 16, 3), name="image")
    x = L.Conv2D(8, 3, padding="same", use_bias=False, name="stem_conv")(inp)
    x = L.BatchNormalization(name="stem_bn")(x)
    x = L.ReLU(name="stem_relu")(x)
    # Block 1: identity shortcut.
    y = L.Conv2D(8, 3, padding="same", activation="relu", name="b1_conv1")(x)
    y = L.Conv2D(8, 3, padding="same", use_bias=False, name="b1_conv2")(y)
    y = L.BatchNormalization(name="b1_bn")(y)
    x = L.Add(name="b1_add")([x, y])
    x = L.ReLU(name="b1_relu")(x)
    # Block 2: strided, with a 1x1 projection shortcut.
    y = L.Conv2D(16, 3, strides=2, padding="same", activation="relu", name="b2_conv1")(x)
    y = L.Conv2D(16, 3, padding="same", name="b2_conv2")(y)
    s = L.Conv2D(16, 1, strides=2, name="b2_proj")(x)
    x = L.Add(name="b2_add")([s, y])
    x = L.ReLU(name="b2_relu")(x)
    x = L.GlobalAveragePooling2D(name="gap")(x)
    out = L.Dense(5, name="logits")(x)
    m = keras.Model(inp, out, name="keras_resnet")
    m.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
    xs = rng.normal(1.5, 2.0, size=(64, 16, 16, 3)).astype(np.float32)
    # Batches of 2: 32 updates move the moving statistics (momentum 0.99) well off 0 and 1.
    m.fit(xs, rng.integers(0, 5, size=64), epochs=1, batch_size=2, verbose=0)
    return m


def text_model(rng):
    L = keras.layers
    inp = keras.Input((12,), dtype="int32", name="tokens")
    x = L.Embedding(50, 8, name="emb")(inp)
    x = L.LSTM(16, return_sequences=True, name="lstm")(x)
    x = L.BatchNormalization(name="bn")(x)
    x = L.GlobalAveragePooling1D(name="gap")(x)
    out = L.Dense(3, name="out")(x)
    m = keras.Model(inp, out, name="keras_text")
    m.compile(optimizer="adam", loss="mse")
    m.fit(rng.integers(0, 50, size=(64, 12)).astype(np.int32), rng.normal(size=(64, 3)),
          epochs=1, batch_size=2, verbose=0)
    return m


def attention_model():
    L = keras.layers
    inp = keras.Input((10, 6), name="seq")
    x = L.Bidirectional(L.GRU(8, return_sequences=True), name="bigru")(inp)
    a = L.MultiHeadAttention(num_heads=2, key_dim=4, name="mha")(x, x)
    x = L.Concatenate(name="concat")([x, a])
    x = L.LayerNormalization(name="ln")(x)
    x = L.GlobalAveragePooling1D(name="gap")(x)
    out = L.Dense(4, name="out")(x)
    m = keras.Model(inp, out, name="keras_attention")
    m.compile(optimizer="adam", loss="mse")
    return m


# -- 1 and 2: import, predict, export back ----------------------------------------------------

def import_predict_export(kiln, work, name, model, x, from_logits):
    """Returns the run directory, or None when the import failed."""
    path = os.path.join(work, f"{name}.keras")
    model.save(path)
    xnpy = os.path.join(work, f"{name}-x.npy")
    np.save(xnpy, x)
    raw = model.predict(x, verbose=0).astype(np.float64)
    expected = softmax(raw) if from_logits else raw
    run_dir = os.path.join(work, "runs", name)
    r = run([kiln, "import", path, "--run-dir", run_dir])
    if not check(r.returncode == 0, f"{name}: kiln import", describe(r)):
        return None
    got = kiln_predict(kiln, run_dir, xnpy)
    if got is not None:
        what = "softmax of Keras' logits" if from_logits else "Keras' model.predict"
        d = maxdiff(got, expected)
        check(d <= TOL, f"{name}: kiln predict equals {what} (max |diff| {d:.2e})",
              f"kiln shape {got.shape}, Keras shape {expected.shape}; kiln row 0 {got[0][:5]}, "
              f"Keras row 0 {expected[0][:5]}")

    out = os.path.join(work, "exports")
    r = run([kiln, "export", run_dir, "--format", "keras", "--out", out])
    if not check(r.returncode == 0, f"{name}: kiln export --format keras", describe(r)):
        return run_dir
    versions = sorted(os.listdir(os.path.join(out, name)))
    exported = os.path.join(out, name, versions[-1], "model.keras")
    try:
        back = keras.saving.load_model(exported)
    except Exception as e:  # noqa: BLE001
        check(False, f"{name}: keras.saving.load_model reads {exported}", f"{type(e).__name__}: {e}")
        return run_dir
    check(True, f"{name}: keras.saving.load_model reads the export")
    braw = back.predict(x, verbose=0).astype(np.float64)
    d = maxdiff(braw, raw)
    check(d <= TOL, f"{name}: the exported model's Keras predictions equal the original's "
          f"(max |diff| {d:.2e})")
    if got is not None:
        bexp = softmax(braw) if from_logits else braw
        d = maxdiff(bexp, got)
        check(d <= TOL, f"{name}: the exported model's Keras predictions equal kiln predict "
              f"(max |diff| {d:.2e})")
    return run_dir


# -- 3: fine-tune -----------------------------------------------------------------------------

def read_idx(data_dir, name, n):
    raw = gzip.open(os.path.join(data_dir, name)).read()
    if "images" in name:
        return np.frombuffer(raw[16:16 + n * 784], dtype=np.uint8).reshape(n, 28, 28)
    return np.frombuffer(raw[8:8 + n], dtype=np.uint8)


def base_config(data_dir):
    return f"""name = "base"
seed = 7
[data]
data_dir = "{data_dir}"
rescale = 0.00392156862745098
[fit]
epochs = 1
batch_size = 64
steps_per_epoch = 25
"""


def first_epoch(run_dir):
    """The first epoch's logs from history.json (dict of lists or list of dicts)."""
    with open(os.path.join(run_dir, "history.json")) as f:
        h = json.load(f)
    if isinstance(h, dict) and "history" in h:
        h = h["history"]
    if isinstance(h, dict):
        return {k: v[0] for k, v in h.items() if isinstance(v, list) and v}
    return h[0]


def fine_tune(kiln, work, data_dir):
    keras.utils.set_random_seed(5)
    model = cnn_model()
    x = read_idx(data_dir, "train-images-idx3-ubyte.gz", 6000).astype(np.float32)[..., None] / 255.0
    y = read_idx(data_dir, "train-labels-idx1-ubyte.gz", 6000)
    t0 = time.time()
    hist = model.fit(x, y, epochs=1, batch_size=64, verbose=0)
    print(f"   Keras pretraining on 6000 images: accuracy {hist.history['accuracy'][0]:.3f} "
          f"({time.time() - t0:.1f}s)")
    path = os.path.join(work, "cnn-pretrained.keras")
    model.save(path)
    base = os.path.join(work, "base.toml")
    with open(base, "w") as f:
        f.write(base_config(data_dir))

    # The same images as kiln sees them (uint8, rescaled by the run's rescale).
    test = read_idx(data_dir, "t10k-images-idx3-ubyte.gz", 32)
    tnpy = os.path.join(work, "test-images.npy")
    np.save(tnpy, test.astype(np.float32)[..., None])
    keras_pred = model.predict(test.astype(np.float32)[..., None] / 255.0, verbose=0)

    run_dir = os.path.join(work, "runs", "cnn-ft")
    r = run([kiln, "import", path, "--run-dir", run_dir, "--name", "cnn-ft", "--config", base])
    if not check(r.returncode == 0, "fine-tune: kiln import --config base.toml", describe(r)):
        return
    with open(os.path.join(run_dir, "config.toml")) as f:
        cfg = f.read()
    check("steps_per_epoch = 25" in cfg and "rescale = 0.00392156862745098" in cfg,
          "fine-tune: the imported config takes [data] and [fit] from base.toml")
    before = kiln_predict(kiln, run_dir, tnpy)
    if before is not None:
        d = maxdiff(before, keras_pred)
        check(d <= TOL, f"fine-tune: before training, kiln predict (rescale 1/255 from base.toml) "
              f"equals Keras (max |diff| {d:.2e})")

    t0 = time.time()
    r = run([kiln, "train", os.path.join(run_dir, "config.toml"), "--run-dir", run_dir])
    if not check(r.returncode == 0, f"fine-tune: kiln train runs ({time.time() - t0:.1f}s)",
                 describe(r)):
        return
    logs = first_epoch(run_dir)
    loss, acc = logs.get("loss"), logs.get("accuracy")
    check(loss is not None and math.isfinite(loss), f"fine-tune: the loss is finite ({loss})")
    after = kiln_predict(kiln, run_dir, tnpy)
    if before is not None and after is not None:
        d = maxdiff(before, after)
        check(d > 1e-4, f"fine-tune: training changed the weights (predictions moved by {d:.2e})")

    # The same config trained from fresh weights: [model] weights removed.
    fresh_dir = os.path.join(work, "runs", "cnn-fresh")
    fresh_cfg = os.path.join(work, "cnn-fresh.toml")
    with open(fresh_cfg, "w") as f:
        f.write("\n".join(l for l in cfg.splitlines() if not l.startswith("weights = ")) + "\n")
    r = run([kiln, "train", fresh_cfg, "--run-dir", fresh_dir])
    if not check(r.returncode == 0, "fine-tune: kiln train from fresh weights runs", describe(r)):
        return
    facc = first_epoch(fresh_dir).get("accuracy")
    check(acc is not None and facc is not None and acc > facc + 0.1,
          f"fine-tune: started from the imported weights (first-epoch accuracy {acc} from the "
          f"import vs {facc} from fresh weights)")


# -- 4: bad input -----------------------------------------------------------------------------

def rewrite_zip(src, dst, replace=None, drop=()):
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zo:
        for item in zi.infolist():
            if item.filename in drop:
                continue
            data = (replace or {}).get(item.filename)
            zo.writestr(item.filename, data if data is not None else zi.read(item.filename))


def bad_inputs(kiln, work, good):
    bad = os.path.join(work, "bad")
    os.makedirs(bad)
    cases = []

    p = os.path.join(bad, "truncated.keras")
    blob = open(good, "rb").read()
    open(p, "wb").write(blob[: len(blob) // 2])
    cases.append(("truncated", p, "zip", []))

    p = os.path.join(bad, "no-config.keras")
    rewrite_zip(good, p, drop=("config.json",))
    cases.append(("no config.json", p, "config.json", []))

    # The last Dense kernel with one row too many.
    p = os.path.join(bad, "wrong-shape.keras")
    h5 = os.path.join(bad, "model.weights.h5")
    with zipfile.ZipFile(good) as z:
        open(h5, "wb").write(z.read("model.weights.h5"))
    with h5py.File(h5, "r+") as f:
        ds = "layers/dense/vars/0"
        old = f[ds][...]
        del f[ds]
        f[ds] = np.concatenate([old, old[:1]], axis=0)
        bad_shape = list(f[ds].shape)
    rewrite_zip(good, p, replace={"model.weights.h5": open(h5, "rb").read()})
    cases.append(("kernel of the wrong shape", p, "model.weights.h5",
                  ["layers/dense/vars/0", str(bad_shape[0])]))

    L = keras.layers
    m = keras.Sequential([keras.Input((4,)), L.Lambda(lambda t: t * 2.0, name="doubler"),
                          L.Dense(2)], name="with_lambda")
    p = os.path.join(bad, "lambda.keras")
    m.save(p)
    cases.append(("Lambda layer", p, "config.json", ["doubler", "Lambda"]))

    @keras.saving.register_keras_serializable(package="interop")
    class MyScale(keras.layers.Layer):
        def __init__(self, factor=2.0, **kw):
            super().__init__(**kw)
            self.factor = factor

        def call(self, t):
            return t * self.factor

        def get_config(self):
            return {**super().get_config(), "factor": self.factor}

    m = keras.Sequential([keras.Input((4,)), MyScale(name="my_scale"), L.Dense(2)], name="custom")
    p = os.path.join(bad, "custom.keras")
    m.save(p)
    cases.append(("custom registered layer", p, "config.json", ["my_scale", "MyScale"]))

    for what, path, entry, words in cases:
        run_dir = os.path.join(bad, "runs", os.path.basename(path).replace(".keras", ""))
        r = run([kiln, "import", path, "--run-dir", run_dir])
        lines = r.stderr.strip().splitlines()
        line = lines[0] if lines else ""
        fname = os.path.basename(path)
        prefix = "kiln: error: "
        ok = (r.returncode == 2 and len(lines) == 1 and line.startswith(prefix)
              and fname in line and f": {entry}" in line and all(w in line for w in words))
        check(ok, f"bad input ({what}): exit 2, one line naming {fname}, {entry}"
              + (f" and {', '.join(words)}" if words else ""),
              f"exit {r.returncode}, stderr {r.stderr.strip()!r}")
        check(not os.path.exists(run_dir), f"bad input ({what}): the run directory is not created",
              f"{run_dir} exists: {os.listdir(run_dir) if os.path.isdir(run_dir) else 'file'}")
        print(f"   {line}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    work = tempfile.mkdtemp(prefix="kiln-keras-interop-")
    print(f"work directory: {work}")
    t_start = time.time()
    rng = np.random.default_rng(2024)
    keras.utils.set_random_seed(1)

    print("== 1, 2: Keras -> kiln import -> kiln predict -> kiln export -> Keras")
    runs = {}
    runs["keras_cnn"] = import_predict_export(
        kiln, work, "keras_cnn", cnn_model(), rng.uniform(0, 1, size=(16, 28, 28, 1)).astype(np.float32),
        from_logits=False)
    resnet = resnet_model(rng)
    bn = resnet.get_layer("stem_bn")
    mm, mv = (np.asarray(v) for v in (bn.moving_mean, bn.moving_variance))
    check(np.abs(mm).max() > 0.05 and np.abs(mv - 1).max() > 0.05,
          f"keras_resnet: BatchNormalization moving statistics trained (|mean| up to "
          f"{np.abs(mm).max():.3f}, variance {mv.min():.3f}..{mv.max():.3f})")
    runs["keras_resnet"] = import_predict_export(
        kiln, work, "keras_resnet", resnet,
        rng.normal(1.5, 2.0, size=(16, 16, 16, 3)).astype(np.float32), from_logits=True)
    runs["keras_text"] = import_predict_export(
        kiln, work, "keras_text", text_model(rng),
        rng.integers(0, 50, size=(16, 12)).astype(np.int32), from_logits=False)
    runs["keras_attention"] = import_predict_export(
        kiln, work, "keras_attention", attention_model(),
        rng.normal(size=(16, 10, 6)).astype(np.float32), from_logits=False)
    print(f"   ({time.time() - t_start:.1f}s)")

    print("== 3: fine-tune the imported CNN with kiln train on Fashion-MNIST")
    fine_tune(kiln, work, args.data_dir)
    print(f"   ({time.time() - t_start:.1f}s)")

    print("== 4: bad input")
    bad_inputs(kiln, work, os.path.join(work, "keras_cnn.keras"))
    print(f"   ({time.time() - t_start:.1f}s)")

    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    if FAILURES:
        print(f"\n{len(FAILURES)} check(s) FAILED:")
        for f in FAILURES:
            print(f"- {f}")
        sys.exit(1)
    print(f"keras file interop: all checks passed ({time.time() - t_start:.1f}s)")


if __name__ == "__main__":
    main()
