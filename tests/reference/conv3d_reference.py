"""Known answers for kiln's volume layers (Conv3D, MaxPooling3D, AveragePooling3D,
GlobalAveragePooling3D, GlobalMaxPooling3D, and Flatten, Dense and BatchNormalization on
`(depth, height, width, channels)` inputs), computed once with Keras 3 on the CPU.

Run:
    /root/.cache/kiln/tfvenv/bin/python tests/reference/conv3d_reference.py

(TensorFlow 2.21, Keras 3.15.) Writes crates/kiln/tests/data/conv3d_reference.json
(deterministic), read by crates/kiln/src/model/layers/conv3d_tests.rs through the checks of
conv_tests.rs. The format and formulas are convolution_reference.py's: input flat value i (Keras'
channels-last layout, batch 2) is `sin(0.9 i + 0.1)`, weight j's flat value i is
`0.5 sin(0.7 i + 0.9 j + 0.3)`, and the gradients are those of `sum(output * r)` with
`r[i] = cos(0.5 i + 0.2)`, with respect to the input and every trainable weight.
BatchNormalization runs in training mode (batch statistics), as kiln's check does.

It also prints, per layer, the output shape and the trainable / non-trainable parameter counts
of keras.io's 3D CT-scan classifier (`3D_image_classification`'s `get_model`), copied into
conv3d_tests.rs' `the_keras_io_ct_scan_model_has_keras_shapes_counts_and_estimate`.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
import keras

from convolution_reference import wave, write

BATCH = 2

# (case name, layer arguments with `type`, input shape without the batch axis)
CASES = [
    ("conv3d_valid", {"type": "Conv3D", "filters": 2, "kernel_size": 2}, [3, 4, 3, 2]),
    ("conv3d_same_strided", {"type": "Conv3D", "filters": 3, "kernel_size": [3, 2, 2],
                             "strides": 2, "padding": "same", "activation": "relu"},
     [5, 4, 3, 2]),
    ("conv3d_same_even", {"type": "Conv3D", "filters": 2, "kernel_size": 2, "padding": "same",
                          "activation": "sigmoid"}, [3, 3, 2, 1]),
    ("conv3d_dilated", {"type": "Conv3D", "filters": 2, "kernel_size": [2, 2, 1],
                        "dilation_rate": [2, 1, 1]}, [4, 3, 2, 2]),
    ("conv3d_groups_no_bias", {"type": "Conv3D", "filters": 4, "kernel_size": [1, 2, 2],
                               "groups": 2, "use_bias": False, "activation": "tanh"},
     [2, 3, 3, 4]),
    ("max_pooling3d_default", {"type": "MaxPooling3D"}, [4, 4, 5, 2]),
    ("max_pooling3d_same", {"type": "MaxPooling3D", "pool_size": 3, "strides": 2,
                            "padding": "same"}, [5, 4, 3, 2]),
    ("average_pooling3d_same", {"type": "AveragePooling3D", "pool_size": 2,
                                "strides": [1, 2, 2], "padding": "same"}, [3, 5, 4, 2]),
    ("average_pooling3d_valid", {"type": "AveragePooling3D", "pool_size": [2, 3, 2],
                                 "strides": 1}, [3, 4, 3, 1]),
    ("global_average_pooling3d", {"type": "GlobalAveragePooling3D"}, [2, 3, 4, 3]),
    ("global_average_pooling3d_keepdims", {"type": "GlobalAveragePooling3D",
                                           "keepdims": True}, [2, 2, 3, 2]),
    ("global_max_pooling3d", {"type": "GlobalMaxPooling3D"}, [2, 3, 2, 3]),
    ("flatten_volume", {"type": "Flatten"}, [2, 3, 2, 2]),
    ("dense_volume", {"type": "Dense", "units": 3, "activation": "softmax"}, [2, 2, 3, 2]),
    ("batch_normalization_volume", {"type": "BatchNormalization"}, [2, 3, 2, 3]),
]


def case(args, shape):
    kwargs = {k: v for k, v in args.items() if k != "type"}
    layer = getattr(keras.layers, args["type"])(**kwargs)
    x = tf.constant(wave(BATCH * int(np.prod(shape)), 0.1).reshape([BATCH] + shape))
    layer.build(x.shape)
    for j, w in enumerate(layer.weights):
        w.assign(wave(int(np.prod(w.shape)), 0.9 * j + 0.3, 0.5, 0.7).reshape(w.shape))
    # Weights before the call (BatchNormalization's moving statistics move in training).
    weights = [
        {"name": w.path.split("/")[-1], "shape": list(w.shape), "values": flat(w)}
        for w in layer.weights
    ]
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        r = tf.constant(np.cos(0.5 * np.arange(int(np.prod(y.shape))) + 0.2).astype(np.float32))
        loss = tf.reduce_sum(tf.reshape(y, [-1]) * r)
    grads = tape.gradient(loss, [x] + list(layer.trainable_weights))
    return {
        "layer": args,
        "input": {"shape": [BATCH] + shape, "values": flat(x)},
        "weights": weights,
        "output": {"shape": list(y.shape), "values": flat(y)},
        "input_grad": flat(grads[0]),
        "weight_grads": [flat(g) for g in grads[1:]],
    }


def flat(t):
    return [float(v) for v in np.asarray(t, dtype=np.float32).reshape(-1)]


def ct_scan_model():
    """keras.io's 3D CT-scan classifier, as its `get_model(128, 128, 64)` builds it."""
    inputs = keras.Input((128, 128, 64, 1))
    x = inputs
    for filters in [64, 64, 128, 256]:
        x = keras.layers.Conv3D(filters=filters, kernel_size=3, activation="relu")(x)
        x = keras.layers.MaxPool3D(pool_size=2)(x)
        x = keras.layers.BatchNormalization()(x)
    x = keras.layers.GlobalAveragePooling3D()(x)
    x = keras.layers.Dense(units=512, activation="relu")(x)
    x = keras.layers.Dropout(0.3)(x)
    outputs = keras.layers.Dense(units=1, activation="sigmoid")(x)
    model = keras.Model(inputs, outputs)
    for layer in model.layers[1:]:
        trainable = sum(int(np.prod(w.shape)) for w in layer.trainable_weights)
        print(f"{layer.__class__.__name__} {tuple(layer.output.shape[1:])} "
              f"{trainable} {layer.count_params() - trainable}")
    print(f"total {model.count_params()}")


def main():
    write("conv3d_reference.json", CASES, case)
    ct_scan_model()


if __name__ == "__main__":
    main()
