"""kiln's ONNX export checked by onnx and onnxruntime, and `kiln serve` exercised with requests.

1. Trains small models on the real Fashion-MNIST with `kiln train` (a few steps each): the
   README's MLP, the README's CNN, a CNN with BatchNormalization, AveragePooling2D, Dropout,
   Dense on images and gelu/tanh/sigmoid, one with ZeroPadding2D and GlobalAveragePooling2D,
   and one reading the images as sequences (Cropping1D, LayerNormalization,
   MultiHeadAttention).
2. Exports them (`kiln export`), checks each model.onnx with onnx.checker, and runs it with
   onnxruntime on 64 test images: the outputs must equal `kiln predict`'s within 1e-5 (kiln
   predict applies the run's rescale and turns logits into probabilities; the ONNX graph is the
   bare model, so the script does both around onnxruntime).
   Functional models `kiln predict` cannot run (two inputs; a text model of Embedding,
   PositionEmbedding, Add, TransformerEncoder, LayerNormalization, attention over another value,
   Cropping1D and BatchNormalization on sequences; the weightless shape, merge and pooling
   layers; the 1-D, grouped, dilated, transposed, depthwise and separable convolutions and the
   1-D pooling; the image preprocessing layers; the volume layers) are checked with the `onnx_forward` example
   instead: it exports the seeded model and prints kiln's forward pass on the same inputs.
   Together the models use every layer built into kiln (the Rust test
   `export::tests::the_onnx_interop_models_use_every_builtin_layer` checks that).
3. Serves them (`kiln serve --model-config-file`, batching on) and checks with `requests`:
   status, metadata, :predict in both formats equal to onnxruntime within 1e-5, TF Serving's
   error codes (400, 401, 404, 413), metrics and health, a hot reload of version 2 under load
   with zero failed requests, and a graceful SIGTERM.

Usage: onnx_serving_interop.py --kiln target/release/kiln [--data-dir DIR]
                              [--onnx-forward target/release/examples/onnx_forward]
"""

import argparse
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnx
import onnxruntime as ort
import requests

TOL = 1e-5

MODELS = {
    "interop-mlp": """
layers = [
  { type = "Input", shape = [28, 28] },
  { type = "Flatten" },
  { type = "Dense", units = 512, activation = "relu" },
  { type = "Dense", units = 512, activation = "relu" },
  { type = "Dense", units = 10, activation = "softmax" },
]
""",
    "interop-cnn": """
layers = [
  { type = "Input", shape = [28, 28, 1] },
  { type = "Conv2D", filters = 32, kernel_size = 3, padding = "same", activation = "relu" },
  { type = "MaxPooling2D", pool_size = 2 },
  { type = "Conv2D", filters = 64, kernel_size = 3, padding = "same", activation = "relu" },
  { type = "MaxPooling2D", pool_size = 2 },
  { type = "Flatten" },
  { type = "Dense", units = 128, activation = "relu" },
  { type = "Dense", units = 10 },
]
""",
    "interop-layers": """
layers = [
  { type = "Input", shape = [28, 28, 1] },
  { type = "Conv2D", filters = 6, kernel_size = [3, 5], strides = 2, padding = "same" },
  { type = "BatchNormalization" },
  { type = "Activation", activation = "gelu" },
  { type = "AveragePooling2D", pool_size = 3, strides = 2, padding = "same" },
  { type = "MaxPooling2D", pool_size = 2, strides = 1 },
  { type = "Dense", units = 5, activation = "tanh" },
  { type = "Dropout", rate = 0.3 },
  { type = "Flatten" },
  { type = "Dense", units = 16, activation = "sigmoid" },
  { type = "BatchNormalization" },
  { type = "Dense", units = 10, activation = "softmax" },
]
""",
    "interop-pad-gap": """
layers = [
  { type = "Input", shape = [28, 28, 1] },
  { type = "ZeroPadding2D", padding = [[1, 2], [0, 3]] },
  { type = "Conv2D", filters = 8, kernel_size = 3, strides = 2, activation = "relu" },
  { type = "GlobalAveragePooling2D" },
  { type = "Dense", units = 10, activation = "softmax" },
]
""",
    "interop-seq": """
layers = [
  { type = "Input", shape = [28, 28] },
  { type = "Cropping1D", cropping = [2, 3] },
  { type = "Dense", units = 16 },
  { type = "LayerNormalization" },
  { type = "MultiHeadAttention", num_heads = 2, key_dim = 4 },
  { type = "Flatten" },
  { type = "Dense", units = 10, activation = "softmax" },
]
""",
}

