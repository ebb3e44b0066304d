//! Layer normalization over the last axis (Ba et al. 2016; Keras' `LayerNormalization` with
//! `axis=-1`), forward and backward, one pass over a row each way.
//!
//! Shapes (row-major): `x [rows, f]`, `gamma`, `beta [f]`. Per row the mean `μ` and the biased
//! variance `σ²` (two passes over the row, as Keras' `moments`), `x̂ = (x − μ) / sqrt(σ² + ε)`,
//! `y = γ·x̂ + β`. The forward saves the mean and `1 / sqrt(σ² + ε)` per row; the backward
//! recomputes `x̂` from them: with `g = γ·dy`, `dx = (g − mean(g) − x̂·mean(g·x̂)) / sqrt(σ² + ε)`,
//! `dγ = Σ_rows dy·x̂`, `dβ = Σ_rows dy`.
//!
//! Burn's autodiff runs layer normalization as nine operations (each a pass over memory and a
//! node on the tape). Rows are split into a fixed number of blocks run on rayon's pool; the
//! per-block sums of `dγ` and `dβ` are added in block order, so results do not depend on the
//! number of threads.

use rayon::prelude::*;

use super::cpu::{self, multiversion};
use super::lanes::{dot, sum, sum_of};

/// Row blocks: enough to balance two to eight cores.
const TASKS: usize = 8;

/// The output of [`forward`] and what its backward pass reads.
pub struct Saved {
    /// `[rows, f]`.
    pub y: Vec<f32>,
    /// The mean of each row, `[rows]`.
    pub mean: Vec<f32>,
    /// `1 / sqrt(σ² + ε)` of each row, `[rows]`.
    pub inv_std: Vec<f32>,
}

/// The gradients of [`forward`]'s inputs.
pub struct Grads {
    /// `[rows, f]`.
    pub dx: Vec<f32>,
    /// `[f]`.
    pub dgamma: Vec<f32>,
    /// `[f]`.
    pub dbeta: Vec<f32>,
}

/// Rows per block for `rows` rows.
fn block_rows(rows: usize) -> usize {
    rows.div_ceil(TASKS).max(1)
}

/// Normalizes each row of `x` (`f` values) and scales and shifts it by `gamma`, `beta`.
///
/// # Panics
/// When `f` is 0 or the lengths of `x`, `gamma`, `beta` disagree with it.
pub fn forward(x: &[f32], gamma: &[f32], beta: &[f32], f: usize, epsilon: f64) -> Saved {
    assert!(f > 0 && x.len().is_multiple_of(f) && gamma.len() == f && beta.len() == f);
    let rows = x.len() / f;
    let mut s = Saved {
        y: vec![0.0; x.len()],
        mean: vec![0.0; rows],
        inv_std: vec![0.0; rows],
    };
    let path = cpu::path();
    let r = block_rows(rows);
    s.y.par_chunks_mut(r * f)
        .zip(s.mean.par_chunks_mut(r))
        .zip(s.inv_std.par_chunks_mut(r))
        .enumerate()
        .for_each(|(k, ((y, mean), inv))| {
            let x = &x[k * r * f..][..y.len()];
            forward_block(path, (x, gamma, beta), (y, mean, inv), epsilon);
        });
    s
}

multiversion! {
    /// [`forward`] on a block of rows.
    fn forward_block(
        inputs: (&[f32], &[f32], &[f32]),
        out: (&mut [f32], &mut [f32], &mut [f32]),
        epsilon: f64,
    ) {
        let (x, gamma, beta) = inputs;
        let (y, mean, inv_std) = out;
        let f = gamma.len();
        for (k, (xr, yr)) in x.chunks_exact(f).zip(y.chunks_exact_mut(f)).enumerate() {
            let mu = sum(xr) / f as f32;
            let var = sum_of(xr, |v| (v - mu) * (v - mu)) / f as f32;
            let inv = (1.0 / (var as f64 + epsilon).sqrt()) as f32;
            (mean[k], inv_std[k]) = (mu, inv);
            for (((y, &x), &g), &b) in yr.iter_mut().zip(xr).zip(gamma).zip(beta) {
                *y = (x - mu) * inv * g + b;
            }
        }
    }
}

/// The gradients of [`forward`]'s inputs for the output gradient `dy`, given its saved row
/// statistics.
///
/// # Panics
/// When the lengths disagree with `f`.
pub fn backward(
    x: &[f32],
    dy: &[f32],
    gamma: &[f32],
    (mean, inv_std): (&[f32], &[f32]),
    f: usize,
) -> Grads {
    let rows = x.len() / f.max(1);
    assert!(f > 0 && x.len() == rows * f && dy.len() == x.len() && gamma.len() == f);
    assert_eq!((mean.len(), inv_std.len()), (rows, rows));
    let mut dx = vec![0.0; x.len()];
    let path = cpu::path();
    let r = block_rows(rows);
    // Each block's partial dγ and dβ, then their sum in block order.
    let partials: Vec<(Vec<f32>, Vec<f32>)> = dx
        .par_chunks_mut(r * f)
        .enumerate()
        .map(|(k, dx)| {
            let at = k * r * f;
            let (x, dy) = (&x[at..][..dx.len()], &dy[at..][..dx.len()]);
            let stats = (
                &mean[k * r..][..dx.len() / f],
                &inv_std[k * r..][..dx.len() / f],
            );
            let (mut dg, mut db) = (vec![0.0; f], vec![0.0; f]);
            backward_block(path, (x, dy, gamma), stats, dx, (&mut dg, &mut db));
            (dg, db)
        })
        .collect();
    let (mut dgamma, mut dbeta) = (vec![0.0; f], vec![0.0; f]);
    for (dg, db) in partials {
        dgamma.iter_mut().zip(dg).for_each(|(a, b)| *a += b);
        dbeta.iter_mut().zip(db).for_each(|(a, b)| *a += b);
    }
    Grads { dx, dgamma, dbeta }
}

