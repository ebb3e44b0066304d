//! `[[callbacks]]`: Keras callbacks in the run config, one table each, with `type` = the Keras
//! class name and Keras' argument names and defaults.
//!
//! ```toml
//! [[callbacks]]
//! type = "EarlyStopping"
//! monitor = "val_loss"
//! patience = 3
//! restore_best_weights = true
//!
//! [[callbacks]]
//! type = "ModelCheckpoint"
//! filepath = "checkpoints/best-{epoch:02d}-{val_loss:.3f}.safetensors"   # in the run directory
//! save_best_only = true
//!
//! [[callbacks]]
//! type = "LearningRateScheduler"
//! schedule = { type = "CosineDecay", initial_learning_rate = 0.001, decay_steps = 20 }
//!
//! [[callbacks]]
//! type = "BackupAndRestore"          # configures kiln's own checkpoints (RunConfig::backup)
//! save_freq = 500
//! ```
//!
//! Callbacks run in the order written (after `kiln train`'s progress display), as Keras
//! runs its `callbacks=[...]` list. Relative file and directory arguments (`filename`,
//! `log_dir`, `filepath`, `backup_dir`) are inside the run directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{BackupSpec, RunConfig};
use crate::callbacks::{
    CSVLogger, EarlyStopping, LearningRateScheduler, Mode, ModelCheckpoint, ReduceLROnPlateau,
    Schedule, ScheduleUnit, TensorBoard, TerminateOnNaN, UpdateFreq,
};
use crate::error::{KilnError, Result};
use crate::fit::{Callback, SaveFreq};
use crate::summary::hparams::HParamValue;

/// The `type`s `[[callbacks]]` takes.
pub const CALLBACK_TYPES: &[&str] = &[
    "EarlyStopping",
    "ReduceLROnPlateau",
    "LearningRateScheduler",
    "CSVLogger",
    "TerminateOnNaN",
    "TensorBoard",
    "ModelCheckpoint",
    "BackupAndRestore",
];

fn val_loss() -> String {
    "val_loss".into()
}
fn reduce_factor() -> f64 {
    0.1
}
fn reduce_patience() -> usize {
    10
}
fn reduce_min_delta() -> f64 {
    1e-4
}
fn comma() -> String {
    ",".into()
}
fn logs_dir() -> PathBuf {
    PathBuf::from("logs")
}
fn is_zero(v: &u8) -> bool {
    *v == 0
}

/// `EarlyStopping(monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto",
/// baseline=None, restore_best_weights=False, start_from_epoch=0)` ([`EarlyStopping`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarlyStoppingSpec {
    /// The logs key to watch.
    #[serde(default = "val_loss")]
    pub monitor: String,
    /// The smallest change that counts as an improvement.
    #[serde(default)]
    pub min_delta: f64,
    /// Epochs without improvement before stopping.
    #[serde(default)]
    pub patience: usize,
    /// `> 0` prints Keras' messages.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub verbose: u8,
    /// `"auto"`, `"min"` or `"max"`.
    #[serde(default)]
    pub mode: Mode,
    /// A value the monitor must beat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
    /// Put back the best epoch's weights at the end.
    #[serde(default)]
    pub restore_best_weights: bool,
    /// Epochs to ignore before watching.
    #[serde(default)]
    pub start_from_epoch: usize,
}

/// `ReduceLROnPlateau(monitor="val_loss", factor=0.1, patience=10, verbose=0, mode="auto",
/// min_delta=1e-4, cooldown=0, min_lr=0.0)` ([`ReduceLROnPlateau`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReduceLROnPlateauSpec {
    /// The logs key to watch.
    #[serde(default = "val_loss")]
    pub monitor: String,
    /// `new_lr = lr * factor` (0 < factor < 1).
    #[serde(default = "reduce_factor")]
    pub factor: f64,
    /// Epochs without improvement before reducing.
    #[serde(default = "reduce_patience")]
    pub patience: usize,
    /// `> 0` prints Keras' messages.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub verbose: u8,
    /// `"auto"`, `"min"` or `"max"`.
    #[serde(default)]
    pub mode: Mode,
    /// The smallest change that counts as an improvement.
    #[serde(default = "reduce_min_delta")]
    pub min_delta: f64,
    /// Epochs after a reduction before counting again.
    #[serde(default)]
    pub cooldown: usize,
    /// The lowest learning rate.
    #[serde(default)]
    pub min_lr: f64,
}

