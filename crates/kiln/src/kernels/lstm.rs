//! A whole LSTM layer (all time steps) forward and backward, Keras' default cell: `sigmoid`
//! gates, `tanh` activation, gate order `i, f, c, o` (the layout of Keras' `kernel` and
//! `recurrent_kernel`). The same fusion Keras does through cuDNN under the same conditions.
//!
//! Shapes (row-major): `proj [b, t, 4u]` is `x·kernel + bias` for every step (computed before,
//! as one product), `rk [u, 4u]` the recurrent kernel, `h0`, `c0 [b, u]` the initial state;
//! outputs `hs [b, t, u]`. Per step `z = proj_t + h_{t-1}·rk`, `i = σ(z_i)`, `f = σ(z_f)`,
//! `g = tanh(z_c)`, `o = σ(z_o)`, `c_t = f·c_{t-1} + i·g`, `h_t = o·tanh(c_t)`. The backward pass
//! is back-propagation through time over the saved gates and carries.
//!
//! Batch rows are independent, so the rows are split into a fixed number of blocks run on
//! rayon's pool, each through all steps with single-threaded products: results do not depend
//! on the number of threads. `exp` is Cephes' single-precision polynomial written so the loops
//! vectorize (absolute error of the gates below 1e-7).

use rayon::prelude::*;

use super::cpu::{self, multiversion};
use super::gemm::{View, matmul};

/// Row blocks: enough to balance two to eight cores.
const TASKS: usize = 8;

/// The output of [`forward`] and what its backward pass reads.
pub struct Saved {
    /// The output `h` of every step, `[b, t, u]`.
    pub hs: Vec<f32>,
    /// The activated gates `i, f, g, o` and the carry `c` of every step, `[b, t, 5u]`.
    pub cells: Vec<f32>,
}

/// The gradients of [`forward`]'s inputs.
pub struct Grads {
    /// `[b, t, 4u]`.
    pub dproj: Vec<f32>,
    /// `[u, 4u]`.
    pub drk: Vec<f32>,
    /// `[b, u]`.
    pub dh0: Vec<f32>,
    /// `[b, u]`.
    pub dc0: Vec<f32>,
}

/// `e^x` (Cephes' `expf`: `x = n·ln 2 + r`, a degree-6 polynomial in `r`, `2^n` from the
/// exponent bits), arguments clamped to `[-87.3, 88.3]`; plain arithmetic so loops vectorize.
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5·2^23: adding it rounds to the nearest integer.
    let x = x.clamp(-87.3, 88.3);
    let n = (x * std::f32::consts::LOG2_E + MAGIC) - MAGIC;
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let p = 1.987_569_1e-4_f32;
    let p = p * r + 1.398_2e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 0.166_666_65;
    let p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // 2^n from the exponent bits. `n + 127` (1..=254 after the clamp) sits in the low mantissa
    // bits of `n + 127 + MAGIC`; the shift moves it into the exponent field and drops the
    // rest. Unlike `n as i32` (a saturating conversion the compiler does one lane at a time),
    // this is a vector addition and a vector shift.
    let bits = (n + (127.0 + MAGIC)).to_bits() << 23;
    y * f32::from_bits(bits)
}

#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

#[inline(always)]
fn tanh(x: f32) -> f32 {
    let t = 1.0 - 2.0 / (exp(2.0 * x.abs()) + 1.0);
    t.copysign(x)
}

/// A matrix of `rows x cols` whose rows are `stride` apart in `data`.
fn strided(data: &[f32], rows: usize, cols: usize, stride: usize) -> View<'_> {
    View {
        data,
        rows,
        cols,
        row_stride: stride,
        col_stride: 1,
    }
}

/// Runs the layer forward from `h0`, `c0` (see the module docs for the shapes).
///
/// # Panics
/// When a slice's length differs from what `b`, `t`, `u` imply.
pub fn forward(proj: &[f32], rk: &[f32], h0: &[f32], c0: &[f32], dims: [usize; 3]) -> Saved {
    forward_on(cpu::path(), proj, rk, (h0, c0), dims)
}

