"""Known answers for kiln's activation and normalization layers (ReLU, LeakyReLU, ELU, PReLU,
Softmax, Rescaling, UnitNormalization, GroupNormalization, BatchNormalization with center /
scale / axis), computed once with Keras 3 on the CPU.

Run:
    /root/.cache/kiln/tfvenv/bin/python tests/reference/small_layers_reference.py

(TensorFlow 2.21, Keras 3.15.) Writes crates/kiln/tests/data/small_layers_reference.json
(deterministic), read by crates/kiln/src/model/layers/small_layers_tests.rs. For every case: the
layer's arguments (the same dict is kiln's TOML table and Keras' constructor arguments), whether
it runs in training mode, its input (batch 2, flat value i in Keras' channels-last layout is
`2 sin(0.9 i + 0.1)`), its weights (weight k of `layer.weights`, flat value i, is
`0.8 + 0.3 sin(0.7 i + k)`), Keras' output, and the gradients of `sum(output * r)` with respect
to the input and every trainable weight, where `r`'s flat value i is `cos(0.5 i + 0.2)`.
"""
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
import keras

BATCH = 2

# (case name, layer arguments with `type`, input shape without the batch axis, training)
CASES = [
    ("relu_default", {"type": "ReLU"}, [3, 4], False),
    ("relu_all", {"type": "ReLU", "max_value": 1.2, "negative_slope": 0.1, "threshold": 0.3},
     [3, 4], False),
    ("relu_max_value", {"type": "ReLU", "max_value": 1.0}, [2, 2, 3], False),
    ("relu_threshold", {"type": "ReLU", "threshold": 0.5}, [6], False),
    ("relu_slope", {"type": "ReLU", "negative_slope": 0.2}, [6], False),
    ("leaky_relu_default", {"type": "LeakyReLU"}, [6], False),
    ("leaky_relu_slope", {"type": "LeakyReLU", "negative_slope": 0.05}, [2, 2, 3], False),
    ("elu_default", {"type": "ELU"}, [6], False),
    ("elu_alpha", {"type": "ELU", "alpha": 0.5}, [3, 4], False),
    ("prelu_flat", {"type": "PReLU"}, [6], False),
    ("prelu_seq_shared", {"type": "PReLU", "shared_axes": [1]}, [3, 4], False),
    ("prelu_image", {"type": "PReLU"}, [2, 3, 4], False),
    ("prelu_image_shared", {"type": "PReLU", "shared_axes": [1, 2]}, [2, 3, 4], False),
    ("prelu_int_axis", {"type": "PReLU", "shared_axes": 2}, [3, 4], False),
    ("softmax_seq", {"type": "Softmax"}, [3, 4], False),
    ("softmax_image", {"type": "Softmax", "axis": 3}, [2, 2, 3], False),
    ("rescaling", {"type": "Rescaling", "scale": 0.5, "offset": -1.0}, [2, 2, 3], False),
    ("unit_normalization_seq", {"type": "UnitNormalization"}, [3, 4], False),
    ("unit_normalization_image", {"type": "UnitNormalization", "axis": 3}, [2, 2, 3], False),
    ("group_normalization_image", {"type": "GroupNormalization", "groups": 2}, [2, 2, 4], False),
    ("group_normalization_instance",
     {"type": "GroupNormalization", "groups": -1, "center": False}, [3, 4], False),
    ("group_normalization_flat",
     {"type": "GroupNormalization", "groups": 1, "scale": False, "epsilon": 0.01}, [6], False),
    ("batch_normalization_no_center", {"type": "BatchNormalization", "center": False}, [3, 4],
     True),
    ("batch_normalization_no_scale", {"type": "BatchNormalization", "scale": False}, [2, 2, 3],
     True),
    ("batch_normalization_axis",
     {"type": "BatchNormalization", "axis": 2, "center": False, "scale": False}, [3, 4], True),
    ("batch_normalization_inference", {"type": "BatchNormalization", "scale": False}, [6],
     False),
]


def flat(t):
    return [float(v) for v in np.asarray(t, dtype=np.float32).reshape(-1)]


def case(args, shape, training):
    kwargs = {k: v for k, v in args.items() if k != "type"}
    layer = getattr(keras.layers, args["type"])(**kwargs)
    n = BATCH * int(np.prod(shape))
    x = tf.constant((2 * np.sin(0.9 * np.arange(n) + 0.1)).astype(np.float32).reshape([BATCH] + shape))
    layer.build(x.shape)
    weights = {}
    for k, w in enumerate(layer.weights):
        size = int(np.prod(w.shape))
        v = (0.8 + 0.3 * np.sin(0.7 * np.arange(size) + k)).astype(np.float32)
        w.assign(v.reshape(w.shape))
        weights[w.name] = {"shape": list(w.shape), "values": flat(v)}
    trainable = list(layer.trainable_weights)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=training)
        r = tf.constant(np.cos(0.5 * np.arange(int(np.prod(y.shape))) + 0.2).astype(np.float32))
        loss = tf.reduce_sum(tf.reshape(y, [-1]) * r)
    grads = tape.gradient(loss, [x] + trainable)
    return {
        "layer": args,
        "training": training,
        "input": {"shape": [BATCH] + shape, "values": flat(x)},
        "weights": weights,
        "output": flat(y),
        "input_grad": flat(grads[0]),
        "weight_grads": {w.name: flat(g) for w, g in zip(trainable, grads[1:])},
    }


def main():
    out = {
        "keras": keras.__version__,
        "tensorflow": tf.__version__,
        "formulas": {
            "input, flat index i": "2 sin(0.9 i + 0.1)",
            "weight k of layer.weights, flat index i": "0.8 + 0.3 sin(0.7 i + k)",
            "loss": "sum(output * r), r[i] = cos(0.5 i + 0.2)",
        },
        "cases": {name: case(a, s, t) for name, a, s, t in CASES},
    }
    path = os.path.join(
        os.path.dirname(__file__), "../../crates/kiln/tests/data/small_layers_reference.json"
    )
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.normpath(path)}: {len(CASES)} cases")


if __name__ == "__main__":
    main()
