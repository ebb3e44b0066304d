#!/usr/bin/env python3
"""Known answers for kiln-data's GZIP / ZLIB TextLineDataset and CsvDataset tests
(crates/kiln-data/src/sources/text_line.rs, csv_dataset.rs, make_csv.rs).

    /root/.cache/kiln/tfvenv/bin/python tests/reference/compressed_text_csv_reference.py

Writes the same bytes the Rust tests write, compressed with Python's gzip / zlib (level 6,
as flate2's default), reads them with tf.data and prints what TensorFlow yields:
  * TextLineDataset(compression_type=...) gives the plain file's lines for "GZIP" and "ZLIB";
  * a GZIP file cut short: TensorFlow yields the lines it holds, the last one cut, and no
    error (kiln yields the complete lines, then an error: a difference on purpose);
  * CsvDataset(compression_type="GZIP") parses quoted fields with newlines as the plain file;
  * make_csv_dataset(compression_type="GZIP") reads the same rows.
"""

import gzip
import os
import tempfile
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

TEXT = b"first\nsecond\r\n\nlast without newline"
CSV = b'name,age,score\n"Smith, Jane",41,0.5\n"two\nlines",7,-1e3\nAnn,,2.25\n'

d = tempfile.mkdtemp()


def write(name, data):
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def lines(path, ct):
    return [bytes(x.numpy()) for x in tf.data.TextLineDataset(path, compression_type=ct)]


plain = write("a.txt", TEXT)
gz = write("a.txt.gz", gzip.compress(TEXT, compresslevel=6))
zl = write("a.txt.z", zlib.compress(TEXT, 6))
print("plain:", lines(plain, ""))
print("GZIP: ", lines(gz, "GZIP"))
print("ZLIB: ", lines(zl, "ZLIB"))

# Many lines, gzip cut in the middle: TensorFlow yields the lines before the cut, then fails.
many = b"".join(b"line %05d\n" % i for i in range(5000))
full = gzip.compress(many, compresslevel=6)
cut = write("cut.txt.gz", full[: len(full) // 2])
got = []
try:
    for x in tf.data.TextLineDataset(cut, compression_type="GZIP"):
        got.append(bytes(x.numpy()))
    # TensorFlow 2.21 ends quietly here, its last element a partial line: kiln instead
    # yields the complete lines and then an error naming the line and byte (docs/data.md).
    print("truncated: no error;", len(got), "elements, last", got[-1])
except tf.errors.DataLossError as e:
    print("truncated: DataLossError after", len(got), "lines; last", got[-1] if got else None)
except tf.errors.OpError as e:
    print("truncated:", type(e).__name__, "after", len(got), "lines")

csv_gz = write("p.csv.gz", gzip.compress(CSV, compresslevel=6))
ds = tf.data.experimental.CsvDataset(
    csv_gz, [tf.constant("?"), tf.constant(-1, tf.int32), tf.float32], header=True,
    compression_type="GZIP")
print("CsvDataset GZIP:", [(bytes(a.numpy()), int(b), float(c)) for a, b, c in ds])
mk = tf.data.experimental.make_csv_dataset(
    csv_gz, batch_size=4, num_epochs=1, shuffle=False, compression_type="GZIP")
for batch in mk:
    print("make_csv_dataset GZIP:", {k: v.numpy().tolist() for k, v in batch.items()})