/// [`forward`] with the cell kernels of `path`.
fn forward_on(
    path: cpu::CpuPath,
    proj: &[f32],
    rk: &[f32],
    (h0, c0): (&[f32], &[f32]),
    dims: [usize; 3],
) -> Saved {
    let [b, t, u] = dims;
    assert_eq!(proj.len(), b * t * 4 * u);
    assert_eq!(rk.len(), u * 4 * u);
    assert_eq!((h0.len(), c0.len()), (b * u, b * u));
    let mut saved = Saved {
        hs: vec![0.0; b * t * u],
        cells: vec![0.0; b * t * 5 * u],
    };
    if b * t * u == 0 {
        return saved;
    }
    let rows = b.div_ceil(TASKS);
    let blocks: Vec<_> = saved
        .hs
        .chunks_mut(rows * t * u)
        .zip(saved.cells.chunks_mut(rows * t * 5 * u))
        .enumerate()
        .collect();
    blocks.into_par_iter().for_each(|(k, (hs, cells))| {
        let r = hs.len() / (t * u);
        let (p, s) = (k * rows * t * 4 * u, k * rows * u);
        let state = (&h0[s..s + r * u], &c0[s..s + r * u]);
        forward_block(
            path,
            &proj[p..p + r * t * 4 * u],
            rk,
            state,
            (hs, cells),
            [r, t, u],
        );
    });
    saved
}

/// [`forward`] on `r` rows, all steps.
fn forward_block(
    path: cpu::CpuPath,
    proj: &[f32],
    rk: &[f32],
    (h0, c0): (&[f32], &[f32]),
    (hs, cells): (&mut [f32], &mut [f32]),
    [r, t, u]: [usize; 3],
) {
    let mut z = vec![0.0f32; r * 4 * u];
    for s in 0..t {
        let h_prev = match s {
            0 => strided(h0, r, u, u),
            _ => strided(&hs[(s - 1) * u..], r, u, t * u),
        };
        matmul(h_prev, View::new(rk, u, 4 * u), &mut z, false);
        for j in 0..r {
            let (at, at4, at5) = ((j * t + s) * u, (j * t + s) * 4 * u, (j * t + s) * 5 * u);
            let (before, after) = cells.split_at_mut(at5);
            let c_prev = match s {
                0 => &c0[j * u..(j + 1) * u],
                _ => &before[at5 - u..],
            };
            cell_forward(
                path,
                (&mut z[j * 4 * u..(j + 1) * 4 * u], &proj[at4..at4 + 4 * u]),
                c_prev,
                &mut after[..5 * u],
                &mut hs[at..at + u],
            );
        }
    }
}

multiversion! {
    /// One row of one step: `z` (`h_{t-1}·rk`, `[4u]`) plus `proj` gives the gates; writes
    /// the activated gates and the carry (`cell`, `[5u]`) and the output `h`.
    fn cell_forward(
        z_proj: (&mut [f32], &[f32]),
        c_prev: &[f32],
        cell: &mut [f32],
        h: &mut [f32],
    ) {
        let (z, proj) = z_proj;
        let u = h.len();
        z.iter_mut().zip(proj).for_each(|(z, p)| *z += p);
        let (zi, rest) = z.split_at(u);
        let (zf, rest) = rest.split_at(u);
        let (zg, zo) = rest.split_at(u);
        let (gi, rest) = cell.split_at_mut(u);
        let (gf, rest) = rest.split_at_mut(u);
        let (gg, rest) = rest.split_at_mut(u);
        let (go, c) = rest.split_at_mut(u);
        for k in 0..u {
            let (i, f, g, o) = (sigmoid(zi[k]), sigmoid(zf[k]), tanh(zg[k]), sigmoid(zo[k]));
            let ck = f * c_prev[k] + i * g;
            (gi[k], gf[k], gg[k], go[k]) = (i, f, g, o);
            c[k] = ck;
            h[k] = o * tanh(ck);
        }
    }
}

