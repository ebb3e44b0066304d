//! Keras' built-in callbacks with Keras' names, arguments, defaults and semantics
//! (`keras/src/callbacks/*.py`, Keras 3.15), as [`Callback`](crate::fit::Callback)s:
//!
//! | kiln | Keras |
//! |---|---|
//! | [`EarlyStopping`] | `EarlyStopping(monitor="val_loss", min_delta=0, patience=0, mode="auto", baseline=None, restore_best_weights=False, start_from_epoch=0)` |
//! | [`ReduceLROnPlateau`] | `ReduceLROnPlateau(monitor="val_loss", factor=0.1, patience=10, mode="auto", min_delta=1e-4, cooldown=0, min_lr=0)` |
//! | [`LearningRateScheduler`] + [`Schedule`] | `LearningRateScheduler(schedule)`; `ExponentialDecay`, `CosineDecay` (with warm-up), `PiecewiseConstantDecay`, step decay |
//! | [`CSVLogger`] | `CSVLogger(filename, separator=",", append=False)` |
//! | [`TerminateOnNaN`] | `TerminateOnNaN(raise_error=False)` |
//! | [`TensorBoard`] | `TensorBoard(log_dir="logs", histogram_freq=0, write_steps_per_second=False, update_freq="epoch")` |
//! | [`ModelCheckpoint`] | `ModelCheckpoint(filepath, monitor="val_loss", verbose=0, save_best_only=False, save_weights_only=False, mode="auto", save_freq="epoch", initial_value_threshold=None)` |
//!
//! Callbacks act on the model through [`FitContext`](crate::fit::FitContext): the learning
//! rate, the stop request, the step count and weight snapshots (for `restore_best_weights`).
//! They are pure logic over logs and that context, so each is tested by feeding a scripted
//! metric sequence to a [`ManualContext`](crate::fit::ManualContext) and comparing with what
//! Keras does with the same sequence (`tests/reference/keras_callbacks_reference.py`).
//!
//! BackupAndRestore is not a callback object in kiln: `fit` checkpoints itself
//! ([`crate::fit::FitOptions::backup`]), and callbacks with state that decides later epochs
//! (`EarlyStopping`, `ReduceLROnPlateau`, `ModelCheckpoint`, `CSVLogger`) keep it in those
//! checkpoints through [`Callback::state`](crate::fit::Callback::state), so a resumed run
//! decides as the uninterrupted one. A config's `[[callbacks]]` builds these from TOML
//! ([`crate::config::CallbackSpec`]).
//!
//! Order matters as in Keras: callbacks run in the order given, and a callback that adds
//! `learning_rate` to the epoch logs (`ReduceLROnPlateau`, `LearningRateScheduler`) should come
//! before `CSVLogger` for the column to appear.

mod csv_logger;
mod early_stopping;
mod learning_rate_scheduler;
mod model_checkpoint;
mod monitor;
mod path_format;
mod reduce_lr_on_plateau;
mod state;
mod tensorboard;
mod terminate_on_nan;

pub use crate::compile::Schedule;
pub use csv_logger::{CSVLogger, python_float_repr};
pub use early_stopping::EarlyStopping;
pub use learning_rate_scheduler::{LearningRateScheduler, ScheduleUnit};
pub use model_checkpoint::ModelCheckpoint;
pub use monitor::{Mode, Monitor};
pub use path_format::{FormatValue, PathTemplate};
pub use reduce_lr_on_plateau::ReduceLROnPlateau;
pub use tensorboard::{TensorBoard, UpdateFreq};
pub use terminate_on_nan::TerminateOnNaN;

use crate::fit::FitContext;

/// A learning rate as Keras reads it back from its float32 optimizer variable
/// (`float(optimizer.learning_rate)`).
pub(crate) fn as_keras_lr(lr: f64) -> f64 {
    lr as f32 as f64
}

/// Sets the learning rate as Keras' assignment to its float32 variable leaves it.
pub(crate) fn set_keras_lr(ctx: &mut dyn FitContext, lr: f64) {
    ctx.set_learning_rate(as_keras_lr(lr));
}
