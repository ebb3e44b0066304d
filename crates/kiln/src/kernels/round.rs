//! Rounding float32 values to float16 or bfloat16 values, in float32: the CPU kernel of mixed
//! precision's rounding (`crate::precision::round`).
//!
//! Same results as Burn's `cast` to the 16-bit type and back (IEEE 754 round to nearest, ties
//! to even; float16 overflows to ±Inf beyond 65504 and has subnormals down to 2^-24; NaN stays
//! NaN), on rayon's pool, without the two intermediate tensors of a cast there and back:
//! float16 through the `half` crate's slice conversions (hardware F16C conversions on x86 CPUs
//! that have them), bfloat16 by integer arithmetic on the bits ([`round_bf16`], the same
//! results as `half`'s scalar conversion) that the compiler vectorizes for the [`cpu`] path.

use std::mem::MaybeUninit;

use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use super::cpu::{self, multiversion};

/// Values per task (and per stack buffer of 16-bit values).
const CHUNK: usize = 4096;

/// Rounds `values` in place to float16 (`bfloat16 == false`) or bfloat16 values.
pub fn round_half(values: &mut [f32], bfloat16: bool) {
    let path = cpu::path();
    values
        .par_chunks_mut(CHUNK)
        .for_each(|chunk| round_chunk(path, chunk, bfloat16));
}

/// Rounds `values` in place as [`round_half`] does, on the calling thread: for a block of a
/// kernel's output that is still in cache.
pub fn round_block(values: &mut [f32], bfloat16: bool) {
    let path = cpu::path();
    for chunk in values.chunks_mut(CHUNK) {
        round_chunk(path, chunk, bfloat16);
    }
}

/// One chunk (at most [`CHUNK`] values) of [`round_half`].
fn round_chunk(path: cpu::CpuPath, chunk: &mut [f32], bfloat16: bool) {
    if bfloat16 {
        round_bf16_in_place(path, chunk);
    } else {
        let mut buf = [f16::ZERO; CHUNK];
        let buf = &mut buf[..chunk.len()];
        buf.convert_from_f32_slice(chunk);
        buf.convert_to_f32_slice(chunk);
    }
}

/// `src` rounded to float16 (`bfloat16 == false`) or bfloat16 values, in a new buffer.
pub fn rounded_half(src: &[f32], bfloat16: bool) -> Vec<f32> {
    let mut out: Vec<f32> = Vec::with_capacity(src.len());
    let path = cpu::path();
    // Every element is written below: no zeroing pass over the fresh buffer.
    out.spare_capacity_mut()[..src.len()]
        .par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(dst, src)| {
            if bfloat16 {
                round_bf16_into(path, dst, src);
            } else {
                let mut buf = [f16::ZERO; CHUNK];
                let mut rounded = [0f32; CHUNK];
                let (buf, rounded) = (&mut buf[..src.len()], &mut rounded[..src.len()]);
                buf.convert_from_f32_slice(src);
                buf.convert_to_f32_slice(rounded);
                dst.iter_mut().zip(rounded).for_each(|(d, v)| {
                    d.write(*v);
                });
            }
        });
    // SAFETY: every chunk of the first `src.len()` elements was written.
    unsafe { out.set_len(src.len()) };
    out
}

multiversion! {
    /// `dst[i] = round_bf16(src[i])`.
    fn round_bf16_into(dst: &mut [MaybeUninit<f32>], src: &[f32]) {
        dst.iter_mut().zip(src).for_each(|(d, &s)| {
            d.write(round_bf16(s));
        });
    }
}

multiversion! {
    /// `v[i] = round_bf16(v[i])`.
    fn round_bf16_in_place(v: &mut [f32]) {
        v.iter_mut().for_each(|x| *x = round_bf16(*x));
    }
}

/// `x` rounded to the nearest bfloat16 value, ties to even (adding `0x7FFF` plus the kept
/// part's lowest bit to the bits carries into the kept part exactly when the dropped half is
/// above one half, or one half with an odd kept part); beyond the largest bfloat16 value it
/// reaches ±Inf. NaN stays NaN, quieted, as `half::bf16::from_f32` keeps it.
#[inline(always)]
fn round_bf16(x: f32) -> f32 {
    let b = x.to_bits();
    let rounded = b.wrapping_add(0x7FFF + ((b >> 16) & 1)) & 0xFFFF_0000;
    let quiet_nan = (b | 0x0040_0000) & 0xFFFF_0000;
    let is_nan = b & 0x7FFF_FFFF > 0x7F80_0000;
    f32::from_bits(if is_nan { quiet_nan } else { rounded })
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn matches_the_scalar_conversions_on_edge_cases() {
        let mut xs = vec![
            0.0f32,
            -0.0,
            1.0 / 3.0,
            65504.0,
            65519.0,
            65520.0,
            -1e6,
            1e-8,
            3e-8,
            6.0e-5,
            1e30,
            1e-30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            f32::MAX,
            f32::from_bits(0x3F80_8000), // a tie with an even kept part: stays
            f32::from_bits(0x3F81_8000), // a tie with an odd kept part: rounds up
            f32::from_bits(0x7F80_0001), // a signalling NaN
            f32::from_bits(0xFFC1_2345), // a negative quiet NaN with a payload
            f32::from_bits(0x0000_8001), // a subnormal
        ];
        // Enough values for several chunks, including a partial one.
        xs.extend((0..10_000).map(|i| (i as f32 - 5000.0) * 0.0137));
        for bfloat16 in [false, true] {
            let mut got = xs.clone();
            round_half(&mut got, bfloat16);
            assert_eq!(
                rounded_half(&xs, bfloat16)
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>(),
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "in place and into a new buffer agree"
            );
            for (x, g) in xs.iter().zip(&got) {
                let want = if bfloat16 {
                    bf16::from_f32(*x).to_f32()
                } else {
                    f16::from_f32(*x).to_f32()
                };
                assert_eq!(g.to_bits(), want.to_bits(), "{x} (bfloat16: {bfloat16})");
            }
        }
        let one = |x: f32, bfloat16: bool| {
            let mut v = [x];
            round_half(&mut v, bfloat16);
            v[0]
        };
        assert!(one(f32::NAN, false).is_nan());
        assert_eq!(one(f32::MAX, true), f32::INFINITY);
        assert_eq!(one(65520.0, false), f32::INFINITY);
    }
}
