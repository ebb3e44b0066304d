//! Callbacks: Keras' hooks (`keras/src/callbacks/callback.py`) as a Rust trait, and
//! [`FitContext`], what a hook may read and change on the model being trained (Keras'
//! `self.model`: `stop_training`, `optimizer.learning_rate`, `optimizer.iterations`,
//! `get_weights` / `set_weights`).

use std::any::Any;

use super::skips::SkippedInput;
use crate::error::Result;
use crate::logs::Logs;

/// Hooks that `fit` calls, with Keras' names and order: `on_train_begin`, then per epoch
/// `on_epoch_begin`, per batch `on_train_batch_begin` / `on_train_batch_end`, then
/// `on_epoch_end` (after validation), and `on_train_end`. Every method has an empty default.
///
/// Epochs are 0-based and absolute: a run resumed at epoch 3 calls `on_epoch_begin(3, ..)`.
/// A hook that returns an error ends `fit` with it (Keras: an exception in a callback).
/// Stopping early is a request: [`FitContext::set_stop_training`] (Keras'
/// `model.stop_training = True`); `fit` checks it after every batch and epoch.
pub trait Callback {
    /// Before the first epoch.
    fn on_train_begin(&mut self, _ctx: &mut dyn FitContext) -> Result<()> {
        Ok(())
    }
    /// Before each epoch; `steps` is the number of batches when the dataset's cardinality is
    /// known.
    fn on_epoch_begin(
        &mut self,
        _epoch: usize,
        _epochs: usize,
        _steps: Option<u64>,
        _ctx: &mut dyn FitContext,
    ) -> Result<()> {
        Ok(())
    }
    /// Before each training batch (`step` is 0-based within the epoch).
    fn on_train_batch_begin(&mut self, _step: u64, _ctx: &mut dyn FitContext) -> Result<()> {
        Ok(())
    }
    /// After each training batch (`step` is 0-based within the epoch); `logs` hold running means
    /// over the epoch so far. [`FitContext::iterations`] already counts this batch.
    fn on_train_batch_end(
        &mut self,
        _step: u64,
        _logs: &Logs,
        _ctx: &mut dyn FitContext,
    ) -> Result<()> {
        Ok(())
    }
    /// After each epoch, with training and validation (`val_*`) values. As in Keras, a hook may
    /// add entries (`ReduceLROnPlateau` adds `learning_rate`) that later callbacks and the
    /// history see.
    fn on_epoch_end(
        &mut self,
        _epoch: usize,
        _logs: &mut Logs,
        _ctx: &mut dyn FitContext,
    ) -> Result<()> {
        Ok(())
    }
    /// After the last epoch (also after an early stop); `logs` are the last epoch's.
    fn on_train_end(&mut self, _logs: &Logs, _ctx: &mut dyn FitContext) -> Result<()> {
        Ok(())
    }
    /// Before `fit` commits a BackupAndRestore checkpoint (at every save: the run's start,
    /// every `save_freq` batches, epoch ends, a stop on a signal): make durable what the
    /// callback wrote for the steps the checkpoint covers (`TensorBoard` flushes and syncs its
    /// event files), so that a process killed right after the commit has lost nothing that the
    /// resumed run will not write again. Not a Keras hook; empty by default.
    ///
    /// # Errors
    /// An error ends `fit` before the checkpoint is written.
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    /// What to keep in BackupAndRestore checkpoints (counters, best values), so that a resumed
    /// run decides as an uninterrupted one would. `None` (the default): nothing.
    fn state(&self) -> Option<serde_json::Value> {
        None
    }
    /// Puts back what [`Callback::state`] returned, before `on_train_begin` of a resumed run,
    /// and in the middle of `fit` when a NaN rollback goes back to a checkpoint (the next
    /// `on_epoch_begin` is then the checkpoint's epoch).
    ///
    /// # Errors
    /// [`crate::KilnError::Callback`] when the state does not belong to this callback.
    fn restore_state(&mut self, _state: &serde_json::Value) -> Result<()> {
        Ok(())
    }
}

/// A copy of a model's weights taken by [`FitContext::snapshot_weights`], opaque to callbacks:
/// they keep it and hand it back to [`FitContext::restore_weights`]. Its content is whatever
/// the context stores (`Model::fit` stores a clone of its Burn network, which shares no
/// mutable state with the live one; [`ManualContext`] stores named host arrays).
pub struct WeightsSnapshot(Box<dyn Any + Send>);

impl WeightsSnapshot {
    /// Wraps a context's copy of the weights.
    pub fn new<T: Any + Send>(weights: T) -> WeightsSnapshot {
        WeightsSnapshot(Box::new(weights))
    }

    /// The copy, if it is a `T` (contexts check that a snapshot is theirs).
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl std::fmt::Debug for WeightsSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WeightsSnapshot(..)")
    }
}