/// Back-propagation through time: the gradients of [`forward`]'s inputs for the output
/// gradient `dhs [b, t, u]`, given the forward pass's `hs` and `cells` ([`Saved`]).
///
/// # Panics
/// When a slice's length differs from what `b`, `t`, `u` imply.
pub fn backward(
    dhs: &[f32],
    rk: &[f32],
    (h0, c0): (&[f32], &[f32]),
    saved: (&[f32], &[f32]),
    dims: [usize; 3],
) -> Grads {
    backward_on(cpu::path(), dhs, rk, (h0, c0), saved, dims)
}

/// [`backward`] with the cell kernels of `path`.
fn backward_on(
    path: cpu::CpuPath,
    dhs: &[f32],
    rk: &[f32],
    (h0, c0): (&[f32], &[f32]),
    (hs, cells): (&[f32], &[f32]),
    dims: [usize; 3],
) -> Grads {
    let [b, t, u] = dims;
    assert_eq!(dhs.len(), b * t * u);
    assert_eq!((hs.len(), cells.len()), (b * t * u, b * t * 5 * u));
    let mut g = Grads {
        dproj: vec![0.0; b * t * 4 * u],
        drk: vec![0.0; u * 4 * u],
        dh0: vec![0.0; b * u],
        dc0: vec![0.0; b * u],
    };
    if b * t * u == 0 {
        return g;
    }
    let rows = b.div_ceil(TASKS);
    let blocks: Vec<_> = g
        .dproj
        .chunks_mut(rows * t * 4 * u)
        .zip(g.dh0.chunks_mut(rows * u))
        .zip(g.dc0.chunks_mut(rows * u))
        .enumerate()
        .collect();
    blocks.into_par_iter().for_each(|(k, ((dproj, dh0), dc0))| {
        let r = dh0.len() / u;
        let (q, s) = (k * rows * t * u, k * rows * u);
        let block = Block {
            dhs: &dhs[q..q + r * t * u],
            cells: &cells[5 * q..5 * (q + r * t * u)],
            c0: &c0[s..s + r * u],
        };
        backward_block(path, &block, rk, dproj, (dh0, dc0), [r, t, u]);
    });
    recurrent_kernel_grad(&previous_outputs(h0, hs, dims), &g.dproj, &mut g.drk, dims);
    g
}

/// The rows of one block that its backward pass reads.
struct Block<'a> {
    dhs: &'a [f32],
    cells: &'a [f32],
    c0: &'a [f32],
}

/// [`backward`] on `r` rows, all steps from the last; leaves the gradients of the initial
/// state in `dh0`, `dc0`.
fn backward_block(
    path: cpu::CpuPath,
    x: &Block<'_>,
    rk: &[f32],
    dproj: &mut [f32],
    (dh, dc): (&mut [f32], &mut [f32]),
    [r, t, u]: [usize; 3],
) {
    for s in (0..t).rev() {
        for j in 0..r {
            let (at, at4, at5) = ((j * t + s) * u, (j * t + s) * 4 * u, (j * t + s) * 5 * u);
            let c_prev = match s {
                0 => &x.c0[j * u..(j + 1) * u],
                _ => &x.cells[at5 - u..at5],
            };
            cell_backward(
                path,
                &x.dhs[at..at + u],
                &mut dh[j * u..(j + 1) * u],
                &mut dc[j * u..(j + 1) * u],
                (&x.cells[at5..at5 + 5 * u], c_prev),
                &mut dproj[at4..at4 + 4 * u],
            );
        }
        // The output gradient reaching the previous step: dz · rkᵀ.
        let dz = strided(&dproj[s * 4 * u..], r, 4 * u, t * 4 * u);
        matmul(dz, View::new(rk, u, 4 * u).t(), dh, false);
    }
}

