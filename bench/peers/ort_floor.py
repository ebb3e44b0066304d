"""onnxruntime's raw inference time per batch on an exported kiln model: the floor under
`kiln serve`'s latency (no HTTP, no JSON). Prints one JSON line per batch size.

Usage: ort_floor.py MODEL.onnx [--batches 1,8,64] [--seconds 2]
"""

import argparse
import json
import time

import numpy as np
import onnxruntime as ort

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("--batches", default="1,8,64")
ap.add_argument("--seconds", type=float, default=2.0)
args = ap.parse_args()

sess = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
inp = sess.get_inputs()[0]
shape = [int(d) for d in inp.shape[1:]]
rng = np.random.default_rng(0)
for b in [int(v) for v in args.batches.split(",")]:
    x = rng.random([b] + shape, dtype=np.float32)
    for _ in range(10):
        sess.run(None, {inp.name: x})
    times = []
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        sess.run(None, {inp.name: x})
        times.append(time.perf_counter() - t)
    ms = float(np.median(times) * 1e3)
    print(json.dumps({"peer": "onnxruntime", "batch": b, "median_ms_per_batch": round(ms, 4),
                      "examples_per_s": round(b / (ms / 1e3), 1), "runs": len(times),
                      "onnxruntime": ort.__version__}))