/// `LearningRateScheduler(schedule, verbose=0)` with a built-in [`Schedule`] table, and
/// kiln's `unit`: `"epoch"` (Keras' callback: evaluated at each epoch begin at the epoch
/// index) or `"step"` (a Keras `LearningRateSchedule` given to the optimizer: evaluated before
/// each batch at the optimizer step count) ([`LearningRateScheduler::from_schedule`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearningRateSchedulerSpec {
    /// The schedule: a table with `type` and Keras' arguments.
    pub schedule: Schedule,
    /// `"epoch"` or `"step"`.
    #[serde(default)]
    pub unit: ScheduleUnit,
    /// `> 0` prints Keras' message at each epoch begin.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub verbose: u8,
}

/// `CSVLogger(filename, separator=",", append=False)` ([`CSVLogger`]); a relative `filename`
/// is in the run directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CSVLoggerSpec {
    /// The CSV file (in the run directory when relative).
    pub filename: PathBuf,
    /// One character.
    #[serde(default = "comma")]
    pub separator: String,
    /// Continue an existing file instead of starting it over.
    #[serde(default)]
    pub append: bool,
}

/// `TerminateOnNaN(raise_error=False)` ([`TerminateOnNaN`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminateOnNaNSpec {
    /// End `fit` with an error instead of stopping quietly.
    #[serde(default)]
    pub raise_error: bool,
}

/// `TensorBoard(log_dir="logs", histogram_freq=0, write_steps_per_second=False,
/// update_freq="epoch")` ([`TensorBoard`]); a relative `log_dir` is in the run directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorBoardSpec {
    /// Event files go to `<log_dir>/train` and `<log_dir>/validation` (in the run directory when relative).
    #[serde(default = "logs_dir")]
    pub log_dir: PathBuf,
    /// Weight histograms every N epochs; 0: never.
    #[serde(default)]
    pub histogram_freq: usize,
    /// Also write steps per second.
    #[serde(default)]
    pub write_steps_per_second: bool,
    /// `"epoch"`, `"batch"` or N: batch-level values every N batches.
    #[serde(default)]
    pub update_freq: UpdateFreq,
    /// Hyperparameters (name → bool, integer, float or string) for TensorBoard's HParams
    /// dashboard, written into `log_dir` (`kiln tune` sets each trial's here).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hparams: BTreeMap<String, HParamValue>,
}

/// `ModelCheckpoint(filepath, monitor="val_loss", verbose=0, save_best_only=False,
/// save_weights_only=False, mode="auto", save_freq="epoch", initial_value_threshold=None)`
/// ([`ModelCheckpoint`]); a relative `filepath` is in the run directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCheckpointSpec {
    /// A Python format template ending in `.safetensors` (in the run directory when relative).
    pub filepath: String,
    /// The logs key compared with `save_best_only`.
    #[serde(default = "val_loss")]
    pub monitor: String,
    /// `> 0` prints Keras' messages.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub verbose: u8,
    /// Save only when `monitor` improves.
    #[serde(default)]
    pub save_best_only: bool,
    /// Keras' flag; kiln saves the weights either way.
    #[serde(default)]
    pub save_weights_only: bool,
    /// `"auto"`, `"min"` or `"max"`.
    #[serde(default)]
    pub mode: Mode,
    /// `"epoch"` or a number of batches.
    #[serde(default)]
    pub save_freq: SaveFreq,
    /// The value the first save must beat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_value_threshold: Option<f64>,
}

