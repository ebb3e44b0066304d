//! 2-D max pooling, forward and backward, on NCHW planes.
//!
//! Padded positions never win (they count as −∞, as in TensorFlow and Burn). On ties the first
//! maximum in row-major window order takes the gradient, as in Burn and PyTorch.

use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
mod avx2;

/// Whether the 2×2 fast paths may use [`avx2`] (the [`super::cpu`] path is AVX2 or wider).
#[inline]
fn has_avx2() -> bool {
    super::cpu::path() >= super::cpu::CpuPath::Avx2
}

/// Forward of one 2×2 output row: the vector path when the row has at least 4 windows, else the
/// scalar [`window_max`] (bit-identical results either way).
#[inline]
fn forward_row_2x2(r0: &[f32], r1: &[f32], out: &mut [f32], simd: bool) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: AVX2 was detected.
    if simd && unsafe { avx2::forward_row(r0, r1, out) } {
        return;
    }
    let _ = simd;
    for (o, (a, b)) in out
        .iter_mut()
        .zip(r0.chunks_exact(2).zip(r1.chunks_exact(2)))
    {
        *o = window_max(a[0], a[1], b[0], b[1]).0;
    }
}

/// Backward of one 2×2 output row (see [`forward_row_2x2`]): each `grad` value goes to its
/// window's maximum in `d0`/`d1`, zeros to the other three positions.
#[inline]
fn backward_row_2x2(
    r0: &[f32],
    r1: &[f32],
    grad: &[f32],
    d0: &mut [f32],
    d1: &mut [f32],
    simd: bool,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: AVX2 was detected.
    if simd && unsafe { avx2::backward_row(r0, r1, grad, d0, d1) } {
        return;
    }
    let _ = simd;
    for (ox, &gv) in grad.iter().enumerate() {
        let j = 2 * ox;
        let (_, at) = window_max(r0[j], r0[j + 1], r1[j], r1[j + 1]);
        let pick = |k: u8| if at == k { gv } else { 0.0 };
        d0[j] = pick(0);
        d0[j + 1] = pick(1);
        d1[j] = pick(2);
        d1[j + 1] = pick(3);
    }
}

/// Sizes of one pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolGeometry {
    /// `batch * channels`: the number of independent planes.
    pub planes: usize,
    /// Input height.
    pub height: usize,
    /// Input width.
    pub width: usize,
    /// `[kh, kw]`.
    pub kernel: [usize; 2],
    /// `[stride_h, stride_w]`.
    pub stride: [usize; 2],
    /// `[(top, bottom), (left, right)]`.
    pub padding: [(usize, usize); 2],
}

/// True when `candidate` replaces `best` as a window's maximum: strictly greater (`>`, not `>=`,
/// so the first maximum wins), or a NaN over a number (NaN propagates, as `max` does).
#[inline]
fn beats(candidate: f32, best: f32) -> bool {
    candidate > best || candidate.is_nan() && !best.is_nan()
}

/// The maximum of a 2×2 window `[a b; c d]` and its position (0..4, row-major) under
/// [`beats`]: the first maximum wins, a NaN propagates. Written with selects, not branches.
#[inline]
fn window_max(a: f32, b: f32, c: f32, d: f32) -> (f32, u8) {
    let (mut best, mut at) = (a, 0u8);
    for (v, k) in [(b, 1u8), (c, 2), (d, 3)] {
        let take = beats(v, best);
        best = if take { v } else { best };
        at = if take { k } else { at };
    }
    (best, at)
}

impl PoolGeometry {
    /// `[oh, ow]`.
    pub fn out_hw(&self) -> [usize; 2] {
        let [(pt, pb), (pl, pr)] = self.padding;
        [
            (self.height + pt + pb - self.kernel[0]) / self.stride[0] + 1,
            (self.width + pl + pr - self.kernel[1]) / self.stride[1] + 1,
        ]
    }

