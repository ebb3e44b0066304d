"""Known answers for the example's `sparse_focal_crossentropy` (tests/antirectifier.rs).

Keras has no sparse focal loss; the example's is Keras' CategoricalFocalCrossentropy
(keras/src/losses/losses.py, `categorical_focal_crossentropy`) on one-hot encoded class
labels, so Keras itself gives the answers:
    loss_i = -alpha * (1 - p_{i,y_i})**gamma * log(p_{i,y_i}),
    p = clip(softmax(logits), eps, 1 - eps)  (normalized outputs without from_logits).

    /root/.cache/kiln/tfvenv/bin/python examples/custom-layer/tests/reference/focal_reference.py
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras
import numpy as np

logits = np.array(
    [[2.0, -1.0, 0.5], [0.1, 0.2, 0.3], [-1.5, 3.0, 0.0], [1.0, 1.0, -2.0]], np.float32
)
classes = np.array([0, 2, 1, 1])
onehot = keras.ops.one_hot(classes, 3)
sw = np.array([1.0, 2.0, 0.5, 0.0], np.float32)

print("keras", keras.__version__)
for alpha, gamma in [(0.25, 2.0), (1.0, 0.0)]:
    loss = keras.losses.CategoricalFocalCrossentropy(
        alpha=alpha, gamma=gamma, from_logits=True
    )
    per = keras.losses.categorical_focal_crossentropy(
        onehot, logits, alpha=alpha, gamma=gamma, from_logits=True
    )
    print(f"alpha={alpha} gamma={gamma}")
    print("  per example", [float(v) for v in np.asarray(per)])
    print("  mean", float(loss(onehot, logits)))
    print("  with sample_weight", float(loss(onehot, logits, sample_weight=sw)))
# Probabilities in, from_logits=False (the clip-and-log path).
probs = keras.ops.softmax(logits)
loss = keras.losses.CategoricalFocalCrossentropy(alpha=0.25, gamma=2.0)
print("probabilities, alpha=0.25 gamma=2.0: mean", float(loss(onehot, probs)))
# NumPy, by the formula above.
p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
pt = np.clip(p[np.arange(4), classes], 1e-7, 1 - 1e-7)
print("numpy mean", float(np.mean(-0.25 * (1 - pt) ** 2 * np.log(pt))))
