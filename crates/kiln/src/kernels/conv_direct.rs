//! Stride-1 2-D convolution as an implicit GEMM: no im2col matrix, on the AVX2 (+FMA) and
//! AVX-512 paths.
//!
//! The im2col route ([`super::conv2d`]) writes every image's `[c*kh*kw, oh*ow]` patch matrix
//! (0.9 MB for 32 channels at 28x28, nine times the image), and the GEMM then copies it once
//! more into its packed panels: two passes over a matrix larger than the core's L2 cache per
//! image and layer, about a fifth of a ResNet step (bench/README.md). With stride 1 that
//! matrix is never needed: the image is copied once into a zero-padded plane per channel,
//! `xp [c, hp, wp]` (`hp = h + pad_top + pad_bottom`, `wp` likewise), and the output is
//! computed on the padded grid, position `q = oy * wp + ox`. Patch row `r = (ch, ky, kx)` of
//! column `q` is then `xp[q + off(r)]` with `off(r) = ch*hp*wp + ky*wp + kx`: sixteen
//! consecutive positions are consecutive floats of the image, read in place. The micro-kernel
//! keeps a tile of [`MR`] positions x [`NR`] filters in twelve vector registers for the whole
//! `c*kh*kw` loop (the `gemm` crate's 6x16 kernel shape, twelve independent sums: fewer leave
//! the FMA units waiting on their latency): per patch row it loads two vectors of the packed
//! filters and broadcasts six image values. Its result is position-major, `[position,
//! filter]`; the pass that adds the bias and drops the extra columns transposes it to NCHW. The grid's `wp - ow` extra columns per row are computed and
//! dropped (2 of 30 for a 3x3 "same" kernel on 28 columns).
//!
//! The input gradient of a stride-1 convolution is itself one: `dx` is the "full"
//! correlation of `dy` with the kernel flipped in both spatial axes and its filter and channel
//! axes swapped, with padding `k - 1 - p` on each side ([`input_gradient`]).
//!
//! Sums run in another order than the im2col GEMM's (the `c*kh*kw` terms of each output in
//! sequence, in one accumulator): results agree to float32 rounding (tests below).

use rayon::prelude::*;

use super::Epilogue;
use super::conv2d::{Conv2dGeometry, TASKS, add_bias_relu, relu_grad_into, sum_f64};
use super::cpu::{self, CpuPath};
use super::scratch::with_scratch;

/// Output positions per micro-tile.
const MR: usize = 6;
/// Filters per micro-tile: two vectors of 8 float32.
const NR: usize = 16;
/// Most patch rows per block: a block's filter panel is at most `KC * NR` floats (24 KiB, most
/// of a 32 KiB L1). Blocks cost a reload of the partial sums, so a product with fewer rows
/// stays one block: measured on Zen 4 (one thread, 32 images), 3x3 kernels over 32 channels
/// (288 rows) ran at 114 GFLOP/s in one block and 89 in blocks of 128; over 64 channels (576
/// rows) at 85 in one block and 114 in blocks of 128.
const KC: usize = 384;

/// Where the direct route applies to a product with `filters` outputs per position (the
/// forward's filters, or the input gradient's input channels) over `rows` patch rows (its
/// `channels * kh * kw`): stride 1, an AVX2 or wider kernel path (the portable path keeps
/// im2col + GEMM), filters that fill at least 80% of the [`NR`]-wide tiles (a handful of
/// filters, as for RGB input gradients, would mostly multiply padding), and at least
/// [`MIN_ROWS`] patch rows.
pub(super) fn applies(g: &Conv2dGeometry, filters: usize, rows: usize) -> bool {
    cfg!(target_arch = "x86_64")
        && g.stride == [1, 1]
        && cpu::path() >= CpuPath::Avx2
        && rows >= MIN_ROWS
        && filters > 0
        && filters.div_ceil(NR) * NR * 4 <= filters * 5
}

/// Fewer patch rows than this (a 3x3 kernel over one channel: 9) leave each tile too short a
/// loop to pay for starting and storing its sums; im2col + GEMM does better there.
const MIN_ROWS: usize = 32;

/// The padded grid of one convolution.
struct Grid {
    /// Padded height and width.
    hp: usize,
    wp: usize,
    /// Grid positions computed per image, `oh * wp` rounded up to [`MR`].
    positions: usize,
    /// Floats of one padded image: `c * hp * wp` plus a zero tail that the last tile's
    /// loads (past the last row, and its dropped columns) may reach.
    len: usize,
    /// `off(r)` for every patch row `r = (ch, ky, kx)`.
    offsets: Vec<usize>,
}

