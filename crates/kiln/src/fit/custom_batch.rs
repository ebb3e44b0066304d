//! The loop's side of a custom train step ([`crate::step::custom`]): the step run on the
//! model's parts, its logs checked and read back (after each step, or once per window of
//! `steps_per_execution` steps), the NaN policy.

use std::time::Instant;

use super::super::custom_step::checked;
use super::super::resume::step_seed;
use super::super::window::{CustomDeferred, Start};
use super::{EpochClock, FitLoop, StepEnd};
use crate::batch::DeviceBatch;
use crate::distribute::train_step_replicated;
use crate::error::{KilnError, Result};
use crate::fit::OnNan;
use crate::logs::StepProfile;
use crate::step::custom::{StepContext, StepLogs};

/// The value of `loss` in read-back logs (NaN when absent).
fn loss_of(logs: &[(String, f64)]) -> f64 {
    logs.iter()
        .find(|(n, _)| n == "loss")
        .map_or(f64::NAN, |l| l.1)
}

impl FitLoop<'_, '_, '_, '_> {
    /// Step `step` of the epoch through the model's custom step: hooks, the step, the NaN
    /// policy on its `loss`, its logs into the epoch's, then what falls between steps (with
    /// deferred reads: at the window's end).
    pub(super) fn custom_step(
        &mut self,
        step: u64,
        batch: DeviceBatch,
        host: kiln_data::Element,
        clock: &mut EpochClock,
    ) -> Result<StepEnd> {
        if self.window.defers() {
            return self.deferred_custom_step(step, batch, host, clock);
        }
        self.hooks(|c, ctx| c.on_train_batch_begin(step, ctx))?;
        match self.custom_once(step, batch, &host, clock)? {
            Some(end) => Ok(end),
            None => self.after_steps(step),
        }
    }

    /// The step read back at once: `None` when its logs were added to the epoch's, or what
    /// the NaN policy decided after a non-finite loss (its updates undone).
    fn custom_once(
        &mut self,
        step: u64,
        batch: DeviceBatch,
        host: &kiln_data::Element,
        clock: &mut EpochClock,
    ) -> Result<Option<StepEnd>> {
        let guarded = self.opts.on_nan != OnNan::Continue;
        let before = guarded.then(|| self.model.snapshot());
        let size = batch.size;
        let logs = self.run_custom(step, batch, clock.profile.as_mut())?;
        let logs = read_logs(vec![logs], clock.profile.as_mut()).remove(0);
        let loss = loss_of(&logs);
        if let Some(before) = before
            && !loss.is_finite()
        {
            // Nothing of the step is kept, as with the compiled step.
            self.model.restore(before);
            return self.custom_non_finite(step, loss, host).map(Some);
        }
        self.state.acc.add_custom(&logs, size);
        clock.examples += size as f64;
        Ok(None)
    }

    /// A step whose logs stay on the device until the window's end (`steps_per_execution`).
    fn deferred_custom_step(
        &mut self,
        step: u64,
        batch: DeviceBatch,
        host: kiln_data::Element,
        clock: &mut EpochClock,
    ) -> Result<StepEnd> {
        let guarded = self.opts.on_nan != OnNan::Continue;
        if self.window.custom.is_empty() {
            self.hooks(|c, ctx| c.on_train_batch_begin(step, ctx))?;
            self.window.start = guarded.then(|| {
                let (net, optim, parts) = self.model.snapshot();
                Start {
                    net,
                    optim,
                    iterations: self.control.iterations,
                    parts,
                }
            });
        }
        let size = batch.size;
        let rerun = guarded.then(|| (batch.clone(), host));
        let logs = self.run_custom(step, batch, clock.profile.as_mut())?;
        self.window.custom.push(CustomDeferred {
            step,
            logs,
            size,
            rerun,
        });
        match self.window.ends_at(step) {
            true => self.read_custom_window(clock),
            false => Ok(StepEnd::Next),
        }
    }