multiversion! {
    /// [`backward`] on a block of rows; adds the block's `dγ`, `dβ` into `dgb`.
    fn backward_block(
        inputs: (&[f32], &[f32], &[f32]),
        stats: (&[f32], &[f32]),
        dx: &mut [f32],
        dgb: (&mut [f32], &mut [f32]),
    ) {
        let (x, dy, gamma) = inputs;
        let (mean, inv_std) = stats;
        let (dgamma, dbeta) = dgb;
        let f = gamma.len();
        let rows = x.chunks_exact(f).zip(dy.chunks_exact(f)).zip(dx.chunks_exact_mut(f));
        for (k, ((xr, dyr), dxr)) in rows.enumerate() {
            let (mu, inv) = (mean[k], inv_std[k]);
            // dx holds x̂, then g = γ·dy; the two row means; then the gradient.
            for ((((d, &x), &dy), dg), db) in dxr
                .iter_mut()
                .zip(xr)
                .zip(dyr)
                .zip(dgamma.iter_mut())
                .zip(dbeta.iter_mut())
            {
                let xhat = (x - mu) * inv;
                *d = xhat;
                *dg += dy * xhat;
                *db += dy;
            }
            let mean_g = dot(gamma, dyr) / f as f32;
            for ((d, &dy), &g) in dxr.iter_mut().zip(dyr).zip(gamma) {
                *d *= g * dy;
            }
            // dxr now holds g·x̂.
            let mean_gx = sum(dxr) / f as f32;
            for (((d, &x), &dy), &g) in dxr.iter_mut().zip(xr).zip(dyr).zip(gamma) {
                let xhat = (x - mu) * inv;
                *d = (g * dy - mean_g - xhat * mean_gx) * inv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: f32, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|i| (i as f32 * 0.37 + seed).sin() * scale + 0.3)
            .collect()
    }

    #[test]
    fn forward_matches_the_definition() {
        let (f, rows) = (7, 5);
        let (x, g, b) = (
            values(rows * f, 0.1, 3.0),
            values(f, 0.5, 1.0),
            values(f, 0.9, 0.5),
        );
        let s = forward(&x, &g, &b, f, 1e-3);
        for r in 0..rows {
            let row: Vec<f64> = x[r * f..(r + 1) * f].iter().map(|&v| v as f64).collect();
            let mu = row.iter().sum::<f64>() / f as f64;
            let var = row.iter().map(|v| (v - mu).powi(2)).sum::<f64>() / f as f64;
            for c in 0..f {
                let want = (row[c] - mu) / (var + 1e-3).sqrt() * g[c] as f64 + b[c] as f64;
                assert!((s.y[r * f + c] as f64 - want).abs() < 1e-5);
            }
            assert!((s.mean[r] as f64 - mu).abs() < 1e-6);
        }
    }

    #[test]
    fn gradients_match_central_differences() {
        let (f, rows) = (6, 19);
        let (x, g, b) = (
            values(rows * f, 0.2, 2.0),
            values(f, 0.4, 1.0),
            values(f, 1.1, 0.5),
        );
        let w = values(rows * f, 0.7, 1.0);
        let loss = |x: &[f32], g: &[f32], b: &[f32]| -> f64 {
            let s = forward(x, g, b, f, 1e-3);
            s.y.iter().zip(&w).map(|(a, c)| *a as f64 * *c as f64).sum()
        };
        let s = forward(&x, &g, &b, f, 1e-3);
        let grads = backward(&x, &w, &g, (&s.mean, &s.inv_std), f);
        let eps = 1e-2f32;
        let check = |which: usize, grad: &[f32]| {
            for i in 0..grad.len() {
                let mut ins = [x.clone(), g.clone(), b.clone()];
                ins[which][i] += eps;
                let up = loss(&ins[0], &ins[1], &ins[2]);
                ins[which][i] -= 2.0 * eps;
                let down = loss(&ins[0], &ins[1], &ins[2]);
                let numeric = (up - down) / (2.0 * eps as f64);
                assert!(
                    (numeric - grad[i] as f64).abs() < 2e-3 * (1.0 + numeric.abs()),
                    "input {which} index {i}: {numeric} against {}",
                    grad[i]
                );
            }
        };
        check(0, &grads.dx);
        check(1, &grads.dgamma);
        check(2, &grads.dbeta);
    }
}