impl Grid {
    fn new(g: &Conv2dGeometry) -> Grid {
        let [(pt, pb), (pl, pr)] = g.padding;
        let (hp, wp) = (g.height + pt + pb, g.width + pl + pr);
        let [oh, _] = g.out_hw();
        let positions = (oh * wp).div_ceil(MR) * MR;
        let [kh, kw] = g.kernel;
        let mut offsets = Vec::with_capacity(g.in_channels * kh * kw);
        for ch in 0..g.in_channels {
            for ky in 0..kh {
                offsets.extend((0..kw).map(|kx| (ch * hp + ky) * wp + kx));
            }
        }
        // The largest load starts at positions - MR + max offset and reads MR floats.
        let reach = positions + offsets.last().copied().unwrap_or(0);
        Grid {
            hp,
            wp,
            positions,
            len: reach.max(g.in_channels * hp * wp),
            offsets,
        }
    }

    /// Copies one image `x [c, h, w]` into `xp` (length [`Grid::len`]) with zeros around; with
    /// a `mask` (the fused ReLU's output, same shape), the ReLU's derivative applied to `x`.
    fn pad(&self, x: &[f32], mask: Option<&[f32]>, g: &Conv2dGeometry, xp: &mut [f32]) {
        let [(pt, _), (pl, _)] = g.padding;
        let (h, w) = (g.height, g.width);
        xp.fill(0.0);
        for (row_index, row) in x.chunks_exact(w).enumerate() {
            let (ch, iy) = (row_index / h, row_index % h);
            let dst = &mut xp[(ch * self.hp + iy + pt) * self.wp + pl..][..w];
            match mask {
                None => dst.copy_from_slice(row),
                Some(y) => relu_grad_into(dst, row, &y[row_index * w..][..w]),
            }
        }
    }
}

/// `w [o, c, kh, kw]` as panels of [`NR`] filters, `[o/NR][c*kh*kw][NR]`, the last panel
/// padded with zero filters.
fn pack_weights(w: &[f32], o: usize, k: usize) -> Vec<f32> {
    let panels = o.div_ceil(NR);
    let mut packed = vec![0.0f32; panels * k * NR];
    for (f, filter) in w.chunks_exact(k).enumerate() {
        let panel = &mut packed[(f / NR) * k * NR..][..k * NR];
        for (r, &v) in filter.iter().enumerate() {
            panel[r * NR + f % NR] = v;
        }
    }
    packed
}

/// `y [n, o, oh, ow]` for a stride-1 convolution (see [`super::conv2d::forward`]); only where
/// [`applies`] holds.
pub(super) fn forward(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Conv2dGeometry,
    epilogue: Epilogue,
) -> Vec<f32> {
    forward_masked(x, None, w, bias, g, epilogue)
}

/// [`forward`] of `relu_grad(mask, x)` when a `mask` is given (see [`Grid::pad`]).
fn forward_masked(
    x: &[f32],
    mask: Option<&[f32]>,
    w: &[f32],
    bias: Option<&[f32]>,
    g: &Conv2dGeometry,
    epilogue: Epilogue,
) -> Vec<f32> {
    let grid = Grid::new(g);
    let (o, k) = (g.out_channels, grid.offsets.len());
    let packed = pack_weights(w, o, k);
    let [oh, ow] = g.out_hw();
    let p = oh * ow;
    let mut y = vec![0.0f32; g.batch * o * p];
    let panels = o.div_ceil(NR);
    let image = g.in_channels * g.height * g.width;
    let path = cpu::path();
    y.par_chunks_mut(o * p).enumerate().for_each(|(n, y_n)| {
        with_scratch(grid.len + panels * NR * grid.positions, |buf| {
            let (xp, yg) = buf.split_at_mut(grid.len);
            let mask_n = mask.map(|m| &m[n * image..][..image]);
            grid.pad(&x[n * image..][..image], mask_n, g, xp);
            product(xp, &packed, &grid, yg, path);
            let filters = panels * NR;
            for oy in 0..oh {
                transpose(
                    &yg[oy * grid.wp * filters..],
                    filters,
                    &mut y_n[oy * ow..],
                    p,
                    [ow, o],
                );
            }
            add_bias_relu(y_n, p, bias, epilogue);
        })
    });
    y
}

/// `dx [n, c, h, w]` of a stride-1 convolution for the output gradient `dy [n, o, oh, ow]`
/// (through the fused ReLU when its output `relu_output` is given), or `None` when a padding
/// exceeds `k - 1` (the flipped convolution would need a negative padding).
pub(super) fn input_gradient(
    w: &[f32],
    dy: &[f32],
    relu_output: Option<&[f32]>,
    g: &Conv2dGeometry,
) -> Option<Vec<f32>> {
    let [kh, kw] = g.kernel;
    let [(pt, pb), (pl, pr)] = g.padding;
    let flip = |k: usize, p: usize| (k - 1).checked_sub(p);
    let padding = [
        (flip(kh, pt)?, flip(kh, pb)?),
        (flip(kw, pl)?, flip(kw, pr)?),
    ];
    let [oh, ow] = g.out_hw();
    let (c, o) = (g.in_channels, g.out_channels);
    let flipped_g = Conv2dGeometry {
        batch: g.batch,
        in_channels: o,
        height: oh,
        width: ow,
        out_channels: c,
        kernel: g.kernel,
        stride: [1, 1],
        padding,
    };
    // w'[ch, f, ky, kx] = w[f, ch, kh-1-ky, kw-1-kx]
    let mut flipped = vec![0.0f32; w.len()];
    for f in 0..o {
        for ch in 0..c {
            let src = &w[(f * c + ch) * kh * kw..][..kh * kw];
            let dst = &mut flipped[(ch * o + f) * kh * kw..][..kh * kw];
            for (d, s) in dst.iter_mut().zip(src.iter().rev()) {
                *d = *s;
            }
        }
    }
    Some(forward_masked(
        dy,
        relu_output,
        &flipped,
        None,
        &flipped_g,
        Epilogue::default(),
    ))
}

