"""Keras 3 model files for kiln's `.keras` reader (crates/kiln/src/keras_file/tests.rs).

Writes crates/kiln/tests/data/keras/{cnn,mixed,text}.keras, {cnn,mixed}.h5 (the legacy HDF5
format, `model.save("x.h5")`) and expected.json: three small
models saved with `model.save`, their weights set to `0.1 * sin(0.7 * i + 0.3 * k)` (flat index
`i` of weight `k` in `model.weights` order; moving variances `0.5 + |that|` so that they stay
positive), fixed inputs and Keras' predictions on them.

- cnn: Sequential Conv2D (same, relu), MaxPooling2D, BatchNormalization, Flatten, Dropout,
  Dense softmax; compiled with Adam(1e-3), sparse_categorical_crossentropy, accuracy.
- mixed: functional Dense, Dense, Add, LSTM(return_sequences), MultiHeadAttention,
  BatchNormalization, GlobalAveragePooling1D, Bidirectional(GRU), Concatenate, Dense;
  uncompiled.
- text: integer input, Embedding, SimpleRNN, LayerNormalization, Dense; compiled with SGD.

    /root/.cache/kiln/tfvenv/bin/python tests/reference/keras_files_reference.py
"""
import json
import os

import numpy as np
import keras
from keras import layers

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "kiln", "tests", "data", "keras")


def fix_weights(model):
    for k, w in enumerate(model.weights):
        i = np.arange(int(np.prod(w.shape)), dtype=np.float64)
        v = 0.1 * np.sin(0.7 * i + 0.3 * k)
        if "variance" in w.path:
            v = 0.5 + np.abs(v)
        w.assign(v.reshape(w.shape).astype(np.float32))


def cnn():
    m = keras.Sequential([keras.Input((8, 8, 1)), layers.Conv2D(3, 3, padding="same", activation="relu"),
                          layers.MaxPooling2D(), layers.BatchNormalization(), layers.Flatten(),
                          layers.Dropout(0.25), layers.Dense(4, activation="softmax")])
    m.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])
    return m, np.random.default_rng(0).normal(size=(3, 8, 8, 1)).astype(np.float32)


def mixed():
    inp = keras.Input((8, 6), name="x")
    a = layers.Dense(6)(inp)
    b = layers.Dense(6)(a)
    c = layers.Add()([a, b])
    seq = layers.LSTM(5, return_sequences=True)(c)
    att = layers.MultiHeadAttention(2, 3)(seq, seq)
    n = layers.BatchNormalization()(att)
    pooled = layers.GlobalAveragePooling1D()(n)
    bi = layers.Bidirectional(layers.GRU(3))(seq)
    out = layers.Dense(2)(layers.Concatenate()([pooled, bi]))
    return keras.Model(inp, out), np.random.default_rng(1).normal(size=(3, 8, 6)).astype(np.float32)


def text():
    m = keras.Sequential([keras.Input((5,), dtype="int32"), layers.Embedding(20, 4), layers.SimpleRNN(3),
                          layers.LayerNormalization(), layers.Dense(2)])
    m.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
    return m, np.random.default_rng(2).integers(0, 20, size=(3, 5)).astype(np.int32)


expected = {"keras_version": keras.__version__, "models": {}}
os.makedirs(OUT, exist_ok=True)
for name, build in [("cnn", cnn), ("mixed", mixed), ("text", text)]:
    model, x = build()
    fix_weights(model)
    model.save(os.path.join(OUT, f"{name}.keras"))
    if name != "text":
        model.save(os.path.join(OUT, f"{name}.h5"))
    y = model.predict(x, verbose=0)
    expected["models"][name] = {"input_shape": list(x.shape), "inputs": x.reshape(-1).tolist(),
                                "predictions": np.asarray(y).reshape(-1).tolist(),
                                "params": int(model.count_params())}
with open(os.path.join(OUT, "expected.json"), "w") as f:
    json.dump(expected, f, indent=1)
    f.write("\n")
print("wrote", OUT)
