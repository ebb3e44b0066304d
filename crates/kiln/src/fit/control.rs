//! What callbacks can change while `fit` runs ([`Control`]), and the view of the model they
//! get ([`LoopContext`], kiln's [`FitContext`]).

use std::path::Path;

use super::callback::{self, FitContext, NamedWeight, WeightsSnapshot};
use super::skips::SkippedInput;
use crate::error::Result;
use crate::model::{ModelSpec, Network, weights};

/// What callbacks can change during `fit`: the learning rate, the stop request, and the
/// batch count.
#[derive(Debug)]
pub(super) struct Control {
    /// The constant learning rate (unused while `schedule` sets the rate).
    pub(super) learning_rate: f64,
    /// `compile.optimizer.learning_rate` when it is a schedule: the rate of each step is the
    /// schedule at `iterations`, and callbacks may not set it.
    pub(super) schedule: Option<crate::compile::Schedule>,
    /// A callback tried to set the rate of a scheduled optimizer (see [`Control::refusal`]).
    pub(super) set_refused: bool,
    pub(super) stop_training: bool,
    pub(super) iterations: u64,
    /// The records the input skipped in the epoch that just ended.
    pub(super) skipped: SkippedInput,
}

impl Control {
    /// The state at the start of `fit`: the compiled optimizer's rate (or schedule).
    pub(super) fn new(compiled: &crate::compile::Compiled) -> Control {
        Control {
            learning_rate: compiled.optimizer.learning_rate(),
            schedule: compiled.optimizer.schedule().cloned(),
            set_refused: false,
            stop_training: false,
            iterations: 0,
            skipped: SkippedInput::default(),
        }
    }

    /// The rate of the next optimizer step: Keras' `optimizer.learning_rate`, the schedule at
    /// `optimizer.iterations` when there is one.
    pub(super) fn rate(&self) -> f64 {
        self.schedule
            .as_ref()
            .map_or(self.learning_rate, |s| s.at(self.iterations))
    }

    /// Keras refuses to set the learning rate of an optimizer created with a schedule
    /// (`TypeError: This optimizer was created with a LearningRateSchedule object as its
    /// learning_rate constructor argument, hence its learning rate is not settable`); kiln
    /// stops `fit` with a config error after the callback that tried.
    pub(super) fn refusal(&mut self) -> Result<()> {
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
pub(super) struct LoopContext<'a> {
    pub(super) control: &'a mut Control,
    pub(super) net: &'a mut Network,
    pub(super) name: &'a str,
    pub(super) spec: &'a ModelSpec,
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
