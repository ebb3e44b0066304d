//! Peak multiply-add rate of one core: AVX-512 float32 FMA (`vfmadd231ps`) against AVX512_BF16's
//! dot product (`vdpbf16ps`), 24 independent accumulators each, nothing but the instruction in
//! the loop. Tells what the bfloat16 kernel (crates/kiln/src/kernels/bf16.rs) can gain at most on
//! this CPU. Standalone, no dependencies:
//!
//!     rustc -C opt-level=3 -o /tmp/peak-bf16 bench/peak-bf16.rs && /tmp/peak-bf16
use std::arch::x86_64::*;
use std::time::Instant;

/// `n` rounds of 24 `vdpbf16ps` (64 FLOPs each).
#[target_feature(enable = "avx512bf16,avx512f")]
unsafe fn bf16(n: usize) -> f32 {
    let mut acc = [_mm512_setzero_ps(); 24];
    let b0: __m512bh = std::mem::transmute(_mm512_set1_epi32(0x3f80_3f80));
    let b1: __m512bh = std::mem::transmute(_mm512_set1_epi32(0x3f80_3f81));
    for _ in 0..n {
        for i in 0..12 {
            let a: __m512bh = std::mem::transmute(_mm512_set1_epi32(0x3c00_3c00 + i as i32));
            acc[2 * i] = _mm512_dpbf16_ps(acc[2 * i], a, b0);
            acc[2 * i + 1] = _mm512_dpbf16_ps(acc[2 * i + 1], a, b1);
        }
    }
    acc.iter().map(|&v| _mm512_reduce_add_ps(v)).sum()
}

/// `n` rounds of 24 `vfmadd231ps` (32 FLOPs each).
#[target_feature(enable = "avx512f,fma")]
unsafe fn f32_fma(n: usize) -> f32 {
    let mut acc = [_mm512_setzero_ps(); 24];
    let (b0, b1) = (_mm512_set1_ps(1.0001), _mm512_set1_ps(0.9999));
    for _ in 0..n {
        for i in 0..12 {
            let a = _mm512_set1_ps(1e-3 * i as f32);
            acc[2 * i] = _mm512_fmadd_ps(a, b0, acc[2 * i]);
            acc[2 * i + 1] = _mm512_fmadd_ps(a, b1, acc[2 * i + 1]);
        }
    }
    acc.iter().map(|&v| _mm512_reduce_add_ps(v)).sum()
}

fn main() {
    if !(is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16")) {
        eprintln!("this CPU has no AVX512_BF16: nothing to compare");
        std::process::exit(1);
    }
    let n = 20_000_000;
    let t = Instant::now();
    let r = unsafe { bf16(n) };
    let bf = (n * 24 * 64) as f64 / t.elapsed().as_secs_f64() / 1e9;
    let t = Instant::now();
    let r2 = unsafe { f32_fma(n) };
    let fp = (n * 24 * 32) as f64 / t.elapsed().as_secs_f64() / 1e9;
    println!(
        "{{\"bf16_gflops\": {bf:.1}, \"f32_gflops\": {fp:.1}, \"ratio\": {:.2}, \"check\": {}}}",
        bf / fp,
        (r + r2).is_finite()
    );
}
