//! `fit`, `evaluate` and `predict` (Keras' `Model` training API) on a compiled model.

mod accumulate;
mod callback;
mod class_weight;
mod logs;
mod profile;
mod step;

pub use accumulate::GradientAccumulation;
pub use callback::{Callback, FitContext, ManualContext, NamedWeight, WeightsSnapshot};
pub use class_weight::ClassWeight;
pub use logs::{History, Logs};
pub use profile::StepProfile;
pub use step::{
    PendingOutput, StepOutput, apply_gradients, compute_gradients, eval_step, train_step,
};

use std::path::Path;
use std::time::Instant;

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::prelude::*;
use kiln_data::{Cardinality, Dataset};

use crate::batch::to_device;
use crate::compile::{Compiled, correct};
use crate::error::Result;
use crate::model::{ModelSpec, Network, summary, weights};

/// Running sums for the loss and metrics over an epoch (example-weighted means, as Keras'
/// `Mean` metrics).
#[derive(Debug, Default)]
struct Accumulator {
    examples: f64,
    loss: f64,
    correct: Vec<f64>,
}

impl Accumulator {
    fn add(
        &mut self,
        compiled: &Compiled,
        out: &StepOutput,
        classes: &[i64],
        targets: &[f32],
        size: usize,
        units: usize,
    ) {
        if self.correct.len() != compiled.metrics.len() {
            self.correct = vec![0.0; compiled.metrics.len()];
        }
        self.examples += size as f64;
        self.loss += out.loss * size as f64;
        for (sum, m) in self.correct.iter_mut().zip(&compiled.metrics) {
            *sum += correct(m.kind, &out.outputs, units, classes, targets);
        }
    }

    fn logs(&self, compiled: &Compiled) -> Logs {
        let n = self.examples.max(1.0);
        let mut logs = Logs::default();
        logs.set("loss", self.loss / n);
        for (sum, m) in self.correct.iter().zip(&compiled.metrics) {
            logs.set(m.name.clone(), sum / n);
        }
        logs
    }
}

/// What callbacks can change during `fit`: the learning rate, the stop request, and the
/// batch count.
#[derive(Debug)]
struct Control {
    learning_rate: f64,
    stop_training: bool,
    iterations: u64,
}

/// [`FitContext`] for `Model::fit`: snapshots are clones of the Burn network (its tensors are
/// immutable and shared, so a clone costs no copy and later steps do not change it).
struct LoopContext<'a> {
    control: &'a mut Control,
    net: &'a mut Network,
    name: &'a str,
    spec: &'a ModelSpec,
}

impl FitContext for LoopContext<'_> {
    fn learning_rate(&self) -> f64 {
        self.control.learning_rate
    }
    fn set_learning_rate(&mut self, lr: f64) {
        self.control.learning_rate = lr;
    }
    fn stop_training(&self) -> bool {
        self.control.stop_training
    }
    fn set_stop_training(&mut self, value: bool) {
        self.control.stop_training = value;
    }
    fn iterations(&self) -> u64 {
        self.control.iterations
    }
    fn snapshot_weights(&self) -> WeightsSnapshot {
        WeightsSnapshot::new(self.net.clone())
    }
    fn restore_weights(&mut self, snapshot: &WeightsSnapshot) -> Result<()> {
        let net = snapshot
            .downcast_ref::<Network>()
            .ok_or_else(|| callback::foreign_snapshot("Model::fit"))?;
        *self.net = net.clone();
        Ok(())
    }
    fn weights(&self) -> Vec<NamedWeight> {
        // Keras 3 paths: `<model name>/<layer>/<variable>`.
        weights::keras_weights(self.spec, self.net)
            .into_iter()
            .map(|(name, _, values)| (format!("{}/{name}", self.name), values))
            .collect()
    }
}

/// A compiled Keras-style model: spec, parameters, loss/metrics and optimizer state.
///
/// Datasets given to [`Model::fit`], [`Model::evaluate`] and [`Model::predict`] yield batches
/// with a `x` component (`[batch, ...]`, channels-last for images) and, except for `predict`, a
/// `y` component (class indices `[batch]` or targets `[batch, units]`). An optional
/// `sample_weight` component (`[batch]`) weights each example's loss, as Keras' `sample_weight`
/// ([`crate::batch::SAMPLE_WEIGHT`]; [`ClassWeight::apply`] makes one from `class_weight`).
/// The optimizer's `gradient_accumulation_steps` and clipping apply in `fit`
/// ([`GradientAccumulation`]).
pub struct Model {
    name: String,
    spec: ModelSpec,
    compiled: Compiled,
    net: Network,
    optim: ModuleOptimizer,
    device: Device,
    profiling: bool,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("spec", &self.spec)
            .finish()
    }
}

