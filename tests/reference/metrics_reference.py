"""Keras 3 streaming classification metrics over three fixed batches, for the asserts in
crates/kiln/src/compile/metrics/streaming/tests.rs. Run once with the tfvenv:
    /root/.cache/kiln/tfvenv/bin/python tests/reference/metrics_reference.py
Prints, per metric config, the `result()` after each batch (update_state is cumulative)."""
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import numpy as np
import keras

# Three batches (3, 2 and 3 rows) of 3 units: probabilities and multi-hot targets.
PROBS = np.array([
    [0.9, 0.2, 0.55], [0.4, 0.65, 0.1], [0.3, 0.3, 0.8],
    [0.05, 0.5, 0.45], [0.7, 0.35, 0.6],
    [0.15, 0.95, 0.25], [0.6, 0.1, 0.3], [0.5, 0.75, 0.0],
], dtype="float32")
LABELS = np.array([
    [1, 0, 1], [0, 1, 0], [1, 0, 0],
    [0, 0, 1], [1, 1, 0],
    [0, 1, 0], [0, 0, 1], [1, 1, 0],
], dtype="float32")
REG_Y = np.array([
    [1.0, -0.5, 2.0], [0.3, 0.05, -1.2], [2.5, 1.0, 0.4],
    [-0.7, 0.9, 1.5], [0.2, -1.1, 0.6],
    [1.3, 0.4, -0.2], [0.8, 0.0, 2.2], [-0.4, 0.7, 1.0],
], dtype="float32")
REG_P = np.array([
    [0.8, 0.1, 2.6], [0.2, 0.5, -3.0], [0.5, 1.1, 0.7],
    [-0.2, 2.4, 1.45], [0.0, -0.9, 0.3],
    [1.0, 0.6, 0.1], [1.1, -0.3, 1.8], [0.1, 0.2, 0.9],
], dtype="float32")
BATCHES = [(0, 3), (3, 5), (5, 8)]

M = keras.metrics
CASES = [
    ("precision", M.Precision()),
    ("recall", M.Recall()),
    ("precision_t03", M.Precision(thresholds=0.3)),
    ("recall_t07", M.Recall(thresholds=0.7)),
    ("precision_top1", M.Precision(top_k=1)),
    ("recall_top2", M.Recall(top_k=2)),
    ("precision_class1", M.Precision(class_id=1)),
    ("recall_class0_top1", M.Recall(class_id=0, top_k=1)),
    ("auc", M.AUC()),
    ("auc_pr", M.AUC(curve="PR")),
    ("auc_pr_10", M.AUC(curve="PR", num_thresholds=10)),
    ("auc_roc_minoring", M.AUC(summation_method="minoring", num_thresholds=7)),
    ("auc_pr_majoring", M.AUC(curve="PR", summation_method="majoring")),
    ("auc_multi", M.AUC(multi_label=True)),
    ("f1_none", M.F1Score()),
    ("f1_micro", M.F1Score(average="micro")),
    ("f1_macro", M.F1Score(average="macro")),
    ("f1_weighted", M.F1Score(average="weighted")),
    ("f1_macro_t04", M.F1Score(average="macro", threshold=0.4)),
    ("fbeta2_weighted_t05", M.FBetaScore(average="weighted", beta=2.0, threshold=0.5)),
    ("r2", M.R2Score()),
    ("r2_vw", M.R2Score(class_aggregation="variance_weighted_average")),
]

for name, metric in CASES:
    x, y = (REG_P, REG_Y) if name.startswith("r2") else (PROBS, LABELS)
    values, per_batch = [], []
    for a, b in BATCHES:
        metric.update_state(y[a:b], x[a:b])
        values.append(np.asarray(metric.result(), dtype="float64").tolist())
        fresh = metric.__class__.from_config(metric.get_config())
        fresh.update_state(y[a:b], x[a:b])
        per_batch.append(np.asarray(fresh.result(), dtype="float64").tolist())
    print(f"{name}: {values}  (mean of batches: {np.mean(per_batch, axis=0).tolist()})")
print("names:", [m.name for _, m in CASES[:1]], M.AUC().name, M.F1Score().name,
      M.FBetaScore().name, M.R2Score().name, M.Recall().name)

# MeanIoU over the same three batches: class ids from the argmax of PROBS and LABELS (the
# first largest), and as sparse ids; ignore_class; a class never seen.
PRED_IDS = np.argmax(PROBS, axis=1)
TRUE_IDS = np.array([0, 1, 0, 2, 0, 1, 2, 0])
IOU_CASES = [
    ("mean_iou_dense_pred", dict(num_classes=3, sparse_y_pred=False), PROBS, TRUE_IDS),
    ("mean_iou_ignore1", dict(num_classes=3, sparse_y_pred=False, ignore_class=1), PROBS, TRUE_IDS),
    ("mean_iou_sparse_4", dict(num_classes=4), PRED_IDS.astype("float32"), TRUE_IDS),
    ("mean_iou_dense_true", dict(num_classes=3, sparse_y_true=False, sparse_y_pred=False),
     PROBS, np.eye(3, dtype="float32")[TRUE_IDS]),
]
for name, kw, p, y in IOU_CASES:
    m = keras.metrics.MeanIoU(**kw)
    out = []
    for a, b in BATCHES:
        m.update_state(y[a:b], p[a:b])
        out.append(float(m.result()))
    print(name, m.name, out)
