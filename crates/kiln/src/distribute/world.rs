//! The MPI runtime, process-wide: initialized once, finalized once (OpenMPI through the `mpi`
//! crate, rsmpi). Without the cargo feature `mpi` the world is one process and
//! [`init`] refuses.
//!
//! Only `MPI_COMM_WORLD` is used, with `MPI_SUM` reductions on `f32` buffers, a
//! broadcast from rank 0 and a barrier. MPI's default error handler on it,
//! `MPI_ERRORS_ARE_FATAL`, ends the whole job when a collective fails (e.g. a peer died).

use crate::error::{KilnError, Result};

/// This process's place in the job: `rank` in `0..size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct World {
    /// This process's rank (0 is the chief).
    pub rank: usize,
    /// Number of processes (`mpirun -np N`).
    pub size: usize,
}

/// `(rank, size)` from the launcher's environment (OpenMPI's `OMPI_COMM_WORLD_RANK` /
/// `OMPI_COMM_WORLD_SIZE`, or PMIx's / MPICH's `PMI_RANK` / `PMI_SIZE`), without initializing
/// MPI; `None` outside `mpirun`.
pub fn launched() -> Option<World> {
    let read = |names: [&str; 2]| {
        names
            .iter()
            .find_map(|n| std::env::var(n).ok()?.parse::<usize>().ok())
    };
    let size = read(["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"])?;
    let rank = read(["OMPI_COMM_WORLD_RANK", "PMI_RANK"]).unwrap_or(0);
    Some(World { rank, size })
}

#[cfg(feature = "mpi")]
mod imp {
    use std::sync::Mutex;

    use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
    use mpi::environment::Universe;
    use mpi::topology::{Communicator, SimpleCommunicator};

    use super::World;
    use crate::error::{KilnError, Result};

    /// The initialized runtime; dropping it calls `MPI_Finalize`.
    static UNIVERSE: Mutex<Option<Universe>> = Mutex::new(None);

    pub fn init() -> Result<World> {
        let mut universe = UNIVERSE.lock().unwrap_or_else(|p| p.into_inner());
        if universe.is_none() {
            if mpi::environment::is_finalized() {
                return Err(KilnError::config(
                    "distribute.strategy",
                    "MPI was already finalized in this process; it cannot start twice",
                ));
            }
            // Serialized: the training loop's thread makes every MPI call, but it need not be
            // the main thread.
            let (u, _) =
                mpi::initialize_with_threading(mpi::Threading::Serialized).ok_or_else(|| {
                    KilnError::config(
                        "distribute.strategy",
                        "MPI_Init failed (was MPI initialized by other code in this process?)",
                    )
                })?;
            *universe = Some(u);
        }
        let world = SimpleCommunicator::world();
        Ok(World {
            rank: world.rank() as usize,
            size: world.size() as usize,
        })
    }

    pub fn current() -> Option<World> {
        let universe = UNIVERSE.lock().unwrap_or_else(|p| p.into_inner());
        universe.as_ref()?;
        let world = SimpleCommunicator::world();
        Some(World {
            rank: world.rank() as usize,
            size: world.size() as usize,
        })
    }

    pub fn finalize() {
        let mut universe = UNIVERSE.lock().unwrap_or_else(|p| p.into_inner());
        universe.take();
    }

    /// The receive buffer, kept between calls: a fresh one of gradient size each step costs
    /// its page faults (about 1 ms for 2.7 MB under glibc's allocator, measured with
    /// examples/allreduce.rs).
    static RECEIVE: Mutex<Vec<f32>> = Mutex::new(Vec::new());

    pub fn all_reduce_sum(buf: &mut Vec<f32>) {
        let mut out = RECEIVE.lock().unwrap_or_else(|p| p.into_inner());
        out.clear();
        out.resize(buf.len(), 0.0);
        SimpleCommunicator::world().all_reduce_into(&buf[..], &mut out[..], SystemOperation::sum());
        std::mem::swap(buf, &mut *out);
    }

    pub fn broadcast_from_chief(buf: &mut [f32]) {
        SimpleCommunicator::world()
            .process_at_rank(0)
            .broadcast_into(buf);
    }

