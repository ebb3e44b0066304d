//! The tune config: which run config every trial trains (`base`), the study's settings
//! (`[tuner]`), fixed changes (`[overrides]`) and the search space (`[[hyperparameters]]`).
//!
//! ```toml
//! base = "mlp.toml"                  # relative to this file
//! [tuner]
//! objective = "val_accuracy"         # or { name = "val_loss", direction = "min" }
//! max_trials = 20
//! algorithm = "random"               # and the other search keys (docs/tuning.md)
//! [overrides]
//! "fit.epochs" = 2
//! [[hyperparameters]]
//! name = "learning_rate"
//! key = "compile.optimizer.learning_rate"
//! type = "Float"
//! min_value = 1e-4
//! max_value = 1e-2
//! sampling = "log"
//! ```
//!
//! A trial's run config is the base config with the overrides, then the trial's parameters,
//! set at their `key`s ([`crate::keypath`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::TuneError;
use crate::keypath;
use crate::space::SearchSpace;
use crate::trial::{Objective, TrialPlan, Value};

/// The `[tuner]` keys the study itself reads; the search keys are
/// [`crate::oracle::ORACLE_KEYS`] and [`crate::pruner::PRUNER_KEYS`].
pub const TUNER_KEYS: &[&str] = &[
    "objective",
    "max_trials",
    "executions_per_trial",
    "max_retries_per_trial",
    "max_consecutive_failed_trials",
    "heartbeat_interval",
    "grace_period",
    "study_name",
];

/// The tune file's top-level keys.
const TOP_KEYS: &[&str] = &["base", "tuner", "overrides", "hyperparameters"];

/// The CSV file (in each trial's run directory) that the injected `CSVLogger` writes one row
/// per epoch to; the tuner reads it while the trial trains to report intermediate values.
pub const EPOCHS_CSV: &str = "tune-epochs.csv";

/// Whether kiln's `TensorBoard` callback takes the `hparams` table (HParams session
/// summaries); trial configs carry the parameters there when it does.
pub const TENSORBOARD_HPARAMS: bool = true;

/// The `[tuner]` settings the study loop uses (Keras Tuner's names and defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct TunerSettings {
    /// Trials to create in total, all states counted (Keras Tuner's default 10).
    pub max_trials: u64,
    /// Child runs per trial, each with its own seed (`seed + k`); the objective is their mean
    /// (default 1).
    pub executions_per_trial: u32,
    /// Times a trial that failed by itself (its child crashed) is started again (default 0);
    /// a trial interrupted with its worker runs again without counting.
    pub max_retries_per_trial: u32,
    /// Failed trials in a row (in order of finishing) that end the study (default 3).
    pub max_consecutive_failed_trials: u32,
    /// Seconds between a worker's heartbeats while its trial trains (default 5).
    pub heartbeat_interval: f64,
    /// Seconds without a heartbeat after which a running trial's worker counts as gone and the
    /// trial runs again (default twice the heartbeat interval, as Optuna's `grace_period`).
    pub grace_period: f64,
    /// The study's name in the database (default: the tune file's stem); workers sharing a
    /// PostgreSQL database run the same study by giving the same name.
    pub study_name: String,
}

/// A tune config, read and checked.
#[derive(Clone, Debug)]
pub struct TuneConfig {
    /// The tune file.
    pub path: PathBuf,
    /// The base run config's file.
    pub base_path: PathBuf,
    /// The base run config as written.
    pub base: toml::Table,
    /// `[overrides]`: dotted run-config keys and their values, in file order.
    pub overrides: Vec<(String, toml::Value)>,
    /// The `[[hyperparameters]]` array as written.
    pub hyperparameters: toml::Value,
    /// The search space read from it.
    pub space: SearchSpace,
    /// Hyperparameter name -> the run-config key it sets.
    pub keys: BTreeMap<String, String>,
    /// The whole `[tuner]` table (the search keys go to [`crate::oracle::build`] and
    /// [`crate::pruner::build`]).
    pub tuner: toml::Table,
    /// The study settings from `[tuner]`.
    pub settings: TunerSettings,
    /// What the study optimises.
    pub objective: Objective,
}

