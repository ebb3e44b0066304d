//! Keras' `logs` (name → value, in report order), `History`, the log keys kiln adds to
//! Keras' own, and where a step's time goes ([`StepProfile`]).
//!
//! The bottom layer of the crate with [`crate::error`]: plain records that every layer above
//! reads or writes (the step fills them, strategies and callbacks read them, checkpoints and run
//! directories save them); it imports nothing of the crate.

mod profile;

pub use profile::StepProfile;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Epoch logs key: training examples per second of the epoch's training loop.
pub const SAMPLES_PER_SECOND: &str = "samples_per_second";
/// Epoch logs key: seconds the training loop waited for the input pipeline in the epoch.
pub const INPUT_WAIT_SECONDS: &str = "input_wait_seconds";
/// Epoch and batch logs key: the loss scale (`mixed_float16`; TensorBoard `epoch_loss_scale`).
pub const LOSS_SCALE: &str = "loss_scale";
/// The log key that counts examples dropped by `check_numerics = "skip"` in an epoch (for
/// validation `val_skipped_nonfinite`). Present in every epoch's logs when the mode is skip.
pub const SKIPPED_KEY: &str = "skipped_nonfinite";

/// Metric values in Keras' order: `loss`, then the compiled metrics, then `val_*`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Logs(pub Vec<(String, f64)>);

impl Logs {
    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// Sets `name` (replacing or appending).
    pub fn set(&mut self, name: impl Into<String>, value: f64) {
        let name = name.into();
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name, value)),
        }
    }

    /// Every entry of `other` with `prefix` prepended (`val_`).
    pub fn extend_prefixed(&mut self, prefix: &str, other: &Logs) {
        for (n, v) in &other.0 {
            self.set(format!("{prefix}{n}"), *v);
        }
    }

    /// As a JSON object (keys in order of appearance are not kept by JSON readers; values are).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Object(
            self.0
                .iter()
                .map(|(n, v)| (n.clone(), serde_json::json!(v)))
                .collect(),
        )
    }
}

/// What `fit` returns: per-epoch values, as Keras' `History.history` (a dict of lists), plus
/// `epoch_time_s` (wall seconds per epoch, validation included) and `samples_per_second`
/// (training examples per second of training-loop time).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// Epoch numbers (0-based, as Keras' `History.epoch`).
    pub epoch: Vec<usize>,
    /// `name -> [value per epoch]`.
    pub history: BTreeMap<String, Vec<f64>>,
    /// Wall seconds per epoch, validation included.
    pub epoch_time_s: Vec<f64>,
    /// Training examples per second of each epoch's training loop (validation excluded).
    pub samples_per_second: Vec<f64>,
    /// Per-stage step times of the last epoch, when profiling was on.
    #[serde(skip_serializing_if = "Option::is_none", skip_deserializing)]
    pub profile: Option<StepProfile>,
}

impl History {
    /// Appends one epoch's logs.
    pub fn push(&mut self, epoch: usize, logs: &Logs) {
        self.epoch.push(epoch);
        for (n, v) in &logs.0 {
            self.history.entry(n.clone()).or_default().push(*v);
        }
    }

    /// The last value of `name`.
    pub fn last(&self, name: &str) -> Option<f64> {
        self.history.get(name).and_then(|v| v.last().copied())
    }
}

/// `x` rounded to 6 significant digits for messages: a learning rate cut by 0.1 three times
/// prints as `0.01`, not `0.010000000000000002`.
pub fn short(x: f64) -> String {
    let rounded: f64 = format!("{x:.5e}").parse().unwrap_or(x);
    format!("{rounded}")
}

#[cfg(test)]
mod short_tests {
    #[test]
    fn rounds_to_six_significant_digits() {
        assert_eq!(super::short(10.0 * 0.1 * 0.1 * 0.1), "0.01");
        assert_eq!(super::short(1234567.0), "1234570");
        assert_eq!(super::short(f64::NAN), "NaN");
        assert_eq!(super::short(0.001), "0.001");
    }
}
