//! Rounding float32 values to float16 or bfloat16 values, in float32: the CPU kernel of mixed
//! precision's rounding (`crate::precision::round`).
//!
//! Same results as Burn's `cast` to the 16-bit type and back (IEEE 754 round to nearest, ties
//! to even; float16 overflows to ±Inf beyond 65504 and has subnormals down to 2^-24; NaN stays
//! NaN), through the `half` crate's slice conversions (hardware F16C conversions on x86 CPUs that
//! have them), on rayon's pool, without the two intermediate tensors of a cast there and back.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

/// Values per task (and per stack buffer of 16-bit values).
const CHUNK: usize = 4096;

/// `src` rounded to float16 (`bfloat16 == false`) or bfloat16 values.
pub fn round_half(src: &[f32], bfloat16: bool) -> Vec<f32> {
    let mut out = vec![0f32; src.len()];
    out.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(dst, src)| {
            if bfloat16 {
                let mut buf = [bf16::ZERO; CHUNK];
                let buf = &mut buf[..src.len()];
                buf.convert_from_f32_slice(src);
                buf.convert_to_f32_slice(dst);
            } else {
                let mut buf = [f16::ZERO; CHUNK];
                let buf = &mut buf[..src.len()];
                buf.convert_from_f32_slice(src);
                buf.convert_to_f32_slice(dst);
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
            f32::MIN_POSITIVE,
        ];
        // Enough values for several chunks, including a partial one.
        xs.extend((0..10_000).map(|i| (i as f32 - 5000.0) * 0.0137));
        for bfloat16 in [false, true] {
            let got = round_half(&xs, bfloat16);
            for (x, g) in xs.iter().zip(&got) {
                let want = if bfloat16 {
                    bf16::from_f32(*x).to_f32()
                } else {
                    f16::from_f32(*x).to_f32()
                };
                assert_eq!(g.to_bits(), want.to_bits(), "{x} (bfloat16: {bfloat16})");
            }
        }
        assert!(round_half(&[f32::NAN], false)[0].is_nan());
        assert_eq!(round_half(&[65520.0], false)[0], f32::INFINITY);
    }
}
