//! Weight initializers with Keras' definitions (`keras/src/initializers/random_initializers.py`).

use rand::Rng;

/// `glorot_uniform`: `n` values uniform in `[-limit, limit]`, `limit = sqrt(6 / (fan_in + fan_out))`
/// (Glorot & Bengio, 2010). For convolutions the fans include the receptive field
/// (`kh * kw * channels`).
pub fn glorot_uniform(rng: &mut impl Rng, n: usize, fan_in: usize, fan_out: usize) -> Vec<f32> {
    let limit = (6.0 / (fan_in + fan_out).max(1) as f64).sqrt() as f32;
    (0..n).map(|_| rng.random_range(-limit..=limit)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn glorot_uniform_stays_within_its_limit_and_fills_it() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        // Dense(784 -> 128): limit = sqrt(6 / 912) = 0.081111...
        let w = glorot_uniform(&mut rng, 784 * 128, 784, 128);
        let limit = (6.0f32 / 912.0).sqrt();
        assert!((limit - 0.081_110_7).abs() < 1e-6);
        let max = w.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(max <= limit && max > 0.99 * limit);
        // Uniform on [-l, l] has variance l^2 / 3.
        let var = w.iter().map(|v| v * v).sum::<f32>() / w.len() as f32;
        assert!((var - limit * limit / 3.0).abs() < 0.02 * limit * limit);
    }
}
