"""TensorFlow/Keras: model.fit over a tf.data pipeline (shuffle, batch, map with AUTOTUNE,
prefetch AUTOTUNE). Prints one JSON line with training samples/s over epochs 2.. (the first
epoch, with graph tracing, is excluded)."""
import argparse
import json
import time

import numpy as np
import tensorflow as tf
import keras
from keras import layers

from fashion_mnist import train_set

p = argparse.ArgumentParser()
p.add_argument("--model", choices=["mlp", "cnn"], required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batch-size", type=int, default=128)
a = p.parse_args()

x, y = train_set()
x = x[..., None]


def model(kind):
    if kind == "mlp":
        return keras.Sequential([keras.Input((28, 28, 1)), layers.Flatten(),
                                 layers.Dense(512, activation="relu"), layers.Dense(512, activation="relu"),
                                 layers.Dense(10)])
    return keras.Sequential([keras.Input((28, 28, 1)),
                             layers.Conv2D(32, 3, padding="same", activation="relu"), layers.MaxPooling2D(),
                             layers.Conv2D(64, 3, padding="same", activation="relu"), layers.MaxPooling2D(),
                             layers.Flatten(), layers.Dense(128, activation="relu"), layers.Dense(10)])


ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(60000, seed=1).batch(a.batch_size)
      .map(lambda u, v: (tf.cast(u, tf.float32) / 255.0, v), num_parallel_calls=tf.data.AUTOTUNE)
      .prefetch(tf.data.AUTOTUNE))
m = model(a.model)
m.compile(optimizer=keras.optimizers.AdamW(), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
          metrics=["accuracy"])


class Timer(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.t = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        times.append(time.perf_counter() - self.t)


times = []
m.fit(ds, epochs=a.epochs, verbose=0, callbacks=[Timer()])
sps = [len(x) / t for t in times[1:]]
print(json.dumps({"framework": "tensorflow", "version": tf.__version__, "model": a.model,
                  "samples_per_second": float(np.mean(sps)), "epochs_timed": len(sps)}))
