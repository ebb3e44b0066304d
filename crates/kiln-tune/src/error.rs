//! Errors of the tuner. Every message says what is wrong, where (file, config key, trial) and
//! how to fix it.

/// An error of kiln-tune.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// The tune config (search space, `[tuner]` table, objective) is invalid.
    #[error("{0}")]
    Config(String),
}
