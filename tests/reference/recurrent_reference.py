"""Known answers for kiln's recurrent layers (SimpleRNN, LSTM, GRU, Bidirectional) and masks,
recorded once with Keras 3 (TensorFlow backend, CPU).

For each case: the layer's arguments (kiln's TOML form), fixed weights (by kiln's weight
names), a fixed input batch `[2, 5, 3]`, an optional mask `[2, 5]`, the output, and the
gradients of `sum(output * r)` (r[i] = cos(0.5 i + 0.2) over the output's values in row-major
order) with respect to the input and to the weights.

Run: python tests/reference/recurrent_reference.py > crates/kiln/tests/data/recurrent_reference.json
"""
import json
import re

import numpy as np
import tensorflow as tf
import keras

BATCH, STEPS, FEATURES = 2, 5, 3


def values(shape, offset):
    n = int(np.prod(shape))
    return (0.4 * np.sin(np.arange(n) * 0.7 + offset)).astype("float32").reshape(shape)


X = values((BATCH, STEPS, FEATURES), 0.3) * 2.0
# Post-padding on the first sequence (its last two steps), a masked step inside the second.
MASK = np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]], dtype=bool)


def keras_layer(args):
    args = dict(args)
    kind = args.pop("type")
    if kind == "Bidirectional":
        inner = dict(args.pop("layer"))
        inner_kind = inner.pop("type")
        return keras.layers.Bidirectional(getattr(keras.layers, inner_kind)(**inner), **args)
    return getattr(keras.layers, kind)(**args)


def kiln_names(layer):
    """Keras' weights in kiln's order and names (`kernel`, `forward_lstm/kernel`)."""
    out = []
    for w in layer.weights:
        parts = w.path.split("/")[1:]  # drop the layer's own name
        parts = [re.sub(r"_\d+$", "", p) for p in parts if not p.endswith("_cell")]
        out.append(("/".join(parts), w))
    return out


def case(args, masked=False):
    layer = keras_layer(args)
    x = tf.Variable(X)
    layer.build(X.shape)
    weights = {}
    for k, (name, w) in enumerate(kiln_names(layer)):
        v = values(tuple(w.shape), 1.0 + k)
        w.assign(v)
        weights[name] = {"shape": list(v.shape), "values": v.ravel().tolist()}
    with tf.GradientTape() as tape:
        if masked:
            y = layer(x, mask=tf.constant(MASK))
        else:
            y = layer(x)
        r = np.cos(0.5 * np.arange(int(np.prod(y.shape))) + 0.2).astype("float32")
        loss = tf.reduce_sum(tf.reshape(y, [-1]) * r)
    tracked = [x] + [w for _, w in kiln_names(layer)]
    grads = tape.gradient(loss, tracked)
    return {
        "layer": args,
        "weights": weights,
        "mask": MASK.astype("float32").ravel().tolist() if masked else None,
        "output": {"shape": list(y.shape), "values": np.asarray(y).ravel().tolist()},
        "input_grad": np.asarray(grads[0]).ravel().tolist(),
        "weight_grads": {
            name: np.asarray(g).ravel().tolist()
            for (name, _), g in zip(kiln_names(layer), grads[1:])
        },
    }


CASES = {
    "simple_rnn": ({"type": "SimpleRNN", "units": 4}, False),
    "simple_rnn_sequences_backwards": (
        {"type": "SimpleRNN", "units": 4, "return_sequences": True, "go_backwards": True,
         "activation": "relu"},
        False,
    ),
    "lstm": ({"type": "LSTM", "units": 4}, False),
    "lstm_sequences": ({"type": "LSTM", "units": 3, "return_sequences": True}, False),
    "lstm_no_bias_backwards": (
        {"type": "LSTM", "units": 3, "use_bias": False, "go_backwards": True}, False),
    "gru": ({"type": "GRU", "units": 4}, False),
    "gru_reset_before": (
        {"type": "GRU", "units": 3, "reset_after": False, "return_sequences": True}, False),
    "lstm_masked": ({"type": "LSTM", "units": 3, "return_sequences": True}, True),
    "gru_masked_last": ({"type": "GRU", "units": 3}, True),
    "simple_rnn_masked_backwards": (
        {"type": "SimpleRNN", "units": 2, "go_backwards": True}, True),
    "bidirectional_lstm_concat": (
        {"type": "Bidirectional", "layer": {"type": "LSTM", "units": 3, "return_sequences": True}},
        False,
    ),
    "bidirectional_gru_sum": (
        {"type": "Bidirectional", "merge_mode": "sum", "layer": {"type": "GRU", "units": 3}},
        False,
    ),
    "bidirectional_lstm_masked": (
        {"type": "Bidirectional", "layer": {"type": "LSTM", "units": 2, "return_sequences": True}},
        True,
    ),
    "bidirectional_simple_ave_masked": (
        {"type": "Bidirectional", "merge_mode": "ave", "layer": {"type": "SimpleRNN", "units": 2}},
        True,
    ),
}

if __name__ == "__main__":
    out = {
        "keras": keras.__version__,
        "input": {"shape": list(X.shape), "values": X.ravel().tolist()},
        "cases": {name: case(args, masked) for name, (args, masked) in CASES.items()},
    }
    print(json.dumps(out))
