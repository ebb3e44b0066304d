#!/usr/bin/env python3
"""TFRecord + tf.train.Example interop between kiln-data and real TensorFlow.

    cargo build -p kiln-data --example tfrecord_tool
    python tests/interop/tfrecord_interop.py --kiln-tool target/debug/examples/tfrecord_tool

Checks, for compression_type "", "GZIP" and "ZLIB":
  (a) files written by tf.io.TFRecordWriter (records: tf.train.Example serialized with
      deterministic=True) are read by kiln with identical record bytes and identical decoded
      values, and kiln's parse spec gives the same arrays as tf.io.parse_single_example;
  (b) files written by kiln's TfRecordWriter are read by tf.data.TFRecordDataset with
      identical record bytes (kiln's encoding equals protobuf's deterministic serialization),
      identical tf.train.Example values, and identical tf.io.parse_single_example results;
      uncompressed, kiln's file equals TensorFlow's file byte for byte;
  (c) tf.io.parse_single_example's rules agree: defaults for missing and unset features,
      errors for a missing required feature, a wrong type or a wrong number of values;
  (d) truncated and corrupted files make TensorFlow fail with DataLossError (except a file cut
      inside a record header, which TensorFlow reads as a clean end) and kiln fail naming the
      damaged record's start offset and index.

Floats are compared as float32 bit patterns, byte strings as bytes. Exits non-zero on any
mismatch. Needs TensorFlow (tensorflow-cpu 2.x) and NumPy.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

COMPRESSIONS = ["", "GZIP", "ZLIB"]
FAILURES = []


def check(condition, what):
    if condition:
        print(f"  ok   {what}")
    else:
        print(f"  FAIL {what}")
        FAILURES.append(what)


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bits_f32(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


# ---------------------------------------------------------------------------------------------
# Test data, in the tool's JSON form: bytes as hex, floats as u32 bit patterns, int64 as ints.

SPECIAL_FLOATS = [0x00000000, 0x80000000, 0x3F800000, 0x7F800000, 0xFF800000, 0x7FC00000,
                  0x00000001, 0x7F7FFFFF, 0x3DCCCCCD, 0xC2F6E979]


def wild_examples():
    """Examples with edge cases: empty lists, unset features, non-UTF-8 bytes, extreme values."""
    out = [
        {},
        {"empty_bytes": {"bytes_list": []}, "empty_float": {"float_list": []},
         "empty_int": {"int64_list": []}, "unset": {}},
        {"b": {"bytes_list": ["", "00ff80", "68656c6c6f", "e282ac" * 50]},
         "f": {"float_list": SPECIAL_FLOATS},
         "i": {"int64_list": [0, 1, -1, 2**63 - 1, -(2**63), 300, -300, 2**31, -(2**31) - 1]}},
        {"unicode name \u00e9": {"int64_list": [7]}, "Z": {"float_list": [0x40490FDB]},
         "a": {"bytes_list": [bytes(range(256)).hex()]}},
        {"big": {"float_list": [f32_bits(i * 0.37 - 50.0) for i in range(3000)]},
         "many": {"int64_list": list(range(-1000, 1000, 3))}},
    ]
    return out


def empty_name_examples():
    """A feature named "": Python's upb runtime sorts that key last when serializing with
    deterministic=True, while protobuf C++ and pure-Python (and kiln) sort it first, so only
    values are compared for these, not bytes."""
    return [{"": {"int64_list": [1]}, "unset": {}, "a": {"float_list": [0x3F800000]}}]


def regular_examples(n=12):
    """Examples that all fit SPEC (with "weight" missing from every third record)."""
    rng = np.random.default_rng(7)
    out = []
    for i in range(n):
        image = rng.integers(0, 256, size=int(rng.integers(0, 40)), dtype=np.uint8).tobytes()
        ex = {
            "image": {"bytes_list": [image.hex()]},
            "xy": {"float_list": [f32_bits(float(v)) for v in
                                  rng.standard_normal(6).astype(np.float32)]},
            "label": {"int64_list": [int(rng.integers(-(2**40), 2**40))]},
            "tags": {"int64_list": [int(v) for v in rng.integers(0, 100, size=i % 4)]},
            "scores": {"float_list": [f32_bits(float(v)) for v in
                                      rng.random(size=(i * 7) % 5).astype(np.float32)]},
            "ignored": {"bytes_list": ["abcd"]},
        }
        if i % 3 != 0:
            ex["weight"] = {"float_list": [f32_bits(float(np.float32(0.5 + i)))]}
        out.append(ex)
    return out


SPEC = {
    "image": {"kind": "fixed", "shape": [], "dtype": "string"},
    "xy": {"kind": "fixed", "shape": [2, 3], "dtype": "float32"},
    "label": {"kind": "fixed", "shape": [], "dtype": "int64"},
    "weight": {"kind": "fixed", "shape": [1], "dtype": "float32",
               "default": [f32_bits(-1.25)]},
    "tags": {"kind": "var", "dtype": "int64"},
    "scores": {"kind": "var", "dtype": "float32"},
}


# ---------------------------------------------------------------------------------------------
# Conversions between the JSON form and TensorFlow.

def to_tf_example(ex):
    features = {}
    for name, feature in ex.items():
        if not feature:
            features[name] = tf.train.Feature()
        elif "bytes_list" in feature:
            features[name] = tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[bytes.fromhex(h) for h in feature["bytes_list"]]))
        elif "float_list" in feature:
            features[name] = tf.train.Feature(float_list=tf.train.FloatList(
                value=[bits_f32(b) for b in feature["float_list"]]))
        else:
            features[name] = tf.train.Feature(int64_list=tf.train.Int64List(
                value=feature["int64_list"]))
    return tf.train.Example(features=tf.train.Features(feature=features))


def from_tf_example(example):
    out = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        if kind is None:
            out[name] = {}
        elif kind == "bytes_list":
            out[name] = {"bytes_list": [v.hex() for v in feature.bytes_list.value]}
        elif kind == "float_list":
            out[name] = {"float_list": [int(b) for b in np.asarray(
                feature.float_list.value, dtype=np.float32).view(np.uint32)]}
        else:
            out[name] = {"int64_list": [int(v) for v in feature.int64_list.value]}
    return out


def tf_spec(json_spec=None):
    dtypes = {"string": tf.string, "float32": tf.float32, "int64": tf.int64}
    spec = {}
    for name, s in (json_spec or SPEC).items():
        dtype = dtypes[s["dtype"]]
        if s["kind"] == "fixed":
            default = None
            if "default" in s:
                default = [bits_f32(b) for b in s["default"]] if s["dtype"] == "float32" \
                    else s["default"]
            spec[name] = tf.io.FixedLenFeature(s["shape"], dtype, default_value=default)
        else:
            spec[name] = tf.io.VarLenFeature(dtype)
    return spec


def tf_parse(path, compression, json_spec=None, record_errors=False):
    """tf.data.TFRecordDataset + tf.io.parse_single_example, in the tool's output form; with
    record_errors, a record that fails to parse gives {"error": message}."""
    ds = tf.data.TFRecordDataset([path], compression_type=compression)
    spec = tf_spec(json_spec)
    out = []
    for serialized in ds:
        try:
            parsed = tf.io.parse_single_example(serialized, spec)
        except tf.errors.InvalidArgumentError as e:
            if not record_errors:
                raise
            out.append({"error": e.message.splitlines()[0]})
            continue
        element = {}
        for name, value in parsed.items():
            if isinstance(value, tf.sparse.SparseTensor):
                value = value.values
            value = value.numpy()
            if isinstance(value, bytes):  # a scalar tf.string: kiln gives its bytes, uint8 [n]
                element[name] = {"dtype": "uint8", "shape": [len(value)], "values": value.hex()}
            elif value.dtype == np.float32:
                element[name] = {"dtype": "float32", "shape": list(value.shape),
                                 "values": [int(b) for b in value.reshape(-1).view(np.uint32)]}
            else:
                element[name] = {"dtype": "int64", "shape": list(value.shape),
                                 "values": [int(v) for v in value.reshape(-1)]}
        out.append(element)
    return out


def tf_read_raw(path, compression):
    return [r.numpy() for r in tf.data.TFRecordDataset([path], compression_type=compression)]


def tf_write(path, compression, examples):
    options = tf.io.TFRecordOptions(compression_type=compression)
    with tf.io.TFRecordWriter(path, options) as writer:
        for ex in examples:
            writer.write(to_tf_example(ex).SerializeToString(deterministic=True))


def serialized(examples):
    return [to_tf_example(ex).SerializeToString(deterministic=True) for ex in examples]


# ---------------------------------------------------------------------------------------------
# kiln's side.

class Kiln:
    def __init__(self, tool, spec_path):
        self.tool = tool
        self.spec_path = spec_path

    def _run(self, args, stdin=None):
        result = subprocess.run([self.tool, *args], input=stdin, capture_output=True, text=True)
        return result.returncode, result.stdout, result.stderr

    def write(self, path, compression, examples):
        rc, _, err = self._run(["write", path, "--compression", compression],
                               json.dumps(examples))
        if rc != 0:
            raise RuntimeError(f"kiln write failed: {err}")

    def read(self, path, compression):
        rc, out, err = self._run(["read", path, "--compression", compression])
        if rc != 0:
            raise RuntimeError(f"kiln read failed: {err}")
        return json.loads(out)

    def read_error(self, path, compression):
        rc, _, err = self._run(["read", path, "--compression", compression])
        return None if rc == 0 else err.strip()

    def parse(self, path, compression, parallel=0, spec_path=None, on_error="stop"):
        rc, out, err = self._run(["parse", path, "--compression", compression,
                                  "--spec", spec_path or self.spec_path,
                                  "--parallel", str(parallel), "--on-error", on_error])
        if rc != 0:
            raise RuntimeError(f"kiln parse failed: {err}")
        return json.loads(out)


def first_difference(a, b):
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} items"
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"item {i}: {json.dumps(x)[:300]} vs {json.dumps(y)[:300]}"
    return None


def same(label, got, expected):
    diff = first_difference(got, expected)
    check(diff is None, label + ("" if diff is None else f" ({diff})"))


# ---------------------------------------------------------------------------------------------

DATASETS = [("wild", wild_examples, True), ("regular", regular_examples, True),
            ("empty-name", empty_name_examples, False)]


def tf_reads_kiln(kiln, tmp, compression):
    for name, make, compare_bytes in DATASETS:
        examples = make()
        path = os.path.join(tmp, f"kiln-{name}-{compression or 'plain'}.tfrecord")
        kiln.write(path, compression, examples)
        raw = tf_read_raw(path, compression)
        if compare_bytes:
            same(f"(b) {name} {compression!r}: TF reads kiln's records, bytes equal protobuf's "
                 "deterministic serialization", [r.hex() for r in raw],
                 [s.hex() for s in serialized(examples)])
        decoded = [from_tf_example(tf.train.Example.FromString(r)) for r in raw]
        same(f"(b) {name} {compression!r}: tf.train.Example values identical", decoded, examples)
        if name == "regular":
            same(f"(b) {compression!r}: tf.io.parse_single_example on kiln's file == kiln's "
                 "parse", tf_parse(path, compression), kiln.parse(path, compression))
        if compression == "" and compare_bytes:
            tf_path = os.path.join(tmp, f"tf-{name}-same.tfrecord")
            tf_write(tf_path, "", examples)
            with open(path, "rb") as a, open(tf_path, "rb") as b:
                check(a.read() == b.read(),
                      f"(b) {name}: kiln's uncompressed file == TensorFlow's, byte for byte")


def kiln_reads_tf(kiln, tmp, compression):
    for name, make, _ in DATASETS:
        examples = make()
        path = os.path.join(tmp, f"tf-{name}-{compression or 'plain'}.tfrecord")
        tf_write(path, compression, examples)
        records = kiln.read(path, compression)
        same(f"(a) {name} {compression!r}: kiln reads TF's records byte for byte",
             [r["raw"] for r in records], [s.hex() for s in serialized(examples)])
        same(f"(a) {name} {compression!r}: kiln decodes identical tf.train.Example values",
             [r["example"] for r in records], examples)
        if name == "regular":
            expected = tf_parse(path, compression)
            same(f"(a) {compression!r}: kiln's parse of TF's file == tf.io.parse_single_example",
                 kiln.parse(path, compression), expected)
            same(f"(a) {compression!r}: same with 3 parallel parse workers",
                 kiln.parse(path, compression, parallel=3), expected)


EDGE_SPEC = {
    "label": {"kind": "fixed", "shape": [], "dtype": "int64", "default": [-7]},
    "req": {"kind": "fixed", "shape": [2], "dtype": "float32"},
    "v": {"kind": "var", "dtype": "float32"},
}

GOOD = {"label": {"int64_list": [3]}, "req": {"float_list": [0x3F800000, 0x40000000]},
        "v": {"float_list": [0x40400000]}}


def edge(**changes):
    ex = dict(GOOD)
    for name, feature in changes.items():
        if feature is None:
            del ex[name]
        else:
            ex[name] = feature
    return ex


EDGE_CASES = [
    ("all present", edge()),
    ("default for a missing feature", edge(label=None)),
    ("default for an unset feature", edge(label={})),
    ("error for an empty list of a scalar", edge(label={"int64_list": []})),
    ("error for a missing required feature", edge(req=None)),
    ("error for an unset required feature", edge(req={})),
    ("error for too many values", edge(req={"float_list": [0, 0, 0]})),
    ("error for the wrong type", edge(req={"int64_list": [1, 2]})),
    ("error for a var-len feature of the wrong type", edge(v={"int64_list": [1]})),
    ("empty var-len for a missing feature", edge(v=None)),
    ("empty var-len for an empty list", edge(v={"float_list": []})),
    ("unknown features ignored", edge(extra={"bytes_list": ["00"]})),
]


def parse_rules(kiln, tmp):
    spec_path = os.path.join(tmp, "edge-spec.json")
    with open(spec_path, "w") as f:
        json.dump(EDGE_SPEC, f)
    path = os.path.join(tmp, "edge.tfrecord")
    tf_write(path, "", [ex for _, ex in EDGE_CASES])
    tf_out = tf_parse(path, "", EDGE_SPEC, record_errors=True)
    kiln_out = kiln.parse(path, "", spec_path=spec_path, on_error="record")
    check(len(tf_out) == len(kiln_out) == len(EDGE_CASES), "(c) one result per edge case")
    for (label, _), t, k in zip(EDGE_CASES, tf_out, kiln_out):
        if "error" in t or "error" in k:
            check("error" in t and "error" in k,
                  f"(c) {label}: both fail (TF: {t.get('error', 'ok')[-100:]}; "
                  f"kiln: {k.get('error', 'ok')})")
        else:
            check(t == k, f"(c) {label}: same values ({json.dumps(k)})")


def damaged_files(kiln, tmp):
    examples = regular_examples(4)
    path = os.path.join(tmp, "tf-damaged-source.tfrecord")
    tf_write(path, "", examples)
    with open(path, "rb") as f:
        full = f.read()
    lengths = [len(s) for s in serialized(examples)]
    starts = [sum(12 + n + 4 for n in lengths[:i]) for i in range(len(lengths))]
    # TensorFlow reports a file that ends inside a record's 12-byte header as a clean end of
    # data (record_reader.cc turns the short header read into OutOfRange); kiln reports it as a
    # truncated record, on purpose. Everything else fails in both.
    tf_loss = "DataLossError"
    cases = [
        ("truncated in record 2's data", full[:starts[2] + 12 + 3], "truncated", 2, tf_loss),
        ("truncated in record 1's header", full[:starts[1] + 5], "truncated", 1,
         "no error after 1 records"),
        ("truncated in record 3's footer", full[:len(full) - 1], "truncated", 3, tf_loss),
    ]
    flipped = bytearray(full)
    flipped[starts[1] + 12 + 2] ^= 0x01
    cases.append(("flipped byte in record 1's data", bytes(flipped), "corrupted", 1, tf_loss))
    flipped = bytearray(full)
    flipped[starts[2] + 3] ^= 0x80
    cases.append(("flipped byte in record 2's length", bytes(flipped), "corrupted", 2, tf_loss))
    for label, data, kind, record, tf_expected in cases:
        bad = os.path.join(tmp, "damaged.tfrecord")
        with open(bad, "wb") as f:
            f.write(data)
        try:
            n = sum(1 for _ in tf.data.TFRecordDataset([bad]))
            tf_error = f"no error after {n} records"
        except tf.errors.DataLossError as e:
            tf_error = "DataLossError: " + e.message.splitlines()[0]
        check(tf_error.startswith(tf_expected),
              f"(d) {label}: TensorFlow gives {tf_expected!r} ({tf_error})")
        kiln_error = kiln.read_error(bad, "")
        expected = f"{kind} record at byte {starts[record]} (record index {record})"
        named = kiln_error is not None and "damaged.tfrecord" in kiln_error
        check(named and expected in kiln_error,
              f"(d) {label}: kiln says {expected!r} ({kiln_error})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln-tool", required=True,
                        help="the built tfrecord_tool example binary of kiln-data")
    args = parser.parse_args()
    tool = os.path.abspath(args.kiln_tool)
    if not os.access(tool, os.X_OK):
        sys.exit(f"--kiln-tool {tool} is not an executable; build it with "
                 "`cargo build -p kiln-data --example tfrecord_tool`")
    print(f"TensorFlow {tf.__version__}; kiln tool {tool}")
    with tempfile.TemporaryDirectory(prefix="kiln-tfrecord-interop-") as tmp:
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(SPEC, f)
        kiln = Kiln(tool, spec_path)
        for compression in COMPRESSIONS:
            kiln_reads_tf(kiln, tmp, compression)
            tf_reads_kiln(kiln, tmp, compression)
        parse_rules(kiln, tmp)
        damaged_files(kiln, tmp)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        sys.exit(1)
    print("all TFRecord interop checks passed")


if __name__ == "__main__":
    main()
