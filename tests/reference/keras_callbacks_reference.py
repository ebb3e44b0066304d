"""Known answers for kiln's callback tests, computed by driving Keras' own callbacks.

Run (TensorFlow 2.21, Keras 3.15, CPU):
    /root/.cache/kiln/tfvenv/bin/python tests/reference/keras_callbacks_reference.py
The printed values are pasted into the tests of crates/kiln/src/callbacks/*.rs.

Each scenario calls the callback's hooks as `model.fit` does, with scripted logs: before each
`on_epoch_end`, the model's single weight is set to the epoch number, so the weights that
EarlyStopping restores name the epoch they came from.
"""
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import callbacks, optimizers  # noqa: E402
from keras.optimizers import schedules  # noqa: E402


def tiny_model(lr=0.1):
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    model.compile(optimizer=optimizers.SGD(learning_rate=lr), loss="mse", metrics=["accuracy"])
    return model


def set_epoch_weight(model, epoch):
    model.layers[0].set_weights([np.array([[float(epoch)]], dtype=np.float32)])


def early_stopping(name, values, monitor="val_loss", **kwargs):
    model = tiny_model()
    cb = callbacks.EarlyStopping(monitor=monitor, **kwargs)
    cb.set_model(model)
    model.stop_training = False
    cb.on_train_begin()
    ran = []
    for epoch, v in enumerate(values):
        cb.on_epoch_begin(epoch)
        set_epoch_weight(model, epoch)
        cb.on_epoch_end(epoch, {monitor: v})
        ran.append(epoch)
        if model.stop_training:
            break
    cb.on_train_end()
    weight = float(model.layers[0].get_weights()[0][0, 0])
    print(
        f"EarlyStopping {name}: {kwargs} values={values} -> last epoch run={ran[-1]} "
        f"stopped_epoch={cb.stopped_epoch} best_epoch={cb.best_epoch} best={cb.best} "
        f"weights after train end = epoch {weight:g}"
    )


def reduce_lr(name, values, lr=0.1, **kwargs):
    model = tiny_model(lr)
    cb = callbacks.ReduceLROnPlateau(monitor="val_loss", **kwargs)
    cb.set_model(model)
    cb.on_train_begin()
    lrs = []
    for epoch, v in enumerate(values):
        logs = {"val_loss": v}
        cb.on_epoch_end(epoch, logs)
        lrs.append(float(np.float32(model.optimizer.learning_rate)))
    print(f"ReduceLROnPlateau {name}: {kwargs} values={values} -> lr after each epoch={lrs}")


def schedule(name, sched, steps):
    print(f"{name}: " + ", ".join(f"{s}: {float(sched(s)):.9g}" for s in steps))


def csv_logger(name, epochs_logs, append_runs=1):
    path = os.path.join(tempfile.mkdtemp(), "log.csv")
    for _ in range(append_runs):
        cb = callbacks.CSVLogger(path, append=append_runs > 1)
        cb.set_model(tiny_model())
        cb.on_train_begin()
        for epoch, logs in enumerate(epochs_logs):
            cb.on_epoch_end(epoch, dict(logs))
        cb.on_train_end()
    with open(path, "rb") as f:
        print(f"CSVLogger {name}: {f.read()!r}")


early_stopping("patience 2", [1.0, 0.8, 0.9, 0.85, 0.7, 0.6], patience=2, restore_best_weights=True)
early_stopping("patience 0", [1.0, 1.1, 0.5], patience=0)
early_stopping("min_delta", [1.0, 0.95, 0.85, 0.8], patience=1, min_delta=0.1)
early_stopping("baseline, improving", [0.9, 0.8, 0.7, 0.6], patience=2, baseline=0.5)
early_stopping("baseline, flat", [0.9, 0.95, 0.97, 0.4], patience=2, baseline=0.5)
early_stopping("start_from_epoch", [1.0, 2.0, 3.0, 2.5, 2.6, 0.1], patience=1,
               start_from_epoch=2, restore_best_weights=True)
early_stopping("max, never stops", [0.5, 0.7, 0.6], monitor="val_accuracy", mode="max", patience=5,
               restore_best_weights=True)
early_stopping("nan", [1.0, float("nan"), 0.9, 0.95], patience=1)

reduce_lr("plateau", [1.0, 1.0, 1.0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9],
          factor=0.5, patience=2, cooldown=1, min_lr=0.02)
reduce_lr("min_delta", [1.0, 0.99995, 0.9999, 0.99985, 0.5], factor=0.1, patience=1)
reduce_lr("min_lr", [1.0] * 6, lr=1e-3, factor=0.1, patience=1, min_lr=1e-5)

schedule("ExponentialDecay(0.1, 10, 0.5)", schedules.ExponentialDecay(0.1, 10, 0.5),
         [0, 5, 10, 15, 25])
schedule("ExponentialDecay(0.1, 10, 0.5, staircase)",
         schedules.ExponentialDecay(0.1, 10, 0.5, staircase=True), [0, 5, 10, 15, 25])
schedule("CosineDecay(0.1, 100, alpha=0.1)", schedules.CosineDecay(0.1, 100, alpha=0.1),
         [0, 25, 50, 100, 150])
schedule("CosineDecay(0.0, 100, warmup_target=0.1, warmup_steps=10)",
         schedules.CosineDecay(0.0, 100, warmup_target=0.1, warmup_steps=10),
         [0, 5, 10, 35, 60, 110, 200])
schedule("PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1])",
         schedules.PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1]), [0, 10, 11, 20, 21, 100])

csv_logger("with validation", [
    {"loss": 0.5, "accuracy": 0.25, "val_loss": 1e-05, "val_accuracy": 1.0},
    {"loss": 0.123456789, "accuracy": 1e16, "val_loss": 12345.0, "val_accuracy": float("nan")},
])
csv_logger("no validation", [{"loss": 0.5, "accuracy": 0.75}])
csv_logger("append twice", [{"loss": 2.0, "val_loss": 3.0}], append_runs=2)
