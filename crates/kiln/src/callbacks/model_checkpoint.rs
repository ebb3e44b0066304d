//! `ModelCheckpoint`: save the weights during training, every epoch, every N batches, or
//! when a monitored value improves (`keras/src/callbacks/model_checkpoint.py`, Keras 3).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::monitor::{Mode, Monitor, warn_missing_once};
use super::path_format::{FormatValue, PathTemplate};
use super::state::{self, opt_float};
use crate::error::{KilnError, Result};
use crate::fit::{Callback, FitContext, Logs, SaveFreq};

const NAME: &str = "ModelCheckpoint";

/// Keras' `ModelCheckpoint(filepath, monitor="val_loss", verbose=0, save_best_only=False,
/// save_weights_only=False, mode="auto", save_freq="epoch", initial_value_threshold=None)`.
///
/// **When** (Keras 3's rules):
/// * `save_freq = "epoch"` ([`SaveFreq::Epoch`]): at every epoch end, with the epoch's logs
///   (validation included);
/// * `save_freq = N` ([`SaveFreq::Batches`]): after every N-th training batch, counted across
///   epochs (Keras' `_should_save_on_batch`), with that batch's logs (running means over the
///   epoch); not at epoch ends.
///
/// With `save_best_only`, a save happens only when the `monitor` value improves on the best so
/// far (strictly: `<` in `min` mode, `>` in `max` mode; NaN never improves once there is a
/// best); the first value always improves unless `initial_value_threshold` is set, which then
/// is the value to beat. When the logs have no `monitor` value, Keras 3 warns
/// (`Can save best model only with val_loss available.`) **and saves**; kiln does the same
/// and prints the warning once per training. (tf.keras 2 skipped the save.)
///
/// **Where**: `filepath` is a Python format template, formatted as Keras does with
/// `filepath.format(epoch=epoch + 1, **logs)` (and `batch = batch + 1`, 1-based within the
/// epoch, for batch saves) — `{epoch:02d}`, `{val_loss:.2f}`, `{loss}`; see
/// [`PathTemplate`] for the supported subset. Relative results are resolved in
/// [`ModelCheckpoint::base_dir`] (the run directory for `[[callbacks]]` in a config), else in
/// the working directory. Missing directories are created. A template with a constant name
/// overwrites one file; one with `{epoch}` keeps one file per save.
///
/// **What**: the weights, written with [`FitContext::save_weights`] (for `Model::fit`: a
/// safetensors file with Keras' names and layouts, written to a temporary name and renamed).
/// Keras writes `.weights.h5` or `.keras`; kiln writes safetensors, so `filepath` must end in
/// `.safetensors`. `save_weights_only` is accepted for Keras configs and changes nothing: the
/// model itself is described by the run directory's `config.toml`.
///
/// **Differences from Keras, on purpose**: `mode = "auto"` is resolved at `on_train_begin`
/// (an unknown direction fails before training; Keras fails at the first epoch end, and a
/// batch save before it can crash); `{batch}` with `save_freq = "epoch"` is refused at
/// `on_train_begin` (Keras fails with `KeyError` at the first save).
///
/// **State** ([`Callback::state`], for BackupAndRestore): `best` and the batch counter, so a
/// resumed run saves exactly when the uninterrupted run would have. As in Keras, `best` is
/// not reset by `on_train_begin`: a second `fit` with the same callback keeps beating the
/// first one's best.
///
/// ```
/// use kiln::callbacks::ModelCheckpoint;
/// use kiln::fit::{Callback, Logs, ManualContext};
///
/// let dir = tempfile::tempdir().unwrap();
/// let mut cb = ModelCheckpoint::new("best-{epoch:02d}.safetensors")
///     .unwrap()
///     .base_dir(dir.path())
///     .save_best_only(true);
/// let mut ctx = ManualContext::new(0.1);
/// cb.on_train_begin(&mut ctx).unwrap();
/// for (epoch, val_loss) in [0.5, 0.6, 0.4].into_iter().enumerate() {
///     let mut logs = Logs::default();
///     logs.set("val_loss", val_loss);
///     cb.on_epoch_end(epoch, &mut logs, &mut ctx).unwrap();
/// }
/// assert!(dir.path().join("best-01.safetensors").exists());
/// assert!(!dir.path().join("best-02.safetensors").exists());
/// assert_eq!(cb.last_saved(), Some(dir.path().join("best-03.safetensors").as_path()));
/// ```
#[derive(Debug, Clone)]
pub struct ModelCheckpoint {
    filepath: PathTemplate,
    base_dir: Option<PathBuf>,
    monitor: String,
    verbose: bool,
    save_best_only: bool,
    save_weights_only: bool,
    mode: Mode,
    save_freq: SaveFreq,
    initial_value_threshold: Option<f64>,
    // State.
    test: Option<Monitor>,
    best: Option<f64>,
    batches_since_save: u64,
    last_batch_seen: Option<u64>,
    current_epoch: usize,
    warned_missing: bool,
    last_saved: Option<PathBuf>,
}

