//! The 2×2 / stride-2 max pool on x86-64 with AVX2: eight windows per iteration, with exactly
//! the scalar path's semantics (first maximum wins, a NaN propagates), so results are
//! bit-identical to it.
//!
//! Two input rows of 16 values hold eight windows. `_mm256_shuffle_ps` splits each row into its
//! even and odd columns, which leaves the windows in the lane order `[0, 1, 4, 5, 2, 3, 6, 7]`
//! (the shuffle works within 128-bit lanes); every comparison is lane-wise, so the order is
//! fixed once at the end: a 64-bit permute for the forward output, and `unpacklo`/`unpackhi`
//! (which interleave back to column order directly) for the backward's four gradient rows.

use std::arch::x86_64::*;

/// Swaps the middle two 64-bit chunks: window order `[0,1,4,5,2,3,6,7]` <-> `[0..8]` (its own
/// inverse).
#[inline]
#[target_feature(enable = "avx2")]
fn swap_middle(v: __m256) -> __m256 {
    _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)))
}

/// Lane-wise `super::beats(v, best)`: `v > best`, or `v` is NaN and `best` is not.
#[inline]
#[target_feature(enable = "avx2")]
fn beats(v: __m256, best: __m256) -> __m256 {
    let gt = _mm256_cmp_ps::<_CMP_GT_OQ>(v, best);
    let v_nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v);
    let best_num = _mm256_cmp_ps::<_CMP_ORD_Q>(best, best);
    _mm256_or_ps(gt, _mm256_and_ps(v_nan, best_num))
}

/// `g` where `at == k`, +0.0 elsewhere.
#[inline]
#[target_feature(enable = "avx2")]
fn pick(g: __m256, at: __m256, k: f32) -> __m256 {
    _mm256_and_ps(g, _mm256_cmp_ps::<_CMP_EQ_OQ>(at, _mm256_set1_ps(k)))
}

/// The four corners `[a, b, c, d]` of eight windows whose top row starts at `r0` and bottom
/// row at `r1` (16 values each), in the lane order `[0,1,4,5,2,3,6,7]`.
///
/// # Safety
/// 16 values must be readable at `r0` and at `r1`; AVX2 must be present.
#[inline(always)]
unsafe fn corners(r0: *const f32, r1: *const f32) -> [__m256; 4] {
    // SAFETY: the caller guarantees 16 readable values at each pointer.
    unsafe {
        let (l0, h0) = (_mm256_loadu_ps(r0), _mm256_loadu_ps(r0.add(8)));
        let (l1, h1) = (_mm256_loadu_ps(r1), _mm256_loadu_ps(r1.add(8)));
        [
            _mm256_shuffle_ps::<0b10_00_10_00>(l0, h0),
            _mm256_shuffle_ps::<0b11_01_11_01>(l0, h0),
            _mm256_shuffle_ps::<0b10_00_10_00>(l1, h1),
            _mm256_shuffle_ps::<0b11_01_11_01>(l1, h1),
        ]
    }
}

/// The block of 8 windows starting at output column `i` (forward).
///
/// # Safety
/// AVX2; `r0`, `r1` hold `2 * (i + 8)` values, `out` holds `i + 8`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn forward8(r0: &[f32], r1: &[f32], out: &mut [f32], i: usize) {
    // SAFETY: the caller guarantees the lengths.
    unsafe {
        let [a, b, c, d] = corners(r0.as_ptr().add(2 * i), r1.as_ptr().add(2 * i));
        let mut best = a;
        for v in [b, c, d] {
            best = _mm256_blendv_ps(best, v, beats(v, best));
        }
        _mm256_storeu_ps(out.as_mut_ptr().add(i), swap_middle(best));
    }
}

/// The block of 4 windows starting at output column `i` (forward), with 128-bit vectors
/// (whose shuffles need no reordering).
///
/// # Safety
/// AVX2; `r0`, `r1` hold `2 * (i + 4)` values, `out` holds `i + 4`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn forward4(r0: &[f32], r1: &[f32], out: &mut [f32], i: usize) {
    // SAFETY: the caller guarantees the lengths.
    unsafe {
        let [a, b, c, d] = corners4(r0.as_ptr().add(2 * i), r1.as_ptr().add(2 * i));
        let mut best = a;
        for v in [b, c, d] {
            best = _mm_blendv_ps(best, v, beats4(v, best));
        }
        _mm_storeu_ps(out.as_mut_ptr().add(i), best);
    }
}