/// `message` without TOML parse positions (`at line 20, column 1`, `line 20`): they count
/// lines of the merged document the tuner writes, not of any file the user has.
fn strip_position(message: &str) -> String {
    let mut out = String::new();
    for line in message.lines() {
        let t = line.trim();
        // toml's snippet lines: `   |`, `20 | key = 1`, `   ^^^`.
        let snippet = t.starts_with('|')
            || t.starts_with('^')
            || t.split_once('|').is_some_and(|(n, _)| {
                !n.trim().is_empty() && n.trim().chars().all(|c| c.is_ascii_digit())
            });
        if snippet || t.is_empty() {
            continue;
        }
        let mut l = line.to_string();
        for pat in [" at line ", "line "] {
            while let Some(i) = l.find(pat) {
                let rest = &l[i + pat.len()..];
                let digits = rest.chars().take_while(char::is_ascii_digit).count();
                if digits == 0 {
                    break;
                }
                let mut end = i + pat.len() + digits;
                if let Some(col) = l[end..].strip_prefix(", column ") {
                    end += ", column ".len() + col.chars().take_while(char::is_ascii_digit).count();
                }
                l.replace_range(i..end, "");
            }
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(l.trim());
    }
    while out.contains(": :") {
        out = out.replace(": :", ":");
    }
    out.trim_start_matches([':', ' ']).to_string()
}

fn config_err(file: &Path, m: impl std::fmt::Display) -> TuneError {
    TuneError::Config(format!("{}: {m}", file.display()))
}

fn read_toml(path: &Path, what: &str) -> Result<toml::Table, TuneError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        TuneError::Config(format!("cannot read the {what} {}: {e}", path.display()))
    })?;
    toml::from_str(&text).map_err(|e| {
        TuneError::Config(format!(
            "{}: {}",
            path.display(),
            e.to_string().trim().replace('\n', " ")
        ))
    })
}

/// A hyperparameter value as TOML.
pub fn toml_value(v: &Value) -> toml::Value {
    match v {
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Int(i) => toml::Value::Integer(*i),
        Value::Float(f) => toml::Value::Float(*f),
        Value::Str(s) => toml::Value::String(s.clone()),
    }
}

