//! 2-D convolution, forward and backward, as im2col + GEMM per image; stride-1 convolutions on
//! the AVX2 and AVX-512 paths go to [`super::conv_direct`] instead, which needs no im2col
//! matrix (the im2col route stays the reference the direct one is tested against), except when
//! bfloat16 weights meet AMX tiles ([`bf16::tiles_take`]), which multiply faster than the direct
//! float32 kernels.
//!
//! Shapes (row-major, NCHW): input `x [n, c, h, w]`, kernel `w [o, c, kh, kw]`, bias `[o]`,
//! output `y [n, o, oh, ow]` with `oh = (h + pad_top + pad_bottom - kh) / stride_h + 1`
//! (TensorFlow's and Burn's definition; cross-correlation, as every deep-learning library).
//! The gradients follow from `y_n = W · cols(x_n) + b`: `dW = Σ_n dy_n · cols(x_n)ᵀ`,
//! `db = Σ_n Σ_p dy_n`, `dx_n = col2im(Wᵀ · dy_n)`.
//!
//! A ReLU can be fused into the convolution ([`Epilogue::relu`]): the forward pass applies
//! `max(y, 0)` while adding the bias, and the backward pass takes the output `y` and uses
//! `dy · [y > 0]` (the ReLU's derivative, 0 at 0 as TensorFlow and Burn) as it gathers the output
//! gradient, so neither pass reads the largest tensor of the layer a second time.

use rayon::prelude::*;

use super::Epilogue;
use super::bf16;
use super::conv_direct as direct;
use super::gemm::{View, matmul, matmul_uninit};
use super::scratch::with_scratch;

/// Tasks a backward pass is split into: enough to balance two to eight cores, few enough that
/// summing the partial weight gradients stays cheap.
pub(super) const TASKS: usize = 16;

/// Sizes of one convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dGeometry {
    /// Batch size `n`.
    pub batch: usize,
    /// Input channels `c`.
    pub in_channels: usize,
    /// Input height `h`.
    pub height: usize,
    /// Input width `w`.
    pub width: usize,
    /// Output channels `o` (filters).
    pub out_channels: usize,
    /// `[kh, kw]`.
    pub kernel: [usize; 2],
    /// `[stride_h, stride_w]`.
    pub stride: [usize; 2],
    /// `[(top, bottom), (left, right)]` zero padding.
    pub padding: [(usize, usize); 2],
}

impl Conv2dGeometry {
    /// `[oh, ow]`.
    pub fn out_hw(&self) -> [usize; 2] {
        let [(pt, pb), (pl, pr)] = self.padding;
        [
            (self.height + pt + pb - self.kernel[0]) / self.stride[0] + 1,
            (self.width + pl + pr - self.kernel[1]) / self.stride[1] + 1,
        ]
    }

    /// Rows of the im2col matrix: `c * kh * kw`.
    fn patch(&self) -> usize {
        self.in_channels * self.kernel[0] * self.kernel[1]
    }

    /// Output positions per image: `oh * ow`.
    fn positions(&self) -> usize {
        let [oh, ow] = self.out_hw();
        oh * ow
    }

    fn image(&self) -> usize {
        self.in_channels * self.height * self.width
    }
}

/// For kernel column `kx`, the output columns whose input column `ox * s + kx - pl` is inside
/// `[0, width)`, as `[start, end)`.
fn valid_range(out: usize, input: usize, k: usize, s: usize, pad: usize) -> (usize, usize) {
    // ox * s + k >= pad  and  ox * s + k - pad < input
    let start = pad.saturating_sub(k).div_ceil(s);
    let end = if input + pad > k {
        ((input + pad - k - 1) / s + 1).min(out)
    } else {
        0
    };
    (start.min(end), end)
}

