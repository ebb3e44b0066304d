"""Known answers for kiln's built-in losses and streaming metrics, computed once with
TensorFlow / Keras 3 on the CPU.

Run:
    /root/.cache/kiln/tfvenv/bin/python tests/reference/losses_reference.py
(TensorFlow 2.21, Keras 3.15.) Each loss is the Keras class with its default reduction
(`sum_over_batch_size`); its gradient is taken w.r.t. the predictions. The printed Rust
literals are pasted into crates/kiln/src/compile/loss/keras_tests.rs and
crates/kiln/src/compile/metrics.rs.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
import keras

f32 = lambda v: np.asarray(v, dtype=np.float32)

PROBS = f32([[0.2, 0.7, 0.1], [0.5, 0.3, 0.2], [0.05, 0.15, 0.8], [0.4, 0.4, 0.2]])
LOGITS = f32([[2.0, -1.0, 0.5], [0.1, 0.2, 0.3], [-1.5, 3.0, 0.0], [1.0, 1.0, -2.0]])
ONEHOT = f32([[0, 1, 0], [1, 0, 0], [0, 0, 1], [0, 1, 0]])
BINARY = f32([[1, 0, 1], [0, 0, 1], [1, 1, 0], [0, 1, 0]])
SIGNS = 2 * BINARY - 1
SOFT = f32([[0.1, 0.6, 0.3], [0.3, 0.3, 0.4], [0.05, 0.05, 0.9], [0.5, 0.25, 0.25]])
REG_Y = f32([[1.0, -0.5, 2.0], [0.3, 0.05, -1.2], [2.5, 1.0, 0.4], [-0.7, 0.9, 1.5]])
REG_P = f32([[0.8, 0.1, 2.6], [0.2, 0.5, -3.0], [0.5, 1.1, 0.7], [-0.2, 2.4, 1.45]])
POS_Y = f32([[1.0, 0.0, 2.0], [0.5, 3.0, 1.0], [4.0, 0.2, 0.0], [1.5, 1.0, 2.5]])
POS_P = f32([[0.8, 0.3, 2.5], [0.6, 2.0, 1.4], [3.0, 0.1, 0.5], [1.2, 1.1, 2.0]])
HINGE_P = f32([[0.3, -0.8, 1.7], [-0.4, 0.6, 0.2], [2.0, 0.45, -1.1], [-0.3, 0.9, 0.15]])

L = keras.losses
# (rust name, Keras loss, y_true, y_pred, rust args, y key, p key)
CASES = [
    ("mae", L.MeanAbsoluteError(), "REG_Y", "REG_P", ""),
    ("mse", L.MeanSquaredError(), "REG_Y", "REG_P", ""),
    ("mape", L.MeanAbsolutePercentageError(), "REG_Y", "REG_P", ""),
    ("msle", L.MeanSquaredLogarithmicError(), "POS_Y", "POS_P", ""),
    ("huber", L.Huber(), "REG_Y", "REG_P", ""),
    ("huber", L.Huber(delta=0.5), "REG_Y", "REG_P", "delta = 0.5"),
    ("log_cosh", L.LogCosh(), "REG_Y", "REG_P", ""),
    ("kl_divergence", L.KLDivergence(), "SOFT", "PROBS", ""),
    ("poisson", L.Poisson(), "POS_Y", "POS_P", ""),
    ("hinge", L.Hinge(), "BINARY", "HINGE_P", ""),
    ("hinge", L.Hinge(), "SIGNS", "HINGE_P", ""),
    ("squared_hinge", L.SquaredHinge(), "BINARY", "HINGE_P", ""),
    ("categorical_hinge", L.CategoricalHinge(), "ONEHOT", "HINGE_P", ""),
    ("cosine_similarity", L.CosineSimilarity(), "REG_Y", "REG_P", ""),
    ("categorical_crossentropy", L.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1),
     "ONEHOT", "LOGITS", "from_logits = true, label_smoothing = 0.1"),
    ("categorical_crossentropy", L.CategoricalCrossentropy(label_smoothing=0.2),
     "ONEHOT", "PROBS", "label_smoothing = 0.2"),
    ("binary_crossentropy", L.BinaryCrossentropy(label_smoothing=0.2), "BINARY", "PROBS",
     "label_smoothing = 0.2"),
    ("binary_crossentropy", L.BinaryCrossentropy(from_logits=True, label_smoothing=0.1),
     "BINARY", "LOGITS", "from_logits = true, label_smoothing = 0.1"),
    ("binary_focal_crossentropy", L.BinaryFocalCrossentropy(), "BINARY", "PROBS", ""),
    ("binary_focal_crossentropy",
     L.BinaryFocalCrossentropy(apply_class_balancing=True, alpha=0.4, gamma=1.5,
                               from_logits=True, label_smoothing=0.1),
     "BINARY", "LOGITS",
     "apply_class_balancing = true, alpha = 0.4, gamma = 1.5, from_logits = true, "
     "label_smoothing = 0.1"),
    ("categorical_focal_crossentropy", L.CategoricalFocalCrossentropy(), "ONEHOT", "PROBS", ""),
    ("categorical_focal_crossentropy",
     L.CategoricalFocalCrossentropy(alpha=0.5, gamma=3.0, from_logits=True, label_smoothing=0.1),
     "ONEHOT", "LOGITS", "alpha = 0.5, gamma = 3.0, from_logits = true, label_smoothing = 0.1"),
]
# Rank 3: the same values as [2, 3, 2] outputs (rows of 2 units).
# (Losses that average over the last axis give the rank-2 values; these sum over it.)
RANK3 = [
    ("kl_divergence", L.KLDivergence(), "SOFT", "PROBS", ""),
    ("cosine_similarity", L.CosineSimilarity(), "REG_Y", "REG_P", ""),
    ("categorical_focal_crossentropy", L.CategoricalFocalCrossentropy(), "SOFT", "PROBS", ""),
]


def lit(v):
    return "[" + ", ".join(repr(float(x)) for x in np.asarray(v, np.float32).reshape(-1)) + "]"


def value_and_grad(loss, y, p):
    p = tf.Variable(p)
    with tf.GradientTape() as tape:
        value = loss(tf.constant(y), p)
    return float(value), tape.gradient(value, p).numpy()


def case(name, loss, y, p, args, shape):
    yv, pv = globals()[y].reshape(shape), globals()[p].reshape(shape)
    value, grad = value_and_grad(loss, yv, pv)
    rows = int(np.prod(shape[:-1]))
    print(f"    Case {{ loss: {name!r}, args: {args!r}, y: &{y}, p: &{p}, "
          f"rows: {rows}, value: {value!r}, grad: &{lit(grad)} }},".replace("'", '"'))


print("// Inputs")
for n in ["PROBS", "LOGITS", "ONEHOT", "BINARY", "SIGNS", "SOFT", "REG_Y", "REG_P", "POS_Y",
          "POS_P", "HINGE_P"]:
    print(f"const {n}: [f32; 12] = {lit(globals()[n])};")
print("// Cases")
for c in CASES:
    case(*c, (4, 3))
for c in RANK3:
    case(*c, (2, 3, 2))

M = keras.metrics
print("// Metrics over two batches: (name, y, p, value after batch 1, after batch 2)")
y1, p1 = REG_Y[:2], REG_P[:2]
y2, p2 = REG_Y[2:], REG_P[2:]
for name, m in [("root_mean_squared_error", M.RootMeanSquaredError()),
                ("mean_absolute_percentage_error", M.MeanAbsolutePercentageError()),
                ("cosine_similarity", M.CosineSimilarity()),
                ("r2_score", M.R2Score())]:
    m.update_state(y1, p1)
    first = float(m.result())
    m.update_state(y2, p2)
    print(f"{name}: {first!r} {float(m.result())!r}")
classes = np.argmax(ONEHOT, axis=1)
for name, m, y in [("top_k_categorical_accuracy", M.TopKCategoricalAccuracy(k=2), ONEHOT),
                   ("sparse_top_k_categorical_accuracy", M.SparseTopKCategoricalAccuracy(k=2),
                    classes)]:
    m.update_state(y[:2], HINGE_P[:2])
    first = float(m.result())
    m.update_state(y[2:], HINGE_P[2:])
    print(f"{name} k=2: {first!r} {float(m.result())!r}")
for name, m in [("precision", M.Precision()), ("recall", M.Recall()),
                ("precision_t0.3", M.Precision(thresholds=0.3)),
                ("recall_t0.3", M.Recall(thresholds=0.3)),
                ("true_positives", M.TruePositives()),
                ("true_positives_t0.3", M.TruePositives(thresholds=0.3)), ("false_positives", M.FalsePositives()),
                ("true_negatives", M.TrueNegatives()), ("false_negatives", M.FalseNegatives())]:
    m.update_state(BINARY[:2], PROBS[:2])
    first = float(m.result())
    m.update_state(BINARY[2:], PROBS[2:])
    print(f"{name}: {first!r} {float(m.result())!r}")

# `reduction` (every Keras loss takes it): the sum, and "mean" (= sum_over_batch_size in
# Keras 3), on rank-2 and rank-3 outputs. Pasted at the end of keras::CASES.
import json

REDUCTION = [
    ("categorical_crossentropy", L.CategoricalCrossentropy(reduction="sum"), "ONEHOT", "PROBS",
     'reduction = "sum"', (4, 3)),
    ("mse", L.MeanSquaredError(reduction="sum"), "REG_Y", "REG_P", 'reduction = "sum"',
     (2, 3, 2)),
    ("huber", L.Huber(delta=0.5, reduction="mean"), "REG_Y", "REG_P",
     'delta = 0.5, reduction = "mean"', (4, 3)),
    ("binary_focal_crossentropy", L.BinaryFocalCrossentropy(from_logits=True, reduction="sum"),
     "BINARY", "LOGITS", 'from_logits = true, reduction = "sum"', (4, 3)),
    ("kl_divergence", L.KLDivergence(reduction="sum_over_batch_size"), "SOFT", "PROBS",
     'reduction = "sum_over_batch_size"', (2, 3, 2)),
]
print("// Reduction cases")
for name, loss, y, p, args, shape in REDUCTION:
    yv, pv = globals()[y].reshape(shape), globals()[p].reshape(shape)
    value, grad = value_and_grad(loss, yv, pv)
    rows = int(np.prod(shape[:-1]))
    print(f"    Case {{ loss: {json.dumps(name)}, args: {json.dumps(args)}, y: &{y}, p: &{p}, "
          f"rows: {rows}, value: {value!r}, grad: &{lit(grad)} }},")
# The sum with sample weights (Σ w l), for super::tests (labels: classes [0, 2, 1, 1] one-hot,
# as gradient_reference.py's "losses with sample_weight").
cce = L.CategoricalCrossentropy(from_logits=True, reduction="sum")
classes = np.eye(3, dtype="float32")[[0, 2, 1, 1]]
print("cce sum weighted:", float(cce(classes, LOGITS, sample_weight=f32([1.0, 2.0, 0.5, 0.0]))))
