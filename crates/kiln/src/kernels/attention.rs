//! Scaled dot-product attention over several heads as one operation, forward and backward:
//! `softmax(Q Kᵀ / sqrt(key_dim)) V` (Vaswani et al. 2017), with Keras' attention mask
//! (`MultiHeadAttention._compute_attention`: masked scores take no weight, and a query that may
//! attend to nothing gets zeros).
//!
//! Shapes (row-major), as the projections leave them, so no head is split off by a copy:
//! `q [n, sq, heads·kd]`, `k [n, sv, heads·kd]`, `v [n, sv, heads·vd]`, the optional mask
//! `[n, mask_rows, sv]` (1 where a query may attend, `mask_rows` 1 or `sq`); outputs the context
//! `[n, sq, heads·vd]` and the attention weights `[n, heads, sq, sv]`, which the backward pass
//! reads.
//!
//! Per batch row and head the scores, their softmax and the weighted sum of the values run in
//! one pass over a row of `sv` scores that stays in cache, instead of a batched matrix product
//! of small matrices, a softmax of several passes over memory and another batched product (with
//! the transposing copies between them). Batch rows are independent and run in parallel on
//! rayon's pool; each row's sums run in a fixed order, so results do not depend on the number of
//! threads. Inner loops are `axpy` over contiguous rows, which the compiler vectorizes.
//!
//! Backward, with `P` the weights and `dO` the context's gradient, per row and head:
//! `dV = Pᵀ dO`, `dP = dO Vᵀ`, `dS = P ⊙ (dP − rowsum(P ⊙ dP))`, `dQ = scale · dS K`,
//! `dK = scale · dSᵀ Q`. Masked weights are saved as zeros, so `dS` is zero there, as the
//! gradient of Keras' masked softmax is.

use rayon::prelude::*;

use super::cpu::{self, multiversion};
use super::lanes::{LANES, dot, map, max, sum};
use super::lstm::exp;
use super::scratch::with_scratch;

/// The sizes of one attention operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionDims {
    /// Batch rows `n`.
    pub batch: usize,
    /// Query steps `sq`.
    pub query_steps: usize,
    /// Key/value steps `sv`.
    pub value_steps: usize,
    /// Heads.
    pub heads: usize,
    /// Features per head of the queries and keys (`key_dim`).
    pub key_dim: usize,
    /// Features per head of the values (`value_dim`).
    pub value_dim: usize,
    /// Rows of the mask per batch row: 0 (no mask), 1 (the same for every query) or `sq`.
    pub mask_rows: usize,
}

impl AttentionDims {
    /// The sizes as plain numbers (see [`AttentionDims::from_array`]).
    pub fn to_array(self) -> [usize; 7] {
        [
            self.batch,
            self.query_steps,
            self.value_steps,
            self.heads,
            self.key_dim,
            self.value_dim,
            self.mask_rows,
        ]
    }

    /// `[batch, query_steps, value_steps, heads, key_dim, value_dim, mask_rows]`.
    pub fn from_array(a: [usize; 7]) -> AttentionDims {
        AttentionDims {
            batch: a[0],
            query_steps: a[1],
            value_steps: a[2],
            heads: a[3],
            key_dim: a[4],
            value_dim: a[5],
            mask_rows: a[6],
        }
    }

    fn scale(self) -> f32 {
        (1.0 / (self.key_dim as f64).sqrt()) as f32
    }

    /// Lengths of one batch row of `q`, `k`, `v`, the mask, the context and the weights.
    fn row_lens(self) -> [usize; 6] {
        let (h, sq, sv) = (self.heads, self.query_steps, self.value_steps);
        [
            sq * h * self.key_dim,
            sv * h * self.key_dim,
            sv * h * self.value_dim,
            self.mask_rows * sv,
            sq * h * self.value_dim,
            h * sq * sv,
        ]
    }
}

