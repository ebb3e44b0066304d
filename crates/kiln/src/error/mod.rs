//! kiln's error type: every message names what went wrong, where, and how to fix it.
//!
//! A bottom-layer module: besides [`crate::logs`] and [`crate::names`] it imports nothing of
//! the crate, so that every module can return a [`KilnError`]. The records that some errors
//! carry live here too ([`NonFiniteInput`], [`LockHolder`]).

use std::path::PathBuf;

pub(crate) mod lock_holder;
mod non_finite;

pub use lock_holder::{LOCK_FILE, LockHolder};
pub use non_finite::{BatchOrigin, DataSplit, NonFiniteInput, describe_position};

/// Result alias for kiln.
pub type Result<T> = std::result::Result<T, KilnError>;

/// Everything that can go wrong in kiln (the library). The CLI maps the errors of
/// [`KilnError::is_usage`] (a bad config or flag, a run directory in use, checkpoints that
/// cannot resume) to exit code 2 and everything else to exit code 1.
#[derive(Debug, thiserror::Error)]
pub enum KilnError {
    /// A configuration value is missing, unknown or out of range. `key` is the dotted TOML path
    /// (`fit.batch_size`, `model.layers[2].filters`), `file` the config file when there is one.
    #[error("{}{key}: {message}", file.as_ref().map(|f| format!("{}: ", f.display())).unwrap_or_default())]
    Config {
        /// The config file, when the value came from one.
        file: Option<PathBuf>,
        /// Dotted path of the key.
        key: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// The input pipeline failed (unreadable or corrupt files, shape mismatches).
    #[error(transparent)]
    Data(#[from] kiln_data::DataError),
    /// Reading or writing a file of the run directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A weights file does not match the model (missing tensor, wrong shape, bad format).
    #[error("{}: {message}", path.display())]
    Weights {
        /// The weights file.
        path: PathBuf,
        /// What does not match.
        message: String,
    },
    /// A Keras model file kiln cannot read or write: the file, the archive entry
    /// (`config.json`, `model.weights.h5`) and what is wrong there (the layer, the weight).
    #[error("{}: {entry}: {message}", path.display())]
    KerasFile {
        /// The `.keras` file.
        path: PathBuf,
        /// The archive entry (or `zip` for the archive itself).
        entry: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Data does not fit the model (wrong feature shape, label out of range…).
    #[error("{0}")]
    Shape(String),
    /// A batch holds a NaN or ±Inf (`[fit] check_numerics = "raise"`, TensorFlow's
    /// `tf.debugging.check_numerics`): the example, the position in it, the value and the split.
    #[error("{0}")]
    NonFinite(Box<NonFiniteInput>),
    /// The data files are not where the config says; the message says how to get them.
    #[error("{0}")]
    MissingData(String),
    /// The requested device is not available in this build or on this machine.
    #[error("{0}")]
    Device(String),
    /// Training was stopped by a signal (SIGINT, SIGTERM) after finishing a batch; the
    /// checkpoint written then, if any, resumes it.
    #[error("training stopped by signal {signal} after finishing step {iterations} of the run{}", checkpoint.as_ref().map(|c| format!("; checkpoint {} written: run the same `kiln train` command to resume", c.display())).unwrap_or_default())]
    Interrupted {
        /// The signal number (2 = SIGINT, 15 = SIGTERM).
        signal: i32,
        /// Training batches done over the run.
        iterations: u64,
        /// The checkpoint written on the way out.
        checkpoint: Option<PathBuf>,
    },
    /// A signal (SIGINT, SIGTERM) arrived after training had finished, during the final
    /// evaluation: the weights, history and config were already saved.
    #[error("interrupted by signal {signal} after training finished; the trained model is saved in {}: `kiln evaluate {}` evaluates it", run_dir.display(), run_dir.display())]
    InterruptedAfterTraining {
        /// The signal number (2 = SIGINT, 15 = SIGTERM).
        signal: i32,
        /// The run directory holding the saved model.
        run_dir: PathBuf,
    },
    /// A training step produced a NaN or infinite loss and the NaN policy stopped the run; the
    /// message is the NaN report (what went non-finite first, and remedies).
    #[error("{0}")]
    NanLoss(String),
    /// A custom train step (`compile.train_step`) failed or returned bad logs: `step` is the
    /// step's name, `key` the log or setting at fault.
    #[error("train step \"{step}\": {key}: {message}")]
    TrainStep {
        /// The step's name.
        step: String,
        /// The log key (or setting) at fault.
        key: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The run's estimated memory exceeds what is available (refused before training), with
    /// the numbers and the remedies.
    #[error("{0}")]
    InsufficientMemory(String),
    /// A resume found that the config or the data changed since the checkpoint was written.
    #[error("{0}")]
    Changed(String),
    /// Another process (or another call in this process) holds the directory's lock
    /// ([`crate::run_dir::DirLock`]): one writer per run directory.
    #[error("{} is in use by {holder}; only one process may write it at a time (lock file {}). {remedy}", dir.display(), dir.join(LOCK_FILE).display())]
    RunDirLocked {
        /// The locked directory.
        dir: PathBuf,
        /// Who holds it, as its lock file records it.
        holder: LockHolder,
        /// What to do: wait, stop the holder, or write elsewhere.
        remedy: String,
    },
    /// A run directory holds checkpoints but none can resume training (each is listed with
    /// the reason); training is not started over silently.
    #[error("{0}")]
    UnusableCheckpoints(String),
    /// A training step ran out of memory (a GPU allocation failure, or an injected one on CPU
    /// builds, see `crate::fit` `oom`) even with its batch computed one example at a time.
    #[error(
        "out of memory in training batch {step} (batch of {batch_size} examples, computed in parts of down to 1 example): {message}. Lower fit.batch_size, use precision = \"mixed_float16\" or \"mixed_bfloat16\", or check the sizes with `kiln estimate`"
    )]
    OutOfMemory {
        /// The training batch (0-based, counted from the start of `fit`).
        step: u64,
        /// Examples in the batch.
        batch_size: usize,
        /// The allocation failure as the backend reported it.
        message: String,
    },
    /// A callback ended training (`TerminateOnNaN(raise_error=True)`) or cannot work with
    /// the run (a monitored metric whose direction is unknown, a foreign weights snapshot).
    #[error("{callback}: {message}")]
    Callback {
        /// The callback's Keras name (`EarlyStopping`).
        callback: String,
        /// What happened, where (epoch, batch, metric) and how to fix it.
        message: String,
    },
}

impl KilnError {
    /// A config error for `key`, without a file (the caller may attach one with [`Self::in_file`]).
    pub fn config(key: impl Into<String>, message: impl Into<String>) -> KilnError {
        KilnError::Config {
            file: None,
            key: key.into(),
            message: message.into(),
        }
    }

    /// Attaches the config file to a [`KilnError::Config`]; other errors pass unchanged.
    pub fn in_file(self, path: &std::path::Path) -> KilnError {
        match self {
            KilnError::Config { key, message, .. } => KilnError::Config {
                file: Some(path.to_path_buf()),
                key,
                message,
            },
            other => other,
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> KilnError {
        KilnError::Io {
            path: path.into(),
            source,
        }
    }

    /// True for errors the user settles before running the command again (CLI exit code 2): a
    /// bad config value or flag, a device this build cannot use, a run directory another
    /// process is writing, checkpoints none of which can resume.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            KilnError::Config { .. }
                | KilnError::KerasFile { .. }
                | KilnError::Device(_)
                | KilnError::RunDirLocked { .. }
                | KilnError::UnusableCheckpoints(_)
                | KilnError::Changed(_)
        )
    }
}

/// Rewrites serde's Rust type names in a parse message into words a config author knows
/// (`expected usize` -> `expected a non-negative integer`); never empty.
pub(crate) fn humanize(message: &str) -> String {
    let mut m = message.trim().replace('\n', " ");
    if m.is_empty() {
        // toml reports some syntax errors (a key with no value at the end of the file) with
        // an empty message.
        m = "the TOML is incomplete or malformed here: a key needs a value (`key = 1`, \
             `key = \"text\"`)"
            .to_string();
    }
    for (rust, words) in [
        ("expected usize", "expected a non-negative integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected i64", "expected an integer"),
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("expected a boolean", "expected true or false"),
        (
            "data did not match any variant of untagged enum SaveFreq",
            "expected \"epoch\" or a number of batches (an integer of at least 1)",
        ),
        (
            "wanted string or table",
            "expected one of the option names as a quoted string (see docs/config.md)",
        ),
    ] {
        m = m.replace(rust, words);
    }
    m
}

/// `text` safe to print on a terminal: control characters (but newline and tab) and Unicode's
/// bidirectional formatting characters (U+061C, U+200E/F, U+202A..U+202E, U+2066..U+2069),
/// which reorder or hide what follows them (CVE-2021-42574, "Trojan Source"), become `\u{..}`
/// escapes. Error messages echo file names, keys and values from user input: they go through
/// this before they are printed.
pub fn escape_for_terminal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_unsafe_on_terminal(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// A control character (but newline and tab) or a bidirectional formatting character.
pub(crate) fn is_unsafe_on_terminal(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_controls_and_bidi_overrides_only() {
        let key = "na\u{202e}me\u{1b}[31m";
        assert_eq!(escape_for_terminal(key), "na\\u{202e}me\\u{1b}[31m");
        assert_eq!(
            escape_for_terminal("a\u{2067}b\u{7f}c\0"),
            "a\\u{2067}b\\u{7f}c\\u{0}"
        );
        let plain = "line 4: épochs = \"ten\"\n\tnext";
        assert_eq!(escape_for_terminal(plain), plain);
    }

    #[test]
    fn no_parse_message_is_empty() {
        assert!(humanize("  \n").contains("needs a value"));
        assert_eq!(
            humanize("expected usize"),
            "expected a non-negative integer"
        );
    }
}
