"""Known answers for kiln's gradient clipping, accumulation and loss weighting, computed once
with TensorFlow / Keras 3 on the CPU.

Run:
    /root/.cache/kiln/tfvenv/bin/python tests/reference/gradient_reference.py
(TensorFlow 2.21, Keras 3.15.) The printed values are pasted into
crates/kiln/src/compile/clipping.rs (clipping) and crates/kiln/src/compile/loss.rs (weighted
losses, class weights).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
import keras
from keras.src.trainers.data_adapters.data_adapter_utils import class_weight_to_sample_weights

np.set_printoptions(precision=9, floatmode="maxprec", suppress=False)


def show(name, values):
    flat = np.asarray(values, dtype=np.float32).reshape(-1)
    print(f"{name}: [{', '.join(repr(float(v)) for v in flat)}]")


# Three gradients of a small model: a [2, 3] kernel, a [3] bias, a [2] vector.
grads = [
    np.array([[0.5, -1.25, 2.0], [0.0, 3.5, -0.75]], dtype=np.float32),
    np.array([0.1, -0.2, 4.0], dtype=np.float32),
    np.array([-2.5, 1.5], dtype=np.float32),
]
print("# tf.clip_by_global_norm")
for clip in [1.0, 100.0]:
    clipped, norm = tf.clip_by_global_norm([tf.constant(g) for g in grads], clip)
    print(f"clip_norm={clip} global_norm={float(norm)!r}")
    for i, c in enumerate(clipped):
        show(f"  t{i}", c.numpy())
zeros = [np.zeros_like(g) for g in grads]
clipped, norm = tf.clip_by_global_norm([tf.constant(g) for g in zeros], 1.0)
print(f"zeros: global_norm={float(norm)!r}")
for i, c in enumerate(clipped):
    show(f"  t{i}", c.numpy())
inf = [g.copy() for g in grads]
inf[1][0] = np.inf
clipped, norm = tf.clip_by_global_norm([tf.constant(g) for g in inf], 1.0)
print(f"with an inf: global_norm={float(norm)!r}")
show("  t0", clipped[0].numpy())

print("# Keras optimizer clipnorm / clipvalue / global_clipnorm (_clip_gradients)")
for kw in [dict(clipnorm=1.0), dict(clipnorm=3.0), dict(clipvalue=1.0), dict(global_clipnorm=2.0)]:
    opt = keras.optimizers.SGD(**kw)
    out = opt._clip_gradients([tf.constant(g) for g in grads])
    print(kw)
    for i, c in enumerate(out):
        show(f"  t{i}", np.asarray(c))
opt = keras.optimizers.SGD(clipnorm=1.0)
out = opt._clip_gradients([tf.constant(g) for g in zeros])
print("clipnorm=1.0 on zeros")
for i, c in enumerate(out):
    show(f"  t{i}", np.asarray(c))

print("# Keras refuses two clipping arguments")
try:
    keras.optimizers.SGD(clipnorm=1.0, clipvalue=1.0)
except ValueError as e:
    print("ValueError:", e)
try:
    keras.optimizers.SGD(gradient_accumulation_steps=1)
except ValueError as e:
    print("ValueError:", e)

print("# Keras 3 AdamW with gradient_accumulation_steps=2: Adam's step counts updates?")
w0 = np.array([0.5, -1.25, 2.0, 0.0], dtype=np.float32)
micro = [
    np.array([0.1, -0.2, 0.3, 0.0], dtype=np.float32),
    np.array([-0.05, 0.4, 0.1, 1e-3], dtype=np.float32),
    np.array([0.2, 0.2, -0.3, -2.0], dtype=np.float32),
    np.array([0.3, -0.1, 0.0, 0.5], dtype=np.float32),
]
v = keras.Variable(w0)
acc = keras.optimizers.AdamW(learning_rate=0.01, gradient_accumulation_steps=2)
for g in micro:
    acc.apply_gradients([(tf.constant(g), v)])
v2 = keras.Variable(w0)
plain = keras.optimizers.AdamW(learning_rate=0.01)
for a, b in [(micro[0], micro[1]), (micro[2], micro[3])]:
    plain.apply_gradients([(tf.constant((a + b) / 2), v2)])
show("accumulated (4 micro-steps)", v.numpy())
show("plain (2 steps on the means)", v2.numpy())
print("iterations:", int(acc.iterations.numpy()), "plain:", int(plain.iterations.numpy()))

print("# losses with sample_weight (reduction sum_over_batch_size)")
logits = np.array([[2.0, -1.0, 0.5], [0.1, 0.2, 0.3], [-1.5, 3.0, 0.0], [1.0, 1.0, -2.0]], dtype=np.float32)
labels = np.array([0, 2, 1, 1], dtype=np.int64)
sw = np.array([1.0, 2.0, 0.5, 0.0], dtype=np.float32)
scce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
print("scce unweighted", repr(float(scce(labels, logits))))
print("scce weighted", repr(float(scce(labels, logits, sample_weight=sw))))
onehot = np.eye(3, dtype=np.float32)[labels]
cce = keras.losses.CategoricalCrossentropy(from_logits=True)
print("cce weighted", repr(float(cce(onehot, logits, sample_weight=sw))))
bin_logits = np.array([[0.3, -1.2], [2.0, 0.1], [-0.4, -0.9], [1.5, -2.5]], dtype=np.float32)
bin_y = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [0.0, 1.0]], dtype=np.float32)
bce = keras.losses.BinaryCrossentropy(from_logits=True)
print("bce weighted", repr(float(bce(bin_y, bin_logits, sample_weight=sw))))
mse = keras.losses.MeanSquaredError()
print("mse weighted", repr(float(mse(bin_y, bin_logits, sample_weight=sw))))

print("# class_weight -> sample_weight (Keras' data adapter), then the loss")
cw = {0: 1.0, 2: 3.0}
w = class_weight_to_sample_weights(labels, cw)
show("sparse labels", w)
show("one-hot labels", class_weight_to_sample_weights(onehot, cw))
single = np.array([[0.2], [0.9], [0.6], [0.4]], dtype=np.float32)
show("single-unit binary labels", class_weight_to_sample_weights(single, {1: 5.0}))
print("scce class-weighted", repr(float(scce(labels, logits, sample_weight=w))))
