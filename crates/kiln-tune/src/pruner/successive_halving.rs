//! Optuna's `SuccessiveHalvingPruner` (asynchronous successive halving,
//! `optuna/pruners/_successive_halving.py`).

use super::{Pruner, last};
use crate::trial::{Direction, TrialRecord, TrialState};

/// Asynchronous successive halving: rung `k` is reached at step
/// `min_resource · reduction_factor^(min_early_stopping_rate + k)`; a trial reaching a rung
/// continues only if its value there is among the top `1/reduction_factor` of all values
/// recorded at that rung (its own included).
///
/// Optuna records each trial's value at a rung in the trial's system attributes; here a
/// trial's rung-`k` value is rebuilt from `intermediate`: the value at its first reported step
/// `>= ` the rung's step (where Optuna's `prune` records it), so the decision is a pure
/// function of the history. `min_resource = None` is Optuna's `"auto"`:
/// `max(last step of the longest complete trial / 100, 1)`, recomputed from the history (no
/// pruning before a trial completes); as in Optuna, where trials record rung values only once
/// `min_resource` is known, only trials numbered after the first complete trial count at the
/// rungs then.
#[derive(Clone, Debug, PartialEq)]
pub struct SuccessiveHalvingPruner {
    /// Steps (epochs) before the first rung; `None` = `"auto"` (Optuna's default).
    pub min_resource: Option<u32>,
    /// η: rungs are η times apart and keep the top 1/η (Optuna: 4).
    pub reduction_factor: u32,
    /// s: the first rung is at `min_resource · η^s` (Optuna: 0).
    pub min_early_stopping_rate: u32,
    /// Prune at a rung until more than this many trials recorded it (Optuna: 0).
    pub bootstrap_count: usize,
}

impl Default for SuccessiveHalvingPruner {
    fn default() -> SuccessiveHalvingPruner {
        SuccessiveHalvingPruner {
            min_resource: None,
            reduction_factor: 4,
            min_early_stopping_rate: 0,
            bootstrap_count: 0,
        }
    }
}

impl SuccessiveHalvingPruner {
    fn rung_step(&self, min_resource: u32, rung: u32) -> u64 {
        min_resource as u64
            * (self.reduction_factor as u64).saturating_pow(self.min_early_stopping_rate + rung)
    }
}

/// The value at the first reported step `>= step`, and that step.
fn first_at_or_after(trial: &TrialRecord, step: u64) -> Option<(u32, f64)> {
    trial
        .intermediate
        .iter()
        .filter(|(e, _)| *e as u64 >= step)
        .min_by_key(|(e, _)| *e)
        .copied()
}

/// Optuna's `_is_trial_promotable_to_next_rung`.
fn promotable(value: f64, mut competing: Vec<f64>, eta: u32, direction: Direction) -> bool {
    let mut idx = (competing.len() / eta as usize) as i64 - 1;
    if idx == -1 {
        idx = 0;
    }
    competing.sort_by(f64::total_cmp);
    let idx = idx as usize;
    match direction {
        Direction::Max => value >= competing[competing.len() - 1 - idx],
        Direction::Min => value <= competing[idx],
    }
}

impl Pruner for SuccessiveHalvingPruner {
    fn should_prune(
        &self,
        trial: &TrialRecord,
        history: &[TrialRecord],
        direction: Direction,
    ) -> bool {
        let Some((step, value)) = last(trial) else {
            return false;
        };
        // With "auto", Optuna records nothing until a trial is complete: count rung values
        // only from trials created after the first complete one.
        let first_complete = history
            .iter()
            .filter(|t| t.state == TrialState::Complete)
            .map(|t| t.number)
            .min();
        let min_resource = match self.min_resource {
            Some(m) => m,
            None => {
                let Some(longest) = history
                    .iter()
                    .filter(|t| t.state == TrialState::Complete)
                    .filter_map(|t| last(t).map(|(e, _)| e))
                    .max()
                else {
                    return false;
                };
                (longest / 100).max(1)
            }
        };
        let previous = trial
            .intermediate
            .iter()
            .map(|(e, _)| *e)
            .filter(|e| *e < step)
            .max();
        let mut rung = 0;
        loop {
            let rung_step = self.rung_step(min_resource, rung);
            if (step as u64) < rung_step {
                return false;
            }
            // Rungs passed at an earlier report were decided then.
            if previous.is_some_and(|p| p as u64 >= rung_step) {
                rung += 1;
                continue;
            }
            if value.is_nan() {
                return true;
            }
            let mut competing: Vec<f64> = history
                .iter()
                .filter(|t| t.number != trial.number)
                .filter(|t| {
                    self.min_resource.is_some() || first_complete.is_some_and(|c| c < t.number)
                })
                .filter_map(|t| first_at_or_after(t, rung_step).map(|(_, v)| v))
                .filter(|v| !v.is_nan())
                .collect();
            competing.push(value);
            if competing.len() <= self.bootstrap_count {
                return true;
            }
            if !promotable(value, competing, self.reduction_factor, direction) {
                return true;
            }
            rung += 1;
        }
    }
}
