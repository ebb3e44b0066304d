"""Known answers for kiln's multi-input / multi-output models and outputs of any rank,
computed with Keras 3 on the CPU.

Run:
    /root/.cache/kiln/tfvenv/bin/python tests/reference/multi_io_reference.py
(TensorFlow 2.21, Keras 3.15.) Writes crates/kiln/tests/data/multi_io_reference.json.

Every weight, input, label and sample weight comes from a closed formula (recorded in the JSON
next to the explicit values), so a Rust test can either read the values or recompute them:
    weight k of model.weights, flat index i:  0.1 * sin(0.7 * i + 0.3 * k)
evaluated in f64 and rounded to f32. The script asserts every statement in the JSON's "notes"
against the numbers Keras produced.
"""
import json
import math
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["CUDA_VISIBLE_DEVICES"] = ""
import numpy as np
import tensorflow as tf
import keras
from keras import layers

keras.utils.set_random_seed(0)
tf.config.experimental.enable_op_determinism()

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "crates", "kiln", "tests", "data", "multi_io_reference.json")
RTOL = 2e-5

FORMULAS = {
    "weight": "w.flat[i] = f32(0.1 * sin(0.7 * i + 0.3 * k)), k = index of the weight in "
    "model.weights, i = row-major flat index (f64 math, then rounded to f32)",
    "float_input": "x.flat[i] = f32(sin(0.9 * i + 0.5 + m)), m = index of the input in model.inputs",
    "float_label": "y.flat[i] = f32(0.5 * cos(0.9 * i))",
    "class_label": "y.flat[i] = (i * i + 3 * i + 1) % num_classes (int32)",
    "token_input": "x.flat[i] = (2 * i * i + i + 3) % vocab (int32)",
    "sample_weight": "sw[b] = f32(0.5 + 0.25 * b)",
}


def fixed_weight(shape, k):
    n = int(np.prod(shape)) if len(shape) else 1
    i = np.arange(n, dtype=np.float64)
    return (0.1 * np.sin(0.7 * i + 0.3 * k)).astype(np.float32).reshape(shape)


def float_input(shape, m):
    i = np.arange(int(np.prod(shape)), dtype=np.float64)
    return np.sin(0.9 * i + 0.5 + m).astype(np.float32).reshape(shape)


def float_label(shape):
    i = np.arange(int(np.prod(shape)), dtype=np.float64)
    return (0.5 * np.cos(0.9 * i)).astype(np.float32).reshape(shape)


def class_label(shape, num_classes):
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    return ((i * i + 3 * i + 1) % num_classes).astype(np.int32).reshape(shape)


def token_input(shape, vocab):
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    return ((2 * i * i + i + 3) % vocab).astype(np.int32).reshape(shape)


def sample_weight(batch):
    return (0.5 + 0.25 * np.arange(batch, dtype=np.float64)).astype(np.float32)


def flat(a):
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        return [int(v) for v in a.reshape(-1)]
    return [float(v) for v in a.astype(np.float32).reshape(-1)]


def tensor(a):
    a = np.asarray(a)
    return {"shape": list(a.shape), "dtype": str(a.dtype), "values": flat(a)}


def close(a, b, what, rtol=RTOL):
    a, b = float(a), float(b)
    assert math.isclose(a, b, rel_tol=rtol, abs_tol=1e-7), f"{what}: {a!r} != {b!r}"


def set_fixed_weights(model):
    weights = []
    for k, w in enumerate(model.weights):
        value = fixed_weight(tuple(w.shape), k)
        w.assign(value)
        weights.append({"index": k, "name": w.path, **tensor(value)})
    return weights


CONFIG_KEYS = ["units", "activation", "use_bias", "filters", "kernel_size", "strides", "padding",
               "input_dim", "output_dim", "batch_shape", "dtype", "data_format"]


def inbound_names(node_config):
    names = []

    def walk(obj):
        if isinstance(obj, dict):
            if "keras_history" in obj.get("config", {}):
                names.append(obj["config"]["keras_history"][0])
                return
            for v in obj.values():
                walk(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v)

    walk(node_config)
    return names


