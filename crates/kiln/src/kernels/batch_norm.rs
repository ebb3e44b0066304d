//! Batch normalization in training (statistics of the batch), forward and backward, on
//! `x [n, c, s]` row-major: `n` examples, `c` channels, `s` values per channel and example
//! (`h·w` of an NCHW image, 1 for `[batch, features]`).
//!
//! Forward: `mean_c`, biased `var_c` over the `m = n·s` values of channel `c` (float64 sums,
//! the variance from the centred values), `y = (x - mean)·γ/√(var + ε) + β`. Backward
//! (`x̂ = (x - mean)/√(var + ε)`): `dβ = Σ dy`, `dγ = Σ dy·x̂`, `dx = γ/√(var + ε)·(dy - dβ/m -
//! x̂·dγ/m)`. These are the formulas of Burn's default `batch_norm_train` and its backward,
//! without their transposing copies: statistics run over channels in parallel reading `x` in
//! place, the element-wise passes over examples in parallel.

use rayon::prelude::*;

use super::lanes::lane_sum;

/// The per-channel statistics of the batch.
pub struct Stats {
    /// `[c]`.
    pub mean: Vec<f32>,
    /// `[c]`, biased (divided by `m`).
    pub variance: Vec<f32>,
}

/// Channel `k`'s values: one run of `s` per example.
fn runs(x: &[f32], [n, c, s]: [usize; 3], k: usize) -> impl Iterator<Item = &[f32]> {
    (0..n).map(move |i| &x[(i * c + k) * s..(i * c + k + 1) * s])
}

/// `Σ f(a, b)` over channel `k` of `a` and `b`.
fn channel_sum(
    a: &[f32],
    b: &[f32],
    dims: [usize; 3],
    k: usize,
    f: impl Fn(f32, f32) -> f64,
) -> f64 {
    runs(a, dims, k)
        .zip(runs(b, dims, k))
        .map(|(ra, rb)| lane_sum(ra, rb, &f))
        .sum()
}

/// `y [n, c, s]` normalized with the batch's statistics, and those statistics.
///
/// # Panics
/// When a slice's length differs from what `n`, `c`, `s` imply.
pub fn forward(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    epsilon: f64,
    dims: [usize; 3],
) -> (Vec<f32>, Stats) {
    let [n, c, s] = dims;
    assert_eq!(x.len(), n * c * s);
    assert_eq!((gamma.len(), beta.len()), (c, c));
    let m = (n * s).max(1) as f64;
    let stats: Vec<(f32, f32)> = (0..c)
        .into_par_iter()
        .map(|k| {
            let mean = channel_sum(x, x, dims, k, |v, _| v as f64) / m;
            let sq = channel_sum(x, x, dims, k, |v, _| (v as f64 - mean).powi(2));
            (mean as f32, (sq / m) as f32)
        })
        .collect();
    let (mean, variance): (Vec<f32>, Vec<f32>) = stats.into_iter().unzip();
    let scale: Vec<f32> = (0..c)
        .map(|k| gamma[k] / (variance[k] as f64 + epsilon).sqrt() as f32)
        .collect();
    let shift: Vec<f32> = (0..c).map(|k| beta[k] - mean[k] * scale[k]).collect();
    let mut y = vec![0.0f32; x.len()];
    if s > 0 {
        y.par_chunks_mut(c * s)
            .zip(x.par_chunks(c * s))
            .for_each(|(yi, xi)| {
                for (k, (yr, xr)) in yi.chunks_exact_mut(s).zip(xi.chunks_exact(s)).enumerate() {
                    let (a, b) = (scale[k], shift[k]);
                    yr.iter_mut().zip(xr).for_each(|(y, &x)| *y = x * a + b);
                }
            });
    }
    (y, Stats { mean, variance })
}

