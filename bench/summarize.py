"""Turns bench/results.jsonl into the markdown table of bench/README.md: mean samples/s per
framework and model over the rounds, the ratio kiln / peer, and the fraction of the machine's
f32 GEMM rate each reaches (training FLOPs per sample / GEMM FLOP/s)."""
import json
import sys
from collections import defaultdict

# Training FLOPs per sample (forward + backward ~ 3x forward multiply-adds x 2).
FLOPS = {
    "mlp": 3 * 2 * (784 * 512 + 512 * 512 + 512 * 10),
    "cnn": 3 * 2 * (28 * 28 * 32 * 9 + 14 * 14 * 64 * 32 * 9 + 3136 * 128 + 128 * 10),
}
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
gemm = next(r["gemm_gflops"] for r in rows if "gemm_gflops" in r)
runs = defaultdict(list)
for r in rows:
    if "framework" in r:
        runs[(r["model"], r["framework"])].append(r["samples_per_second"])
mean = {k: sum(v) / len(v) for k, v in runs.items()}
cpu = next((r for r in rows if "cpu_model" in r), None)
if cpu:
    print(f"CPU: {cpu['cpu_model']}; flags: {' '.join(cpu['cpu_flags'])}")
print(f"f32 GEMM (NumPy/OpenBLAS, 2048^3): {gemm:.0f} GFLOP/s\n")
print("| model | framework | samples/s (mean of rounds) | runs | kiln / this | % of GEMM rate |")
print("|---|---|---|---|---|---|")
for model in ["mlp", "cnn"]:
    k = mean.get((model, "kiln"))
    for fw in ["kiln", "kiln-avx512", "kiln-avx2", "tensorflow", "pytorch", "burn-raw"]:
        v = mean.get((model, fw))
        if v is None:
            continue
        ratio = f"{k / v:.2f}x" if k else "-"
        pct = 100 * v * FLOPS[model] / (gemm * 1e9)
        print(f"| {model} | {fw} | {v:,.0f} | {len(runs[(model, fw)])} | {ratio} | {pct:.0f}% |")
