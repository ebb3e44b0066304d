"""Known answers for kiln's convolution and 1-D pooling layers (Conv1D, Conv2D with
dilation_rate and groups, Conv1DTranspose, Conv2DTranspose, DepthwiseConv2D, SeparableConv2D,
MaxPooling1D, AveragePooling1D), computed once with Keras 3 on the CPU.

Run:
    /root/.cache/kiln/tfvenv/bin/python tests/reference/convolution_reference.py

(TensorFlow 2.21, Keras 3.15.) Writes crates/kiln/tests/data/convolution_reference.json
(deterministic), read by crates/kiln/src/model/layers/conv_tests.rs. For every case: the layer's
arguments (the same dict is kiln's TOML table and Keras' constructor arguments), its input
(batch 2, flat value i in Keras' channels-last layout is `sin(0.9 i + 0.1)`), its weights in
Keras' order (weight j's flat value i is `0.5 sin(0.7 i + 0.9 j + 0.3)`), Keras' output, and
the gradients of `sum(output * r)` with respect to the input and every weight, where `r`'s flat
value i is `cos(0.5 i + 0.2)`.
"""
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
import keras

BATCH = 2

# (case name, layer arguments with `type`, input shape without the batch axis)
CASES = [
    ("conv1d_valid", {"type": "Conv1D", "filters": 3, "kernel_size": 3}, [5, 2]),
    ("conv1d_same_strided", {"type": "Conv1D", "filters": 2, "kernel_size": 3, "strides": 2,
                             "padding": "same"}, [7, 2]),
    ("conv1d_same_even", {"type": "Conv1D", "filters": 2, "kernel_size": 4, "padding": "same",
                          "activation": "relu"}, [6, 2]),
    ("conv1d_causal_dilated", {"type": "Conv1D", "filters": 2, "kernel_size": 2,
                               "dilation_rate": 2, "padding": "causal",
                               "activation": "tanh"}, [6, 3]),
    ("conv1d_causal_strided", {"type": "Conv1D", "filters": 2, "kernel_size": 3, "strides": 2,
                               "padding": "causal"}, [7, 1]),
    ("conv1d_groups", {"type": "Conv1D", "filters": 4, "kernel_size": 2, "groups": 2,
                       "use_bias": False}, [5, 4]),
    ("max_pooling1d_default", {"type": "MaxPooling1D"}, [5, 2]),
    ("max_pooling1d_same", {"type": "MaxPooling1D", "pool_size": 3, "strides": 2,
                            "padding": "same"}, [6, 2]),
    ("average_pooling1d_same", {"type": "AveragePooling1D", "pool_size": 3, "strides": 2,
                                "padding": "same"}, [7, 2]),
    ("average_pooling1d_stride1", {"type": "AveragePooling1D", "pool_size": 2, "strides": 1},
     [4, 3]),
    ("conv2d_dilated_same", {"type": "Conv2D", "filters": 2, "kernel_size": 2,
                             "dilation_rate": 2, "padding": "same"}, [5, 5, 2]),
    ("conv2d_dilated_pair", {"type": "Conv2D", "filters": 2, "kernel_size": [2, 3],
                             "dilation_rate": [2, 1]}, [5, 5, 1]),
    ("conv2d_groups", {"type": "Conv2D", "filters": 4, "kernel_size": [2, 3], "groups": 2,
                       "activation": "relu"}, [4, 5, 4]),
    ("conv2d_groups_same_strided", {"type": "Conv2D", "filters": 6, "kernel_size": 3,
                                    "groups": 3, "strides": 2, "padding": "same"}, [5, 4, 3]),
    ("conv2d_transpose_valid", {"type": "Conv2DTranspose", "filters": 2, "kernel_size": 3,
                                "strides": 2}, [3, 3, 2]),
    ("conv2d_transpose_same", {"type": "Conv2DTranspose", "filters": 3, "kernel_size": [3, 2],
                               "strides": [2, 1], "padding": "same"}, [3, 4, 2]),
    ("conv2d_transpose_output_padding", {"type": "Conv2DTranspose", "filters": 2,
                                         "kernel_size": 3, "strides": 2, "padding": "same",
                                         "output_padding": 1}, [3, 3, 1]),
    ("conv2d_transpose_valid_output_padding", {"type": "Conv2DTranspose", "filters": 2,
                                               "kernel_size": 2, "strides": 3,
                                               "output_padding": [1, 2]}, [2, 3, 1]),
    ("conv2d_transpose_dilated", {"type": "Conv2DTranspose", "filters": 2, "kernel_size": 2,
                                  "dilation_rate": 2, "activation": "sigmoid"}, [3, 3, 2]),
    ("conv2d_transpose_stride_over_kernel", {"type": "Conv2DTranspose", "filters": 1,
                                             "kernel_size": 2, "strides": 3,
                                             "use_bias": False}, [2, 3, 1]),
    ("conv1d_transpose_same", {"type": "Conv1DTranspose", "filters": 2, "kernel_size": 3,
                               "strides": 2, "padding": "same"}, [4, 2]),
    ("conv1d_transpose_valid", {"type": "Conv1DTranspose", "filters": 3, "kernel_size": 4,
                                "strides": 2, "output_padding": 1}, [3, 2]),
    ("depthwise_same", {"type": "DepthwiseConv2D", "kernel_size": 3, "depth_multiplier": 2,
                        "padding": "same"}, [4, 4, 2]),
    ("depthwise_strided", {"type": "DepthwiseConv2D", "kernel_size": 2, "strides": 2,
                           "use_bias": False, "activation": "relu"}, [5, 5, 3]),
    ("depthwise_dilated", {"type": "DepthwiseConv2D", "kernel_size": 2, "dilation_rate": 2},
     [5, 4, 2]),
    ("separable_valid", {"type": "SeparableConv2D", "filters": 3, "kernel_size": 2,
                         "depth_multiplier": 2}, [4, 4, 2]),
    ("separable_same_strided", {"type": "SeparableConv2D", "filters": 2, "kernel_size": 3,
                                "strides": 2, "padding": "same", "activation": "relu"},
     [5, 5, 3]),
]


