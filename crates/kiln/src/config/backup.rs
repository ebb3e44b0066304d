//! BackupAndRestore's settings (`keras.callbacks.BackupAndRestore(backup_dir, save_freq="epoch",
//! double_checkpoint=False, delete_checkpoint=True)`), as kiln applies them.
//!
//! `kiln train` always backs up (a killed run must resume): without a `BackupAndRestore` entry
//! in `[[callbacks]]` these defaults apply. Differences from Keras, on purpose: the checkpoints
//! are kept when training ends (`delete_checkpoint = false`), so that a finished run is not
//! retrained from scratch by running the same command again and NaN rollbacks have a target;
//! `keep` (kiln's) sets how many are kept (Keras' `double_checkpoint = true` is `keep = 2`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{KilnError, Result};
use crate::fit::SaveFreq;

fn default_dir() -> PathBuf {
    PathBuf::from("checkpoints")
}
fn default_keep() -> usize {
    3
}

/// Where and how often training state is checkpointed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupSpec {
    /// Checkpoint directory; relative paths are inside the run directory.
    #[serde(default = "default_dir")]
    pub backup_dir: PathBuf,
    /// `"epoch"`, or a number of batches (checkpoints are then also written at epoch ends).
    #[serde(default)]
    pub save_freq: SaveFreq,
    /// Remove the checkpoints when training ends without error (Keras' default is true; kiln's
    /// is false, see the module docs).
    #[serde(default)]
    pub delete_checkpoint: bool,
    /// How many of the newest checkpoints to keep (at least 1).
    #[serde(default = "default_keep")]
    pub keep: usize,
}

impl Default for BackupSpec {
    fn default() -> BackupSpec {
        BackupSpec {
            backup_dir: default_dir(),
            save_freq: SaveFreq::Epoch,
            delete_checkpoint: false,
            keep: default_keep(),
        }
    }
}

impl BackupSpec {
    /// The checkpoint directory for a run saved in `run_dir`.
    pub fn dir_in(&self, run_dir: &Path) -> PathBuf {
        if self.backup_dir.is_absolute() {
            self.backup_dir.clone()
        } else {
            run_dir.join(&self.backup_dir)
        }
    }

    /// Checks ranges.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `callbacks.BackupAndRestore.<key>`.
    pub fn validate(&self) -> Result<()> {
        let plain = self
            .backup_dir
            .components()
            .all(|c| matches!(c, std::path::Component::CurDir));
        if plain {
            return Err(KilnError::config(
                "callbacks.BackupAndRestore.backup_dir",
                format!(
                    "\"{}\" is the run directory itself; give checkpoints their own directory, \
                     e.g. \"checkpoints\"",
                    self.backup_dir.display()
                ),
            ));
        }
        super::paths::check_inside_run_dir(
            "callbacks.BackupAndRestore.backup_dir",
            &self.backup_dir,
        )?;
        if self.keep == 0 {
            return Err(KilnError::config(
                "callbacks.BackupAndRestore.keep",
                "must be at least 1 (the checkpoint to resume from)",
            ));
        }
        if self.save_freq == SaveFreq::Batches(0) {
            return Err(KilnError::config(
                "callbacks.BackupAndRestore.save_freq",
                "must be \"epoch\" or a positive number of batches",
            ));
        }
        Ok(())
    }
}