impl TuneConfig {
    /// Reads the tune file at `path` and its base run config.
    ///
    /// # Errors
    /// [`TuneError::Config`] naming the file and key: unreadable files, unknown top-level or
    /// `[tuner]` keys (the allowed ones are listed), a bad objective or setting, an override
    /// or hyperparameter `key` that cannot be set in the base config (with how to fix it).
    pub fn load(path: &Path) -> Result<TuneConfig, TuneError> {
        let mut file = read_toml(path, "tune config")?;
        if let Some(k) = file.keys().find(|k| !TOP_KEYS.contains(&k.as_str())) {
            return Err(config_err(
                path,
                format!(
                    "unknown key \"{k}\"; a tune config has {}",
                    TOP_KEYS.join(", ")
                ),
            ));
        }
        let base_rel = match file.remove("base") {
            Some(toml::Value::String(s)) => PathBuf::from(s),
            Some(other) => {
                return Err(config_err(
                    path,
                    format!("base: {other} is not a path; write base = \"mlp.toml\""),
                ));
            }
            None => {
                return Err(config_err(
                    path,
                    "missing base = \"<run config>\": the run config every trial trains \
                     (relative to this file)",
                ));
            }
        };
        let base_path = path.parent().unwrap_or(Path::new(".")).join(base_rel);
        let base = read_toml(&base_path, "base run config")?;
        let tuner = match file.remove("tuner") {
            Some(toml::Value::Table(t)) => t,
            None => toml::Table::new(),
            Some(_) => return Err(config_err(path, "tuner must be a table: [tuner]")),
        };
        let known: Vec<&str> = TUNER_KEYS
            .iter()
            .chain(crate::oracle::ORACLE_KEYS)
            .chain(crate::pruner::PRUNER_KEYS)
            .copied()
            .collect();
        if let Some(k) = tuner.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(config_err(
                path,
                format!(
                    "[tuner] unknown key \"{k}\"; the keys are {}",
                    known.join(", ")
                ),
            ));
        }
        let objective = crate::objective::parse(
            tuner
                .get("objective")
                .unwrap_or(&toml::Value::String("val_loss".into())),
            path,
        )?;
        let settings = settings(&tuner, path)?;
        let overrides: Vec<(String, toml::Value)> = match file.remove("overrides") {
            Some(toml::Value::Table(t)) => t.into_iter().collect(),
            None => Vec::new(),
            Some(_) => {
                return Err(config_err(
                    path,
                    "overrides must be a table of dotted run-config keys: [overrides] \
                     \"fit.epochs\" = 2",
                ));
            }
        };
        let hyperparameters = file
            .remove("hyperparameters")
            .unwrap_or(toml::Value::Array(Vec::new()));
        let space = SearchSpace::from_toml(&hyperparameters).map_err(|e| match e {
            TuneError::Config(m) => config_err(path, m),
            other => other,
        })?;
        let keys = space
            .hyperparameters()
            .iter()
            .map(|hp| (hp.name.clone(), hp.key.clone()))
            .collect();
        let cfg = TuneConfig {
            path: path.to_path_buf(),
            base_path,
            base,
            overrides,
            hyperparameters,
            space,
            keys,
            tuner,
            settings,
            objective,
        };
        // The search keys are checked by building the oracle and the pruner once.
        crate::search::build(&cfg)?;
        // Every override and every hyperparameter key must be settable in the base config.
        let mut probe = cfg.fixed()?;
        for (name, key) in &cfg.keys {
            keypath::set(&mut probe, key, toml::Value::Integer(0)).map_err(|m| {
                config_err(
                    path,
                    format!("[[hyperparameters]] \"{name}\": key \"{key}\": {m}"),
                )
            })?;
        }
        Ok(cfg)
    }

    /// The base config with the overrides applied.
    ///
    /// # Errors
    /// [`TuneError::Config`] naming the override that cannot be set.
    pub fn fixed(&self) -> Result<toml::Table, TuneError> {
        let mut t = self.base.clone();
        for (key, value) in &self.overrides {
            keypath::set(&mut t, key, value.clone())
                .map_err(|m| config_err(&self.path, format!("[overrides] \"{key}\": {m}")))?;
        }
        Ok(t)
    }

    /// [`TuneConfig::fixed`] as TOML text (what every trial shares, for a check before the
    /// study starts).
    ///
    /// # Errors
    /// As [`TuneConfig::fixed`].
    pub fn fixed_text(&self) -> Result<String, TuneError> {
        toml::to_string_pretty(&self.fixed()?)
            .map_err(|e| config_err(&self.path, format!("cannot write the config as TOML: {e}")))
    }

    /// Checks, before the study starts, that the base config with each override, then with
    /// each hyperparameter at its default, passes `check` (the CLI passes kiln's config
    /// parser), so that a misspelt key is reported against the tune file's override or
    /// `[[hyperparameters]]` entry instead of failing trial 0. The check's message has its
    /// position in the internal merged document (`line N, column M`) removed.
    ///
    /// # Errors
    /// [`TuneError::Config`] naming the tune file and `[overrides] "key"` or
    /// `hyperparameters[i].key = "key"`. A base config that fails the check by itself is
    /// not reported here (the caller checks it with its own message).
    pub fn check_up_front(
        &self,
        check: &dyn Fn(&str) -> Result<(), String>,
    ) -> Result<(), TuneError> {
        let text = |t: &toml::Table| {
            toml::to_string_pretty(t).map_err(|e| {
                config_err(&self.path, format!("cannot write the config as TOML: {e}"))
            })
        };
        let mut t = self.base.clone();
        if check(&text(&t)?).is_err() {
            return Ok(()); // the base config itself: the caller's check of it says why
        }
        for (key, value) in &self.overrides {
            keypath::set(&mut t, key, value.clone())
                .map_err(|m| config_err(&self.path, format!("[overrides] \"{key}\": {m}")))?;
            check(&text(&t)?).map_err(|m| {
                config_err(
                    &self.path,
                    format!(
                        "[overrides] \"{key}\" = {value}: not a valid run config: {}",
                        strip_position(&m)
                    ),
                )
            })?;
        }
        for (i, hp) in self.space.hyperparameters().iter().enumerate() {
            keypath::set(&mut t, &hp.key, toml_value(&hp.default)).map_err(|m| {
                config_err(
                    &self.path,
                    format!("hyperparameters[{i}].key = \"{}\": {m}", hp.key),
                )
            })?;
            check(&text(&t)?).map_err(|m| {
                config_err(
                    &self.path,
                    format!(
                        "hyperparameters[{i}].key = \"{}\" (\"{}\" at its default {}): {}",
                        hp.key,
                        hp.name,
                        toml_value(&hp.default),
                        strip_position(&m)
                    ),
                )
            })?;
        }
        Ok(())
    }

    /// The run config of `plan` as a ready-to-train table: the base config, the overrides,
    /// the parameters at their keys, `fit.epochs` from the plan when it sets them
    /// ([`TrialPlan::epochs_override`]: Hyperband),
    /// `seed + execution` for the execution's seed, a relative `data.data_dir` made absolute
    /// (from the current directory, as `kiln train` resolves it).
    ///
    /// # Errors
    /// [`TuneError::Config`] naming the parameter whose key cannot be set.
    pub fn run_config(&self, plan: &TrialPlan, execution: u32) -> Result<toml::Table, TuneError> {
        let mut t = self.fixed()?;
        for (name, value) in &plan.params {
            let Some(key) = self.keys.get(name) else {
                return Err(config_err(
                    &self.path,
                    format!("the trial sets \"{name}\", which no [[hyperparameters]] entry names"),
                ));
            };
            keypath::set(&mut t, key, toml_value(value)).map_err(|m| {
                config_err(
                    &self.path,
                    format!("[[hyperparameters]] \"{name}\": key \"{key}\": {m}"),
                )
            })?;
        }
        if plan.bracket.is_some() || plan.resume_from.is_some() {
            keypath::set(
                &mut t,
                "fit.epochs",
                toml::Value::Integer(plan.epochs.into()),
            )
            .map_err(|m| config_err(&self.path, m))?;
        }
        if execution > 0 {
            let seed = t
                .get("seed")
                .and_then(toml::Value::as_integer)
                .unwrap_or(1337);
            t.insert(
                "seed".into(),
                toml::Value::Integer(seed.wrapping_add(execution.into())),
            );
        }
        if let Some(toml::Value::Table(data)) = t.get_mut("data") {
            let pipelines = ["train", "validation", "test"]
                .iter()
                .any(|k| data.contains_key(*k));
            let dir = match data.get("data_dir") {
                Some(toml::Value::String(d)) => Some(PathBuf::from(d)),
                None if pipelines => Some(PathBuf::from(".")),
                _ => None,
            };
            if let Some(dir) = dir.filter(|d| d.is_relative())
                && let Ok(abs) = std::path::absolute(&dir)
            {
                let abs = abs.to_string_lossy().trim_end_matches("/.").to_string();
                data.insert("data_dir".into(), toml::Value::String(abs));
            }
        }
        Ok(t)
    }

    /// The trial's config for `kiln train`: [`TuneConfig::run_config`] plus a `CSVLogger`
    /// writing [`EPOCHS_CSV`] (the tuner reads the per-epoch objective from it) and a
    /// `TensorBoard` callback logging to `log_dir` (an existing `TensorBoard` entry is
    /// redirected there) with the parameters as its HParams.
    ///
    /// # Errors
    /// As [`TuneConfig::run_config`].
    pub fn trial_config(
        &self,
        plan: &TrialPlan,
        execution: u32,
        log_dir: &Path,
    ) -> Result<toml::Table, TuneError> {
        let mut t = self.run_config(plan, execution)?;
        let callbacks = t
            .entry("callbacks")
            .or_insert_with(|| toml::Value::Array(Vec::new()));
        let Some(callbacks) = callbacks.as_array_mut() else {
            return Err(config_err(
                &self.base_path,
                "callbacks must be an array of tables: [[callbacks]]",
            ));
        };
        let mut csv = toml::Table::new();
        csv.insert("type".into(), "CSVLogger".into());
        csv.insert("filename".into(), EPOCHS_CSV.into());
        callbacks.push(toml::Value::Table(csv));
        let mut hparams = toml::Table::new();
        for (name, value) in &plan.params {
            hparams.insert(name.clone(), toml_value(value));
        }
        let is_tensorboard =
            |c: &toml::Value| c.get("type").and_then(toml::Value::as_str) == Some("TensorBoard");
        let tb = match callbacks.iter_mut().find(|c| is_tensorboard(c)) {
            Some(tb) => tb,
            None => {
                let mut tb = toml::Table::new();
                tb.insert("type".into(), "TensorBoard".into());
                callbacks.push(toml::Value::Table(tb));
                callbacks.last_mut().expect("just pushed")
            }
        };
        if let Some(tb) = tb.as_table_mut() {
            tb.insert(
                "log_dir".into(),
                toml::Value::String(log_dir.to_string_lossy().into_owned()),
            );
            if TENSORBOARD_HPARAMS {
                tb.insert("hparams".into(), toml::Value::Table(hparams));
            }
        }
        Ok(t)
    }

    /// What defines the study, as JSON: the base config, the overrides, the search space, the
    /// objective, the search keys of `[tuner]` (oracle and pruner) and
    /// `executions_per_trial`. A study in the database refuses to resume when any of them
    /// changed.
    pub fn settings_json(&self) -> serde_json::Value {
        let json = |v: &toml::Value| serde_json::to_value(v).unwrap_or_default();
        let oracle: toml::Table = self
            .tuner
            .iter()
            .filter(|(k, _)| {
                crate::oracle::ORACLE_KEYS.contains(&k.as_str())
                    || crate::pruner::PRUNER_KEYS.contains(&k.as_str())
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let overrides: toml::Table = self.overrides.iter().cloned().collect();
        serde_json::json!({
            "base run config": json(&toml::Value::Table(self.base.clone())),
            "[overrides]": json(&toml::Value::Table(overrides)),
            "[[hyperparameters]]": json(&self.hyperparameters),
            "objective": serde_json::to_value(&self.objective).unwrap_or_default(),
            "[tuner] search keys": json(&toml::Value::Table(oracle)),
            "executions_per_trial": self.settings.executions_per_trial,
        })
    }
}

fn settings(tuner: &toml::Table, path: &Path) -> Result<TunerSettings, TuneError> {
    let int = |key: &str, default: i64, min: i64| -> Result<i64, TuneError> {
        match tuner.get(key) {
            None => Ok(default),
            Some(toml::Value::Integer(i)) if *i >= min => Ok(*i),
            Some(other) => Err(config_err(
                path,
                format!("[tuner] {key}: {other} is not an integer >= {min}"),
            )),
        }
    };
    let secs = |key: &str, default: f64| -> Result<f64, TuneError> {
        match tuner.get(key) {
            None => Ok(default),
            Some(toml::Value::Integer(i)) if *i > 0 => Ok(*i as f64),
            Some(toml::Value::Float(f)) if *f > 0.0 && f.is_finite() => Ok(*f),
            Some(other) => Err(config_err(
                path,
                format!("[tuner] {key}: {other} is not a positive number of seconds"),
            )),
        }
    };
    let heartbeat_interval = secs("heartbeat_interval", 5.0)?;
    let grace_period = secs("grace_period", 2.0 * heartbeat_interval)?;
    if grace_period <= heartbeat_interval {
        return Err(config_err(
            path,
            format!(
                "[tuner] grace_period ({grace_period} s) must be longer than heartbeat_interval \
                 ({heartbeat_interval} s), else a live trial is taken from its worker; Optuna uses twice \
                 the interval"
            ),
        ));
    }
    let study_name = match tuner.get("study_name") {
        None => path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "study".into()),
        Some(toml::Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(other) => {
            return Err(config_err(
                path,
                format!("[tuner] study_name: {other} is not a non-empty string"),
            ));
        }
    };
    Ok(TunerSettings {
        max_trials: int("max_trials", 10, 1)? as u64,
        executions_per_trial: int("executions_per_trial", 1, 1)? as u32,
        max_retries_per_trial: int("max_retries_per_trial", 0, 0)? as u32,
        max_consecutive_failed_trials: int("max_consecutive_failed_trials", 3, 1)? as u32,
        heartbeat_interval,
        grace_period,
        study_name,
    })
}

#[cfg(test)]
mod tests;