def wave(n, phase, scale=1.0, step=0.9):
    return (scale * np.sin(step * np.arange(n) + phase)).astype(np.float32)


def dilated(kernel, rate):
    """A transposed-convolution kernel `[k.., out, in]` with `rate - 1` zeros between its taps,
    and the index of its taps (TensorFlow's CPU kernels have no dilated transposed convolution;
    the dilated kernel computes the same map)."""
    spatial = kernel.shape[:-2]
    big = [(k - 1) * d + 1 for k, d in zip(spatial, rate)]
    out = np.zeros(big + list(kernel.shape[-2:]), np.float32)
    taps = tuple(slice(None, None, d) for d in rate)
    out[taps] = kernel
    return out, taps


def case(args, shape):
    kwargs = {k: v for k, v in args.items() if k != "type"}
    layer = getattr(keras.layers, args["type"])(**kwargs)
    x = tf.constant(wave(BATCH * int(np.prod(shape)), 0.1).reshape([BATCH] + shape))
    layer.build(x.shape)
    for j, w in enumerate(layer.weights):
        w.assign(wave(int(np.prod(w.shape)), 0.9 * j + 0.3, 0.5, 0.7).reshape(w.shape))
    run, taps = layer, None
    if "Transpose" in args["type"] and max(layer.dilation_rate) > 1:
        big, taps = dilated(layer.kernel.numpy(), layer.dilation_rate)
        config = dict(kwargs, kernel_size=big.shape[:-2], dilation_rate=1)
        run = getattr(keras.layers, args["type"])(**config)
        run.build(x.shape)
        run.kernel.assign(big)
        if run.use_bias:
            run.bias.assign(layer.bias)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = run(x)
        r = tf.constant(np.cos(0.5 * np.arange(int(np.prod(y.shape))) + 0.2).astype(np.float32))
        loss = tf.reduce_sum(tf.reshape(y, [-1]) * r)
    grads = tape.gradient(loss, [x] + list(run.weights))
    if taps is not None:
        grads[1] = np.asarray(grads[1])[taps]
    flat = lambda t: [float(v) for v in np.asarray(t, dtype=np.float32).reshape(-1)]
    return {
        "layer": args,
        "input": {"shape": [BATCH] + shape, "values": flat(x)},
        "weights": [
            {"name": w.path.split("/")[-1], "shape": list(w.shape), "values": flat(w)}
            for w in layer.weights
        ],
        "output": {"shape": list(y.shape), "values": flat(y)},
        "input_grad": flat(grads[0]),
        "weight_grads": [flat(g) for g in grads[1:]],
    }


def write(file_name, cases, run_case):
    """Writes crates/kiln/tests/data/<file_name>: run_case(args, shape) for each of `cases`."""
    out = {
        "keras": keras.__version__,
        "tensorflow": tf.__version__,
        "formulas": {
            "input, flat index i": "sin(0.9 i + 0.1)",
            "weight j, flat index i": "0.5 sin(0.7 i + 0.9 j + 0.3)",
            "loss": "sum(output * r), r[i] = cos(0.5 i + 0.2)",
        },
        "cases": {name: run_case(args, shape) for name, args, shape in cases},
    }
    path = os.path.join(os.path.dirname(__file__), "../../crates/kiln/tests/data", file_name)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.normpath(path)}: {len(cases)} cases")


def main():
    write("convolution_reference.json", CASES, case)


if __name__ == "__main__":
    main()