/// What [`Callback::state`] keeps.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    #[serde(with = "opt_float")]
    best: Option<f64>,
    batches_since_save: u64,
    last_batch_seen: Option<u64>,
}

impl ModelCheckpoint {
    /// Saves to `filepath` (a template, see the type's docs) at every epoch end.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `ModelCheckpoint.filepath` when the template does not
    /// parse, or does not end in `.safetensors`.
    pub fn new(filepath: impl AsRef<Path>) -> Result<ModelCheckpoint> {
        let key = "ModelCheckpoint.filepath";
        let raw = filepath.as_ref();
        let text = raw.to_str().ok_or_else(|| {
            KilnError::config(key, format!("{} is not valid UTF-8", raw.display()))
        })?;
        if !text.ends_with(".safetensors") {
            return Err(KilnError::config(
                key,
                format!(
                    "\"{text}\" must end in .safetensors: kiln saves the weights as safetensors \
                     (Keras' .weights.h5 and .keras formats are not written)"
                ),
            ));
        }
        let template = PathTemplate::parse(text)
            .map_err(|m| KilnError::config(key, format!("\"{text}\": {m}")))?;
        Ok(ModelCheckpoint {
            filepath: template,
            base_dir: None,
            monitor: "val_loss".to_string(),
            verbose: false,
            save_best_only: false,
            save_weights_only: false,
            mode: Mode::Auto,
            save_freq: SaveFreq::Epoch,
            initial_value_threshold: None,
            test: None,
            best: None,
            batches_since_save: 0,
            last_batch_seen: None,
            current_epoch: 0,
            warned_missing: false,
            last_saved: None,
        })
    }

