"""Known answers for kiln's `return_state` and `initial_state` (recurrent layers that return
their final states, and layers that start from a given state), computed with Keras 3 on the
CPU.

Run:
    /root/.cache/kiln/tfvenv/bin/python tests/reference/recurrent_state_reference.py
(TensorFlow 2.21, Keras 3.15.) Writes crates/kiln/tests/data/recurrent_state_reference.json,
which crates/kiln/src/model/layers/recurrent_state_tests.rs reads.

The model (kiln's config is in the test):
    x = Input((5, 3))
    seq, h, c = LSTM(3, return_sequences=True, return_state=True, name="enc")(x)
    dec = LSTM(3, name="dec")(seq, initial_state=[h, c])
    g, g_h = GRU(3, return_state=True, go_backwards=True, name="g")(x)
    s = SimpleRNN(3, name="s")(seq, initial_state=[g_h])
    b, b_fw, b_bw = Bidirectional(GRU(2, return_state=True), merge_mode="sum", name="bi")(x)
    out = Dense(2, name="out")(Concatenate()([dec, s, c, g, b, b_fw, b_bw]))
Weights: w.flat[i] = f32(0.3 * sin(0.7 * i + 0.5 * k)), k = the weight's index in
model.weights, keyed by kiln's names ("enc/kernel", "bi/forward_gru/kernel", ...). Input: x.flat[i] = f32(sin(0.9 * i +
0.5)), shape [2, 5, 3]. Recorded: the output, the gradient of sum(out * r) (r.flat[i] =
cos(0.5 * i + 0.2)) with respect to x and to every weight, and the states h, c of "enc" and
the states of "g" and "bi" as Keras returns them.
"""
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import numpy as np
import tensorflow as tf
import keras
from keras import layers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "crates", "kiln", "tests", "data", "recurrent_state_reference.json")


def values(a):
    a = np.asarray(a, dtype=np.float32)
    return {"shape": list(a.shape), "values": [float(v) for v in a.reshape(-1)]}


def model():
    x = keras.Input((5, 3), name="x")
    seq, h, c = layers.LSTM(3, return_sequences=True, return_state=True, name="enc")(x)
    dec = layers.LSTM(3, name="dec")(seq, initial_state=[h, c])
    g, g_h = layers.GRU(3, return_state=True, go_backwards=True, name="g")(x)
    s = layers.SimpleRNN(3, name="s")(seq, initial_state=[g_h])
    bi = layers.Bidirectional(
        layers.GRU(2, return_state=True), merge_mode="sum", name="bi"
    )
    b, b_fw, b_bw = bi(x)
    joined = layers.Concatenate(name="joined")([dec, s, c, g, b, b_fw, b_bw])
    out = layers.Dense(2, name="out")(joined)
    return keras.Model(x, [out, h, c, g_h, b_fw, b_bw])


def kiln_name(w):
    """kiln's name of a weight: its path without the cells' parts."""
    return "/".join(p for p in w.path.split("/") if not p.endswith("_cell"))


def main():
    m = model()
    weights = {}
    for k, w in enumerate(m.weights):
        n = int(np.prod(w.shape))
        v = (0.3 * np.sin(0.7 * np.arange(n, dtype=np.float64) + 0.5 * k)).astype("float32")
        w.assign(v.reshape(w.shape))
        weights[kiln_name(w)] = values(v.reshape(w.shape))
    n = 2 * 5 * 3
    x = tf.Variable(np.sin(0.9 * np.arange(n) + 0.5).astype("float32").reshape(2, 5, 3))
    with tf.GradientTape() as tape:
        out, h, c, g_h, b_fw, b_bw = m(x)
        r = np.cos(0.5 * np.arange(int(np.prod(out.shape))) + 0.2).astype("float32")
        loss = tf.reduce_sum(tf.reshape(out, [-1]) * r)
    grads = tape.gradient(loss, [x] + list(m.weights))
    result = {
        "keras": keras.__version__,
        "input": values(x),
        "weights": weights,
        "output": values(out),
        "states": {
            "enc:1": values(h),
            "enc:2": values(c),
            "g:1": values(g_h),
            "bi:1": values(b_fw),
            "bi:2": values(b_bw),
        },
        "input_grad": values(grads[0]),
        "weight_grads": {kiln_name(w): values(g) for w, g in zip(m.weights, grads[1:])},
    }
    with open(OUT, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
