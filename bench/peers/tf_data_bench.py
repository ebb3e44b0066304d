"""tf.data side of bench/data.sh: the three input-pipeline benchmarks, and their data.

    python tf_data_bench.py prepare --cache DIR          # writes the TFRecord file and the JPEG folder once
    python tf_data_bench.py run --bench fmnist|tfrecord|jpeg --cache DIR [--epochs 3]

`run` builds the pipeline the way the tf.data performance guide writes it (every map with
num_parallel_calls=AUTOTUNE, prefetch(AUTOTUNE), deterministic order, tf.data's default),
iterates it `--epochs` times (each epoch a fresh iterator, as Keras' fit does), and prints one
JSON line: examples/s of every epoch and the mean over epochs 2.. (the first, with graph
tracing, thread start-up and a cold page cache, is the warm-up and is excluded).

The kiln side runs the same pipelines from bench/configs/data-*.toml with `kiln data bench`.
"""

import argparse
import gzip
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

AUTOTUNE = tf.data.AUTOTUNE
FASHION = "/usr/share/datasets/fashion-mnist"
BATCH = 128
# Data of the TFRecord and JPEG benchmarks (under the cache directory).
TFRECORD_FILE = "bench-data/images-100k.tfrecord"
TFRECORD_RECORDS = 100_000
JPEG_DIR = "bench-data/jpeg-20k"
JPEG_IMAGES = 20_000


def read_idx(path):
    """An IDX file (MNIST layout, gzip) as a NumPy array (big-endian header, uint8 data)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def fashion(split="train"):
    images = read_idx(f"{FASHION}/{split}-images-idx3-ubyte.gz")
    labels = read_idx(f"{FASHION}/{split}-labels-idx1-ubyte.gz")
    return images, labels


def rgb32(images):
    """Fashion-MNIST 28x28 gray images as 32x32x3 uint8 (2-pixel zero border, gray in all
    three channels, each channel's values shifted a little so the three differ)."""
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2)))
    return np.stack([padded, padded // 2 + 64, 255 - padded], axis=-1).astype(np.uint8)


def prepare(cache):
    """Writes the TFRecord file and the JPEG folder under `cache` unless they exist."""
    images, labels = fashion()
    record = os.path.join(cache, TFRECORD_FILE)
    if not os.path.exists(record):
        os.makedirs(os.path.dirname(record), exist_ok=True)
        tmp = record + ".tmp"
        # 100k records: the 60k training images, then the first 40k again.
        idx = np.arange(TFRECORD_RECORDS) % len(images)
        pixels = rgb32(images)
        with tf.io.TFRecordWriter(tmp) as w:
            for i in idx:
                ex = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "image": tf.train.Feature(
                                bytes_list=tf.train.BytesList(value=[pixels[i].tobytes()])
                            ),
                            "label": tf.train.Feature(
                                int64_list=tf.train.Int64List(value=[int(labels[i])])
                            ),
                        }
                    )
                )
                w.write(ex.SerializeToString())
        os.replace(tmp, record)
        print(f"prepare: wrote {record}", file=sys.stderr)
    folder = os.path.join(cache, JPEG_DIR)
    if not os.path.exists(folder):
        tmp = folder + ".tmp"
        pixels = rgb32(images[:JPEG_IMAGES])
        for i in range(JPEG_IMAGES):
            d = os.path.join(tmp, f"class_{labels[i]}")
            os.makedirs(d, exist_ok=True)
            # quality 95, 4:2:0 chroma subsampling: tf.io.encode_jpeg's defaults.
            data = tf.io.encode_jpeg(pixels[i], quality=95).numpy()
            with open(os.path.join(d, f"{i:05d}.jpg"), "wb") as f:
                f.write(data)
        os.replace(tmp, folder)
        print(f"prepare: wrote {folder}", file=sys.stderr)


def fmnist_ds(cache):
    """IDX -> x/255 -> shuffle(10000) -> batch(128) -> prefetch."""
    images, labels = fashion()
    ds = tf.data.Dataset.from_tensor_slices((images, labels.astype(np.int64)))
    ds = ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y), num_parallel_calls=AUTOTUNE)
    return ds.shuffle(10000).batch(BATCH).prefetch(AUTOTUNE)


def tfrecord_ds(cache):
    """TFRecord -> parse -> decode_raw uint8 [32,32,3] -> float32 -> random horizontal flip
    -> batch(128) -> prefetch."""
    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(record):
        e = tf.io.parse_single_example(record, spec)
        x = tf.reshape(tf.io.decode_raw(e["image"], tf.uint8), [32, 32, 3])
        x = tf.image.random_flip_left_right(tf.cast(x, tf.float32))
        return x, e["label"]

    ds = tf.data.TFRecordDataset(os.path.join(cache, TFRECORD_FILE))
    return ds.map(parse, num_parallel_calls=AUTOTUNE).batch(BATCH).prefetch(AUTOTUNE)


def jpeg_ds(cache):
    """Folder of JPEGs in class subfolders -> read + decode (RGB) -> resize 64x64 bilinear
    (float32) -> batch(128) -> prefetch: what keras.utils.image_dataset_from_directory(
    image_size=(64, 64), shuffle=False) builds (keras/src/utils/image_dataset_utils.py:
    paths_and_labels_to_dataset and _load_image_tf), written out."""
    root = os.path.join(cache, JPEG_DIR)
    classes = sorted(os.listdir(root))
    paths, labels = [], []
    for label, c in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, c))):
            paths.append(os.path.join(root, c, name))
            labels.append(label)

    def load(path, label):
        img = tf.image.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return tf.image.resize(img, (64, 64), method="bilinear"), label

    ds = tf.data.Dataset.from_tensor_slices((paths, np.array(labels, np.int64)))
    return ds.map(load, num_parallel_calls=AUTOTUNE).batch(BATCH).prefetch(AUTOTUNE)


BENCHES = {"fmnist": fmnist_ds, "tfrecord": tfrecord_ds, "jpeg": jpeg_ds}


def run(bench, cache, epochs):
    ds = BENCHES[bench](cache)
    rates = []
    for _ in range(epochs):
        n = 0
        start = time.perf_counter()
        for x, _y in ds:
            n += int(x.shape[0])
        rates.append(n / (time.perf_counter() - start))
    timed = rates[1:] or rates
    print(
        json.dumps(
            {
                "framework": "tf.data",
                "version": tf.__version__,
                "bench": bench,
                "examples_per_second": sum(timed) / len(timed),
                "epoch_examples_per_second": rates,
                "examples_per_epoch": n,
                "epochs_timed": len(timed),
            }
        )
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["prepare", "run"])
    p.add_argument("--cache", required=True, help="the kiln cache dir (bench-data/ inside)")
    p.add_argument("--bench", choices=sorted(BENCHES))
    p.add_argument("--epochs", type=int, default=3)
    a = p.parse_args()
    if a.command == "prepare":
        prepare(a.cache)
    else:
        run(a.bench, a.cache, a.epochs)


if __name__ == "__main__":
    main()
