//! The run directory `runs/<name>/`: the truth about a run.
//!
//! | file | content |
//! |---|---|
//! | `config.toml` | the resolved config (defaults filled in, CLI overrides applied) |
//! | `model.safetensors` | final weights, Keras names and layouts |
//! | `history.json` | per-epoch metrics, `epoch_time_s`, `samples_per_second` |
//! | `metrics.json` | final test metrics |
//! | `.lock` | the lock of the process writing the directory, and who it is ([`DirLock`]) |
//!
//! Every file is written to a temporary name in the same directory and renamed over the old
//! one, so a crash leaves either the old or the new file, never a torn one. One process writes
//! a run directory at a time: `kiln train` (and `kiln export` into it) hold its [`DirLock`].

mod lock;

pub use lock::{DirLock, LOCK_FILE, LockHolder};

use std::path::{Path, PathBuf};

use crate::error::{KilnError, Result};
use crate::logs::{History, Logs};

pub use crate::files::write_atomic;

/// A run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// Creates (or reuses) the directory.
    ///
    /// # Errors
    /// [`KilnError::Io`] when it cannot be created.
    pub fn create(root: impl Into<PathBuf>) -> Result<RunDir> {
        let root = root.into();
        std::fs::create_dir_all(&root).map_err(|e| KilnError::io(&root, e))?;
        Ok(RunDir { root })
    }

    /// Opens an existing run directory.
    ///
    /// # Errors
    /// [`KilnError::MissingData`] when it holds no `config.toml` (not a run directory).
    pub fn open(root: impl Into<PathBuf>) -> Result<RunDir> {
        let root = root.into();
        if !root.join("config.toml").is_file() {
            return Err(KilnError::MissingData(format!(
                "{} is not a run directory (no config.toml); pass the directory `kiln train` wrote, e.g. runs/<name>",
                root.display()
            )));
        }
        Ok(RunDir { root })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// `config.toml`.
    pub fn config(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    /// `model.safetensors`.
    pub fn weights(&self) -> PathBuf {
        self.root.join("model.safetensors")
    }

    /// `part-<name>.safetensors`: the weights of a custom train step's extra part `name`.
    pub fn part_weights(&self, name: &str) -> PathBuf {
        self.root.join(format!("part-{name}.safetensors"))
    }

    /// `history.json`.
    pub fn history(&self) -> PathBuf {
        self.root.join("history.json")
    }

    /// `metrics.json`.
    pub fn metrics(&self) -> PathBuf {
        self.root.join("metrics.json")
    }

    /// Writes the resolved config.
    ///
    /// # Errors
    /// [`KilnError::Io`].
    pub fn save_config(&self, toml: &str) -> Result<()> {
        write_atomic(&self.config(), toml.as_bytes())
    }

    /// Writes `history.json`: `{"epoch": [...], "history": {"loss": [...], ...},
    /// "epoch_time_s": [...], "samples_per_second": [...]}`.
    ///
    /// # Errors
    /// [`KilnError::Io`].
    pub fn save_history(&self, history: &History) -> Result<()> {
        let json = serde_json::to_vec_pretty(history).expect("history serializes");
        write_atomic(&self.history(), &json)
    }

    /// Writes `metrics.json` (one object, metric name -> value).
    ///
    /// # Errors
    /// [`KilnError::Io`].
    pub fn save_metrics(&self, logs: &Logs) -> Result<()> {
        let json = serde_json::to_vec_pretty(&logs.to_json()).expect("metrics serialize");
        write_atomic(&self.metrics(), &json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_content_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("kiln-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
