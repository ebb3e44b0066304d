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

//!
//! Mixed precision and memory (see [`crate::precision`] and `oom`): the accumulation also
//! holds the step's [`LossScale`] (Keras' `LossScaleOptimizer`: with accumulation, every
//! micro-batch is one of its steps, and a micro-batch with non-finite gradients is left out of
//! the mean) and the number of parts a batch is computed in after an out-of-memory failure.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::prelude::*;

use super::grad_norms::GradNormTrend;
use super::oom;
use crate::batch::DeviceBatch;
use crate::compile::Compiled;
use crate::distribute::Strategy;
use crate::error::{KilnError, Result};
use crate::logs::StepProfile;
use crate::model::{ModelSpec, Network};
use crate::precision::{LossScale, LossScaleOptions, ScaleUpdate, unscale};
use crate::step::{PendingOutput, StepOutput, apply_gradients};

/// Accumulates gradients over `N` batches and applies the optimizer once per `N` (`N = 1`: an
/// update after every batch, nothing is held). Also the step's loss scale and out-of-memory
/// recovery (see the module docs).
#[derive(Debug)]
pub struct GradientAccumulation {
    steps: usize,
    sum: Option<GradientsParams>,
    seen: usize,
    /// The sampled global gradient norms of the last batches (the NaN report's trend).
    pub grad_norms: GradNormTrend,
    loss_scale: Option<LossScale>,
    overflow_skips: u64,
    parts: usize,
    calls: u64,
    inject_oom_at: Option<u64>,
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
            loss_scale: None,
            overflow_skips: 0,
            parts: 1,
            calls: 0,
            inject_oom_at: None,
            strategy: Strategy::OneDevice,
        }
    }

    /// The same, computing each batch's gradients with `strategy` (the batch is the global
    /// batch; see [`crate::distribute`]).
    pub fn with_strategy(mut self, strategy: Strategy) -> GradientAccumulation {
        self.strategy = strategy;
        self
    }

    /// With Keras' dynamic loss scaling (`None`: without), starting at
    /// `options.initial_scale`.
    pub fn with_loss_scale(mut self, options: Option<LossScaleOptions>) -> GradientAccumulation {
        self.loss_scale = options.map(LossScale::new);
        self
    }

    /// The loss scale's state (`None` without loss scaling), for logs and checkpoints.
    pub fn loss_scale(&self) -> Option<LossScale> {
        self.loss_scale
    }

    /// Continues from a saved loss-scale state (a resume); ignored without loss scaling.
    pub fn restore_loss_scale(&mut self, state: LossScale) {
        if self.loss_scale.is_some() {
            self.loss_scale = Some(state);
        }
    }

    /// Steps skipped for non-finite gradients (loss-scale overflows) since the last call.
    pub fn take_overflow_skips(&mut self) -> u64 {
        std::mem::take(&mut self.overflow_skips)
    }

    /// The number of parts each batch is computed in (1, or more after out-of-memory
    /// failures).
    pub fn parts(&self) -> usize {
        self.parts
    }

    /// Makes the first attempt of training batch `step` (0-based, counted over this
    /// accumulation's `train_step` calls) fail as if it ran out of memory: the test hook of
    /// the recovery path (also `KILN_TEST_OOM_AT_STEP`).
    pub fn inject_oom_at(&mut self, step: Option<u64>) {
        self.inject_oom_at = step;
    }

    /// Micro-batches whose gradients wait for the next update.
    pub fn pending(&self) -> usize {
        self.seen
    }

    /// Trains on one batch: computes its gradients and reads its loss; on every `N`-th batch,
    /// applies the mean of the last `N` batches' gradients (clipped with `compiled`'s
    /// clipping) with `learning_rate`. Returns the network, the batch's loss and outputs, and
    /// `false` when a non-finite loss dropped the batch (`skip_non_finite`).
    ///
    /// With `skip_non_finite`, a batch whose loss is NaN or infinite changes nothing: its
    /// gradients are dropped and the network is returned as it was before the batch (moving
    /// statistics included), so the caller can report or roll back from a clean state.
    ///
    /// With a loss scale, the loss is multiplied by the scale before backward and the
    /// gradients divided by it; when one of them is not finite (an overflow), the batch's
    /// gradients are dropped, the network is returned as before the batch (moving statistics
    /// included), the scale is halved, and the batch still counts in the metrics (`true`), as
    /// Keras' `LossScaleOptimizer` skips only the update.
    ///
    /// # Errors
    /// [`KilnError::OutOfMemory`] when the batch does not fit even one example at a time.
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
    ) -> Result<(Network, StepOutput, bool)> {
        // Parameters are shared, not copied; `before` is dropped before the update so that the
        // optimizer still updates them in place.
        let before = net;
        let (net, grads, pending, finite) =
            self.gradients(&before, spec, compiled, &batch, profile.as_deref_mut())?;
        self.calls += 1;
        let out = pending.read(profile.as_deref_mut());
        // Unscaled gradients (mixed_float16 divides them by the loss scale first).
        self.grad_norms.observe(&net, &grads);
        if skip_non_finite && !out.loss.is_finite() {
            return Ok((before, out, false));
        }
        if let Some(scale) = self.loss_scale.as_mut()
            && scale.update(finite) == ScaleUpdate::SkipAndShrink
        {
            self.overflow_skips += 1;
            return Ok((before, out, true));
        }
        drop(before);
        let update = Update {
            optim,
            spec,
            compiled,
            learning_rate,
        };
        Ok((self.update(net, grads, update, profile), out, true))
    }

    /// [`GradientAccumulation::train_step`] without reading anything back: the update is
    /// applied whatever the loss, which stays on the device with the outputs (the caller reads
    /// them later, see [`PendingOutput::read_all`]). Only without a loss scale (whose skip
    /// decision needs each step's overflow answer on the host).
    ///
    /// # Errors
    /// As [`GradientAccumulation::train_step`].
    #[allow(clippy::too_many_arguments)]
    pub fn train_step_deferred(
        &mut self,
        net: Network,
        optim: &mut ModuleOptimizer,
        spec: &ModelSpec,
        compiled: &Compiled,
        batch: DeviceBatch,
        learning_rate: f64,
        mut profile: Option<&mut StepProfile>,
    ) -> Result<(Network, PendingOutput)> {
        debug_assert!(
            self.loss_scale.is_none(),
            "deferred reads without a loss scale"
        );
        let (updated, grads, pending, _) =
            self.gradients(&net, spec, compiled, &batch, profile.as_deref_mut())?;
        drop(net);
        self.calls += 1;
        self.grad_norms.observe(&updated, &grads);
        let update = Update {
            optim,
            spec,
            compiled,
            learning_rate,
        };
        Ok((self.update(updated, grads, update, profile), pending))
    }

    /// Applies `grads` now (no accumulation) or adds them to the window, applying the
    /// window's mean when it is complete.
    fn update(
        &mut self,
        net: Network,
        grads: GradientsParams,
        u: Update,
        profile: Option<&mut StepProfile>,
    ) -> Network {
        let rate = u.learning_rate;
        if self.steps == 1 {
            let clip = u.compiled.gradients.clipping();
            return apply_gradients(net, u.optim, u.spec, grads, clip, rate, profile);
        }
        self.add(&net, grads);
        if self.seen == self.steps {
            self.apply(net, u.optim, u.spec, u.compiled, rate, profile)
        } else {
            net
        }
    }

    /// The batch's unscaled gradients, computed in `self.parts` parts, retrying in more parts
    /// after an out-of-memory failure; and whether they are all finite (checked only with a
    /// loss scale, `true` otherwise).
    fn gradients(
        &mut self,
        net: &Network,
        spec: &ModelSpec,
        compiled: &Compiled,
        batch: &DeviceBatch,
        mut profile: Option<&mut StepProfile>,
    ) -> Result<(Network, GradientsParams, PendingOutput, bool)> {
        let scale = self.loss_scale.map(|s| s.scale);
        loop {
            let inject = self.inject_oom_at == Some(self.calls);
            if inject {
                self.inject_oom_at = None;
            }
            let parts = self.parts;
            let attempt = catch_unwind(AssertUnwindSafe(|| {
                if inject {
                    std::panic::panic_any(oom::InjectedOom);
                }
                gradients_in_parts(
                    &mut self.strategy,
                    net.clone(),
                    spec,
                    compiled,
                    batch,
                    parts,
                    scale,
                    profile.as_deref_mut(),
                )
            }));
            let payload = match attempt {
                Ok(r) => return Ok(r),
                Err(p) if oom::is_out_of_memory(&*p) => p,
                Err(p) => resume_unwind(p),
            };
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "allocation failure".into());
            let message = message.lines().next().unwrap_or("").to_string();
            drop(payload);
            oom::device_of(batch).memory_cleanup();
            let per_part = batch.size.div_ceil(parts);
            if per_part <= 1 {
                return Err(KilnError::OutOfMemory {
                    step: self.calls,
                    batch_size: batch.size,
                    message,
                });
            }
            self.parts = parts * 2;
            eprintln!(
                "warning: out of memory in training batch {} ({} examples in {parts} part(s) of \
                 up to {per_part}: {message}); memory released, retrying it in {} parts of up \
                 to {} with their gradients accumulated (same batch size, same update); later \
                 batches too",
                self.calls,
                batch.size,
                self.parts,
                batch.size.div_ceil(self.parts)
            );
        }
    }

    /// Applies what is accumulated, averaged over the micro-batches seen (end of an epoch, or
    /// of training); does nothing when nothing is pending.
    pub fn flush(
        &mut self,
        net: &mut Network,
        optim: &mut ModuleOptimizer,
        spec: &ModelSpec,
        compiled: &Compiled,
        learning_rate: f64,
    ) {
        if self.seen > 0 {
            let taken = std::mem::replace(net, Network { layers: Vec::new() });
            *net = self.apply(taken, optim, spec, compiled, learning_rate, None);
        }
    }

    /// Adds one batch's gradients of `module`'s parameters to the sum.
    fn add<M: Module>(&mut self, module: &M, grads: GradientsParams) {
        self.seen += 1;
        self.sum = Some(add_grads(module, self.sum.take(), grads));
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
        spec: &ModelSpec,
        compiled: &Compiled,
        learning_rate: f64,
        profile: Option<&mut StepProfile>,
    ) -> Network {
        match self.take_mean(&net) {
            Some(grads) => {
                let clip = compiled.gradients.clipping();
                apply_gradients(net, optim, spec, grads, clip, learning_rate, profile)
            }
            None => net,
        }
    }
}

