//! `kiln train` under `mpirun` (strategy `multi_worker_mirrored`): which worker prints what,
//! and how the job ends.
//!
//! Rank 0 (the chief) prints as a one-process run does; the other workers print only their own
//! failures, prefixed `kiln (worker R of N)`. A run that ends the same way on every worker
//! (success, or a stop request that the workers agreed on after the same step) finalizes MPI
//! and exits normally; any other failure calls `MPI_Abort`, so that `mpirun` ends the whole job
//! instead of leaving the other workers waiting in the next all-reduce.

use kiln::KilnError;
use kiln::distribute::world::{self, World};

/// After the command: finalizes MPI when the outcome is one every worker shares. Returns this
/// process's place in the job when MPI was started (`None` otherwise).
pub fn finish(result: &anyhow::Result<()>) -> Option<World> {
    let w = world::current()?;
    if result.as_ref().err().is_none_or(shared) {
        world::finalize();
    }
    Some(w)
}

/// True for the failures every worker reaches at the same point: a stop request, which the
/// workers share through the gradient all-reduce.
pub fn shared(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<KilnError>(),
        Some(KilnError::Interrupted { .. } | KilnError::InterruptedAfterTraining { .. })
    )
}

/// Ends the whole MPI job with `code` when MPI is still running in a job of several processes
/// (a failure of this worker alone); returns otherwise.
pub fn abort_unless_finalized(code: u8) {
    if let Some(w) = world::current()
        && w.size > 1
    {
        world::abort(i32::from(code));
    }
}

/// The message for a stop signal under `mpirun`: the workers stop together after the current
/// step, rank 0 writing the checkpoint, unless a worker died (then `mpirun` ends the job).
pub fn signal_message(w: World, signal: i32, checkpoints: &std::path::Path) -> String {
    format!(
        "kiln (worker {} of {}): signal {signal}: the workers stop together after the current \
         step and rank 0 writes a checkpoint; if a worker failed or died, mpirun ends the job \
         instead (that worker's error, if any, is printed above: fix its cause first). Either \
         way, rerunning the same mpirun command resumes from the last checkpoint in {}",
        w.rank,
        w.size,
        checkpoints.display()
    )
}