    /// Reads the window's custom logs back in one go and adds them; after a non-finite loss
    /// (with a guarding NaN policy), runs the window again from its start one step at a time.
    pub(super) fn read_custom_window(&mut self, clock: &mut EpochClock) -> Result<StepEnd> {
        let steps = std::mem::take(&mut self.window.custom);
        let Some(last) = steps.last().map(|d| d.step) else {
            return Ok(StepEnd::Next);
        };
        let start = self.window.start.take();
        let mut facts = Vec::with_capacity(steps.len());
        let mut pending = Vec::with_capacity(steps.len());
        for d in steps {
            pending.push(d.logs);
            facts.push((d.step, d.size, d.rerun));
        }
        let read = read_logs(pending, clock.profile.as_mut());
        if let Some(start) = start
            && read.iter().any(|l| !loss_of(l).is_finite())
        {
            self.model.restore((start.net, start.optim, start.parts));
            self.control.iterations = start.iterations;
            for (step, _, rerun) in facts {
                let (batch, host) = rerun.expect("a guarded window keeps its batches");
                if let Some(end) = self.custom_once(step, batch, &host, clock)?
                    && !matches!(end, StepEnd::Next)
                {
                    return Ok(end);
                }
            }
            return self.after_steps(last);
        }
        for ((_, size, _), logs) in facts.iter().zip(&read) {
            self.state.acc.add_custom(logs, *size);
            clock.examples += *size as f64;
        }
        self.after_steps(last)
    }

    /// Runs the custom step on `batch` and returns its logs, checked, not read back.
    fn run_custom(
        &mut self,
        step: u64,
        batch: DeviceBatch,
        profile: Option<&mut StepProfile>,
    ) -> Result<StepLogs> {
        let started = Instant::now();
        let (net, rate) = self.begin_step();
        let iterations = self.control.iterations;
        let scale = self.accumulation.loss_scale();
        let parts = self
            .model
            .take_parts(net, rate, iterations)
            .with_loss_scale(scale);
        let ctx = StepContext {
            epoch: self.state.epoch,
            step,
            iterations,
        };
        let train_step = self.model.train_step.clone().expect("a custom step is set");
        // A panic in the step's code stops the run with an error naming the step; the parts
        // go back to the model either way. Under a strategy the step runs once per replica.
        let seed = step_seed(self.model.seed, iterations);
        let strategy = &mut self.accumulation.strategy;
        let (parts, logs) = train_step_replicated(strategy, &*train_step, parts, batch, &ctx, seed);
        // The run's own scale (a resume under another precision may have read one).
        self.state.loss_scale = parts.loss_scale();
        if let Some(scale) = parts.loss_scale() {
            self.accumulation.restore_loss_scale(scale);
        }
        self.model.put_back(parts);
        self.control.iterations += 1;
        let logs = checked(train_step.name(), logs)?;
        if let Some(p) = profile {
            p.custom_step_s += started.elapsed().as_secs_f64();
        }
        Ok(logs)
    }

    /// The NaN policy after a custom step's non-finite `loss` at `step` (its updates undone).
    fn custom_non_finite(
        &mut self,
        step: u64,
        loss: f64,
        host: &kiln_data::Element,
    ) -> Result<StepEnd> {
        if self.opts.on_nan != OnNan::Stop {
            return self.non_finite(step, host);
        }
        let name = self.model.train_step.as_ref().map(|s| s.name().to_string());
        Err(KilnError::TrainStep {
            step: name.unwrap_or_default(),
            key: "loss".into(),
            message: format!(
                "is {loss} at epoch {}, batch {step} (step {} of the run); stopping \
                 (fit.on_nan = \"stop\"; \"skip_step\" skips such batches, \"rollback\" \
                 restores the last checkpoint with a lower learning rate). The step's updates \
                 were undone",
                self.state.epoch + 1,
                self.control.iterations
            ),
        })
    }
}

/// Reads several steps' logs back with one host read (time counted as `metrics_s`, the steps
/// as `steps`, the read as one of `host_reads` in `profile`).
fn read_logs(steps: Vec<StepLogs>, profile: Option<&mut StepProfile>) -> Vec<Vec<(String, f64)>> {
    let clock = Instant::now();
    let n = steps.len() as u64;
    let read = StepLogs::read_all(steps);
    if let Some(p) = profile {
        p.metrics_s += clock.elapsed().as_secs_f64();
        p.steps += n;
        p.host_reads += 1;
    }
    read
}
