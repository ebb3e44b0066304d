//! Keras 3's other optimizers as Burn optimizers ([`burn::optim::Optimizer`]), each with the
//! update of its `keras/src/optimizers/<name>.py` as tensor operations, so that
//! [`burn::optim::ModuleOptimizer`] drives them over a model's parameters and records their
//! state into checkpoints.
//!
//! Optimizers whose update needs the step count (Adamax, Nadam) keep Burn's
//! [`burn::optim::AdaptiveMomentumState`] (step, two moments); the others keep a
//! [`SlotState`] of up to three tensors named after their place (`first`, `second`, `third`),
//! each optimizer's doc saying which Keras variable each holds.

/// `impl Optimizer` for optimizers whose inherent `update(&self, lr, w, g, state) -> (w,
/// state)` does the step and whose state type (`$state<D>`) has a `to_device`.
macro_rules! optimizer_impls {
    ($state:ident: $($optimizer:ty),+) => {$(
        impl burn::optim::Optimizer for $optimizer {
            type State<const D: usize> = $state<D>;

            fn step<const D: usize>(
                &self,
                lr: burn::optim::LearningRate,
                w: Tensor<D>,
                g: Tensor<D>,
                state: Option<$state<D>>,
            ) -> (Tensor<D>, Option<$state<D>>) {
                let (w, state) = self.update(lr, w, g, state);
                (w, Some(state))
            }

            fn to_device<const D: usize>(state: $state<D>, device: &Device) -> $state<D> {
                state.to_device(device)
            }
        }
    )+};
}

mod accumulators;
mod moments;

pub use accumulators::{KerasAdadelta, KerasAdagrad, KerasLion, KerasRmsProp};
pub use moments::{KerasAdamax, KerasNadam};

use burn::optim::{RecordState, StateSink, StateSource};
use burn::prelude::*;

/// Up to three per-parameter tensors (Keras' optimizer variables of one model variable),
/// recorded as `first`, `second`, `third` (the absent ones not at all).
#[derive(Clone, Debug)]
pub struct SlotState<const D: usize> {
    /// Always present.
    pub first: Tensor<D>,
    /// An optional second variable.
    pub second: Option<Tensor<D>>,
    /// An optional third variable.
    pub third: Option<Tensor<D>>,
}

impl<const D: usize> SlotState<D> {
    /// A state of these slots.
    fn new(first: Tensor<D>, second: Option<Tensor<D>>, third: Option<Tensor<D>>) -> Self {
        SlotState {
            first,
            second,
            third,
        }
    }

    /// The state on `device` (by value, as Burn's states' `to_device`, which the
    /// `optimizer_impls` macro calls alike).
    #[allow(clippy::wrong_self_convention)]
    fn to_device(self, device: &Device) -> Self {
        SlotState {
            first: self.first.to_device(device),
            second: self.second.map(|t| t.to_device(device)),
            third: self.third.map(|t| t.to_device(device)),
        }
    }
}

impl<const D: usize> RecordState for SlotState<D> {
    fn state_flatten(&self, prefix: &str, out: &mut StateSink) {
        out.push_tensor(prefix, "first", self.first.clone().into_data());
        for (leaf, slot) in [("second", &self.second), ("third", &self.third)] {
            if let Some(t) = slot {
                out.push_tensor(prefix, leaf, t.clone().into_data());
            }
        }
    }

    fn state_unflatten(prefix: &str, src: &mut StateSource, device: &Device) -> Option<Self> {
        let mut take = |leaf| {
            src.take_tensor(prefix, leaf)
                .map(|data| Tensor::from_data(data, device))
        };
        Some(SlotState {
            first: take("first")?,
            second: take("second"),
            third: take("third"),
        })
    }
}

/// `x * decay + y * (1 - decay)`: Keras' moving averages (`rho * v + (1 - rho) * g²`).
fn blend<const D: usize>(x: Tensor<D>, y: Tensor<D>, decay: f64) -> Tensor<D> {
    x.mul_scalar(decay) + y.mul_scalar(1.0 - decay)
}

#[cfg(test)]
mod tests;
