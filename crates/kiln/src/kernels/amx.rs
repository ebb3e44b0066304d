//! Intel AMX (Advanced Matrix Extensions) for the bfloat16 products of [`super::bf16`]: on
//! Sapphire Rapids and later Xeons, one `tdpbf16ps` multiplies a 16 x 32 block of bfloat16
//! values by a 32 x 16 block and adds the 16 x 16 float32 products to an accumulator tile,
//! 8,192 multiply-adds in one instruction (AVX512_BF16's `vdpbf16ps` does 32).
//!
//! The operands come packed as [`super::bf16`] packs them: `a` as rows of `k2` pairs, `b` in
//! panels of [`NR`] columns, each `k2` runs of [`NR`] pairs. That is already the layout the
//! tiles load: 16 rows of `a` x 16 pairs is a 16 x 64-byte tile with row stride `4 k2`, and
//! 16 pairs x 16 columns of a `b` panel is a 16 x 64-byte tile with row stride `4 NR` (Intel's
//! "VNNI" layout). `k2` must be a multiple of [`PAIRS`] with zero pairs at the end, and `a`
//! padded to a multiple of [`MR`] rows (their results are never stored).
//!
//! A block of [`MR`] x [`NR`] outputs lives in four accumulator tiles for the whole `k` loop;
//! two tiles of `a` and two of `b` are loaded per step, and four `tdpbf16ps` use them. Each
//! product of two bfloat16 values is exact in float32 and the sums are float32, as with
//! `vdpbf16ps`; the order of the sums inside one instruction is the hardware's, the same for
//! every element whatever the rows beside it. Inputs and results below float32's normal range
//! are flushed to zero, as the instruction defines.
//!
//! [`cpu::has_amx`] says whether the CPU has AMX and Linux lets this process use it, and
//! [`cpu::amx`] whether kiln uses it. Each call loads the tile configuration on its own thread
//! and releases the tiles when it is done.
//!
//! [`cpu::has_amx`]: super::cpu::has_amx
//! [`cpu::amx`]: super::cpu::amx

/// Output rows per block: two tiles of 16.
pub(super) const MR: usize = 32;
/// Output columns per block: two tiles of 16 (the `b` panel width of [`super::bf16`]).
pub(super) const NR: usize = 32;
/// Pairs of `k` per step: one tile row holds 16 pairs (64 bytes).
pub(super) const PAIRS: usize = 16;

/// The 64-byte tile configuration (`ldtilecfg`'s operand): palette 1, every one of the 8 tiles
/// 16 rows of 64 bytes.
#[cfg(target_arch = "x86_64")]
#[repr(C, align(64))]
struct Config {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    bytes_per_row: [u16; 16],
    rows: [u8; 16],
}

#[cfg(target_arch = "x86_64")]
impl Config {
    fn all_full() -> Config {
        let mut c = Config {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            bytes_per_row: [0; 16],
            rows: [0; 16],
        };
        c.bytes_per_row[..8].fill(64);
        c.rows[..8].fill(16);
        c
    }
}

