//! [`FitOptions`]: Keras' `fit` arguments beyond the data and the callbacks, plus kiln's
//! BackupAndRestore and NaN policy.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpoint, CheckpointDir};
use crate::step::Interrupt;

/// When BackupAndRestore writes a checkpoint: at the end of every epoch (`"epoch"`, Keras'
/// default) or, in addition, every N training batches (TOML: an integer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SaveFreq {
    /// Every epoch end.
    #[default]
    #[serde(with = "epoch_str")]
    Epoch,
    /// Every N batches, and every epoch end.
    Batches(u64),
}

mod epoch_str {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("epoch")
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
        let s = String::deserialize(d)?;
        if s == "epoch" {
            Ok(())
        } else {
            Err(serde::de::Error::custom(format!(
                "save_freq must be \"epoch\" or a number of batches, got \"{s}\""
            )))
        }
    }
}

/// What `fit` does when a training step's loss is NaN or infinite.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum OnNan {
    /// Keep training (Keras' behaviour without `TerminateOnNaN`).
    Continue,
    /// End `fit` with [`crate::KilnError::NanLoss`] and the NaN report.
    #[default]
    Stop,
    /// Drop the batch (no update) and go on; the count is the epoch's `skipped_nan_steps`.
    SkipStep,
    /// Restore the last good checkpoint, multiply the learning rate by `factor` and go on;
    /// give up (as `Stop`) after `max_rollbacks` rollbacks. Needs BackupAndRestore.
    Rollback {
        /// Learning-rate multiplier per rollback (0 < factor < 1).
        factor: f64,
        /// Rollbacks allowed over the run.
        max_rollbacks: u32,
    },
}

/// BackupAndRestore: where checkpoints go, how often, and the checkpoint to resume from.
#[derive(Debug, Clone)]
pub struct Backup {
    /// The checkpoint directory.
    pub dir: CheckpointDir,
    /// How often to write.
    pub save_freq: SaveFreq,
    /// The checkpoint to start from (read with [`CheckpointDir::latest`]), if resuming.
    pub resume: Option<Checkpoint>,
    /// The resolved config (TOML) recorded in each manifest, to tell on resume what changed.
    pub config: String,
    /// Pipeline fingerprints by split, recorded in each manifest.
    pub data_fingerprints: BTreeMap<String, String>,
}

/// How `Model::fit_with` runs (Keras' `model.fit` arguments by the same names).
#[derive(Debug, Clone)]
pub struct FitOptions {
    /// Index of the epoch to stop at (exclusive), as Keras' `epochs`.
    pub epochs: usize,
    /// Epoch to start at (Keras' `initial_epoch`): epochs before it are not run.
    pub initial_epoch: usize,
    /// Batches per epoch (Keras' `steps_per_epoch`). With it, one iterator over the training
    /// data continues across epochs (use `repeat` for datasets shorter than
    /// `steps_per_epoch × epochs`); without it an epoch is one full pass.
    pub steps_per_epoch: Option<u64>,
    /// Validate every N epochs (Keras' `validation_freq`), counting from epoch 1.
    pub validation_freq: usize,
    /// BackupAndRestore, if on.
    pub backup: Option<Backup>,
    /// The NaN policy.
    pub on_nan: OnNan,
    /// An external stop request (signals).
    pub interrupt: Option<Interrupt>,
    /// Where NaN reports go (`nan_report.json` and the batch as `.npy`); `None`: a
    /// `kiln-nan-report` directory under the system's temporary directory.
    pub report_dir: Option<std::path::PathBuf>,
}

impl FitOptions {
    /// `epochs` epochs from 0 with every other option at Keras' default (no backup; NaN
    /// losses stop the run).
    pub fn epochs(epochs: usize) -> FitOptions {
        FitOptions {
            epochs,
            initial_epoch: 0,
            steps_per_epoch: None,
            validation_freq: 1,
            backup: None,
            on_nan: OnNan::Stop,
            interrupt: None,
            report_dir: None,
        }
    }

    /// Keras' `_should_eval`: validate after epoch `epoch` (0-based) when `(epoch + 1)` is a
    /// multiple of `validation_freq`.
    pub fn validates_after(&self, epoch: usize) -> bool {
        (epoch + 1).is_multiple_of(self.validation_freq.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_freq_reads_epoch_or_a_count() {
        #[derive(Deserialize)]
        struct T {
            f: SaveFreq,
        }
        let t: T = toml::from_str("f = \"epoch\"").unwrap();
        assert_eq!(t.f, SaveFreq::Epoch);
        let t: T = toml::from_str("f = 500").unwrap();
        assert_eq!(t.f, SaveFreq::Batches(500));
        assert!(toml::from_str::<T>("f = \"batch\"").is_err());
    }

    #[test]
    fn validation_freq_counts_from_epoch_one_as_keras() {
        let mut o = FitOptions::epochs(6);
        o.validation_freq = 2;
        let at: Vec<usize> = (0..6).filter(|&e| o.validates_after(e)).collect();
        assert_eq!(at, [1, 3, 5]);
    }

    #[test]
    fn interrupt_records_the_signal() {
        let i = Interrupt::new();
        assert_eq!(i.requested(), None);
        i.clone().request(15);
        assert_eq!(i.requested(), Some(15));
    }
}
