"""Known answers for kiln's tests, computed with TensorFlow/Keras.

Run (TensorFlow 2.21, Keras 3, CPU):
    python3 -m venv /tmp/tf && /tmp/tf/bin/pip install tensorflow-cpu numpy
    /tmp/tf/bin/python tests/reference/keras_reference.py
The printed values are pasted into crates/kiln/src/model/keras_parity_tests.rs.
"""
import numpy as np
import keras
from keras import layers

np.set_printoptions(precision=9, floatmode="maxprec")

print("# shapes and parameter counts: (layer, input shape) -> (output shape, params)")
cases = [
    ("Dense(10)", (784,), layers.Dense(10)),
    ("Dense(7, use_bias=False)", (5, 3), layers.Dense(7, use_bias=False)),
    ("Conv2D(32, 3, padding=same)", (28, 28, 1), layers.Conv2D(32, 3, padding="same")),
    ("Conv2D(64, 3, padding=valid)", (13, 13, 32), layers.Conv2D(64, 3)),
    ("Conv2D(8, (3, 5), strides=2, padding=same)", (11, 10, 3), layers.Conv2D(8, (3, 5), strides=2, padding="same")),
    ("Conv2D(4, 2, strides=(2, 3), padding=valid, use_bias=False)", (9, 10, 6), layers.Conv2D(4, 2, strides=(2, 3), use_bias=False)),
    ("MaxPooling2D()", (28, 28, 32), layers.MaxPooling2D()),
    ("MaxPooling2D(3, strides=2, padding=same)", (7, 7, 4), layers.MaxPooling2D(3, strides=2, padding="same")),
    ("AveragePooling2D(2)", (13, 13, 8), layers.AveragePooling2D(2)),
    ("AveragePooling2D(3, strides=1, padding=same)", (5, 6, 2), layers.AveragePooling2D(3, strides=1, padding="same")),
    ("Flatten()", (7, 7, 64), layers.Flatten()),
    ("Dropout(0.5)", (128,), layers.Dropout(0.5)),
    ("BatchNormalization()", (14, 14, 32), layers.BatchNormalization()),
    ("BatchNormalization()", (100,), layers.BatchNormalization()),
    ("Activation(gelu)", (10,), layers.Activation("gelu")),
]
for name, shape, layer in cases:
    m = keras.Sequential([keras.Input(shape), layer])
    print(f"{name:60s} {shape} -> {m.output_shape[1:]} params={m.count_params()}")

print("# a CNN's forward pass with fixed weights")
def pattern(shape, f):
    n = int(np.prod(shape))
    return f(np.arange(n, dtype=np.float64) * 0.37).reshape(shape).astype(np.float32)

model = keras.Sequential([
    keras.Input((5, 6, 2)),
    layers.Conv2D(3, 3, strides=2, padding="same", activation="relu", name="conv"),
    layers.MaxPooling2D(2, strides=1, padding="same", name="max"),
    layers.AveragePooling2D(2, padding="same", name="avg"),
    layers.BatchNormalization(name="bn"),
    layers.Flatten(),
    layers.Dense(4, activation="softmax", name="dense"),
])
model.get_layer("conv").set_weights([pattern((3, 3, 2, 3), np.sin), pattern((3,), np.cos) * 0.1])
model.get_layer("bn").set_weights([
    np.array([1.0, 1.5, 0.5], np.float32), np.array([0.1, -0.2, 0.3], np.float32),
    np.array([0.2, 0.1, 0.0], np.float32), np.array([0.5, 2.0, 1.0], np.float32),
])
model.get_layer("dense").set_weights([pattern((12, 4), np.cos), pattern((4,), np.sin) * 0.1])
x = pattern((2, 5, 6, 2), np.cos)
y = model.predict(x, verbose=0)
print("output", repr(y.ravel()))
loss = keras.losses.SparseCategoricalCrossentropy()(np.array([1, 3]), y)
print("sparse_categorical_crossentropy labels [1, 3]:", repr(float(loss)))
logits = np.array([[2.0, -1.0, 0.5], [0.1, 0.2, 0.3]], np.float32)
print("from_logits sparse CCE, labels [0, 2]:",
      repr(float(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(np.array([0, 2]), logits))))
print("categorical CCE from probs:",
      repr(float(keras.losses.CategoricalCrossentropy()(np.array([[0, 1, 0], [0, 0, 1.0]]), np.array([[0.2, 0.7, 0.1], [0.3, 0.3, 0.4]], np.float32)))))
print("binary CE from probs:",
      repr(float(keras.losses.BinaryCrossentropy()(np.array([[1.0], [0.0]]), np.array([[0.9], [0.2]], np.float32)))))
print("binary CE from logits:",
      repr(float(keras.losses.BinaryCrossentropy(from_logits=True)(np.array([[1.0, 0.0]]), np.array([[0.3, -1.2]], np.float32)))))
print("mse:", repr(float(keras.losses.MeanSquaredError()(np.array([[1.0, 2.0]]), np.array([[1.5, 1.0]], np.float32)))))