/// Positions per block of [`weight_gradient`]'s sweep: a block of the output gradient
/// (`QB x NR` floats, 16 KiB) stays in L1 while the tiles of patch rows pass over it.
const QB: usize = 256;

/// `(dw [o, c, kh, kw], db [o])` of a stride-1 convolution for the output gradient
/// `dy [n, o, oh, ow]` (through the fused ReLU when its output `relu_output` is given):
/// `dw[f][r] = Σ_n Σ_q dy_n[f][q] · xp_n[q + off(r)]` on the padded grid, whose extra columns
/// carry a zero gradient. Only where [`applies`] holds for the `o` filters.
pub(super) fn weight_gradient(
    x: &[f32],
    dy: &[f32],
    relu_output: Option<&[f32]>,
    g: &Conv2dGeometry,
) -> (Vec<f32>, Vec<f32>) {
    let grid = Grid::new(g);
    let (o, k) = (g.out_channels, grid.offsets.len());
    let filters = o.div_ceil(NR) * NR;
    let rows = k.div_ceil(MR) * MR;
    // Patch rows padded to whole tiles with copies of row 0 (a valid address); their sums
    // are dropped.
    let mut offsets = grid.offsets.clone();
    offsets.resize(rows, offsets[0]);
    let [oh, ow] = g.out_hw();
    let (image, out_image) = (g.in_channels * g.height * g.width, o * oh * ow);
    // As the im2col route: a fixed split of the batch into tasks, each summing its own dW and
    // db, then a sum of the partials in task order (independent of thread scheduling).
    let per_task = g.batch.div_ceil(TASKS).max(1);
    let path = cpu::path();
    let partials: Vec<(Vec<f32>, Vec<f64>)> = (0..g.batch.div_ceil(per_task))
        .into_par_iter()
        .map(|t| {
            let mut dwt = vec![0.0f32; rows * filters];
            let mut db = vec![0.0f64; o];
            let images = t * per_task..((t + 1) * per_task).min(g.batch);
            with_scratch(grid.len + grid.positions * filters + out_image, |buf| {
                let (xp, rest) = buf.split_at_mut(grid.len);
                let (dyg, masked) = rest.split_at_mut(grid.positions * filters);
                for n in images {
                    grid.pad(&x[n * image..][..image], None, g, xp);
                    let dy_n = &dy[n * out_image..][..out_image];
                    let dy_n = match relu_output {
                        None => dy_n,
                        Some(y) => {
                            relu_grad_into(masked, dy_n, &y[n * out_image..][..out_image]);
                            &*masked
                        }
                    };
                    for (sum, row) in db.iter_mut().zip(dy_n.chunks_exact(oh * ow)) {
                        *sum += sum_f64(row);
                    }
                    gather_positions(dy_n, g, &grid, filters, dyg);
                    let shape = [oh, ow, grid.wp];
                    weight_product(xp, dyg, &offsets, shape, filters, &mut dwt, path);
                }
            });
            (dwt, db)
        })
        .collect();
    let mut dw = vec![0.0f32; o * k];
    let mut db = vec![0.0f64; o];
    for (dwt, part) in &partials {
        for (f, filter) in dw.chunks_exact_mut(k).enumerate() {
            for (r, d) in filter.iter_mut().enumerate() {
                *d += dwt[r * filters + f];
            }
        }
        db.iter_mut().zip(part).for_each(|(u, v)| *u += v);
    }
    (dw, db.into_iter().map(|v| v as f32).collect())
}

/// `dy_n [o, oh, ow]` as `dyg [positions, filters]` on the padded grid, zero in the grid's
/// extra columns and rows and in the padding filters.
fn gather_positions(
    dy_n: &[f32],
    g: &Conv2dGeometry,
    grid: &Grid,
    filters: usize,
    dyg: &mut [f32],
) {
    let [oh, ow] = g.out_hw();
    let p = oh * ow;
    dyg.fill(0.0);
    for oy in 0..oh {
        transpose(
            &dy_n[oy * ow..],
            p,
            &mut dyg[oy * grid.wp * filters..],
            filters,
            [g.out_channels, ow],
        );
    }
}

