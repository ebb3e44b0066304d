//! Short-vector helpers for the kernels' inner loops: rows cut into chunks of [`LANES`] floats,
//! each chunk one vector operation, and sums kept in [`LANES`] partial sums.
//!
//! The compiler vectorizes a plain loop by unrolling it 32 or 64 floats at a time, more than a
//! row of attention scores or a layer's features usually has, and a plain sum not at all (it
//! may not reorder float additions). Inlined into a [`super::cpu::multiversion`] kernel, these
//! become 8-wide AVX or AVX-512 operations (SSE2 pairs on the portable path). Results are the
//! same on every path: the same additions in the same order. Float32 sums for the attention and
//! layer-normalization rows, float64 ones ([`lane_sum`]) for per-channel statistics.

/// Floats per chunk.
pub const LANES: usize = 8;

/// A chunk as an array.
#[inline(always)]
fn chunk(c: &[f32]) -> [f32; LANES] {
    c.try_into().expect("a whole chunk")
}

/// `f` on every element of `p`.
#[inline(always)]
pub fn map(p: &mut [f32], f: impl Fn(f32) -> f32) {
    let mut chunks = p.chunks_exact_mut(LANES);
    for c in &mut chunks {
        let v = chunk(c).map(&f);
        c.copy_from_slice(&v);
    }
    for x in chunks.into_remainder() {
        *x = f(*x);
    }
}

/// `Σ f(p[j])`.
#[inline(always)]
pub fn sum_of(p: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = p.chunks_exact(LANES);
    let tail = chunks.remainder().iter().fold(0.0, |s, &x| s + f(x));
    for c in chunks {
        let c = chunk(c);
        for l in 0..LANES {
            acc[l] += f(c[l]);
        }
    }
    acc.iter().fold(0.0, |s, &x| s + x) + tail
}

/// `Σ p[j]`.
#[inline(always)]
pub fn sum(p: &[f32]) -> f32 {
    sum_of(p, |x| x)
}

/// `Σ a[j]·b[j]` over the shorter of the two.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .fold(0.0, |s, (x, y)| s + x * y);
    for (x, y) in ac.zip(bc) {
        let (x, y) = (chunk(x), chunk(y));
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().fold(0.0, |s, &x| s + x) + tail
}

/// `Σ f(a_i, b_i)` in float64 over eight independent lanes, so that it vectorizes (a fixed
/// order: the same result on every run): batch normalization's statistics and the
/// convolution's bias-gradient sum.
#[inline(always)]
pub fn lane_sum(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f64) -> f64 {
    let mut lanes = [0.0f64; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f64 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(&x, &y)| f(x, y))
        .sum();
    for (xa, xb) in ca.zip(cb) {
        for l in 0..8 {
            lanes[l] += f(xa[l], xb[l]);
        }
    }
    lanes.iter().sum::<f64>() + tail
}

/// The largest value of `p`, `-∞` when it is empty. NaN is not looked for (callers' later
/// arithmetic carries it).
#[inline(always)]
pub fn max(p: &[f32]) -> f32 {
    let larger = |a: f32, b: f32| if b > a { b } else { a };
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = p.chunks_exact(LANES);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| larger(m, x));
    for c in chunks {
        let c = chunk(c);
        for l in 0..LANES {
            acc[l] = larger(acc[l], c[l]);
        }
    }
    acc.into_iter().fold(tail, larger)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_compute_what_they_say_on_every_length() {
        for n in [0, 1, 7, 8, 9, 31, 64] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.7).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.3).cos()).collect();
            let close = |x: f32, y: f32| (x - y).abs() < 1e-5;
            assert!(close(sum(&a), a.iter().sum()));
            assert!(close(sum_of(&a, |x| x * x), a.iter().map(|x| x * x).sum()));
            assert!(close(
                dot(&a, &b),
                a.iter().zip(&b).map(|(x, y)| x * y).sum()
            ));
            assert_eq!(max(&a), a.iter().copied().fold(f32::NEG_INFINITY, f32::max));
            let mut m = a.clone();
            map(&mut m, |x| 2.0 * x);
            assert!(m.iter().zip(&a).all(|(x, y)| *x == 2.0 * y));
        }
    }
}