/// Lane-wise `super::beats` on 128-bit vectors.
#[inline]
#[target_feature(enable = "avx2")]
fn beats4(v: __m128, best: __m128) -> __m128 {
    let gt = _mm_cmp_ps::<_CMP_GT_OQ>(v, best);
    let v_nan = _mm_cmp_ps::<_CMP_UNORD_Q>(v, v);
    let best_num = _mm_cmp_ps::<_CMP_ORD_Q>(best, best);
    _mm_or_ps(gt, _mm_and_ps(v_nan, best_num))
}

/// `g` where `at == k`, +0.0 elsewhere (128-bit).
#[inline]
#[target_feature(enable = "avx2")]
fn pick4(g: __m128, at: __m128, k: f32) -> __m128 {
    _mm_and_ps(g, _mm_cmp_ps::<_CMP_EQ_OQ>(at, _mm_set1_ps(k)))
}

/// The corners of four windows (8 values per row), in column order.
///
/// # Safety
/// 8 values readable at `r0` and at `r1`; AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn corners4(r0: *const f32, r1: *const f32) -> [__m128; 4] {
    // SAFETY: the caller guarantees 8 readable values at each pointer.
    unsafe {
        let (l0, h0) = (_mm_loadu_ps(r0), _mm_loadu_ps(r0.add(4)));
        let (l1, h1) = (_mm_loadu_ps(r1), _mm_loadu_ps(r1.add(4)));
        [
            _mm_shuffle_ps::<0b10_00_10_00>(l0, h0),
            _mm_shuffle_ps::<0b11_01_11_01>(l0, h0),
            _mm_shuffle_ps::<0b10_00_10_00>(l1, h1),
            _mm_shuffle_ps::<0b11_01_11_01>(l1, h1),
        ]
    }
}

/// Calls `block(i)` for blocks of `width` covering `0..n` (`n >= width`); the last block
/// overlaps the one before when `width` does not divide `n`. Blocks only overwrite their
/// outputs with values that depend on their inputs alone, so computing a window twice is
/// harmless.
#[inline(always)]
fn blocks(n: usize, width: usize, mut block: impl FnMut(usize)) {
    let mut i = 0;
    loop {
        block(i);
        if i + width == n {
            break;
        }
        i = (i + width).min(n - width);
    }
}

/// Forward of one output row: `out[i]` = the maximum of the window at columns `2i, 2i+1` of
/// rows `r0`, `r1`. Returns false (and writes nothing) when the row has fewer than 4 windows,
/// which the caller then computes with scalars.
///
/// # Safety
/// AVX2 must be present.
///
/// # Panics
/// When `r0` or `r1` is shorter than `2 * out.len()`.
#[target_feature(enable = "avx2")]
pub unsafe fn forward_row(r0: &[f32], r1: &[f32], out: &mut [f32]) -> bool {
    let n = out.len();
    assert!(r0.len() >= 2 * n && r1.len() >= 2 * n);
    if n >= 8 {
        // SAFETY: every block ends at or before n (blocks), lengths asserted above.
        blocks(n, 8, |i| unsafe { forward8(r0, r1, out, i) });
    } else if n >= 4 {
        // SAFETY: as above.
        blocks(n, 4, |i| unsafe { forward4(r0, r1, out, i) });
    } else {
        return false;
    }
    true
}