/// `dst (+)= a @ b`, `m x n`, from operands packed as the module documentation says.
///
/// # Safety
/// [`super::cpu::has_amx`] is `true`; `pa` holds `m` rounded up to [`MR`] rows of `k2` pairs, `pb`
/// `n` rounded up to [`NR`] columns of `k2` pairs; `k2` is a multiple of [`PAIRS`]; `dst` is
/// valid for `m * n` writes (and reads with `accumulate`) and overlaps neither.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn multiply(
    m: usize,
    n: usize,
    k2: usize,
    pa: &[u32],
    pb: &[u32],
    dst: *mut f32,
    accumulate: bool,
) {
    assert!(k2.is_multiple_of(PAIRS) && pa.len() >= m.div_ceil(MR) * MR * k2);
    assert!(pb.len() >= n.div_ceil(NR) * NR * k2);
    let config = Config::all_full();
    // SAFETY: `cpu::has_amx()` (the caller's contract): the CPU has AMX and the process may use it.
    unsafe { std::arch::asm!("ldtilecfg [{0}]", in(reg) &config, options(nostack)) };
    let mut block = [0f32; MR * NR];
    for panel in 0..n.div_ceil(NR) {
        let cols = NR.min(n - panel * NR);
        let b = &pb[panel * k2 * NR..(panel + 1) * k2 * NR];
        for row_block in 0..m.div_ceil(MR) {
            let rows = MR.min(m - row_block * MR);
            let a = &pa[row_block * MR * k2..(row_block + 1) * MR * k2];
            // SAFETY: the block's first element lies in `dst`, its `rows x cols` too.
            let out = unsafe { dst.add(row_block * MR * n + panel * NR) };
            if !accumulate && rows == MR && cols == NR {
                // A whole block: the tiles go straight to `dst`.
                // SAFETY: the slices hold the tiles `products` loads (the asserts above); the
                // block's `MR x NR` floats, rows `n` apart, lie in `dst`.
                unsafe { products(k2, a, b, out, n) };
                continue;
            }
            // SAFETY: as above, into `block` (`MR x NR`, rows `NR` apart).
            unsafe { products(k2, a, b, block.as_mut_ptr(), NR) };
            for (r, src) in block.chunks_exact(NR).take(rows).enumerate() {
                // SAFETY: row `r < rows` of the block, `cols` elements: in bounds of `dst`.
                let row = unsafe { std::slice::from_raw_parts_mut(out.add(r * n), cols) };
                // Element by element: a call to `memcpy` per short row cost more than the copy.
                match accumulate {
                    true => row.iter_mut().zip(src).for_each(|(d, s)| *d += s),
                    false => row.iter_mut().zip(src).for_each(|(d, s)| *d = *s),
                }
            }
        }
    }
    // SAFETY: as `ldtilecfg` above.
    unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
}

/// One [`MR`] x [`NR`] block of `a @ b` over all `k2` pairs into `out` (row-major, rows
/// `stride` floats apart).
///
/// # Safety
/// The tile configuration of [`Config::all_full`] is loaded on this thread; `a` holds [`MR`]
/// rows of `k2` pairs, `b` `k2` runs of [`NR`] pairs, `k2` a multiple of [`PAIRS`]; `out` is
/// valid for [`MR`] rows of [`NR`] floats, `stride` apart.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn products(k2: usize, a: &[u32], b: &[u32], out: *mut f32, stride: usize) {
    use std::arch::asm;
    let a_stride = 4 * k2; // bytes from one row of `a` to the next
    let b_stride = 4 * NR;
    let half = 16 * k2; // `a`'s second tile: 16 rows further on
    // SAFETY (every block): tile loads and stores stay inside `a`, `b` and `out` (the
    // caller's contract on their lengths); the tiles are configured.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        );
        for step in 0..k2 / PAIRS {
            let a0 = a.as_ptr().add(step * PAIRS);
            let b0 = b.as_ptr().add(step * PAIRS * NR);
            asm!(
                "tileloadd tmm4, [{a0} + {sa}*1]",
                "tileloadd tmm5, [{a1} + {sa}*1]",
                "tileloadd tmm6, [{b0} + {sb}*1]",
                "tileloadd tmm7, [{b1} + {sb}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                a0 = in(reg) a0,
                a1 = in(reg) a0.add(half),
                b0 = in(reg) b0,
                b1 = in(reg) b0.add(16),
                sa = in(reg) a_stride,
                sb = in(reg) b_stride,
                options(nostack, readonly)
            );
        }
        let o = out;
        asm!(
            "tilestored [{o0} + {s}*1], tmm0",
            "tilestored [{o1} + {s}*1], tmm1",
            "tilestored [{o2} + {s}*1], tmm2",
            "tilestored [{o3} + {s}*1], tmm3",
            o0 = in(reg) o,
            o1 = in(reg) o.add(16),
            o2 = in(reg) o.add(16 * stride),
            o3 = in(reg) o.add(16 * stride + 16),
            s = in(reg) 4 * stride,
            options(nostack)
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn multiply(
    _: usize,
    _: usize,
    _: usize,
    _: &[u32],
    _: &[u32],
    _: *mut f32,
    _: bool,
) {
    unreachable!("cpu::has_amx is false off x86-64")
}