/// Fills `cols [c*kh*kw, oh*ow]` from one image `x [c, h, w]`. Row `r` starts at
/// `r * row_stride`, so several images can fill column blocks of one wider matrix.
fn im2col(x: &[f32], g: &Conv2dGeometry, cols: &mut [f32], row_stride: usize) {
    let positions = g.positions();
    for r in 0..g.patch() {
        im2col_row(x, g, r, &mut cols[r * row_stride..][..positions]);
    }
}

/// Row `r` (patch element `(c, ky, kx)`) of one image's im2col matrix: `out [oh*ow]`.
fn im2col_row(x: &[f32], g: &Conv2dGeometry, r: usize, row: &mut [f32]) {
    let [kh, kw] = g.kernel;
    let [sh, sw] = g.stride;
    let [(pt, _), (pl, _)] = g.padding;
    let [oh, ow] = g.out_hw();
    let (h, w) = (g.height, g.width);
    let (c, ky, kx) = (r / (kh * kw), r / kw % kh, r % kw);
    let plane = &x[c * h * w..(c + 1) * h * w];
    let (oy0, oy1) = valid_range(oh, h, ky, sh, pt);
    let (ox0, ox1) = valid_range(ow, w, kx, sw, pl);
    if ox0 == ox1 {
        // A kernel column in the padding for every output column (a kernel wider than the
        // image): no input to take, and no valid `ix0`.
        row.fill(0.0);
        return;
    }
    row[..oy0 * ow].fill(0.0);
    row[oy1 * ow..].fill(0.0);
    for oy in oy0..oy1 {
        let iy = oy * sh + ky - pt;
        let out = &mut row[oy * ow..(oy + 1) * ow];
        out[..ox0].fill(0.0);
        out[ox1..].fill(0.0);
        let src = &plane[iy * w..(iy + 1) * w];
        if sw == 1 {
            let ix0 = ox0 + kx - pl;
            out[ox0..ox1].copy_from_slice(&src[ix0..ix0 + (ox1 - ox0)]);
        } else {
            for ox in ox0..ox1 {
                out[ox] = src[ox * sw + kx - pl];
            }
        }
    }
}

/// Adds `cols [c*kh*kw, oh*ow]` (rows `row_stride` apart) back into one image gradient
/// `dx [c, h, w]`: the adjoint of [`im2col`]. It adds to `dx`, which the caller zeroes.
fn col2im(cols: &[f32], g: &Conv2dGeometry, dx: &mut [f32], row_stride: usize) {
    let [kh, kw] = g.kernel;
    let [sh, sw] = g.stride;
    let [(pt, _), (pl, _)] = g.padding;
    let [oh, ow] = g.out_hw();
    let (h, w) = (g.height, g.width);
    for c in 0..g.in_channels {
        let plane = &mut dx[c * h * w..(c + 1) * h * w];
        for ky in 0..kh {
            let (oy0, oy1) = valid_range(oh, h, ky, sh, pt);
            for kx in 0..kw {
                let row = &cols[((c * kh + ky) * kw + kx) * row_stride..][..oh * ow];
                let (ox0, ox1) = valid_range(ow, w, kx, sw, pl);
                if ox0 == ox1 {
                    continue; // a kernel column in the padding only: nothing to add back
                }
                for oy in oy0..oy1 {
                    let iy = oy * sh + ky - pt;
                    let dst = &mut plane[iy * w..(iy + 1) * w];
                    let src = &row[oy * ow..(oy + 1) * ow];
                    if sw == 1 {
                        // Contiguous on both sides: a plain (vectorized) slice add.
                        let ix0 = ox0 + kx - pl;
                        let dst = &mut dst[ix0..ix0 + (ox1 - ox0)];
                        dst.iter_mut()
                            .zip(&src[ox0..ox1])
                            .for_each(|(d, s)| *d += s);
                    } else {
                        for ox in ox0..ox1 {
                            dst[ox * sw + kx - pl] += src[ox];
                        }
                    }
                }
            }
        }
    }
}