# Functional models run by the onnx_forward example: their [model] table and a function that
# makes seeded inputs, by Input name.
FUNCTIONAL = {
    "interop-two-inputs": (
        """
layers = [
  { type = "Input", shape = [6, 5, 2], name = "image" },
  { type = "Input", shape = [6, 5, 1], name = "mask" },
  { type = "Concatenate", inputs = ["image", "mask"], name = "joined" },
  { type = "Conv2D", filters = 4, kernel_size = 3, padding = "same", activation = "relu", inputs = "joined", name = "c1" },
  { type = "Conv2D", filters = 4, kernel_size = 1, inputs = "image", name = "c2" },
  { type = "Add", inputs = ["c1", "c2"], name = "sum" },
  { type = "LayerNormalization", inputs = "sum", name = "norm" },
  { type = "Concatenate", axis = 1, inputs = ["norm", "c2"], name = "tall" },
  { type = "GlobalAveragePooling2D", inputs = "tall", name = "pool" },
  { type = "Dense", units = 3, activation = "softmax", inputs = "pool", name = "probs" },
]
outputs = ["probs"]
""",
        lambda rng: {
            "image": rng.normal(size=(16, 6, 5, 2)),
            "mask": rng.uniform(size=(16, 6, 5, 1)),
        },
    ),
    "interop-text": (
        """
layers = [
  { type = "Input", shape = [12], name = "tokens" },
  { type = "Embedding", input_dim = 50, output_dim = 8, inputs = "tokens", name = "emb" },
  { type = "PositionEmbedding", sequence_length = 16, inputs = "emb", name = "pos" },
  { type = "Add", inputs = ["emb", "pos"], name = "embedded" },
  { type = "TransformerEncoder", intermediate_dim = 16, num_heads = 2, activation = "gelu", dropout = 0.1, inputs = "embedded", name = "encoder" },
  { type = "LayerNormalization", inputs = "encoder", name = "norm" },
  { type = "MultiHeadAttention", num_heads = 2, key_dim = 3, value_dim = 5, dropout = 0.1, use_causal_mask = true, inputs = ["norm", "encoder"], name = "cross" },
  { type = "Cropping1D", cropping = [1, 2], inputs = "cross", name = "crop" },
  { type = "BatchNormalization", inputs = "crop", name = "bn" },
  { type = "Flatten", inputs = "bn", name = "flat" },
  { type = "Dense", units = 4, inputs = "flat", name = "logits" },
]
outputs = ["logits"]
""",
        # Ids outside [0, 50) are clipped into it, by kiln as by the graph.
        lambda rng: {"tokens": np.concatenate([rng.integers(0, 50, size=(15, 12)), [[-3, 55] + [7] * 10]])},
    ),
    # The weightless shape, merge and pooling layers, images read in Keras' channels-last
    # order through Permute and Reshape.
    "interop-shape-layers": (
        """
layers = [
  { type = "Input", shape = [6, 4, 2], name = "image" },
  { type = "Input", shape = [6], name = "vec" },
  { type = "UpSampling2D", size = [1, 2], inputs = "image", name = "up2" },
  { type = "Cropping2D", cropping = [[1, 1], [2, 2]], inputs = "up2", name = "crop" },
  { type = "Permute", dims = [2, 3, 1], inputs = "crop", name = "perm" },
  { type = "GlobalMaxPooling2D", keepdims = true, inputs = "perm", name = "gmp2" },
  { type = "Reshape", target_shape = [4], inputs = "gmp2", name = "gmp2_flat" },
  { type = "Reshape", target_shape = [-1, 4], inputs = "perm", name = "seq" },
  { type = "UpSampling1D", inputs = "seq", name = "up1" },
  { type = "ZeroPadding1D", padding = [1, 2], inputs = "up1", name = "pad1" },
  { type = "GlobalAveragePooling1D", inputs = "pad1", name = "gap1" },
  { type = "GlobalMaxPooling1D", inputs = "pad1", name = "gmp1" },
  { type = "Dense", units = 4, inputs = "vec", name = "dv" },
  { type = "Multiply", inputs = ["gap1", "gmp1", "dv"], name = "mul" },
  { type = "Subtract", inputs = ["gmp1", "gap1"], name = "sub" },
  { type = "Average", inputs = ["mul", "sub", "gmp2_flat"], name = "avg" },
  { type = "Maximum", inputs = ["avg", "dv"], name = "max" },
  { type = "Minimum", inputs = ["avg", "dv", "gap1"], name = "min" },
  { type = "RepeatVector", n = 3, inputs = "max", name = "rep" },
  { type = "Permute", dims = [2, 1], inputs = "rep", name = "rep_t" },
  { type = "Reshape", target_shape = [2, 3, 2], inputs = "rep_t", name = "grid" },
  { type = "Reshape", target_shape = [12], inputs = "grid", name = "rep_flat" },
  { type = "Concatenate", inputs = ["rep_flat", "min"], name = "both" },
  { type = "Dense", units = 3, inputs = "both", name = "out" },
]
outputs = ["out"]
""",
        lambda rng: {"image": rng.normal(size=(16, 6, 4, 2)), "vec": rng.normal(size=(16, 6))},
    ),
    # The convolutions and 1-D pooling: causal, dilated, grouped, strided and transposed
    # windows on sequences and images, depthwise and separable convolutions.
    "interop-convolutions": (
        """
layers = [
  { type = "Input", shape = [12, 4], name = "seq" },
  { type = "Input", shape = [6, 5, 4], name = "image" },
  { type = "Conv1D", filters = 6, kernel_size = 3, padding = "causal", dilation_rate = 2, groups = 2, activation = "relu", inputs = "seq", name = "c1" },
  { type = "MaxPooling1D", pool_size = 3, strides = 2, padding = "same", inputs = "c1", name = "mp1" },
  { type = "Conv1DTranspose", filters = 3, kernel_size = 3, strides = 2, padding = "same", inputs = "mp1", name = "t1" },
  { type = "AveragePooling1D", pool_size = 3, strides = 2, padding = "same", inputs = "t1", name = "ap1" },
  { type = "Conv1D", filters = 4, kernel_size = 2, strides = 2, padding = "same", activation = "softmax", inputs = "ap1", name = "c1b" },
  { type = "Flatten", inputs = "c1b", name = "seq_flat" },
  { type = "Conv2D", filters = 6, kernel_size = 2, dilation_rate = 2, groups = 2, padding = "same", inputs = "image", name = "c2" },
  { type = "DepthwiseConv2D", kernel_size = 3, depth_multiplier = 2, strides = 2, padding = "same", activation = "tanh", inputs = "c2", name = "dw" },
  { type = "Conv2DTranspose", filters = 4, kernel_size = 3, strides = 2, padding = "same", output_padding = 1, inputs = "dw", name = "t2" },
  { type = "Conv2DTranspose", filters = 2, kernel_size = 2, dilation_rate = 2, inputs = "t2", name = "t2d" },
  { type = "SeparableConv2D", filters = 3, kernel_size = 3, strides = 2, depth_multiplier = 2, activation = "relu", inputs = "t2d", name = "sep" },
  { type = "GlobalAveragePooling2D", inputs = "sep", name = "gap" },
  { type = "Concatenate", inputs = ["seq_flat", "gap"], name = "both" },
  { type = "Dense", units = 3, inputs = "both", name = "out" },
]
outputs = ["out"]
""",
        lambda rng: {"seq": rng.normal(size=(16, 12, 4)), "image": rng.normal(size=(16, 6, 5, 4))},
    ),
    # The volume layers, as keras.io's 3D CT-scan classifier stacks them: Conv3D (strided with
    # the odd `same` padding, dilated, grouped), the 3-D poolings, BatchNormalization, Dense
    # and Flatten on volumes (channels-last order), the global poolings.
    "interop-volumes": (
        """
layers = [
  { type = "Input", shape = [7, 6, 5, 2], name = "scan" },
  { type = "Conv3D", filters = 4, kernel_size = [3, 2, 2], strides = 2, padding = "same", activation = "relu", name = "c1" },
  { type = "BatchNormalization", name = "bn" },
  { type = "MaxPooling3D", pool_size = 2, strides = 1, padding = "same", name = "mp" },
  { type = "Conv3D", filters = 4, kernel_size = 2, dilation_rate = [1, 2, 1], groups = 2, padding = "same", activation = "tanh", name = "c2" },
  { type = "AveragePooling3D", pool_size = [2, 3, 2], strides = [1, 2, 1], padding = "same", name = "ap" },
  { type = "Dense", units = 3, activation = "softmax", name = "per_voxel" },
  { type = "Dropout", rate = 0.3, name = "drop" },
  { type = "Flatten", inputs = "drop", name = "flat" },
  { type = "GlobalAveragePooling3D", inputs = "c2", name = "gap" },
  { type = "GlobalMaxPooling3D", inputs = "mp", name = "gmp" },
  { type = "Concatenate", inputs = ["flat", "gap", "gmp"], name = "all" },
  { type = "Dense", units = 2, inputs = "all", name = "out" },
]
outputs = ["out"]
""",
        lambda rng: {"scan": rng.normal(size=(16, 7, 6, 5, 2))},
    ),
    # Every activation function, after a Dense (so that values reach every branch).
    "interop-activations": (
        """
layers = [
  { type = "Input", shape = [6], name = "x" },
  { type = "Dense", units = 8, activation = "swish" },
  { type = "Dense", units = 8, activation = "elu" },
  { type = "Dense", units = 8, activation = "selu" },
  { type = "Dense", units = 8, activation = "softplus" },
  { type = "Dense", units = 8, activation = "softsign" },
  { type = "Dense", units = 8, activation = "hard_sigmoid" },
  { type = "Dense", units = 8, activation = "mish" },
  { type = "Dense", units = 8, activation = "silu" },
  { type = "Activation", activation = "exponential" },
  { type = "Dense", units = 3, activation = "gelu" },
]
""",
        lambda rng: {"x": rng.normal(size=(16, 6)) * 3},
    ),
    # Recurrent layers exported unrolled (every cell, both GRU variants, go_backwards,
    # return_sequences, Bidirectional's merge modes) and Dot on sequences and vectors.
    "interop-recurrent": (
        """
layers = [
  { type = "Input", shape = [7, 3], name = "series" },
  { type = "LSTM", units = 5, return_sequences = true, name = "lstm" },
  { type = "GRU", units = 4, reset_after = false, return_sequences = true, go_backwards = true, name = "gru" },
  { type = "Bidirectional", layer = { type = "SimpleRNN", units = 3, return_sequences = true, activation = "relu" }, name = "bi_rnn" },
  { type = "Bidirectional", merge_mode = "ave", layer = { type = "GRU", units = 3, return_sequences = true }, name = "bi_gru" },
  { type = "Bidirectional", merge_mode = "mul", layer = { type = "LSTM", units = 2, use_bias = false }, inputs = "bi_gru", name = "last" },
  { type = "Dot", axes = [1, 1], normalize = true, inputs = ["bi_rnn", "bi_gru"], name = "sim" },
  { type = "Flatten", inputs = "sim", name = "sim_flat" },
  { type = "Dot", axes = 1, inputs = ["last", "last"], name = "sq" },
  { type = "TimeDistributed", layer = { type = "Dense", units = 2, activation = "tanh" }, inputs = "lstm", name = "per_step" },
  { type = "Flatten", inputs = "per_step", name = "per_step_flat" },
  { type = "Concatenate", inputs = ["last", "sim_flat", "sq", "per_step_flat"], name = "joined" },
  { type = "Dense", units = 3, activation = "softmax", inputs = "joined", name = "probs" },
]
outputs = ["probs"]
""",
        lambda rng: {"series": rng.normal(size=(16, 7, 3))},
    ),
    # The activation, normalization and noise layers (the noise layers are the identity at
    # inference, as in an export); PReLU slopes start nonzero so that they matter.
    "interop-small-layers": (
        """
layers = [
  { type = "Input", shape = [4, 4, 4], name = "image" },
  { type = "Input", shape = [5, 6], name = "seq" },
  { type = "Rescaling", scale = 0.5, offset = -0.25, inputs = "image", name = "scaled" },
  { type = "GroupNormalization", groups = 2, inputs = "scaled", name = "gn" },
  { type = "PReLU", shared_axes = [1, 2], alpha_initializer = { class_name = "RandomUniform", minval = 0.1, maxval = 0.5 }, inputs = "gn", name = "prelu_img" },
  { type = "PReLU", alpha_initializer = { class_name = "RandomUniform", minval = 0.1, maxval = 0.5 }, inputs = "gn", name = "prelu_full" },
  { type = "Add", inputs = ["prelu_img", "prelu_full"], name = "img_sum" },
  { type = "SpatialDropout2D", rate = 0.3, inputs = "img_sum", name = "sd2" },
  { type = "BatchNormalization", center = false, inputs = "sd2", name = "bn" },
  { type = "ReLU", max_value = 1.0, negative_slope = 0.1, threshold = 0.2, inputs = "bn", name = "relu_all" },
  { type = "UnitNormalization", inputs = "relu_all", name = "unit_img" },
  { type = "Flatten", inputs = "unit_img", name = "image_flat" },
  { type = "SpatialDropout1D", rate = 0.3, inputs = "seq", name = "sd1" },
  { type = "GroupNormalization", groups = -1, scale = false, inputs = "sd1", name = "inorm" },
  { type = "ELU", alpha = 0.5, inputs = "inorm", name = "elu" },
  { type = "LeakyReLU", inputs = "elu", name = "leaky" },
  { type = "ReLU", threshold = 0.1, inputs = "leaky", name = "relu_cut" },
  { type = "GaussianNoise", stddev = 0.1, inputs = "relu_cut", name = "noise" },
  { type = "BatchNormalization", scale = false, inputs = "noise", name = "bn_seq" },
  { type = "Softmax", inputs = "bn_seq", name = "seq_softmax" },
  { type = "Flatten", inputs = "seq_softmax", name = "seq_flat" },
  { type = "Concatenate", inputs = ["image_flat", "seq_flat"], name = "both" },
  { type = "GaussianDropout", rate = 0.2, inputs = "both", name = "gdrop" },
  { type = "ReLU", max_value = 6.0, inputs = "gdrop", name = "relu6" },
  { type = "Dense", units = 8, inputs = "relu6", name = "hidden" },
  { type = "PReLU", alpha_initializer = "ones", inputs = "hidden", name = "prelu_flat" },
  { type = "UnitNormalization", inputs = "prelu_flat", name = "unit_flat" },
  { type = "Dense", units = 3, inputs = "unit_flat", name = "logits" },
  { type = "Softmax", inputs = "logits", name = "out" },
]
outputs = ["out"]
""",
        lambda rng: {"image": rng.normal(size=(16, 4, 4, 4)) * 2, "seq": rng.normal(size=(16, 5, 6))},
    ),
    # The image preprocessing layers: Normalization (Sub/Div, Mul/Add inverted), Resizing
    # (Resize, bilinear and nearest, after a crop to the aspect ratio), CenterCrop (Slice, and
    # Resize for an image smaller than the box), RandomCrop's inference box, and the random
    # layers, which are the identity at inference as in an export.
    "interop-image-preprocessing": (
        """
layers = [
  { type = "Input", shape = [6, 8, 3], name = "pixels" },
  { type = "Normalization", mean = [1.0, 2.0, 3.0], variance = [4.0, 9.0, 2.25], inputs = "pixels", name = "norm" },
  { type = "Normalization", axis = [], mean = 0.5, variance = 2.0, invert = true, inputs = "norm", name = "denorm" },
  { type = "RandomFlip", inputs = "denorm", name = "flip" },
  { type = "RandomRotation", factor = 0.1, inputs = "flip", name = "rot" },
  { type = "RandomZoom", height_factor = 0.2, inputs = "rot", name = "zoom" },
  { type = "RandomTranslation", height_factor = 0.1, width_factor = 0.1, inputs = "zoom", name = "shift" },
  { type = "RandomContrast", factor = 0.2, inputs = "shift", name = "contrast" },
  { type = "RandomBrightness", factor = 0.2, inputs = "contrast", name = "bright" },
  { type = "Resizing", height = 4, width = 5, inputs = "bright", name = "small" },
  { type = "Resizing", height = 9, width = 7, interpolation = "nearest", inputs = "bright", name = "big" },
  { type = "Resizing", height = 5, width = 5, crop_to_aspect_ratio = true, inputs = "bright", name = "square" },
  { type = "CenterCrop", height = 4, width = 6, inputs = "bright", name = "center" },
  { type = "CenterCrop", height = 7, width = 4, inputs = "bright", name = "center_big" },
  { type = "RandomCrop", height = 5, width = 5, inputs = "bright", name = "crop" },
  { type = "Flatten", inputs = "small", name = "f1" },
  { type = "Flatten", inputs = "big", name = "f2" },
  { type = "Flatten", inputs = "square", name = "f3" },
  { type = "Flatten", inputs = "center", name = "f4" },
  { type = "Flatten", inputs = "center_big", name = "f5" },
  { type = "Flatten", inputs = "crop", name = "f6" },
  { type = "Concatenate", inputs = ["f1", "f2", "f3", "f4", "f5", "f6"], name = "all" },
  { type = "Dense", units = 3, inputs = "all", name = "out" },
]
outputs = ["out"]
""",
        lambda rng: {"pixels": rng.normal(size=(16, 6, 8, 3)) + 2},
    ),
    # A shared tower (one Dense called on both inputs) and two outputs, each a graph output
    # named after its layer.
    "interop-siamese-heads": (
        """
layers = [
  { type = "Input", shape = [5], name = "left" },
  { type = "Input", shape = [5], name = "right" },
  { type = "Dense", units = 6, activation = "tanh", inputs = "left", name = "tower" },
  { name = "tower_right", shares = "tower", inputs = "right" },
  { type = "Concatenate", inputs = ["tower", "tower_right"], name = "pair" },
  { type = "Dense", units = 3, activation = "softmax", inputs = "pair", name = "class" },
  { type = "Dense", units = 1, inputs = "pair", name = "value" },
]
outputs = ["class", "value"]
""",
        lambda rng: {"left": rng.normal(size=(16, 5)), "right": rng.normal(size=(16, 5))},
    ),
}