def summary(model):
    config = model.get_config()
    rows = []
    for layer, layer_config in zip(model.layers, config["layers"]):
        assert layer.name == layer_config["name"]
        cfg = layer.get_config()
        args = {}
        for key in CONFIG_KEYS:
            if key in cfg:
                value = cfg[key]
                if key == "dtype" and isinstance(value, dict):
                    value = value.get("config", {}).get("name", value)
                args[key] = list(value) if isinstance(value, tuple) else value
        rows.append({
            "class": layer.__class__.__name__,
            "name": layer.name,
            "config": args,
            "inbound": inbound_names(layer_config["inbound_nodes"]),
            "output_shape": list(layer.output.shape),
            "params": layer.count_params(),
        })
    return {
        "inputs": [t.name for t in model.inputs],
        "outputs": list(model.output_names),
        "layers": rows,
        "total_params": model.count_params(),
    }


def sparse_ce_rows(y, p, from_logits):
    """Per-position loss in f64: -log softmax (logits) or -log clip(p, 1e-7, 1-1e-7)."""
    p = np.asarray(p, dtype=np.float64)
    if from_logits:
        z = p - p.max(axis=-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    else:
        logp = np.log(np.clip(p, 1e-7, 1 - 1e-7))
    return -np.take_along_axis(logp, y[..., None].astype(np.int64), axis=-1)[..., 0]


def reduce_sum_over_batch_size(per_position, sw=None):
    """Keras' default reduction: sum(loss * sw broadcast over trailing axes) / loss.size."""
    if sw is not None:
        sw = np.asarray(sw, dtype=np.float64).reshape((-1,) + (1,) * (per_position.ndim - 1))
        per_position = per_position * sw
    return per_position.sum() / per_position.size


def evaluate(model, x, y, sw=None):
    batch = next(iter(x.values())).shape[0] if isinstance(x, dict) else x.shape[0]
    logs = model.evaluate(x, y, sample_weight=sw, batch_size=batch, verbose=0, return_dict=True)
    return {"keys": list(logs.keys()), "values": {k: float(v) for k, v in logs.items()}}


def breakdown(model, x, y, sw=None):
    """Each compiled loss applied directly, its weight and the weighted sum (compute_loss)."""
    y_pred = model(x, training=False)
    total = float(model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sw))
    parts = []
    preds = y_pred if isinstance(y_pred, dict) else None
    names = model.output_names
    for idx, (path, loss_fn, weight, name) in enumerate(model._compile_loss._flat_losses):
        out = names[idx]
        yp = preds[out] if preds is not None else (y_pred[idx] if isinstance(y_pred, (list, tuple)) else y_pred)
        yt = y[out] if isinstance(y, dict) else y
        value = float(loss_fn(yt, yp, sw))
        parts.append({"output": out, "loss": loss_fn.name if hasattr(loss_fn, "name") else str(loss_fn),
                      "unweighted": value, "weight": 1.0 if weight is None else float(weight)})
    direct_total = sum(p["unweighted"] * p["weight"] for p in parts)
    close(total, direct_total, "compute_loss == sum(weight * loss)")
    print(f"  compute_loss={total!r} parts={[(p['output'], p['unweighted'], p['weight']) for p in parts]}")
    return {"compute_loss": total, "parts": parts}, y_pred


def gradients(model, x, y):
    with tf.GradientTape() as tape:
        y_pred = model(x, training=True)
        loss = model.compute_loss(x=x, y=y, y_pred=y_pred)
    grads = tape.gradient(loss, model.trainable_weights)
    return [{"name": w.path, **tensor(g.numpy())} for w, g in zip(model.trainable_weights, grads)]


def sgd_step(model, x, y, kernel_name):
    """One SGD(0.1) step with train_on_batch; loss before (returned) and after (evaluate)."""
    before = {w.path: np.array(w.numpy()) for w in model.weights}
    grads = gradients(model, x, y)
    batch = next(iter(x.values())).shape[0] if isinstance(x, dict) else x.shape[0]
    train_logs = model.train_on_batch(x, y, return_dict=True)
    after_logs = evaluate(model, x, y)
    updated = {w.path: np.array(w.numpy()) for w in model.weights}
    for g in grads:  # plain SGD: w' = w - 0.1 * g
        expected = before[g["name"]] - np.float32(0.1) * np.array(g["values"], np.float32).reshape(g["shape"])
        assert np.allclose(updated[g["name"]], expected, rtol=1e-5, atol=1e-7), g["name"]
    print(f"  train_on_batch={dict((k, float(v)) for k, v in train_logs.items())} after={after_logs['values']}")
    return {
        "optimizer": "SGD(learning_rate=0.1)",
        "batch_size": int(batch),
        "train_on_batch_logs": {k: float(v) for k, v in train_logs.items()},
        "train_on_batch_note": "computed in the forward pass of the step, i.e. with the weights before the update",
        "gradients_before_step": grads,
        "evaluate_after_step": after_logs,
        "kernel": kernel_name,
        "kernel_after_step_first8": flat(updated[kernel_name])[:8],
        "weights_after_step": [{"name": n, **tensor(v)} for n, v in updated.items()],
    }


