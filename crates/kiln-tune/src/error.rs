//! Errors of the tuner. Every message says what is wrong, where (file, config key, trial) and
//! how to fix it.

/// An error of kiln-tune.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// The tune config (search space, `[tuner]` table, objective) is invalid.
    #[error("{0}")]
    Config(String),
    /// The study database cannot be opened, read or written (the message names the storage
    /// with its password redacted).
    #[error("{0}")]
    Storage(String),
    /// A file or directory of the study cannot be read or written.
    #[error("{0}")]
    Io(String),
    /// The study stopped: too many consecutive failed trials, a trial's child could not be
    /// started, ...
    #[error("{0}")]
    Study(String),
    /// SIGINT or SIGTERM stopped the study; the running trial was put back to run again when
    /// the study resumes.
    #[error("interrupted by signal {0}: the study is saved, run the same command to resume it")]
    Interrupted(i32),
}

impl TuneError {
    /// Whether the error is the user's input (exit code 2 in the CLI) rather than a runtime
    /// failure (exit code 1).
    pub fn is_usage(&self) -> bool {
        matches!(self, TuneError::Config(_))
    }

    /// An [`TuneError::Io`] naming `path`.
    pub fn io(what: &str, path: &std::path::Path, e: impl std::fmt::Display) -> TuneError {
        TuneError::Io(format!("cannot {what} {}: {e}", path.display()))
    }
}