/// One weight for summaries: its Keras path (`sequential/dense/kernel`) and values (row-major,
/// Keras layout).
pub type NamedWeight = (String, Vec<f32>);

/// What a callback may read and change while `fit` runs — Keras' `self.model` seen from a
/// callback. `Model::fit` implements it over its network and optimizer; [`ManualContext`]
/// implements it over plain values, for tests and for loops other than `fit`.
pub trait FitContext {
    /// The learning rate the next optimizer step uses (Keras' `optimizer.learning_rate`).
    fn learning_rate(&self) -> f64;
    /// Sets the learning rate from the next optimizer step on (Keras'
    /// `optimizer.learning_rate = lr`).
    fn set_learning_rate(&mut self, lr: f64);
    /// Whether training was asked to stop.
    fn stop_training(&self) -> bool;
    /// Keras' `model.stop_training = value`: `true` ends `fit` after the current batch (or
    /// epoch, when set at epoch end); `on_train_end` still runs.
    fn set_stop_training(&mut self, value: bool);
    /// Training batches done so far, counted over the whole run: a resumed run starts from
    /// the checkpoint's count (Keras' `optimizer.iterations`). Inside `on_train_batch_end`
    /// it includes the batch just done.
    fn iterations(&self) -> u64;
    /// What the input pipelines' `ignore_errors` stages dropped in the epoch that just ended
    /// (training, and validation when it ran): set before `on_epoch_end`. Default: nothing.
    fn skipped_input(&self) -> SkippedInput {
        SkippedInput::default()
    }
    /// A copy of the current weights, for [`FitContext::restore_weights`] later.
    fn snapshot_weights(&self) -> WeightsSnapshot;
    /// Puts back weights from [`FitContext::snapshot_weights`] (Keras' `set_weights`).
    /// Optimizer state is left as is, as in Keras.
    ///
    /// # Errors
    /// [`crate::KilnError::Callback`] when the snapshot was taken by another kind of context.
    fn restore_weights(&mut self, snapshot: &WeightsSnapshot) -> Result<()>;
    /// The weights with their Keras paths, for histograms. May copy from the device: call it
    /// at epoch ends, not per batch.
    fn weights(&self) -> Vec<NamedWeight>;
    /// Writes the current weights to `path` (Keras' `model.save_weights`: safetensors with
    /// Keras names for `Model::fit`), atomically.
    ///
    /// # Errors
    /// [`crate::KilnError::Io`] naming the path.
    fn save_weights(&self, path: &std::path::Path) -> Result<()>;
}

/// A [`FitContext`] over plain values: drive callbacks by hand (tests, tools, custom loops),
/// then read back what they asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ManualContext {
    /// The current learning rate.
    pub learning_rate: f64,
    /// Whether a callback asked to stop.
    pub stop_training: bool,
    /// Batches done (set it before `on_train_batch_end`, as `fit` does).
    pub iterations: u64,
    /// The "model": named weights. Snapshots copy them; `save_weights` writes them as JSON.
    pub weights: Vec<NamedWeight>,
}

impl ManualContext {
    /// A context with learning rate `learning_rate` and no weights.
    pub fn new(learning_rate: f64) -> ManualContext {
        ManualContext {
            learning_rate,
            ..ManualContext::default()
        }
    }
}

impl FitContext for ManualContext {
    fn learning_rate(&self) -> f64 {
        self.learning_rate
    }
    fn set_learning_rate(&mut self, lr: f64) {
        self.learning_rate = lr;
    }
    fn stop_training(&self) -> bool {
        self.stop_training
    }
    fn set_stop_training(&mut self, value: bool) {
        self.stop_training = value;
    }
    fn iterations(&self) -> u64 {
        self.iterations
    }
    fn snapshot_weights(&self) -> WeightsSnapshot {
        WeightsSnapshot::new(self.weights.clone())
    }
    fn restore_weights(&mut self, snapshot: &WeightsSnapshot) -> Result<()> {
        let weights = snapshot
            .downcast_ref::<Vec<NamedWeight>>()
            .ok_or_else(|| foreign_snapshot("ManualContext"))?;
        self.weights = weights.clone();
        Ok(())
    }
    fn weights(&self) -> Vec<NamedWeight> {
        self.weights.clone()
    }
    fn save_weights(&self, path: &std::path::Path) -> Result<()> {
        let json = serde_json::to_vec(&self.weights).expect("weights serialize");
        crate::run_dir::write_atomic(path, &json)
    }
}

/// The error for a snapshot handed to a context that did not take it.
pub(crate) fn foreign_snapshot(context: &str) -> crate::KilnError {
    crate::KilnError::Callback {
        callback: context.to_string(),
        message: "the weights snapshot was taken from another kind of model; restore it into \
                  the model it came from"
            .to_string(),
    }
}
