//! Keras' `fit` loop (`keras/src/trainers/trainer.py`, `fit`): epochs of steps taken from the
//! [`EpochIterator`], each step run by [`GradientAccumulation`] (the step, the strategy and
//! the loss scale), callbacks called at Keras' hooks; between steps, BackupAndRestore
//! checkpoints, the NaN policy and stop requests.
//!
//! One difference from Keras, kept on purpose: a callback that sets `stop_training` during a
//! batch ends `fit` at once, without the epoch's `on_epoch_end` (Keras finishes the epoch).
//! A run stopped early is finished: its last checkpoint says so, and running it again
//! re-evaluates instead of training on.

use std::time::Instant;

use burn::prelude::Device;
use kiln_data::Dataset;

use super::control::{Control, LoopContext};
use super::epoch_iterator::{EpochIterator, Next, StepInput, Target};
use super::epoch_metrics::BatchLabels;
use super::resume::{LoopState, NanAction, step_seed};
use super::skips::{self, SkipReport, SkippedInput};
use super::window::{Deferred, Done, Start, StepFacts, Taken, Window, why_not_deferred};
use super::{Callback, FitOptions, GradientAccumulation, History, Logs, Model, OnNan, SaveFreq};
use crate::distribute::diagnosis;
use crate::error::{KilnError, Result};
use crate::guards::{DataSplit, NumericsGuard};
use crate::logs::{INPUT_WAIT_SECONDS, LOSS_SCALE, SAMPLES_PER_SECOND, StepProfile};
use crate::model::Network;
use crate::step::PendingOutput;

#[path = "custom_batch.rs"]
mod custom_batch;

/// How a step ended, for the epoch around it.
enum StepEnd {
    /// Go on with the next step.
    Next,
    /// The epoch's input is over (or is empty: then `stop_training` is set).
    EndOfEpoch,
    /// A NaN rollback restored an earlier state: start the epoch loop again.
    Restart,
    /// A callback stopped training: end `fit` now.
    Stop,
}

/// The measurements of the epoch running.
struct EpochClock {
    started: Instant,
    /// The profile describes the last epoch (the first one includes warm-up).
    profile: Option<StepProfile>,
    /// Training examples seen in this call of `fit` during the epoch.
    examples: f64,
}

/// One call of `fit`: the model, its options and callbacks, and the loop's state.
pub(super) struct FitLoop<'m, 'd, 'c, 'b> {
    model: &'m mut Model,
    opts: &'m FitOptions,
    callbacks: &'c mut [&'b mut dyn Callback],
    input: EpochIterator<'d>,
    control: Control,
    state: LoopState,
    accumulation: GradientAccumulation,
    checkpoint_due: bool,
    skip_report: SkipReport,
    /// Batches per epoch, when known (for the progress display).
    steps: Option<u64>,
    /// The training device (with autodiff), made once.
    device: Device,
    /// Output units of the model (the metrics' row width).
    units: usize,
    /// The steps not read back yet (`steps_per_execution`).
    window: Window,
}