/// The fused ReLU: `x` if `x > 0` or NaN (NaN propagates, as Burn and PyTorch), else 0.
#[inline]
pub(super) fn relu(v: f32) -> f32 {
    if v.is_nan() || v > 0.0 { v } else { 0.0 }
}

/// One image's output `y_n [o, p]` plus the bias of each filter (when given), then the fused
/// `epilogue` (ReLU, rounding).
pub(super) fn add_bias_relu(y_n: &mut [f32], p: usize, bias: Option<&[f32]>, epilogue: Epilogue) {
    for (ch, row) in y_n.chunks_exact_mut(p).enumerate() {
        let b = bias.map_or(0.0, |b| b[ch]);
        if epilogue.relu {
            row.iter_mut().for_each(|v| *v = relu(*v + b));
        } else if b != 0.0 {
            row.iter_mut().for_each(|v| *v += b);
        }
    }
    epilogue.round_block(y_n);
}

/// `dst = relu_grad(y, dy)` element by element ([`relu_grad`]).
pub(super) fn relu_grad_into(dst: &mut [f32], dy: &[f32], y: &[f32]) {
    for ((d, &g), &yv) in dst.iter_mut().zip(dy).zip(y) {
        *d = relu_grad(yv, g);
    }
}

/// The ReLU's derivative applied to `dy`, from the ReLU's output `y`: `dy` where `y > 0` (or
/// NaN, so that a NaN is not hidden), else 0 — Burn's `relu_backward`.
#[inline]
pub(super) fn relu_grad(y: f32, dy: f32) -> f32 {
    if y.is_nan() || y > 0.0 { dy } else { 0.0 }
}

/// `y [n, o, oh, ow]` for `x [n, c, h, w]`, `w [o, c, kh, kw]` and an optional bias `[o]`,
/// followed by the `epilogue` (ReLU, rounding).
///
/// # Panics
/// When a slice's length differs from what `g` implies.
pub fn forward(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Conv2dGeometry,
    epilogue: Epilogue,
) -> Vec<f32> {
    let (k, o) = (g.patch(), g.out_channels);
    assert_eq!(x.len(), g.batch * g.image());
    assert_eq!(w.len(), o * k);
    if direct::applies(g, o, k) && !bf16::tiles_take(w, k) {
        return direct::forward(x, w, bias, g, epilogue);
    }
    forward_im2col(x, w, bias, g, epilogue)
}

/// [`forward`] through im2col + GEMM.
pub(super) fn forward_im2col(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Conv2dGeometry,
    epilogue: Epilogue,
) -> Vec<f32> {
    let (k, p, o) = (g.patch(), g.positions(), g.out_channels);
    let len = g.batch * o * p;
    let mut y: Vec<f32> = Vec::with_capacity(len);
    let weights = View::new(w, o, k);
    let bf16_weights = bf16::weights_take(w);
    // The GEMM writes every output element: no zeroing pass over the fresh buffer.
    y.spare_capacity_mut()[..len]
        .par_chunks_mut(o * p)
        .zip(x.par_chunks(g.image()))
        .for_each(|(y_n, x_n)| {
            let fill = |r: usize, row: &mut [f32]| im2col_row(x_n, g, r, row);
            // SAFETY: `y_n` holds `o x p` floats; `weights` covers `w`.
            let packed = bf16_weights
                && unsafe {
                    bf16::try_matmul_b_rows(weights, [k, p], fill, y_n.as_mut_ptr().cast())
                };
            let y_n = match packed {
                // SAFETY: the bfloat16 kernel wrote every element.
                true => unsafe { &mut *(y_n as *mut [std::mem::MaybeUninit<f32>] as *mut [f32]) },
                false => with_scratch(k * p, |cols| {
                    im2col(x_n, g, cols, p);
                    matmul_uninit(weights, View::new(cols, k, p), y_n)
                }),
            };
            // Bias and ReLU in one pass over the image's output, still in cache.
            add_bias_relu(y_n, p, bias, epilogue);
        });
    // SAFETY: every chunk of the first `len` elements was written by `matmul_uninit`.
    unsafe { y.set_len(len) };
    y
}

