"""Keras 3 output shapes and parameter counts of the image preprocessing layers, as
crates/kiln/src/estimate/preprocessing_tests.rs asserts them (run once with tensorflow-cpu /
Keras 3; the test holds the numbers)."""
import numpy as np
import keras
from keras import layers

norm = layers.Normalization()
norm.adapt(np.random.default_rng(0).normal(size=(4, 16, 24, 3)).astype("float32"))
model = keras.Sequential([
    keras.Input((32, 40, 3)),
    layers.Resizing(24, 30),
    layers.CenterCrop(20, 28),
    layers.RandomCrop(16, 24),
    layers.RandomFlip(),
    layers.RandomRotation(0.1),
    layers.RandomZoom(0.2),
    layers.RandomTranslation(0.1, 0.1),
    layers.RandomContrast(0.2),
    layers.RandomBrightness(0.2),
    layers.Rescaling(0.5, offset=1.0),
    layers.Normalization(mean=[1.0, 2.0, 3.0], variance=[1.0, 4.0, 9.0]),
    norm,
    layers.Flatten(),
    layers.Dense(10),
])
for l in model.layers:
    trainable = sum(int(np.prod(w.shape)) for w in l.trainable_weights)
    fixed = sum(int(np.prod(w.shape)) for w in l.non_trainable_weights)
    print(type(l).__name__, tuple(l.output.shape), trainable, fixed)