/// The output of [`forward`].
pub struct Saved {
    /// `[n, sq, heads·vd]`.
    pub context: Vec<f32>,
    /// The attention weights `[n, heads, sq, sv]` (zeros where masked).
    pub weights: Vec<f32>,
}

/// The gradients of [`forward`]'s inputs.
pub struct Grads {
    /// `[n, sq, heads·kd]`.
    pub dq: Vec<f32>,
    /// `[n, sv, heads·kd]`.
    pub dk: Vec<f32>,
    /// `[n, sv, heads·vd]`.
    pub dv: Vec<f32>,
}

/// Batch row `b`'s part of `data`, rows of `len` values.
fn row(data: &[f32], b: usize, len: usize) -> &[f32] {
    &data[b * len..(b + 1) * len]
}

/// Runs the attention forward (see the module docs for the shapes); `mask` is empty when
/// `dims.mask_rows` is 0.
///
/// # Panics
/// When a slice's length differs from what `dims` implies, or `mask_rows` is neither 0, 1 nor
/// `sq`.
pub fn forward(q: &[f32], k: &[f32], v: &[f32], mask: &[f32], dims: AttentionDims) -> Saved {
    let [lq, lk, lv, lm, lc, lw] = dims.row_lens();
    let n = dims.batch;
    assert!(matches!(dims.mask_rows, 0 | 1) || dims.mask_rows == dims.query_steps);
    assert_eq!(
        (q.len(), k.len(), v.len(), mask.len()),
        (n * lq, n * lk, n * lv, n * lm)
    );
    let mut saved = Saved {
        context: vec![0.0; n * lc],
        weights: vec![0.0; n * lw],
    };
    if lc == 0 || lw == 0 {
        return saved;
    }
    let path = cpu::path();
    let scratch = dims.key_dim * padded(dims.value_steps) + padded(dims.value_steps);
    saved
        .context
        .par_chunks_mut(lc)
        .zip(saved.weights.par_chunks_mut(lw))
        .enumerate()
        .for_each(|(b, (ctx, w))| {
            let inputs = [
                row(q, b, lq),
                row(k, b, lk),
                row(v, b, lv),
                row(mask, b, lm),
            ];
            with_scratch(scratch, |buf| {
                row_forward(path, inputs, (ctx, w), buf, dims)
            });
        });
    saved
}

/// `n` rounded up to whole blocks of [`gemv`]'s widest tile.
fn padded(n: usize) -> usize {
    n.next_multiple_of(4 * LANES)
}

multiversion! {
    /// [`forward`] for one batch row, all heads; `buf` is scratch for one head's keys as
    /// `[kd, sv]` and one row of scores, rows [`padded`].
    fn row_forward(
        inputs: [&[f32]; 4],
        out: (&mut [f32], &mut [f32]),
        buf: &mut [f32],
        dims: AttentionDims,
    ) {
        let [q, k, v, mask] = inputs;
        let (ctx, weights) = out;
        let AttentionDims { query_steps: sq, value_steps: sv, heads, key_dim: kd, value_dim: vd, .. } = dims;
        let (qs, vs, scale) = (heads * kd, heads * vd, dims.scale());
        let svp = padded(sv);
        let (kt, s) = buf.split_at_mut(kd * svp);
        for h in 0..heads {
            transpose(&k[h * kd..], (sv, kd, qs), kt, svp);
            for i in 0..sq {
                // The scores of query i against every key, their softmax, the weighted values.
                gemv(s, &q[i * qs + h * kd..][..kd], kt, svp);
                let m = match dims.mask_rows {
                    0 => None,
                    1 => Some(&mask[..sv]),
                    _ => Some(&mask[i * sv..(i + 1) * sv]),
                };
                softmax(&mut s[..sv.next_multiple_of(LANES)], sv, scale, m);
                let p = &s[..sv];
                weights[(h * sq + i) * sv..][..sv].copy_from_slice(p);
                gemv(&mut ctx[i * vs + h * vd..][..vd], p, &v[h * vd..], vs);
            }
        }
    }
}

