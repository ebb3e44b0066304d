//! kiln-tune: hyperparameter search over kiln run configs.
//!
//! The workflow is Keras Tuner's, the robustness Optuna's:
//! - [`space`]: the search space in TOML with Keras Tuner's vocabulary (`Int`, `Float`,
//!   `Choice`, `Boolean`, `Fixed`, conditional `parent_name`/`parent_values`).
//! - [`oracle`]: the algorithms that choose the next trial (`random`, `grid`, `hyperband`,
//!   `bayesian` = TPE); each is a pure function of the study seed and the trials so far, so
//!   that a resumed study or a second worker makes the same choice.
//! - [`pruner`]: stop unpromising trials from their per-epoch metrics (median, successive
//!   halving).
//! - [`storage`]: the study database (SQLite by default, PostgreSQL for many workers): trials
//!   claimed in transactions, heartbeats, stale trials failed and retried.
//! - [`runner`]: each trial is a `kiln train` child process in its own run directory.
//! - [`study`]: the loop that ties them together, resumable at any instant.
//!
//! The shared vocabulary (values, plans, trial records) lives in [`trial`].
#![warn(missing_docs)]

pub mod error;
pub mod oracle;
pub mod pruner;
mod settings;
pub mod space;
pub mod trial;

pub use error::TuneError;
pub use trial::{
    Decision, Direction, Objective, Params, TrialPlan, TrialRecord, TrialState, Value,
};
