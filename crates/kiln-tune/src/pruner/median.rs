//! Optuna's `MedianPruner` (= `PercentilePruner(50)`, `optuna/pruners/_percentile.py`).

use super::{Pruner, at, last};
use crate::trial::{Direction, TrialRecord, TrialState};

/// Prunes a trial whose best value so far is worse than the median of the complete trials'
/// values at the same step.
///
/// At the trial's last step `s`, nothing is pruned while fewer than `n_startup_trials` trials
/// are complete, while `s < n_warmup_steps`, or when `s` is not the first reported step of its
/// interval (`interval_steps`, counted from `n_warmup_steps`). Otherwise: the best
/// intermediate value of the trial (max or min by direction; all NaN prunes) against the
/// median (linear interpolation, NaN ignored) of the complete trials' values at step `s`,
/// given at least `n_min_trials` of them reported that step; strictly worse prunes.
#[derive(Clone, Debug, PartialEq)]
pub struct MedianPruner {
    /// Complete trials needed before pruning (Optuna: 5).
    pub n_startup_trials: usize,
    /// Steps (epochs) of every trial never pruned (Optuna: 0).
    pub n_warmup_steps: u32,
    /// Prune only at the first report of each interval of this many steps (Optuna: 1).
    pub interval_steps: u32,
    /// Complete trials that must have reported the step (Optuna: 1).
    pub n_min_trials: usize,
}

impl Default for MedianPruner {
    fn default() -> MedianPruner {
        MedianPruner {
            n_startup_trials: 5,
            n_warmup_steps: 0,
            interval_steps: 1,
            n_min_trials: 1,
        }
    }
}

/// numpy's `nanpercentile(values, q)` with linear interpolation; NaN when no finite value.
pub(crate) fn nan_percentile(values: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = q / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
}

impl Pruner for MedianPruner {
    fn should_prune(
        &self,
        trial: &TrialRecord,
        history: &[TrialRecord],
        direction: Direction,
    ) -> bool {
        let complete: Vec<&TrialRecord> = history
            .iter()
            .filter(|t| t.state == TrialState::Complete && t.number != trial.number)
            .collect();
        if complete.is_empty() || complete.len() < self.n_startup_trials {
            return false;
        }
        let Some((step, _)) = last(trial) else {
            return false;
        };
        if step < self.n_warmup_steps {
            return false;
        }
        // Optuna's _is_first_in_interval_step.
        let nearest_lower = (step - self.n_warmup_steps) / self.interval_steps
            * self.interval_steps
            + self.n_warmup_steps;
        let second_last = trial
            .intermediate
            .iter()
            .map(|(e, _)| *e as i64)
            .filter(|e| *e != step as i64)
            .max()
            .unwrap_or(-1);
        if second_last >= nearest_lower as i64 {
            return false;
        }
        let values = trial
            .intermediate
            .iter()
            .map(|(_, v)| *v)
            .filter(|v| !v.is_nan());
        let best = match direction {
            Direction::Max => values.fold(f64::NAN, f64::max),
            Direction::Min => values.fold(f64::NAN, f64::min),
        };
        if best.is_nan() {
            return true;
        }
        let at_step: Vec<f64> = complete.iter().filter_map(|t| at(t, step)).collect();
        if at_step.len() < self.n_min_trials {
            return false;
        }
        // PercentilePruner(50): the 50th percentile either way.
        let median = nan_percentile(&at_step, 50.0);
        if median.is_nan() {
            return false;
        }
        match direction {
            Direction::Max => best < median,
            Direction::Min => best > median,
        }
    }
}