/// One `[[callbacks]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub enum CallbackSpec {
    /// `type = "EarlyStopping"`.
    EarlyStopping(EarlyStoppingSpec),
    /// `type = "ReduceLROnPlateau"`.
    ReduceLROnPlateau(ReduceLROnPlateauSpec),
    /// `type = "LearningRateScheduler"`.
    LearningRateScheduler(LearningRateSchedulerSpec),
    /// `type = "CSVLogger"`.
    CSVLogger(CSVLoggerSpec),
    /// `type = "TerminateOnNaN"`.
    TerminateOnNaN(TerminateOnNaNSpec),
    /// `type = "TensorBoard"`.
    TensorBoard(TensorBoardSpec),
    /// `type = "ModelCheckpoint"`.
    ModelCheckpoint(ModelCheckpointSpec),
    /// `type = "BackupAndRestore"`: kiln's own checkpoints ([`BackupSpec`]); builds no
    /// callback. [`RunConfig::from_toml_str`] moves it into [`RunConfig::backup`].
    BackupAndRestore(BackupSpec),
}

/// `T` from `table` (the entry without `type`), with errors naming `key.<argument>`.
fn parse<T: DeserializeOwned>(table: &toml::Table, key: &str, ty: &str) -> Result<T> {
    let try_parse = |t: &toml::Table| toml::Value::Table(t.clone()).try_into::<T>();
    let Err(e) = try_parse(table) else {
        return Ok(try_parse(table).expect("parsed above"));
    };
    let message = crate::error::humanize(e.message());
    let quoted = |message: &str, prefix: &str| {
        message
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('`').next())
            .map(str::to_string)
    };
    // serde does not say which argument had the bad value (or the unknown name, inside a
    // nested table): it is the one that fails alone differently from no argument at all.
    let empty = try_parse(&toml::Table::new())
        .err()
        .map(|e| e.message().to_string());
    for (arg, value) in table {
        let mut alone = toml::Table::new();
        alone.insert(arg.clone(), value.clone());
        if let Err(e) = try_parse(&alone)
            && Some(e.message().to_string()) != empty
        {
            let m = crate::error::humanize(e.message());
            let m = if quoted(&m, "unknown field `").as_deref() == Some(arg.as_str()) {
                format!("{ty} has no argument `{arg}`: {m}")
            } else {
                m
            };
            return Err(KilnError::config(format!("{key}.{arg}"), m));
        }
    }
    if let Some(arg) = quoted(&message, "missing field `") {
        return Err(KilnError::config(
            format!("{key}.{arg}"),
            format!("missing: {ty} needs `{arg}`"),
        ));
    }
    Err(KilnError::config(format!("{key} ({ty})"), message))
}

/// Keras cannot set the rate of an optimizer whose `learning_rate` is a schedule (it raises a
/// `TypeError` when a callback tries): with `scheduled`, a `LearningRateScheduler` or
/// `ReduceLROnPlateau` among `values` is a config error, before training starts.
///
/// # Errors
/// [`KilnError::Config`] naming `callbacks[i].type`.
pub(crate) fn check_scheduled_rate(values: &[toml::Value], scheduled: bool) -> Result<()> {
    if !scheduled {
        return Ok(());
    }
    for (i, value) in values.iter().enumerate() {
        let ty = value
            .get("type")
            .and_then(toml::Value::as_str)
            .unwrap_or("");
        if matches!(ty, "LearningRateScheduler" | "ReduceLROnPlateau") {
            return Err(KilnError::config(
                format!("callbacks[{i}].type"),
                format!(
                    "{ty} sets the learning rate, but compile.optimizer.learning_rate is a \
                     schedule, whose rate cannot be set (Keras raises a TypeError); give the \
                     optimizer a number as learning_rate, or drop the callback"
                ),
            ));
        }
    }
    Ok(())
}

/// A builder's `Config` error (`ReduceLROnPlateau.factor`, `CosineDecay.decay_steps`)
/// re-keyed under `key` (`callbacks[2].factor`).
fn rekey(e: KilnError, key: &str) -> KilnError {
    match e {
        KilnError::Config {
            key: inner,
            message,
            ..
        } => {
            let arg = inner.rsplit('.').next().unwrap_or(&inner);
            KilnError::config(format!("{key}.{arg}"), message)
        }
        other => other,
    }
}