/// The sum of `row` in f64 (bias gradients add many terms of both signs), over eight
/// independent lanes so that it vectorizes.
pub(super) fn sum_f64(row: &[f32]) -> f64 {
    super::lanes::lane_sum(row, row, |v, _| v as f64)
}

/// Gradients of a convolution: `(dx, dw, db)` for the output gradient `dy [n, o, oh, ow]`.
/// `dx` is computed only when `need_dx` (the first layer's input needs none). When the forward
/// pass fused a ReLU, `relu_output` is its output `y [n, o, oh, ow]`, and `dy` is the gradient
/// with respect to `y`.
///
/// # Panics
/// When a slice's length differs from what `g` implies.
pub fn backward(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    relu_output: Option<&[f32]>,
    g: &Conv2dGeometry,
    need_dx: bool,
) -> (Option<Vec<f32>>, Vec<f32>, Vec<f32>) {
    let (k, p, o) = (g.patch(), g.positions(), g.out_channels);
    assert_eq!(x.len(), g.batch * g.image());
    assert_eq!(w.len(), o * k);
    assert_eq!(dy.len(), g.batch * o * p);
    if let Some(y) = relu_output {
        assert_eq!(y.len(), dy.len());
    }
    let tiles = bf16::tiles_take(w, g.patch());
    let direct_dx =
        need_dx && !tiles && direct::applies(g, g.in_channels, o * g.kernel[0] * g.kernel[1]);
    let direct_dw = !tiles && direct::applies(g, o, g.patch());
    if direct_dx || direct_dw {
        let dx = match direct_dx {
            true => direct::input_gradient(w, dy, relu_output, g),
            false => None,
        };
        if need_dx && dx.is_none() {
            return backward_im2col(x, w, dy, relu_output, g, true);
        }
        let (dw, db) = match direct_dw {
            true => direct::weight_gradient(x, dy, relu_output, g),
            false => {
                let (_, dw, db) = backward_im2col(x, w, dy, relu_output, g, false);
                (dw, db)
            }
        };
        return (dx, dw, db);
    }
    backward_im2col(x, w, dy, relu_output, g, need_dx)
}

