#!/usr/bin/env bash
# Installs the UCR archive's ItalyPowerDemand time-series set (67 training and 1029 test series
# of 24 hourly values, 2 classes) as NPY files kiln's input pipeline reads:
#   $UCR_DIR/ItalyPowerDemand/{x_train,y_train,x_test,y_test}.npy
#   x: float32 [n, 24, 1] (the archive's z-normalized values), y: int64 [n] (class 1 -> 0, 2 -> 1)
# UCR_DIR defaults to /usr/local/share/datasets/ucr (where the examples and tests look).
#
# The data comes from the PyPI wheel aeon 1.6.0, which bundles it
# (aeon/datasets/data/ItalyPowerDemand/ItalyPowerDemand_{TRAIN,TEST}.ts): `pip download --no-deps`
# fetches the wheel alone (none of aeon's dependencies), its SHA-256 is checked, and the two files
# are read out of the zip with Python's standard library (no numpy needed). Source and citation:
# docs/data.md "Real sequence data".
# Safe to run again: it does nothing when the four files are there.
set -euo pipefail

UCR_DIR="${UCR_DIR:-/usr/local/share/datasets/ucr}"
DEST="$UCR_DIR/ItalyPowerDemand"
WHEEL="aeon-1.6.0-py3-none-any.whl"
WHEEL_SHA256="d05227086706f80111ac5fee8de4d5d3115bb3bcfd1c786c8629393055816409"

if [ -f "$DEST/x_train.npy" ] && [ -f "$DEST/y_train.npy" ] && [ -f "$DEST/x_test.npy" ] &&
  [ -f "$DEST/y_test.npy" ]; then
  echo "ucr-data: ok (ItalyPowerDemand in $DEST)"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "ucr-data: installing python3-pip (Debian package) for pip download"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q python3-pip
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "ucr-data: downloading $WHEEL from PyPI (no dependencies)"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
  --dest "$tmp" aeon==1.6.0
echo "$WHEEL_SHA256  $tmp/$WHEEL" | sha256sum --check --quiet

python3 - "$tmp/$WHEEL" "$tmp/out" <<'PY'
"""Reads ItalyPowerDemand's .ts files out of the aeon wheel and writes x/y NPY files."""
import os
import struct
import sys
import zipfile

wheel, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
prefix = "aeon/datasets/data/ItalyPowerDemand/ItalyPowerDemand_"
expected = {"TRAIN": 67, "TEST": 1029}


def read_ts(text):
    """The series and labels of a univariate, equal-length .ts file (sktime/aeon format)."""
    rows, labels, in_data = [], [], False
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not in_data:
            in_data = line.lower() == "@data"
            continue
        values, label = line.rsplit(":", 1)
        rows.append([float(v) for v in values.split(",")])
        labels.append(int(label))
    return rows, labels


def write_npy(path, descr, shape, fmt, values):
    """NPY format 1.0: magic, header dict padded to a multiple of 64 bytes, C-order data."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr,
        "".join(f"{d}, " for d in shape) if len(shape) == 1 else ", ".join(map(str, shape)),
    )
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack(f"<{len(values)}{fmt}", *values))


with zipfile.ZipFile(wheel) as z:
    for split, n in expected.items():
        rows, labels = read_ts(z.read(f"{prefix}{split}.ts").decode("utf-8"))
        steps = {len(r) for r in rows}
        if len(rows) != n or steps != {24} or set(labels) != {1, 2}:
            sys.exit(f"ucr-data: {split}: {len(rows)} series of lengths {steps}, labels "
                     f"{sorted(set(labels))}; expected {n} of length 24, labels 1 and 2")
        name = split.lower()
        flat = [v for r in rows for v in r]
        write_npy(f"{out}/x_{name}.npy", "<f4", (n, 24, 1), "f", flat)
        write_npy(f"{out}/y_{name}.npy", "<i8", (n,), "q", [l - 1 for l in labels])
PY

$SUDO mkdir -p "$DEST"
$SUDO cp "$tmp"/out/*.npy "$DEST"/
$SUDO chmod 644 "$DEST"/*.npy
echo "ucr-data: ok (ItalyPowerDemand installed in $DEST)"