/// `mode` resolved for `monitor`, as a config error at `key.mode`.
fn check_mode(mode: Mode, monitor: &str, ty: &str, key: &str) -> Result<()> {
    mode.resolve(monitor, ty).map(|_| ()).map_err(|e| {
        let message = match e {
            KilnError::Callback { message, .. } => message,
            other => other.to_string(),
        };
        KilnError::config(format!("{key}.mode"), message)
    })
}

/// `path` inside `run_dir` when relative.
fn in_run_dir(run_dir: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        run_dir.join(path)
    }
}

impl CallbackSpec {
    /// Reads entry `index` of `[[callbacks]]`.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `callbacks[index].<argument>`: a missing or unknown
    /// `type` (listing [`CALLBACK_TYPES`]), an unknown argument, a bad value, a monitor whose
    /// direction is unknown with `mode = "auto"`, out-of-range values.
    pub fn from_toml(index: usize, value: &toml::Value) -> Result<CallbackSpec> {
        let key = format!("callbacks[{index}]");
        let allowed = CALLBACK_TYPES.join(", ");
        let mut table = value.as_table().cloned().ok_or_else(|| {
            KilnError::config(
                &key,
                "each [[callbacks]] entry must be a table with a `type`",
            )
        })?;
        let ty = match table.remove("type") {
            Some(toml::Value::String(t)) => t,
            Some(other) => {
                return Err(KilnError::config(
                    format!("{key}.type"),
                    format!("must be a string, got {other}; allowed: {allowed}"),
                ));
            }
            None => {
                return Err(KilnError::config(
                    format!("{key}.type"),
                    format!("missing; allowed: {allowed}"),
                ));
            }
        };
        let t = &table;
        let spec = match ty.as_str() {
            "EarlyStopping" => CallbackSpec::EarlyStopping(parse(t, &key, &ty)?),
            "ReduceLROnPlateau" => CallbackSpec::ReduceLROnPlateau(parse(t, &key, &ty)?),
            "LearningRateScheduler" => CallbackSpec::LearningRateScheduler(parse(t, &key, &ty)?),
            "CSVLogger" => CallbackSpec::CSVLogger(parse(t, &key, &ty)?),
            "TerminateOnNaN" => CallbackSpec::TerminateOnNaN(parse(t, &key, &ty)?),
            "TensorBoard" => CallbackSpec::TensorBoard(parse(t, &key, &ty)?),
            "ModelCheckpoint" => CallbackSpec::ModelCheckpoint(parse(t, &key, &ty)?),
            "BackupAndRestore" => CallbackSpec::BackupAndRestore(parse(t, &key, &ty)?),
            other => {
                return Err(KilnError::config(
                    format!("{key}.type"),
                    format!("unknown callback type \"{other}\"; allowed: {allowed}"),
                ));
            }
        };
        spec.validate(&key)?;
        Ok(spec)
    }