    pub fn barrier() {
        SimpleCommunicator::world().barrier();
    }

    pub fn abort(code: i32) -> ! {
        SimpleCommunicator::world().abort(code)
    }
}

#[cfg(not(feature = "mpi"))]
mod imp {
    use super::World;
    use crate::error::{KilnError, Result};

    pub fn init() -> Result<World> {
        Err(KilnError::config(
            "distribute.strategy",
            "\"multi_worker_mirrored\" needs kiln built with MPI (the cargo feature `mpi`, on \
             by default in kiln-cli; scripts/setup.sh installs OpenMPI)",
        ))
    }
    pub fn current() -> Option<World> {
        None
    }
    pub fn finalize() {}
    pub fn all_reduce_sum(_: &mut Vec<f32>) {}
    pub fn broadcast_from_chief(_: &mut [f32]) {}
    pub fn barrier() {}
    pub fn abort(code: i32) -> ! {
        std::process::exit(code)
    }
}

/// Initializes MPI (once per process; later calls return the same world) and returns this
/// process's rank and the job's size. A process started without `mpirun` is a job of one
/// (MPI's singleton start).
///
/// # Errors
/// [`KilnError::Config`] (`distribute.strategy`) when kiln was built without the `mpi`
/// feature, MPI fails to start, or it was already finalized.
pub fn init() -> Result<World> {
    imp::init()
}

/// This process's place in the MPI job when [`init`] started MPI (and it is not finalized).
pub fn current() -> Option<World> {
    imp::current()
}

/// Finalizes MPI if [`init`] started it (`MPI_Finalize`; a process that called `MPI_Init`
/// must call it before exiting normally, or `mpirun` reports the job as failed). No MPI call
/// may follow.
pub fn finalize() {
    imp::finalize()
}

/// Element-wise sum of `buf` over all processes, in place (`MPI_Allreduce`, `MPI_SUM`,
/// `MPI_FLOAT`): every process must call it with a buffer of the same length. Without the
/// `mpi` feature (a job of one) the buffer is left as it is.
pub fn all_reduce_sum(buf: &mut Vec<f32>) {
    imp::all_reduce_sum(buf)
}

/// Rank 0's `buf` copied into every process's (`MPI_Bcast`).
pub(crate) fn broadcast_from_chief(buf: &mut [f32]) {
    imp::broadcast_from_chief(buf)
}

/// Waits until every process reaches it (`MPI_Barrier`).
pub fn barrier() {
    imp::barrier()
}

/// Ends every process of the job with exit status `code` (`MPI_Abort`); for a failure on one
/// worker that the others cannot see (they would wait in the next collective forever).
pub fn abort(code: i32) -> ! {
    imp::abort(code)
}

/// The error for a run launched by `mpirun` with more than one process whose strategy is not
/// `multi_worker_mirrored` (the processes would train independently into the same run
/// directory).
pub fn not_multi_worker(world: World, strategy: &str) -> KilnError {
    KilnError::config(
        "distribute.strategy",
        format!(
            "this process is rank {} of {} started by mpirun, but the strategy is \"{strategy}\": \
             set [distribute] strategy = \"multi_worker_mirrored\" (or pass --strategy \
             multi_worker_mirrored) to train one model across the processes, or run kiln \
             without mpirun",
            world.rank, world.size
        ),
    )
}

/// Where a worker other than the chief writes what the chief writes to the run directory
/// (its run files, checkpoints, callbacks' files), to be removed when it ends:
/// `$TMPDIR/kiln-worker-<pid>` (TensorFlow's non-chief workers likewise write to temporary
/// directories).
pub fn worker_scratch_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("kiln-worker-{}", std::process::id()))
}

/// Removes the scratch directories ([`worker_scratch_dir`]) of workers that no longer run (a
/// worker killed with SIGKILL cannot remove its own); best effort, Linux (`/proc`) only.
pub fn remove_stale_scratch_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    if !std::path::Path::new("/proc/self").exists() {
        return;
    }
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("kiln-worker-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
