//! GEMM with bfloat16 operands and float32 accumulation, on CPUs with AVX512_BF16's dot
//! product `vdpbf16ps` (AMD Zen 4 and later, Intel Cooper Lake, Sapphire Rapids and later).
//!
//! Under `mixed_bfloat16` every layer's inputs, the compute copy of its weights and the
//! gradients reaching it are rounded to bfloat16 ([`crate::precision::round`]) but held in
//! float32, so the operands of its matrix products are bfloat16 values already. This kernel
//! notices that while it packs them (the low 16 bits of every float are zero), keeps only the
//! high halves (no rounding: the conversion is exact) and multiplies pairs of them with
//! `vdpbf16ps`, which takes twice the multiply-adds per instruction of a float32 FMA. Each
//! product of two bfloat16 values is exact in float32 and the sums are float32, as on tensor
//! cores; only the order of the sums differs from the float32 kernels (pairs first), and
//! inputs and results below float32's normal range (~1.2e-38) are flushed to zero, as the
//! instruction defines. When an operand is not all bfloat16 values (any `float32` run) the
//! packing stops at the first such element and the float32 kernels run instead.
//!
//! Layout (the `gemm` crate's idea, for a pair-wise dot product): `a` is packed row by row as
//! `u32` pairs `(a[i, 2p], a[i, 2p + 1])`, `b` in panels of [`NR`] columns, each a run of
//! `[NR]` pairs `(b[2p, j], b[2p + 1, j])` per `p`. A micro-tile of [`MR`] x [`NR`] outputs
//! lives in 24 of the 32 vector registers for the whole `k` loop.

use std::cell::RefCell;

use super::amx;
use super::cpu;
use super::gemm::View;

/// Output rows per micro-tile.
const MR: usize = 12;
/// Output columns per micro-tile: two vectors of 16 float32.
const NR: usize = 32;
/// Below this many multiply-adds per output row the packing costs more than the product saves.
/// (Per row, not per call: a row's result must not depend on how many rows share the call.)
const MIN_ROW_MACS: usize = 16 * 64;

/// Below this inner dimension (a 3x3 convolution of one channel: 9) the pairs and the tiles'
/// padding waste more than the bfloat16 products save: the float32 kernels, which compute the
/// same products of bfloat16 values exactly, measured faster (bench/README.md).
const MIN_K: usize = 32;

thread_local! {
    /// Packed `a` and `b` of the last call on this thread, reused.
    static PACKED: RefCell<(Vec<u32>, Vec<u32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// `dst (+)= a @ b` with bfloat16 dot products when [`cpu::bf16_dot`] allows them and every
/// element of `a` and `b` is a bfloat16 value; `false` (and `dst` untouched) otherwise.
///
/// # Safety
/// As the float32 GEMM: the views' indices are in bounds of their slices, `dst` is valid for
/// `a.rows * b.cols` writes (and reads with `accumulate`) and overlaps neither view.
pub(super) unsafe fn try_matmul(a: View<'_>, b: View<'_>, dst: *mut f32, accumulate: bool) -> bool {
    // SAFETY: the caller's contract.
    unsafe { try_matmul_on(current_route(), a, b, dst, accumulate) }
}

/// Which instructions multiply the packed operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// AVX512_BF16's `vdpbf16ps`, in [`MR`] x [`NR`] register tiles.
    Dot,
    /// AMX tiles ([`amx`]).
    Amx,
}

impl Route {
    /// Rows of `a` per block (the packed `a` is padded to a multiple).
    fn rows(self) -> usize {
        match self {
            Route::Dot => MR,
            Route::Amx => amx::MR,
        }
    }

    /// Pairs per packed row for `k` (AMX takes whole tiles of pairs, zeros after `k`).
    fn pairs(self, k: usize) -> usize {
        match self {
            Route::Dot => k.div_ceil(2),
            Route::Amx => k.div_ceil(2).next_multiple_of(amx::PAIRS),
        }
    }
}

/// [`try_matmul`] on `route`.
///
/// # Safety
/// As [`try_matmul`]; [`Route::Amx`] only where [`cpu::has_amx`] holds.
unsafe fn try_matmul_on(
    route: Route,
    a: View<'_>,
    b: View<'_>,
    dst: *mut f32,
    accumulate: bool,
) -> bool {
    if !applies([a.rows, a.cols, b.cols]) || low_bits(a.data[0]) | low_bits(b.data[0]) != 0 {
        return false;
    }
    with_buffers(|pa, pb| {
        // SAFETY: the CPU has AVX-512 (`cpu::bf16_dot` implies the avx512 path's features).
        let pack = |k2, out: &mut [u32]| unsafe { pack_b_v4(b, k2, out) };
        let Some(packed) = pack_into(route, [b.rows, b.cols], pb, pack) else {
            return false;
        };
        // SAFETY: the CPU has AVX-512 (as above); the caller's contract.
        let pack_a = |k2, out: &mut [u32]| unsafe { pack_a_v4(a, k2, out) };
        unsafe { multiply_packed(a.rows, pack_a, packed, pa, dst, accumulate) }
    })
}

/// `f` with this thread's packing buffers `(pa, pb)`; `false` when a call further up this
/// thread already holds them.
fn with_buffers(f: impl FnOnce(&mut Vec<u32>, &mut Vec<u32>) -> bool) -> bool {
    PACKED.with(|cell| match cell.try_borrow_mut() {
        Ok(mut bufs) => {
            let (pa, pb) = &mut *bufs;
            f(pa, pb)
        }
        Err(_) => false,
    })
}

/// A `k x n` right-hand operand packed for `route` into `pb` by `pack(k2, out)`; `None` when
/// `pack` finds a value that is not a bfloat16 value. Padding columns are never stored: their
/// stale contents do no harm.
fn pack_into(
    route: Route,
    [k, n]: [usize; 2],
    pb: &mut Vec<u32>,
    pack: impl FnOnce(usize, &mut [u32]) -> bool,
) -> Option<PackedRef<'_>> {
    let k2 = route.pairs(k);
    pb.resize(pb.len().max(n.next_multiple_of(NR) * k2), 0);
    pack(k2, pb).then_some(PackedRef {
        route,
        n,
        k2,
        data: pb,
    })
}

