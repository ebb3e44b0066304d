//! The vocabulary shared by the search space, the oracles, the pruners and the study storage.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One hyperparameter's value, as it appears in TOML and in the study database (JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    /// `Boolean` and boolean `Choice`/`Fixed` values.
    Bool(bool),
    /// `Int` and integer `Choice`/`Fixed` values.
    Int(i64),
    /// `Float` and float `Choice`/`Fixed` values.
    Float(f64),
    /// String `Choice`/`Fixed` values.
    Str(String),
}

/// A value as TOML writes it (`"RMSprop"`, `5.0`, `32`, `true`): how messages show it.
impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", crate::config::toml_value(self))
    }
}

/// The active hyperparameters of one trial, by name (inactive conditional ones are absent).
pub type Params = BTreeMap<String, Value>;

/// Whether the objective is minimised or maximised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Lower is better (`val_loss`).
    Min,
    /// Higher is better (`val_accuracy`).
    Max,
}

impl Direction {
    /// Whether `a` is strictly better than `b` in this direction.
    pub fn better(self, a: f64, b: f64) -> bool {
        match self {
            Direction::Min => a < b,
            Direction::Max => a > b,
        }
    }
}

/// The metric a study optimises: a key of the trial's `history.json` (`val_accuracy`, ...).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Objective {
    /// The metric's name as `kiln train` logs it.
    pub name: String,
    /// Its direction.
    pub direction: Direction,
}

/// A trial's state, as in Optuna (Keras Tuner's RUNNING/COMPLETED/STOPPED/FAILED).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrialState {
    /// Claimed by a worker, which sends heartbeats while its child process trains.
    Running,
    /// Trained all its epochs; `value` holds the objective.
    Complete,
    /// Stopped early by the pruner; `value` holds the last reported objective.
    Pruned,
    /// The child failed (crash, out of memory, no heartbeat within the grace period) and its
    /// retries are spent.
    Failed,
}

/// What an oracle decided to train next.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialPlan {
    /// The hyperparameters to set in the trial's run config.
    pub params: Params,
    /// Epochs to train in total (the child's `fit.epochs`).
    pub epochs: u32,
    /// Hyperband: the trial (by `number`) whose checkpoint this one continues from; its
    /// initial epoch is that trial's `epochs` (Keras Tuner's `tuner/trial_id`,
    /// `tuner/initial_epoch`).
    pub resume_from: Option<u64>,
    /// Hyperband: `(bracket, round)` of this trial; `None` for the other algorithms.
    pub bracket: Option<(u32, u32)>,
}

impl TrialPlan {
    /// The epochs to set in the trial's run config (`fit.epochs`), or `None` to keep the run
    /// config's: Hyperband plans carry their round's epochs; the random, grid and bayesian
    /// oracles leave `epochs` at 0.
    pub fn epochs_override(&self) -> Option<u32> {
        (self.epochs > 0).then_some(self.epochs)
    }
}

/// A trial as the study database holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    /// 0-based, in order of creation within the study.
    pub number: u64,
    /// What it trains.
    pub plan: TrialPlan,
    /// Where it is.
    pub state: TrialState,
    /// The objective: final value (complete) or last reported (pruned); `None` otherwise.
    pub value: Option<f64>,
    /// Objective values reported after each epoch so far: `(epoch, value)`, epoch 0-based.
    pub intermediate: Vec<(u32, f64)>,
    /// How many times this trial was started again after a failure (0 on the first run).
    pub retries: u32,
}

/// An oracle's answer to "what next?".
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Train this plan as a new trial.
    Run(TrialPlan),
    /// Nothing can start until running trials finish (a Hyperband round waits for its rung).
    Wait,
    /// The search is over (grid exhausted, Hyperband's brackets done, `max_trials` reached).
    Done,
}