impl Model {
    /// Builds and compiles a model with freshly initialized weights on `device` (CPU or GPU,
    /// without autodiff: training enables it internally). `seed` fixes the initial weights and
    /// dropout masks.
    pub fn new(
        name: impl Into<String>,
        spec: ModelSpec,
        compiled: Compiled,
        seed: u64,
        device: Device,
    ) -> Model {
        device.seed(seed);
        let net = Network::init(&spec, seed, &device.clone().autodiff());
        Model::assemble(name.into(), spec, compiled, net, device)
    }

    fn assemble(
        name: String,
        spec: ModelSpec,
        compiled: Compiled,
        net: Network,
        device: Device,
    ) -> Model {
        let optim = compiled.optimizer.build();
        Model {
            name,
            spec,
            compiled,
            net,
            optim,
            device,
            profiling: false,
        }
    }

    /// Builds a model whose weights come from a safetensors file written by
    /// [`Model::save_weights`].
    ///
    /// # Errors
    /// [`crate::KilnError::Weights`] / [`crate::KilnError::Io`] as [`weights::load`].
    pub fn from_weights(
        name: impl Into<String>,
        spec: ModelSpec,
        compiled: Compiled,
        path: &Path,
        device: Device,
    ) -> Result<Model> {
        let net = weights::load(&spec, path, &device.clone().autodiff())?;
        Ok(Model::assemble(name.into(), spec, compiled, net, device))
    }

    /// Times each stage of the training step (and each layer's forward pass); `fit` returns
    /// the profile of its last epoch in [`History::profile`].
    pub fn set_profiling(&mut self, on: bool) {
        self.profiling = on;
    }

    /// The model's layer spec.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// The compile settings.
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// The network's parameters (on the training device).
    pub fn network(&self) -> &Network {
        &self.net
    }

    /// Keras' `model.summary()` table.
    pub fn summary(&self) -> String {
        summary(&self.name, &self.spec)
    }

    /// Saves the weights (safetensors, Keras names and layouts).
    ///
    /// # Errors
    /// [`crate::KilnError::Io`] when the file cannot be written.
    pub fn save_weights(&self, path: &Path) -> Result<()> {
        weights::save(&self.spec, &self.net, path)
    }

