//! `[fit]`: Keras' `model.fit` arguments.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{KilnError, Result};

fn default_epochs() -> usize {
    1
}
fn default_batch_size() -> usize {
    32
}
fn default_true() -> bool {
    true
}

/// `model.fit(epochs=1, batch_size=32, validation_split=0.0, shuffle=True, class_weight=None)`,
/// plus `validation_data = "test"` to validate on the test split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitConfig {
    /// Passes over the training data.
    #[serde(default = "default_epochs")]
    pub epochs: usize,
    /// Examples per gradient step.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
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
            validation_split: 0.0,
            validation_data: None,
            shuffle: true,
            class_weight: BTreeMap::new(),
        }
    }
}

impl FitConfig {
    /// Checks ranges.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `fit.<key>`.
    pub fn validate(&self) -> Result<()> {
        if self.epochs == 0 {
            return Err(KilnError::config("fit.epochs", "must be at least 1"));
        }
        if self.batch_size == 0 {
            return Err(KilnError::config("fit.batch_size", "must be at least 1"));
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
