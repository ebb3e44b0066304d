//! `LearningRateScheduler`: set the learning rate from a schedule
//! (`keras/src/callbacks/learning_rate_scheduler.py`, Keras 3).

use super::{as_keras_lr, set_keras_lr};
use crate::compile::Schedule;
use crate::error::Result;
use crate::fit::{Callback, FitContext, Logs};

/// When a [`Schedule`] is evaluated (TOML: `"epoch"`, `"step"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleUnit {
    /// At each epoch begin, at the epoch index — Keras' `LearningRateScheduler`.
    #[default]
    Epoch,
    /// At each batch begin, at the number of optimizer steps done
    /// ([`FitContext::iterations`], 0 for the first step of a run) — a Keras
    /// `LearningRateSchedule` passed as the optimizer's `learning_rate`. A resumed run
    /// continues the schedule where it stopped.
    Step,
}

/// What computes the rate.
enum Rule {
    /// A built-in schedule.
    Schedule(Schedule, ScheduleUnit),
    /// Keras' `schedule(epoch, lr) -> new_lr`.
    Function(Box<dyn FnMut(usize, f64) -> f64 + Send>),
}

/// Keras' `LearningRateScheduler(schedule, verbose=0)`: at each epoch begin, the learning rate
/// becomes `schedule(epoch, lr)` (epoch 0-based, `lr` the current rate as Keras' float32
/// variable holds it; the new rate is stored rounded to float32, as in Keras). At each epoch
/// end the logs get `learning_rate`.
///
/// [`LearningRateScheduler::from_schedule`] takes a built-in [`Schedule`] instead, evaluated
/// per epoch or per optimizer step ([`ScheduleUnit`]).
///
/// ```
/// use kiln::callbacks::{LearningRateScheduler, Schedule, ScheduleUnit};
/// use kiln::fit::{Callback, ManualContext};
///
/// // Keras' docs example: keep the rate for 10 epochs, then multiply by exp(-0.1) each epoch.
/// let mut cb = LearningRateScheduler::new(|epoch, lr| {
///     if epoch < 10 { lr } else { lr * (-0.1f64).exp() }
/// });
/// let mut ctx = ManualContext::new(0.01);
/// for epoch in 0..12 {
///     cb.on_epoch_begin(epoch, 12, None, &mut ctx).unwrap();
/// }
/// // Rates are stored as float32, as Keras stores them.
/// assert!((ctx.learning_rate - 0.01 * (-0.2f64).exp()).abs() < 1e-8);
/// ```
pub struct LearningRateScheduler {
    rule: Rule,
    verbose: bool,
}

impl std::fmt::Debug for LearningRateScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("LearningRateScheduler");
        match &self.rule {
            Rule::Schedule(s, unit) => d.field("schedule", s).field("unit", unit),
            Rule::Function(_) => d.field("schedule", &"fn(epoch, lr)"),
        };
        d.field("verbose", &self.verbose).finish()
    }
}

impl LearningRateScheduler {
    /// Keras' form: `schedule(epoch, lr) -> new_lr`, called at each epoch begin.
    pub fn new(schedule: impl FnMut(usize, f64) -> f64 + Send + 'static) -> LearningRateScheduler {
        LearningRateScheduler {
            rule: Rule::Function(Box::new(schedule)),
            verbose: false,
        }
    }

    /// A built-in schedule, evaluated per epoch or per optimizer step.
    ///
    /// # Errors
    /// As [`Schedule::validate`].
    pub fn from_schedule(schedule: Schedule, unit: ScheduleUnit) -> Result<LearningRateScheduler> {
        schedule.validate()?;
        Ok(LearningRateScheduler {
            rule: Rule::Schedule(schedule, unit),
            verbose: false,
        })
    }

    /// Print Keras' message (`Epoch 1: LearningRateScheduler setting learning rate to 0.1.`)
    /// to stderr at each epoch begin.
    pub fn verbose(mut self, verbose: bool) -> Self {
        self.verbose = verbose;
        self
    }
}