def build(model, loss, metrics, loss_weights=None):
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss=loss,
                  loss_weights=loss_weights, metrics=metrics)
    return set_fixed_weights(model)


def accuracy(y, p, sw=None):
    hits = (np.argmax(p, axis=-1) == y).astype(np.float64)
    if sw is None:
        return hits.mean()
    w = np.broadcast_to(np.asarray(sw, np.float64).reshape((-1,) + (1,) * (hits.ndim - 1)), hits.shape)
    return (hits * w).sum() / w.sum()


# ---------------------------------------------------------------------------------------------
def case1():
    print("# case 1: two inputs")
    a = keras.Input((4,), name="a")
    b = keras.Input((3,), name="b")
    ha = layers.Dense(8, activation="relu", name="dense_a")(a)
    hb = layers.Dense(8, activation="relu", name="dense_b")(b)
    s = layers.Add(name="add")([ha, hb])
    out = layers.Dense(3, activation="softmax", name="out")(s)
    model = keras.Model({"a": a, "b": b}, out, name="two_inputs")
    weights = build(model, "sparse_categorical_crossentropy", ["accuracy"])
    x = {"a": float_input((6, 4), 0), "b": float_input((6, 3), 1)}
    y = class_label((6,), 3)
    logs = evaluate(model, x, y)
    parts, pred = breakdown(model, x, y)
    p = pred.numpy()
    direct = float(keras.losses.SparseCategoricalCrossentropy()(y, p))
    manual = reduce_sum_over_batch_size(sparse_ce_rows(y, p, False))
    for v in (direct, manual, parts["compute_loss"]):
        close(logs["values"]["loss"], v, "case1 loss")
    close(logs["values"]["accuracy"], accuracy(y, p), "case1 accuracy")
    assert logs["keys"] == ["accuracy", "loss"], logs["keys"]
    print(f"  evaluate={logs}")
    return {
        "description": "inputs a (4,) and b (3,) -> Dense(8, relu) each -> Add -> Dense(3, softmax)",
        "compile": {"loss": "sparse_categorical_crossentropy", "metrics": ["accuracy"]},
        "summary": summary(model),
        "weights": weights,
        "inputs": {k: tensor(v) for k, v in x.items()},
        "input_formula_m": {"a": 0, "b": 1},
        "labels": {"out": tensor(y)},
        "predictions": {"out": tensor(p)},
        "evaluate": logs,
        "direct_loss": {"loss_object": direct, "numpy_f64": manual},
        "compute_loss": parts,
        "sgd_step": sgd_step(model, x, y, "dense_a/kernel"),
    }


def case2():
    print("# case 2: two outputs")
    x_in = keras.Input((5,), name="x")
    h = layers.Dense(8, activation="relu", name="trunk")(x_in)
    cls = layers.Dense(3, activation="softmax", name="class")(h)
    val = layers.Dense(1, name="value")(h)
    model = keras.Model(x_in, {"class": cls, "value": val}, name="two_outputs")
    loss = {"class": "sparse_categorical_crossentropy", "value": "mse"}
    loss_weights = {"class": 1.0, "value": 0.5}
    metrics = {"class": ["accuracy"], "value": ["mae"]}
    weights = build(model, loss, metrics, loss_weights)
    x = float_input((6, 5), 0)
    y = {"class": class_label((6,), 3), "value": float_label((6, 1))}
    logs = evaluate(model, x, y)
    parts, pred = breakdown(model, x, y)
    pc, pv = pred["class"].numpy(), pred["value"].numpy()
    ce = float(keras.losses.SparseCategoricalCrossentropy()(y["class"], pc))
    mse = float(keras.losses.MeanSquaredError()(y["value"], pv))
    ce_np = reduce_sum_over_batch_size(sparse_ce_rows(y["class"], pc, False))
    mse_np = reduce_sum_over_batch_size(((pv.astype(np.float64) - y["value"]) ** 2).mean(axis=-1))
    v = logs["values"]
    close(v["class_loss"], ce, "class_loss (unweighted)")
    close(v["class_loss"], ce_np, "class_loss numpy")
    close(v["value_loss"], mse, "value_loss (unweighted)")
    close(v["value_loss"], mse_np, "value_loss numpy")
    close(v["loss"], 1.0 * ce + 0.5 * mse, "loss = 1.0*class_loss + 0.5*value_loss")
    close(v["class_accuracy"], accuracy(y["class"], pc), "class_accuracy")
    close(v["value_mae"], np.abs(pv.astype(np.float64) - y["value"]).mean(), "value_mae")
    print(f"  evaluate={logs}")
    return {
        "description": "x (5,) -> Dense(8, relu, trunk) -> class Dense(3, softmax), value Dense(1)",
        "compile": {"loss": loss, "loss_weights": loss_weights, "metrics": metrics},
        "summary": summary(model),
        "weights": weights,
        "inputs": {"x": tensor(x)},
        "input_formula_m": {"x": 0},
        "labels": {k: tensor(t) for k, t in y.items()},
        "predictions": {"class": tensor(pc), "value": tensor(pv)},
        "evaluate": logs,
        "direct_loss": {"class": {"loss_object": ce, "numpy_f64": ce_np},
                        "value": {"loss_object": mse, "numpy_f64": mse_np},
                        "total": 1.0 * ce + 0.5 * mse},
        "compute_loss": parts,
        "sgd_step": sgd_step(model, x, y, "trunk/kernel"),
    }