    /// The Keras class name (`type`).
    pub fn type_name(&self) -> &'static str {
        match self {
            CallbackSpec::EarlyStopping(_) => "EarlyStopping",
            CallbackSpec::ReduceLROnPlateau(_) => "ReduceLROnPlateau",
            CallbackSpec::LearningRateScheduler(_) => "LearningRateScheduler",
            CallbackSpec::CSVLogger(_) => "CSVLogger",
            CallbackSpec::TerminateOnNaN(_) => "TerminateOnNaN",
            CallbackSpec::TensorBoard(_) => "TensorBoard",
            CallbackSpec::ModelCheckpoint(_) => "ModelCheckpoint",
            CallbackSpec::BackupAndRestore(_) => "BackupAndRestore",
        }
    }

    /// Checks the arguments together (what the builders would refuse), naming
    /// `key.<argument>`.
    ///
    /// # Errors
    /// [`KilnError::Config`].
    pub fn validate(&self, key: &str) -> Result<()> {
        let ty = self.type_name();
        match self {
            CallbackSpec::EarlyStopping(s) => check_mode(s.mode, &s.monitor, ty, key),
            CallbackSpec::ReduceLROnPlateau(s) => {
                ReduceLROnPlateau::new(s.factor).map_err(|e| rekey(e, key))?;
                check_mode(s.mode, &s.monitor, ty, key)
            }
            CallbackSpec::LearningRateScheduler(s) => s
                .schedule
                .validate()
                .map_err(|e| rekey(e, &format!("{key}.schedule"))),
            CallbackSpec::CSVLogger(s) => {
                if s.filename.as_os_str().is_empty() {
                    return Err(KilnError::config(
                        format!("{key}.filename"),
                        "must name a file (in the run directory when relative)",
                    ));
                }
                super::paths::check_inside_run_dir(&format!("{key}.filename"), &s.filename)?;
                super::paths::check_file_name(&format!("{key}.filename"), &s.filename)?;
                if s.separator.chars().count() != 1 {
                    return Err(KilnError::config(
                        format!("{key}.separator"),
                        format!(
                            "must be one character (Python's csv module refuses others), got \
                             \"{}\"",
                            s.separator
                        ),
                    ));
                }
                Ok(())
            }
            CallbackSpec::TerminateOnNaN(_) => Ok(()),
            CallbackSpec::TensorBoard(s) => {
                super::paths::check_inside_run_dir(&format!("{key}.log_dir"), &s.log_dir)
            }
            CallbackSpec::ModelCheckpoint(s) => super::paths::check_inside_run_dir(
                &format!("{key}.filepath"),
                Path::new(&s.filepath),
            )
            .and_then(|()| s.build(Path::new(".")))
            .and_then(|cb| cb.check())
            .map_err(|e| rekey(e, key)),
            CallbackSpec::BackupAndRestore(s) => s.validate().map_err(|e| rekey(e, key)),
        }
    }

    /// The callback, with relative paths inside `run_dir`; `None` for `BackupAndRestore`
    /// (kiln's checkpoints are configured by [`RunConfig::backup`], not a callback).
    ///
    /// # Errors
    /// As [`CallbackSpec::validate`] (keys named `<Type>.<argument>`).
    pub fn build(&self, run_dir: &Path) -> Result<Option<Box<dyn Callback>>> {
        let verbose = |v: u8| v > 0;
        Ok(Some(match self {
            CallbackSpec::EarlyStopping(s) => {
                let mut cb = EarlyStopping::new()
                    .monitor(&s.monitor)
                    .min_delta(s.min_delta)
                    .patience(s.patience)
                    .verbose(verbose(s.verbose))
                    .mode(s.mode)
                    .restore_best_weights(s.restore_best_weights)
                    .start_from_epoch(s.start_from_epoch);
                if let Some(b) = s.baseline {
                    cb = cb.baseline(b);
                }
                Box::new(cb)
            }
            CallbackSpec::ReduceLROnPlateau(s) => Box::new(
                ReduceLROnPlateau::new(s.factor)?
                    .monitor(&s.monitor)
                    .patience(s.patience)
                    .verbose(verbose(s.verbose))
                    .mode(s.mode)
                    .min_delta(s.min_delta)
                    .cooldown(s.cooldown)
                    .min_lr(s.min_lr),
            ),
            CallbackSpec::LearningRateScheduler(s) => Box::new(
                LearningRateScheduler::from_schedule(s.schedule.clone(), s.unit)?
                    .verbose(verbose(s.verbose)),
            ),
            CallbackSpec::CSVLogger(s) => Box::new(
                CSVLogger::new(in_run_dir(run_dir, &s.filename))
                    .separator(s.separator.chars().next().unwrap_or(','))
                    .append(s.append),
            ),
            CallbackSpec::TerminateOnNaN(s) => {
                Box::new(TerminateOnNaN::new().raise_error(s.raise_error))
            }
            CallbackSpec::TensorBoard(s) => Box::new(
                TensorBoard::new(in_run_dir(run_dir, &s.log_dir))
                    .histogram_freq(s.histogram_freq)
                    .write_steps_per_second(s.write_steps_per_second)
                    .update_freq(s.update_freq)
                    .hparams(s.hparams.clone()),
            ),
            CallbackSpec::ModelCheckpoint(s) => Box::new(s.build(run_dir)?),
            CallbackSpec::BackupAndRestore(_) => return Ok(None),
        }))
    }

    /// The entry as a TOML table, `type` included (every argument written, defaults too).
    pub fn to_toml(&self) -> toml::Value {
        let inner = match self {
            CallbackSpec::EarlyStopping(s) => toml::Value::try_from(s),
            CallbackSpec::ReduceLROnPlateau(s) => toml::Value::try_from(s),
            CallbackSpec::LearningRateScheduler(s) => toml::Value::try_from(s),
            CallbackSpec::CSVLogger(s) => toml::Value::try_from(s),
            CallbackSpec::TerminateOnNaN(s) => toml::Value::try_from(s),
            CallbackSpec::TensorBoard(s) => toml::Value::try_from(s),
            CallbackSpec::ModelCheckpoint(s) => toml::Value::try_from(s),
            CallbackSpec::BackupAndRestore(s) => toml::Value::try_from(s),
        };
        let mut table = match inner.expect("callback specs serialize") {
            toml::Value::Table(t) => t,
            _ => unreachable!("callback specs are structs"),
        };
        table.insert("type".into(), self.type_name().into());
        toml::Value::Table(table)
    }
}