/// Whether the bfloat16 kernel may take an `m x k` by `k x n` product: the products are on,
/// and there is work, enough of it per row. (Callers also look at the first element of an
/// operand at hand: a float32 operand almost always shows it there, before any packing.)
fn applies([m, k, n]: [usize; 3]) -> bool {
    m > 0 && k >= MIN_K && n * k >= MIN_ROW_MACS && cpu::bf16_dot()
}

/// A right-hand operand packed once for products on several threads ([`pack_shared`]).
pub(super) struct PackedB {
    route: Route,
    k: usize,
    n: usize,
    k2: usize,
    data: Vec<u32>,
}

/// A packed right-hand operand, borrowed.
#[derive(Clone, Copy)]
struct PackedRef<'a> {
    route: Route,
    n: usize,
    k2: usize,
    data: &'a [u32],
}

/// Panels of `b` per packing task of [`pack_shared`].
const PANELS_PER_TASK: usize = 2;

/// `b` packed for [`try_matmul_packed`] (panels packed on rayon's pool), or `None` when the
/// bfloat16 kernel does not take products with it (see [`try_matmul`]).
pub(super) fn pack_shared(b: View<'_>) -> Option<PackedB> {
    use rayon::prelude::*;
    if !applies([1, b.rows, b.cols]) || low_bits(b.data[0]) != 0 {
        return None;
    }
    let route = current_route();
    let (k, n) = (b.rows, b.cols);
    let k2 = route.pairs(k);
    let mut data = vec![0u32; n.next_multiple_of(NR) * k2];
    let width = PANELS_PER_TASK * NR;
    let all_bf16 = data.par_chunks_mut(width * k2).enumerate().all(|(t, out)| {
        let j0 = t * width;
        let part = View {
            data: &b.data[j0 * b.col_stride..],
            cols: width.min(n - j0),
            ..b
        };
        // SAFETY: the CPU has AVX-512 (`applies` checked `cpu::bf16_dot`).
        unsafe { pack_b_v4(part, k2, out) }
    });
    all_bf16.then_some(PackedB {
        route,
        k,
        n,
        k2,
        data,
    })
}

/// `dst (+)= a @ b` with `b` from [`pack_shared`]; `false` (and `dst` untouched) when an
/// element of `a` is not a bfloat16 value.
///
/// # Safety
/// As [`try_matmul`], with `a.cols == b.k`.
pub(super) unsafe fn try_matmul_packed(
    a: View<'_>,
    b: &PackedB,
    dst: *mut f32,
    accumulate: bool,
) -> bool {
    assert_eq!(a.cols, b.k, "inner dimensions differ");
    if a.rows == 0 || low_bits(a.data[0]) != 0 {
        return false;
    }
    let packed = PackedRef {
        route: b.route,
        n: b.n,
        k2: b.k2,
        data: &b.data,
    };
    // SAFETY: the CPU has AVX-512 (`pack_shared` checked `cpu::bf16_dot`); the caller's
    // contract.
    let pack_a = |k2, out: &mut [u32]| unsafe { pack_a_v4(a, k2, out) };
    with_buffers(|pa, _| unsafe { multiply_packed(a.rows, pack_a, packed, pa, dst, accumulate) })
}

