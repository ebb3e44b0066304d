//! `fit`, `evaluate` and `predict` (Keras' `Model` training API) on a compiled model.

mod accumulate;
mod callback;
mod class_weight;
mod grad_norms;
mod input_cursor;
mod logs;
pub mod nan_report;
mod oom;
mod options;
mod profile;
mod resume;
mod skips;
mod step;

pub use accumulate::GradientAccumulation;
pub use callback::{Callback, FitContext, ManualContext, NamedWeight, WeightsSnapshot};
pub use class_weight::ClassWeight;
pub use grad_norms::{GradNormSample, GradNormTrend};
pub use logs::{History, Logs};
pub use oom::{INJECT_ENV as OOM_INJECT_ENV, is_out_of_memory};
pub use options::{Backup, FitOptions, Interrupt, OnNan, SaveFreq};
pub use profile::StepProfile;
pub use skips::{SKIPPED_RECORDS, SkippedInput};
pub use step::{
    HostLabels, PendingOutput, StepOutput, apply_gradients, compute_gradients,
    compute_gradients_scaled, eval_step, train_step,
};

/// Epoch and batch logs key: the loss scale (`mixed_float16`; TensorBoard `epoch_loss_scale`).
pub const LOSS_SCALE: &str = "loss_scale";

use std::path::Path;
use std::time::Instant;

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::prelude::*;
use kiln_data::{Cardinality, Dataset};

use crate::batch::to_device_guarded;
use crate::compile::{Compiled, MetricSpec, batch_sums};
use crate::error::Result;
use crate::guards::{CheckNumerics, DataSplit, NumericsGuard};
use crate::model::{ModelSpec, Network, summary, weights};
use input_cursor::InputCursor;
use resume::{LoopState, NanAction, step_seed};

/// Epoch logs key: training examples per second of the epoch's training loop.
pub const SAMPLES_PER_SECOND: &str = "samples_per_second";
/// Epoch logs key: seconds the training loop waited for the input pipeline in the epoch.
pub const INPUT_WAIT_SECONDS: &str = "input_wait_seconds";

/// Running sums for the loss and metrics over an epoch (example-weighted means, as Keras'
/// `Mean` metrics).
#[derive(Debug, Default)]
struct Accumulator {
    examples: f64,
    loss: f64,
    correct: Vec<f64>,
    /// A model with several outputs: each output's loss sum and metric sums.
    per_output: Vec<(f64, Vec<f64>)>,
    /// Batches added.
    batches: u64,
}

/// A batch's host labels for the metrics: the one output's, or each output's (a model with
/// several, `labels` then unused).
struct BatchLabels<'a> {
    labels: &'a HostLabels,
    outputs: &'a [HostLabels],
}

impl Accumulator {
    fn add(
        &mut self,
        compiled: &Compiled,
        out: &StepOutput,
        labels: BatchLabels,
        size: usize,
        units: usize,
    ) {
        let width = widths(&compiled.metrics, units);
        if self.correct.len() != width {
            self.correct = vec![0.0; width];
        }
        self.examples += size as f64;
        self.batches += 1;
        self.loss += out.loss * size as f64;
        // Metrics count rows (output positions); per example, the mean over its positions.
        let rows = out.outputs.len() / units.max(1);
        let positions = (rows / size.max(1)).max(1) as f64;
        let (classes, targets) = (&labels.labels.classes, &labels.labels.targets);
        add_sums(&mut self.correct, &compiled.metrics, positions, |m| {
            batch_sums(m.kind, &out.outputs, units, classes, targets)
        });
        if compiled.outputs.is_empty() {
            return;
        }
        if self.per_output.is_empty() {
            self.per_output = compiled
                .outputs
                .iter()
                .map(|h| (0.0, vec![0.0; widths(&h.metrics, h.units)]))
                .collect();
        }
        let mut start = 0;
        for (k, head) in compiled.outputs.iter().enumerate() {
            let part = columns(&out.outputs, units, start, head.units);
            start += head.units;
            let (loss, sums) = &mut self.per_output[k];
            *loss += out.output_losses.get(k).copied().unwrap_or(f64::NAN) * size as f64;
            let Some(l) = labels.outputs.get(k) else {
                continue;
            };
            add_sums(sums, &head.metrics, positions, |m| {
                batch_sums(m.kind, &part, head.units, &l.classes, &l.targets)
            });
        }
    }

