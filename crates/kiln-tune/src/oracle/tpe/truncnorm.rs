//! The standard normal pieces TPE's truncated kernels need, as Optuna's
//! `optuna/samplers/_tpe/_truncnorm.py` computes them (log-space masses that stay finite far
//! in the tails).

use std::f64::consts::{FRAC_1_SQRT_2, PI};

/// `ln √(2π)`.
const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;

/// The standard normal CDF Φ(x).
pub(crate) fn ndtr(x: f64) -> f64 {
    0.5 * libm::erfc(-x * FRAC_1_SQRT_2)
}

/// `ln Φ(x)`, accurate for very negative `x` (Optuna's `_log_ndtr_single`: asymptotic series
/// below −20).
pub(crate) fn log_ndtr(x: f64) -> f64 {
    if x > 6.0 {
        return -ndtr(-x);
    }
    if x > -20.0 {
        return ndtr(x).ln();
    }
    let log_lhs = -0.5 * x * x - (-x).ln() - 0.5 * (2.0 * PI).ln();
    let (mut last, mut rhs, mut numerator, mut denom): (f64, f64, f64, f64) = (0.0, 1.0, 1.0, 1.0);
    let cons = 1.0 / (x * x);
    let mut sign = 1.0;
    let mut i = 0.0;
    while (last - rhs).abs() > f64::EPSILON && i < 100.0 {
        i += 1.0;
        last = rhs;
        sign = -sign;
        denom *= cons;
        numerator *= 2.0 * i - 1.0;
        rhs += sign * numerator * denom;
    }
    log_lhs + rhs.ln()
}

/// `ln(e^a − e^b)` for `a >= b`.
fn log_diff(a: f64, b: f64) -> f64 {
    a + (-(b - a).exp()).ln_1p()
}

/// `ln(Φ(b) − Φ(a))` for `a <= b` (Optuna's `_log_gauss_mass`: left tail directly, right
/// tail by symmetry, central case as `log1p(−Φ(a) − Φ(−b))`).
pub(crate) fn log_gauss_mass(a: f64, b: f64) -> f64 {
    if b <= 0.0 {
        log_diff(log_ndtr(b), log_ndtr(a))
    } else if a > 0.0 {
        log_gauss_mass(-b, -a)
    } else {
        (-ndtr(a) - ndtr(-b)).ln_1p()
    }
}

/// Φ⁻¹(p) for `p ∈ (0, 1)`: Acklam's rational approximation refined by one Halley step on
/// `erfc` (relative error near machine precision).
pub(crate) fn ndtri(p: f64) -> f64 {
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let lower = 0.02425;
    let mut x = if p < lower {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - lower {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    // One Halley step.
    let e = ndtr(x) - p;
    let u = e * (2.0 * PI).sqrt() * (x * x / 2.0).exp();
    x -= u / (1.0 + x * u / 2.0);
    x
}

/// A draw of the standard normal truncated to `[a, b]` from a uniform `q ∈ [0, 1)`
/// (inverse CDF, as Optuna's `_truncnorm.rvs`/`ppf`; the right tail by symmetry).
pub(crate) fn ppf(q: f64, a: f64, b: f64) -> f64 {
    if a > 0.0 {
        return -ppf(1.0 - q, -b, -a);
    }
    let (pa, pb) = (ndtr(a), ndtr(b));
    let x = ndtri(pa + q * (pb - pa));
    if x.is_nan() {
        return 0.5 * (a.max(-40.0) + b.min(40.0));
    }
    x.clamp(a, b)
}

/// `ln` of the density at `z` (standardised) of the standard normal truncated to `[a, b]`,
/// before the `− ln σ` of the scale.
pub(crate) fn log_pdf_std(z: f64, a: f64, b: f64) -> f64 {
    if z < a || z > b {
        return f64::NEG_INFINITY;
    }
    -0.5 * z * z - LN_SQRT_2PI - log_gauss_mass(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // Python: 0.5*math.erfc(-x/sqrt(2)), statistics.NormalDist().inv_cdf, and Optuna 5.0.0
        // `_truncnorm._log_ndtr` for x = -40.
        assert!((ndtr(1.0) - 0.841_344_746_068_542_9).abs() < 1e-15);
        assert!((ndtri(0.975) - 1.959_963_984_540_053_6).abs() < 1e-12);
        assert!((ndtri(1e-10) + 6.361_340_902_404_056).abs() < 1e-9);
        assert!((log_ndtr(-30.0) + 454.321_243_956_343_1).abs() < 1e-9);
        assert!((log_ndtr(-40.0) + 804.608_442_01).abs() < 1e-6);
        assert!((log_ndtr(-10.0) + 53.231_285_150_512_4).abs() < 1e-9);
        // ln(Φ(1) − Φ(−1)) = ln 0.6826894921370859
        assert!((log_gauss_mass(-1.0, 1.0) - 0.682_689_492_137_085_9_f64.ln()).abs() < 1e-14);
        // Far tail stays finite: ln(Φ(−40) − Φ(−41)) ≈ ln Φ(−40).
        let m = log_gauss_mass(40.0, 41.0);
        assert!(m.is_finite() && (m - log_ndtr(-40.0)).abs() < 1e-6);
    }

    #[test]
    fn ppf_inverts_within_bounds() {
        for &(a, b) in &[(-1.0, 2.0), (0.5, 3.0), (-5.0, -4.0), (-100.0, 0.01)] {
            for i in 0..20 {
                let q = (i as f64 + 0.5) / 20.0;
                let x = ppf(q, a, b);
                assert!(x >= a && x <= b, "{x} outside [{a}, {b}]");
                let back = (ndtr(x) - ndtr(a)) / (ndtr(b) - ndtr(a));
                if a > -8.0 && b < 8.0 {
                    assert!((back - q).abs() < 1e-9, "q {q} back {back} on [{a}, {b}]");
                }
            }
        }
    }
}