def weighted_check(model, loss_obj, x, y, per_position_fn, name, sw):
    """Evaluate without and with sample weights, checked against numpy.

    A [batch] vector is rejected by Keras 3 for outputs of rank > 2 (asserted); the same values
    reshaped to [batch, 1, ...] (rank of the per-position loss) broadcast over the other axes."""
    plain = evaluate(model, x, y)
    parts_plain, pred = breakdown(model, x, y)
    p = pred.numpy()
    per_pos = per_position_fn(p)
    rejected = {}
    for how, call in [("evaluate", lambda: evaluate(model, x, y, sw)),
                      ("loss_object", lambda: loss_obj(y, p, sw))]:
        try:
            call()
        except (ValueError, tf.errors.InvalidArgumentError) as e:
            rejected[how] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        else:
            raise AssertionError(f"{name}: Keras accepted a [batch] sample_weight via {how}")
    sw_rank = sw.reshape((-1,) + (1,) * (per_pos.ndim - 1))
    weighted = evaluate(model, x, y, sw_rank)
    parts_w, _ = breakdown(model, x, y, sw_rank)
    manual = reduce_sum_over_batch_size(per_pos)
    manual_w = reduce_sum_over_batch_size(per_pos, sw)
    close(plain["values"]["loss"], manual, f"{name} loss = sum / {per_pos.size}")
    close(weighted["values"]["loss"], manual_w, f"{name} weighted loss = sum(l*sw) / {per_pos.size}")
    # Not divided by the sum of the (broadcast) weights:
    sw_b = np.broadcast_to(sw_rank.astype(np.float64), per_pos.shape)
    by_weight_sum = (per_pos * sw_b).sum() / sw_b.sum()
    assert not math.isclose(weighted["values"]["loss"], by_weight_sum, rel_tol=1e-4)
    close(parts_plain["compute_loss"], manual, f"{name} compute_loss")
    close(parts_w["compute_loss"], manual_w, f"{name} compute_loss weighted")
    # `metrics=` entries ignore sample_weight (only `weighted_metrics=` use it):
    for key in plain["values"]:
        if key != "loss":
            close(weighted["values"][key], plain["values"][key], f"{name} {key} ignores sample_weight")
    direct = float(loss_obj(y, p))
    direct_w = float(loss_obj(y, p, sw_rank))
    close(direct, plain["values"]["loss"], f"{name} loss object")
    close(direct_w, weighted["values"]["loss"], f"{name} loss object weighted")
    print(f"  evaluate={plain}\n  weighted={weighted}\n  [batch] sample_weight rejected: {rejected}")
    return {
        "evaluate": plain,
        "compute_loss": parts_plain,
        "sample_weight": tensor(sw),
        "sample_weight_batch_vector_rejected": rejected,
        "sample_weight_rank_matched": tensor(sw_rank),
        "evaluate_weighted": weighted,
        "compute_loss_weighted": parts_w,
        "direct_loss": {
            "loss_object": direct,
            "loss_object_weighted": direct_w,
            "per_position_loss_shape": list(per_pos.shape),
            "divisor": int(per_pos.size),
            "numpy_f64": manual,
            "numpy_f64_weighted": manual_w,
            "weighted_divided_by_sum_of_weights_NOT_keras": by_weight_sum,
        },
    }, p