/// `dst = a @ b` with `b` (`k x n`) given row by row: `fill_row(r, row)` writes row `r`'s `n`
/// values (an im2col matrix, built a pair of rows at a time into the packed layout, so the
/// whole float32 matrix is never written). `false` when the bfloat16 kernel does not take the
/// product (as [`try_matmul`]) or a value is not a bfloat16 value; `dst` may be partly written
/// then, but is never read.
///
/// # Safety
/// `dst` is valid for `a.rows * n` writes; `a`'s indices are in bounds of its slice.
pub(super) unsafe fn try_matmul_b_rows(
    a: View<'_>,
    [k, n]: [usize; 2],
    fill_row: impl FnMut(usize, &mut [f32]),
    dst: *mut f32,
) -> bool {
    assert_eq!(a.cols, k, "inner dimensions differ");
    if !applies([a.rows, k, n]) || low_bits(a.data[0]) != 0 {
        return false;
    }
    with_buffers(|pa, pb| {
        // SAFETY: the CPU has AVX-512 (`applies` checked `cpu::bf16_dot`).
        let pack = |k2, out: &mut [u32]| unsafe { pack_b_rows_v4(k, n, k2, fill_row, out) };
        let Some(packed) = pack_into(current_route(), [k, n], pb, pack) else {
            return false;
        };
        // SAFETY: as above; the caller's contract.
        let pack_a = |k2, out: &mut [u32]| unsafe { pack_a_v4(a, k2, out) };
        unsafe { multiply_packed(a.rows, pack_a, packed, pa, dst, false) }
    })
}

/// `dst = a @ b` with `a` (`m x k`) given row by row: `fill_row(r, row)` writes row `r`'s
/// `k` values (an im2col matrix whose rows are long: the positions of several images). As
/// [`try_matmul_b_rows`] otherwise.
///
/// # Safety
/// `dst` is valid for `m * b.cols` writes; `b`'s indices are in bounds of its slice.
pub(super) unsafe fn try_matmul_a_rows(
    [m, k]: [usize; 2],
    mut fill_row: impl FnMut(usize, &mut [f32]),
    b: View<'_>,
    dst: *mut f32,
) -> bool {
    assert_eq!(b.rows, k, "inner dimensions differ");
    if !applies([m, k, b.cols]) || low_bits(b.data[0]) != 0 {
        return false;
    }
    with_buffers(|pa, pb| {
        // SAFETY: the CPU has AVX-512 (`applies` checked `cpu::bf16_dot`).
        let pack = |k2, out: &mut [u32]| unsafe { pack_b_v4(b, k2, out) };
        let Some(packed) = pack_into(current_route(), [k, b.cols], pb, pack) else {
            return false;
        };
        let mut row = vec![0f32; k];
        let pack_a = |k2, out: &mut [u32]| {
            out.chunks_exact_mut(k2)
                .take(m)
                .enumerate()
                .all(|(r, out)| {
                    fill_row(r, &mut row);
                    // SAFETY: as above.
                    unsafe { pack_a_v4(View::new(&row, 1, k), k2, out) }
                })
        };
        // SAFETY: the caller's contract.
        unsafe { multiply_packed(m, pack_a, packed, pa, dst, false) }
    })
}

