"""Reference for kiln-tune's Hyperband test: the brackets, rounds, epochs and promotions that
the real Keras Tuner (keras-tuner 1.4.8) HyperbandOracle produces for max_epochs=27, factor=3,
hyperband_iterations=1, with one worker running trials one at a time.

Trial i (0-based creation order) reports the score (i * 7) % 11 (maximised), so that
promotions are deterministic and checkable without Keras Tuner's random values.

Run: /root/.cache/kiln/tfvenv/bin/python crates/kiln-tune/tests/reference/hyperband_keras_tuner.py
Prints one line per trial: number bracket round epochs initial_epoch resume_from(-1 = none).
"""
import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras_tuner as kt

hp = kt.HyperParameters()
hp.Float("x", 0.0, 1.0)
oracle = kt.oracles.HyperbandOracle(
    objective=kt.Objective("score", "max"),
    max_epochs=27,
    factor=3,
    hyperband_iterations=1,
    seed=1,
    hyperparameters=hp,
)
oracle._set_project_dir(tempfile.mkdtemp(), "hb")
ids = {}
while True:
    trial = oracle.create_trial("tuner0")
    if trial.status != "RUNNING":
        print("end", trial.status)
        break
    n = len(ids)
    ids[trial.trial_id] = n
    v = trial.hyperparameters.values
    parent = ids[v["tuner/trial_id"]] if "tuner/trial_id" in v else -1
    print(n, v["tuner/bracket"], v["tuner/round"], v["tuner/epochs"], v["tuner/initial_epoch"], parent)
    oracle.update_trial(trial.trial_id, {"score": float((n * 7) % 11)})
    trial.status = "COMPLETED"
    oracle.end_trial(trial)
