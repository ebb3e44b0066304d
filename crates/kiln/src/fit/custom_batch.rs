//! The loop's side of a custom train step ([`crate::step::custom`]): the step run on the
//! model's parts, its logs checked and read back once, the NaN policy.

use std::time::Instant;

use super::super::custom_step::checked;
use super::{EpochClock, FitLoop, StepEnd};
use crate::batch::DeviceBatch;
use crate::error::{KilnError, Result};
use crate::fit::OnNan;
use crate::logs::StepProfile;
use crate::step::custom::StepContext;

impl FitLoop<'_, '_, '_, '_> {
    /// Step `step` of the epoch through the model's custom step: hooks, the step, the NaN
    /// policy on its `loss`, its logs into the epoch's, then what falls between steps.
    pub(super) fn custom_step(
        &mut self,
        step: u64,
        batch: DeviceBatch,
        host: kiln_data::Element,
        clock: &mut EpochClock,
    ) -> Result<StepEnd> {
        self.hooks(|c, ctx| c.on_train_batch_begin(step, ctx))?;
        let guarded = self.opts.on_nan != OnNan::Continue;
        let before = guarded.then(|| self.model.snapshot());
        let size = batch.size;
        let logs = self.run_custom(step, batch, clock.profile.as_mut())?;
        let loss = logs
            .iter()
            .find(|(n, _)| n == "loss")
            .map_or(f64::NAN, |l| l.1);
        if let Some(before) = before
            && !loss.is_finite()
        {
            // Nothing of the step is kept, as with the compiled step.
            self.model.restore(before);
            return self.custom_non_finite(step, loss, &host);
        }
        self.state.acc.add_custom(&logs, size);
        clock.examples += size as f64;
        self.after_steps(step)
    }

    /// Runs the custom step on `batch` and returns its logs, read back.
    fn run_custom(
        &mut self,
        step: u64,
        batch: DeviceBatch,
        profile: Option<&mut StepProfile>,
    ) -> Result<Vec<(String, f64)>> {
        let started = Instant::now();
        let (net, rate) = self.begin_step();
        let iterations = self.control.iterations;
        let scale = self.accumulation.loss_scale();
        let mut parts = self
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
        // go back to the model either way.
        let run = std::panic::AssertUnwindSafe(|| train_step.train_step(&mut parts, batch, &ctx));
        let logs = std::panic::catch_unwind(run).unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("panicked: {what}"))
        });
        if let Some(scale) = parts.loss_scale() {
            self.accumulation.restore_loss_scale(scale);
            self.state.loss_scale = Some(scale);
        }
        self.model.put_back(parts);
        self.control.iterations += 1;
        let read = Instant::now();
        let logs = checked(train_step.name(), logs)?;
        if let Some(p) = profile {
            p.custom_step_s += (read - started).as_secs_f64();
            p.metrics_s += read.elapsed().as_secs_f64();
            p.steps += 1;
            p.host_reads += 1;
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
