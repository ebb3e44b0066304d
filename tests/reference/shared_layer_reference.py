"""Known answers for kiln's shared layers (one layer called on two inputs, one set of weights),
computed with Keras 3 on the CPU.

Run:
    /root/.cache/kiln/tfvenv/bin/python tests/reference/shared_layer_reference.py
(TensorFlow 2.21, Keras 3.15.) Writes crates/kiln/tests/data/shared_layer_reference.json, which
crates/kiln/src/model/shared_tests.rs reads.

A Siamese-style model: inputs a (3,) and b (3,), one Dense(4, tanh) "tower" called on both,
Concatenate, Dense(1) "out", loss mse. Weights, inputs and labels come from the closed formulas
of multi_io_reference.py (recorded in the JSON). The script also builds the unshared twin (two
Dense layers "tower_a" / "tower_b" holding the same values) and asserts that
- both models predict the same values,
- the shared model has the twin's parameters minus one tower (counted once),
- the gradient of the shared kernel is the sum of the twin's two kernels' gradients,
- one SGD(0.1) step moves the shared kernel by -0.1 times that sum.
"""
import json
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["CUDA_VISIBLE_DEVICES"] = ""
import sys

import numpy as np
import tensorflow as tf
import keras
from keras import layers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from multi_io_reference import fixed_weight, float_input, float_label  # noqa: E402

keras.utils.set_random_seed(0)
tf.config.experimental.enable_op_determinism()

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "crates", "kiln", "tests", "data", "shared_layer_reference.json")

FORMULAS = {
    "weight": "w.flat[i] = f32(0.1 * sin(0.7 * i + 0.3 * k)), k = index of the weight in the "
    "shared model's model.weights (tower/kernel, tower/bias, out/kernel, out/bias), i = row-major "
    "flat index (f64 math, then rounded to f32); the twin's tower_a and tower_b both hold k = 0, 1",
    "float_input": "x.flat[i] = f32(sin(0.9 * i + 0.5 + m)), m = 0 for a, 1 for b",
    "float_label": "y.flat[i] = f32(0.5 * cos(0.9 * i))",
}
BATCH = 5


def tensor(a):
    a = np.asarray(a, dtype=np.float32)
    return {"shape": list(a.shape), "values": [float(v) for v in a.reshape(-1)]}


def shared_model():
    a = keras.Input((3,), name="a")
    b = keras.Input((3,), name="b")
    tower = layers.Dense(4, activation="tanh", name="tower")
    h = layers.Concatenate(name="concat")([tower(a), tower(b)])
    out = layers.Dense(1, name="out")(h)
    return keras.Model({"a": a, "b": b}, out, name="siamese")


def twin_model():
    a = keras.Input((3,), name="a")
    b = keras.Input((3,), name="b")
    ha = layers.Dense(4, activation="tanh", name="tower_a")(a)
    hb = layers.Dense(4, activation="tanh", name="tower_b")(b)
    h = layers.Concatenate(name="concat")([ha, hb])
    out = layers.Dense(1, name="out")(h)
    return keras.Model({"a": a, "b": b}, out, name="twin")


def compile_(model):
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss="mse")


def gradients(model, x, y):
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=True))
    grads = tape.gradient(loss, model.trainable_weights)
    return float(loss), {w.path: g.numpy() for w, g in zip(model.trainable_weights, grads)}


def main():
    shared, twin = shared_model(), twin_model()
    compile_(shared)
    compile_(twin)
    names = [w.path for w in shared.weights]
    assert names == ["tower/kernel", "tower/bias", "out/kernel", "out/bias"], names
    weights = {n: fixed_weight(tuple(w.shape), k) for k, (n, w) in enumerate(zip(names, shared.weights))}
    for w in shared.weights:
        w.assign(weights[w.path])
    for w in twin.weights:
        w.assign(weights[w.path.replace("tower_a", "tower").replace("tower_b", "tower")])

    assert [l.name for l in shared.layers] == ["a", "b", "tower", "concat", "out"]
    assert shared.count_params() == 4 * 3 + 4 + 8 + 1
    assert twin.count_params() == shared.count_params() + 4 * 3 + 4

    x = {"a": float_input((BATCH, 3), 0), "b": float_input((BATCH, 3), 1)}
    y = float_label((BATCH, 1))
    p_shared = shared(x, training=False).numpy()
    p_twin = twin(x, training=False).numpy()
    assert np.array_equal(p_shared, p_twin)
    loss_shared, g_shared = gradients(shared, x, y)
    loss_twin, g_twin = gradients(twin, x, y)
    assert math.isclose(loss_shared, loss_twin, rel_tol=1e-7)
    for w in ("kernel", "bias"):
        total = g_twin[f"tower_a/{w}"] + g_twin[f"tower_b/{w}"]
        assert np.allclose(g_shared[f"tower/{w}"], total, rtol=1e-6, atol=1e-8), w

    before = {w.path: np.array(w.numpy()) for w in shared.weights}
    logs = shared.train_on_batch(x, y, return_dict=True)
    after = {w.path: np.array(w.numpy()) for w in shared.weights}
    for n, g in g_shared.items():
        assert np.allclose(after[n], before[n] - np.float32(0.1) * g, rtol=1e-5, atol=1e-7), n
    after_loss = shared.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True)["loss"]

    doc = {
        "generator": "tests/reference/shared_layer_reference.py",
        "versions": {"keras": keras.__version__, "tensorflow": tf.__version__, "numpy": np.__version__},
        "formulas": FORMULAS,
        "description": "a (3,), b (3,) -> shared Dense(4, tanh) 'tower' on each -> Concatenate -> "
        "Dense(1) 'out', mse, SGD(0.1); twin: 'tower_a' / 'tower_b' with the same values",
        "params": {"shared": shared.count_params(), "twin": twin.count_params()},
        "weights": {n: tensor(v) for n, v in weights.items()},
        "inputs": {k: tensor(v) for k, v in x.items()},
        "labels": tensor(y),
        "predictions": tensor(p_shared),
        "loss": loss_shared,
        "gradients_shared": {n: tensor(g) for n, g in g_shared.items()},
        "gradients_twin": {n: tensor(g) for n, g in g_twin.items()},
        "train_on_batch_loss": float(logs["loss"]),
        "weights_after_step": {n: tensor(v) for n, v in after.items()},
        "loss_after_step": float(after_loss),
    }
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"loss {loss_shared!r} -> {after_loss!r}; wrote {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