def case3(from_logits):
    tag = "logits" if from_logits else "softmax"
    print(f"# case 3: per-timestep output ({tag})")
    tokens = keras.Input((7,), dtype="int32", name="tokens")
    e = layers.Embedding(11, 4, name="embed")(tokens)
    out = layers.Dense(5, activation=None if from_logits else "softmax", name="tags")(e)
    model = keras.Model(tokens, out, name=f"tagger_{tag}")
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)
    weights = build(model, loss, ["accuracy"])
    x = token_input((4, 7), 11)
    y = class_label((4, 7), 5)
    checked, p = weighted_check(model, loss, x, y, lambda p: sparse_ce_rows(y, p, from_logits),
                                f"case3 {tag}", sample_weight(4))
    close(checked["evaluate"]["values"]["accuracy"], accuracy(y, p), "case3 accuracy")
    assert checked["evaluate"]["keys"] == ["accuracy", "loss"], checked["evaluate"]["keys"]
    return {
        "description": f"tokens int (7,) -> Embedding(11, 4) -> Dense(5, "
        f"{'no activation' if from_logits else 'softmax'}) -> [batch, 7, 5]",
        "compile": {"loss": f"SparseCategoricalCrossentropy(from_logits={from_logits})", "metrics": ["accuracy"]},
        "summary": summary(model),
        "weights": weights,
        "inputs": {"tokens": tensor(x)},
        "labels": {"tags": tensor(y)},
        "predictions": {"tags": tensor(p)},
        **checked,
    }


def case4_seg():
    print("# case 4: per-pixel segmentation")
    image = keras.Input((6, 6, 2), name="image")
    h = layers.Conv2D(4, 3, padding="same", activation="relu", name="c1")(image)
    out = layers.Conv2D(3, 1, activation="softmax", name="seg")(h)
    model = keras.Model(image, out, name="segmenter")
    weights = build(model, "sparse_categorical_crossentropy", ["accuracy"])
    x = float_input((2, 6, 6, 2), 0)
    y = class_label((2, 6, 6), 3)
    loss = keras.losses.SparseCategoricalCrossentropy()
    checked, p = weighted_check(model, loss, x, y, lambda p: sparse_ce_rows(y, p, False),
                                "case4 seg", sample_weight(2))
    close(checked["evaluate"]["values"]["accuracy"], accuracy(y, p), "case4 accuracy")
    assert checked["evaluate"]["keys"] == ["accuracy", "loss"], checked["evaluate"]["keys"]
    return {
        "description": "image (6, 6, 2) -> Conv2D(4, 3, same, relu) -> Conv2D(3, 1, softmax) -> [batch, 6, 6, 3]",
        "compile": {"loss": "sparse_categorical_crossentropy", "metrics": ["accuracy"]},
        "summary": summary(model),
        "weights": weights,
        "inputs": {"image": tensor(x)},
        "input_formula_m": {"image": 0},
        "labels": {"seg": tensor(y)},
        "predictions": {"seg": tensor(p)},
        **checked,
    }


def case4_autoencoder():
    print("# case 4b: per-pixel autoencoder (mse against the input)")
    image = keras.Input((6, 6, 2), name="image")
    h = layers.Conv2D(4, 3, padding="same", activation="relu", name="enc")(image)
    out = layers.Conv2D(2, 1, name="recon")(h)
    model = keras.Model(image, out, name="autoencoder")
    weights = build(model, "mse", ["mae"])
    x = float_input((2, 6, 6, 2), 0)

    def per_position(p):  # MSE averages the channel axis first: [batch, 6, 6]
        return ((p.astype(np.float64) - x) ** 2).mean(axis=-1)

    loss = keras.losses.MeanSquaredError()
    checked, p = weighted_check(model, loss, x, x, per_position, "case4 ae", sample_weight(2))
    plain = checked["evaluate"]["values"]
    close(plain["loss"], ((p.astype(np.float64) - x) ** 2).mean(), "ae loss = mean of all elements")
    close(plain["mae"], np.abs(p.astype(np.float64) - x).mean(), "ae mae")
    assert checked["evaluate"]["keys"] == ["loss", "mae"], checked["evaluate"]["keys"]
    return {
        "description": "image (6, 6, 2) -> Conv2D(4, 3, same, relu, enc) -> Conv2D(2, 1, recon); mse against the input",
        "compile": {"loss": "mse", "metrics": ["mae"]},
        "summary": summary(model),
        "weights": weights,
        "inputs": {"image": tensor(x)},
        "input_formula_m": {"image": 0},
        "labels": {"recon": "same as inputs.image"},
        "predictions": {"recon": tensor(p)},
        **checked,
    }