/// `out[c·padded + r] = x[r·stride + c]` for `rows x cols` values of `x`: a matrix whose rows
/// are `stride` apart, transposed, rows `padded` long (the padding zero).
#[inline(always)]
fn transpose(
    x: &[f32],
    (rows, cols, stride): (usize, usize, usize),
    out: &mut [f32],
    padded: usize,
) {
    out.fill(0.0);
    for r in 0..rows {
        for (c, &val) in x[r * stride..][..cols].iter().enumerate() {
            out[c * padded + r] = val;
        }
    }
}

/// `out[c] = Σ_r a[r] · m[r·stride + c]`: the row vector `a` times the matrix `m` (`a.len()`
/// rows `stride` apart, `out.len()` columns), summed in the order of `r`. The columns go in
/// tiles of up to four vectors held in registers through the whole sum.
#[inline(always)]
fn gemv(out: &mut [f32], a: &[f32], m: &[f32], stride: usize) {
    let w = out.len();
    let mut c = 0;
    while c + 4 * LANES <= w {
        tile::<4>(out, a, m, (stride, c));
        c += 4 * LANES;
    }
    if c + 2 * LANES <= w {
        tile::<2>(out, a, m, (stride, c));
        c += 2 * LANES;
    }
    if c + LANES <= w {
        tile::<1>(out, a, m, (stride, c));
        c += LANES;
    }
    for (x, o) in out.iter_mut().enumerate().skip(c) {
        *o = a
            .iter()
            .enumerate()
            .fold(0.0, |acc, (r, &ar)| acc + ar * m[r * stride + x]);
    }
}

/// [`gemv`]'s columns `c..c + N·LANES`: even and odd rows summed apart (two independent chains
/// of additions, each in registers), then added.
#[inline(always)]
fn tile<const N: usize>(out: &mut [f32], a: &[f32], m: &[f32], (stride, c): (usize, usize)) {
    #[inline(always)]
    fn add_row<const N: usize>(acc: &mut [[f32; LANES]; N], ar: f32, row: &[f32]) {
        for (n, acc) in acc.iter_mut().enumerate() {
            let x: [f32; LANES] = row[n * LANES..(n + 1) * LANES].try_into().expect("lanes");
            for l in 0..LANES {
                acc[l] += ar * x[l];
            }
        }
    }
    let (mut even, mut odd) = ([[0.0f32; LANES]; N], [[0.0f32; LANES]; N]);
    let pairs = a.len() / 2;
    for r in 0..pairs {
        add_row(&mut even, a[2 * r], &m[2 * r * stride + c..][..N * LANES]);
        add_row(
            &mut odd,
            a[2 * r + 1],
            &m[(2 * r + 1) * stride + c..][..N * LANES],
        );
    }
    if a.len() % 2 == 1 {
        let r = a.len() - 1;
        add_row(&mut even, a[r], &m[r * stride + c..][..N * LANES]);
    }
    for n in 0..N {
        let o = &mut out[c + n * LANES..][..LANES];
        for l in 0..LANES {
            o[l] = even[n][l] + odd[n][l];
        }
    }
}