impl<'m, 'd, 'c, 'b> FitLoop<'m, 'd, 'c, 'b> {
    /// The loop at its start, or where `opts.backup`'s checkpoint left it.
    ///
    /// # Errors
    /// Checkpoints that do not fit the model; data errors replaying the input.
    pub(super) fn new(
        model: &'m mut Model,
        train: &'d Dataset,
        opts: &'m FitOptions,
        callbacks: &'c mut [&'b mut dyn Callback],
    ) -> Result<Self> {
        let mut control = Control::new(&model.compiled);
        let mut state = LoopState {
            epoch: opts.initial_epoch,
            ..LoopState::default()
        };
        let mut position = Default::default();
        if let Some(ckpt) = opts.backup.as_ref().and_then(|b| b.resume.as_ref()) {
            position = model.resume_from(ckpt, &mut control, &mut state, callbacks)?;
        }
        let mut accumulation = model.accumulation();
        let accumulation_steps = model.compiled.gradients.gradient_accumulation_steps;
        model.check_custom_step(accumulation_steps)?;
        let guard = NumericsGuard::new(model.check_numerics, DataSplit::Train);
        let sharded = accumulation.strategy.shards_input();
        let input = EpochIterator::new(train, position, guard, opts.steps_per_epoch, sharded)?;
        let steps = opts.steps_per_epoch.or(match train.cardinality() {
            kiln_data::Cardinality::Finite(n) => Some(n),
            _ => None,
        });
        let (device, units) = (model.device.clone().autodiff(), model.spec.output_units());
        let window = Window::new(read_every(model, opts, &accumulation));
        accumulation.grad_norms.defer(window.defers());
        let mut fit = FitLoop {
            model,
            opts,
            callbacks,
            input,
            control,
            state,
            accumulation,
            checkpoint_due: false,
            skip_report: SkipReport::default(),
            steps,
            device,
            units,
            window,
        };
        if let Some(backup) = &opts.backup
            && backup.resume.is_none()
        {
            // A starting point for NaN rollbacks and for a kill in the first epoch.
            fit.checkpoint(backup)?;
        }
        Ok(fit)
    }

    /// Calls `hook` on every callback, each with a [`LoopContext`] made for the call (so that
    /// the network is free for the step between calls).
    fn hooks(
        &mut self,
        mut hook: impl FnMut(&mut dyn Callback, &mut LoopContext) -> Result<()>,
    ) -> Result<()> {
        for c in self.callbacks.iter_mut() {
            let ctx = &mut LoopContext {
                control: &mut self.control,
                net: &mut self.model.net,
                name: &self.model.name,
                spec: &self.model.spec,
            };
            hook(&mut **c, ctx)?;
            ctx.control.refusal()?;
        }
        Ok(())
    }

    /// Writes a BackupAndRestore checkpoint of the loop as it stands.
    fn checkpoint(&mut self, backup: &super::Backup) -> Result<std::path::PathBuf> {
        let (control, state, input) = (&self.control, &self.state, self.input.cursor());
        self.model
            .save_checkpoint(backup, control, state, input, self.callbacks)
    }

    /// Runs the epochs; returns the history.
    pub(super) fn run(mut self, validation: Option<&Dataset>) -> Result<History> {
        self.hooks(|c, ctx| c.on_train_begin(ctx))?;
        let mut last = Logs::default();
        while self.state.epoch < self.opts.epochs && !self.state.stopped {
            match self.epoch(validation)? {
                (StepEnd::Restart, _) => continue,
                (StepEnd::Stop, _) => break,
                (_, logs) => last = logs,
            }
            if self.control.stop_training {
                break;
            }
        }
        self.flush();
        if self.control.stop_training
            && !self.state.stopped
            && let Some(backup) = &self.opts.backup
        {
            // The run is finished: a rerun re-evaluates instead of training on.
            self.state.stopped = true;
            self.checkpoint(backup)?;
        }
        self.hooks(|c, ctx| c.on_train_end(&last, ctx))?;
        Ok(self.state.history)
    }

    /// Applies what a partial gradient-accumulation window holds.
    fn flush(&mut self) {
        let m = &mut *self.model;
        let lr = self.control.rate();
        self.accumulation
            .flush(&mut m.net, &mut m.optim, &m.spec, &m.compiled, lr);
    }

    /// One epoch: its steps, then (unless a step restarted or stopped the loop) its logs.
    fn epoch(&mut self, validation: Option<&Dataset>) -> Result<(StepEnd, Logs)> {
        let epoch = self.state.epoch;
        if let Some(scale) = self.state.loss_scale {
            // From a resume or a NaN rollback (otherwise the value it already has).
            self.accumulation.restore_loss_scale(scale);
        }
        let steps = self.steps;
        let epochs = self.opts.epochs;
        self.hooks(|c, ctx| c.on_epoch_begin(epoch, epochs, steps, ctx))?;
        let mut clock = EpochClock {
            started: Instant::now(),
            profile: self.model.profiling.then(StepProfile::default),
            examples: 0.0,
        };
        let first_step = self.state.acc.batches;
        self.input.begin_epoch(epoch, first_step);
        for step in first_step.. {
            if self.opts.steps_per_epoch.is_some_and(|n| step >= n) {
                break;
            }
            match self.step(step, &mut clock)? {
                StepEnd::Next => {}
                StepEnd::EndOfEpoch => break,
                end => return Ok((end, Logs::default())),
            }
        }
        match self.read_window(&mut clock)? {
            StepEnd::Next => {}
            end => return Ok((end, Logs::default())),
        }
        let logs = self.end_epoch(epoch, clock, validation)?;
        Ok((StepEnd::Next, logs))
    }

    /// Training step `step` of the epoch: fetch, hooks, the step, the NaN policy, metrics,
    /// then checkpoints and stop requests (with deferred reads: the step, and at the
    /// window's end the rest).
    fn step(&mut self, step: u64, clock: &mut EpochClock) -> Result<StepEnd> {
        let input = match self.fetch(step)? {
            Next::Batch(input) => input,
            Next::Emptied => return Ok(StepEnd::Next),
            Next::End => return Ok(StepEnd::EndOfEpoch),
            Next::Short => return Ok(StepEnd::EndOfEpoch),
            Next::RanOut => {
                self.control.stop_training = true;
                return Ok(StepEnd::EndOfEpoch);
            }
        };
        if let Some(p) = clock.profile.as_mut() {
            p.input_wait_s += input.waited;
            p.to_device_s += input.converted;
        }
        let StepInput { host, batch, .. } = *input;
        if self.model.train_step.is_some() {
            return self.custom_step(step, batch, host, clock);
        }
        if self.window.defers() {
            return self.deferred_step(step, batch, host, clock);
        }
        self.hooks(|c, ctx| c.on_train_batch_begin(step, ctx))?;
        let facts = StepFacts::of(step, &batch);
        let Some(out) = self.train_batch(batch, clock.profile.as_mut())? else {
            return self.non_finite(step, &host);
        };
        self.record(vec![Done { facts, out }], clock)
    }

    /// Adds steps read back to the epoch's metrics, then calls `on_train_batch_end` (with the
    /// last one's index) and handles what falls between steps.
    fn record(&mut self, done: Vec<Done>, clock: &mut EpochClock) -> Result<StepEnd> {
        let Some(last) = done.last().map(|d| d.facts.step) else {
            return Ok(StepEnd::Next);
        };
        let started = Instant::now();
        for Done { facts, out } in &done {
            // A sharded multi-worker step reports the global batch's outputs and labels.
            let (labels, size) = match &out.labels {
                Some(l) => (l, l.classes.len()),
                None => (&facts.own, facts.size),
            };
            let labels = BatchLabels {
                labels,
                outputs: &facts.outputs,
            };
            self.state
                .acc
                .add(&self.model.compiled, out, labels, size, self.units);
            clock.examples += size as f64;
        }
        if let Some(p) = clock.profile.as_mut() {
            p.metrics_s += started.elapsed().as_secs_f64();
        }
        self.after_steps(last)
    }

    /// After steps up to `last` were added to the metrics: `on_train_batch_end` and what
    /// falls between steps.
    fn after_steps(&mut self, last: u64) -> Result<StepEnd> {
        let logs = self.running_logs();
        self.hooks(|c, ctx| c.on_train_batch_end(last, &logs, ctx))?;
        self.between_steps()?;
        Ok(match self.control.stop_training {
            true => StepEnd::Stop,
            false => StepEnd::Next,
        })
    }

    /// A step whose loss and outputs stay on the device until the window's end.
    fn deferred_step(
        &mut self,
        step: u64,
        batch: crate::batch::DeviceBatch,
        host: kiln_data::Element,
        clock: &mut EpochClock,
    ) -> Result<StepEnd> {
        let guarded = self.opts.on_nan != OnNan::Continue;
        if self.window.steps.is_empty() {
            self.hooks(|c, ctx| c.on_train_batch_begin(step, ctx))?;
            self.window.start = guarded.then(|| Start {
                net: self.model.net.clone(),
                optim: self.model.optim.clone(),
                iterations: self.control.iterations,
                parts: Vec::new(),
            });
        }
        let facts = StepFacts::of(step, &batch);
        let rerun = guarded.then(|| (batch.clone(), host));
        let (net, rate) = self.begin_step();
        let m = &mut *self.model;
        let (net, pending) = self.accumulation.train_step_deferred(
            net,
            &mut m.optim,
            &m.spec,
            &m.compiled,
            batch,
            rate,
            clock.profile.as_mut(),
        )?;
        m.net = net;
        self.control.iterations += 1;
        self.window.steps.push(Deferred {
            facts,
            pending,
            rerun,
        });
        match self.window.ends_at(step) {
            true => self.read_window(clock),
            false => Ok(StepEnd::Next),
        }
    }

    /// Reads back the window's steps in one go and records them; after a non-finite loss
    /// (with a guarding NaN policy), runs the window again one step at a time instead.
    fn read_window(&mut self, clock: &mut EpochClock) -> Result<StepEnd> {
        if !self.window.custom.is_empty() {
            return self.read_custom_window(clock);
        }
        if self.window.steps.is_empty() {
            return Ok(StepEnd::Next);
        }
        let Taken {
            pending,
            rerun,
            start,
        } = self.window.take();
        let outs = PendingOutput::read_all(pending, clock.profile.as_mut());
        if let Some(start) = start
            && outs.iter().any(|o| !o.loss.is_finite())
        {
            return self.rerun(start, rerun, clock);
        }
        self.accumulation.grad_norms.settle();
        let done = rerun
            .into_iter()
            .zip(outs)
            .map(|((facts, _), out)| Done { facts, out })
            .collect();
        self.record(done, clock)
    }

    /// Runs a window's steps again from its start, one read per step, so that the NaN policy
    /// acts at the step whose loss was not finite (as with `steps_per_execution = 1`).
    fn rerun(
        &mut self,
        start: Start,
        steps: Vec<(
            StepFacts,
            Option<(crate::batch::DeviceBatch, kiln_data::Element)>,
        )>,
        clock: &mut EpochClock,
    ) -> Result<StepEnd> {
        let grad_norms = &mut self.accumulation.grad_norms;
        grad_norms.discard_pending();
        grad_norms.defer(false);
        self.model.net = start.net;
        self.model.optim = start.optim;
        self.control.iterations = start.iterations;
        let mut done = Vec::with_capacity(steps.len());
        for (facts, rerun) in steps {
            let (batch, host) = rerun.expect("a guarded window keeps its batches");
            let step = facts.step;
            match self.train_batch(batch, clock.profile.as_mut())? {
                Some(out) => done.push(Done { facts, out }),
                None => match self.non_finite(step, &host)? {
                    StepEnd::Next => {}
                    end => return Ok(end),
                },
            }
        }
        self.accumulation.grad_norms.defer(true);
        self.record(done, clock)
    }

    /// The batch of step `step`.
    fn fetch(&mut self, step: u64) -> Result<Next> {
        let target = Target {
            spec: &self.model.spec,
            compiled: &self.model.compiled,
            device: &self.device,
        };
        let strategy = &mut self.accumulation.strategy;
        self.input.next(step, self.state.epoch, &target, strategy)
    }

    /// Seeds the step's dropout, takes the network out for the step and returns it with the
    /// step's learning rate.
    fn begin_step(&mut self) -> (Network, f64) {
        let m = &mut *self.model;
        // Dropout masks depend on the seed and the step only (see `Model::fit_with`).
        m.device.seed(step_seed(m.seed, self.control.iterations));
        self.accumulation
            .grad_norms
            .at_step(self.control.iterations);
        let net = std::mem::replace(&mut m.net, Network { layers: Vec::new() });
        (net, self.control.rate())
    }

    /// Runs the step on `batch`; `None` when its loss was not finite (nothing was applied).
    fn train_batch(
        &mut self,
        batch: crate::batch::DeviceBatch,
        profile: Option<&mut StepProfile>,
    ) -> Result<Option<crate::step::StepOutput>> {
        let guarded = self.opts.on_nan != OnNan::Continue;
        let (net, rate) = self.begin_step();
        let m = &mut *self.model;
        let (net, out, applied) = self.accumulation.train_step(
            net,
            &mut m.optim,
            &m.spec,
            &m.compiled,
            batch,
            rate,
            guarded,
            profile,
        )?;
        m.net = net;
        self.state.loss_scale = self.accumulation.loss_scale();
        self.control.iterations += 1;
        Ok(applied.then_some(out))
    }

    /// The NaN policy after a non-finite loss at `step` (the network is as before the batch).
    fn non_finite(&mut self, step: u64, host: &kiln_data::Element) -> Result<StepEnd> {
        self.state.recent_grad_norms = self.accumulation.grad_norms.samples();
        let action = self.model.on_non_finite(
            self.opts,
            &mut self.control,
            &mut self.state,
            self.input.cursor_mut(),
            (step, host),
            self.callbacks,
        )?;
        Ok(match action {
            NanAction::Skip => StepEnd::Next,
            NanAction::Restart => StepEnd::Restart,
        })
    }

    /// The epoch's logs so far, with the loss scale.
    fn running_logs(&self) -> Logs {
        let mut logs = self.state.acc.logs(&self.model.compiled, self.units);
        if let Some(ls) = self.state.loss_scale {
            logs.set(LOSS_SCALE, ls.scale);
        }
        logs
    }

    /// Checkpoints and stop requests, which fall on optimizer-update boundaries: the gradients
    /// of a partial accumulation window are not checkpointed, so a stop waits for the window
    /// to complete, and a batch-count checkpoint that falls inside one is written at its end.
    fn between_steps(&mut self) -> Result<()> {
        let at_update = self.accumulation.pending() == 0;
        let Some(backup) = self.opts.backup.as_ref() else {
            return self.stop_requested(at_update, None);
        };
        if let SaveFreq::Batches(n) = backup.save_freq
            && self.control.iterations.is_multiple_of(n.max(1))
        {
            self.checkpoint_due = true;
        }
        self.stop_requested(at_update, Some(backup))?;
        if at_update && self.checkpoint_due {
            self.checkpoint(backup)?;
            self.checkpoint_due = false;
        }
        Ok(())
    }

    /// [`KilnError::Interrupted`] (after a checkpoint, with BackupAndRestore) when a signal
    /// asked to stop and the step ended an update.
    fn stop_requested(&mut self, at_update: bool, backup: Option<&super::Backup>) -> Result<()> {
        let requested = self.opts.interrupt.as_ref().and_then(|i| i.requested());
        let Some(signal) = requested.filter(|_| at_update) else {
            return Ok(());
        };
        let checkpoint = match backup {
            Some(backup) => Some(self.checkpoint(backup)?),
            None => None,
        };
        Err(KilnError::Interrupted {
            signal,
            iterations: self.control.iterations,
            checkpoint,
        })
    }

    /// The end of epoch `epoch`: its logs (training, timing, validation, skipped input),
    /// `on_epoch_end`, the history and the epoch's checkpoint.
    fn end_epoch(
        &mut self,
        epoch: usize,
        clock: EpochClock,
        validation: Option<&Dataset>,
    ) -> Result<Logs> {
        self.flush();
        let train_skips = self.input.end_epoch();
        skips::check_not_all_skipped(train_skips.as_ref(), self.state.acc.batches, epoch)?;
        let train_time = clock.started.elapsed().as_secs_f64();
        let mut logs = self.train_logs(&clock, train_time);
        let validated = validation.is_some() && self.opts.validates_after(epoch);
        let mut val_skips = None;
        if let Some(val) = validation.filter(|_| validated) {
            let (val_logs, skipped) = self.model.evaluate_split(val, DataSplit::Validation)?;
            logs.extend_prefixed("val_", &val_logs);
            val_skips = skipped;
        }
        self.control.skipped = SkippedInput {
            train: train_skips,
            validation: val_skips,
        };
        self.skip_report
            .add_to(&mut logs, &self.control.skipped, validated);
        let epoch_time = clock.started.elapsed().as_secs_f64();
        self.hooks(|c, ctx| c.on_epoch_end(epoch, &mut logs, ctx))?;
        let history = &mut self.state.history;
        history.push(epoch, &logs);
        if clock.profile.is_some() {
            history.profile = clock.profile;
        }
        history.epoch_time_s.push(epoch_time);
        history
            .samples_per_second
            .push(clock.examples / train_time.max(1e-9));
        self.state.epoch += 1;
        self.state.acc = self.state.acc.next_epoch();
        if let Some(backup) = &self.opts.backup {
            self.checkpoint(backup)?;
        }
        Ok(logs)
    }

    /// The epoch's training logs: loss and metrics, skipped examples, throughput, input wait,
    /// the strategy's communication times and skipped NaN steps.
    fn train_logs(&mut self, clock: &EpochClock, train_time: f64) -> Logs {
        let mut logs = self.running_logs();
        let strategy = &mut self.accumulation.strategy;
        if strategy.shards_input() {
            // Each worker skipped the non-finite examples of its own shard.
            let guard = self.input.guard_mut();
            guard.sum_skipped(|n| strategy.sum_over_workers(n));
        }
        self.input.guard_mut().report(&mut logs);
        // Throughput and time blocked on the input pipeline, for TensorBoard
        // (`epoch_samples_per_second`, `epoch_input_wait_seconds`), CSVLogger and the display.
        logs.set(SAMPLES_PER_SECOND, clock.examples / train_time.max(1e-9));
        logs.set(INPUT_WAIT_SECONDS, self.input.input_wait);
        let communication = strategy.take_reduce_seconds();
        if self.model.strategy.communicates() {
            logs.set(diagnosis::COMMUNICATION_SECONDS, communication);
            logs.set(diagnosis::TRAIN_SECONDS, train_time);
        }
        if let Some((wait, all_reduce)) = strategy.take_wait_and_all_reduce_seconds() {
            logs.set(diagnosis::WAIT_SECONDS, wait);
            logs.set(diagnosis::ALL_REDUCE_SECONDS, all_reduce);
        }
        if self.state.skipped_nan_steps > 0 {
            let skipped = std::mem::take(&mut self.state.skipped_nan_steps);
            logs.set("skipped_nan_steps", skipped as f64);
        }
        logs
    }
}

/// Steps per host read for this `fit`: `compile.steps_per_execution`, or 1 (with a note on
/// stderr) where the settings need each step's answer on the host (see [`super::window`]).
fn read_every(model: &Model, opts: &FitOptions, accumulation: &GradientAccumulation) -> u64 {
    let asked = model.compiled.steps_per_execution;
    if asked <= 1 {
        return 1;
    }
    let scaled = accumulation.loss_scale().is_some();
    let why = match model.train_step.is_some() {
        // A custom step's loss scale is updated inside the step; the window's start does not
        // keep it for a rerun.
        true if scaled => Some("a custom train step reads each step's logs under a loss scale"),
        true => None,
        false => why_not_deferred(
            accumulation.loss_scale().is_some(),
            &accumulation.strategy,
            opts.on_nan != OnNan::Continue,
            model.compiled.gradients.gradient_accumulation_steps,
        ),
    };
    match why {
        Some(why) => {
            eprintln!("note: compile.steps_per_execution = {asked} reads every step here: {why}");
            1
        }
        None => asked,
    }
}
