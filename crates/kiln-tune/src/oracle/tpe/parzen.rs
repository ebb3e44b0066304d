//! One parameter's Parzen estimator, as Optuna 4.x's univariate `_ParzenEstimator`
//! (`optuna/samplers/_tpe/parzen_estimator.py`, `probability_distributions.py`, v4.9.0):
//! a mixture of one kernel per observation plus a prior kernel, weighted by Optuna's
//! `default_weights` and `prior_weight = 1`.

use rand::Rng;

use super::truncnorm::{log_gauss_mass, log_pdf_std, ppf};

/// A parameter's distribution in Optuna's terms (values in the "internal" space).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Domain {
    /// `FloatDistribution`/`IntDistribution`: `[low, high]`, on a `step` grid when `Some`,
    /// kernels in log space when `log`.
    Numerical {
        low: f64,
        high: f64,
        step: Option<f64>,
        log: bool,
    },
    /// `CategoricalDistribution` over `n` choices (internal value = index).
    Categorical { n: usize },
}

/// Optuna's `default_weights(n)`: flat below 25 observations, else a ramp
/// `linspace(1/n, 1, n − 25)` over the oldest and 1 for the newest 25.
pub(crate) fn default_weights(n: usize) -> Vec<f64> {
    if n < 25 {
        return vec![1.0; n];
    }
    let num = n - 25;
    let start = 1.0 / n as f64;
    let mut w: Vec<f64> = (0..num)
        .map(|i| {
            if num == 1 {
                start
            } else {
                start + (1.0 - start) * i as f64 / (num - 1) as f64
            }
        })
        .collect();
    w.extend(std::iter::repeat_n(1.0, 25));
    w
}

/// The prior kernel's weight (Optuna's `prior_weight`, default 1.0).
const PRIOR_WEIGHT: f64 = 1.0;

/// A fitted mixture for one parameter.
pub(crate) enum Parzen {
    /// Truncated normals in the transformed space (log when `log`).
    Numerical {
        weights: Vec<f64>,
        mus: Vec<f64>,
        sigmas: Vec<f64>,
        low: f64,
        high: f64,
        step: Option<f64>,
        log: bool,
    },
    /// Per kernel, a probability per choice.
    Categorical {
        weights: Vec<f64>,
        probs: Vec<Vec<f64>>,
    },
}

impl Parzen {
    /// Fits the estimator to `obs` (internal values, oldest trial first).
    pub(crate) fn fit(obs: &[f64], domain: Domain) -> Parzen {
        let mut weights = if obs.is_empty() {
            vec![1.0]
        } else {
            let mut w = default_weights(obs.len());
            w.push(PRIOR_WEIGHT);
            w
        };
        let sum: f64 = weights.iter().sum();
        weights.iter_mut().for_each(|w| *w /= sum);
        match domain {
            Domain::Categorical { n } => {
                if obs.is_empty() {
                    return Parzen::Categorical {
                        weights,
                        probs: vec![vec![1.0 / n as f64; n]],
                    };
                }
                let kernels = obs.len() + 1;
                let mut probs = vec![vec![PRIOR_WEIGHT / kernels as f64; n]; kernels];
                for (row, &o) in probs.iter_mut().zip(obs) {
                    row[o as usize] += 1.0;
                }
                for row in &mut probs {
                    let s: f64 = row.iter().sum();
                    if s > 0.0 {
                        row.iter_mut().for_each(|p| *p /= s);
                    }
                }
                Parzen::Categorical { weights, probs }
            }
            Domain::Numerical {
                low,
                high,
                step,
                log,
            } => {
                let (mut lo, mut hi) = (low, high);
                if let Some(s) = step {
                    lo -= s / 2.0;
                    hi += s / 2.0;
                }
                let t = |x: f64| if log { x.ln() } else { x };
                let (lo, hi) = (t(lo), t(hi));
                let mut mus: Vec<f64> = obs.iter().map(|&x| t(x)).collect();
                let mut sigmas = sigmas(&mus, lo, hi);
                mus.push(0.5 * (lo + hi));
                sigmas.push(hi - lo);
                Parzen::Numerical {
                    weights,
                    mus,
                    sigmas,
                    low,
                    high,
                    step,
                    log,
                }
            }
        }
    }