/// The softmax of `scale` times the first `n` scores of `p` in place (`p` holds whole chunks of
/// [`LANES`]; the entries from `n` on end as 0); with a mask (`n` long), masked entries get 0
/// and a row with nothing to attend to all zeros (Keras' masked softmax times the mask).
#[inline(always)]
fn softmax(p: &mut [f32], n: usize, scale: f32, mask: Option<&[f32]>) {
    p[n..].fill(f32::NEG_INFINITY);
    if let Some(m) = mask {
        p.iter_mut()
            .zip(m)
            .filter(|(_, m)| **m == 0.0)
            .for_each(|(x, _)| *x = f32::NEG_INFINITY);
    }
    // max(scale·x) = scale·max(x) for scale > 0.
    let top = max(p);
    if top == f32::NEG_INFINITY {
        // Nothing to attend to gives zeros; scores that are all NaN stay NaN (`max` skips NaN).
        let fill = if p.iter().any(|x| x.is_nan()) {
            f32::NAN
        } else {
            0.0
        };
        p.fill(fill);
        return;
    }
    map(p, |x| exp(scale * (x - top)));
    // `exp` never returns 0 (its argument is clamped): zero the padding and the masked ones.
    p[n..].fill(0.0);
    if let Some(m) = mask {
        p.iter_mut().zip(m).for_each(|(x, &m)| *x *= m);
    }
    let inv = 1.0 / sum(p);
    map(p, |x| x * inv);
}

/// The gradients of [`forward`]'s inputs for the context's gradient `dctx`, given the inputs
/// and the weights it saved.
///
/// # Panics
/// When a slice's length differs from what `dims` implies.
pub fn backward(
    dctx: &[f32],
    (q, k, v): (&[f32], &[f32], &[f32]),
    weights: &[f32],
    dims: AttentionDims,
) -> Grads {
    let [lq, lk, lv, _, lc, lw] = dims.row_lens();
    let n = dims.batch;
    assert_eq!(
        (dctx.len(), q.len(), k.len(), v.len(), weights.len()),
        (n * lc, n * lq, n * lk, n * lv, n * lw)
    );
    let mut g = Grads {
        dq: vec![0.0; n * lq],
        dk: vec![0.0; n * lk],
        dv: vec![0.0; n * lv],
    };
    if lc == 0 || lw == 0 {
        return g;
    }
    let path = cpu::path();
    let (sq, svp) = (dims.query_steps, padded(dims.value_steps));
    let scratch = dims.value_dim * svp + svp + 3 * sq * dims.value_steps;
    g.dq.par_chunks_mut(lq)
        .zip(g.dk.par_chunks_mut(lk))
        .zip(g.dv.par_chunks_mut(lv))
        .enumerate()
        .for_each(|(b, ((dq, dk), dv))| {
            let inputs = [
                row(dctx, b, lc),
                row(q, b, lq),
                row(k, b, lk),
                row(v, b, lv),
                row(weights, b, lw),
            ];
            with_scratch(scratch, |buf| {
                row_backward(path, inputs, [dq, dk, dv], buf, dims)
            });
        });
    g
}

