//! The recent global gradient norms, for the NaN report's trend.
//!
//! A loss that turns NaN usually announces itself: the global gradient norm
//! (`sqrt(Σ g²)` over every trainable weight, `tf.linalg.global_norm`) grows by orders of
//! magnitude over the steps before. Computing it costs one pass over the gradients and a read
//! of one scalar, so it is sampled, not taken every step: the first
//! [`DENSE_STEPS`] steps of a run (where a too-high learning rate blows up), then every
//! [`SPARSE_EVERY`]-th step. The last [`KEPT`] samples are kept.

use std::collections::VecDeque;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::FloatDType;
use serde::Serialize;

use crate::model::Network;

/// Steps at the start of a run whose gradient norm is always sampled.
pub const DENSE_STEPS: u64 = 20;
/// After [`DENSE_STEPS`], one step in this many is sampled.
pub const SPARSE_EVERY: u64 = 10;
/// Samples kept (the oldest are dropped).
pub const KEPT: usize = 12;
/// Elements squared at a time: the norm's temporary memory (256 KiB in float32), so that
/// sampling never raises a step's peak memory by a gradient-sized tensor.
const CHUNK: usize = 1 << 16;

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
    /// With deferred reads (`steps_per_execution > 1`): the sums of squares of the sampled
    /// steps not yet read back, `(step, Σ g²)`.
    pending: Vec<(u64, Tensor<1>)>,
    defer: bool,
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
        let mut squares = ChunkedSumOfSquares { grads, sum: None };
        net.visit(&mut squares);
        let Some(sum) = squares.sum else {
            return;
        };
        if self.defer {
            self.pending.push((self.step, sum.reshape([1])));
            return;
        }
        let norm = f64::from(sum.into_scalar::<f32>()).sqrt();
        self.push(GradNormSample {
            step: self.step,
            norm,
        });
    }

    /// Keeps later samples on the device until [`GradNormTrend::settle`] (`true`), or reads
    /// each when it is taken (`false`, the default).
    pub fn defer(&mut self, defer: bool) {
        self.defer = defer;
    }

    /// Reads back the samples kept on the device (one host read for all).
    pub fn settle(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let (steps, sums): (Vec<u64>, Vec<Tensor<1>>) =
            std::mem::take(&mut self.pending).into_iter().unzip();
        let sums = Tensor::cat(sums, 0).into_data().convert::<f32>();
        let sums = sums.try_to_vec::<f32>().expect("float sums");
        for (step, sum) in steps.into_iter().zip(sums) {
            let norm = f64::from(sum).sqrt();
            self.push(GradNormSample { step, norm });
        }
    }

    /// Drops the samples not yet read back (their steps are about to be run again).
    pub fn discard_pending(&mut self) {
        self.pending.clear();
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

/// `Σ g²` over the visited parameters' gradients, in float32, squaring [`CHUNK`] elements at
/// a time (the same sum as `tf.linalg.global_norm`'s before the square root).
struct ChunkedSumOfSquares<'a> {
    grads: &'a GradientsParams,
    sum: Option<Tensor<1>>,
}

impl ModuleVisitor for ChunkedSumOfSquares<'_> {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        let Some(g) = self.grads.get::<D>(p.id) else {
            return;
        };
        let n = g.shape().num_elements();
        let flat = g.reshape([n]);
        for start in (0..n).step_by(CHUNK) {
            let part = flat
                .clone()
                .slice(start..(start + CHUNK).min(n))
                .cast(FloatDType::F32);
            let s = part.square().sum();
            self.sum = Some(match self.sum.take() {
                Some(acc) => acc + s,
                None => s,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chunked_norm_equals_the_global_norm() {
        use crate::model::{Activation, LayerKind, ModelSpec};
        let device = Device::flex().autodiff();
        // 300 x 300 = 90,000 elements: the kernel spans two chunks.
        let spec = ModelSpec::builder(&[300])
            .add(LayerKind::from(crate::model::layers::Dense {
                units: 300,
                activation: Activation::Linear,
                use_bias: true,
            }))
            .build()
            .unwrap();
        let net = Network::init(&spec, 3, &device);
        let x = Tensor::<2>::ones([2, 300], &device);
        let y = net.forward(&spec, crate::model::Act::Flat(x), true).output;
        let grads = GradientsParams::from_grads(y.square().sum().backward(), &net);
        let want = crate::compile::global_norm(&net, &grads)
            .unwrap()
            .into_scalar::<f32>();
        let mut t = GradNormTrend::default();
        t.observe(&net, &grads);
        let got = t.samples()[0].norm;
        assert!(
            (got - f64::from(want)).abs() <= 1e-5 * f64::from(want),
            "{got} vs {want}"
        );
    }

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