    /// Keras' logs: `loss` and the metrics; for a model with several outputs also
    /// `<output>_loss` and `<output>_<metric>` per output.
    fn logs(&self, compiled: &Compiled, units: usize) -> Logs {
        let n = self.examples.max(1.0);
        let mut logs = Logs::default();
        logs.set("loss", self.loss / n);
        set_metrics(&mut logs, "", (&compiled.metrics, units), &self.correct, n);
        for (head, (loss, sums)) in compiled.outputs.iter().zip(&self.per_output) {
            logs.set(format!("{}_loss", head.name), loss / n);
            let metrics = (&head.metrics[..], head.units);
            set_metrics(&mut logs, &format!("{}_", head.name), metrics, sums, n);
        }
        logs
    }
}

/// The sums `metrics` keep for outputs of `units` units, laid end to end.
fn widths(metrics: &[MetricSpec], units: usize) -> usize {
    metrics.iter().map(|m| m.kind.width(units)).sum()
}

/// Adds each metric's batch sums (per example: divided by its `positions`) to its slots.
fn add_sums(
    slots: &mut [f64],
    metrics: &[MetricSpec],
    positions: f64,
    batch: impl Fn(&MetricSpec) -> Vec<f64>,
) {
    let mut start = 0;
    for m in metrics {
        let sums = batch(m);
        for (slot, s) in slots[start..].iter_mut().zip(&sums) {
            *slot += s / positions;
        }
        start += sums.len();
    }
}

/// Logs each metric's value from its slots as `<prefix><name>`; a metric with one value per
/// class (`F1Score` without `average`) as `<prefix><name>_<class>`.
/// `metrics` read outputs of `units` units; nothing is logged before the first batch.
fn set_metrics(
    logs: &mut Logs,
    prefix: &str,
    (metrics, units): (&[MetricSpec], usize),
    slots: &[f64],
    n: f64,
) {
    if slots.len() != widths(metrics, units) {
        return;
    }
    let mut start = 0;
    for m in metrics {
        let width = m.kind.width(units);
        let values = m.kind.values(&slots[start..start + width], n);
        start += width;
        for (i, v) in values.iter().enumerate() {
            let key = if values.len() == 1 {
                format!("{prefix}{}", m.name)
            } else {
                format!("{prefix}{}_{i}", m.name)
            };
            logs.set(key, *v);
        }
    }
}

/// Columns `start..start + width` of row-major `rows` of `units` values.
fn columns(rows: &[f32], units: usize, start: usize, width: usize) -> Vec<f32> {
    rows.chunks_exact(units.max(1))
        .flat_map(|r| &r[start..start + width])
        .copied()
        .collect()
}

/// What callbacks can change during `fit`: the learning rate, the stop request, and the
/// batch count.
#[derive(Debug)]
struct Control {
    /// The constant learning rate (unused while `schedule` sets the rate).
    learning_rate: f64,
    /// `compile.optimizer.learning_rate` when it is a schedule: the rate of each step is the
    /// schedule at `iterations`, and callbacks may not set it.
    schedule: Option<crate::compile::Schedule>,
    /// A callback tried to set the rate of a scheduled optimizer (see [`Control::refusal`]).
    set_refused: bool,
    stop_training: bool,
    iterations: u64,
    /// The records the input skipped in the epoch that just ended.
    skipped: SkippedInput,
}

impl Control {
    /// The rate of the next optimizer step: Keras' `optimizer.learning_rate`, the schedule at
    /// `optimizer.iterations` when there is one.
    fn rate(&self) -> f64 {
        self.schedule
            .as_ref()
            .map_or(self.learning_rate, |s| s.at(self.iterations))
    }