impl ModelCheckpointSpec {
    /// The callback, resolving relative paths in `run_dir`.
    fn build(&self, run_dir: &Path) -> Result<ModelCheckpoint> {
        let mut cb = ModelCheckpoint::new(&self.filepath)?
            .base_dir(run_dir)
            .monitor(&self.monitor)
            .verbose(self.verbose > 0)
            .save_best_only(self.save_best_only)
            .save_weights_only(self.save_weights_only)
            .mode(self.mode)
            .save_freq(self.save_freq);
        if let Some(t) = self.initial_value_threshold {
            cb = cb.initial_value_threshold(t);
        }
        Ok(cb)
    }
}

/// Reads `[[callbacks]]`: the callbacks in order, and the `BackupAndRestore` entry (at most
/// one) apart.
///
/// # Errors
/// As [`CallbackSpec::from_toml`]; a second `BackupAndRestore`.
pub(crate) fn read(values: &[toml::Value]) -> Result<(Vec<CallbackSpec>, BackupSpec)> {
    let mut callbacks = Vec::new();
    let mut backup: Option<(usize, BackupSpec)> = None;
    for (i, value) in values.iter().enumerate() {
        match CallbackSpec::from_toml(i, value)? {
            CallbackSpec::BackupAndRestore(spec) => {
                if let Some((first, _)) = backup {
                    return Err(KilnError::config(
                        format!("callbacks[{i}].type"),
                        format!(
                            "a second BackupAndRestore (the first is callbacks[{first}]); a run \
                             has one checkpoint directory: keep one entry"
                        ),
                    ));
                }
                backup = Some((i, spec));
            }
            spec => callbacks.push(spec),
        }
    }
    Ok((callbacks, backup.map(|(_, b)| b).unwrap_or_default()))
}

/// `[[callbacks]]` as written back by [`RunConfig::to_toml`]: the callbacks, then
/// `BackupAndRestore` when its settings are not the defaults.
pub(crate) fn write(callbacks: &[CallbackSpec], backup: &BackupSpec) -> Vec<toml::Value> {
    let mut out: Vec<toml::Value> = callbacks.iter().map(CallbackSpec::to_toml).collect();
    if *backup != BackupSpec::default() {
        out.push(CallbackSpec::BackupAndRestore(backup.clone()).to_toml());
    }
    out
}

impl RunConfig {
    /// The config's `[[callbacks]]` as callbacks, in order, with relative paths inside
    /// `run_dir` (`BackupAndRestore` is not among them: it configures [`RunConfig::backup`]).
    /// Pass them to `fit` (or [`crate::run::train_with`]) after any others of your own.
    ///
    /// # Errors
    /// As [`CallbackSpec::build`].
    pub fn build_callbacks(&self, run_dir: &Path) -> Result<Vec<Box<dyn Callback>>> {
        let mut out = Vec::new();
        for spec in &self.callbacks {
            out.extend(spec.build(run_dir)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
