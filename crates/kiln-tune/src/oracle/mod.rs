//! The search algorithms ("oracles", as Keras Tuner calls them).
//!
//! `[tuner]` keys read here ([`ORACLE_KEYS`]):
//!
//! | key | algorithms | default | meaning |
//! |---|---|---|---|
//! | `algorithm` | all | `"random"` | `random`, `grid`, `hyperband`, `bayesian` (TPE) |
//! | `seed` | all | `0` | the study's seed; trial `n` draws from ChaCha8 stream `n` of it |
//! | `max_epochs` | hyperband | `100` | epochs of the longest trial (Keras Tuner) |
//! | `factor` | hyperband | `3` | reduction factor `>= 2` (Keras Tuner) |
//! | `hyperband_iterations` | hyperband | `1` | full Hyperband passes (Keras Tuner) |
//! | `n_startup_trials` | bayesian | `10` | random trials before TPE (Optuna) |
//! | `n_ei_candidates` | bayesian | `24` | candidates scored per parameter (Optuna) |
//! | `constant_liar` | bayesian | `false` | count running trials as bad (Optuna) |

mod grid;
mod hyperband;
mod random;
mod tpe;

pub use grid::GridOracle;
pub use hyperband::HyperbandOracle;
pub use random::RandomOracle;
pub use tpe::TpeOracle;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::error::TuneError;
use crate::settings::{get_bool, get_int, reject_foreign};
use crate::space::SearchSpace;
use crate::trial::{Decision, Objective, Params, TrialRecord, TrialState};

/// Chooses the next trial of a study.
///
/// `next` must be a pure function of the oracle's settings (seed included) and `history`:
/// the same history gives the same decision, so that a resumed study or a second worker
/// (both read the history from the study database inside the claiming transaction) agree.
pub trait Oracle: Send + Sync {
    /// The next plan, given every trial of the study so far (all states, by `number`).
    fn next(&self, history: &[TrialRecord]) -> Decision;
}

/// The `[tuner]` keys that [`build`] reads (the study rejects keys outside the union of
/// these, [`crate::pruner::PRUNER_KEYS`] and its own).
pub const ORACLE_KEYS: &[&str] = &[
    "algorithm",
    "seed",
    "max_epochs",
    "factor",
    "hyperband_iterations",
    "n_startup_trials",
    "n_ei_candidates",
    "constant_liar",
];

/// Keras Tuner's `Oracle._max_collisions`: draws allowed to repeat an existing point before
/// the random and Hyperband oracles give up (then `Wait` while trials run, else `Done`).
pub const MAX_COLLISIONS: usize = 20;

/// Builds the oracle that `[tuner].algorithm` names, with its settings from `tuner`.
///
/// # Errors
/// [`TuneError::Config`] naming the `tuner.<key>`: unknown algorithm, a value out of range,
/// a key of another algorithm, or `grid` over a continuous space.
pub fn build(
    tuner: &toml::Table,
    space: &SearchSpace,
    objective: &Objective,
) -> Result<Box<dyn Oracle>, TuneError> {
    let algorithm = match tuner.get("algorithm") {
        None => "random".to_string(),
        Some(toml::Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(TuneError::Config(format!(
                "tuner.algorithm: expected a string, found {other}"
            )));
        }
    };
    reject_foreign(
        tuner,
        "tuner",
        &algorithm,
        &[
            ("max_epochs", "hyperband"),
            ("factor", "hyperband"),
            ("hyperband_iterations", "hyperband"),
            ("n_startup_trials", "bayesian"),
            ("n_ei_candidates", "bayesian"),
            ("constant_liar", "bayesian"),
        ],
    )?;
    let seed = get_int(tuner, "tuner", "seed", 0, 0)? as u64;
    let space = space.clone();
    Ok(match algorithm.as_str() {
        "random" => Box::new(RandomOracle::new(space, seed)),
        "grid" => Box::new(GridOracle::new(space)?),
        "hyperband" => Box::new(HyperbandOracle::new(
            space,
            objective.direction,
            seed,
            get_int(tuner, "tuner", "max_epochs", 100, 1)? as u32,
            get_int(tuner, "tuner", "factor", 3, 2)? as u32,
            get_int(tuner, "tuner", "hyperband_iterations", 1, 1)? as u32,
        )),
        "bayesian" => Box::new(TpeOracle::new(
            space,
            objective.direction,
            seed,
            tpe::TpeSettings {
                n_startup_trials: get_int(tuner, "tuner", "n_startup_trials", 10, 0)? as usize,
                n_ei_candidates: get_int(tuner, "tuner", "n_ei_candidates", 24, 1)? as usize,
                constant_liar: get_bool(tuner, "tuner", "constant_liar", false)?,
            },
        )),
        other => {
            return Err(TuneError::Config(format!(
                "tuner.algorithm: unknown algorithm \"{other}\"; one of \"random\", \"grid\", \"hyperband\", \"bayesian\""
            )));
        }
    })
}

/// The random stream of the trial created after `history_len` trials: ChaCha8 seeded with
/// `seed`, stream `history_len`, so every trial number has its own reproducible stream.
pub(crate) fn trial_rng(seed: u64, history_len: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(history_len as u64);
    rng
}

/// Whether any trial of `history` is still running.
pub(crate) fn any_running(history: &[TrialRecord]) -> bool {
    history.iter().any(|t| t.state == TrialState::Running)
}

/// Keras Tuner's `_random_values` with its collision rule: draw until the point differs from
/// every trial of `history` (any state), at most [`MAX_COLLISIONS`] repeats; `None` when the
/// space looks exhausted.
pub(crate) fn random_unique<R: rand::Rng>(
    space: &SearchSpace,
    history: &[TrialRecord],
    rng: &mut R,
) -> Option<Params> {
    for _ in 0..=MAX_COLLISIONS {
        let params = space.sample(rng);
        if !history.iter().any(|t| t.plan.params == params) {
            return Some(params);
        }
    }
    None
}

/// `Wait` while trials run (they may free or reveal something), else `Done`.
pub(crate) fn wait_or_done(history: &[TrialRecord]) -> Decision {
    if any_running(history) {
        Decision::Wait
    } else {
        Decision::Done
    }
}

#[cfg(test)]
mod tests;
