//! Random search (Keras Tuner's `RandomSearchOracle`).

use super::{Oracle, random_unique, trial_rng, wait_or_done};
use crate::space::SearchSpace;
use crate::trial::{Decision, TrialPlan, TrialRecord};

/// Draws every active hyperparameter independently (Keras Tuner's `random_sample`: log
/// sampling is log-uniform, steps are equal buckets), retrying up to
/// [`super::MAX_COLLISIONS`] times on a point some trial already has.
///
/// Decision for `history`: `Run` a new point from stream `history.len()` of `seed`; when
/// every retry collides, `Wait` while trials run, else `Done` (the space is exhausted).
/// `epochs` is 0: the run config's `fit.epochs` (see [`TrialPlan::epochs_override`]).
#[derive(Clone, Debug)]
pub struct RandomOracle {
    space: SearchSpace,
    seed: u64,
}

impl RandomOracle {
    /// A random oracle over `space` with the study's `seed`.
    pub fn new(space: SearchSpace, seed: u64) -> RandomOracle {
        RandomOracle { space, seed }
    }
}

impl Oracle for RandomOracle {
    fn next(&self, history: &[TrialRecord]) -> Decision {
        let mut rng = trial_rng(self.seed, history.len());
        match random_unique(&self.space, history, &mut rng) {
            Some(params) => Decision::Run(TrialPlan {
                params,
                epochs: 0,
                resume_from: None,
                bracket: None,
            }),
            None => wait_or_done(history),
        }
    }
}
