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
//!   claimed in transactions, heartbeats, the trials of workers that are gone run again.
//! - [`runner`]: each trial is a `kiln train` child process in its own run directory.
//! - [`study`]: the loop that ties them together, resumable at any instant.
//!
//! - [`config`]: the tune file (`base`, `[tuner]`, `[overrides]`, `[[hyperparameters]]`) and
//!   the trial configs made from it ([`keypath`] sets the dotted keys).
//! - [`report`]: the live table, `--summary` and `best.toml`.
//!
//! The shared vocabulary (values, plans, trial records) lives in [`trial`].
#![warn(missing_docs)]

pub mod config;
pub mod error;
pub mod keypath;
mod lock;
pub mod objective;
pub mod oracle;
pub mod pruner;
pub mod report;
pub mod runner;
mod search;
mod settings;
pub mod space;
pub mod storage;
pub mod study;
pub mod trial;

pub use config::TuneConfig;
pub use error::TuneError;
pub use study::{StudyOptions, StudyReport};
pub use trial::{
    Decision, Direction, Objective, Params, TrialPlan, TrialRecord, TrialState, Value,
};
