//! The recent global gradient norms, for the NaN report's trend.
//!
//! A loss that turns NaN usually announces itself: the global gradient norm
//! (`sqrt(Σ g²)` over every trainable weight, `tf.linalg.global_norm`) grows by orders of
//! magnitude over the steps before. Computing it costs one pass over the gradients and a read
//! of one scalar, so it is sampled, not taken every step: the first
//! [`DENSE_STEPS`] steps of a run (where a too-high learning rate blows up), then every
//! [`SPARSE_EVERY`]-th step. The last [`KEPT`] samples are kept.

use std::collections::VecDeque;

use burn::optim::GradientsParams;
use serde::Serialize;

use crate::compile::global_norm;
use crate::model::Network;

/// Steps at the start of a run whose gradient norm is always sampled.
pub const DENSE_STEPS: u64 = 20;
/// After [`DENSE_STEPS`], one step in this many is sampled.
pub const SPARSE_EVERY: u64 = 10;
/// Samples kept (the oldest are dropped).
pub const KEPT: usize = 12;

/// One sampled global gradient norm.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GradNormSample {
    /// The run's step (optimizer iterations before the batch, Keras' `optimizer.iterations`).
    pub step: u64,
    /// `sqrt(Σ g²)` over the batch's gradients before clipping; NaN or Inf as computed (JSON
    /// `null`).
    pub norm: f64,
}

/// The sampled norms of the last steps, oldest first.
#[derive(Debug, Clone, Default)]
pub struct GradNormTrend {
    step: u64,
    samples: VecDeque<GradNormSample>,
}

impl GradNormTrend {
    /// Tells the trend which run step the next batch is (call before each training batch).
    pub fn at_step(&mut self, step: u64) {
        self.step = step;
    }

    /// Whether the current step is sampled.
    pub fn due(&self) -> bool {
        self.step < DENSE_STEPS || self.step.is_multiple_of(SPARSE_EVERY)
    }

    /// Samples `grads` (the gradients of `net`'s weights) when the current step is due.
    pub fn observe(&mut self, net: &Network, grads: &GradientsParams) {
        if !self.due() {
            return;
        }
        let Some(norm) = global_norm(net, grads) else {
            return;
        };
        let norm = f64::from(norm.into_scalar::<f32>());
        self.push(GradNormSample {
            step: self.step,
            norm,
        });
    }

    fn push(&mut self, sample: GradNormSample) {
        if self.samples.len() == KEPT {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<GradNormSample> {
        self.samples.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_the_first_steps_then_every_tenth_and_keeps_the_last_twelve() {
        let mut t = GradNormTrend::default();
        let due: Vec<u64> = (0..45)
            .filter(|&s| {
                t.at_step(s);
                t.due()
            })
            .collect();
        let expected: Vec<u64> = (0..20).chain([20, 30, 40]).collect();
        assert_eq!(due, expected);
        for s in 0..30 {
            t.push(GradNormSample {
                step: s,
                norm: s as f64,
            });
        }
        let kept = t.samples();
        assert_eq!(kept.len(), KEPT);
        assert_eq!(kept[0].step, 18);
        assert_eq!(kept[11].norm, 29.0);
    }
}