NOTES = [
    "Reduction: every built-in loss first reduces the class/feature axis (crossentropy picks the "
    "label's -log p; mse/mae average the last axis), giving a per-position loss of shape "
    "[batch, ...] ([batch] for cases 1-2, [batch, 7] for case 3, [batch, 6, 6] for case 4). The "
    "default reduction 'sum_over_batch_size' then returns sum(per_position * sample_weight) / "
    "per_position.size, i.e. divides by batch*7 or batch*6*6 elements, NOT by batch and NOT by the "
    "sum of the sample weights (direct_loss.divisor; asserted for cases 3 and 4 with and without "
    "sample_weight). For mse on [batch, 6, 6, 2] this equals the mean over all elements.",
    "Crossentropy on a softmax output: Keras uses the softmax's logits (_keras_logits) when "
    "present, so the softmax and from_logits=True variants of case 3 give the same loss; numpy "
    "check: -log(clip(p, 1e-7, 1 - 1e-7)) agrees to ~1e-7.",
    "sample_weight of shape [batch] does NOT broadcast over time/pixel axes in Keras 3.15: "
    "reduce_weighted_values only expands a rank-1 weight when the loss's last dim is 1, then "
    "multiplies with numpy broadcasting (right-aligned), so [batch, 7] * [batch] raises "
    "(sample_weight_batch_vector_rejected, asserted for cases 3 and 4; if the last axis happened to "
    "equal batch it would silently broadcast along the wrong axis). Reshaped to the loss's rank "
    "([batch, 1] for case 3, [batch, 1, 1] for case 4: sample_weight_rank_matched) it broadcasts "
    "over the time/pixel axes and loss = sum_b sw[b] * sum_t l[b, t] / (batch * T).",
    "loss_weights: logged 'loss' = sum over outputs of loss_weight[o] * loss_o (+ regularization "
    "losses, none here). The per-output '<output>_loss' entries are the UNWEIGHTED losses "
    "(case 2: loss = 1.0 * class_loss + 0.5 * value_loss, asserted).",
    "Metrics passed as compile(metrics=...) ignore sample_weight (only weighted_metrics=... use "
    "it): evaluate_weighted's accuracy / mae equal the unweighted ones (asserted). Accuracy on "
    "[batch, 7] / [batch, 6, 6] is the mean over every position; mae the mean over all elements.",
    "Logs dict keys from evaluate(return_dict=True) are sorted alphabetically: case 1, 3, 4 "
    "segmentation ['accuracy', 'loss']; autoencoder ['loss', 'mae']; case 2 ['class_accuracy', "
    "'class_loss', 'loss', 'value_loss', 'value_mae']. With several outputs the names are "
    "'<output layer name>_loss' and '<output layer name>_<metric name>'; a single-output model "
    "has no prefix. train_on_batch(return_dict=True) returns the same keys.",
    "train_on_batch returns the loss/metrics computed in that step's forward pass (weights "
    "before the update); 'evaluate_after_step' is the loss with the updated weights. SGD step: "
    "w' = w - 0.1 * grad of the total (weighted) loss, asserted against gradients_before_step.",
    "model.weights order = model.layers order, each layer's kernel then bias (Embedding: "
    "embeddings); names are Keras variable paths 'layer/kernel'.",
    "Float values are f32 values written as JSON doubles (exact). evaluate's values are f32 "
    "results of TF kernels; compare with a relative tolerance of about 1e-5.",
]


def main():
    cases = {
        "two_inputs": case1(),
        "two_outputs": case2(),
        "per_timestep": case3(False),
        "per_timestep_logits": case3(True),
        "per_pixel_segmentation": case4_seg(),
        "per_pixel_autoencoder": case4_autoencoder(),
    }
    assert cases["two_outputs"]["evaluate"]["keys"] == [
        "class_accuracy", "class_loss", "loss", "value_loss", "value_mae"]
    assert list(cases["two_outputs"]["sgd_step"]["train_on_batch_logs"]) == cases["two_outputs"]["evaluate"]["keys"]
    doc = {
        "generator": "tests/reference/multi_io_reference.py",
        "versions": {"keras": keras.__version__, "tensorflow": tf.__version__, "numpy": np.__version__},
        "formulas": FORMULAS,
        "notes": NOTES,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
