//! The Adam / AdamW update in one pass over a parameter, its gradient and both moments.
//!
//! Keras 3's formulas (`keras/src/optimizers/adam.py`, and `Optimizer._apply_weight_decay` in
//! `keras/src/optimizers/base_optimizer.py` for AdamW's decoupled decay), at step `t` (1-based):
//!
//! ```text
//! w ← w − lr · weight_decay · w                      (AdamW only; before the update)
//! m ← m + (g − m) · (1 − β₁)
//! v ← v + (g² − v) · (1 − β₂)
//! α = lr · √(1 − β₂ᵗ) / (1 − β₁ᵗ)
//! w ← w − α · m / (√v + ε)
//! ```
//!
//! Burn's AdamW adds `ε` to the bias-corrected `√v̂` instead; kiln follows Keras, so that a
//! Keras user's `epsilon` means the same thing.

use rayon::prelude::*;

use super::cpu::{self, multiversion};

/// The hyperparameters of one update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    /// Learning rate `lr`.
    pub learning_rate: f64,
    /// First-moment decay `β₁`.
    pub beta_1: f64,
    /// Second-moment decay `β₂`.
    pub beta_2: f64,
    /// Denominator fuzz `ε`.
    pub epsilon: f64,
    /// Decoupled weight decay (0 for Adam).
    pub weight_decay: f64,
    /// The step number `t`, from 1.
    pub step: u64,
}

/// Elements per parallel task: large enough that a task's work dwarfs its scheduling.
const CHUNK: usize = 16 * 1024;

/// Updates `w`, `m` and `v` in place with the gradient `g` (all the same length).
///
/// # Panics
/// When the slices' lengths differ.
pub fn update(w: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32], s: &AdamStep) {
    assert!(w.len() == g.len() && m.len() == g.len() && v.len() == g.len());
    let t = s.step as i32;
    let alpha =
        (s.learning_rate * (1.0 - s.beta_2.powi(t)).sqrt() / (1.0 - s.beta_1.powi(t))) as f32;
    let decay = (1.0 - s.learning_rate * s.weight_decay) as f32;
    let (c1, c2, eps) = (
        (1.0 - s.beta_1) as f32,
        (1.0 - s.beta_2) as f32,
        s.epsilon as f32,
    );
    let path = cpu::path();
    w.par_chunks_mut(CHUNK)
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .zip(g.par_chunks(CHUNK))
        .for_each(|(((w, m), v), g)| {
            update_chunk(path, w, m, v, g, [c1, c2, eps, alpha, decay]);
        });
}

multiversion! {
    /// One chunk of [`update`], with `[1 - beta_1, 1 - beta_2, epsilon, alpha, decay]`.
    fn update_chunk(w: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32], k: [f32; 5]) {
        let [c1, c2, eps, alpha, decay] = k;
        for (((w, m), v), &g) in w.iter_mut().zip(m).zip(v).zip(g) {
            *m += (g - *m) * c1;
            *v += (g * g - *v) * c2;
            *w = *w * decay - alpha * *m / (v.sqrt() + eps);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three AdamW steps (lr 0.01, weight_decay 0.004, Keras' other defaults) and three Adam
    /// steps (lr 0.01) on a 4-vector, computed with Keras 3.15 / TensorFlow 2.21:
    ///
    /// ```python
    /// w = keras.Variable(np.array([0.5, -1.25, 2.0, 0.0], np.float32))
    /// opt = keras.optimizers.AdamW(learning_rate=0.01)   # or Adam(learning_rate=0.01)
    /// for g in grads: opt.apply_gradients([(g, w)]); print(w.numpy())
    /// ```
    #[test]
    // The Keras answers keep all the digits Python printed (float32 values as float64 text).
    #[allow(clippy::excessive_precision)]
    fn three_steps_match_keras() {
        let grads = [
            [0.1f32, -0.2, 0.3, 0.0],
            [-0.05, 0.4, 0.1, 1e-3],
            [0.2, 0.2, -0.3, -2.0],
        ];
        let adamw_after = [
            [
                0.48998039960861206f32,
                -1.2399502992630005,
                1.9899201393127441,
                0.0,
            ],
            [
                0.48729753494262695,
                -1.2435616254806519,
                1.9811300039291382,
                -0.0074178362265229225,
            ],
            [
                0.48069703578948975,
                -1.2487043142318726,
                1.9805668592453003,
                -0.0010323133319616318,
            ],
        ];
        let adam_final = [
            0.48075613379478455f32,
            -1.2488535642623901,
            1.98080575466156,
            -0.0010326099582016468,
        ];
        for (weight_decay, check_each) in [(0.004, true), (0.0, false)] {
            let mut w = vec![0.5f32, -1.25, 2.0, 0.0];
            let (mut m, mut v) = (vec![0.0f32; 4], vec![0.0f32; 4]);
            for (i, g) in grads.iter().enumerate() {
                let s = AdamStep {
                    learning_rate: 0.01,
                    beta_1: 0.9,
                    beta_2: 0.999,
                    epsilon: 1e-7,
                    weight_decay,
                    step: i as u64 + 1,
                };
                update(&mut w, &mut m, &mut v, g, &s);
                if check_each {
                    for (a, e) in w.iter().zip(&adamw_after[i]) {
                        assert!((a - e).abs() <= 2e-6 * (1.0 + e.abs()), "step {i}: {w:?}");
                    }
                }
            }
            if !check_each {
                for (a, e) in w.iter().zip(&adam_final) {
                    assert!((a - e).abs() <= 2e-6 * (1.0 + e.abs()), "adam: {w:?}");
                }
            }
        }
    }

    #[test]
    fn chunks_cover_long_parameters() {
        let n = 3 * CHUNK + 5;
        let g: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.1).sin()).collect();
        let (mut w, mut m, mut v) = (vec![1.0f32; n], vec![0.0f32; n], vec![0.0f32; n]);
        let s = AdamStep {
            learning_rate: 0.1,
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-7,
            weight_decay: 0.0,
            step: 1,
        };
        update(&mut w, &mut m, &mut v, &g, &s);
        // First step: m = 0.1 g, v = 0.001 g², alpha = 0.1 * sqrt(0.001) / 0.1, so the step is
        // lr * sign(g) (up to epsilon).
        for i in [0, CHUNK - 1, CHUNK, n - 1] {
            let want = if g[i] > 1e-3 {
                0.9
            } else if g[i] < -1e-3 {
                1.1
            } else {
                continue;
            };
            assert!((w[i] - want).abs() < 1e-4, "{i}: {} vs {want}", w[i]);
        }
    }
}
