//! `manifest.json`: what a checkpoint holds and where training stood when it was written.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::logs::History;

/// The manifest format this kiln writes and reads.
pub const FORMAT: u32 = 1;

/// One file of a checkpoint with its size and CRC-32C (Castagnoli, RFC 3720), checked before
/// the checkpoint is trusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// File name inside the checkpoint directory.
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// CRC-32C of the content.
    pub crc32c: u32,
}

/// Running sums of the epoch in progress (so that a resumed epoch reports the same means).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EpochSums {
    /// Examples seen.
    pub examples: f64,
    /// Sum of per-batch mean loss × batch size.
    pub loss: f64,
    /// Per compiled metric, the sum of per-example scores.
    pub correct: Vec<f64>,
    /// A model with several outputs: per output, its loss sum and its metrics' sums.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_output: Vec<(f64, Vec<f64>)>,
    /// A custom train step's logs other than `loss`: name and example-weighted sum.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub custom: Vec<(String, f64)>,
}

/// Where the training input stood: how many times the training dataset was iterated
/// (`Dataset::iter`, each call advances shuffle and augmentation seeds) and how many batches were
/// taken from the current iterator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputPosition {
    /// `Dataset::iter` calls so far, the current one included.
    pub iterators_started: u64,
    /// Whether the last iterator is still in use (false between epochs).
    pub open: bool,
    /// Batches taken from the current iterator.
    pub batches_taken: u64,
}

/// What resuming needs besides the model and optimizer files. Written last, after the files it
/// lists, so a checkpoint without a readable manifest is incomplete by construction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: u32,
    /// The kiln version that wrote it.
    pub kiln_version: String,
    /// The epoch to run next (0-based), and how many of its batches are already done.
    pub epoch: usize,
    /// Batches of `epoch` already trained.
    pub step_in_epoch: u64,
    /// Training batches over the whole run (Keras' `optimizer.iterations`).
    pub iterations: u64,
    /// The learning rate of the next step (after callbacks and NaN rollbacks).
    pub learning_rate: f64,
    /// The run's seed (dropout is reseeded from it and `iterations` at every step).
    pub seed: u64,
    /// Sums of the epoch in progress.
    pub epoch_sums: EpochSums,
    /// Position of the training input.
    pub input: InputPosition,
    /// Per-epoch values so far.
    pub history: History,
    /// Saved state of callbacks that have one, by `"<index>:<name>"`.
    #[serde(default)]
    pub callbacks: BTreeMap<String, serde_json::Value>,
    /// NaN rollbacks done so far.
    #[serde(default)]
    pub rollbacks: u32,
    /// The resolved run config (TOML) the checkpoint was trained with, to say what changed on
    /// resume. Empty for library runs that did not give one.
    #[serde(default)]
    pub config: String,
    /// Fingerprints of the pipelines (hex `Dataset::fingerprint`) by split name.
    #[serde(default)]
    pub data_fingerprints: BTreeMap<String, String>,
    /// The files, checked on load.
    pub files: Vec<FileEntry>,
    /// The loss scale's state (`mixed_float16` runs), so a resume continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<crate::precision::LossScale>,
    /// Training ended before its last epoch because a callback set `stop_training`
    /// (EarlyStopping, TerminateOnNaN) or the input was empty: the run is finished, and
    /// running it again re-evaluates instead of training on (as a run that trained all its
    /// epochs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
}
