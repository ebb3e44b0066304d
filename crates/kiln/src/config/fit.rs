//! `[fit]`: Keras' `model.fit` arguments.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{KilnError, Result};
use crate::guards::CheckNumerics;

fn default_epochs() -> usize {
    1
}
fn default_batch_size() -> usize {
    32
}

/// `fit.batch_size` before `"auto"` is resolved.
pub const AUTO_BATCH_SIZE: usize = usize::MAX;

/// A positive integer or `"auto"` ([`AUTO_BATCH_SIZE`]).
fn batch_size_or_auto<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<usize, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(i64),
        Text(String),
    }
    match Raw::deserialize(d) {
        Ok(Raw::Number(n)) if n >= 0 => Ok(n as usize),
        Ok(Raw::Text(t)) if t == "auto" => Ok(AUTO_BATCH_SIZE),
        _ => Err(serde::de::Error::custom(
            "fit.batch_size must be a positive integer or \"auto\"",
        )),
    }
}

fn write_batch_size<S: serde::Serializer>(v: &usize, s: S) -> std::result::Result<S::Ok, S::Error> {
    if *v == AUTO_BATCH_SIZE {
        s.serialize_str("auto")
    } else {
        s.serialize_u64(*v as u64)
    }
}
fn default_true() -> bool {
    true
}
fn default_one() -> usize {
    1
}
fn default_rollback_factor() -> f64 {
    0.5
}
fn default_max_rollbacks() -> u32 {
    3
}

/// `[fit] on_nan`: what a NaN or infinite training loss does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnNanConfig {
    /// Stop with a NaN report (default).
    #[default]
    Stop,
    /// Keep going (Keras without `TerminateOnNaN`).
    Continue,
    /// Drop that batch's update and go on.
    SkipStep,
    /// Restore the last good checkpoint, scale the learning rate by `rollback_factor`, go on.
    Rollback,
}

/// `model.fit(epochs=1, batch_size=32, validation_split=0.0, shuffle=True, class_weight=None)`,
/// plus `validation_data = "test"` to validate on the test split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitConfig {
    /// Passes over the training data.
    #[serde(default = "default_epochs")]
    pub epochs: usize,
    /// Examples per gradient step; [`AUTO_BATCH_SIZE`] (TOML `"auto"`) until
    /// [`crate::estimate::resolve_batch_size`] chooses it from the memory estimate.
    #[serde(
        default = "default_batch_size",
        deserialize_with = "batch_size_or_auto",
        serialize_with = "write_batch_size"
    )]
    pub batch_size: usize,
    /// Memory `batch_size = "auto"` fits into (`"8GiB"`, `"16GB"`); default 90% of the
    /// available memory (on the CPU, `MemAvailable` of `/proc/meminfo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<String>,
    /// Fraction of the training data held out for validation: the *last* examples, taken before
    /// shuffling, as Keras does.
    #[serde(default)]
    pub validation_split: f64,
    /// `"test"`: validate on the test split instead (exclusive with `validation_split`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_data: Option<String>,
    /// Reshuffle the training data before each epoch.
    #[serde(default = "default_true")]
    pub shuffle: bool,
    /// Epoch to start at (Keras' `initial_epoch`); `epochs` is the index to stop at.
    #[serde(default)]
    pub initial_epoch: usize,
    /// Batches per epoch (Keras' `steps_per_epoch`); the training iterator then continues
    /// across epochs, so the pipeline should `repeat`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_per_epoch: Option<u64>,
    /// Validate every N epochs (Keras' `validation_freq`).
    #[serde(default = "default_one")]
    pub validation_freq: usize,
    /// `"stop"` | `"skip_step"` | `"rollback"` | `"continue"`.
    #[serde(default)]
    pub on_nan: OnNanConfig,
    /// Learning-rate multiplier per NaN rollback.
    #[serde(default = "default_rollback_factor")]
    pub rollback_factor: f64,
    /// Rollbacks allowed before the run stops.
    #[serde(default = "default_max_rollbacks")]
    pub max_rollbacks: u32,
    /// NaN / ±Inf in a batch (TensorFlow's `tf.debugging.check_numerics`): `"raise"` (default)
    /// names the example and value, `"skip"` drops and counts such examples, `"off"` does not
    /// check. See [`crate::guards`].
    #[serde(default)]
    pub check_numerics: CheckNumerics,
    /// Keras' `class_weight`: loss weight per class index, `{ "0" = 1.0, "6" = 2.0 }` (TOML
    /// keys are strings); absent classes weigh 1.0. Training data only. Checked against the
    /// model by [`crate::fit::ClassWeight::from_config`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub class_weight: BTreeMap<String, f64>,
}