/// The block of 8 windows starting at output column `i` (backward).
///
/// # Safety
/// AVX2; `r0`, `r1`, `d0`, `d1` hold `2 * (i + 8)` values, `grad` holds `i + 8`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn backward8(
    r0: &[f32],
    r1: &[f32],
    grad: &[f32],
    d0: &mut [f32],
    d1: &mut [f32],
    i: usize,
) {
    // SAFETY: the caller guarantees the lengths.
    unsafe {
        let [a, b, c, d] = corners(r0.as_ptr().add(2 * i), r1.as_ptr().add(2 * i));
        let (mut best, mut at) = (a, _mm256_setzero_ps());
        for (v, k) in [(b, 1.0), (c, 2.0), (d, 3.0)] {
            let take = beats(v, best);
            best = _mm256_blendv_ps(best, v, take);
            at = _mm256_blendv_ps(at, _mm256_set1_ps(k), take);
        }
        let g = swap_middle(_mm256_loadu_ps(grad.as_ptr().add(i)));
        let (p0, p1) = (pick(g, at, 0.0), pick(g, at, 1.0));
        let (p2, p3) = (pick(g, at, 2.0), pick(g, at, 3.0));
        let (o0, o1) = (d0.as_mut_ptr().add(2 * i), d1.as_mut_ptr().add(2 * i));
        _mm256_storeu_ps(o0, _mm256_unpacklo_ps(p0, p1));
        _mm256_storeu_ps(o0.add(8), _mm256_unpackhi_ps(p0, p1));
        _mm256_storeu_ps(o1, _mm256_unpacklo_ps(p2, p3));
        _mm256_storeu_ps(o1.add(8), _mm256_unpackhi_ps(p2, p3));
    }
}

/// The block of 4 windows starting at output column `i` (backward), 128-bit.
///
/// # Safety
/// AVX2; `r0`, `r1`, `d0`, `d1` hold `2 * (i + 4)` values, `grad` holds `i + 4`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn backward4(
    r0: &[f32],
    r1: &[f32],
    grad: &[f32],
    d0: &mut [f32],
    d1: &mut [f32],
    i: usize,
) {
    // SAFETY: the caller guarantees the lengths.
    unsafe {
        let [a, b, c, d] = corners4(r0.as_ptr().add(2 * i), r1.as_ptr().add(2 * i));
        let (mut best, mut at) = (a, _mm_setzero_ps());
        for (v, k) in [(b, 1.0), (c, 2.0), (d, 3.0)] {
            let take = beats4(v, best);
            best = _mm_blendv_ps(best, v, take);
            at = _mm_blendv_ps(at, _mm_set1_ps(k), take);
        }
        let g = _mm_loadu_ps(grad.as_ptr().add(i));
        let (p0, p1) = (pick4(g, at, 0.0), pick4(g, at, 1.0));
        let (p2, p3) = (pick4(g, at, 2.0), pick4(g, at, 3.0));
        let (o0, o1) = (d0.as_mut_ptr().add(2 * i), d1.as_mut_ptr().add(2 * i));
        _mm_storeu_ps(o0, _mm_unpacklo_ps(p0, p1));
        _mm_storeu_ps(o0.add(4), _mm_unpackhi_ps(p0, p1));
        _mm_storeu_ps(o1, _mm_unpacklo_ps(p2, p3));
        _mm_storeu_ps(o1.add(4), _mm_unpackhi_ps(p2, p3));
    }
}

/// Backward of one output row: the gradient `grad[i]` goes to its window's maximum in rows
/// `d0`/`d1` (columns `2i, 2i+1`), zeros to the other three. Returns false (and writes
/// nothing) when the row has fewer than 4 windows.
///
/// # Safety
/// AVX2 must be present.
///
/// # Panics
/// When `r0`, `r1`, `d0` or `d1` is shorter than `2 * grad.len()`.
#[target_feature(enable = "avx2")]
pub unsafe fn backward_row(
    r0: &[f32],
    r1: &[f32],
    grad: &[f32],
    d0: &mut [f32],
    d1: &mut [f32],
) -> bool {
    let n = grad.len();
    assert!(r0.len() >= 2 * n && r1.len() >= 2 * n && d0.len() >= 2 * n && d1.len() >= 2 * n);
    if n >= 8 {
        // SAFETY: every block ends at or before n (blocks), lengths asserted above.
        blocks(n, 8, |i| unsafe { backward8(r0, r1, grad, d0, d1, i) });
    } else if n >= 4 {
        // SAFETY: as above.
        blocks(n, 4, |i| unsafe { backward4(r0, r1, grad, d0, d1, i) });
    } else {
        return false;
    }
    true
}