    /// The directory relative paths are resolved in (kiln's; Keras uses the working
    /// directory).
    pub fn base_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.base_dir = Some(dir.into());
        self
    }

    /// The logs key compared with `save_best_only` (Keras' default `val_loss`).
    pub fn monitor(mut self, monitor: impl Into<String>) -> Self {
        self.monitor = monitor.into();
        self
    }

    /// Print Keras' messages (`Epoch 3: val_loss improved from 0.50000 to 0.40000, saving
    /// model to ...`) to stderr.
    pub fn verbose(mut self, verbose: bool) -> Self {
        self.verbose = verbose;
        self
    }

    /// Save only when `monitor` improves.
    pub fn save_best_only(mut self, on: bool) -> Self {
        self.save_best_only = on;
        self
    }

    /// Keras' flag; kiln always saves the weights (see the type's docs).
    pub fn save_weights_only(mut self, on: bool) -> Self {
        self.save_weights_only = on;
        self
    }

    /// Whether lower or higher `monitor` values are better.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Every epoch, or every N training batches (N > 0; checked at `on_train_begin`).
    pub fn save_freq(mut self, freq: SaveFreq) -> Self {
        self.save_freq = freq;
        self
    }

    /// The value the first save must beat with `save_best_only` (Keras'
    /// `initial_value_threshold`).
    pub fn initial_value_threshold(mut self, value: f64) -> Self {
        self.initial_value_threshold = Some(value);
        self.best = Some(value);
        self
    }

    /// The best `monitor` value so far (or the threshold, before any save).
    pub fn best(&self) -> Option<f64> {
        self.best
    }

    /// The file written last, if any.
    pub fn last_saved(&self) -> Option<&Path> {
        self.last_saved.as_deref()
    }

    /// The filepath template.
    pub fn filepath(&self) -> &str {
        self.filepath.as_str()
    }

    /// Checks the settings together: `save_freq` > 0, `{batch}` only with batch saves, and the
    /// direction of `monitor` with `save_best_only` (see [`Mode::resolve`]).
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `ModelCheckpoint.<argument>`.
    pub fn check(&self) -> Result<()> {
        if self.save_freq == SaveFreq::Batches(0) {
            return Err(KilnError::config(
                "ModelCheckpoint.save_freq",
                "must be \"epoch\" or a positive number of batches",
            ));
        }
        if self.save_freq == SaveFreq::Epoch && self.filepath.fields().any(|f| f == "batch") {
            return Err(KilnError::config(
                "ModelCheckpoint.filepath",
                format!(
                    "\"{}\" uses {{batch}}, which has a value only with save_freq = N batches; \
                     remove it or set save_freq",
                    self.filepath.as_str()
                ),
            ));
        }
        if self.save_best_only {
            self.mode
                .resolve(&self.monitor, NAME)
                .map_err(|e| KilnError::config("ModelCheckpoint.mode", e.to_string()))?;
        }
        Ok(())
    }

    /// Keras' `_should_save_on_batch`: counts batches across epochs (`step` restarts at 0 in
    /// each epoch).
    fn should_save_on_batch(&mut self, step: u64) -> bool {
        let SaveFreq::Batches(n) = self.save_freq else {
            return false;
        };
        let add = match self.last_batch_seen {
            Some(last) if step > last => step - last,
            _ => step + 1,
        };
        self.batches_since_save += add;
        self.last_batch_seen = Some(step);
        if self.batches_since_save >= n {
            self.batches_since_save = 0;
            true
        } else {
            false
        }
    }

    /// The file for this save (Keras' `_get_file_path`).
    fn path_for(&self, epoch: usize, batch: Option<u64>, logs: &Logs) -> Result<PathBuf> {
        let formatted = self
            .filepath
            .format(|name| match name {
                "epoch" => Some(FormatValue::Int(epoch as i64 + 1)),
                "batch" => batch.map(|b| FormatValue::Int(b as i64 + 1)),
                key => logs.get(key).map(FormatValue::Float),
            })
            .map_err(|m| KilnError::Callback {
                callback: NAME.into(),
                message: format!(
                    "cannot format filepath \"{}\" at epoch {}: {m}; the logs have: epoch{}, {}",
                    self.filepath.as_str(),
                    epoch + 1,
                    if batch.is_some() { ", batch" } else { "" },
                    logs.0
                        .iter()
                        .map(|(k, _)| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })?;
        let path = PathBuf::from(formatted);
        Ok(match &self.base_dir {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path,
        })
    }

    /// Keras' `_should_save_model`.
    fn should_save(&mut self, epoch: usize, logs: &Logs, path: &Path) -> Result<bool> {
        if !self.save_best_only {
            if self.verbose {
                eprintln!("\nEpoch {}: saving model to {}", epoch + 1, path.display());
            }
            return Ok(true);
        }
        let Some(current) = logs.get(&self.monitor) else {
            let what = format!(
                "ModelCheckpoint: Can save best model only with {} available (saving anyway, \
                 as Keras 3 does).",
                self.monitor
            );
            warn_missing_once(&mut self.warned_missing, &what, logs);
            return Ok(true);
        };
        let test = self.monitor_test()?;
        let best = self.best.map_or("None".to_string(), |b| format!("{b:.5}"));
        if test.is_improvement(current, self.best) {
            if self.verbose {
                eprintln!(
                    "\nEpoch {}: {} improved from {best} to {current:.5}, saving model to {}",
                    epoch + 1,
                    self.monitor,
                    path.display()
                );
            }
            self.best = Some(current);
            Ok(true)
        } else {
            if self.verbose {
                eprintln!(
                    "\nEpoch {}: {} did not improve from {best}",
                    epoch + 1,
                    self.monitor
                );
            }
            Ok(false)
        }
    }

    fn monitor_test(&mut self) -> Result<Monitor> {
        if let Some(t) = self.test {
            return Ok(t);
        }
        // ModelCheckpoint has no min_delta (Keras' MonitorCallback default 0).
        let t = Monitor::new(self.mode.resolve(&self.monitor, NAME)?, 0.0);
        self.test = Some(t);
        Ok(t)
    }

    /// Keras' `_save_model`.
    fn save(
        &mut self,
        epoch: usize,
        batch: Option<u64>,
        logs: &Logs,
        ctx: &mut dyn FitContext,
    ) -> Result<()> {
        let path = self.path_for(epoch, batch, logs)?;
        if !self.should_save(epoch, logs, &path)? {
            return Ok(());
        }
        if path.is_dir() {
            return Err(KilnError::Callback {
                callback: NAME.into(),
                message: format!(
                    "filepath {} is an existing directory; give a file name ending in \
                     .safetensors",
                    path.display()
                ),
            });
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| KilnError::io(parent, e))?;
        }
        ctx.save_weights(&path)?;
        if self.verbose {
            eprintln!(
                "\nEpoch {}: finished saving model to {}",
                epoch + 1,
                path.display()
            );
        }
        self.last_saved = Some(path);
        Ok(())
    }
}