impl Callback for LearningRateScheduler {
    fn on_epoch_begin(
        &mut self,
        epoch: usize,
        _epochs: usize,
        _steps: Option<u64>,
        ctx: &mut dyn FitContext,
    ) -> Result<()> {
        let lr = match &mut self.rule {
            Rule::Function(f) => f(epoch, as_keras_lr(ctx.learning_rate())),
            Rule::Schedule(s, ScheduleUnit::Epoch) => s.at(epoch as u64),
            // The first batch's rate, so that the epoch-begin message and the logs are right.
            Rule::Schedule(s, ScheduleUnit::Step) => s.at(ctx.iterations()),
        };
        set_keras_lr(ctx, lr);
        if self.verbose {
            eprintln!(
                "\nEpoch {}: LearningRateScheduler setting learning rate to {lr}.",
                epoch + 1
            );
        }
        Ok(())
    }

    fn on_train_batch_begin(&mut self, _step: u64, ctx: &mut dyn FitContext) -> Result<()> {
        if let Rule::Schedule(s, ScheduleUnit::Step) = &self.rule {
            let lr = s.at(ctx.iterations());
            set_keras_lr(ctx, lr);
        }
        Ok(())
    }

    fn on_epoch_end(
        &mut self,
        _epoch: usize,
        logs: &mut Logs,
        ctx: &mut dyn FitContext,
    ) -> Result<()> {
        logs.set("learning_rate", as_keras_lr(ctx.learning_rate()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::ManualContext;

    #[test]
    fn function_schedules_see_the_current_rate_at_each_epoch_begin() {
        // lr(e) = lr(e-1) * 0.5 from epoch 2 on: 0.1, 0.1, 0.05, 0.025 (float32 values).
        let mut seen = Vec::new();
        let mut cb = LearningRateScheduler::new(|epoch, lr| if epoch < 2 { lr } else { lr * 0.5 });
        let mut ctx = ManualContext::new(0.1);
        for epoch in 0..4 {
            cb.on_epoch_begin(epoch, 4, None, &mut ctx).unwrap();
            let mut logs = Logs::default();
            cb.on_epoch_end(epoch, &mut logs, &mut ctx).unwrap();
            seen.push(logs.get("learning_rate").unwrap() as f32);
        }
        assert_eq!(seen, vec![0.1f32, 0.1, 0.05, 0.025]);
    }

    #[test]
    fn epoch_unit_evaluates_the_schedule_at_the_epoch_index() {
        let s = Schedule::StepDecay {
            initial_learning_rate: 0.1,
            factor: 0.1,
            step_size: 2,
        };
        let mut cb = LearningRateScheduler::from_schedule(s, ScheduleUnit::Epoch).unwrap();
        let mut ctx = ManualContext::new(0.5);
        let mut lrs = Vec::new();
        // A resumed run begins at epoch 3 and gets epoch 3's rate straight away.
        for epoch in 3..6 {
            cb.on_epoch_begin(epoch, 6, None, &mut ctx).unwrap();
            for step in 0..4 {
                cb.on_train_batch_begin(step, &mut ctx).unwrap();
            }
            lrs.push(ctx.learning_rate as f32);
        }
        // 0.1 * 0.1^floor(e / 2): e3 -> 0.01, e4 -> 0.001, e5 -> 0.001.
        assert_eq!(lrs, vec![0.01f32, 0.001, 0.001]);
    }

    #[test]
    fn step_unit_follows_the_optimizer_step_count() {
        // PiecewiseConstantDecay([3, 5], [1.0, 0.5, 0.25]): steps 0..=3 -> 1, 4..=5 -> 0.5.
        let s = Schedule::PiecewiseConstantDecay {
            boundaries: vec![3, 5],
            values: vec![1.0, 0.5, 0.25],
        };
        let mut cb = LearningRateScheduler::from_schedule(s, ScheduleUnit::Step).unwrap();
        let mut ctx = ManualContext::new(9.0);
        let mut lrs = Vec::new();
        for epoch in 0..2 {
            cb.on_epoch_begin(epoch, 2, Some(4), &mut ctx).unwrap();
            for step in 0..4 {
                cb.on_train_batch_begin(step, &mut ctx).unwrap();
                lrs.push(ctx.learning_rate);
                ctx.iterations += 1; // the step runs
            }
        }
        assert_eq!(lrs, vec![1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.25, 0.25]);
    }
}