/// [`pack_b_rows`] compiled for AVX-512.
///
/// # Safety
/// The CPU has the avx512 path's features.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512cd,avx512dq,avx512vl,avx2,fma")]
unsafe fn pack_b_rows_v4(
    k: usize,
    n: usize,
    k2: usize,
    fill_row: impl FnMut(usize, &mut [f32]),
    out: &mut [u32],
) -> bool {
    pack_b_rows(k, n, k2, fill_row, out)
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn pack_b_rows_v4(
    k: usize,
    n: usize,
    k2: usize,
    fill_row: impl FnMut(usize, &mut [f32]),
    out: &mut [u32],
) -> bool {
    pack_b_rows(k, n, k2, fill_row, out)
}

/// Packs `b` (`k x n`, row `r` from `fill_row`) as [`pack_b`] does, two rows at a time.
#[inline(always)]
fn pack_b_rows(
    k: usize,
    n: usize,
    k2: usize,
    mut fill_row: impl FnMut(usize, &mut [f32]),
    out: &mut [u32],
) -> bool {
    let mut rows = vec![0f32; 2 * n];
    let mut low = 0u32;
    for p in 0..k.div_ceil(2) {
        let (r0, r1) = rows.split_at_mut(n);
        fill_row(2 * p, r0);
        match 2 * p + 1 < k {
            true => fill_row(2 * p + 1, r1),
            false => r1.fill(0.0),
        }
        for (panel, (c0, c1)) in r0.chunks(NR).zip(r1.chunks(NR)).enumerate() {
            let run = &mut out[(panel * k2 + p) * NR..][..c0.len()];
            for ((o, &x), &y) in run.iter_mut().zip(c0).zip(c1.iter()) {
                low |= low_bits(x) | low_bits(y);
                *o = pair(x, y);
            }
        }
        if low != 0 {
            return false;
        }
    }
    for panel in 0..n.div_ceil(NR) {
        out[(panel * k2 + k.div_ceil(2)) * NR..(panel * k2 + k2) * NR].fill(0);
    }
    true
}

/// The route [`try_matmul`] takes now.
fn current_route() -> Route {
    match cpu::amx() {
        true => Route::Amx,
        false => Route::Dot,
    }
}

/// Packs the `m`-row left operand into `pa` with `pack_a(k2, pa)` and multiplies it by the
/// packed `b`; `false` when `pack_a` finds a value that is not a bfloat16 value.
///
/// # Safety
/// As [`try_matmul`]; `b` was packed for the left operand's columns on a route this CPU runs.
unsafe fn multiply_packed(
    m: usize,
    pack_a: impl FnOnce(usize, &mut [u32]) -> bool,
    b: PackedRef<'_>,
    pa: &mut Vec<u32>,
    dst: *mut f32,
    accumulate: bool,
) -> bool {
    let (n, k2) = (b.n, b.k2);
    // Padding rows are never stored: their stale contents do no harm.
    pa.resize(pa.len().max(m.next_multiple_of(b.route.rows()) * k2), 0);
    if !pack_a(k2, pa) {
        return false;
    }
    // SAFETY: the CPU has AVX512_BF16, and AMX on its route (the caller's contract); the
    // packed buffers hold the padded tiles; the caller's contract covers `dst`.
    unsafe {
        match b.route {
            Route::Dot => multiply(m, n, k2, pa, b.data, dst, accumulate),
            Route::Amx => amx::multiply(m, n, k2, pa, b.data, dst, accumulate),
        }
    };
    true
}

/// Whether a convolution's products with the weights `w` (rows of `patch` values) go to AMX
/// tiles: AMX is on ([`cpu::amx`]), the patch is long enough for the bfloat16 kernel
/// (`MIN_K`), and every weight is a bfloat16 value (a `mixed_bfloat16` layer's compute copy).
/// Convolutions then take im2col + GEMM rather than their float32 direct kernels: the tiles
/// made the CNN's second convolution twice as fast as the direct kernels (docs/precision.md).
/// A short patch (a first layer's 3x3 on one channel) keeps the direct kernels, which the
/// bfloat16 kernel would decline anyway.
pub(super) fn tiles_take(w: &[f32], patch: usize) -> bool {
    cpu::amx() && patch >= MIN_K && weights_take(w)
}

/// Whether products with the weights `w` may take the bfloat16 kernel: the products are on
/// ([`cpu::bf16_dot`]) and every weight is a bfloat16 value.
pub(super) fn weights_take(w: &[f32]) -> bool {
    cpu::bf16_dot() && !w.is_empty() && w.iter().all(|&v| low_bits(v) == 0)
}

/// The bits a bfloat16 value leaves zero.
#[inline(always)]
fn low_bits(x: f32) -> u32 {
    x.to_bits() & 0xFFFF
}

/// Two bfloat16 values (the high halves of `lo` and `hi`) in one `u32`, `lo` in the low half
/// as `vdpbf16ps` pairs them.
#[inline(always)]
fn pair(lo: f32, hi: f32) -> u32 {
    (hi.to_bits() & 0xFFFF_0000) | (lo.to_bits() >> 16)
}

/// [`pack_a`] compiled for AVX-512.
///
/// # Safety
/// The CPU has the avx512 path's features.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512cd,avx512dq,avx512vl,avx2,fma")]
unsafe fn pack_a_v4(a: View<'_>, k2: usize, out: &mut [u32]) -> bool {
    pack_a(a, k2, out)
}

/// [`pack_b`] compiled for AVX-512.
///
/// # Safety
/// The CPU has the avx512 path's features.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512cd,avx512dq,avx512vl,avx2,fma")]
unsafe fn pack_b_v4(b: View<'_>, k2: usize, out: &mut [u32]) -> bool {
    pack_b(b, k2, out)
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn pack_a_v4(a: View<'_>, k2: usize, out: &mut [u32]) -> bool {
    pack_a(a, k2, out)
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn pack_b_v4(b: View<'_>, k2: usize, out: &mut [u32]) -> bool {
    pack_b(b, k2, out)
}

/// Packs `a` (`m x k`) as `m` rows of `k2 >= ceil(k / 2)` pairs (an odd `k` ends with a zero,
/// and so does every pair after `k`); `false` when an element is not a bfloat16 value.
#[inline(always)]
fn pack_a(a: View<'_>, k2: usize, out: &mut [u32]) -> bool {
    let k = a.cols;
    let mut low = 0u32;
    for i in 0..a.rows {
        let row = &mut out[i * k2..(i + 1) * k2];
        if a.col_stride == 1 {
            let src = &a.data[i * a.row_stride..i * a.row_stride + k];
            for (o, s) in row.iter_mut().zip(src.chunks_exact(2)) {
                low |= low_bits(s[0]) | low_bits(s[1]);
                *o = pair(s[0], s[1]);
            }
        } else {
            let at = |j: usize| a.data[i * a.row_stride + j * a.col_stride];
            for (p, o) in row.iter_mut().enumerate().take(k / 2) {
                let (x, y) = (at(2 * p), at(2 * p + 1));
                low |= low_bits(x) | low_bits(y);
                *o = pair(x, y);
            }
        }
        if k % 2 == 1 {
            let x = a.data[i * a.row_stride + (k - 1) * a.col_stride];
            low |= low_bits(x);
            row[k / 2] = pair(x, 0.0);
        }
        row[k.div_ceil(2)..].fill(0);
        if low != 0 {
            return false;
        }
    }
    true
}

/// Packs `b` (`k x n`) in panels of [`NR`] columns, each `k2 >= ceil(k / 2)` runs of [`NR`]
/// pairs (an odd `k` ends with zeros, and so does every run after `k`); `false` when an
/// element is not a bfloat16 value.
#[inline(always)]
fn pack_b(b: View<'_>, k2: usize, out: &mut [u32]) -> bool {
    let (k, n) = (b.rows, b.cols);
    let at = |r: usize, j: usize| b.data[r * b.row_stride + j * b.col_stride];
    // Where pair `p` of column `j` goes.
    let slot = |p: usize, j: usize| ((j / NR) * k2 + p) * NR + j % NR;
    let mut low = 0u32;
    if b.col_stride == 1 {
        // Rows contiguous (a weight matrix, im2col columns): two rows make a run.
        for p in 0..k / 2 {
            for j0 in (0..n).step_by(NR) {
                let width = NR.min(n - j0);
                let r0 = &b.data[2 * p * b.row_stride + j0..][..width];
                let r1 = &b.data[(2 * p + 1) * b.row_stride + j0..][..width];
                let run = &mut out[slot(p, j0)..][..width];
                for ((o, &x), &y) in run.iter_mut().zip(r0).zip(r1) {
                    low |= low_bits(x) | low_bits(y);
                    *o = pair(x, y);
                }
            }
            if low != 0 {
                return false;
            }
        }
    } else {
        // Columns contiguous (a transposed matrix): each pair is two neighbours in memory.
        // Blocks of pairs keep the lines being written in the first-level cache.
        const BLOCK: usize = 64;
        for p0 in (0..k / 2).step_by(BLOCK) {
            let p1 = (p0 + BLOCK).min(k / 2);
            for j in 0..n {
                let start = 2 * p0 * b.row_stride + j * b.col_stride;
                let src = &b.data[start..=start + (2 * (p1 - p0) - 1) * b.row_stride];
                let dst = out[slot(p0, j)..].iter_mut().step_by(NR);
                if b.row_stride == 1 {
                    for (o, s) in dst.zip(src.chunks_exact(2)) {
                        low |= low_bits(s[0]) | low_bits(s[1]);
                        *o = pair(s[0], s[1]);
                    }
                } else {
                    let pairs = src.iter().step_by(b.row_stride);
                    for (o, s) in dst.zip(pairs.clone().step_by(2).zip(pairs.skip(1).step_by(2))) {
                        low |= low_bits(*s.0) | low_bits(*s.1);
                        *o = pair(*s.0, *s.1);
                    }
                }
            }
            if low != 0 {
                return false;
            }
        }
    }
    if k % 2 == 1 {
        for j in 0..n {
            let x = at(k - 1, j);
            low |= low_bits(x);
            out[slot(k / 2, j)] = pair(x, 0.0);
        }
    }
    for panel in 0..n.div_ceil(NR) {
        out[slot(k.div_ceil(2), panel * NR)..slot(k2, panel * NR)].fill(0);
    }
    low == 0
}

/// Every micro-tile of `dst (+)= a @ b` from the packed operands, column panels outside so one
/// panel of `b` stays in cache while the rows of `a` stream past it.
///
/// # Safety
/// The CPU has AVX512_BF16; `pa` holds `m` rounded up to [`MR`] rows of `k2` pairs, `pb` `n`
/// rounded up to [`NR`] columns; `dst` as in [`try_matmul`].
#[cfg(target_arch = "x86_64")]
unsafe fn multiply(
    m: usize,
    n: usize,
    k2: usize,
    pa: &[u32],
    pb: &[u32],
    dst: *mut f32,
    accumulate: bool,
) {
    for panel in 0..n.div_ceil(NR) {
        let cols = NR.min(n - panel * NR);
        let b = &pb[panel * k2 * NR..(panel + 1) * k2 * NR];
        for block in 0..m.div_ceil(MR) {
            let rows = MR.min(m - block * MR);
            let a = &pa[block * MR * k2..(block + 1) * MR * k2];
            let out = Tile {
                // SAFETY: the tile's first element, in bounds of `dst` (`m x n`).
                dst: unsafe { dst.add(block * MR * n + panel * NR) },
                stride: n,
                rows,
                cols,
                accumulate,
            };
            // SAFETY: the caller's contract.
            unsafe { tile(k2, a, b, out) };
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn multiply(_: usize, _: usize, _: usize, _: &[u32], _: &[u32], _: *mut f32, _: bool) {
    unreachable!("cpu::bf16_dot is false off x86-64")
}

/// Where a micro-tile's results go: `rows x cols` of a row-major matrix with row `stride`.
#[cfg(target_arch = "x86_64")]
struct Tile {
    dst: *mut f32,
    stride: usize,
    rows: usize,
    cols: usize,
    accumulate: bool,
}

/// One [`MR`] x [`NR`] micro-tile over the whole `k`: 24 accumulators, two loads of `b` and
/// [`MR`] broadcasts of `a` per pair.
///
/// # Safety
/// The CPU has AVX512_BF16; `a` holds [`MR`] rows of `k2` pairs, `b` `k2` runs of [`NR`];
/// `out.dst` is valid for `out.rows` rows of `out.cols` (reads too with `accumulate`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile(k2: usize, a: &[u32], b: &[u32], out: Tile) {
    use std::arch::x86_64::*;
    assert!(a.len() >= MR * k2 && b.len() >= NR * k2);
    let mut acc = [_mm512_setzero_ps(); 2 * MR];
    for p in 0..k2 {
        // SAFETY: `p * NR + 32 <= b.len()` by the assert; unaligned loads.
        let (b0, b1): (__m512bh, __m512bh) = unsafe {
            let at = b.as_ptr().add(p * NR);
            (
                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(at.cast())),
                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(at.add(16).cast())),
            )
        };
        for r in 0..MR {
            // SAFETY: a bit pattern reinterpreted; the index is in bounds by the assert.
            let x: __m512bh =
                unsafe { std::mem::transmute(_mm512_set1_epi32(a[r * k2 + p] as i32)) };
            acc[2 * r] = _mm512_dpbf16_ps(acc[2 * r], x, b0);
            acc[2 * r + 1] = _mm512_dpbf16_ps(acc[2 * r + 1], x, b1);
        }
    }
    let mask = |from: usize| -> __mmask16 {
        let width = out.cols.saturating_sub(from).min(16);
        ((1u32 << width) - 1) as __mmask16
    };
    let (m0, m1) = (mask(0), mask(16));
    for (r, pair) in acc.chunks_exact(2).take(out.rows).enumerate() {
        // SAFETY: row `r < out.rows`, columns under the masks `< out.cols`: in bounds.
        unsafe {
            let row = out.dst.add(r * out.stride);
            let (mut v0, mut v1) = (pair[0], pair[1]);
            if out.accumulate {
                v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, row));
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, row.wrapping_add(16)));
            }
            _mm512_mask_storeu_ps(row, m0, v0);
            // A zero mask touches no memory: the address may lie past the row.
            _mm512_mask_storeu_ps(row.wrapping_add(16), m1, v1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic bfloat16 values in about [-2, 2], some zero.
    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len as u32)
            .map(|i| {
                let h = (i ^ seed).wrapping_mul(2_654_435_761).rotate_left(13);
                let v = (h % 4001) as f32 / 1000.0 - 2.0;
                f32::from_bits(v.to_bits() & 0xFFFF_0000)
            })
            .collect()
    }

    /// `a @ b` in float64, and the sum of the products' magnitudes per element (the scale of
    /// float32's rounding error).
    fn reference(a: View<'_>, b: View<'_>) -> (Vec<f64>, Vec<f64>) {
        let at =
            |v: View<'_>, i: usize, j: usize| v.data[i * v.row_stride + j * v.col_stride] as f64;
        let (m, n, k) = (a.rows, b.cols, a.cols);
        let (mut c, mut s) = (vec![0.0; m * n], vec![0.0; m * n]);
        for i in 0..m {
            for j in 0..n {
                for l in 0..k {
                    let p = at(a, i, l) * at(b, l, j);
                    c[i * n + j] += p;
                    s[i * n + j] += p.abs();
                }
            }
        }
        (c, s)
    }

    #[test]
    fn bf16_products_match_float64_on_every_shape_and_view() {
        if !cpu::has_bf16() {
            // The float32 kernels run instead: the kernel declines.
            let a = values(64 * 64, 1);
            let mut d = vec![0.0; 64 * 64];
            let v = View::new(&a, 64, 64);
            // SAFETY: `d` holds 64 x 64; the views cover their slices.
            assert!(!unsafe { try_matmul(v, v, d.as_mut_ptr(), false) });
            eprintln!("no AVX512_BF16 on this CPU: checked that the bf16 kernel declines");
            return;
        }
        cpu::set_bf16(true).unwrap();
        check_against_float64(Route::Dot);
    }

    /// Every available route: the vector dot products, and AMX where the CPU has it.
    fn routes() -> Vec<Route> {
        match cpu::has_amx() {
            true => vec![Route::Dot, Route::Amx],
            false => vec![Route::Dot],
        }
    }

    #[test]
    fn amx_products_match_float64_on_every_shape_and_view() {
        if !cpu::has_amx() {
            assert!(
                cpu::set_amx(true).is_err(),
                "AMX cannot be turned on without it"
            );
            eprintln!("no AMX on this CPU (or Linux refused the tiles): checked it stays off");
            return;
        }
        cpu::set_bf16(true).unwrap();
        check_against_float64(Route::Amx);
    }

    /// `try_matmul_on(route)` against float64 on a grid of shapes, three kinds of views, with
    /// and without `accumulate`.
    fn check_against_float64(route: Route) {
        for (m, k, n) in [
            (12, 64, 32),
            (33, 31, 40),
            (32, 64, 64),
            (13, 65, 33),
            (1, 784, 512),
            (64, 288, 196),
            (40, 3, 700),
            (7, 1000, 5),
        ] {
            let a = values(m * k, 3);
            let b = values(k * n, 7);
            let at: Vec<f32> = (0..k * m).map(|v| a[(v % m) * k + v / m]).collect();
            let bt: Vec<f32> = (0..n * k).map(|v| b[(v % k) * n + v / k]).collect();
            // Neither rows nor columns contiguous: element (r, j) of `b` at 2r + (2k + 1)j.
            let mut spread = vec![f32::NAN; (2 * k + 1) * n];
            for r in 0..k {
                for j in 0..n {
                    spread[2 * r + (2 * k + 1) * j] = b[r * n + j];
                }
            }
            let strided = View {
                data: &spread,
                rows: k,
                cols: n,
                row_stride: 2,
                col_stride: 2 * k + 1,
            };
            let views = [
                (View::new(&a, m, k), View::new(&b, k, n)),
                (View::new(&at, k, m).t(), View::new(&bt, n, k).t()),
                (View::new(&a, m, k), strided),
            ];
            for (va, vb) in views {
                let (want, scale) = reference(va, vb);
                for accumulate in [false, true] {
                    let mut got = vec![0.5f32; m * n];
                    // SAFETY: `got` holds m x n; the views cover their slices.
                    let used =
                        unsafe { try_matmul_on(route, va, vb, got.as_mut_ptr(), accumulate) };
                    let want_used = n * k >= MIN_ROW_MACS && k >= MIN_K;
                    assert_eq!(used, want_used, "{route:?} m={m} k={k} n={n}");
                    if !used {
                        continue;
                    }
                    let base = if accumulate { 0.5 } else { 0.0 };
                    for (e, ((g, w), s)) in got.iter().zip(&want).zip(&scale).enumerate() {
                        let err = (*g as f64 - base - w).abs();
                        assert!(
                            err <= 1e-6 * s.max(1.0),
                            "{route:?} m={m} k={k} n={n} element {e}: {g} vs {w} (+{base})"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_float32_operand_leaves_the_product_to_the_float32_kernels() {
        let a = values(32 * 64, 5);
        let mut b = values(64 * 48, 9);
        b[64 * 48 - 1] += 1e-4; // one element that is not a bfloat16 value, at the very end
        let mut d = vec![3.0f32; 32 * 48];
        // SAFETY: `d` holds 32 x 48; the views cover their slices.
        let used = unsafe {
            try_matmul(
                View::new(&a, 32, 64),
                View::new(&b, 64, 48),
                d.as_mut_ptr(),
                false,
            )
        };
        assert!(!used);
        assert!(d.iter().all(|&v| v == 3.0), "nothing written");
    }

    #[test]
    fn a_rows_result_does_not_depend_on_the_rows_beside_it() {
        if !cpu::has_bf16() {
            eprintln!("no AVX512_BF16 on this CPU: the float32 kernels' own test covers this");
            return;
        }
        cpu::set_bf16(true).unwrap();
        for route in routes() {
            rows_stand_alone(route);
        }
    }

    fn rows_stand_alone(route: Route) {
        let (k, n) = (300, 70);
        let x = values(40 * k, 11);
        let w = values(k * n, 13);
        let mut all = vec![0.0; 40 * n];
        let product = |rows: View<'_>, out: &mut [f32]| {
            // SAFETY: `out` holds the rows x n results; the views cover their slices.
            assert!(unsafe {
                try_matmul_on(route, rows, View::new(&w, k, n), out.as_mut_ptr(), false)
            });
        };
        product(View::new(&x, 40, k), &mut all);
        for (m, start) in [(1, 0), (1, 39), (5, 12), (13, 17), (33, 7)] {
            let mut y = vec![0.0; m * n];
            product(View::new(&x[start * k..(start + m) * k], m, k), &mut y);
            assert_eq!(
                y,
                all[start * n..(start + m) * n],
                "{route:?}: {m} rows from {start}"
            );
        }
    }

    #[test]
    fn rows_given_one_by_one_pack_as_the_whole_matrix() {
        if !cpu::has_bf16() {
            eprintln!("no AVX512_BF16 on this CPU: try_matmul_b_rows declines as try_matmul");
            return;
        }
        cpu::set_bf16(true).unwrap();
        for (m, k, n) in [(64, 288, 196), (5, 33, 70), (40, 65, 31)] {
            let (a, b) = (values(m * k, 23), values(k * n, 29));
            let mut whole = vec![0.0f32; m * n];
            let mut rows = vec![f32::NAN; m * n];
            let fill = |r: usize, row: &mut [f32]| row.copy_from_slice(&b[r * n..(r + 1) * n]);
            // SAFETY: both hold m x n; the views cover their slices.
            unsafe {
                assert!(try_matmul(
                    View::new(&a, m, k),
                    View::new(&b, k, n),
                    whole.as_mut_ptr(),
                    false
                ));
                assert!(try_matmul_b_rows(
                    View::new(&a, m, k),
                    [k, n],
                    fill,
                    rows.as_mut_ptr()
                ));
            }
            assert_eq!(rows, whole, "m={m} k={k} n={n}");
        }
        // A row that is not all bfloat16 values: declined, nothing written.
        let (a, mut b) = (values(8 * 64, 1), values(64 * 40, 2));
        b[63 * 40 + 39] += 1e-3;
        let mut d = vec![7.0f32; 8 * 40];
        let fill = |r: usize, row: &mut [f32]| row.copy_from_slice(&b[r * 40..(r + 1) * 40]);
        // SAFETY: as above.
        assert!(!unsafe {
            try_matmul_b_rows(View::new(&a, 8, 64), [64, 40], fill, d.as_mut_ptr())
        });
        assert!(d.iter().all(|&v| v == 7.0));
    }

    #[test]
    fn amx_and_the_dot_products_agree() {
        if !cpu::has_amx() {
            eprintln!("no AMX on this CPU: amx_products_match_float64 checked it stays off");
            return;
        }
        cpu::set_bf16(true).unwrap();
        let (m, k, n) = (70, 577, 90);
        let (a, b) = (values(m * k, 17), values(k * n, 19));
        let run = |route| {
            let mut d = vec![0.0f32; m * n];
            // SAFETY: `d` holds m x n; the views cover their slices.
            assert!(unsafe {
                try_matmul_on(
                    route,
                    View::new(&a, m, k),
                    View::new(&b, k, n),
                    d.as_mut_ptr(),
                    false,
                )
            });
            d
        };
        let (dot, tiles) = (run(Route::Dot), run(Route::Amx));
        let (_, scale) = reference(View::new(&a, m, k), View::new(&b, k, n));
        for (e, ((x, y), s)) in dot.iter().zip(&tiles).zip(&scale).enumerate() {
            assert!(
                ((x - y) as f64).abs() <= 2e-6 * s.max(1.0),
                "element {e}: {x} vs {y}"
            );
        }
    }
}
