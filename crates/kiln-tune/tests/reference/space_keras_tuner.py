"""Reference for kiln-tune's search-space tests: Keras Tuner's (keras-tuner 1.4.8)
`prob_to_value` for a few hyperparameters and draws u, and the exhaustive GridSearchOracle
order over a conditional space.

Run: /root/.cache/kiln/tfvenv/bin/python crates/kiln-tune/tests/reference/space_keras_tuner.py
"""
import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras_tuner as kt

H = kt.engine.hyperparameters
cases = [
    H.Int("int_log_step", 2, 32, step=2, sampling="log"),
    H.Int("int_log", 1, 100, sampling="log"),
    H.Int("int_rev", 1, 100, sampling="reverse_log"),
    H.Int("int_lin", 6, 13, step=3),
    H.Float("float_log", 1e-4, 1e-2, sampling="log"),
    H.Float("float_rev", 1e-4, 1e-2, sampling="reverse_log"),
    H.Float("float_step_log", 0.001, 10, step=10, sampling="log"),
    H.Choice("choice", ["a", "b", "c"]),
]
for h in cases:
    print(h.name, [h.prob_to_value(u) for u in (0.0, 0.25, 0.5, 0.75, 0.999)])

space = kt.HyperParameters()
space.Choice("model", ["linear", "dnn"])
space.Int("layers", 1, 3, parent_name="model", parent_values=["dnn"])
space.Choice("units", [16, 32], parent_name="model", parent_values=["dnn"])
space.Boolean("bias")
oracle = kt.oracles.GridSearchOracle(
    objective=kt.Objective("score", "max"), hyperparameters=space, seed=1
)
oracle._set_project_dir(tempfile.mkdtemp(), "grid")
n = 0
while True:
    trial = oracle.create_trial("tuner0")
    if trial.status != "RUNNING":
        print("end", trial.status)
        break
    print("grid", n, sorted(trial.hyperparameters.values.items()))
    n += 1
    oracle.update_trial(trial.trial_id, {"score": 1.0})
    trial.status = "COMPLETED"
    oracle.end_trial(trial)
