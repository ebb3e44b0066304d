//! The search algorithms ("oracles", as Keras Tuner calls them).

use crate::trial::{Decision, TrialRecord};

/// Chooses the next trial of a study.
///
/// `next` must be a pure function of the oracle's settings (seed included) and `history`:
/// the same history gives the same decision, so that a resumed study or a second worker
/// (both read the history from the study database inside the claiming transaction) agree.
pub trait Oracle: Send + Sync {
    /// The next plan, given every trial of the study so far (all states, by `number`).
    fn next(&self, history: &[TrialRecord]) -> Decision;
}
