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
p.add_argument("--model", choices=["mlp", "cnn", "resnet-small", "lstm", "transformer"], required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batch-size", type=int, default=128)
p.add_argument("--take", type=int, default=None, help="train on the first N images (tf.data's take)")
p.add_argument("--precision", default="float32", help="Keras dtype policy: float32 or mixed_bfloat16")
a = p.parse_args()
keras.mixed_precision.set_global_policy(a.precision)

x, y = train_set()
x, y = x[:a.take, ..., None], y[:a.take]


def conv_bn(t, filters, kernel, name):
    t = layers.Conv2D(filters, kernel, padding="same", use_bias=False, name=name)(t)
    return layers.BatchNormalization(name=name + "_bn")(t)


def resnet_small():
    """bench/configs/resnet-small.toml: a stem and two residual blocks, GAP, Dense logits."""
    inp = keras.Input((28, 28, 1))
    stem = layers.ReLU()(conv_bn(inp, 32, 3, "stem"))
    t = layers.ReLU()(conv_bn(stem, 32, 3, "b1_conv1"))
    t = conv_bn(t, 32, 3, "b1_conv2")
    t = layers.ReLU()(layers.Add()([stem, t]))
    pool = layers.MaxPooling2D()(t)
    t = layers.ReLU()(conv_bn(pool, 64, 3, "b2_conv1"))
    t = conv_bn(t, 64, 3, "b2_conv2")
    proj = layers.Conv2D(64, 1, use_bias=False, name="b2_proj")(pool)
    t = layers.ReLU()(layers.Add()([proj, t]))
    t = layers.GlobalAveragePooling2D()(t)
    return keras.Model(inp, layers.Dense(10, dtype="float32")(t))


def encoder_block(t, heads=4, inner=128):
    """keras_hub's TransformerEncoder (post-norm, no dropout) from Keras' core layers."""
    f = t.shape[-1]
    a = layers.MultiHeadAttention(heads, f // heads)(t, t)
    t = layers.LayerNormalization(epsilon=1e-5)(layers.Add()([t, a]))
    h = layers.Dense(f)(layers.Dense(inner, activation="relu")(t))
    return layers.LayerNormalization(epsilon=1e-5)(layers.Add()([t, h]))


def transformer():
    """bench/configs/transformer.toml: 28 rows as steps, Dense(64), two encoder blocks, mean."""
    inp = keras.Input((28, 28, 1))
    t = layers.Dense(64)(layers.Reshape((28, 28))(inp))
    t = encoder_block(encoder_block(t))
    t = layers.GlobalAveragePooling1D()(t)
    return keras.Model(inp, layers.Dense(10, dtype="float32")(t))


def model(kind):
    if kind == "mlp":
        return keras.Sequential([keras.Input((28, 28, 1)), layers.Flatten(),
                                 layers.Dense(512, activation="relu"), layers.Dense(512, activation="relu"),
                                 layers.Dense(10, dtype="float32")])
    if kind == "resnet-small":
        return resnet_small()
    if kind == "transformer":
        return transformer()
    if kind == "lstm":
        return keras.Sequential([keras.Input((28, 28, 1)), layers.Reshape((28, 28)), layers.LSTM(128),
                                 layers.Dense(10, dtype="float32")])
    return keras.Sequential([keras.Input((28, 28, 1)),
                             layers.Conv2D(32, 3, padding="same", activation="relu"), layers.MaxPooling2D(),
                             layers.Conv2D(64, 3, padding="same", activation="relu"), layers.MaxPooling2D(),
                             layers.Flatten(), layers.Dense(128, activation="relu"), layers.Dense(10, dtype="float32")])


ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=1).batch(a.batch_size)
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
print(json.dumps({"framework": "tensorflow", "version": tf.__version__, "model": a.model, "precision": a.precision,
                  "samples_per_second": float(np.mean(sps)), "epochs_timed": len(sps)}))