impl Default for FitConfig {
    fn default() -> FitConfig {
        FitConfig {
            epochs: default_epochs(),
            batch_size: default_batch_size(),
            memory_budget: None,
            validation_split: 0.0,
            validation_data: None,
            shuffle: true,
            initial_epoch: 0,
            steps_per_epoch: None,
            validation_freq: 1,
            on_nan: OnNanConfig::Stop,
            rollback_factor: default_rollback_factor(),
            max_rollbacks: default_max_rollbacks(),
            check_numerics: CheckNumerics::default(),
            class_weight: BTreeMap::new(),
        }
    }
}

impl FitConfig {
    /// The NaN policy these settings describe.
    pub fn on_nan(&self) -> crate::fit::OnNan {
        match self.on_nan {
            OnNanConfig::Stop => crate::fit::OnNan::Stop,
            OnNanConfig::Continue => crate::fit::OnNan::Continue,
            OnNanConfig::SkipStep => crate::fit::OnNan::SkipStep,
            OnNanConfig::Rollback => crate::fit::OnNan::Rollback {
                factor: self.rollback_factor,
                max_rollbacks: self.max_rollbacks,
            },
        }
    }

    /// Checks ranges.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `fit.<key>`.
    pub fn validate(&self) -> Result<()> {
        if self.epochs == 0 {
            return Err(KilnError::config("fit.epochs", "must be at least 1"));
        }
        let b = self.batch_size;
        if b != AUTO_BATCH_SIZE {
            super::limits::check_memory("fit.batch_size", &b.to_string(), "one batch", &[b])?;
        }
        if self.initial_epoch >= self.epochs {
            return Err(KilnError::config(
                "fit.initial_epoch",
                format!(
                    "{} leaves nothing to train: epochs ({}) is the index of the epoch to stop \
                     at, as in Keras; raise epochs or lower initial_epoch",
                    self.initial_epoch, self.epochs
                ),
            ));
        }
        if self.steps_per_epoch == Some(0) {
            return Err(KilnError::config(
                "fit.steps_per_epoch",
                "must be at least 1 (or left out: one full pass per epoch)",
            ));
        }
        if self.validation_freq == 0 {
            return Err(KilnError::config(
                "fit.validation_freq",
                "must be at least 1",
            ));
        }
        if !(self.rollback_factor > 0.0 && self.rollback_factor < 1.0) {
            return Err(KilnError::config(
                "fit.rollback_factor",
                format!(
                    "must be between 0 and 1 (exclusive), got {}",
                    self.rollback_factor
                ),
            ));
        }
        if self.batch_size == 0 {
            return Err(KilnError::config("fit.batch_size", "must be at least 1"));
        }
        if let Some(m) = &self.memory_budget {
            super::bytes::parse_bytes(m, "fit.memory_budget")?;
        }
        if !(0.0..1.0).contains(&self.validation_split) {
            return Err(KilnError::config(
                "fit.validation_split",
                format!("must be in [0, 1), got {}", self.validation_split),
            ));
        }
        match self.validation_data.as_deref() {
            None => {}
            Some("test") if self.validation_split == 0.0 => {}
            Some("test") => {
                return Err(KilnError::config(
                    "fit.validation_data",
                    "give either validation_split or validation_data, not both",
                ));
            }
            Some(other) => {
                return Err(KilnError::config(
                    "fit.validation_data",
                    format!("unknown value \"{other}\"; allowed: \"test\""),
                ));
            }
        }
        Ok(())
    }
}