    /// Index in the plane of the maximum of output position `(oy, ox)`.
    #[inline]
    fn argmax(&self, plane: &[f32], oy: usize, ox: usize) -> usize {
        let [(pt, _), (pl, _)] = self.padding;
        let y0 = (oy * self.stride[0]).saturating_sub(pt);
        let y1 = (oy * self.stride[0] + self.kernel[0])
            .saturating_sub(pt)
            .min(self.height);
        let x0 = (ox * self.stride[1]).saturating_sub(pl);
        let x1 = (ox * self.stride[1] + self.kernel[1])
            .saturating_sub(pl)
            .min(self.width);
        let mut best = y0 * self.width + x0;
        for y in y0..y1 {
            for x in x0..x1 {
                let i = y * self.width + x;
                if beats(plane[i], plane[best]) {
                    best = i;
                }
            }
        }
        best
    }
}

/// Max pooling of `x [planes, h, w]` into `[planes, oh, ow]`.
///
/// # Panics
/// When `x.len()` differs from what `g` implies.
pub fn max_forward(x: &[f32], g: &PoolGeometry) -> Vec<f32> {
    let [oh, ow] = g.out_hw();
    let hw = g.height * g.width;
    assert_eq!(x.len(), g.planes * hw);
    let mut y = vec![0.0f32; g.planes * oh * ow];
    if g.kernel == [2, 2] && g.stride == [2, 2] && g.padding == [(0, 0), (0, 0)] {
        let w = g.width;
        let simd = has_avx2();
        y.par_chunks_mut(oh * ow)
            .zip(x.par_chunks(hw))
            .for_each(|(out, plane)| {
                for (oy, out) in out.chunks_exact_mut(ow).enumerate() {
                    let r0 = &plane[2 * oy * w..][..2 * ow];
                    let r1 = &plane[(2 * oy + 1) * w..][..2 * ow];
                    forward_row_2x2(r0, r1, out, simd);
                }
            });
        return y;
    }
    y.par_chunks_mut(oh * ow)
        .zip(x.par_chunks(hw))
        .for_each(|(out, plane)| {
            for oy in 0..oh {
                for ox in 0..ow {
                    out[oy * ow + ox] = plane[g.argmax(plane, oy, ox)];
                }
            }
        });
    y
}

