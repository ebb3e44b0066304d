//! Gradient accumulation (Keras' optimizer argument `gradient_accumulation_steps`): one
//! optimizer update every `N` training batches, with the mean of their gradients.
//!
//! Semantics (Keras 3, `keras/src/optimizers/base_optimizer.py`, `_backend_apply_gradients`):
//! the gradients of `N` micro-batches are summed and divided by `N`, then clipped (clipping
//! applies to the averaged gradients) and applied once. The optimizer's own step counter (Adam's
//! bias correction `1 - β^t`, Burn's `AdaptiveMomentumState::time`) counts updates, not
//! micro-batches, so `N` micro-batches of `B / N` examples give the weights of one batch of `B`
//! examples, up to float rounding. Keras 3.15 does the same: its `optimizer.iterations` is
//! `micro-steps // N` and Adam's `t` is `iterations + 1`; `tests/reference/gradient_reference.py`
//! checks that an AdamW with `gradient_accumulation_steps=2` ends on the weights of plain AdamW
//! steps on the means.
//!
//! Where kiln differs on purpose: when an epoch ends (or training stops) in the middle of an
//! accumulation, kiln applies what was accumulated, averaged over the micro-batches seen
//! (`sum / seen`, not `sum / N`), so each epoch's data shapes that epoch's weights and no
//! gradients are pending at an epoch boundary (a checkpoint there holds none). Keras keeps the
//! partial sum in its accumulators and continues it in the next epoch. Batches of unequal size
//! (a smaller last batch) are averaged as batches, each batch's loss being its own mean, as in
//! Keras. Learning-rate changes made by callbacks between micro-batches take effect at the
//! next update.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::prelude::*;

use super::grad_norms::GradNormTrend;
use super::profile::StepProfile;
use super::step::{StepOutput, apply_gradients};
use crate::batch::DeviceBatch;
use crate::compile::Compiled;
use crate::distribute::Strategy;
use crate::model::{ModelSpec, Network};

/// Accumulates gradients over `N` batches and applies the optimizer once per `N` (`N = 1`: an
/// update after every batch, nothing is held).
#[derive(Debug)]
pub struct GradientAccumulation {
    steps: usize,
    sum: Option<GradientsParams>,
    seen: usize,
    /// The sampled global gradient norms of the last batches (the NaN report's trend).
    pub grad_norms: GradNormTrend,
    /// How each batch's gradients are computed across replicas (default one device).
    pub strategy: Strategy,
}

impl GradientAccumulation {
    /// Accumulation over `steps` batches (`gradient_accumulation_steps`; 0 is taken as 1).
    pub fn new(steps: usize) -> GradientAccumulation {
        GradientAccumulation {
            steps: steps.max(1),
            sum: None,
            seen: 0,
            grad_norms: GradNormTrend::default(),
            strategy: Strategy::OneDevice,
        }
    }

    /// The same, computing each batch's gradients with `strategy` (the batch is the global
    /// batch; see [`crate::distribute`]).
    pub fn with_strategy(mut self, strategy: Strategy) -> GradientAccumulation {
        self.strategy = strategy;
        self
    }

    /// Micro-batches whose gradients wait for the next update.
    pub fn pending(&self) -> usize {
        self.seen
    }

    /// Trains on one batch: computes its gradients and reads its loss; on every `N`-th batch,
    /// applies the mean of the last `N` batches' gradients (clipped with `compiled`'s
    /// clipping) with `learning_rate`. Returns the network, the batch's loss and outputs, and
    /// whether the batch's gradients were used.
    ///
    /// With `skip_non_finite`, a batch whose loss is NaN or infinite changes nothing: its
    /// gradients are dropped and the network is returned as it was before the batch (moving
    /// statistics included), so the caller can report or roll back from a clean state.
    #[allow(clippy::too_many_arguments)]
    pub fn train_step(
        &mut self,
        net: Network,
        optim: &mut ModuleOptimizer,
        spec: &ModelSpec,
        compiled: &Compiled,
        batch: DeviceBatch,
        learning_rate: f64,
        skip_non_finite: bool,
        mut profile: Option<&mut StepProfile>,
    ) -> (Network, StepOutput, bool) {
        // Parameters are shared, not copied; the copy is dropped before the update so that the
        // optimizer still updates them in place.
        let before = skip_non_finite.then(|| net.clone());
        let (net, grads, pending) =
            self.strategy
                .compute_gradients(net, spec, compiled, batch, profile.as_deref_mut());
        let out = pending.read(profile.as_deref_mut());
        self.grad_norms.observe(&net, &grads);
        if let Some(before) = before
            && !out.loss.is_finite()
        {
            return (before, out, false);
        }
        let net = if self.steps == 1 {
            let clip = compiled.gradients.clipping();
            apply_gradients(
                net,
                optim,
                grads,
                clip,
                learning_rate,
                profile.as_deref_mut(),
            )
        } else {
            self.add(&net, grads);
            if self.seen == self.steps {
                self.apply(net, optim, compiled, learning_rate, profile)
            } else {
                net
            }
        };
        (net, out, true)
    }

    /// Applies what is accumulated, averaged over the micro-batches seen (end of an epoch, or
    /// of training); does nothing when nothing is pending.
    pub fn flush(
        &mut self,
        net: &mut Network,
        optim: &mut ModuleOptimizer,
        compiled: &Compiled,
        learning_rate: f64,
    ) {
        if self.seen > 0 {
            let taken = std::mem::replace(net, Network { layers: Vec::new() });
            *net = self.apply(taken, optim, compiled, learning_rate, None);
        }
    }