multiversion! {
    /// One row of one step backward: `dh` holds the gradient reaching `h_t` from the next
    /// step, `dc` that reaching `c_t`; writes `dz [4u]` and leaves `dc` for `c_{t-1}`.
    fn cell_backward(
        dh_out: &[f32],
        dh: &mut [f32],
        dc: &mut [f32],
        kept: (&[f32], &[f32]),
        dz: &mut [f32],
    ) {
        let (cell, c_prev) = kept;
        let u = c_prev.len();
        let (gi, rest) = cell.split_at(u);
        let (gf, rest) = rest.split_at(u);
        let (gg, rest) = rest.split_at(u);
        let (go, c) = rest.split_at(u);
        let (di, rest) = dz.split_at_mut(u);
        let (df, rest) = rest.split_at_mut(u);
        let (dg, d_o) = rest.split_at_mut(u);
        for k in 0..u {
            let (i, f, g, o) = (gi[k], gf[k], gg[k], go[k]);
            let dhk = dh_out[k] + dh[k];
            let tc = tanh(c[k]);
            let dck = dc[k] + dhk * o * (1.0 - tc * tc);
            d_o[k] = dhk * tc * o * (1.0 - o);
            di[k] = dck * g * i * (1.0 - i);
            df[k] = dck * c_prev[k] * f * (1.0 - f);
            dg[k] = dck * i * (1.0 - g * g);
            dc[k] = dck * f;
        }
    }
}

/// `h_{t-1}` for every row and step, `[b, t, u]`: `h0` at step 0, else the previous output.
fn previous_outputs(h0: &[f32], hs: &[f32], [b, t, u]: [usize; 3]) -> Vec<f32> {
    let mut prev = vec![0.0f32; b * t * u];
    for j in 0..b {
        let row = &mut prev[j * t * u..(j + 1) * t * u];
        row[..u].copy_from_slice(&h0[j * u..(j + 1) * u]);
        row[u..].copy_from_slice(&hs[j * t * u..(j + 1) * t * u - u]);
    }
    prev
}

