//! Pruners: stop unpromising trials early from their per-epoch objective values.

use crate::trial::{Direction, TrialRecord};

/// Decides whether a running trial should stop after its latest reported epoch.
pub trait Pruner: Send + Sync {
    /// Whether `trial` (running, its `intermediate` values reported so far) should stop now,
    /// given every trial of the study (`history`, which includes `trial` itself).
    fn should_prune(
        &self,
        trial: &TrialRecord,
        history: &[TrialRecord],
        direction: Direction,
    ) -> bool;
}