    /// Keras refuses to set the learning rate of an optimizer created with a schedule
    /// (`TypeError: This optimizer was created with a LearningRateSchedule object as its
    /// learning_rate constructor argument, hence its learning rate is not settable`); kiln
    /// stops `fit` with a config error after the callback that tried.
    fn refusal(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.set_refused) {
            return Ok(());
        }
        Err(crate::KilnError::config(
            "compile.optimizer.learning_rate",
            "is a schedule, and a callback (LearningRateScheduler, ReduceLROnPlateau, ...) tried \
             to set the learning rate; as in Keras, a scheduled rate cannot be set. Give the \
             optimizer a number as learning_rate to use such a callback, or drop the callback",
        ))
    }
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
        self.control.rate()
    }
    fn set_learning_rate(&mut self, lr: f64) {
        if self.control.schedule.is_some() {
            self.control.set_refused = true;
        } else {
            self.control.learning_rate = lr;
        }
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
    fn skipped_input(&self) -> SkippedInput {
        self.control.skipped.clone()
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
    fn save_weights(&self, path: &Path) -> Result<()> {
        weights::save(self.spec, &*self.net, path)
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
    /// Seed of the initial weights, and with the step count, of dropout masks.
    seed: u64,
    profiling: bool,
    check_numerics: CheckNumerics,
    /// Test hook: the training batch whose first attempt fails as out of memory.
    oom_test_step: Option<u64>,
    strategy: crate::distribute::Strategy,
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
        Model::assemble(name.into(), spec, compiled, net, device, seed)
    }

    fn assemble(
        name: String,
        spec: ModelSpec,
        compiled: Compiled,
        net: Network,
        device: Device,
        seed: u64,
    ) -> Model {
        let optim = compiled.optimizer.build();
        Model {
            name,
            spec,
            compiled,
            net,
            optim,
            device,
            seed,
            profiling: false,
            check_numerics: CheckNumerics::default(),
            oom_test_step: None,
            strategy: crate::distribute::Strategy::OneDevice,
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
        Ok(Model::assemble(name.into(), spec, compiled, net, device, 0))
    }

    /// Times each stage of the training step (and each layer's forward pass); `fit` returns
    /// the profile of its last epoch in [`History::profile`].
    pub fn set_profiling(&mut self, on: bool) {
        self.profiling = on;
    }

    /// What `fit`, `evaluate` and `predict` do with NaN / ±Inf in a batch (`[fit]
    /// check_numerics`, see [`crate::guards`]; default raise).
    pub fn set_check_numerics(&mut self, mode: CheckNumerics) {
        self.check_numerics = mode;
    }

    /// Test hook of the out-of-memory recovery: the first attempt of training batch `step`
    /// (0-based, counted from the start of each `fit` call) fails as if it ran out of memory
    /// and is retried in two parts (the environment variable `KILN_TEST_OOM_AT_STEP` does the
    /// same for `kiln train`). `None` turns it off.
    pub fn inject_oom_at_step(&mut self, step: Option<u64>) {
        self.oom_test_step = step;
    }

    /// The distribution strategy `fit` trains with (`[distribute]`, see [`crate::distribute`];
    /// default one device). Batches are global batches, split across the replicas.
    pub fn set_strategy(&mut self, strategy: crate::distribute::Strategy) {
        self.strategy = strategy;
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
    /// `callbacks` with Keras' hooks and returned as a [`History`]. Same as [`Model::fit_with`]
    /// with [`FitOptions::epochs`].
    ///
    /// # Errors
    /// As [`Model::fit_with`].
    pub fn fit(
        &mut self,
        train: &Dataset,
        validation: Option<&Dataset>,
        epochs: usize,
        callbacks: &mut [&mut dyn Callback],
    ) -> Result<History> {
        self.fit_with(train, validation, &FitOptions::epochs(epochs), callbacks)
    }

    /// Keras' `model.fit` with its options ([`FitOptions`]: `initial_epoch`,
    /// `steps_per_epoch`, `validation_freq`), BackupAndRestore checkpoints and resume, the NaN
    /// policy, and an external stop request.
    ///
    /// Determinism: dropout is reseeded before every step from the model's seed and the step
    /// count, and the input's random stages are seeded per iteration, so a run resumed from a
    /// checkpoint continues bit for bit as the uninterrupted run (on the CPU, same thread
    /// count).
    ///
    /// # Errors
    /// Data errors from the pipeline, [`crate::KilnError::Shape`] when a batch does not fit
    /// the model, [`crate::KilnError::Interrupted`] after a stop request,
    /// [`crate::KilnError::NonFinite`] for a NaN / Inf in a batch (see
    /// [`Model::set_check_numerics`]), [`crate::KilnError::NanLoss`] when a NaN loss stops the run, I/O errors writing
    /// checkpoints. Work done before the error stays in the model.
    pub fn fit_with(
        &mut self,
        train: &Dataset,
        validation: Option<&Dataset>,
        opts: &FitOptions,
        callbacks: &mut [&mut dyn Callback],
    ) -> Result<History> {
        let train_device = self.device.clone().autodiff();
        let units = self.spec.output_units();
        let steps = match (opts.steps_per_epoch, train.cardinality()) {
            (Some(n), _) => Some(n),
            (None, Cardinality::Finite(n)) => Some(n),
            _ => None,
        };
        let mut control = Control {
            learning_rate: self.compiled.optimizer.learning_rate(),
            schedule: self.compiled.optimizer.schedule().cloned(),
            set_refused: false,
            stop_training: false,
            iterations: 0,
            skipped: SkippedInput::default(),
        };
        let mut state = LoopState {
            epoch: opts.initial_epoch,
            ..LoopState::default()
        };
        let mut position = Default::default();
        if let Some(ckpt) = opts.backup.as_ref().and_then(|b| b.resume.as_ref()) {
            position = self.resume_from(ckpt, &mut control, &mut state, callbacks)?;
        }
        let mut input = InputCursor::restore(train, position)?;
        if let Some(backup) = &opts.backup
            && backup.resume.is_none()
        {
            // A starting point for NaN rollbacks and for a kill in the first epoch.
            self.save_checkpoint(backup, &control, &state, &input, callbacks)?;
        }
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
                    $ctx.control.refusal()?;
                }
            };
        }
        let mut accumulation =
            GradientAccumulation::new(self.compiled.gradients.gradient_accumulation_steps)
                .with_loss_scale(self.compiled.loss_scale)
                .with_strategy(self.strategy.clone());
        accumulation.inject_oom_at(self.oom_test_step.or_else(oom::injection_from_env));
        let mut checkpoint_due = false;
        // multi_worker_mirrored with each worker reading its own shard (see the loop).
        let sharded = accumulation.strategy.shards_input();
        hooks!(|c, ctx| c.on_train_begin(ctx));
        let mut last = Logs::default();
        let mut guard = NumericsGuard::new(self.check_numerics, DataSplit::Train);
        let mut skip_report = skips::SkipReport::default();
        'epochs: while state.epoch < opts.epochs {
            let epoch = state.epoch;
            if let Some(scale) = state.loss_scale {
                // From a resume or a NaN rollback (otherwise the value it already has).
                accumulation.restore_loss_scale(scale);
            }
            guard.begin_epoch(epoch);
            hooks!(|c, ctx| c.on_epoch_begin(epoch, opts.epochs, steps, ctx));
            let started = Instant::now();
            // The profile describes the last epoch (the first one includes warm-up).
            let mut profile = self.profiling.then(StepProfile::default);
            if opts.steps_per_epoch.is_none() && state.acc.batches == 0 {
                // One full pass per epoch: a fresh iterator (unless resuming inside one).
                if !input.at_start() {
                    input.close();
                }
            }
            let first_step = state.acc.batches;
            let mut examples_this_run = 0.0;
            let mut input_wait = 0.0;
            'steps: for step in first_step.. {
                if opts.steps_per_epoch.is_some_and(|n| step >= n) {
                    break;
                }
                let mut clock = Instant::now();
                let (batch, b, waited) = if sharded {
                    // Each worker reads its own shard: a worker whose shard is exhausted (or
                    // whose batch check_numerics emptied) still steps, with no examples, until
                    // every shard is exhausted.
                    let mut new_pass = false;
                    let (batch, local, waited) = loop {
                        let fetched = input.next_step_batch().transpose()?;
                        let waited = clock.elapsed().as_secs_f64();
                        input_wait += waited;
                        clock = Instant::now();
                        let mut batch = fetched.unwrap_or_default();
                        let local = if batch.is_empty() {
                            None
                        } else {
                            to_device_guarded(
                                &mut batch,
                                &self.spec,
                                &self.compiled,
                                &train_device,
                                &mut guard,
                            )?
                        };
                        let size = local.as_ref().map_or(0, |b| b.size);
                        if accumulation.strategy.agree_input(size) > 0 {
                            break (batch, local, waited);
                        }
                        // Every worker's shard is exhausted (all see it at the same step).
                        if opts.steps_per_epoch.is_some() && step == 0 && !new_pass {
                            // The repeated pass ended exactly at an epoch boundary.
                            input.close();
                            new_pass = true;
                            continue;
                        }
                        if let Some(n) = opts.steps_per_epoch {
                            eprintln!(
                                "warning: the training input ran out of data after {step} of \
                                 steps_per_epoch = {n} batches in epoch {}; stopping. Make sure \
                                 the dataset yields steps_per_epoch × epochs batches (add \
                                 `repeat`).",
                                epoch + 1
                            );
                            control.stop_training = true;
                        }
                        break 'steps;
                    };
                    let b = match local {
                        Some(b) => b,
                        None => crate::batch::DeviceBatch::empty(
                            &self.spec,
                            &self.compiled,
                            &train_device,
                        )?,
                    };
                    (batch, b, waited)
                } else {
                    let mut batch = match input.next_batch() {
                        Some(b) => b?,
                        None if opts.steps_per_epoch.is_some() && step == 0 => {
                            // The repeated pass ended exactly at an epoch boundary: start the next.
                            match input.next_batch() {
                                Some(b) => b?,
                                None => break,
                            }
                        }
                        None if opts.steps_per_epoch.is_some() => {
                            eprintln!(
                                "warning: the training input ran out of data after {step} of \
                                 steps_per_epoch = {} batches in epoch {}; stopping. Make sure the \
                                 dataset yields steps_per_epoch × epochs batches (add `repeat`).",
                                opts.steps_per_epoch.unwrap_or(0),
                                epoch + 1
                            );
                            control.stop_training = true;
                            break;
                        }
                        None => break,
                    };
                    let waited = clock.elapsed().as_secs_f64();
                    input_wait += waited;
                    clock = Instant::now();
                    let Some(b) = to_device_guarded(
                        &mut batch,
                        &self.spec,
                        &self.compiled,
                        &train_device,
                        &mut guard,
                    )?
                    else {
                        continue; // check_numerics = "skip" dropped every example
                    };
                    (batch, b, waited)
                };
                if let Some(p) = profile.as_mut() {
                    p.input_wait_s += waited;
                    p.to_device_s += clock.elapsed().as_secs_f64();
                }
                hooks!(|c, ctx| c.on_train_batch_begin(step, ctx));
                let (own, outputs, size) = (HostLabels::of(&b), b.outputs.clone(), b.size);
                // Dropout masks depend on the seed and the step only (see `fit_with`).
                self.device.seed(step_seed(self.seed, control.iterations));
                let net = std::mem::replace(&mut self.net, Network { layers: Vec::new() });
                let guarded = opts.on_nan != OnNan::Continue;
                accumulation.grad_norms.at_step(control.iterations);
                let (net, out, applied) = accumulation.train_step(
                    net,
                    &mut self.optim,
                    &self.spec,
                    &self.compiled,
                    b,
                    control.rate(),
                    guarded,
                    profile.as_mut(),
                )?;
                self.net = net;
                state.loss_scale = accumulation.loss_scale();
                control.iterations += 1;
                if !applied {
                    // A non-finite loss; the network is as before the batch.
                    state.recent_grad_norms = accumulation.grad_norms.samples();
                    let action = self.on_non_finite(
                        opts,
                        &mut control,
                        &mut state,
                        &mut input,
                        (step, &batch),
                        callbacks,
                    )?;
                    match action {
                        NanAction::Skip => continue,
                        NanAction::Restart => continue 'epochs,
                    }
                }
                clock = Instant::now();
                // A sharded multi-worker step reports the global batch's outputs and labels.
                let (labels, size) = match &out.labels {
                    Some(l) => (l.clone(), l.classes.len()),
                    None => (own, size),
                };
                let labels = BatchLabels {
                    labels: &labels,
                    outputs: &outputs,
                };
                state.acc.add(&self.compiled, &out, labels, size, units);
                examples_this_run += size as f64;
                if let Some(p) = profile.as_mut() {
                    p.metrics_s += clock.elapsed().as_secs_f64();
                }
                let mut logs = state.acc.logs(&self.compiled, units);
                if let Some(ls) = state.loss_scale {
                    logs.set(LOSS_SCALE, ls.scale);
                }
                hooks!(|c, ctx| c.on_train_batch_end(step, &logs, ctx));
                // Checkpoints (and stops on a signal) fall on optimizer-update boundaries: the
                // gradients of a partial accumulation window are not checkpointed, so a stop
                // waits for the window to complete, and a batch-count checkpoint that falls
                // inside one is written at its end.
                let at_update = accumulation.pending() == 0;
                if let Some(backup) = &opts.backup
                    && let SaveFreq::Batches(n) = backup.save_freq
                    && control.iterations.is_multiple_of(n.max(1))
                {
                    checkpoint_due = true;
                }
                if at_update
                    && let Some(signal) = opts.interrupt.as_ref().and_then(|i| i.requested())
                {
                    let checkpoint = match &opts.backup {
                        Some(backup) => {
                            Some(self.save_checkpoint(backup, &control, &state, &input, callbacks)?)
                        }
                        None => None,
                    };
                    return Err(crate::KilnError::Interrupted {
                        signal,
                        iterations: control.iterations,
                        checkpoint,
                    });
                }
                if at_update
                    && checkpoint_due
                    && let Some(backup) = &opts.backup
                {
                    self.save_checkpoint(backup, &control, &state, &input, callbacks)?;
                    checkpoint_due = false;
                }
                if control.stop_training {
                    break 'epochs;
                }
            }
            let lr = control.rate();
            accumulation.flush(
                &mut self.net,
                &mut self.optim,
                &self.spec,
                &self.compiled,
                lr,
            );
            if opts.steps_per_epoch.is_none() {
                input.close();
            }
            let train_skips = input.take_skips();
            skips::check_not_all_skipped(train_skips.as_ref(), state.acc.batches, epoch)?;
            let train_time = started.elapsed().as_secs_f64();
            let mut logs = state.acc.logs(&self.compiled, units);
            if let Some(ls) = state.loss_scale {
                logs.set(LOSS_SCALE, ls.scale);
            }
            if sharded {
                // Each worker skipped the non-finite examples of its own shard.
                guard.sum_skipped(|n| accumulation.strategy.sum_over_workers(n));
            }
            guard.report(&mut logs);
            // Throughput and time blocked on the input pipeline, for TensorBoard
            // (`epoch_samples_per_second`, `epoch_input_wait_seconds`), CSVLogger and the display.
            logs.set(SAMPLES_PER_SECOND, examples_this_run / train_time.max(1e-9));
            logs.set(INPUT_WAIT_SECONDS, input_wait);
            let communication = accumulation.strategy.take_reduce_seconds();
            if self.strategy.communicates() {
                logs.set(
                    crate::distribute::diagnosis::COMMUNICATION_SECONDS,
                    communication,
                );
                logs.set(crate::distribute::diagnosis::TRAIN_SECONDS, train_time);
            }
            if let Some((wait, all_reduce)) =
                accumulation.strategy.take_wait_and_all_reduce_seconds()
            {
                logs.set(crate::distribute::diagnosis::WAIT_SECONDS, wait);
                logs.set(crate::distribute::diagnosis::ALL_REDUCE_SECONDS, all_reduce);
            }
            if state.skipped_nan_steps > 0 {
                logs.set(
                    "skipped_nan_steps",
                    std::mem::take(&mut state.skipped_nan_steps) as f64,
                );
            }
            let mut val_skips = None;
            let validated = validation.is_some() && opts.validates_after(epoch);
            if let Some(val) = validation.filter(|_| validated) {
                let (val_logs, skipped) = self.evaluate_split(val, DataSplit::Validation)?;
                logs.extend_prefixed("val_", &val_logs);
                val_skips = skipped;
            }
            control.skipped = SkippedInput {
                train: train_skips,
                validation: val_skips,
            };
            skip_report.add_to(&mut logs, &control.skipped, validated);
            let epoch_time = started.elapsed().as_secs_f64();
            hooks!(|c, ctx| c.on_epoch_end(epoch, &mut logs, ctx));
            state.history.push(epoch, &logs);
            if profile.is_some() {
                state.history.profile = profile;
            }
            state.history.epoch_time_s.push(epoch_time);
            state
                .history
                .samples_per_second
                .push(examples_this_run / train_time.max(1e-9));
            state.epoch += 1;
            state.acc = Accumulator::default();
            last = logs;
            if let Some(backup) = &opts.backup {
                self.save_checkpoint(backup, &control, &state, &input, callbacks)?;
            }
            if control.stop_training {
                break;
            }
        }
        let lr = control.rate();
        accumulation.flush(
            &mut self.net,
            &mut self.optim,
            &self.spec,
            &self.compiled,
            lr,
        );
        hooks!(|c, ctx| c.on_train_end(&last, ctx));
        Ok(state.history)
    }

    /// Loss and metrics over `data` in inference mode (Keras' `model.evaluate`).
    ///
    /// # Errors
    /// Data and shape errors as [`Model::fit`].
    pub fn evaluate(&self, data: &Dataset) -> Result<Logs> {
        let (mut logs, skipped) = self.evaluate_split(data, DataSplit::Test)?;
        if let Some(s) = skipped {
            logs.set(SKIPPED_RECORDS, s.count as f64);
        }
        Ok(logs)
    }

    /// [`Model::evaluate`], naming `split` in input errors; also what the input's
    /// `ignore_errors` stages dropped.
    fn evaluate_split(
        &self,
        data: &Dataset,
        split: DataSplit,
    ) -> Result<(Logs, Option<kiln_data::SkipStats>)> {
        let net = self.net.valid();
        let units = self.spec.output_units();
        let mut acc = Accumulator::default();
        let mut guard = NumericsGuard::new(self.check_numerics, split);
        let mut batches = data.iter();
        for batch in batches.by_ref() {
            let (loss, device) = (&self.compiled, &self.device);
            let Some(b) = to_device_guarded(&mut batch?, &self.spec, loss, device, &mut guard)?
            else {
                continue;
            };
            let (own, outputs, size) = (HostLabels::of(&b), b.outputs.clone(), b.size);
            let out = eval_step(&net, &self.spec, &self.compiled, b);
            let labels = BatchLabels {
                labels: &own,
                outputs: &outputs,
            };
            acc.add(&self.compiled, &out, labels, size, units);
        }
        let mut logs = acc.logs(&self.compiled, units);
        guard.report(&mut logs);
        Ok((logs, batches.skip_stats()))
    }

    /// Model outputs for every example of `data` (Keras' `model.predict`): a row-major
    /// `[examples, units]` buffer and `units`. Labels in `data`, if any, are ignored.
    ///
    /// # Errors
    /// Data and shape errors as [`Model::fit`].
    pub fn predict(&self, data: &Dataset) -> Result<(Vec<f32>, usize)> {
        let net = self.net.valid();
        let units = self.spec.output_units();
        let mut all = Vec::new();
        // Predict never drops an example: in skip mode a non-finite one gets a non-finite output.
        let mut guard = NumericsGuard::new(self.check_numerics, DataSplit::Predict);
        for batch in data.iter() {
            let mut batch = batch?;
            for c in crate::batch::label_components(&self.spec) {
                batch.remove(&c);
            }
            let (loss, device) = (&self.compiled, &self.device);
            let b = to_device_guarded(&mut batch, &self.spec, loss, device, &mut guard)?
                .expect("predict keeps every example");
            all.extend(eval_step(&net, &self.spec, &self.compiled, b).outputs);
        }
        Ok((all, units))
    }
}

#[cfg(test)]
mod metric_slots_tests;
