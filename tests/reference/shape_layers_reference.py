"""Known answers for kiln's weightless shape and merge layers (Reshape, Permute, RepeatVector,
the merge layers, Dot, global pooling, UpSampling, ZeroPadding1D, Cropping2D), computed once with
Keras 3 on the CPU.

Run:
    /root/.cache/kiln/tfvenv/bin/python tests/reference/shape_layers_reference.py

(TensorFlow 2.21, Keras 3.15.) Writes crates/kiln/tests/data/shape_layers_reference.json
(deterministic), read by crates/kiln/src/model/layers/shape_tests.rs. For every case: the layer's
arguments (the same dict is kiln's TOML table and Keras' constructor arguments), its inputs
(batch 2, input k's flat value i in Keras' channels-last layout is `sin(0.9 i + 1.3 k + 0.1)`),
Keras' output, and the gradients of `sum(output * r)` with respect to every input, where `r`'s
flat value i is `cos(0.5 i + 0.2)`.
"""
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
import keras

BATCH = 2

# (case name, layer arguments with `type`, input shapes without the batch axis)
CASES = [
    ("reshape_flat_to_image", {"type": "Reshape", "target_shape": [2, 3, 2]}, [[12]]),
    ("reshape_image_to_seq", {"type": "Reshape", "target_shape": [-1, 2]}, [[2, 3, 2]]),
    ("reshape_seq_to_flat", {"type": "Reshape", "target_shape": [-1]}, [[3, 4]]),
    ("reshape_image_to_image", {"type": "Reshape", "target_shape": [3, -1, 4]}, [[2, 3, 4]]),
    ("permute_image", {"type": "Permute", "dims": [3, 1, 2]}, [[2, 3, 4]]),
    ("permute_image_hw", {"type": "Permute", "dims": [2, 1, 3]}, [[2, 3, 4]]),
    ("permute_seq", {"type": "Permute", "dims": [2, 1]}, [[3, 4]]),
    ("repeat_vector", {"type": "RepeatVector", "n": 3}, [[4]]),
    ("add_flat", {"type": "Add"}, [[5], [5]]),
    ("multiply_image", {"type": "Multiply"}, [[2, 2, 3]] * 3),
    ("subtract_seq", {"type": "Subtract"}, [[3, 2]] * 2),
    ("average_flat", {"type": "Average"}, [[5]] * 3),
    ("maximum_image", {"type": "Maximum"}, [[2, 2, 3]] * 2),
    ("minimum_seq", {"type": "Minimum"}, [[3, 2]] * 3),
    ("dot_flat", {"type": "Dot", "axes": 1}, [[5], [5]]),
    ("dot_flat_normalized", {"type": "Dot", "axes": -1, "normalize": True}, [[5], [5]]),
    ("dot_seq_features", {"type": "Dot", "axes": 2}, [[3, 4], [5, 4]]),
    ("dot_seq_steps", {"type": "Dot", "axes": [1, 1]}, [[3, 4], [3, 2]]),
    ("dot_seq_mixed_normalized", {"type": "Dot", "axes": [2, 1], "normalize": True}, [[3, 4], [4, 2]]),
    ("gap1d", {"type": "GlobalAveragePooling1D"}, [[4, 3]]),
    ("gap1d_keepdims", {"type": "GlobalAveragePooling1D", "keepdims": True}, [[4, 3]]),
    ("gmp1d", {"type": "GlobalMaxPooling1D"}, [[4, 3]]),
    ("gmp1d_keepdims", {"type": "GlobalMaxPooling1D", "keepdims": True}, [[4, 3]]),
    ("gmp2d", {"type": "GlobalMaxPooling2D"}, [[3, 4, 2]]),
    ("gmp2d_keepdims", {"type": "GlobalMaxPooling2D", "keepdims": True}, [[3, 4, 2]]),
    ("gap2d_keepdims", {"type": "GlobalAveragePooling2D", "keepdims": True}, [[3, 4, 2]]),
    ("upsampling1d_default", {"type": "UpSampling1D"}, [[3, 2]]),
    ("upsampling1d_3", {"type": "UpSampling1D", "size": 3}, [[3, 2]]),
    ("upsampling2d_default", {"type": "UpSampling2D"}, [[2, 3, 2]]),
    ("upsampling2d_pair", {"type": "UpSampling2D", "size": [2, 3]}, [[2, 3, 2]]),
    ("zero_padding1d_default", {"type": "ZeroPadding1D"}, [[3, 2]]),
    ("zero_padding1d_pair", {"type": "ZeroPadding1D", "padding": [1, 2]}, [[3, 2]]),
    ("cropping2d_default", {"type": "Cropping2D"}, [[4, 5, 2]]),
    ("cropping2d_int", {"type": "Cropping2D", "cropping": 1}, [[4, 5, 2]]),
    ("cropping2d_pair", {"type": "Cropping2D", "cropping": [1, 2]}, [[4, 6, 2]]),
    ("cropping2d_full", {"type": "Cropping2D", "cropping": [[1, 0], [1, 2]]}, [[4, 5, 2]]),
]


def values(n, k):
    return np.sin(0.9 * np.arange(n) + 1.3 * k + 0.1).astype(np.float32)


def case(args, shapes):
    kwargs = {k: v for k, v in args.items() if k != "type"}
    layer = getattr(keras.layers, args["type"])(**kwargs)
    xs = [
        tf.constant(values(BATCH * int(np.prod(s)), k).reshape([BATCH] + s))
        for k, s in enumerate(shapes)
    ]
    with tf.GradientTape() as tape:
        tape.watch(xs)
        y = layer(xs if len(xs) > 1 else xs[0])
        r = tf.constant(np.cos(0.5 * np.arange(int(np.prod(y.shape))) + 0.2).astype(np.float32))
        loss = tf.reduce_sum(tf.reshape(y, [-1]) * r)
    grads = tape.gradient(loss, xs)
    flat = lambda t: [float(v) for v in np.asarray(t, dtype=np.float32).reshape(-1)]
    return {
        "layer": args,
        "inputs": [{"shape": [BATCH] + s, "values": flat(x)} for s, x in zip(shapes, xs)],
        "output": {"shape": list(y.shape), "values": flat(y)},
        "grads": [flat(g) for g in grads],
    }


def main():
    out = {
        "keras": keras.__version__,
        "tensorflow": tf.__version__,
        "formulas": {
            "input k, flat index i": "sin(0.9 i + 1.3 k + 0.1)",
            "loss": "sum(output * r), r[i] = cos(0.5 i + 0.2)",
        },
        "cases": {name: case(args, shapes) for name, args, shapes in CASES},
    }
    path = os.path.join(
        os.path.dirname(__file__), "../../crates/kiln/tests/data/shape_layers_reference.json"
    )
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.normpath(path)}: {len(CASES)} cases")


if __name__ == "__main__":
    main()