/// [`backward`] through im2col + GEMM.
pub(super) fn backward_im2col(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    relu_output: Option<&[f32]>,
    g: &Conv2dGeometry,
    need_dx: bool,
) -> (Option<Vec<f32>>, Vec<f32>, Vec<f32>) {
    let (k, p, o) = (g.patch(), g.positions(), g.out_channels);
    let weights_t = View::new(w, o, k).t();
    let bf16_weights = bf16::weights_take(w);
    let mut dx = need_dx.then(|| vec![0.0f32; x.len()]);
    // A fixed split of the batch into tasks, each summing its own dW and db, then a sum of the
    // partials in task order: the result does not depend on thread scheduling.
    let per_task = g.batch.div_ceil(TASKS).max(1);
    // Each task multiplies once for all its images: the im2col matrices of its images side by
    // side, `cols [k, count*p]`, and their output gradients `dys [o, count*p]`, so the GEMMs'
    // inner dimension is `count*p` (dW) rather than one image's `p`.
    let task = |first: usize, dx_part: Option<&mut [f32]>| {
        let count = per_task.min(g.batch - first);
        let width = count * p;
        with_scratch((k + o) * width, |buf| {
            let (cols, dys) = buf.split_at_mut(k * width);
            let image_of = |i: usize| &x[(first + i) * g.image()..(first + i + 1) * g.image()];
            for i in 0..count {
                let n = first + i;
                let image = n * o * p..(n + 1) * o * p;
                for (ch, src) in dy[image.clone()].chunks_exact(p).enumerate() {
                    let dst = &mut dys[ch * width + i * p..][..p];
                    match relu_output {
                        Some(y) => relu_grad_into(dst, src, &y[image.start + ch * p..][..p]),
                        None => dst.copy_from_slice(src),
                    }
                }
            }
            let dw = match bf16_weights {
                true => weight_gradient_packed(g, count, image_of, dys),
                false => None,
            };
            let dw = dw.unwrap_or_else(|| {
                for i in 0..count {
                    im2col(image_of(i), g, &mut cols[i * p..], width);
                }
                let mut dw = vec![0.0f32; o * k];
                let cols = View::new(cols, k, width).t();
                matmul(View::new(dys, o, width), cols, &mut dw, false);
                dw
            });
            let db: Vec<f64> = dys.chunks_exact(width).map(sum_f64).collect();
            if let Some(part) = dx_part {
                // cols is free now: reuse it for dcols = Wᵀ · dys.
                matmul(weights_t, View::new(dys, o, width), cols, false);
                for i in 0..count {
                    col2im(
                        &cols[i * p..],
                        g,
                        &mut part[i * g.image()..(i + 1) * g.image()],
                        width,
                    );
                }
            }
            (dw, db)
        })
    };
    let partials: Vec<(Vec<f32>, Vec<f64>)> = match dx.as_mut() {
        Some(dx) => dx
            .par_chunks_mut(per_task * g.image())
            .enumerate()
            .map(|(t, part)| task(t * per_task, Some(part)))
            .collect(),
        None => (0..g.batch.div_ceil(per_task))
            .into_par_iter()
            .map(|t| task(t * per_task, None))
            .collect(),
    };
    let mut dw = vec![0.0f32; o * k];
    let mut db = vec![0.0f64; o];
    for (pw, pb) in partials {
        dw.iter_mut().zip(&pw).for_each(|(u, v)| *u += v);
        db.iter_mut().zip(&pb).for_each(|(u, v)| *u += v);
    }
    let db = db.into_iter().map(|v| v as f32).collect();
    (dx, dw, db)
}

