"""Known answers for kiln's ModelCheckpoint tests, computed by driving Keras' own callback.

Run (TensorFlow 2.21, Keras 3, CPU):
    /root/.cache/kiln/tfvenv/bin/python tests/reference/keras_model_checkpoint_reference.py
The printed lines are pasted into crates/kiln/src/callbacks/model_checkpoint.rs.

Each scenario calls ModelCheckpoint's hooks as `model.fit` does, with scripted logs, and
records every `save_weights` call (the path, and the epoch whose weights were saved: before
each hook the model's single weight is set to the epoch number). The last section prints
Python's `str.format` for the format specs kiln implements.
"""
import os
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import callbacks, optimizers  # noqa: E402


def tiny_model():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    model.compile(optimizer=optimizers.SGD(0.1), loss="mse", metrics=["accuracy"])
    return model


def checkpoint(name, epochs, batches=0, **kwargs):
    """`epochs`: per epoch, a dict of epoch logs; with `batches`, per-batch logs are
    `{"loss": epoch + batch / 10}`."""
    model = tiny_model()
    saved = []

    def save_weights(filepath, overwrite=True):
        saved.append((filepath, int(model.layers[0].get_weights()[0][0, 0])))

    model.save_weights = save_weights
    cb = callbacks.ModelCheckpoint(save_weights_only=True, **kwargs)
    cb.set_model(model)
    cb.on_train_begin()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for epoch, logs in enumerate(epochs):
                model.layers[0].set_weights([np.array([[float(epoch)]], dtype=np.float32)])
                cb.on_epoch_begin(epoch)
                for batch in range(batches):
                    cb.on_train_batch_end(batch, {"loss": epoch + batch / 10})
                cb.on_epoch_end(epoch, dict(logs))
            outcome = f"saved={saved}"
        except Exception as e:  # noqa: BLE001
            outcome = f"saved={saved} then {type(e).__name__}: {e}"
    warned = sorted({str(w.message) for w in caught})
    print(f"ModelCheckpoint {name}: {kwargs} -> {outcome} warnings={warned} best={cb.best}")


def vl(*values, key="val_loss"):
    return [{"loss": 1.0, key: v} for v in values]


checkpoint("every epoch", vl(0.5, 0.4, 0.456, 0.3),
           filepath="ckpt-{epoch:02d}-{val_loss:.2f}.weights.h5")
checkpoint("best only", vl(1.0, 0.8, 0.9, 0.7, 0.7, float("nan"), 0.6),
           filepath="best.weights.h5", save_best_only=True)
checkpoint("best only, named by epoch", vl(1.0, 0.8, 0.9, 0.7),
           filepath="e{epoch}.weights.h5", save_best_only=True)
checkpoint("best only, max", vl(0.5, 0.7, 0.6, 0.9, key="val_accuracy"),
           filepath="e{epoch}.weights.h5", save_best_only=True, monitor="val_accuracy", mode="max")
checkpoint("initial_value_threshold", vl(0.8, 0.7, 0.72, 0.6),
           filepath="e{epoch}.weights.h5", save_best_only=True, initial_value_threshold=0.75)
checkpoint("monitor missing", [{"loss": 1.0}, {"loss": 0.5}],
           filepath="e{epoch}.weights.h5", save_best_only=True)
checkpoint("every 3 batches", vl(0.5, 0.4), batches=4,
           filepath="b-{epoch}-{batch}-{loss:.3f}.weights.h5", save_freq=3)
checkpoint("every 3 batches, best loss", vl(0.5, 0.4), batches=4,
           filepath="b-{epoch}-{batch}.weights.h5", save_freq=3, save_best_only=True,
           monitor="loss", mode="min")

print("format:")
for spec, value in [
    ("{epoch}", 3), ("{epoch:02d}", 3), ("{epoch:03d}", 12), ("{epoch:02d}", 123),
    ("{epoch:4d}", 7), ("{epoch:.2f}", 3), ("{loss}", 0.1), ("{loss}", 1e-05),
    ("{loss}", 2.0), ("{loss:.2f}", 0.125), ("{loss:.2f}", 0.375), ("{loss:.1f}", 0.25),
    ("{loss:.0f}", 0.5), ("{loss:.0f}", 1.5), ("{loss:.4f}", 1.00005), ("{loss:08.3f}", -1.5),
    ("{loss:.2f}", float("nan")), ("{loss:6.1f}", float("inf")), ("{loss:06.1f}", float("nan")),
    ("{loss:.3e}", 12345.678), ("{loss:e}", 0.000123), ("{loss:f}", 0.1), ("{loss:10.4f}", 3.25159),
    ("{epoch:05d}", -3), ("x{{epoch}}-{epoch}", 2),
]:
    name = spec.split("{")[-1].split(":")[0].split("}")[0] if "{{" not in spec else "epoch"
    print(f"  {spec!r} with {value!r} -> {spec.format(**{name: value})!r}")
for spec, value in [("{loss:02d}", 0.5)]:
    try:
        spec.format(loss=value)
    except ValueError as e:
        print(f"  {spec!r} with {value!r} -> ValueError: {e}")
