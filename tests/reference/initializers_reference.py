"""Known answers for kiln's initializers, regularizers and constraints
(crates/kiln/src/model/{initializers,regularizers,constraints}.rs), from Keras 3.

Writes crates/kiln/tests/data/initializers_reference.json:
- "initializers": for each config (a flat TOML-style table: class_name and Keras' arguments)
  and each shape (a Dense kernel [256, 512], a Conv2D kernel [3, 3, 16, 32]) the moments of
  Keras' draws (seed 1): mean, std, min, max. kiln's draws come from another generator, so
  the Rust tests compare moments within a statistical tolerance, never the values.
- "regularizers": the penalty of each config on the fixed tensors below ("input").
- "constraints": each config's output on the fixed tensors below ("input" and "output",
  row-major, float32).

The fixed tensors: values(shape)[i] = 1.5 * sin(0.37 * i + 0.3), row-major, for the shapes
[3, 4] (a Dense kernel) and [2, 2, 3, 2] (a Conv2D kernel).

Run: /root/.cache/kiln/tfvenv/bin/python tests/reference/initializers_reference.py
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import keras  # noqa: E402

OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..", "..", "crates", "kiln", "tests", "data", "initializers_reference.json",
)

INITIALIZERS = [
    {"class_name": "GlorotUniform"},
    {"class_name": "GlorotNormal"},
    {"class_name": "HeNormal"},
    {"class_name": "HeUniform"},
    {"class_name": "LecunNormal"},
    {"class_name": "LecunUniform"},
    {"class_name": "Orthogonal", "gain": 2.0},
    {"class_name": "Zeros"},
    {"class_name": "Ones"},
    {"class_name": "Constant", "value": 0.25},
    {"class_name": "RandomNormal"},
    {"class_name": "RandomNormal", "mean": 0.5, "stddev": 0.2},
    {"class_name": "RandomUniform"},
    {"class_name": "RandomUniform", "minval": -0.3, "maxval": 0.7},
    {"class_name": "TruncatedNormal"},
    {"class_name": "TruncatedNormal", "mean": 0.1, "stddev": 0.3},
    {"class_name": "VarianceScaling"},
    {"class_name": "VarianceScaling", "scale": 2.0, "mode": "fan_out", "distribution": "uniform"},
    {"class_name": "VarianceScaling", "scale": 0.5, "mode": "fan_avg",
     "distribution": "untruncated_normal"},
    {"class_name": "Identity", "gain": 3.0},
]
SHAPES = [[256, 512], [3, 3, 16, 32]]

REGULARIZERS = [
    {"class_name": "L1"},
    {"class_name": "L2"},
    {"class_name": "L1L2"},
    {"class_name": "L1", "l1": 0.1},
    {"class_name": "L2", "l2": 1e-4},
    {"class_name": "L1L2", "l1": 0.003, "l2": 0.02},
]

CONSTRAINTS = [
    {"class_name": "MaxNorm"},
    {"class_name": "MaxNorm", "max_value": 1.5, "axis": 1},
    {"class_name": "MaxNorm", "max_value": 2.0, "axis": [0, 1, 2]},
    {"class_name": "MaxNorm", "max_value": 1.0, "axis": -1},
    {"class_name": "NonNeg"},
    {"class_name": "UnitNorm"},
    {"class_name": "UnitNorm", "axis": 1},
    {"class_name": "UnitNorm", "axis": [0, 1, 2]},
    {"class_name": "MinMaxNorm"},
    {"class_name": "MinMaxNorm", "min_value": 1.8, "max_value": 2.2, "rate": 0.5, "axis": 1},
    {"class_name": "MinMaxNorm", "min_value": 2.0, "max_value": 3.0, "rate": 1.0,
     "axis": [0, 1, 2]},
]
FIXED = [[3, 4], [2, 2, 3, 2]]


def values(shape):
    n = int(np.prod(shape))
    return (1.5 * np.sin(0.37 * np.arange(n) + 0.3)).reshape(shape).astype("float32")


def flat(array):
    return [float(v) for v in np.asarray(array).reshape(-1)]


def build(module, config):
    args = {k: v for k, v in config.items() if k != "class_name"}
    return getattr(module, config["class_name"])(**args)


def fits(config, shape):
    # Keras' Identity takes 2-D shapes only; an axis list needs the rank it names.
    if config["class_name"] == "Identity":
        return len(shape) == 2
    axis = config.get("axis", 0)
    return all(a < len(shape) for a in (axis if isinstance(axis, list) else [axis]))


def main():
    out = {"keras_version": keras.__version__, "initializers": [], "regularizers": [],
           "constraints": []}
    for config in INITIALIZERS:
        for shape in SHAPES:
            if not fits(config, shape):
                continue
            random = config["class_name"] not in ("Zeros", "Ones", "Constant", "Identity")
            init = build(keras.initializers, {**config, **({"seed": 1} if random else {})})
            w = keras.ops.convert_to_numpy(init(shape, dtype="float32")).astype(np.float64)
            out["initializers"].append({
                "config": config, "shape": shape, "mean": w.mean(), "std": w.std(),
                "min": w.min(), "max": w.max(),
            })
    for config in REGULARIZERS:
        for shape in FIXED:
            penalty = build(keras.regularizers, config)(values(shape))
            out["regularizers"].append({"config": config, "shape": shape,
                                        "input": flat(values(shape)),
                                        "penalty": float(penalty)})
    for config in CONSTRAINTS:
        for shape in FIXED:
            if not fits(config, shape):
                continue
            w = build(keras.constraints, config)(values(shape))
            out["constraints"].append({
                "config": config, "shape": shape, "input": flat(values(shape)),
                "output": flat(keras.ops.convert_to_numpy(w)),
            })
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.normpath(OUT)}: {len(out['initializers'])} initializer draws, "
          f"{len(out['regularizers'])} penalties, {len(out['constraints'])} constraint outputs")


if __name__ == "__main__":
    main()