/// `dst[j * dst_stride + i] = src[i * src_stride + j]` for `i < rows`, `j < cols`: blocks of
/// 8x8 through vector registers on the AVX2 path, the edges one element at a time.
fn transpose(
    src: &[f32],
    src_stride: usize,
    dst: &mut [f32],
    dst_stride: usize,
    shape: [usize; 2],
) {
    let [rows, cols] = shape;
    if rows == 0 || cols == 0 {
        return;
    }
    assert!(src.len() > (rows - 1) * src_stride + cols - 1);
    assert!(dst.len() > (cols - 1) * dst_stride + rows - 1);
    let (full_rows, full_cols) = (rows / 8 * 8, cols / 8 * 8);
    for i in (0..full_rows).step_by(8) {
        for j in (0..full_cols).step_by(8) {
            // SAFETY: `applies` checked the AVX2 path; the block's corners are inside the
            // asserted extents.
            unsafe {
                transpose8(
                    src.as_ptr().add(i * src_stride + j),
                    src_stride,
                    dst.as_mut_ptr().add(j * dst_stride + i),
                    dst_stride,
                )
            }
        }
    }
    for i in 0..rows {
        let cols_done = if i < full_rows { full_cols } else { 0 };
        for j in cols_done..cols {
            dst[j * dst_stride + i] = src[i * src_stride + j];
        }
    }
}

