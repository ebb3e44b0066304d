"""Reference for kiln-tune's TPE test: log densities of Optuna's univariate Parzen estimator
(optuna 5.0.0, whose univariate estimator equals 4.9's; TPESampler defaults: prior_weight=1,
consider_magic_clip=True, consider_endpoints=False, default_weights).

Run: /root/.cache/kiln/tfvenv/bin/python crates/kiln-tune/tests/reference/parzen_optuna.py
"""
import numpy as np
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator, _ParzenEstimatorParameters
from optuna.samplers._tpe.sampler import default_weights

params = _ParzenEstimatorParameters(
    prior_weight=1.0,
    consider_magic_clip=True,
    consider_endpoints=False,
    weights=default_weights,
    multivariate=False,
)
cases = [
    ("float", FloatDistribution(0.0, 1.0), [0.2, 0.9, 0.5], [0.1, 0.5, 0.95]),
    ("float_log", FloatDistribution(1e-4, 1e-2, log=True), [3e-4, 2e-3], [1e-4, 1e-3, 9e-3]),
    ("int", IntDistribution(1, 10), [3, 7, 7], [1, 4, 7, 10]),
    ("int_log", IntDistribution(1, 100, log=True), [2, 50], [1, 10, 100]),
    ("cat", CategoricalDistribution(["a", "b", "c"]), [0, 2, 2], [0, 1, 2]),
    ("float_empty", FloatDistribution(-1.0, 3.0), [], [0.0, 2.5]),
    ("float_30", FloatDistribution(0.0, 1.0), list(np.linspace(0.01, 0.99, 30)), [0.3, 0.7]),
]
for name, dist, obs, xs in cases:
    pe = _ParzenEstimator({"x": np.asarray(obs, dtype=float)}, {"x": dist}, params)
    lp = pe.log_pdf({"x": np.asarray(xs, dtype=float)})
    print(name, [float(v) for v in lp])