    /// Draws `n` internal values (a kernel by weight, then a value from it).
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let k = pick(self.weights(), rng.random());
                match self {
                    Parzen::Categorical { probs, .. } => pick(&probs[k], rng.random()) as f64,
                    Parzen::Numerical {
                        mus,
                        sigmas,
                        low,
                        high,
                        step,
                        log,
                        ..
                    } => {
                        let (lo_t, hi_t) = bounds_t(*low, *high, *step, *log);
                        let (mu, sigma) = (mus[k], sigmas[k]);
                        let z = ppf(rng.random(), (lo_t - mu) / sigma, (hi_t - mu) / sigma);
                        let mut x = mu + sigma * z;
                        if *log {
                            x = x.exp();
                        }
                        if let Some(s) = step {
                            x = (low + ((x - low) / s).round() * s).clamp(*low, *high);
                        }
                        x
                    }
                }
            })
            .collect()
    }

    /// `ln` of the mixture's density (mass, for steps and categories) at internal value `x`.
    pub(crate) fn log_pdf(&self, x: f64) -> f64 {
        let terms: Vec<f64> = match self {
            Parzen::Categorical { weights, probs } => weights
                .iter()
                .zip(probs)
                .map(|(w, p)| w.ln() + p[x as usize].ln())
                .collect(),
            Parzen::Numerical {
                weights,
                mus,
                sigmas,
                low,
                high,
                step,
                log,
            } => {
                let t = |v: f64| if *log { v.ln() } else { v };
                let (lo_t, hi_t) = bounds_t(*low, *high, *step, *log);
                weights
                    .iter()
                    .zip(mus.iter().zip(sigmas))
                    .map(|(w, (&mu, &sigma))| {
                        let a = (lo_t - mu) / sigma;
                        let b = (hi_t - mu) / sigma;
                        let lp = match step {
                            None => log_pdf_std((t(x) - mu) / sigma, a, b) - sigma.ln(),
                            Some(s) => {
                                let xa = (t(x - s / 2.0) - mu) / sigma;
                                let xb = (t(x + s / 2.0) - mu) / sigma;
                                log_gauss_mass(xa, xb) - log_gauss_mass(a, b)
                            }
                        };
                        w.ln() + lp
                    })
                    .collect()
            }
        };
        let max = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if max == f64::NEG_INFINITY {
            return f64::NEG_INFINITY;
        }
        max + terms.iter().map(|v| (v - max).exp()).sum::<f64>().ln()
    }

    fn weights(&self) -> &[f64] {
        match self {
            Parzen::Numerical { weights, .. } | Parzen::Categorical { weights, .. } => weights,
        }
    }
}

/// The kernels' truncation bounds in the transformed space.
fn bounds_t(low: f64, high: f64, step: Option<f64>, log: bool) -> (f64, f64) {
    let half = step.map_or(0.0, |s| s / 2.0);
    let (lo, hi) = (low - half, high + half);
    if log { (lo.ln(), hi.ln()) } else { (lo, hi) }
}

/// The index whose cumulative weight first reaches `u` (the last on round-off).
fn pick(weights: &[f64], u: f64) -> usize {
    let mut acc = 0.0;
    for (i, w) in weights.iter().enumerate() {
        acc += w;
        if u < acc {
            return i;
        }
    }
    weights.len() - 1
}

/// Optuna's univariate bandwidths (`consider_endpoints = False`, `consider_magic_clip =
/// True`): each kernel's σ is the larger gap to its sorted neighbours (the range ends count as
/// neighbours, except that the outermost kernels use their inner gap when there are two or
/// more), clipped to `[(hi − lo) / min(100, 1 + n_kernels), hi − lo]` with
/// `n_kernels = observations + 1`.
pub(crate) fn sigmas(mus: &[f64], lo: f64, hi: f64) -> Vec<f64> {
    let n = mus.len();
    if n == 0 {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| mus[a].total_cmp(&mus[b]));
    let mut ends = Vec::with_capacity(n + 2);
    ends.push(lo);
    ends.extend(order.iter().map(|&i| mus[i]));
    ends.push(hi);
    let mut sorted: Vec<f64> = (1..=n)
        .map(|i| (ends[i] - ends[i - 1]).max(ends[i + 1] - ends[i]))
        .collect();
    if n + 2 >= 4 {
        sorted[0] = ends[2] - ends[1];
        sorted[n - 1] = ends[n] - ends[n - 1];
    }
    let max_sigma = hi - lo;
    let min_sigma = (hi - lo) / (100f64).min(1.0 + (n + 1) as f64);
    let mut out = vec![0.0; n];
    for (rank, &i) in order.iter().enumerate() {
        out[i] = sorted[rank].clamp(min_sigma, max_sigma);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_match_optuna() {
        // optuna.samplers._tpe.sampler.default_weights (Optuna 4.9 / 5.0).
        assert_eq!(default_weights(3), vec![1.0; 3]);
        let w = default_weights(30);
        assert_eq!(w.len(), 30);
        assert!((w[0] - 1.0 / 30.0).abs() < 1e-15);
        assert!((w[4] - 1.0).abs() < 1e-15);
        assert!((w[2] - (1.0 / 30.0 + (1.0 - 1.0 / 30.0) * 0.5)).abs() < 1e-15);
        assert!(w[5..].iter().all(|&x| x == 1.0));
    }

    #[test]
    fn bandwidths_match_optuna() {
        // _ParzenEstimator(..., FloatDistribution(0, 1), consider_endpoints=False):
        // mus [0.2, 0.9, 0.5] -> sorted 0.2, 0.5, 0.9 with ends 0, 1:
        // gaps: 0.2 -> inner 0.3, 0.5 -> max(0.3, 0.4) = 0.4, 0.9 -> inner 0.4;
        // min sigma = 1 / min(100, 1 + 4) = 0.2.
        let s = sigmas(&[0.2, 0.9, 0.5], 0.0, 1.0);
        let want = [0.3, 0.4, 0.4];
        for (a, b) in s.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{s:?}");
        }
        // One observation: max gap to the ends, 0.8.
        assert!((sigmas(&[0.2], 0.0, 1.0)[0] - 0.8).abs() < 1e-12);
    }
}
