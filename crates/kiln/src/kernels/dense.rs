//! Dense (fully connected) layer, forward and backward, with an optional fused ReLU.
//!
//! Shapes (row-major): input `x [n, i]`, kernel `w [i, u]` (Keras' layout), bias `[u]`, output
//! `y [n, u]`, `y = x · w + b` (then `max(y, 0)` when fused). Gradients: `dz = dy · [y > 0]`
//! (or `dy`), `dw = xᵀ · dz`, `db = Σ_rows dz`, `dx = dz · wᵀ`.
//!
//! Each product is split into a fixed number of row blocks computed on rayon's pool with one
//! single-threaded GEMM each ([`par_matmul_rows`]; transposes are strided views, never
//! copies), so the results do not depend on the number of threads.

use rayon::prelude::*;

use super::Epilogue;
use super::conv2d::{relu, relu_grad};
use super::cpu::{self, multiversion};
use super::gemm::{View, par_matmul_rows};

/// Row blocks per product: enough to balance two to eight cores.
const TASKS: usize = 8;

/// `y [n, u] = x [n, i] · w [i, u] + b`, then a ReLU when `relu_on`.
///
/// # Panics
/// When a slice's length differs from what `n`, `i`, `u` imply.
pub fn forward(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    [n, i, u]: [usize; 3],
    epilogue: Epilogue,
) -> Vec<f32> {
    assert_eq!(x.len(), n * i);
    assert_eq!(w.len(), i * u);
    let mut y = vec![0.0f32; n * u];
    if n == 0 || u == 0 {
        return y;
    }
    let rows = n.div_ceil(TASKS).max(1);
    let path = cpu::path();
    par_matmul_rows(
        View::new(x, n, i),
        View::new(w, i, u),
        &mut y,
        rows,
        |_, y_t| {
            add_bias_relu(path, y_t, u, bias, epilogue.relu);
            epilogue.round_block(y_t);
        },
    );
    y
}

multiversion! {
    /// The bias and ReLU of [`forward`]'s epilogue on rows of `u` outputs.
    fn add_bias_relu(y: &mut [f32], u: usize, bias: Option<&[f32]>, relu_on: bool) {
        for row in y.chunks_exact_mut(u) {
            match (bias, relu_on) {
                (Some(b), true) => row.iter_mut().zip(b).for_each(|(v, &b)| *v = relu(*v + b)),
                (Some(b), false) => row.iter_mut().zip(b).for_each(|(v, &b)| *v += b),
                (None, true) => row.iter_mut().for_each(|v| *v = relu(*v)),
                (None, false) => {}
            }
        }
    }
}

/// Gradients `(dx, dw, db)` of [`forward`] for the output gradient `dy [n, u]`; `relu_output`
/// is the forward output when a ReLU was fused. `dx` only when `need_dx`.
///
/// # Panics
/// When a slice's length differs from what `n`, `i`, `u` imply.
pub fn backward(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    relu_output: Option<&[f32]>,
    [n, i, u]: [usize; 3],
    need_dx: bool,
) -> (Option<Vec<f32>>, Vec<f32>, Vec<f32>) {
    assert_eq!(x.len(), n * i);
    assert_eq!(w.len(), i * u);
    assert_eq!(dy.len(), n * u);
    let masked;
    let dz: &[f32] = match relu_output {
        Some(y) => {
            assert_eq!(y.len(), dy.len());
            masked = dy
                .par_iter()
                .zip(y)
                .map(|(&d, &y)| relu_grad(y, d))
                .collect::<Vec<f32>>();
            &masked
        }
        None => dy,
    };
    let mut dw = vec![0.0f32; i * u];
    let mut db = vec![0.0f32; u];
    if n == 0 {
        return (need_dx.then(|| vec![0.0; 0]), dw, db);
    }
    // dw = xᵀ · dz, by blocks of dw's rows (columns of x).
    let cols = i.div_ceil(TASKS).max(1);
    let xt = View::new(x, n, i).t();
    par_matmul_rows(xt, View::new(dz, n, u), &mut dw, cols, |_, _| {});
    // db: column sums in f64 (many terms of both signs), rows in order.
    let mut sums = vec![0.0f64; u];
    for row in dz.chunks_exact(u) {
        sums.iter_mut().zip(row).for_each(|(s, &v)| *s += v as f64);
    }
    db.iter_mut().zip(&sums).for_each(|(d, &s)| *d = s as f32);
    let dx = need_dx.then(|| {
        let mut dx = vec![0.0f32; n * i];
        let rows = n.div_ceil(TASKS).max(1);
        let wt = View::new(w, i, u).t();
        par_matmul_rows(View::new(dz, n, u), wt, &mut dx, rows, |_, _| {});
        dx
    });
    (dx, dw, db)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: f32) -> Vec<f32> {
        (0..n).map(|k| (k as f32 * 0.731 + seed).sin()).collect()
    }

    /// The definition, in f64.
    fn naive(x: &[f32], w: &[f32], b: &[f32], [n, i, u]: [usize; 3]) -> Vec<f32> {
        let mut y = vec![0.0; n * u];
        for r in 0..n {
            for c in 0..u {
                let s: f64 = (0..i)
                    .map(|k| x[r * i + k] as f64 * w[k * u + c] as f64)
                    .sum();
                y[r * u + c] = (s + b[c] as f64) as f32;
            }
        }
        y
    }

    #[test]
    fn forward_and_gradients_match_the_definition() {
        for dims in [[1, 1, 1], [3, 5, 2], [17, 9, 12], [128, 40, 33]] {
            let [n, i, u] = dims;
            let (x, w, b) = (values(n * i, 0.1), values(i * u, 0.5), values(u, 0.9));
            let want = naive(&x, &w, &b, dims);
            for relu_on in [false, true] {
                let y = forward(&x, &w, Some(&b), dims, Epilogue::with_relu(relu_on));
                for (a, e) in y.iter().zip(&want) {
                    let e = if relu_on { e.max(0.0) } else { *e };
                    assert!(
                        (a - e).abs() <= 1e-5 * (1.0 + e.abs()),
                        "{dims:?}: {a} vs {e}"
                    );
                }
                // Gradients of sum(dy ⊙ y): compare with the definitions on the masked dy.
                let dy = values(n * u, 2.3);
                let (dx, dw, db) = backward(&x, &w, &dy, relu_on.then_some(&y[..]), dims, true);
                let dz: Vec<f32> = dy
                    .iter()
                    .zip(&y)
                    .map(|(&d, &v)| if relu_on && v <= 0.0 { 0.0 } else { d })
                    .collect();
                let dx = dx.unwrap();
                for r in 0..n {
                    for k in 0..i {
                        let e: f64 = (0..u)
                            .map(|c| dz[r * u + c] as f64 * w[k * u + c] as f64)
                            .sum();
                        assert!((dx[r * i + k] as f64 - e).abs() <= 1e-4 * (1.0 + e.abs()));
                    }
                }
                for k in 0..i {
                    for c in 0..u {
                        let e: f64 = (0..n)
                            .map(|r| x[r * i + k] as f64 * dz[r * u + c] as f64)
                            .sum();
                        assert!((dw[k * u + c] as f64 - e).abs() <= 1e-4 * (1.0 + e.abs()));
                    }
                }
                for c in 0..u {
                    let e: f64 = (0..n).map(|r| dz[r * u + c] as f64).sum();
                    assert!((db[c] as f64 - e).abs() <= 1e-4 * (1.0 + e.abs()));
                }
            }
        }
    }
}