    /// Adds one batch's gradients of `module`'s parameters to the sum.
    fn add<M: Module>(&mut self, module: &M, grads: GradientsParams) {
        self.seen += 1;
        self.sum = Some(match self.sum.take() {
            None => grads,
            Some(mut sum) => {
                module.visit(&mut AddInto {
                    sum: &mut sum,
                    new: grads,
                });
                sum
            }
        });
    }

    /// The accumulated gradients divided by the micro-batches seen (`None` when none), and
    /// the accumulator emptied.
    fn take_mean<M: Module>(&mut self, module: &M) -> Option<GradientsParams> {
        let seen = std::mem::take(&mut self.seen);
        let mut grads = self.sum.take()?;
        if seen > 1 {
            // Keras: (g + accumulated) / steps, a division in the gradients' dtype.
            module.visit(&mut DivideBy {
                grads: &mut grads,
                n: seen as f64,
            });
        }
        Some(grads)
    }

    /// One update with the mean of what is accumulated.
    fn apply(
        &mut self,
        net: Network,
        optim: &mut ModuleOptimizer,
        compiled: &Compiled,
        learning_rate: f64,
        profile: Option<&mut StepProfile>,
    ) -> Network {
        match self.take_mean(&net) {
            Some(grads) => {
                let clip = compiled.gradients.clipping();
                apply_gradients(net, optim, grads, clip, learning_rate, profile)
            }
            None => net,
        }
    }
}

/// `sum[p] += new[p]` for each parameter `p` of the visited module.
struct AddInto<'a> {
    sum: &'a mut GradientsParams,
    new: GradientsParams,
}

impl ModuleVisitor for AddInto<'_> {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        let total = match (self.sum.remove::<D>(p.id), self.new.remove::<D>(p.id)) {
            (Some(a), Some(b)) => a + b,
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return,
        };
        self.sum.register::<D>(p.id, total);
    }
}

/// `grads[p] /= n` for each parameter `p` of the visited module.
struct DivideBy<'a> {
    grads: &'a mut GradientsParams,
    n: f64,
}

impl ModuleVisitor for DivideBy<'_> {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.remove::<D>(p.id) {
            self.grads.register::<D>(p.id, g.div_scalar(self.n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::KerasAdam;

    #[derive(Module, Debug)]
    struct One {
        w: Param<Tensor<1>>,
    }

    fn tensor(v: [f32; 4]) -> Tensor<1> {
        Tensor::from_data(TensorData::new(v.to_vec(), [4]), &Device::flex())
    }

    /// Keras 3.15, `tests/reference/gradient_reference.py`: AdamW(learning_rate=0.01,
    /// gradient_accumulation_steps=2) on w0 with four micro-batch gradients; two updates whose
    /// Adam step counter is 1 then 2 (the same weights as plain AdamW on the pairs' means).
    #[test]
    #[allow(clippy::excessive_precision)]
    fn two_updates_of_two_micro_batches_match_keras() {
        // ModuleOptimizer updates autodiff parameters with plain gradients.
        let w0 = Tensor::<1>::from_data(
            TensorData::new(vec![0.5f32, -1.25, 2.0, 0.0], [4]),
            &Device::flex().autodiff(),
        );
        let mut module = One {
            w: Param::from_tensor(w0),
        };
        let mut optim = ModuleOptimizer::from(KerasAdam {
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-7,
            weight_decay: 0.004,
        });
        let micro = [
            [0.1, -0.2, 0.3, 0.0],
            [-0.05, 0.4, 0.1, 1e-3],
            [0.2, 0.2, -0.3, -2.0],
            [0.3, -0.1, 0.0, 0.5],
        ];
        let mut acc = GradientAccumulation::new(2);
        for (i, g) in micro.into_iter().enumerate() {
            let mut grads = GradientsParams::new();
            grads.register(module.w.id, tensor(g));
            acc.add(&module, grads);
            assert_eq!(acc.pending(), i % 2 + 1);
            if acc.pending() == 2 {
                let mean = acc.take_mean(&module).unwrap();
                module = optim.step(0.01, module, mean);
            }
        }
        assert_eq!(acc.pending(), 0);
        assert!(acc.take_mean(&module).is_none());
        let got = module.w.val().into_data().try_to_vec::<f32>().unwrap();
        let keras = [
            0.481891006231308f32,
            -1.2692207098007202,
            1.9889473915100098,
            -0.002499891445040703,
        ];
        for (a, e) in got.iter().zip(&keras) {
            assert!(
                (a - e).abs() <= 2e-6 * (1.0 + e.abs()),
                "{got:?} vs {keras:?}"
            );
        }
    }

    #[test]
    fn a_partial_accumulation_is_averaged_over_the_batches_seen() {
        let module = One {
            w: Param::from_tensor(tensor([0.0; 4])),
        };
        let mut acc = GradientAccumulation::new(4);
        for g in [
            [1.0, 2.0, 3.0, 4.0],
            [3.0, 0.0, -3.0, 0.5],
            [2.0, 1.0, 0.0, 0.0],
        ] {
            let mut grads = GradientsParams::new();
            grads.register(module.w.id, tensor(g));
            acc.add(&module, grads);
        }
        let mean = acc.take_mean(&module).unwrap();
        let got = mean.get::<1>(module.w.id).unwrap().into_data();
        assert_eq!(got.try_to_vec::<f32>().unwrap(), vec![2.0, 1.0, 0.0, 1.5]);
    }
}
