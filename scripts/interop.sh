#!/usr/bin/env bash
# Interop tests against the real Python packages kiln's formats come from: TensorFlow reads
# and writes TFRecord / tf.train.Example files with kiln, the tensorboard package reads kiln's
# event files, onnxruntime runs kiln's ONNX exports and `requests` talks to `kiln serve`
# (tests/interop/*.py). Creates, once, a
# virtual environment with tensorflow-cpu, tensorboard, onnx, onnxruntime and requests under the build cache
# (${KILN_CACHE_DIR:-~/.cache/kiln}/tfvenv), builds the small kiln tools the scripts drive, and
# runs every script. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${KILN_CACHE_DIR:-$HOME/.cache/kiln}"
venv="$cache/tfvenv"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/target}"
if ! "$venv/bin/python" -c "import tensorflow, tensorboard" >/dev/null 2>&1; then
  echo "interop: creating $venv (tensorflow-cpu 2.21, tensorboard)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q "tensorflow-cpu==2.21.0" tensorboard numpy
fi
if ! "$venv/bin/python" -c "import onnx, onnxruntime, requests" >/dev/null 2>&1; then
  echo "interop: adding onnx, onnxruntime and requests to $venv"
  "$venv/bin/pip" install -q onnx onnxruntime requests
fi
py="$venv/bin/python"

# Built with the whole workspace's features (as `cargo test --workspace` builds them), so that
# Burn is not compiled a second time with another feature set.
cargo build --release -q --workspace --bins --examples
echo "== interop: TFRecord + tf.train.Example with TensorFlow"
"$py" tests/interop/tfrecord_interop.py --kiln-tool "$CARGO_TARGET_DIR/release/examples/tfrecord_tool"

echo "== interop: TensorBoard event files with the tensorboard package"
"$py" tests/interop/tensorboard_interop.py --tb-write "$CARGO_TARGET_DIR/release/examples/tb_write"

echo "== interop: a real kiln train stopped with SIGTERM and resumed; TensorBoard steps continue"
cargo build --release -q --workspace --bins --examples
"$py" tests/interop/tensorboard_resume_interop.py --kiln "$CARGO_TARGET_DIR/release/kiln"

echo "== interop: custom train steps (the DCGAN and VAE examples) in TensorBoard"
"$py" tests/interop/custom_step_tensorboard_interop.py --kiln-steps "$CARGO_TARGET_DIR/release/kiln-steps"

echo "== interop: HParams summaries of two kiln train runs with TensorBoard's HParams backend"
"$py" tests/interop/hparams_interop.py --kiln "$CARGO_TARGET_DIR/release/kiln"

echo "== interop: ONNX exports with onnxruntime, kiln serve with requests"
"$py" tests/interop/onnx_serving_interop.py --kiln "$CARGO_TARGET_DIR/release/kiln"

echo "== interop: Keras model files (.keras) in and out, fine-tuning, bad files, with Keras 3"
"$py" tests/interop/keras_file_interop.py --kiln "$CARGO_TARGET_DIR/release/kiln"

echo "== interop: TensorFlow Lite exports (float32, dynamic range int8) with TFLite's interpreter"
"$py" tests/interop/tflite_interop.py --kiln "$CARGO_TARGET_DIR/release/kiln"

echo "== load: kiln serve under a storm of malformed, valid, slow and half-open requests (bounded)"
# CI size; the full run (30,000 malformed + 6,000 valid) is in bench/README.md.
"$py" tests/load/serve_storm.py --kiln "$CARGO_TARGET_DIR/release/kiln" --malformed 3000 --valid 600 --slow 16
