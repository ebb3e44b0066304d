//! Pruners: stop unpromising trials early from their per-epoch objective values.
//!
//! `[tuner].pruner` ([`PRUNER_KEYS`]) is `"none"` (the default: Keras Tuner does not prune),
//! `"median"`, `"successive_halving"`, or an inline table with `type` and the pruner's
//! settings (Optuna's names and defaults):
//!
//! ```toml
//! pruner = { type = "median", n_startup_trials = 5, n_warmup_steps = 0, interval_steps = 1, n_min_trials = 1 }
//! pruner = { type = "successive_halving", min_resource = "auto", reduction_factor = 4, min_early_stopping_rate = 0, bootstrap_count = 0 }
//! ```
//!
//! A step is an epoch index (0-based, [`crate::TrialRecord::intermediate`]), as Optuna's
//! Keras integration reports them.

mod median;
mod successive_halving;

pub use median::MedianPruner;
pub use successive_halving::SuccessiveHalvingPruner;

use crate::error::TuneError;
use crate::settings::{get_int, reject_foreign};
use crate::trial::{Direction, TrialRecord};

/// Decides whether a running trial should stop after its latest reported epoch.
pub trait Pruner: Send + Sync {
    /// Whether `trial` (running, its `intermediate` values reported so far) should stop now,
    /// given every trial of the study (`history`, which includes `trial` itself).
    fn should_prune(
        &self,
        trial: &TrialRecord,
        history: &[TrialRecord],
        direction: Direction,
    ) -> bool;
}

/// The `[tuner]` keys that [`build`] reads.
pub const PRUNER_KEYS: &[&str] = &["pruner"];

/// Builds the pruner `[tuner].pruner` names; `None` for `"none"` or when absent.
///
/// # Errors
/// [`TuneError::Config`] naming `tuner.pruner.<key>`: unknown type or key, a value out of
/// range (Optuna's checks: `n_startup_trials >= 0`, `n_warmup_steps >= 0`,
/// `interval_steps >= 1`, `n_min_trials >= 1`, `min_resource >= 1` or `"auto"`,
/// `reduction_factor >= 2`, `min_early_stopping_rate >= 0`, `bootstrap_count >= 0` and not
/// with `"auto"`).
pub fn build(tuner: &toml::Table) -> Result<Option<Box<dyn Pruner>>, TuneError> {
    let empty = toml::Table::new();
    let (ty, table) = match tuner.get("pruner") {
        None => return Ok(None),
        Some(toml::Value::String(s)) => (s.clone(), &empty),
        Some(toml::Value::Table(t)) => match t.get("type") {
            Some(toml::Value::String(s)) => (s.clone(), t),
            _ => {
                return Err(TuneError::Config(
                    "tuner.pruner.type: missing; write pruner = { type = \"median\", ... } or pruner = \"median\"".into(),
                ));
            }
        },
        Some(other) => {
            return Err(TuneError::Config(format!(
                "tuner.pruner: expected \"none\", \"median\", \"successive_halving\" or an inline table with `type`, found {other}"
            )));
        }
    };
    let p = "tuner.pruner";
    let known = [
        "type",
        "n_startup_trials",
        "n_warmup_steps",
        "interval_steps",
        "n_min_trials",
        "min_resource",
        "reduction_factor",
        "min_early_stopping_rate",
        "bootstrap_count",
    ];
    if let Some(k) = table.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(TuneError::Config(format!(
            "{p}.{k}: unknown key; known: {}",
            known[1..].join(", ")
        )));
    }
    reject_foreign(
        table,
        p,
        &ty,
        &[
            ("n_startup_trials", "median"),
            ("n_warmup_steps", "median"),
            ("interval_steps", "median"),
            ("n_min_trials", "median"),
            ("min_resource", "successive_halving"),
            ("reduction_factor", "successive_halving"),
            ("min_early_stopping_rate", "successive_halving"),
            ("bootstrap_count", "successive_halving"),
        ],
    )?;
    Ok(match ty.as_str() {
        "none" => None,
        "median" => Some(Box::new(MedianPruner {
            n_startup_trials: get_int(table, p, "n_startup_trials", 5, 0)? as usize,
            n_warmup_steps: get_int(table, p, "n_warmup_steps", 0, 0)? as u32,
            interval_steps: get_int(table, p, "interval_steps", 1, 1)? as u32,
            n_min_trials: get_int(table, p, "n_min_trials", 1, 1)? as usize,
        })),
        "successive_halving" => {
            let min_resource = match table.get("min_resource") {
                None => None,
                Some(toml::Value::String(s)) if s == "auto" => None,
                Some(toml::Value::Integer(v)) if *v >= 1 => Some(*v as u32),
                Some(other) => {
                    return Err(TuneError::Config(format!(
                        "{p}.min_resource: expected \"auto\" or an integer >= 1 (epochs), found {other}"
                    )));
                }
            };
            let bootstrap_count = get_int(table, p, "bootstrap_count", 0, 0)? as usize;
            if bootstrap_count > 0 && min_resource.is_none() {
                return Err(TuneError::Config(format!(
                    "{p}.bootstrap_count: needs an integer min_resource (Optuna: bootstrap_count > 0 and min_resource = \"auto\" are incompatible)"
                )));
            }
            Some(Box::new(SuccessiveHalvingPruner {
                min_resource,
                reduction_factor: get_int(table, p, "reduction_factor", 4, 2)? as u32,
                min_early_stopping_rate: get_int(table, p, "min_early_stopping_rate", 0, 0)? as u32,
                bootstrap_count,
            }))
        }
        other => {
            return Err(TuneError::Config(format!(
                "{p}: unknown pruner \"{other}\"; one of \"none\", \"median\", \"successive_halving\""
            )));
        }
    })
}

/// The trial's last reported step (epoch) and its value.
pub(crate) fn last(trial: &TrialRecord) -> Option<(u32, f64)> {
    trial.intermediate.iter().copied().max_by_key(|(e, _)| *e)
}

/// The value `trial` reported at `step`.
pub(crate) fn at(trial: &TrialRecord, step: u32) -> Option<f64> {
    trial
        .intermediate
        .iter()
        .find(|(e, _)| *e == step)
        .map(|(_, v)| *v)
}

#[cfg(test)]
mod tests;
