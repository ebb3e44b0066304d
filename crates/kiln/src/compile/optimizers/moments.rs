//! Adamax and Nadam (Keras 3, `keras/src/optimizers/{adamax,nadam}.py`): Adam's relatives,
//! whose update needs the step count `t` (Keras' `iterations + 1`); their state is Burn's
//! [`AdaptiveMomentumState`] (`time`, `moment_1`, `moment_2`), as [`crate::compile::KerasAdam`]'s.

use burn::optim::{AdaptiveMomentumState, LearningRate};
use burn::prelude::*;

/// The previous state's moments and the step number of this update (1 for the first).
fn moments<const D: usize>(
    state: Option<AdaptiveMomentumState<D>>,
    g: &Tensor<D>,
) -> (Tensor<D>, Tensor<D>, usize) {
    match state {
        Some(s) => (s.moment_1, s.moment_2, s.time + 1),
        None => (g.zeros_like(), g.zeros_like(), 1),
    }
}

/// `m += (g - m)(1 - β₁)`: Keras' first moment, shared by Adam's family.
fn first_moment<const D: usize>(m: Tensor<D>, g: Tensor<D>, beta_1: f64) -> Tensor<D> {
    m.clone() + (g - m).mul_scalar(1.0 - beta_1)
}

/// `keras.optimizers.Adamax`: `m += (g - m)(1 - β₁)`, `u = max(β₂ u, |g|)`,
/// `w -= lr m / ((1 - β₁ᵗ)(u + ε))`. State: `moment_1` = m, `moment_2` = u.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KerasAdamax {
    /// First-moment decay.
    pub beta_1: f64,
    /// Decay of the infinity norm.
    pub beta_2: f64,
    /// Denominator fuzz.
    pub epsilon: f64,
}

impl KerasAdamax {
    fn update<const D: usize>(
        &self,
        lr: LearningRate,
        w: Tensor<D>,
        g: Tensor<D>,
        state: Option<AdaptiveMomentumState<D>>,
    ) -> (Tensor<D>, AdaptiveMomentumState<D>) {
        let (m, u, t) = moments(state, &g);
        let m = first_moment(m, g.clone(), self.beta_1);
        let u = u.mul_scalar(self.beta_2).max_pair(g.abs());
        let scale = 1.0 - self.beta_1.powi(t as i32);
        let w = w - m.clone().mul_scalar(lr) / u.clone().add_scalar(self.epsilon).mul_scalar(scale);
        (w, AdaptiveMomentumState::new(t, m, u))
    }
}

/// `keras.optimizers.Nadam` (Dozat, 2016): with `μₜ = β₁(1 - 0.5·0.96ᵗ)` and
/// `Πₜ = μ₁⋯μₜ` (Keras' `_u_product`), `m += (g - m)(1 - β₁)`, `v += (g² - v)(1 - β₂)`,
/// `m̂ = μₜ₊₁ m / (1 - Πₜ μₜ₊₁) + (1 - μₜ) g / (1 - Πₜ)`, `v̂ = v / (1 - β₂ᵗ)`,
/// `w -= lr m̂ / (sqrt(v̂) + ε)`. `Πₜ` follows from `t` (see [`KerasNadam::u_product`]), so the
/// state is `moment_1` = m, `moment_2` = v and the step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KerasNadam {
    /// First-moment decay.
    pub beta_1: f64,
    /// Second-moment decay.
    pub beta_2: f64,
    /// Denominator fuzz.
    pub epsilon: f64,
}

impl KerasNadam {
    /// `μₜ = β₁(1 - 0.5·0.96ᵗ)`.
    fn mu(&self, t: usize) -> f64 {
        self.beta_1 * (1.0 - 0.5 * 0.96f64.powi(t as i32))
    }

    /// `Πₜ = μ₁⋯μₜ`. From `t = 1000` on, `0.96ᵗ < 1e-17` and `μₜ` is `β₁` in float64, so the
    /// product's tail is a power of `β₁`.
    pub(super) fn u_product(&self, t: usize) -> f64 {
        const EXACT: usize = 1000;
        let head: f64 = (1..=t.min(EXACT)).map(|i| self.mu(i)).product();
        head * self.beta_1.powi(t.saturating_sub(EXACT) as i32)
    }
}

impl KerasNadam {
    fn update<const D: usize>(
        &self,
        lr: LearningRate,
        w: Tensor<D>,
        g: Tensor<D>,
        state: Option<AdaptiveMomentumState<D>>,
    ) -> (Tensor<D>, AdaptiveMomentumState<D>) {
        let (m, v, t) = moments(state, &g);
        let (mu_t, mu_next, product) = (self.mu(t), self.mu(t + 1), self.u_product(t));
        let m = first_moment(m, g.clone(), self.beta_1);
        let v = v.clone() + (g.clone().square() - v).mul_scalar(1.0 - self.beta_2);
        let m_hat = m.clone().mul_scalar(mu_next / (1.0 - product * mu_next))
            + g.mul_scalar((1.0 - mu_t) / (1.0 - product));
        let v_hat = v.clone().div_scalar(1.0 - self.beta_2.powi(t as i32));
        let w = w - m_hat.mul_scalar(lr) / v_hat.sqrt().add_scalar(self.epsilon);
        (w, AdaptiveMomentumState::new(t, m, v))
    }
}

optimizer_impls!(AdaptiveMomentumState: KerasAdamax, KerasNadam);
