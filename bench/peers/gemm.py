"""The machine's f32 GEMM rate through NumPy's BLAS (OpenBLAS), all cores: best of 5 runs of a
2048^3 matmul. Prints one JSON line."""
import json
import time

import numpy as np

n = 2048
a = np.random.rand(n, n).astype(np.float32)
b = np.random.rand(n, n).astype(np.float32)
a @ b
best = min((lambda t: (a @ b, time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(5))
print(json.dumps({"gemm_gflops": 2 * n ** 3 / best / 1e9}))
