//! Callbacks: Keras' hooks (`keras/src/callbacks/callback.py`) as a Rust trait.

use super::logs::Logs;

/// Hooks that `fit` calls, with Keras' names. Every method has an empty default.
pub trait Callback {
    /// Before the first epoch.
    fn on_train_begin(&mut self) {}
    /// Before each epoch; `steps` is the number of batches when the dataset's cardinality is
    /// known.
    fn on_epoch_begin(&mut self, _epoch: usize, _epochs: usize, _steps: Option<u64>) {}
    /// After each training batch (`step` is 0-based within the epoch); `logs` hold running means
    /// over the epoch so far.
    fn on_train_batch_end(&mut self, _step: u64, _logs: &Logs) {}
    /// After each epoch, with training and validation values.
    fn on_epoch_end(&mut self, _epoch: usize, _logs: &Logs) {}
    /// After the last epoch.
    fn on_train_end(&mut self, _logs: &Logs) {}
    /// Checked after each batch and epoch: `true` ends training (Keras' `model.stop_training`).
    fn stop_training(&self) -> bool {
        false
    }
}