impl Callback for ModelCheckpoint {
    fn on_train_begin(&mut self, _ctx: &mut dyn FitContext) -> Result<()> {
        self.check().map_err(|e| match e {
            KilnError::Config { key, message, .. } => KilnError::Callback {
                callback: NAME.into(),
                message: format!("{key}: {message}"),
            },
            other => other,
        })?;
        if self.save_best_only {
            self.monitor_test()?;
        }
        self.warned_missing = false;
        Ok(())
    }

    fn on_epoch_begin(
        &mut self,
        epoch: usize,
        _epochs: usize,
        _steps: Option<u64>,
        _ctx: &mut dyn FitContext,
    ) -> Result<()> {
        self.current_epoch = epoch;
        Ok(())
    }

    fn on_train_batch_end(
        &mut self,
        step: u64,
        logs: &Logs,
        ctx: &mut dyn FitContext,
    ) -> Result<()> {
        if self.should_save_on_batch(step) {
            self.save(self.current_epoch, Some(step), logs, ctx)?;
        }
        Ok(())
    }

    fn on_epoch_end(
        &mut self,
        epoch: usize,
        logs: &mut Logs,
        ctx: &mut dyn FitContext,
    ) -> Result<()> {
        if self.save_freq == SaveFreq::Epoch {
            self.save(epoch, None, logs, ctx)?;
        }
        Ok(())
    }

    fn state(&self) -> Option<serde_json::Value> {
        Some(state::encode(
            NAME,
            &State {
                best: self.best,
                batches_since_save: self.batches_since_save,
                last_batch_seen: self.last_batch_seen,
            },
        ))
    }

    fn restore_state(&mut self, value: &serde_json::Value) -> Result<()> {
        let s: State = state::decode(NAME, value)?;
        self.best = s.best;
        self.batches_since_save = s.batches_since_save;
        self.last_batch_seen = s.last_batch_seen;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
