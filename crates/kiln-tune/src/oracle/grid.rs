//! Grid search (Keras Tuner's `GridSearchOracle`).

use std::collections::HashSet;

use super::Oracle;
use crate::error::TuneError;
use crate::space::SearchSpace;
use crate::trial::{Decision, Params, TrialPlan, TrialRecord};

/// Visits every point of a discrete space once, in Keras Tuner's order (first
/// hyperparameter slowest, defaults first; see [`SearchSpace::grid`]).
///
/// Decision for `history`: `Run` the first grid point that no trial of `history` has, in any
/// state (a failed point is not revisited: its retries belong to the study); `Done` when
/// every point has a trial. Unlike Keras Tuner, which walks from the last finished trial,
/// the next point depends only on the set of points taken, so concurrent workers never
/// collide and a resumed study continues where it stopped. `epochs` is 0 (the run
/// config's `fit.epochs`).
#[derive(Clone, Debug)]
pub struct GridOracle {
    points: Vec<Params>,
    keys: Vec<String>,
}

/// A point's identity for set lookups (its JSON, keys sorted by the map).
fn key(params: &Params) -> String {
    serde_json::to_string(params).unwrap_or_default()
}

impl GridOracle {
    /// A grid oracle over `space`.
    ///
    /// # Errors
    /// [`TuneError::Config`] when `space` has a continuous hyperparameter or too many points.
    pub fn new(space: SearchSpace) -> Result<GridOracle, TuneError> {
        let points = space.grid()?;
        let keys = points.iter().map(key).collect();
        Ok(GridOracle { points, keys })
    }

    /// The grid, in visiting order.
    pub fn points(&self) -> &[Params] {
        &self.points
    }
}

impl Oracle for GridOracle {
    fn next(&self, history: &[TrialRecord]) -> Decision {
        let taken: HashSet<String> = history.iter().map(|t| key(&t.plan.params)).collect();
        match self.keys.iter().position(|k| !taken.contains(k)) {
            Some(i) => Decision::Run(TrialPlan {
                params: self.points[i].clone(),
                epochs: 0,
                resume_from: None,
                bracket: None,
            }),
            None => Decision::Done,
        }
    }
}