    /// Trains for `epochs` passes over `train` (each pass a new iteration, so a shuffling
    /// dataset reshuffles), evaluating on `validation` after each epoch. Values are reported to
    /// `callbacks` with Keras' hooks and returned as a [`History`].
    ///
    /// # Errors
    /// Data errors from the pipeline, or [`crate::KilnError::Shape`] when a batch does not fit
    /// the model. Work done before the error stays in the model.
    pub fn fit(
        &mut self,
        train: &Dataset,
        validation: Option<&Dataset>,
        epochs: usize,
        callbacks: &mut [&mut dyn Callback],
    ) -> Result<History> {
        let mut history = History::default();
        let train_device = self.device.clone().autodiff();
        let units = self.spec.output_shape()[0];
        let steps = match train.cardinality() {
            Cardinality::Finite(n) => Some(n),
            _ => None,
        };
        let mut control = Control {
            learning_rate: self.compiled.optimizer.learning_rate(),
            stop_training: false,
            iterations: 0,
        };
        // Hooks see the model through a `LoopContext` made for each call, so that the network
        // is free for the training step between calls.
        macro_rules! hooks {
            (|$c:ident, $ctx:ident| $call:expr) => {
                for $c in callbacks.iter_mut() {
                    let $ctx = &mut LoopContext {
                        control: &mut control,
                        net: &mut self.net,
                        name: &self.name,
                        spec: &self.spec,
                    };
                    $call?;
                }
            };
        }
        let mut accumulation =
            GradientAccumulation::new(self.compiled.gradients.gradient_accumulation_steps);
        hooks!(|c, ctx| c.on_train_begin(ctx));
        let mut last = Logs::default();
        'epochs: for epoch in 0..epochs {
            hooks!(|c, ctx| c.on_epoch_begin(epoch, epochs, steps, ctx));
            let started = Instant::now();
            let mut acc = Accumulator::default();
            // The profile describes the last epoch (the first one includes warm-up).
            let mut profile = self.profiling.then(StepProfile::default);
            let mut batches = train.iter();
            for step in 0u64.. {
                let mut clock = Instant::now();
                let Some(batch) = batches.next() else { break };
                let batch = batch?;
                let waited = clock.elapsed().as_secs_f64();
                clock = Instant::now();
                let b = to_device(&batch, &self.spec, &self.compiled.loss, &train_device)?;
                if let Some(p) = profile.as_mut() {
                    p.input_wait_s += waited;
                    p.to_device_s += clock.elapsed().as_secs_f64();
                }
                hooks!(|c, ctx| c.on_train_batch_begin(step, ctx));
                let (classes, targets, size) = (b.classes.clone(), b.targets.clone(), b.size);
                let net = std::mem::replace(&mut self.net, Network { layers: Vec::new() });
                let (net, out) = accumulation.train_step(
                    net,
                    &mut self.optim,
                    &self.spec,
                    &self.compiled,
                    b,
                    control.learning_rate,
                    profile.as_mut(),
                );
                self.net = net;
                control.iterations += 1;
                clock = Instant::now();
                acc.add(&self.compiled, &out, &classes, &targets, size, units);
                if let Some(p) = profile.as_mut() {
                    p.metrics_s += clock.elapsed().as_secs_f64();
                }
                let logs = acc.logs(&self.compiled);
                hooks!(|c, ctx| c.on_train_batch_end(step, &logs, ctx));
                if control.stop_training {
                    break 'epochs;
                }
            }
            let lr = control.learning_rate;
            accumulation.flush(&mut self.net, &mut self.optim, &self.compiled, lr);
            let train_time = started.elapsed().as_secs_f64();
            let mut logs = acc.logs(&self.compiled);
            if let Some(val) = validation {
                let val_logs = self.evaluate(val)?;
                logs.extend_prefixed("val_", &val_logs);
            }
            let epoch_time = started.elapsed().as_secs_f64();
            hooks!(|c, ctx| c.on_epoch_end(epoch, &mut logs, ctx));
            history.push(epoch, &logs);
            if profile.is_some() {
                history.profile = profile;
            }
            history.epoch_time_s.push(epoch_time);
            history
                .samples_per_second
                .push(acc.examples / train_time.max(1e-9));
            last = logs;
            if control.stop_training {
                break;
            }
        }
        let lr = control.learning_rate;
        accumulation.flush(&mut self.net, &mut self.optim, &self.compiled, lr);
        hooks!(|c, ctx| c.on_train_end(&last, ctx));
        Ok(history)
    }

    /// Loss and metrics over `data` in inference mode (Keras' `model.evaluate`).
    ///
    /// # Errors
    /// Data and shape errors as [`Model::fit`].
    pub fn evaluate(&self, data: &Dataset) -> Result<Logs> {
        let net = self.net.valid();
        let units = self.spec.output_shape()[0];
        let mut acc = Accumulator::default();
        for batch in data.iter() {
            let b = to_device(&batch?, &self.spec, &self.compiled.loss, &self.device)?;
            let (classes, targets, size) = (b.classes.clone(), b.targets.clone(), b.size);
            let out = eval_step(&net, &self.spec, &self.compiled, b);
            acc.add(&self.compiled, &out, &classes, &targets, size, units);
        }
        Ok(acc.logs(&self.compiled))
    }

    /// Model outputs for every example of `data` (Keras' `model.predict`): a row-major
    /// `[examples, units]` buffer and `units`. Labels in `data`, if any, are ignored.
    ///
    /// # Errors
    /// Data and shape errors as [`Model::fit`].
    pub fn predict(&self, data: &Dataset) -> Result<(Vec<f32>, usize)> {
        let net = self.net.valid();
        let units = self.spec.output_shape()[0];
        let mut all = Vec::new();
        for batch in data.iter() {
            let mut batch = batch?;
            batch.remove(crate::batch::LABELS);
            let b = to_device(&batch, &self.spec, &self.compiled.loss, &self.device)?;
            all.extend(eval_step(&net, &self.spec, &self.compiled, b).outputs);
        }
        Ok((all, units))
    }
}
