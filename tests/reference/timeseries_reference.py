"""Keras 3 answers for kiln's data utilities: `timeseries_dataset_from_array` windows and
targets, and `pad_sequences`, for the asserts in crates/kiln-data/src/sources/timeseries.rs,
crates/kiln-data/src/preprocess/pad_sequences.rs and crates/kiln/src/pipeline/tests.rs.
Run once with the tfvenv:
    /root/.cache/kiln/tfvenv/bin/python tests/reference/timeseries_reference.py"""
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import numpy as np
import keras


def windows(label, data, targets, **kw):
    ds = keras.utils.timeseries_dataset_from_array(data, targets, batch_size=None, **kw)
    items = list(ds.as_numpy_iterator())
    print(f"{label}: {len(items)} windows")
    for i in sorted({0, 1, len(items) - 1}) if items else []:
        x, y = items[i] if targets is not None else (items[i], None)
        print(f"  [{i}] x={x.tolist()} y={None if y is None else y.tolist()}")


# Docstring example 1: every other step, windows of 10, target = the step after the window.
data = np.arange(100)
windows("sampling_rate=2", data, data[10:], sequence_length=10, sampling_rate=2)
# Stride, start and end, on [time, features] data.
data2 = np.arange(60, dtype="float32").reshape(30, 2)
windows("stride_start_end", data2, np.arange(30) * 10, sequence_length=4,
        sequence_stride=3, sampling_rate=2, start_index=2, end_index=25)
# Docstring example 2: next-step prediction, targets = data[sequence_length:].
windows("next_step", np.arange(8), np.arange(8)[3:], sequence_length=3)
# No targets; sequence_length past the data gives no windows in Keras (kiln: an error).
windows("too_long", np.arange(5), None, sequence_length=6)

seqs = [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10], [11]]
for kw in [dict(maxlen=4), dict(maxlen=4, padding="post"), dict(maxlen=4, truncating="post"),
           dict(maxlen=4, padding="post", truncating="post", value=-1)]:
    print("pad_sequences", kw, keras.utils.pad_sequences(seqs, **kw).tolist())
print("pad_sequences float", keras.utils.pad_sequences([[0.5, 1.5]], maxlen=3, dtype="float32",
                                                      value=2.5).tolist())
