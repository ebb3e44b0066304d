#!/usr/bin/env python3
"""kiln's HParams summaries read by the real TensorBoard HParams plugin backend.

    cargo build --release --workspace --bins --examples
    python tests/interop/hparams_interop.py --kiln target/release/kiln

Trains a small MLP twice with `kiln train` (512 Fashion-MNIST images, 2 epochs), as two
trials of a study: `<study>/trial-0` and `<study>/trial-1`, each with a TensorBoard callback
whose `hparams` table holds that trial's values (a float, an integer, a string, a boolean).
Then runs TensorBoard's own HParams backend (plugin_event_multiplexer + MultiplexerDataProvider
+ hparams backend_context + list_session_groups.Handler, as the dashboard's /session_groups
route does) over the study directory and checks:
  (a) two sessions, `trial-0/logs` and `trial-1/logs`, each with status STATUS_SUCCESS;
  (b) each session's hparams equal the config's values (ints and floats as numbers, strings,
      booleans);
  (c) the experiment lists the hparams and, as metrics, the runs' scalar series, among them
      (`validation`, `epoch_loss`); each session's value of that metric is its history.json's
      last val_loss (float32);
  (d) the experiment (the dashboard's /experiment route) lists the four hparams with their
      types (numbers as DATA_TYPE_FLOAT64, string, bool).

Exits non-zero on any mismatch. Needs Fashion-MNIST (scripts/setup.sh) and tensorboard.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tensorboard import context as tb_context  # noqa: E402
from tensorboard.backend.event_processing import data_provider  # noqa: E402
from tensorboard.backend.event_processing import plugin_event_multiplexer as pem  # noqa: E402
from tensorboard.plugins import base_plugin  # noqa: E402
from tensorboard.plugins.hparams import api_pb2  # noqa: E402
from tensorboard.plugins.hparams import backend_context  # noqa: E402
from tensorboard.plugins.hparams import get_experiment  # noqa: E402
from tensorboard.plugins.hparams import list_session_groups  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
TRIALS = [
    {"learning_rate": 0.001, "units": 32, "optimizer": "AdamW", "use_bias": True},
    {"learning_rate": 0.0003, "units": 16, "optimizer": "AdamW", "use_bias": False},
]


def config(hp):
    hparams = ", ".join(
        f"{k} = {json.dumps(v) if not isinstance(v, bool) else str(v).lower()}"
        for k, v in hp.items()
    )
    return f"""
name = "hparams"
seed = 5
[data]
data_dir = "{DATA}"
[data.train]
source = "idx"
files = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]
components = ["image", "label"]
x = "image"
y = "label"
take = 512
map = [{{ op = "rescale", scale = 0.00392156862745098, component = "image" }}]
batch_size = 64
[data.validation]
source = "idx"
files = ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
components = ["image", "label"]
x = "image"
y = "label"
take = 256
map = [{{ op = "rescale", scale = 0.00392156862745098, component = "image" }}]
batch_size = 256
[model]
layers = [
  {{ type = "Input", shape = [28, 28, 1] }},
  {{ type = "Flatten" }},
  {{ type = "Dense", units = {hp["units"]}, activation = "relu", use_bias = {str(hp["use_bias"]).lower()} }},
  {{ type = "Dense", units = 10 }},
]
[compile]
optimizer = {{ type = "{hp["optimizer"]}", learning_rate = {hp["learning_rate"]} }}
loss = {{ type = "sparse_categorical_crossentropy", from_logits = true }}
metrics = ["accuracy"]
[fit]
epochs = 2
[[callbacks]]
type = "TensorBoard"
hparams = {{ {hparams} }}
"""


FAILURES = []


def check(condition, what):
    print(f"  {'ok  ' if condition else 'FAIL'} {what}")
    if not condition:
        FAILURES.append(what)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def value_of(v):
    kind = v.WhichOneof("kind")
    return getattr(v, kind)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True, help="path to the kiln binary")
    args = parser.parse_args()
    study = tempfile.mkdtemp(prefix="kiln-hparams-")
    histories = {}
    for i, hp in enumerate(TRIALS):
        path = os.path.join(study, f"trial-{i}.toml")
        with open(path, "w") as f:
            f.write(config(hp))
        run = os.path.join(study, f"trial-{i}")
        done = subprocess.run(
            [args.kiln, "train", path, "--run-dir", run], capture_output=True, text=True
        )
        check(done.returncode == 0, f"trial {i} trains (exit {done.returncode})\n{done.stderr[-2000:]}")
        if done.returncode != 0:
            sys.exit(1)
        histories[f"trial-{i}/logs"] = json.load(open(os.path.join(run, "history.json")))["history"]

    mux = pem.EventMultiplexer()
    mux.AddRunsFromDirectory(study)
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, study)
    tb = base_plugin.TBContext(logdir=study, data_provider=provider, multiplexer=mux)
    ctx = tb_context.RequestContext()
    # The dashboard's default request: every status, metrics included.
    request = api_pb2.ListSessionGroupsRequest(
        start_index=0,
        slice_size=100,
        include_metrics=True,
        aggregation_type=api_pb2.AGGREGATION_AVG,
        allowed_statuses=[
            api_pb2.STATUS_UNKNOWN,
            api_pb2.STATUS_SUCCESS,
            api_pb2.STATUS_FAILURE,
            api_pb2.STATUS_RUNNING,
        ],
    )
    response = list_session_groups.Handler(ctx, backend_context.Context(tb), "", request).run()
    sessions = {s.name: (g, s) for g in response.session_groups for s in g.sessions}

    print("(a) two sessions, both ended with success")
    check(sorted(sessions) == sorted(histories), f"sessions {sorted(sessions)}")
    for name, (_, s) in sorted(sessions.items()):
        check(s.status == api_pb2.STATUS_SUCCESS, f"{name}: status {api_pb2.Status.Name(s.status)}")

    print("(b) hyperparameter values round trip")
    for i, hp in enumerate(TRIALS):
        name = f"trial-{i}/logs"
        if name not in sessions:
            continue
        group = sessions[name][0]
        got = {k: value_of(v) for k, v in group.hparams.items()}
        want = {k: (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v) for k, v in hp.items()}
        check(got == want, f"{name}: {got} == {want}")

    print("(c) metrics: the runs' scalars, validation/epoch_loss = history's last val_loss")
    for name, (_, s) in sorted(sessions.items()):
        metrics = {(m.name.group, m.name.tag): m.value for m in s.metric_values}
        check(("validation", "epoch_loss") in metrics and ("train", "epoch_loss") in metrics,
              f"{name}: metrics include validation/epoch_loss and train/epoch_loss ({sorted(metrics)})")
        want = f32(histories[name]["val_loss"][-1])
        got = metrics.get(("validation", "epoch_loss"))
        check(got is not None and abs(got - want) <= 1e-6 * max(1.0, abs(want)),
              f"{name}: validation/epoch_loss {got} == {want}")

    print("(d) the experiment (the dashboard's /experiment) lists the hparams with their types")
    experiment = get_experiment.Handler(
        ctx, backend_context.Context(tb), "", api_pb2.GetExperimentRequest()
    ).run()
    types = {h.name: api_pb2.DataType.Name(h.type) for h in experiment.hparam_infos}
    check(
        types
        == {
            "learning_rate": "DATA_TYPE_FLOAT64",
            "units": "DATA_TYPE_FLOAT64",
            "optimizer": "DATA_TYPE_STRING",
            "use_bias": "DATA_TYPE_BOOL",
        },
        f"hparam infos {types}",
    )

    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print("hparams interop: all checks passed")


if __name__ == "__main__":
    main()