/// `(dx, dγ, dβ)` of [`forward`] for the output gradient `dy`, given the statistics it
/// returned.
///
/// # Panics
/// When a slice's length differs from what `n`, `c`, `s` imply.
pub fn backward(
    x: &[f32],
    dy: &[f32],
    gamma: &[f32],
    stats: &Stats,
    epsilon: f64,
    dims: [usize; 3],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let [n, c, s] = dims;
    assert_eq!((x.len(), dy.len()), (n * c * s, n * c * s));
    assert_eq!(gamma.len(), c);
    let m = (n * s).max(1) as f64;
    let inv_std: Vec<f32> = (0..c)
        .map(|k| 1.0 / (stats.variance[k] as f64 + epsilon).sqrt() as f32)
        .collect();
    // Σ dy and Σ dy·(x - mean) per channel; dγ = inv_std · the latter.
    let sums: Vec<(f64, f64)> = (0..c)
        .into_par_iter()
        .map(|k| {
            let mu = stats.mean[k];
            let sum = channel_sum(dy, x, dims, k, |d, _| d as f64);
            (
                sum,
                channel_sum(dy, x, dims, k, |d, v| d as f64 * (v - mu) as f64),
            )
        })
        .collect();
    let dbeta: Vec<f32> = sums.iter().map(|&(d, _)| d as f32).collect();
    let dgamma: Vec<f32> = (0..c)
        .map(|k| (sums[k].1 * inv_std[k] as f64) as f32)
        .collect();
    let mut dx = vec![0.0f32; x.len()];
    if s > 0 {
        dx.par_chunks_mut(c * s)
            .zip(x.par_chunks(c * s).zip(dy.par_chunks(c * s)))
            .for_each(|(dxi, (xi, dyi))| {
                let rows = dxi.chunks_exact_mut(s).zip(xi.chunks_exact(s));
                for (k, ((dr, xr), dyr)) in rows.zip(dyi.chunks_exact(s)).enumerate() {
                    let is = inv_std[k];
                    let (mean_dy, mean_dg) =
                        ((sums[k].0 / m) as f32, (dgamma[k] as f64 / m) as f32);
                    let (g, mu) = (gamma[k] * is, stats.mean[k]);
                    for ((d, &xv), &dv) in dr.iter_mut().zip(xr).zip(dyr) {
                        *d = g * (dv - mean_dy - (xv - mu) * is * mean_dg);
                    }
                }
            });
    }
    (dx, dgamma, dbeta)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(len: usize, seed: f32) -> Vec<f32> {
        (0..len)
            .map(|i| (i as f32 * 0.61 + seed).sin() * 2.0 + 0.3)
            .collect()
    }

    /// `Σ y·r` in float64 for the loss of the gradient check.
    fn loss(x: &[f32], gamma: &[f32], beta: &[f32], r: &[f32], dims: [usize; 3]) -> f64 {
        let [n, c, s] = dims;
        let m = (n * s) as f64;
        let mut total = 0.0;
        for k in 0..c {
            let vals: Vec<f64> = runs(x, dims, k).flatten().map(|&v| v as f64).collect();
            let mean = vals.iter().sum::<f64>() / m;
            let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / m;
            let rs: Vec<f64> = runs(r, dims, k).flatten().map(|&v| v as f64).collect();
            for (v, rv) in vals.iter().zip(rs) {
                let y = (v - mean) / (var + 1e-3).sqrt() * gamma[k] as f64 + beta[k] as f64;
                total += y * rv;
            }
        }
        total
    }

    #[test]
    fn forward_normalizes_each_channel() {
        let dims = [3, 4, 5];
        let x = values(60, 0.2);
        let (gamma, beta) = (vec![1.0, 2.0, 0.5, -1.0], vec![0.0, 1.0, -2.0, 0.25]);
        let (y, st) = forward(&x, &gamma, &beta, 1e-3, dims);
        for k in 0..4 {
            let ys: Vec<f32> = runs(&y, dims, k).flatten().copied().collect();
            let mean = ys.iter().sum::<f32>() / 15.0;
            let var = ys.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 15.0;
            assert!((mean - beta[k]).abs() < 1e-5, "channel {k} mean {mean}");
            let want = gamma[k].powi(2) * st.variance[k] / (st.variance[k] + 1e-3);
            assert!((var - want).abs() < 1e-4, "channel {k} var {var} vs {want}");
        }
    }

    #[test]
    fn gradients_match_central_differences() {
        for dims in [[3, 4, 5], [7, 3, 1], [1, 2, 9]] {
            let [n, c, s] = dims;
            let x = values(n * c * s, 0.7);
            let (gamma, beta) = (values(c, 1.9), values(c, 2.3));
            let r = values(n * c * s, 4.1);
            let (_, st) = forward(&x, &gamma, &beta, 1e-3, dims);
            let (dx, dg, db) = backward(&x, &r, &gamma, &st, 1e-3, dims);
            let eps = 1e-3f32;
            let check = |got: &[f32], which: usize| {
                for (q, &v) in got.iter().enumerate() {
                    let mut ins = [x.clone(), gamma.clone(), beta.clone()];
                    ins[which][q] += eps;
                    let up = loss(&ins[0], &ins[1], &ins[2], &r, dims);
                    ins[which][q] -= 2.0 * eps;
                    let down = loss(&ins[0], &ins[1], &ins[2], &r, dims);
                    let want = (up - down) / (2.0 * eps as f64);
                    assert!(
                        (v as f64 - want).abs() < 2e-3 * (1.0 + want.abs()),
                        "{dims:?} input {which}[{q}]: {v} vs {want}"
                    );
                }
            };
            check(&dx, 0);
            check(&dg, 1);
            check(&db, 2);
        }
    }
}