/// What an optimizer update needs besides the network and its gradients.
struct Update<'a> {
    optim: &'a mut ModuleOptimizer,
    spec: &'a ModelSpec,
    compiled: &'a Compiled,
    learning_rate: f64,
}

/// `sum + grads` parameter by parameter (`grads` when there is no sum yet).
fn add_grads<M: Module>(
    module: &M,
    sum: Option<GradientsParams>,
    grads: GradientsParams,
) -> GradientsParams {
    match sum {
        None => grads,
        Some(mut sum) => {
            module.visit(&mut AddInto {
                sum: &mut sum,
                new: grads,
            });
            sum
        }
    }
}

/// The gradients of `batch`'s mean loss computed in `parts` parts (each part's loss weighted by
/// its share of the examples, the gradients summed), multiplied by `scale` during backward and
/// divided by it after; with a scale, whether they are all finite.
#[allow(clippy::too_many_arguments)]
fn gradients_in_parts(
    strategy: &mut Strategy,
    net: Network,
    spec: &ModelSpec,
    compiled: &Compiled,
    batch: &DeviceBatch,
    parts: usize,
    scale: Option<f64>,
    mut profile: Option<&mut StepProfile>,
) -> (Network, GradientsParams, PendingOutput, bool) {
    let factor = scale.unwrap_or(1.0);
    let (net, grads, pending) = if parts <= 1 {
        let whole = oom::split(batch, 1).pop().expect("one part");
        strategy.compute_gradients(net, spec, compiled, whole, factor, profile)
    } else {
        let total = batch.size.max(1) as f64;
        let (mut net, mut sum, mut outs) = (net, None, Vec::new());
        for part in oom::split(batch, parts) {
            let share = part.size as f64 / total;
            let (n, g, p) = strategy.compute_gradients(
                net,
                spec,
                compiled,
                part,
                factor * share,
                profile.as_deref_mut(),
            );
            sum = Some(add_grads(&n, sum, g));
            outs.push((p, share));
            net = n;
        }
        let grads = sum.expect("at least one part");
        (net, grads, PendingOutput::combine(outs))
    };
    match scale {
        Some(s) => {
            let (grads, finite) = unscale(&net, grads, s);
            (net, grads, pending, finite)
        }
        None => (net, grads, pending, true),
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
            amsgrad: false,
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

#[cfg(test)]
#[path = "accumulate_precision_tests.rs"]
mod precision_tests;