/// Gradient of [`max_forward`]: each output gradient goes to its window's maximum.
///
/// # Panics
/// When a slice's length differs from what `g` implies.
pub fn max_backward(x: &[f32], dy: &[f32], g: &PoolGeometry) -> Vec<f32> {
    let [oh, ow] = g.out_hw();
    let hw = g.height * g.width;
    assert_eq!(x.len(), g.planes * hw);
    assert_eq!(dy.len(), g.planes * oh * ow);
    if g.kernel == [2, 2] && g.stride == [2, 2] && g.padding == [(0, 0), (0, 0)] {
        // Windows do not overlap: each output gradient lands on one of its four inputs, and
        // all four are written (branch-free), so the two input rows are filled in one pass.
        // When the windows cover the plane (even sizes), that writes every element: no
        // zeroing pass over the fresh buffer; otherwise each plane is zeroed first, in cache.
        let w = g.width;
        let simd = has_avx2();
        let covered = g.height == 2 * oh && w == 2 * ow;
        let mut dx: Vec<f32> = Vec::with_capacity(x.len());
        dx.spare_capacity_mut()[..x.len()]
            .par_chunks_mut(hw)
            .zip(x.par_chunks(hw))
            .zip(dy.par_chunks(oh * ow))
            .for_each(|((d, plane), grad)| {
                // SAFETY: float32 has no invalid bit patterns, and every element of `d` is
                // written below (all of them by the windows when `covered`, else by the
                // `fill`) before anything reads it.
                let d = unsafe { &mut *(d as *mut [std::mem::MaybeUninit<f32>] as *mut [f32]) };
                if !covered {
                    d.fill(0.0);
                }
                for (oy, grad) in grad.chunks_exact(ow).enumerate() {
                    let r0 = &plane[2 * oy * w..][..2 * ow];
                    let r1 = &plane[(2 * oy + 1) * w..][..2 * ow];
                    let (d0, d1) = d[2 * oy * w..].split_at_mut(w);
                    let (d0, d1) = (&mut d0[..2 * ow], &mut d1[..2 * ow]);
                    backward_row_2x2(r0, r1, grad, d0, d1, simd);
                }
            });
        // SAFETY: every plane of the first `x.len()` elements was written above.
        unsafe { dx.set_len(x.len()) };
        return dx;
    }
    let mut dx = vec![0.0f32; x.len()];
    dx.par_chunks_mut(hw)
        .zip(x.par_chunks(hw))
        .zip(dy.par_chunks(oh * ow))
        .for_each(|((d, plane), grad)| {
            for oy in 0..oh {
                for ox in 0..ow {
                    d[g.argmax(plane, oy, ox)] += grad[oy * ow + ox];
                }
            }
        });
    dx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 * 0.731).sin() * 10.0).round() / 4.0)
            .collect()
    }

    #[test]
    fn two_by_two_fast_path_equals_the_general_path() {
        let g = PoolGeometry {
            planes: 3,
            height: 6,
            width: 8,
            kernel: [2, 2],
            stride: [2, 2],
            padding: [(0, 0), (0, 0)],
        };
        let x = values(3 * 48);
        let fast = max_forward(&x, &g);
        let general = {
            let [oh, ow] = g.out_hw();
            let mut y = vec![0.0; 3 * oh * ow];
            for p in 0..3 {
                for oy in 0..oh {
                    for ox in 0..ow {
                        y[(p * oh + oy) * ow + ox] =
                            x[p * 48 + g.argmax(&x[p * 48..][..48], oy, ox)];
                    }
                }
            }
            y
        };
        assert_eq!(fast, general);
        // By hand: plane 0, window rows 0-1 x cols 0-1.
        let want = [x[0], x[1], x[8], x[9]]
            .into_iter()
            .fold(f32::MIN, f32::max);
        assert_eq!(fast[0], want);
    }

    #[test]
    fn two_by_two_backward_fast_path_equals_the_general_path() {
        let x = values(2 * 6 * 8);
        let dy: Vec<f32> = (0..2 * 3 * 4).map(|v| v as f32 + 1.0).collect();
        let fast = PoolGeometry {
            planes: 2,
            height: 6,
            width: 8,
            kernel: [2, 2],
            stride: [2, 2],
            padding: [(0, 0), (0, 0)],
        };
        // The same pooling through the general path: a 1-row padding at the end that no window
        // reaches changes nothing but the path taken.
        let general = PoolGeometry {
            padding: [(0, 1), (0, 0)],
            ..fast
        };
        assert_eq!(general.out_hw(), fast.out_hw());
        assert_eq!(
            max_backward(&x, &dy, &fast),
            max_backward(&x, &dy, &general)
        );
    }

    /// Odd sizes leave the last row and column outside every window: their gradient is 0,
    /// although the fast path writes into a fresh, unzeroed buffer (a freed buffer of NaNs of
    /// the same size makes garbage there likely).
    #[test]
    fn rows_and_columns_outside_every_window_get_zero_gradient() {
        for (h, w) in [(7, 9), (6, 9), (7, 8), (6, 8)] {
            let g = PoolGeometry {
                planes: 3,
                height: h,
                width: w,
                kernel: [2, 2],
                stride: [2, 2],
                padding: [(0, 0), (0, 0)],
            };
            let [oh, ow] = g.out_hw();
            let x = values(3 * h * w);
            let dy: Vec<f32> = (0..3 * oh * ow).map(|v| v as f32 + 1.0).collect();
            drop(std::hint::black_box(vec![f32::NAN; x.len()]));
            let got = max_backward(&x, &dy, &g);
            let mut want = vec![0.0f32; x.len()];
            for p in 0..3 {
                let plane = &x[p * h * w..][..h * w];
                for oy in 0..oh {
                    for ox in 0..ow {
                        want[p * h * w + g.argmax(plane, oy, ox)] += dy[(p * oh + oy) * ow + ox];
                    }
                }
            }
            assert_eq!(got, want, "{h}x{w}");
        }
    }

    #[test]
    fn gradient_goes_to_the_first_maximum_and_padding_never_wins() {
        // One 3x3 plane, 2x2 windows, stride 1, "same"-style padding at the end.
        let g = PoolGeometry {
            planes: 1,
            height: 3,
            width: 3,
            kernel: [2, 2],
            stride: [1, 1],
            padding: [(0, 1), (0, 1)],
        };
        let x = [1.0, 5.0, 2.0, 5.0, 0.0, -3.0, -1.0, -2.0, -4.0];
        assert_eq!(
            max_forward(&x, &g),
            vec![5.0, 5.0, 2.0, 5.0, 0.0, -3.0, -1.0, -2.0, -4.0]
        );
        let dx = max_backward(&x, &[1.0; 9], &g);
        // Window (0,0) holds 5 at index 1 and 3: the first (1) takes it; (0,1) -> 1; (1,0) -> 3.
        assert_eq!(dx, vec![0.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
    }

    /// The AVX2 rows against the scalar rows, bit for bit: ties (first maximum wins), NaNs
    /// (propagate; the first NaN takes the gradient), -0.0 against 0.0, and rows of 3 (scalar),
    /// 4, 7 (two overlapping 4-blocks), 8, 14 and 22 (overlapping 8-blocks) windows.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn vector_rows_equal_scalar_rows_bit_for_bit() {
        assert!(
            has_avx2(),
            "this x86_64 CPU lacks AVX2, so the AVX2 pooling rows cannot be checked here (kiln \
             falls back to the scalar rows on it); run the tests on a CPU with AVX2, or leave \
             this one out with --skip vector_rows_equal_scalar_rows_bit_for_bit"
        );
        for ow in [3, 4, 7, 8, 14, 22] {
            vector_rows_match(ow);
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn vector_rows_match(ow: usize) {
        let special = [
            f32::NAN,
            0.0,
            -0.0,
            1.0,
            1.0,
            -1.0,
            f32::NEG_INFINITY,
            f32::INFINITY,
        ];
        let row = |seed: usize| -> Vec<f32> {
            (0..2 * ow)
                .map(|i| {
                    let k = (i * 7 + seed * 13) % 23;
                    if k < special.len() {
                        special[k]
                    } else {
                        (k as f32 - 11.0) / 4.0
                    }
                })
                .collect()
        };
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for seed in 0..40 {
            let (r0, r1) = (row(seed), row(seed + 101));
            let grad: Vec<f32> = (0..ow).map(|i| i as f32 + 0.5).collect();
            let (mut fv, mut fs) = (vec![0.0; ow], vec![0.0; ow]);
            forward_row_2x2(&r0, &r1, &mut fv, true);
            forward_row_2x2(&r0, &r1, &mut fs, false);
            assert_eq!(bits(&fv), bits(&fs), "forward, {ow} windows, seed {seed}");
            let mut dv = (vec![9.0; 2 * ow], vec![9.0; 2 * ow]);
            let mut ds = (vec![9.0; 2 * ow], vec![9.0; 2 * ow]);
            backward_row_2x2(&r0, &r1, &grad, &mut dv.0, &mut dv.1, true);
            backward_row_2x2(&r0, &r1, &grad, &mut ds.0, &mut ds.1, false);
            assert_eq!(
                bits(&dv.0),
                bits(&ds.0),
                "backward row 0, {ow} windows, seed {seed}"
            );
            assert_eq!(
                bits(&dv.1),
                bits(&ds.1),
                "backward row 1, {ow} windows, seed {seed}"
            );
            // Each window's gradient lands exactly once.
            let total: f32 = dv.0.iter().chain(&dv.1).sum();
            assert_eq!(total, grad.iter().sum::<f32>(), "seed {seed}");
        }
    }
}
