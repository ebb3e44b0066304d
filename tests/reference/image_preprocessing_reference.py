"""Known answers for kiln's image preprocessing layers (Normalization, Resizing, CenterCrop,
RandomCrop, RandomRotation, RandomZoom, RandomTranslation, RandomContrast, RandomBrightness),
computed once with Keras 3 (TensorFlow backend) on the CPU.

Run:
    /root/.cache/kiln/tfvenv/bin/python tests/reference/image_preprocessing_reference.py

(TensorFlow 2.21, Keras 3.15.) Writes crates/kiln/tests/data/image_preprocessing_reference.json
(deterministic), read by crates/kiln/src/model/layers/image_preprocessing_tests.rs. The random
layers run in training mode with degenerate factors (lower = upper), which makes their draw a
constant: RandomRotation((0.125, 0.125)) always turns by 45 degrees. For every case: the
layer's arguments (the same dict is kiln's TOML table and Keras' constructor arguments), its
input (batch 2, flat value i in Keras' channels-last layout is `127 + 120 sin(0.9 i + 0.1)`),
Keras' output, and the gradient of `sum(output * r)` with respect to the input, where `r`'s flat
value i is `cos(0.5 i + 0.2)` (null where TensorFlow's gradient is not the exact one: the
affine transforms' gradient in TensorFlow warps the output gradient back with the inverse
transform, an approximation).
"""
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
import keras

BATCH = 2
IMG = [5, 6, 2]


def affine(kind, fill, interpolation="bilinear", **extra):
    return {"type": kind, **extra, "fill_mode": fill, "interpolation": interpolation}


# (case name, layer arguments with `type`, input shape without the batch axis, training,
# exact gradient)
CASES = [
    ("normalization_channels",
     {"type": "Normalization", "mean": [1.0, 2.0], "variance": [4.0, 0.25]}, IMG, False, True),
    ("normalization_invert",
     {"type": "Normalization", "mean": [1.0, 2.0], "variance": [4.0, 0.25], "invert": True},
     IMG, False, True),
    ("normalization_scalar", {"type": "Normalization", "axis": [], "mean": 3.0, "variance": 2.0},
     [4], False, True),
    ("normalization_zero_variance",
     {"type": "Normalization", "mean": [1.0, 2.0, 0.0], "variance": [0.0, 1.0, 9.0]}, [3], False,
     True),
    ("resizing_bilinear_down", {"type": "Resizing", "height": 3, "width": 4}, IMG, False, True),
    ("resizing_bilinear_up", {"type": "Resizing", "height": 7, "width": 9}, IMG, False, True),
    ("resizing_nearest_down",
     {"type": "Resizing", "height": 3, "width": 4, "interpolation": "nearest"}, IMG, False, True),
    ("resizing_nearest_up",
     {"type": "Resizing", "height": 8, "width": 7, "interpolation": "nearest"}, IMG, False, True),
    ("resizing_crop_to_aspect_ratio",
     {"type": "Resizing", "height": 4, "width": 4, "crop_to_aspect_ratio": True}, IMG, False,
     True),
    ("center_crop", {"type": "CenterCrop", "height": 3, "width": 4}, IMG, False, True),
    ("center_crop_larger", {"type": "CenterCrop", "height": 6, "width": 4}, IMG, False, True),
    ("random_crop_training_smaller_input", {"type": "RandomCrop", "height": 6, "width": 4}, IMG,
     True, True),
    ("random_contrast", {"type": "RandomContrast", "factor": [-0.3, 0.3]}, IMG, True, True),
    ("random_contrast_range",
     {"type": "RandomContrast", "factor": [-0.5, 0.5], "value_range": [0, 200]}, IMG, True, True),
    ("random_brightness", {"type": "RandomBrightness", "factor": [0.2, 0.2]}, IMG, True, True),
    ("random_brightness_down",
     {"type": "RandomBrightness", "factor": [-0.1, -0.1], "value_range": [10, 180]}, IMG, True,
     True),
]
for fill in ["reflect", "wrap", "constant", "nearest"]:
    extra = {"fill_value": 7.5} if fill == "constant" else {}
    CASES += [
        (f"random_rotation_{fill}",
         affine("RandomRotation", fill, factor=[0.125, 0.125], **extra), IMG, True, False),
        (f"random_zoom_out_{fill}",
         affine("RandomZoom", fill, height_factor=[0.2, 0.2], **extra), IMG, True, False),
        (f"random_zoom_in_{fill}",
         affine("RandomZoom", fill, height_factor=[-0.3, -0.3], width_factor=[0.4, 0.4], **extra),
         IMG, True, False),
        (f"random_translation_{fill}",
         affine("RandomTranslation", fill, height_factor=[0.1, 0.1],
                width_factor=[-0.2, -0.2], **extra), IMG, True, False),
    ]
CASES += [
    ("random_rotation_nearest_interpolation",
     affine("RandomRotation", "reflect", "nearest", factor=[-0.2, -0.2]), IMG, True, False),
    ("random_translation_far_reflect",
     affine("RandomTranslation", "reflect", height_factor=[0.9, 0.9], width_factor=[-0.7, -0.7]),
     IMG, True, False),
    ("random_translation_far_wrap",
     affine("RandomTranslation", "wrap", height_factor=[-0.95, -0.95], width_factor=[0.8, 0.8]),
     IMG, True, False),
]


def flat(t):
    return [float(v) for v in np.asarray(t, dtype=np.float32).reshape(-1)]


def case(args, shape, training, exact):
    kwargs = {k: v for k, v in args.items() if k != "type"}
    if args["type"] == "Normalization" and kwargs.get("axis") == []:
        kwargs["axis"] = None
    layer = getattr(keras.layers, args["type"])(**kwargs)
    n = BATCH * int(np.prod(shape))
    x = tf.constant(
        (127 + 120 * np.sin(0.9 * np.arange(n) + 0.1)).astype(np.float32).reshape([BATCH] + shape))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=training)
        r = tf.constant(np.cos(0.5 * np.arange(int(np.prod(y.shape))) + 0.2).astype(np.float32))
        loss = tf.reduce_sum(tf.reshape(y, [-1]) * r)
    g = tape.gradient(loss, x) if exact else None
    return {
        "layer": args,
        "training": training,
        "input": {"shape": [BATCH] + shape, "values": flat(x)},
        "output": {"shape": list(y.shape), "values": flat(y)},
        "input_grad": None if g is None else flat(g),
        "params": int(layer.count_params()),
    }


def main():
    out = {
        "keras": keras.__version__,
        "tensorflow": tf.__version__,
        "formulas": {
            "input, flat index i": "127 + 120 sin(0.9 i + 0.1)",
            "loss": "sum(output * r), r[i] = cos(0.5 i + 0.2)",
        },
        "cases": {name: case(a, s, t, e) for name, a, s, t, e in CASES},
    }
    # Keras' parameter count of an adapted Normalization: mean, variance and count.
    norm = keras.layers.Normalization()
    norm.adapt(np.arange(24, dtype=np.float32).reshape(4, 3, 2))
    out["adapted_normalization"] = {
        "input_shape": [3, 2],
        "params": int(norm.count_params()),
        "mean": flat(norm.mean),
        "variance": flat(norm.variance),
    }
    path = os.path.join(
        os.path.dirname(__file__),
        "../../crates/kiln/tests/data/image_preprocessing_reference.json",
    )
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.normpath(path)}: {len(CASES)} cases")


if __name__ == "__main__":
    main()
