//! RMSprop, Adagrad, Adadelta and Lion (Keras 3, `keras/src/optimizers/`): optimizers whose
//! update needs no step count, with their variables in a [`SlotState`].

use burn::optim::LearningRate;
use burn::prelude::*;

use super::{SlotState, blend};

/// `keras.optimizers.RMSprop`: `v = rho v + (1 - rho) g²`; centered, also
/// `a = rho a + (1 - rho) g` and the denominator `v - a² + ε`, else `v + ε`;
/// `increment = lr g / sqrt(denominator)`; with momentum `μ > 0`, `m = μ m + increment` and
/// `w -= m`, else `w -= increment`. State: `first` velocity, `second` momentum (`μ > 0`),
/// `third` average gradient (centered).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KerasRmsProp {
    /// Decay of the moving average of squared gradients.
    pub rho: f64,
    /// Momentum; 0 disables it.
    pub momentum: f64,
    /// Added inside the square root.
    pub epsilon: f64,
    /// Normalize by the variance instead of the second moment.
    pub centered: bool,
}

impl KerasRmsProp {
    fn update<const D: usize>(
        &self,
        lr: LearningRate,
        w: Tensor<D>,
        g: Tensor<D>,
        state: Option<SlotState<D>>,
    ) -> (Tensor<D>, SlotState<D>) {
        let (v, m, a) = match state {
            Some(s) => (s.first, s.second, s.third),
            None => (g.zeros_like(), None, None),
        };
        let v = blend(v, g.clone().square(), self.rho);
        let (a, denominator) = if self.centered {
            let a = blend(a.unwrap_or_else(|| g.zeros_like()), g.clone(), self.rho);
            let d = (v.clone() - a.clone().square()).add_scalar(self.epsilon);
            (Some(a), d)
        } else {
            (None, v.clone().add_scalar(self.epsilon))
        };
        let increment = g.clone().mul_scalar(lr) / denominator.sqrt();
        let (w, m) = if self.momentum > 0.0 {
            let m = m
                .unwrap_or_else(|| g.zeros_like())
                .mul_scalar(self.momentum)
                + increment;
            (w - m.clone(), Some(m))
        } else {
            (w - increment, None)
        };
        (w, SlotState::new(v, m, a))
    }
}

/// `keras.optimizers.Adagrad`: the accumulator starts at `initial_accumulator_value`,
/// `acc += g²`, `w -= lr g / sqrt(acc + ε)`. State: `first` accumulator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KerasAdagrad {
    /// The accumulator's starting value.
    pub initial_accumulator_value: f64,
    /// Added inside the square root.
    pub epsilon: f64,
}

impl KerasAdagrad {
    fn update<const D: usize>(
        &self,
        lr: LearningRate,
        w: Tensor<D>,
        g: Tensor<D>,
        state: Option<SlotState<D>>,
    ) -> (Tensor<D>, SlotState<D>) {
        let acc = match state {
            Some(s) => s.first,
            None => g.full_like(self.initial_accumulator_value),
        };
        let acc = acc + g.clone().square();
        let w = w - g.mul_scalar(lr) / acc.clone().add_scalar(self.epsilon).sqrt();
        (w, SlotState::new(acc, None, None))
    }
}

/// `keras.optimizers.Adadelta`: `G = rho G + (1 - rho) g²`,
/// `Δ = -sqrt(D + ε) g / sqrt(G + ε)`, `D = rho D + (1 - rho) Δ²`, `w += lr Δ`.
/// State: `first` accumulated gradient `G`, `second` accumulated delta `D`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KerasAdadelta {
    /// Decay of both accumulators.
    pub rho: f64,
    /// Added inside the square roots.
    pub epsilon: f64,
}

impl KerasAdadelta {
    fn update<const D: usize>(
        &self,
        lr: LearningRate,
        w: Tensor<D>,
        g: Tensor<D>,
        state: Option<SlotState<D>>,
    ) -> (Tensor<D>, SlotState<D>) {
        let (grads, deltas) = match state {
            Some(s) => (s.first, s.second.unwrap_or_else(|| g.zeros_like())),
            None => (g.zeros_like(), g.zeros_like()),
        };
        let rms = |x: Tensor<D>| x.add_scalar(self.epsilon).sqrt();
        let grads = blend(grads, g.clone().square(), self.rho);
        let delta = (rms(deltas.clone()) * g / rms(grads.clone())).neg();
        let deltas = blend(deltas, delta.clone().square(), self.rho);
        (
            w + delta.mul_scalar(lr),
            SlotState::new(grads, Some(deltas), None),
        )
    }
}

/// `keras.optimizers.Lion` (Chen et al., 2023): `w -= lr sign(β₁ m + (1 - β₁) g)`, then
/// `m = β₂ m + (1 - β₂) g`. State: `first` momentum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KerasLion {
    /// Interpolation of the update direction.
    pub beta_1: f64,
    /// Decay of the momentum.
    pub beta_2: f64,
}

impl KerasLion {
    fn update<const D: usize>(
        &self,
        lr: LearningRate,
        w: Tensor<D>,
        g: Tensor<D>,
        state: Option<SlotState<D>>,
    ) -> (Tensor<D>, SlotState<D>) {
        let m = state.map_or_else(|| g.zeros_like(), |s| s.first);
        let direction = blend(m.clone(), g.clone(), self.beta_1).sign();
        (
            w - direction.mul_scalar(lr),
            SlotState::new(blend(m, g, self.beta_2), None, None),
        )
    }
}

optimizer_impls!(SlotState: KerasRmsProp, KerasAdagrad, KerasAdadelta, KerasLion);