/// One 8x8 block of [`transpose`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose8(src: *const f32, src_stride: usize, dst: *mut f32, dst_stride: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract, for every load and store below.
    unsafe {
        let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(src.add(i * src_stride)));
        // Interleave pairs of rows, then pairs of pairs, then swap 128-bit halves.
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        let out = [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ];
        for (j, v) in out.iter().enumerate() {
            _mm256_storeu_ps(dst.add(j * dst_stride), *v);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn transpose8(_: *const f32, _: usize, _: *mut f32, _: usize) {
    unreachable!("the direct route applies on x86-64 only")
}

/// `dwt [rows, filters] += Σ_q xp[q + offsets[r]] · dyg[q, f]` over the grid positions of
/// the `oh` output rows, `q = oy * wp + ox` for `ox < ow` only: the grid's extra columns read
/// real pixels of the next row (or channel), and an infinite one times their zero gradient
/// would be NaN, where the convolution itself never uses that pixel there.
fn weight_product(
    xp: &[f32],
    dyg: &[f32],
    offsets: &[usize],
    [oh, ow, wp]: [usize; 3],
    filters: usize,
    dwt: &mut [f32],
    path: CpuPath,
) {
    let positions = oh * wp;
    let reach = positions + offsets.iter().max().copied().unwrap_or(0);
    assert!(ow <= wp && xp.len() >= reach && dyg.len() >= positions * filters);
    assert!(offsets.len().is_multiple_of(MR) && dwt.len() >= offsets.len() * filters);
    let rows_per_block = (QB / wp).max(1);
    let groups = Width::groups(filters / NR, path);
    for y0 in (0..oh).step_by(rows_per_block) {
        let rows = y0..(y0 + rows_per_block).min(oh);
        for (tile_rows, r0) in offsets.chunks_exact(MR).zip((0..).step_by(MR)) {
            let bases: [*const f32; MR] = std::array::from_fn(|i| {
                // SAFETY: `tile_rows[i] < reach <= xp.len()`.
                unsafe { xp.as_ptr().add(tile_rows[i]) }
            });
            for &(t, width) in &groups {
                let (dy, out) = (
                    dyg[t * NR..].as_ptr(),
                    dwt[r0 * filters + t * NR..].as_mut_ptr(),
                );
                let sweep = (rows.clone(), [ow, wp]);
                // SAFETY: `applies` checked the AVX2 path, `Width::groups` the wider ones;
                // reads reach `bases[i] + q` and `dyg[q * filters + (t + panels) * NR - 1]`
                // for `q < oh * wp`, within the asserted lengths; the tile reads and writes
                // `MR` rows of `panels * NR` floats at row `r0`, column `t * NR` of `dwt`.
                unsafe {
                    match width {
                        Width::Avx2 => weight_tile(&bases, dy, filters, sweep, out),
                        Width::Zmm1 => weight_tile_v4::<1>(&bases, dy, filters, sweep, out),
                        Width::Zmm2 => weight_tile_v4::<2>(&bases, dy, filters, sweep, out),
                    }
                }
            }
        }
    }
}

/// One tile of the weight gradient: `out[i * stride + j] += Σ_q bases[i][q] · dy[q * stride +
/// j]` for `i < MR`, `j < NR`, over `q = oy * wp + ox`, `oy` in the range, `ox < ow`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn weight_tile(
    bases: &[*const f32; MR],
    dy: *const f32,
    stride: usize,
    (rows, [ow, wp]): (std::ops::Range<usize>, [usize; 2]),
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract, for every load and store below.
    unsafe {
        let mut acc: [[__m256; 2]; MR] = std::array::from_fn(|i| {
            [
                _mm256_loadu_ps(out.add(i * stride)),
                _mm256_loadu_ps(out.add(i * stride + 8)),
            ]
        });
        for oy in rows {
            for q in oy * wp..oy * wp + ow {
                let d0 = _mm256_loadu_ps(dy.add(q * stride));
                let d1 = _mm256_loadu_ps(dy.add(q * stride + 8));
                for (pair, base) in acc.iter_mut().zip(bases) {
                    let b = _mm256_broadcast_ss(&*base.add(q));
                    pair[0] = _mm256_fmadd_ps(d0, b, pair[0]);
                    pair[1] = _mm256_fmadd_ps(d1, b, pair[1]);
                }
            }
        }
        for (i, pair) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.add(i * stride), pair[0]);
            _mm256_storeu_ps(out.add(i * stride + 8), pair[1]);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn weight_tile(
    _: &[*const f32; MR],
    _: *const f32,
    _: usize,
    _: (std::ops::Range<usize>, [usize; 2]),
    _: *mut f32,
) {
    unreachable!("the direct route applies on x86-64 only")
}

/// [`weight_tile`] on AVX-512 for `P` panels: `j < P * NR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn weight_tile_v4<const P: usize>(
    bases: &[*const f32; MR],
    dy: *const f32,
    stride: usize,
    (rows, [ow, wp]): (std::ops::Range<usize>, [usize; 2]),
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract, for every load and store below.
    unsafe {
        let mut acc: [[__m512; P]; MR] = std::array::from_fn(|i| {
            std::array::from_fn(|j| _mm512_loadu_ps(out.add(i * stride + j * NR)))
        });
        for oy in rows {
            for q in oy * wp..oy * wp + ow {
                let d: [__m512; P] =
                    std::array::from_fn(|j| _mm512_loadu_ps(dy.add(q * stride + j * NR)));
                for (sums, base) in acc.iter_mut().zip(bases) {
                    let b = _mm512_set1_ps(*base.add(q));
                    for (sum, dj) in sums.iter_mut().zip(&d) {
                        *sum = _mm512_fmadd_ps(*dj, b, *sum);
                    }
                }
            }
        }
        for (i, sums) in acc.iter().enumerate() {
            for (j, sum) in sums.iter().enumerate() {
                _mm512_storeu_ps(out.add(i * stride + j * NR), *sum);
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn weight_tile_v4<const P: usize>(
    _: &[*const f32; MR],
    _: *const f32,
    _: usize,
    _: (std::ops::Range<usize>, [usize; 2]),
    _: *mut f32,
) {
    unreachable!("the direct route applies on x86-64 only")
}

/// `yg [positions, panels*NR] = (W · patches(xp))ᵀ` on the padded grid, in equal blocks of at
/// most [`KC`] patch rows, each block's filter panel kept in L1 while the tiles sweep the
/// positions.
fn product(xp: &[f32], packed: &[f32], grid: &Grid, yg: &mut [f32], path: CpuPath) {
    let k = grid.offsets.len();
    let filters = packed.len() / k;
    assert!(xp.len() >= grid.len && yg.len() >= filters * grid.positions);
    let block = k.div_ceil(k.div_ceil(KC));
    let groups = Width::groups(filters / NR, path);
    for r0 in (0..k).step_by(block) {
        let rows = block.min(k - r0);
        for &(t, width) in &groups {
            let panel =
                &packed[t * k * NR + r0 * NR..][..(width.panels() - 1) * k * NR + rows * NR];
            for q in (0..grid.positions).step_by(MR) {
                let (x, offsets) = (xp.as_ptr().wrapping_add(q), &grid.offsets[r0..r0 + rows]);
                let out = yg[q * filters + t * NR..].as_mut_ptr();
                // SAFETY: `applies` checked the AVX2 path, `Width::groups` the wider ones;
                // loads reach at most `q + MR - 1 + max offset < grid.len` in `xp` and the
                // `rows * NR` floats of each of the tile's panels (`k * NR` apart); the tile
                // reads and writes `MR` rows of `width.panels() * NR` floats at row `q`,
                // column `t * NR` of `yg`.
                unsafe {
                    match width {
                        Width::Avx2 => tile(x, offsets, panel.as_ptr(), out, filters, r0 > 0),
                        Width::Zmm1 => {
                            tile_v4::<1>(x, offsets, panel.as_ptr(), k * NR, out, filters, r0 > 0)
                        }
                        Width::Zmm2 => {
                            tile_v4::<2>(x, offsets, panel.as_ptr(), k * NR, out, filters, r0 > 0)
                        }
                    }
                }
            }
        }
    }
}

/// How many filter panels one micro-tile covers, and on which instructions: on the AVX2 path
/// one panel in two 8-float vectors per position ([`tile`], [`weight_tile`]); on the AVX-512
/// path two panels in two 16-float vectors ([`tile_v4`], [`weight_tile_v4`]: twelve
/// independent sums, as AVX2's), and one for a last odd panel. Each output is the same
/// sequence of fused multiply-adds on every width, so the results are bit for bit the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Width {
    Avx2,
    Zmm1,
    Zmm2,
}

impl Width {
    fn panels(self) -> usize {
        match self {
            Width::Zmm2 => 2,
            _ => 1,
        }
    }

    /// `(first panel, width)` of the tiles that cover `panels` panels on `path`.
    fn groups(panels: usize, path: CpuPath) -> Vec<(usize, Width)> {
        let mut groups = Vec::with_capacity(panels);
        let mut t = 0;
        while t < panels {
            let width = match (path >= CpuPath::Avx512, panels - t) {
                (false, _) => Width::Avx2,
                (true, 1) => Width::Zmm1,
                (true, _) => Width::Zmm2,
            };
            groups.push((t, width));
            t += width.panels();
        }
        groups
    }
}

/// One micro-tile: `out[i * stride + j] (+)= Σ_r panel[r][j] * x[offsets[r] + i]` for
/// `i < MR`, `j < NR`, adding to `out` when `accumulate`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile(
    x: *const f32,
    offsets: &[usize],
    panel: *const f32,
    out: *mut f32,
    stride: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    if accumulate {
        for (i, pair) in acc.iter_mut().enumerate() {
            // SAFETY: the caller's contract.
            unsafe {
                pair[0] = _mm256_loadu_ps(out.add(i * stride));
                pair[1] = _mm256_loadu_ps(out.add(i * stride + 8));
            }
        }
    }
    for (r, &off) in offsets.iter().enumerate() {
        // SAFETY: the caller's contract.
        unsafe {
            let w0 = _mm256_loadu_ps(panel.add(r * NR));
            let w1 = _mm256_loadu_ps(panel.add(r * NR + 8));
            for (i, pair) in acc.iter_mut().enumerate() {
                let b = _mm256_broadcast_ss(&*x.add(off + i));
                pair[0] = _mm256_fmadd_ps(w0, b, pair[0]);
                pair[1] = _mm256_fmadd_ps(w1, b, pair[1]);
            }
        }
    }
    for (i, pair) in acc.iter().enumerate() {
        // SAFETY: the caller's contract.
        unsafe {
            _mm256_storeu_ps(out.add(i * stride), pair[0]);
            _mm256_storeu_ps(out.add(i * stride + 8), pair[1]);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile(_: *const f32, _: &[usize], _: *const f32, _: *mut f32, _: usize, _: bool) {
    unreachable!("the direct route applies on x86-64 only")
}

/// [`tile`] on AVX-512 for `P` panels of [`NR`] filters (`panel_stride` floats apart): `out[i *
/// stride + j] (+)= Σ_r panel_{j / NR}[r][j % NR] * x[offsets[r] + i]` for `i < MR`,
/// `j < P * NR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn tile_v4<const P: usize>(
    x: *const f32,
    offsets: &[usize],
    panel: *const f32,
    panel_stride: usize,
    out: *mut f32,
    stride: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); P]; MR];
    if accumulate {
        for (i, sums) in acc.iter_mut().enumerate() {
            for (j, sum) in sums.iter_mut().enumerate() {
                // SAFETY: the caller's contract.
                *sum = unsafe { _mm512_loadu_ps(out.add(i * stride + j * NR)) };
            }
        }
    }
    for (r, &off) in offsets.iter().enumerate() {
        // SAFETY: the caller's contract.
        unsafe {
            let w: [__m512; P] =
                std::array::from_fn(|j| _mm512_loadu_ps(panel.add(j * panel_stride + r * NR)));
            for (i, sums) in acc.iter_mut().enumerate() {
                let b = _mm512_set1_ps(*x.add(off + i));
                for (sum, wj) in sums.iter_mut().zip(&w) {
                    *sum = _mm512_fmadd_ps(*wj, b, *sum);
                }
            }
        }
    }
    for (i, sums) in acc.iter().enumerate() {
        for (j, sum) in sums.iter().enumerate() {
            // SAFETY: the caller's contract.
            unsafe { _mm512_storeu_ps(out.add(i * stride + j * NR), *sum) };
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile_v4<const P: usize>(
    _: *const f32,
    _: &[usize],
    _: *const f32,
    _: usize,
    _: *mut f32,
    _: usize,
    _: bool,
) {
    unreachable!("the direct route applies on x86-64 only")
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::super::conv2d::{backward_im2col, forward_im2col};
    use super::*;

    /// The kernels run on any AVX2 CPU, whatever path `KILN_CPU_PATH` chose: these tests call
    /// them directly. Every x86-64 machine kiln is tested on has AVX2; one without fails here
    /// rather than passing untested.
    fn needs_avx2() {
        assert!(
            CpuPath::detected() >= CpuPath::Avx2,
            "the direct convolution kernels need an AVX2 CPU to be tested"
        );
    }

    fn values(n: usize, seed: f32) -> Vec<f32> {
        (0..n)
            .map(|i| (i as f32 * 0.737 + seed).sin() * 1.1)
            .collect()
    }

    /// Stride-1 geometries: "same" and "valid", odd and even kernels, asymmetric padding,
    /// filter counts that are and are not multiples of the tile's, images smaller than the
    /// kernel, the benchmarks' 28x28.
    fn geometries() -> Vec<Conv2dGeometry> {
        let mut out = Vec::new();
        for (kernel, padding) in [
            ([3, 3], [(1, 1), (1, 1)]),
            ([3, 3], [(0, 0), (0, 0)]),
            ([1, 1], [(0, 0), (0, 0)]),
            ([2, 3], [(0, 1), (1, 1)]),
            ([5, 5], [(2, 2), (2, 2)]),
            ([3, 1], [(2, 0), (0, 0)]),
        ] {
            for (batch, c, h, w, o) in [
                (1, 1, 5, 6, 1),
                (3, 2, 7, 5, 6),
                (2, 3, 28, 28, 8),
                (1, 2, 1, 1, 5),
                (2, 50, 6, 7, 20),
            ] {
                let g = Conv2dGeometry {
                    batch,
                    in_channels: c,
                    height: h,
                    width: w,
                    out_channels: o,
                    kernel,
                    stride: [1, 1],
                    padding,
                };
                if h + padding[0].0 + padding[0].1 >= kernel[0]
                    && w + padding[1].0 + padding[1].1 >= kernel[1]
                {
                    out.push(g);
                }
            }
        }
        out
    }

    /// `a` and `b` agree to float32 rounding of sums whose terms' magnitudes add up to `scale`
    /// (per element): 32 ulps of that sum, whatever the order of the additions.
    fn close(a: &[f32], b: &[f32], scale: &[f32], what: &str, g: &Conv2dGeometry) {
        assert_eq!(a.len(), b.len(), "{what} {g:?}");
        for (i, ((x, y), s)) in a.iter().zip(b).zip(scale).enumerate() {
            assert!(
                (x - y).abs() <= 32.0 * f32::EPSILON * (s + 1.0),
                "{what} {g:?} at {i}: {x} vs {y} (terms' magnitudes {s})"
            );
        }
    }

    fn abs(v: &[f32]) -> Vec<f32> {
        v.iter().map(|x| x.abs()).collect()
    }

    #[test]
    fn direct_forward_and_input_gradient_match_im2col() {
        needs_avx2();
        for g in geometries() {
            let [oh, ow] = g.out_hw();
            let x = values(g.batch * g.in_channels * g.height * g.width, 0.3);
            let k = g.in_channels * g.kernel[0] * g.kernel[1];
            let w = values(g.out_channels * k, 1.7);
            let b = values(g.out_channels, 2.9);
            let scale = forward_im2col(&abs(&x), &abs(&w), Some(&abs(&b)), &g, Epilogue::default());
            for relu in [false, true] {
                let direct = forward(&x, &w, Some(&b), &g, Epilogue::with_relu(relu));
                let reference = forward_im2col(&x, &w, Some(&b), &g, Epilogue::with_relu(relu));
                close(&direct, &reference, &scale, "forward", &g);
            }
            let dy = values(g.batch * g.out_channels * oh * ow, 4.1);
            let (dx, _, _) = backward_im2col(&x, &w, &dy, None, &g, true);
            let (dx_scale, _, _) = backward_im2col(&x, &abs(&w), &abs(&dy), None, &g, true);
            let dx_scale = dx_scale.unwrap();
            let direct = input_gradient(&w, &dy, None, &g).expect("paddings below the kernel");
            close(&direct, &dx.unwrap(), &dx_scale, "dx", &g);
            let (_, dw, db) = backward_im2col(&x, &w, &dy, None, &g, false);
            let (_, dw_scale, db_scale) = backward_im2col(&abs(&x), &w, &abs(&dy), None, &g, false);
            let (direct_dw, direct_db) = weight_gradient(&x, &dy, None, &g);
            close(&direct_dw, &dw, &dw_scale, "dw", &g);
            close(&direct_db, &db, &db_scale, "db", &g);
            // Through a fused ReLU: its output `y` masks `dy` inside the direct kernels.
            let y = forward_im2col(&x, &w, Some(&b), &g, Epilogue::with_relu(true));
            let (dx, dw, db) = backward_im2col(&x, &w, &dy, Some(&y), &g, true);
            let relu_dx = input_gradient(&w, &dy, Some(&y), &g).expect("paddings below the kernel");
            let (relu_dw, relu_db) = weight_gradient(&x, &dy, Some(&y), &g);
            close(&relu_dx, &dx.unwrap(), &dx_scale, "relu dx", &g);
            close(&relu_dw, &dw, &dw_scale, "relu dw", &g);
            close(&relu_db, &db, &db_scale, "relu db", &g);
        }
    }

    #[test]
    fn tiles_cover_every_panel_once() {
        use Width::*;
        assert_eq!(Width::groups(3, CpuPath::Avx512), [(0, Zmm2), (2, Zmm1)]);
        assert_eq!(Width::groups(4, CpuPath::Avx512), [(0, Zmm2), (2, Zmm2)]);
        assert_eq!(Width::groups(1, CpuPath::Avx512), [(0, Zmm1)]);
        assert_eq!(Width::groups(2, CpuPath::Avx2), [(0, Avx2), (1, Avx2)]);
        assert_eq!(Width::groups(0, CpuPath::Avx512), []);
    }

    /// The AVX-512 tiles against the AVX2 ones, forward product and weight gradient, on every
    /// geometry: each output is the same sequence of fused multiply-adds, so the bits agree.
    /// Only on a CPU with AVX-512 (the test says whether it ran them); `cpu_paths.rs` checks
    /// both paths against Burn.
    #[test]
    fn avx512_tiles_give_the_avx2_tiles_bits() {
        needs_avx2();
        let wide = CpuPath::detected() >= CpuPath::Avx512;
        eprintln!(
            "AVX-512 tiles: {}",
            match wide {
                true => "checked against the AVX2 tiles",
                false => "not run, this CPU has no AVX-512",
            }
        );
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        for g in geometries().into_iter().filter(|_| wide) {
            let (grid, o) = (Grid::new(&g), g.out_channels);
            let k = grid.offsets.len();
            let filters = o.div_ceil(NR) * NR;
            let packed = pack_weights(&values(o * k, 1.7), o, k);
            let mut xp = vec![0.0; grid.len];
            grid.pad(
                &values(g.in_channels * g.height * g.width, 0.3),
                None,
                &g,
                &mut xp,
            );
            let forward = |path| {
                let mut yg = vec![0.0; filters * grid.positions];
                product(&xp, &packed, &grid, &mut yg, path);
                bits(yg)
            };
            let [oh, ow] = g.out_hw();
            let mut dyg = vec![0.0; grid.positions * filters];
            gather_positions(&values(o * oh * ow, 4.1), &g, &grid, filters, &mut dyg);
            let rows = k.div_ceil(MR) * MR;
            let mut offsets = grid.offsets.clone();
            offsets.resize(rows, offsets[0]);
            let weights = |path| {
                let mut dwt = vec![0.5; rows * filters];
                let shape = [oh, ow, grid.wp];
                weight_product(&xp, &dyg, &offsets, shape, filters, &mut dwt, path);
                bits(dwt)
            };
            assert!(
                forward(CpuPath::Avx512) == forward(CpuPath::Avx2),
                "forward {g:?}"
            );
            assert!(
                weights(CpuPath::Avx512) == weights(CpuPath::Avx2),
                "dw {g:?}"
            );
        }
    }

    #[test]
    fn transpose_of_every_shape_up_to_17_matches_its_definition() {
        needs_avx2();
        for rows in 1..=17 {
            for cols in 1..=17 {
                let src = values(rows * 19, 0.5);
                let mut dst = vec![f32::NAN; cols * 21];
                transpose(&src, 19, &mut dst, 21, [rows, cols]);
                for i in 0..rows {
                    for j in 0..cols {
                        assert_eq!(dst[j * 21 + i], src[i * 19 + j], "{rows}x{cols} at {i},{j}");
                    }
                }
            }
        }
    }

    #[test]
    fn an_infinite_pixel_reaches_only_the_weights_that_use_it() {
        needs_avx2();
        // Kernel 1x2 "valid" on 3x3: the grid's extra column (ox = 2) of row 0 reads pixel
        // (1, 0) for kx = 1, which the convolution never multiplies by kx = 1.
        let g = Conv2dGeometry {
            batch: 1,
            in_channels: 1,
            height: 3,
            width: 3,
            out_channels: 16,
            kernel: [1, 2],
            stride: [1, 1],
            padding: [(0, 0), (0, 0)],
        };
        let mut x = values(9, 0.2);
        x[3] = f32::INFINITY;
        let w = values(32, 0.9);
        let dy = values(16 * 6, 1.3);
        let (_, dw, _) = backward_im2col(&x, &w, &dy, None, &g, false);
        let (direct, _) = weight_gradient(&x, &dy, None, &g);
        for f in 0..16 {
            assert!(
                !dw[f * 2].is_finite() && !direct[f * 2].is_finite(),
                "kx = 0 uses it"
            );
            assert!(dw[f * 2 + 1].is_finite(), "reference");
            let (a, b) = (direct[f * 2 + 1], dw[f * 2 + 1]);
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "filter {f}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn a_padding_wider_than_the_kernel_has_no_direct_input_gradient() {
        let g = Conv2dGeometry {
            batch: 1,
            in_channels: 1,
            height: 3,
            width: 3,
            out_channels: 1,
            kernel: [1, 1],
            stride: [1, 1],
            padding: [(1, 1), (0, 0)],
        };
        assert!(input_gradient(&[1.0], &[0.0; 15], None, &g).is_none());
    }
}
