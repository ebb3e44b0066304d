"""kiln's TensorFlow Lite export run by TensorFlow's own TFLite interpreter (issue 24).

1. Trains two models on the real Fashion-MNIST with `kiln train` (one short epoch each): the
   README's CNN (Conv2D, MaxPooling2D, Flatten, Dense, logits) and one with
   BatchNormalization, an Activation layer, AveragePooling2D, Dropout, a tanh Dense and a
   softmax output.
2. Exports each with `kiln export --format tflite` (float32), with `--quantization
   dynamic_range` (int8 kernels) and with `--quantization full_integer` (every tensor int8,
   calibrated on the run's first 500 training examples, float32 in and out).
3. Runs both files with `tf.lite.Interpreter` (batch resized to 500): the float32 file's
   outputs equal `kiln predict`'s within 1e-5 on 64 test images (kiln predict applies the
   run's rescale and a softmax to logits; the TFLite model is the bare model, so the script does
   both around the interpreter); on the 10,000 test images the dynamic-range file's accuracy is
   within 1 point of the float32 file's, and the file is at least 3.5x smaller. The signature
   is `serving_default` with the Input's name and `output_0`.

Usage: tflite_interop.py --kiln target/release/kiln [--data-dir DIR]
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np

warnings.filterwarnings("ignore")
import tensorflow as tf  # noqa: E402

TOL = 1e-5
MODELS = {
    "tflite-cnn": ("""
layers = [
  { type = "Input", shape = [28, 28, 1] },
  { type = "Conv2D", filters = 32, kernel_size = 3, padding = "same", activation = "relu" },
  { type = "MaxPooling2D", pool_size = 2 },
  { type = "Conv2D", filters = 64, kernel_size = 3, padding = "same", activation = "relu" },
  { type = "MaxPooling2D", pool_size = 2 },
  { type = "Flatten" },
  { type = "Dense", units = 128, activation = "relu" },
  { type = "Dense", units = 10 },
]""", '{ type = "sparse_categorical_crossentropy", from_logits = true }', True),
    "tflite-bn": ("""
layers = [
  { type = "Input", shape = [28, 28, 1] },
  { type = "Conv2D", filters = 16, kernel_size = 5, strides = 2, use_bias = false },
  { type = "BatchNormalization" },
  { type = "Activation", activation = "relu" },
  { type = "AveragePooling2D", pool_size = 2 },
  { type = "Flatten" },
  { type = "Dropout", rate = 0.2 },
  { type = "Dense", units = 64, activation = "tanh" },
  { type = "Dense", units = 10, activation = "softmax" },
]""", '"sparse_categorical_crossentropy"', False),
}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")
    print(f"ok: {what}")


def test_set(data_dir):
    x = np.frombuffer(gzip.open(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz")).read()[16:], np.uint8)
    y = np.frombuffer(gzip.open(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz")).read()[8:], np.uint8)
    return x.reshape(-1, 28, 28, 1), y


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def tflite_predict(path, x, logits):
    it = tf.lite.Interpreter(model_path=path)
    sig = it.get_signature_list()
    inp = it.get_input_details()[0]
    out = []
    for i in range(0, len(x), 500):
        batch = (x[i:i + 500] / 255.0).astype(np.float32)
        it.resize_tensor_input(inp["index"], batch.shape)
        it.allocate_tensors()
        it.set_tensor(inp["index"], batch)
        it.invoke()
        out.append(it.get_tensor(it.get_output_details()[0]["index"]))
    y = np.concatenate(out)
    return (softmax(y) if logits else y), sig


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kiln", required=True)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    x, y = test_set(a.data_dir)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (layers, loss, logits) in MODELS.items():
            cfg = os.path.join(tmp, f"{name}.toml")
            with open(cfg, "w") as f:
                f.write(f'name = "{name}"\nseed = 5\n[data]\ndata_dir = "{a.data_dir}"\n'
                        f'rescale = 0.00392156862745098\n[model]\n{layers}\n[compile]\n'
                        f'optimizer = "adamw"\nloss = {loss}\nmetrics = ["accuracy"]\n'
                        f'[fit]\nepochs = 1\nbatch_size = 64\nsteps_per_epoch = 200\n')
            run_dir = os.path.join(tmp, name)
            run([a.kiln, "train", cfg, "--run-dir", run_dir])
            out = os.path.join(tmp, "export")
            run([a.kiln, "export", run_dir, "--format", "tflite", "--out", out, "--version", "1"])
            run([a.kiln, "export", run_dir, "--format", "tflite", "--quantization", "dynamic_range",
                 "--out", out, "--version", "2"])
            run([a.kiln, "export", run_dir, "--format", "tflite", "--quantization", "full_integer",
                 "--out", out, "--version", "3"])
            f32_path = os.path.join(out, name, "1", "model.tflite")
            int8_path = os.path.join(out, name, "2", "model.tflite")
            full_path = os.path.join(out, name, "3", "model.tflite")

            npy = os.path.join(tmp, "x64.npy")
            np.save(npy, (x[:64, :, :, 0]).astype(np.uint8))
            kiln = np.array(json.loads(run([a.kiln, "predict", run_dir, npy]))["predictions"])
            f32, sig = tflite_predict(f32_path, x, logits)
            diff = float(np.abs(f32[:64] - kiln).max())
            check(diff <= TOL, f"{name}: TFLite float32 = kiln predict within {TOL} (max diff {diff:.2e})")
            check(sig == {"serving_default": {"inputs": ["input_layer"], "outputs": ["output_0"]}},
                  f"{name}: signature {sig}")
            q, _ = tflite_predict(int8_path, x, logits)
            acc_f32 = float((f32.argmax(1) == y).mean())
            acc_q = float((q.argmax(1) == y).mean())
            check(abs(acc_f32 - acc_q) <= 0.01,
                  f"{name}: test accuracy float32 {acc_f32:.4f}, dynamic range int8 {acc_q:.4f} (within 1 point)")
            ratio = os.path.getsize(f32_path) / os.path.getsize(int8_path)
            check(ratio >= 3.5, f"{name}: dynamic range file {ratio:.2f}x smaller")
            check(acc_f32 > 0.7, f"{name}: the trained model learned ({acc_f32:.3f} > 0.7)")
            full, _ = tflite_predict(full_path, x, logits)
            acc_full = float((full.argmax(1) == y).mean())
            check(abs(acc_f32 - acc_full) <= 0.01,
                  f"{name}: test accuracy float32 {acc_f32:.4f}, full integer int8 {acc_full:.4f} (within 1 point)")
            ratio = os.path.getsize(f32_path) / os.path.getsize(full_path)
            check(ratio >= 3.5, f"{name}: full integer file {ratio:.2f}x smaller")
            types = {d["dtype"].__name__ for d in tf.lite.Interpreter(model_path=full_path).get_tensor_details()}
            check("int8" in types and "int32" in types, f"{name}: full integer tensor types {sorted(types)}")
    print("tflite interop: all checks passed")


if __name__ == "__main__":
    main()
