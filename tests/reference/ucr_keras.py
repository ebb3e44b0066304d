"""Keras 3 side of kiln's real-sequence-data runs: the models of examples/ucr/*.toml trained on
the UCR archive's ItalyPowerDemand (scripts/ucr-data.sh installs it), same split, optimizer,
epochs and batch size, for a few seeds; prints each seed's test accuracy and the mean.

  /root/.cache/kiln/tfvenv/bin/python tests/reference/ucr_keras.py [lstm|conv1d ...] [--seeds 0 1 2]

The numbers go into bench/README.md ("Real sequence data"), beside kiln's.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

DATA = os.environ.get("UCR_DIR", "/usr/local/share/datasets/ucr") + "/ItalyPowerDemand"
EPOCHS = 100  # as [fit] epochs in examples/ucr/*.toml
BATCH = 32


def load(split):
    return np.load(f"{DATA}/x_{split}.npy"), np.load(f"{DATA}/y_{split}.npy")


def lstm_model(steps):
    """examples/ucr/italy-power-demand-lstm.toml"""
    return keras.Sequential(
        [
            keras.Input((steps, 1)),
            layers.LSTM(32),
            layers.Dense(2, activation="softmax"),
        ]
    )


def conv1d_model(steps):
    """examples/ucr/italy-power-demand-conv1d.toml: keras.io's
    timeseries_classification_from_scratch make_model (64 filters per block; ReLU()
    written Activation("relu"), as the config does)."""
    model = [keras.Input((steps, 1))]
    for _ in range(3):
        model += [
            layers.Conv1D(64, 3, padding="same"),
            layers.BatchNormalization(),
            layers.Activation("relu"),
        ]
    model += [layers.GlobalAveragePooling1D(), layers.Dense(2, activation="softmax")]
    return keras.Sequential(model)


MODELS = {"lstm": lstm_model, "conv1d": conv1d_model}


def run(kind, seed):
    keras.utils.set_random_seed(seed)
    (x, y), (xt, yt) = load("train"), load("test")
    model = MODELS[kind](x.shape[1])
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    start = time.time()
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=True, verbose=0)
    seconds = time.time() - start
    _, acc = model.evaluate(xt, yt, batch_size=BATCH, verbose=0)
    return acc, seconds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="*", default=["lstm", "conv1d"], choices=list(MODELS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = p.parse_args()
    print(f"keras {keras.__version__}, backend {keras.backend.backend()}, {EPOCHS} epochs")
    for kind in args.models:
        accs = []
        for seed in args.seeds:
            acc, seconds = run(kind, seed)
            accs.append(acc)
            print(f"{kind} seed {seed}: test accuracy {acc:.4f} ({seconds:.1f} s training)")
        print(f"{kind}: mean test accuracy {np.mean(accs):.4f} over seeds {args.seeds}")


if __name__ == "__main__":
    main()
