"""Turns bench/results-data.jsonl (bench/data.sh) into the markdown table of bench/README.md:
mean examples/s per pipeline and framework over the rounds, and the ratio kiln / tf.data."""
import json
import sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs = defaultdict(list)
loads = []
for r in rows:
    runs[(r["bench"], r["framework"])].append(r["examples_per_second"])
    loads.append(r.get("load1_after", float("nan")))
mean = {k: sum(v) / len(v) for k, v in runs.items()}
tf_version = next((r["version"] for r in rows if r["framework"] == "tf.data"), "?")
names = {
    "fmnist": "Fashion-MNIST IDX -> x/255 -> shuffle(10000) -> batch(128) -> prefetch",
    "tfrecord": "TFRecord 100k -> parse -> decode_raw -> float32 -> random flip -> batch(128) -> prefetch",
    "jpeg": "20k JPEGs -> decode -> resize 64x64 -> batch(128) -> prefetch",
}
print(f"| pipeline | kiln examples/s | tf.data {tf_version} examples/s | kiln / tf.data | runs each |")
print("|---|---|---|---|---|")
for bench in ["fmnist", "tfrecord", "jpeg"]:
    k, t = mean.get((bench, "kiln")), mean.get((bench, "tf.data"))
    if k is None or t is None:
        continue
    n = min(len(runs[(bench, "kiln")]), len(runs[(bench, "tf.data")]))
    print(f"| {names[bench]} | {k:,.0f} | {t:,.0f} | {k / t:.2f}x | {n} |")
if loads:
    print(f"\n1-minute load average after the runs: {min(loads):.1f} to {max(loads):.1f} "
          f"(the machine's cores are shared)")