/// `dW [o, k]` of `count` images (`image_of(i)`) and their gathered output gradients
/// `dys [o, count * p]` on the bfloat16 kernel, as `(dWᵀ = cols · dysᵀ)ᵀ` with the rows of
/// `cols` built straight into the packed operand (no float32 im2col matrix); `None` when the
/// kernel declines.
fn weight_gradient_packed<'x>(
    g: &Conv2dGeometry,
    count: usize,
    image_of: impl Fn(usize) -> &'x [f32],
    dys: &[f32],
) -> Option<Vec<f32>> {
    let (k, p, o) = (g.patch(), g.positions(), g.out_channels);
    let width = count * p;
    let fill = |r: usize, row: &mut [f32]| {
        for (i, part) in row.chunks_exact_mut(p).enumerate() {
            im2col_row(image_of(i), g, r, part);
        }
    };
    let mut dwt = vec![0.0f32; k * o];
    let dys_t = View::new(dys, o, width).t();
    // SAFETY: `dwt` holds `k x o`; `dys_t` covers `dys`.
    if !unsafe { bf16::try_matmul_a_rows([k, width], fill, dys_t, dwt.as_mut_ptr()) } {
        return None;
    }
    let mut dw = vec![0.0f32; o * k];
    for (r, row) in dwt.chunks_exact(o).enumerate() {
        for (oc, &v) in row.iter().enumerate() {
            dw[oc * k + r] = v;
        }
    }
    Some(dw)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Direct definition of the convolution, for checking.
    fn naive(x: &[f32], w: &[f32], b: &[f32], g: &Conv2dGeometry) -> Vec<f32> {
        let [oh, ow] = g.out_hw();
        let [(pt, _), (pl, _)] = g.padding;
        let mut y = vec![0.0; g.batch * g.out_channels * oh * ow];
        for n in 0..g.batch {
            for o in 0..g.out_channels {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut s = b[o];
                        for c in 0..g.in_channels {
                            for ky in 0..g.kernel[0] {
                                for kx in 0..g.kernel[1] {
                                    let iy = (oy * g.stride[0] + ky) as isize - pt as isize;
                                    let ix = (ox * g.stride[1] + kx) as isize - pl as isize;
                                    if iy < 0
                                        || ix < 0
                                        || iy >= g.height as isize
                                        || ix >= g.width as isize
                                    {
                                        continue;
                                    }
                                    let xv = x[((n * g.in_channels + c) * g.height + iy as usize)
                                        * g.width
                                        + ix as usize];
                                    let wv = w[((o * g.in_channels + c) * g.kernel[0] + ky)
                                        * g.kernel[1]
                                        + kx];
                                    s += xv * wv;
                                }
                            }
                        }
                        y[((n * g.out_channels + o) * oh + oy) * ow + ox] = s;
                    }
                }
            }
        }
        y
    }

    fn values(n: usize, seed: f32) -> Vec<f32> {
        (0..n)
            .map(|i| (i as f32 * 0.618 + seed).sin() * 1.3)
            .collect()
    }

    fn geometries() -> Vec<Conv2dGeometry> {
        let mut out = Vec::new();
        for (kernel, stride, padding) in [
            ([3, 3], [1, 1], [(1, 1), (1, 1)]),
            ([3, 3], [2, 2], [(0, 1), (0, 1)]),
            ([2, 3], [1, 2], [(0, 0), (1, 1)]),
            ([1, 1], [1, 1], [(0, 0), (0, 0)]),
            ([5, 5], [3, 2], [(2, 2), (1, 2)]),
        ] {
            for (batch, c, h, w, o) in [(1, 1, 5, 6, 2), (3, 2, 7, 5, 4)] {
                out.push(Conv2dGeometry {
                    batch,
                    in_channels: c,
                    height: h,
                    width: w,
                    out_channels: o,
                    kernel,
                    stride,
                    padding,
                });
            }
        }
        // A 28-wide image (the benchmarks' rows), and a 5x5 "same" kernel on a 1x1 image
        // (kernel columns that see only padding).
        let same = |batch, c, h, w, o, k: usize| Conv2dGeometry {
            batch,
            in_channels: c,
            height: h,
            width: w,
            out_channels: o,
            kernel: [k, k],
            stride: [1, 1],
            padding: [(k / 2, k / 2), (k / 2, k / 2)],
        };
        out.push(same(2, 2, 4, 28, 3, 3));
        out.push(same(2, 2, 1, 1, 3, 5));
        out
    }

    /// `im2col` by its definition, one element at a time.
    fn im2col_naive(x: &[f32], g: &Conv2dGeometry) -> Vec<f32> {
        let ([kh, kw], [sh, sw], [(pt, _), (pl, _)]) = (g.kernel, g.stride, g.padding);
        let ([oh, ow], (h, w)) = (g.out_hw(), (g.height, g.width));
        let mut cols = vec![f32::NAN; g.patch() * oh * ow];
        for (r, row) in cols.chunks_exact_mut(oh * ow).enumerate() {
            let (c, ky, kx) = (r / (kh * kw), r / kw % kh, r % kw);
            for (i, v) in row.iter_mut().enumerate() {
                let (iy, ix) = (
                    (i / ow * sh + ky) as isize - pt as isize,
                    (i % ow * sw + kx) as isize - pl as isize,
                );
                let inside = (0..h as isize).contains(&iy) && (0..w as isize).contains(&ix);
                *v = if inside {
                    x[c * h * w + iy as usize * w + ix as usize]
                } else {
                    0.0
                };
            }
        }
        cols
    }

    #[test]
    fn im2col_rows_of_every_width_and_padding_match_the_definition() {
        // Rows of many widths, paddings of 0 to 10, kernels wider than the image (kernel
        // columns that fall in the padding for every output column).
        for w in [1, 5, 7, 8, 9, 15, 16, 17, 28, 30] {
            for (kw, pl, pr) in [
                (1, 0, 0),
                (3, 1, 1),
                (3, 0, 2),
                (5, 2, 2),
                (9, 8, 0),
                (11, 9, 10),
                (3, 0, 0),
            ] {
                if w + pl + pr < kw {
                    continue;
                }
                let g = Conv2dGeometry {
                    batch: 1,
                    in_channels: 2,
                    height: 3,
                    width: w,
                    out_channels: 1,
                    kernel: [3, kw],
                    stride: [1, 1],
                    padding: [(1, 1), (pl, pr)],
                };
                let x = values(g.image(), 0.3);
                // Stale values in the buffer: every element must be written.
                let mut cols = vec![f32::NAN; g.patch() * g.positions()];
                im2col(&x, &g, &mut cols, g.positions());
                let want = im2col_naive(&x, &g);
                assert_eq!(cols.len(), want.len());
                for (i, (a, b)) in cols.iter().zip(&want).enumerate() {
                    assert!(
                        a.to_bits() == b.to_bits(),
                        "w {w} kw {kw} pad ({pl}, {pr}) at {i}: {a} vs {b}"
                    );
                }
            }
        }
    }

    #[test]
    fn forward_matches_the_definition() {
        for g in geometries() {
            let x = values(g.batch * g.image(), 0.1);
            let w = values(g.out_channels * g.patch(), 0.7);
            let b = values(g.out_channels, 1.9);
            let ours = forward(&x, &w, Some(&b), &g, Epilogue::default());
            let want = naive(&x, &w, &b, &g);
            for (a, e) in ours.iter().zip(&want) {
                assert!((a - e).abs() <= 1e-5 * (1.0 + e.abs()), "{g:?}: {a} vs {e}");
            }
        }
    }

    /// `values` rounded to bfloat16 values (as `mixed_bfloat16` hands them to the kernels).
    fn bf16_values(n: usize, seed: f32) -> Vec<f32> {
        let round = |v: f32| half::bf16::from_f32(v).to_f32();
        values(n, seed).into_iter().map(round).collect()
    }

    #[test]
    fn bfloat16_operands_match_the_definition_on_every_route() {
        // With AMX these take im2col + AMX tiles, else the direct or im2col float32/bf16 dot
        // kernels: every route must give the definition's values and gradients.
        for g in geometries() {
            let x = bf16_values(g.batch * g.image(), 0.1);
            let w = bf16_values(g.out_channels * g.patch(), 0.7);
            let b = values(g.out_channels, 1.9);
            assert_eq!(
                bf16::tiles_take(&w, g.patch()),
                crate::kernels::cpu::amx() && g.patch() >= 32
            );
            let ours = forward(&x, &w, Some(&b), &g, Epilogue::default());
            let want = naive(&x, &w, &b, &g);
            for (a, e) in ours.iter().zip(&want) {
                assert!((a - e).abs() <= 1e-5 * (1.0 + e.abs()), "{g:?}: {a} vs {e}");
            }
            let dy = bf16_values(ours.len(), 2.2);
            let (dx, dw, _) = backward(&x, &w, &dy, None, &g, true);
            let dot =
                |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(u, v)| (u * v) as f64).sum::<f64>();
            let zero_b = vec![0.0; g.out_channels];
            let (px, pw) = (values(x.len(), 5.0), values(w.len(), 6.0));
            for (lhs, rhs) in [
                (
                    dot(&dy, &naive(&px, &w, &zero_b, &g)),
                    dot(dx.as_ref().unwrap(), &px),
                ),
                (dot(&dy, &naive(&x, &pw, &zero_b, &g)), dot(&dw, &pw)),
            ] {
                assert!(
                    (lhs - rhs).abs() <= 1e-4 * (1.0 + lhs.abs()),
                    "{g:?}: {lhs} vs {rhs}"
                );
            }
        }
    }

    #[test]
    fn backward_is_the_adjoint_of_forward() {
        // <dy, conv(x, w)> is bilinear: its derivatives in x and w are what backward returns, so
        // <dy, conv(dx_probe, w)> = <backward_x(dy), dx_probe> and likewise for w.
        for g in geometries() {
            let x = values(g.batch * g.image(), 0.3);
            let w = values(g.out_channels * g.patch(), 0.9);
            let dy = values(g.batch * g.out_channels * g.positions(), 2.2);
            let zero_b = vec![0.0; g.out_channels];
            let (dx, dw, db) = backward(&x, &w, &dy, None, &g, true);
            let dot =
                |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(u, v)| (u * v) as f64).sum::<f64>();
            let px = values(x.len(), 5.0);
            let pw = values(w.len(), 6.0);
            let lhs_x = dot(&dy, &naive(&px, &w, &zero_b, &g));
            let lhs_w = dot(&dy, &naive(&x, &pw, &zero_b, &g));
            let rhs_x = dot(dx.as_ref().unwrap(), &px);
            let rhs_w = dot(&dw, &pw);
            assert!(
                (lhs_x - rhs_x).abs() <= 1e-4 * (1.0 + lhs_x.abs()),
                "{g:?}: {lhs_x} vs {rhs_x}"
            );
            assert!(
                (lhs_w - rhs_w).abs() <= 1e-4 * (1.0 + lhs_w.abs()),
                "{g:?}: {lhs_w} vs {rhs_w}"
            );
            let p = g.positions();
            for o in 0..g.out_channels {
                let want: f32 = (0..g.batch)
                    .map(|n| dy[(n * g.out_channels + o) * p..][..p].iter().sum::<f32>())
                    .sum();
                assert!((db[o] - want).abs() <= 1e-4 * (1.0 + want.abs()));
            }
            let (none, dw2, _) = backward(&x, &w, &dy, None, &g, false);
            assert!(none.is_none());
            assert_eq!(
                dw2, dw,
                "the batch split is fixed, so the sums repeat exactly"
            );
        }
    }

    #[test]
    fn fused_relu_equals_relu_after_the_convolution() {
        for g in geometries() {
            let x = values(g.batch * g.image(), 0.4);
            let w = values(g.out_channels * g.patch(), 0.8);
            let b = values(g.out_channels, 1.1);
            let plain = forward(&x, &w, Some(&b), &g, Epilogue::default());
            let fused = forward(&x, &w, Some(&b), &g, Epilogue::with_relu(true));
            let want: Vec<f32> = plain.iter().map(|&v| v.max(0.0)).collect();
            assert_eq!(fused, want, "{g:?}");
            // Both sides of the ReLU occur (the 1x1 image's 6 outputs may all fall on one).
            assert!(
                fused.len() < 8 || fused.contains(&0.0) && fused.iter().any(|&v| v > 0.0),
                "{g:?}"
            );
            // Backward through the ReLU: the same as the plain backward of the masked gradient.
            let dy = values(fused.len(), 3.3);
            let masked: Vec<f32> = dy
                .iter()
                .zip(&fused)
                .map(|(&d, &y)| if y > 0.0 { d } else { 0.0 })
                .collect();
            let (dx1, dw1, db1) = backward(&x, &w, &dy, Some(&fused), &g, true);
            let (dx2, dw2, db2) = backward(&x, &w, &masked, None, &g, true);
            assert_eq!((dx1, dw1, db1), (dx2, dw2, db2), "{g:?}");
        }
        // NaN propagates forward and its gradient is kept, as Burn's relu.
        assert!(relu(f32::NAN).is_nan());
        assert_eq!(relu_grad(f32::NAN, 2.0), 2.0);
        assert_eq!(relu_grad(0.0, 2.0), 0.0);
    }
}
