"""Turns bench/results.jsonl into the markdown table of bench/README.md: mean samples/s per
model, precision and framework over the rounds, the ratio kiln / peer, and the fraction of the
machine's f32 GEMM rate each reaches (training FLOPs per sample / GEMM FLOP/s)."""
import json
import sys
from collections import defaultdict

# Forward multiply-adds per sample of each model (bench/configs/*.toml).
MACS = {
    "mlp": 784 * 512 + 512 * 512 + 512 * 10,
    "cnn": 28 * 28 * 32 * 9 + 14 * 14 * 64 * 32 * 9 + 3136 * 128 + 128 * 10,
    # stem, block 1 (two 32->32 3x3 at 28x28), block 2 (32->64 and 64->64 3x3, 1x1 projection
    # at 14x14), the Dense logits.
    "resnet-small": 28 * 28 * 32 * 9 + 2 * 28 * 28 * 32 * 32 * 9
    + 14 * 14 * 64 * 9 * (32 + 64) + 14 * 14 * 64 * 32 + 64 * 10,
    # 28 steps of the four gates over [input 28, state 128], the Dense logits.
    "lstm": 28 * 4 * 128 * (28 + 128) + 128 * 10,
    # 28 steps: the projection, per block Q/K/V/output (4 x 64x64), the scores and the weighted
    # sum (2 x 28 x 64), the feed-forward network (2 x 64x128); the Dense logits.
    "transformer": 28 * 28 * 64 + 2 * 28 * (4 * 64 * 64 + 2 * 28 * 64 + 2 * 64 * 128) + 64 * 10,
}
# Training FLOPs per sample: forward + backward ~ 3x the forward's multiply-adds x 2.
FLOPS = {m: 3 * 2 * v for m, v in MACS.items()}
FRAMEWORKS = ["kiln", "kiln-avx512", "kiln-avx2", "tensorflow", "pytorch", "burn-raw"]

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
gemm = next(r["gemm_gflops"] for r in rows if "gemm_gflops" in r)
runs = defaultdict(list)
for r in rows:
    if "framework" in r:
        runs[(r["model"], r.get("precision", "float32"), r["framework"])].append(r["samples_per_second"])
mean = {k: sum(v) / len(v) for k, v in runs.items()}
cpu = next((r for r in rows if "cpu_model" in r), None)
if cpu:
    print(f"CPU: {cpu['cpu_model']}; flags: {' '.join(cpu['cpu_flags'])}")
print(f"f32 GEMM (NumPy/OpenBLAS, 2048^3): {gemm:.0f} GFLOP/s\n")
print("| model | precision | framework | samples/s (mean of rounds) | runs | kiln / this | % of GEMM rate |")
print("|---|---|---|---|---|---|---|")
for model in MACS:
    for precision in ["float32", "mixed_bfloat16"]:
        k = mean.get((model, precision, "kiln"))
        for fw in FRAMEWORKS:
            v = mean.get((model, precision, fw))
            if v is None:
                continue
            ratio = f"{k / v:.2f}x" if k else "-"
            pct = 100 * v * FLOPS[model] / (gemm * 1e9)
            n = len(runs[(model, precision, fw)])
            print(f"| {model} | {precision} | {fw} | {v:,.0f} | {n} | {ratio} | {pct:.0f}% |")
