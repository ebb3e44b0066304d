"""Fashion-MNIST from the IDX files of Debian's dataset-fashion-mnist, as float32 in [0, 1]."""
import gzip
import os

import numpy as np

DATA = os.environ.get("KILN_DATA_DIR", "/usr/share/datasets/fashion-mnist")


def _idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        raw = f.read()
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def train_set():
    """(images [60000, 28, 28] uint8, labels [60000] int64)."""
    return _idx("train-images-idx3-ubyte.gz"), _idx("train-labels-idx1-ubyte.gz").astype(np.int64)