# from_logits for the CNN (as examples/fashion-mnist/cnn.toml), probabilities for the others.
LOSS = {
    "interop-cnn": '{ type = "sparse_categorical_crossentropy", from_logits = true }',
}


def config(name, data_dir):
    loss = LOSS.get(name, '"sparse_categorical_crossentropy"')
    return f"""name = "{name}"
seed = 3
[data]
data_dir = "{data_dir}"
rescale = 0.00392156862745098
[model]
{MODELS[name]}
[compile]
optimizer = "adamw"
loss = {loss}
metrics = ["accuracy"]
[fit]
epochs = 1
batch_size = 64
steps_per_epoch = 8
"""


def test_images(data_dir, n):
    raw = gzip.open(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz")).read()
    return np.frombuffer(raw[16 : 16 + n * 784], dtype=np.uint8).reshape(n, 28, 28)


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")
    print(f"ok: {what}")


def check_functional(tool, work):
    """Each FUNCTIONAL model: onnxruntime on its export equals kiln's forward pass."""
    rng = np.random.default_rng(11)
    for name, (model, make_inputs) in FUNCTIONAL.items():
        cfg = os.path.join(work, f"{name}.toml")
        with open(cfg, "w") as f:
            f.write(f'name = "{name}"\nseed = 5\n[data]\n[model]\n{model}\n[compile]\n'
                    'optimizer = "sgd"\nloss = "mse"\n')
        inputs = {k: v.astype(np.float32) for k, v in make_inputs(rng).items()}
        args = []
        for k, v in inputs.items():
            np.save(os.path.join(work, f"{name}-{k}.npy"), v)
            args.append(f"{k}={os.path.join(work, f'{name}-{k}.npy')}")
        path = os.path.join(work, f"{name}.onnx")
        kiln_rows = np.array(json.loads(run([tool, cfg, path] + args))["predictions"], dtype=np.float32)
        model = onnx.load(path)
        onnx.checker.check_model(model, full_check=True)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        expected = ["input_layer"] if len(inputs) == 1 else list(inputs)
        check(names == expected, f"{name}: checker passes, graph inputs {names}")
        feed = dict(zip(names, inputs.values()))
        # Several outputs: kiln's rows hold them side by side, in `outputs` order.
        outs = sess.run(None, feed)
        out = np.concatenate([o.reshape(len(kiln_rows), -1) for o in outs], axis=1)
        diff = np.abs(out - kiln_rows).max()
        check(diff <= TOL, f"{name}: onnxruntime equals kiln's forward pass (max |diff| {diff:.2e})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--onnx-forward", help="default: examples/onnx_forward beside --kiln")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    tool = args.onnx_forward or os.path.join(os.path.dirname(kiln), "examples", "onnx_forward")
    work = tempfile.mkdtemp(prefix="kiln-onnx-interop-")
    check_functional(tool, work)
    images = test_images(args.data_dir, 64)
    np.save(os.path.join(work, "images.npy"), images.astype(np.float32))
    exports = os.path.join(work, "exports")
    ort_out = {}

    for name in MODELS:
        cfg = os.path.join(work, f"{name}.toml")
        with open(cfg, "w") as f:
            f.write(config(name, args.data_dir))
        run_dir = os.path.join(work, "runs", name)
        run([kiln, "train", cfg, "--run-dir", run_dir])
        run([kiln, "export", run_dir, "--out", exports])
        path = os.path.join(exports, name, "1", "model.onnx")
        model = onnx.load(path)
        onnx.checker.check_model(model, full_check=True)
        check(model.opset_import[0].version == 17, f"{name}: opset 17, checker passes")
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        inp = sess.get_inputs()[0]
        check(
            inp.name == "input_layer" and isinstance(inp.shape[0], str),
            f"{name}: input {inp.name} {inp.shape} has a dynamic batch axis",
        )
        shape = [int(d) for d in inp.shape[1:]]
        x = (images.astype(np.float32) * np.float32(0.00392156862745098)).reshape([-1] + shape)
        out = sess.run(["output_0"], {"input_layer": x})[0]
        # A batch of 1 through the dynamic axis gives the same rows.
        one = sess.run(["output_0"], {"input_layer": x[:1]})[0]
        check(np.abs(one - out[:1]).max() <= TOL, f"{name}: batch of 1 matches")
        ort_out[name] = (x, out)
        probs = softmax(out) if name in LOSS else out
        pred = json.loads(run([kiln, "predict", run_dir, os.path.join(work, "images.npy")]))
        kp = np.array(pred["predictions"], dtype=np.float32)
        diff = np.abs(kp - probs).max()
        check(diff <= TOL, f"{name}: onnxruntime equals kiln predict (max |diff| {diff:.2e})")

    # -- kiln serve ---------------------------------------------------------------------------
    models_toml = os.path.join(work, "models.toml")
    with open(models_toml, "w") as f:
        for name in MODELS:
            f.write(f'[[models]]\nname = "{name}"\nbase_path = "exports/{name}"\n\n')
    token_file = os.path.join(work, "token")
    with open(token_file, "w") as f:
        f.write("interop-token\n")
    batching = os.path.join(work, "batching.txt")
    with open(batching, "w") as f:
        f.write("max_batch_size { value: 32 }\nbatch_timeout_micros { value: 2000 }\n")
    port = free_port()
    server = subprocess.Popen(
        [
            kiln, "serve", "--model-config-file", models_toml, "--rest-api-port", str(port),
            "--auth-token-file", token_file, "--batching-parameters-file", batching,
            "--max-body-bytes", "2000000",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    base = f"http://127.0.0.1:{port}"
    s = requests.Session()
    s.headers["Authorization"] = "Bearer interop-token"
    for _ in range(200):
        try:
            if requests.get(f"{base}/v2/health/ready", timeout=1).status_code == 200:
                break
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    else:
        server.kill()
        sys.exit("FAILED: kiln serve did not become ready:\n" + server.stdout.read())
    try:
        check(requests.get(f"{base}/v1/models/interop-cnn").status_code == 401, "401 without the token")
        st = s.get(f"{base}/v1/models/interop-cnn").json()
        check(st["model_version_status"][0]["state"] == "AVAILABLE", "status: AVAILABLE")
        meta = s.get(f"{base}/v1/models/interop-cnn/metadata").json()
        dims = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]["input_layer"]["tensor_shape"]["dim"]
        check([d["size"] for d in dims] == ["-1", "28", "28", "1"], "metadata: signature shape")
        for name, (x, out) in ort_out.items():
            r = s.post(f"{base}/v1/models/{name}:predict", json={"instances": x[:8].tolist()})
            got = np.array(r.json()["predictions"], dtype=np.float32)
            check(np.abs(got - out[:8]).max() <= TOL, f"{name}: served predictions equal onnxruntime")
            r = s.post(f"{base}/v1/models/{name}/versions/1:predict", json={"inputs": {"input_layer": x[8:12].tolist()}})
            got = np.array(r.json()["outputs"], dtype=np.float32)
            check(np.abs(got - out[8:12]).max() <= TOL, f"{name}: columnar format too")
        x, out = ort_out["interop-cnn"]
        url = f"{base}/v1/models/interop-cnn:predict"
        # Concurrent requests, batched: each gets its own rows.
        results = [None] * 16

        def one(i):
            r = s.post(url, json={"instances": x[i : i + 1].tolist()})
            results[i] = np.array(r.json()["predictions"], dtype=np.float32)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        check(all(np.abs(results[i] - out[i : i + 1]).max() <= TOL for i in range(16)), "16 concurrent requests")
        errors = {
            "truncated JSON": (s.post(url, data='{"instances": [[1'), 400),
            "NaN": (s.post(url, data='{"instances": [NaN]}'), 400),
            "wrong shape": (s.post(url, json={"instances": [[1.0, 2.0]]}), 400),
            "both formats": (s.post(url, json={"instances": [], "inputs": []}), 400),
            "unknown model": (s.post(f"{base}/v1/models/nope:predict", json={"instances": []}), 404),
            "path traversal": (s.post(f"{base}/v1/models/..%2F..%2Fetc:predict", json={"instances": []}), 400),
            "body over the limit": (s.post(url, data=b" " * 3_000_000), 413),
        }
        for what, (r, code) in errors.items():
            check(r.status_code == code and "error" in r.json(), f"{what}: {code} {r.json()['error'][:70]!r}")
        check("expects shape [-1, 28, 28, 1]" in errors["wrong shape"][0].json()["error"], "the 400 names the expected shape")
        metrics = s.get(f"{base}/monitoring/prometheus/metrics").text
        check('kiln_serve_requests_total{model="interop-cnn",version="1",code="200"}' in metrics, "metrics")

        # Hot reload: version 2 appears while clients keep asking; no request fails.
        stop, failures, count = threading.Event(), [], [0]

        def hammer():
            while not stop.is_set():
                r = s.post(url, json={"instances": x[:2].tolist()})
                count[0] += 1
                if r.status_code != 200:
                    failures.append(r.text)

        threads = [threading.Thread(target=hammer) for _ in range(4)]
        [t.start() for t in threads]
        time.sleep(0.5)
        run([kiln, "export", os.path.join(work, "runs", "interop-cnn"), "--out", exports, "--version", "2"])
        for _ in range(100):
            st = s.get(f"{base}/v1/models/interop-cnn").json()["model_version_status"]
            if st[0]["version"] == "2" and st[0]["state"] == "AVAILABLE" and st[1]["state"] == "END":
                break
            time.sleep(0.1)
        time.sleep(0.5)
        stop.set()
        [t.join() for t in threads]
        check(st[0]["version"] == "2" and st[1]["state"] == "END", "version 2 loaded, version 1 unloaded")
        check(not failures, f"hot reload under load: {count[0]} requests, {len(failures)} failed")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            code = None
    check(code == 0, f"SIGTERM: kiln serve exited with {code}")
    print("onnx/serving interop: all checks passed")


if __name__ == "__main__":
    main()