/// `drk = prevᵀ · dproj` over all rows and steps, by blocks of `drk`'s rows.
fn recurrent_kernel_grad(prev: &[f32], dproj: &[f32], drk: &mut [f32], [b, t, u]: [usize; 3]) {
    let n = b * t;
    let cols = u.div_ceil(TASKS).max(1);
    drk.par_chunks_mut(cols * 4 * u)
        .enumerate()
        .for_each(|(k, out)| {
            let c = out.len() / (4 * u);
            let prev_t = View {
                data: &prev[k * cols..],
                rows: c,
                cols: n,
                row_stride: 1,
                col_stride: u,
            };
            matmul(prev_t, View::new(dproj, n, 4 * u), out, false);
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Forward in float64, step by step, for checking: `(hs, cs)`.
    fn reference(p: &[f32], rk: &[f32], h0: &[f32], c0: &[f32], [b, t, u]: [usize; 3]) -> Vec<f64> {
        let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
        let mut hs = vec![0.0f64; b * t * u];
        for j in 0..b {
            let mut h: Vec<f64> = h0[j * u..(j + 1) * u].iter().map(|&v| v as f64).collect();
            let mut c: Vec<f64> = c0[j * u..(j + 1) * u].iter().map(|&v| v as f64).collect();
            for s in 0..t {
                let z: Vec<f64> = (0..4 * u)
                    .map(|q| {
                        let dot: f64 = (0..u).map(|k| h[k] * rk[k * 4 * u + q] as f64).sum();
                        p[(j * t + s) * 4 * u + q] as f64 + dot
                    })
                    .collect();
                for k in 0..u {
                    let (i, f) = (sig(z[k]), sig(z[u + k]));
                    let (g, o) = (z[2 * u + k].tanh(), sig(z[3 * u + k]));
                    c[k] = f * c[k] + i * g;
                    h[k] = o * c[k].tanh();
                }
                hs[(j * t + s) * u..(j * t + s + 1) * u].copy_from_slice(&h);
            }
        }
        hs
    }

    /// Every path this CPU runs (the cell kernels take it as an argument: no global switch).
    fn paths() -> Vec<cpu::CpuPath> {
        let top = cpu::CpuPath::detected();
        cpu::CpuPath::ALL
            .into_iter()
            .filter(|p| *p <= top)
            .collect()
    }

    fn values(n: usize, seed: f32, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|i| (i as f32 * 0.37 + seed).sin() * scale)
            .collect()
    }

    #[test]
    fn exp_sigmoid_and_tanh_are_accurate() {
        for i in -4000..=4000 {
            let x = i as f32 * 0.01;
            let e = (x as f64).exp();
            assert!(((exp(x) as f64 - e) / e).abs() < 3e-7, "exp({x})");
            let s = 1.0 / (1.0 + (-(x as f64)).exp());
            assert!((sigmoid(x) as f64 - s).abs() < 1e-7, "sigmoid({x})");
            assert!(
                (tanh(x) as f64 - (x as f64).tanh()).abs() < 2e-7,
                "tanh({x})"
            );
        }
        assert_eq!(exp(-200.0), exp(-87.3));
        assert!(sigmoid(-200.0) < 1e-37 && sigmoid(200.0) == 1.0);
        assert_eq!((tanh(-30.0), tanh(30.0), tanh(0.0)), (-1.0, 1.0, 0.0));
    }

    #[test]
    fn forward_matches_float64_steps_on_every_path() {
        for path in paths() {
            for dims in [[1, 1, 1], [3, 5, 4], [17, 6, 9], [9, 2, 33]] {
                let [b, t, u] = dims;
                let p = values(b * t * 4 * u, 0.1, 1.5);
                let rk = values(u * 4 * u, 0.7, 0.4);
                let (h0, c0) = (values(b * u, 1.3, 0.5), values(b * u, 2.9, 0.8));
                let got = forward_on(path, &p, &rk, (&h0, &c0), dims);
                let want = reference(&p, &rk, &h0, &c0, dims);
                for (q, (g, w)) in got.hs.iter().zip(&want).enumerate() {
                    assert!(
                        (*g as f64 - w).abs() < 2e-6,
                        "{path:?} {dims:?} hs[{q}]: {g} vs {w}"
                    );
                }
            }
        }
    }

    /// The loss `Σ hs · r` of a forward run, in float64.
    fn loss(p: &[f32], rk: &[f32], h0: &[f32], c0: &[f32], r: &[f32], dims: [usize; 3]) -> f64 {
        let hs = reference(p, rk, h0, c0, dims);
        hs.iter().zip(r).map(|(h, &r)| h * r as f64).sum()
    }

    #[test]
    fn gradients_match_central_differences_on_every_path() {
        let dims = [5, 4, 3];
        let [b, t, u] = dims;
        let p = values(b * t * 4 * u, 0.2, 1.2);
        let rk = values(u * 4 * u, 0.9, 0.5);
        let (h0, c0) = (values(b * u, 1.1, 0.5), values(b * u, 3.1, 0.7));
        let r = values(b * t * u, 4.4, 1.0);
        let numeric = |which: usize, q: usize| {
            let eps = 1e-3f32;
            let mut ins = [p.clone(), rk.clone(), h0.clone(), c0.clone()];
            ins[which][q] += eps;
            let up = loss(&ins[0], &ins[1], &ins[2], &ins[3], &r, dims);
            ins[which][q] -= 2.0 * eps;
            let down = loss(&ins[0], &ins[1], &ins[2], &ins[3], &r, dims);
            (up - down) / (2.0 * eps as f64)
        };
        for path in paths() {
            let saved = forward_on(path, &p, &rk, (&h0, &c0), dims);
            let g = backward_on(path, &r, &rk, (&h0, &c0), (&saved.hs, &saved.cells), dims);
            for (which, got) in [&g.dproj, &g.drk, &g.dh0, &g.dc0].into_iter().enumerate() {
                for (q, &v) in got.iter().enumerate() {
                    let want = numeric(which, q);
                    assert!(
                        (v as f64 - want).abs() < 2e-3 * (1.0 + want.abs()),
                        "{path:?} input {which}[{q}]: {v} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn rows_give_the_same_results_alone_or_in_a_batch() {
        let dims = [12, 3, 8];
        let [b, t, u] = dims;
        let p = values(b * t * 4 * u, 0.3, 1.0);
        let rk = values(u * 4 * u, 0.5, 0.3);
        let (h0, c0) = (vec![0.0; b * u], vec![0.0; b * u]);
        let all = forward(&p, &rk, &h0, &c0, dims);
        let one = forward(
            &p[5 * t * 4 * u..6 * t * 4 * u],
            &rk,
            &h0[..u],
            &c0[..u],
            [1, t, u],
        );
        assert_eq!(&all.hs[5 * t * u..6 * t * u], &one.hs[..]);
    }
}
