"""Known answers for kiln's MultiHeadAttention with Keras masks and `use_causal_mask`, recorded
once with Keras 3 (TensorFlow backend, CPU).

MultiHeadAttention(num_heads=2, key_dim=3) on x [2, 5, 4] (self-attention) with fixed weights
(`values(k)[i] = 0.4 sin(0.7 i + k)`, k the weight's index), a Keras mask [2, 5] on the query
and value (as `Embedding(mask_zero=True)` would give), and/or `use_causal_mask=True`. Recorded:
the output and the gradient with respect to x of `sum(output * r * query_mask)` (r[i] =
cos(0.5 i + 0.2) over the output's values), so that rows of masked queries, whose values Keras'
fused attention and its explicit masked softmax compute differently, count for nothing.

Run: python tests/reference/attention_masks_reference.py > crates/kiln/tests/data/attention_masks_reference.json
"""
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

X = (0.8 * np.sin(np.arange(40) * 0.9 + 0.3)).astype("float32").reshape(2, 5, 4)
MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)


def values(shape, k):
    n = int(np.prod(shape))
    return (0.4 * np.sin(np.arange(n) * 0.7 + k)).astype("float32").reshape(shape)


def case(masked, causal):
    layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3)
    layer.build(X.shape, X.shape)
    weights = {}
    for k, w in enumerate(layer.weights):
        v = values(tuple(w.shape), k)
        w.assign(v)
        name = "/".join(w.path.split("/")[1:])
        weights[name] = {"shape": list(v.shape), "values": v.ravel().tolist()}
    x = tf.Variable(X)
    mask = tf.constant(MASK) if masked else None
    rows = MASK if masked else np.ones_like(MASK)
    with tf.GradientTape() as tape:
        y = layer(x, x, query_mask=mask, value_mask=mask, use_causal_mask=causal)
        r = np.cos(0.5 * np.arange(y.shape.num_elements()) + 0.2).astype("float32")
        r = r.reshape(y.shape) * rows[:, :, None]
        loss = tf.reduce_sum(y * r)
    g = tape.gradient(loss, x)
    return {
        "masked": masked,
        "causal": causal,
        "weights": weights,
        "output": np.asarray(y).ravel().tolist(),
        "input_grad": np.asarray(g).ravel().tolist(),
    }


if __name__ == "__main__":
    print(json.dumps({
        "keras": keras.__version__,
        "x": X.ravel().tolist(),
        "mask": MASK.astype("float32").ravel().tolist(),
        "cases": [case(m, c) for m, c in [(True, False), (False, True), (True, True)]],
    }))