multiversion! {
    /// [`backward`] for one batch row, all heads; `buf` is scratch for one head's values as
    /// `[vd, sv]`, one padded row, the head's `dS [sq, sv]`, and `P` and `dS` transposed.
    fn row_backward(inputs: [&[f32]; 5], grads: [&mut [f32]; 3], buf: &mut [f32], dims: AttentionDims) {
        let [dctx, q, k, v, weights] = inputs;
        let [dq, dk, dv] = grads;
        let AttentionDims { query_steps: sq, value_steps: sv, heads, key_dim: kd, value_dim: vd, .. } = dims;
        let (qs, vs, scale) = (heads * kd, heads * vd, dims.scale());
        let svp = padded(sv);
        let (vt, rest) = buf.split_at_mut(vd * svp);
        let (dp, rest) = rest.split_at_mut(svp);
        let (ds, rest) = rest.split_at_mut(sq * sv);
        let (pt, dst) = rest.split_at_mut(sq * sv);
        for h in 0..heads {
            let p = &weights[h * sq * sv..(h + 1) * sq * sv];
            transpose(&v[h * vd..], (sv, vd, vs), vt, svp);
            for i in 0..sq {
                // dP = dO·Vᵀ; dS = P ⊙ (dP − Σ P ⊙ dP), scaled for dQ and dK; dQ = dS·K.
                gemv(dp, &dctx[i * vs + h * vd..][..vd], vt, svp);
                let pi = &p[i * sv..(i + 1) * sv];
                let dot = dot(pi, &dp[..sv]);
                let dsi = &mut ds[i * sv..(i + 1) * sv];
                for ((d, &pj), &dpj) in dsi.iter_mut().zip(pi).zip(&dp[..sv]) {
                    *d = scale * pj * (dpj - dot);
                }
                gemv(&mut dq[i * qs + h * kd..][..kd], dsi, &k[h * kd..], qs);
            }
            // dV = Pᵀ·dO and dK = dSᵀ·Q, a row of each per key.
            transpose(p, (sq, sv, sv), pt, sq);
            transpose(ds, (sq, sv, sv), dst, sq);
            for j in 0..sv {
                gemv(&mut dv[j * vs + h * vd..][..vd], &pt[j * sq..(j + 1) * sq], &dctx[h * vd..], vs);
                gemv(&mut dk[j * qs + h * kd..][..kd], &dst[j * sq..(j + 1) * sq], &q[h * kd..], qs);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: f32, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|i| (i as f32 * 0.37 + seed).sin() * scale)
            .collect()
    }

    /// The attention of one batch row and head in float64, straight from the definition.
    fn reference(
        [q, k, v, mask]: [&[f32]; 4],
        dims: AttentionDims,
        b: usize,
        h: usize,
    ) -> (Vec<f64>, Vec<f64>) {
        let AttentionDims {
            query_steps: sq,
            value_steps: sv,
            heads,
            key_dim: kd,
            value_dim: vd,
            mask_rows,
            ..
        } = dims;
        let (mut ctx, mut weights) = (vec![0.0; sq * vd], vec![0.0; sq * sv]);
        for i in 0..sq {
            let kept = |j: usize| match mask_rows {
                0 => true,
                1 => mask[b * sv + j] != 0.0,
                _ => mask[(b * sq + i) * sv + j] != 0.0,
            };
            let s: Vec<f64> = (0..sv)
                .map(|j| {
                    (0..kd)
                        .map(|d| {
                            q[(b * sq + i) * heads * kd + h * kd + d] as f64
                                * k[(b * sv + j) * heads * kd + h * kd + d] as f64
                        })
                        .sum::<f64>()
                        / (kd as f64).sqrt()
                })
                .collect();
            let max = (0..sv)
                .filter(|&j| kept(j))
                .map(|j| s[j])
                .fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = (0..sv)
                .map(|j| if kept(j) { (s[j] - max).exp() } else { 0.0 })
                .collect();
            let total: f64 = e.iter().sum();
            for j in 0..sv {
                let p = if total > 0.0 { e[j] / total } else { 0.0 };
                weights[i * sv + j] = p;
                for c in 0..vd {
                    ctx[i * vd + c] += p * v[(b * sv + j) * heads * vd + h * vd + c] as f64;
                }
            }
        }
        (ctx, weights)
    }

    #[test]
    fn forward_matches_the_definition_with_and_without_a_mask() {
        for (mask_rows, sq, sv) in [(0, 5, 7), (1, 5, 7), (5, 5, 7), (0, 1, 1), (3, 3, 4)] {
            let dims = AttentionDims {
                batch: 3,
                query_steps: sq,
                value_steps: sv,
                heads: 2,
                key_dim: 4,
                value_dim: 3,
                mask_rows,
            };
            let [lq, lk, lv, lm, lc, lw] = dims.row_lens();
            let (q, k, v) = (
                values(3 * lq, 0.1, 2.0),
                values(3 * lk, 0.7, 2.0),
                values(3 * lv, 1.3, 1.0),
            );
            // Every third entry masked, and the whole first row of the last batch row.
            let mut mask: Vec<f32> = (0..3 * lm).map(|i| f32::from(i % 3 != 1)).collect();
            if lm > 0 {
                mask[2 * lm..2 * lm + sv].fill(0.0);
            }
            let saved = forward(&q, &k, &v, &mask, dims);
            for b in 0..3 {
                for h in 0..2 {
                    let (ctx, w) = reference([&q, &k, &v, &mask], dims, b, h);
                    for i in 0..sq {
                        for c in 0..3 {
                            let ours = saved.context[b * lc + i * 6 + h * 3 + c];
                            assert!((ours as f64 - ctx[i * 3 + c]).abs() < 1e-5, "{dims:?}");
                        }
                        for j in 0..sv {
                            let ours = saved.weights[b * lw + (h * sq + i) * sv + j];
                            assert!((ours as f64 - w[i * sv + j]).abs() < 1e-6, "{dims:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn nan_scores_stay_nan_and_a_fully_masked_row_gives_zeros() {
        let dims = AttentionDims {
            batch: 1,
            query_steps: 2,
            value_steps: 3,
            heads: 1,
            key_dim: 2,
            value_dim: 2,
            mask_rows: 2,
        };
        let q = [f32::NAN, f32::NAN, 0.5, 0.25];
        let (k, v) = (
            [0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
            [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        );
        let mask = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0];
        let s = forward(&q, &k, &v, &mask, dims);
        assert!(s.context[..2].iter().all(|x| x.is_nan()), "{:?}", s.context);
        assert_eq!(&s.context[2..], &[0.0, 0.0]);
        let s = forward(&[0.5, 0.25, f32::NAN, 1.0], &k, &v, &[1.0; 6], dims);
        assert!(s.context[..2].iter().all(|x| x.is_finite()));
        assert!(s.context[2..].iter().all(|x| x.is_nan()));
    }

    #[test]
    fn gradients_match_central_differences() {
        let dims = AttentionDims {
            batch: 2,
            query_steps: 3,
            value_steps: 4,
            heads: 2,
            key_dim: 3,
            value_dim: 2,
            mask_rows: 1,
        };
        let [lq, lk, lv, lm, lc, _] = dims.row_lens();
        let (q, k, v) = (
            values(2 * lq, 0.2, 1.5),
            values(2 * lk, 0.9, 1.5),
            values(2 * lv, 1.7, 1.0),
        );
        let mask: Vec<f32> = (0..2 * lm).map(|i| f32::from(i != 2)).collect();
        let r = values(2 * lc, 0.4, 1.0);
        let loss = |q: &[f32], k: &[f32], v: &[f32]| -> f64 {
            let s = forward(q, k, v, &mask, dims);
            s.context
                .iter()
                .zip(&r)
                .map(|(a, b)| (*a as f64) * (*b as f64))
                .sum()
        };
        let s = forward(&q, &k, &v, &mask, dims);
        let g = backward(&r, (&q, &k, &v), &s.weights, dims);
        let eps = 1e-2f32;
        let check = |which: usize, grad: &[f32]| {
            for idx in 0..grad.len() {
                let mut ins = [q.clone(), k.clone(), v.clone()];
                ins[which][idx] += eps;
                let up = loss(&ins[0], &ins[1], &ins[2]);
                ins[which][idx] -= 2.0 * eps;
                let down = loss(&ins[0], &ins[1], &ins[2]);
                let numeric = (up - down) / (2.0 * eps as f64);
                assert!(
                    (numeric - grad[idx] as f64).abs() < 2e-3,
                    "input {which} index {idx}: {numeric} against {}",
                    grad[idx]
                );
            }
        };
        check(0, &g.dq);
        check(1, &g.dk);
        check(2, &g.dv);
        // The masked key (value step 2 of batch row 0) gets no gradient.
        for h in 0..2 {
            for d in 0..3 {
                assert_eq!(g.dk[2 * 6 + h * 3 + d], 0.0);
                assert_eq!(g.dv[2 * 4 + h * 2 + d.min(1)], 0.0);
            }
        }
    }
}
