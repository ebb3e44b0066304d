//! OS file locks in a study directory (`flock`, through std's `File::lock`). The kernel
//! releases them when their process dies, however it dies, so a killed worker never leaves a
//! stale lock behind.
//!
//! - `study.lock`: held exclusively for the short moments a worker checks or writes the study
//!   directory's own files (the trial directories' stamps, `best.toml`): workers of one study
//!   share the directory, but never see each other's files half written.
//! - `workers/<worker>.lock`: held by each worker for its whole life, holding its study's
//!   identity. A worker on the same machine whose lock can be taken is gone: its running trial
//!   was interrupted (it runs again), it did not fail.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::TuneError;

/// The study directory's lock file.
pub const STUDY_LOCK: &str = "study.lock";

/// The directory of the workers' lock files.
pub const WORKERS: &str = "workers";

/// `study.lock` held until dropped.
pub(crate) struct StudyDirLock {
    _file: File,
}

/// Waits for and takes `study_dir`'s lock (creating the directory).
///
/// # Errors
/// [`TuneError::Io`] naming the lock file.
pub(crate) fn lock_study_dir(study_dir: &Path) -> Result<StudyDirLock, TuneError> {
    std::fs::create_dir_all(study_dir).map_err(|e| TuneError::io("create", study_dir, e))?;
    let path = study_dir.join(STUDY_LOCK);
    let file = open(&path)?;
    file.lock().map_err(|e| TuneError::io("lock", &path, e))?;
    Ok(StudyDirLock { _file: file })
}

fn open(path: &Path) -> Result<File, TuneError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| TuneError::io("open", path, e))
}

/// A worker's lock file, held (and naming its study) until dropped; then removed.
pub(crate) struct WorkerLock {
    file: File,
    path: PathBuf,
}

impl WorkerLock {
    /// Creates and locks `<study_dir>/workers/<worker>.lock` with `identity` in it.
    ///
    /// # Errors
    /// [`TuneError::Io`] naming the file, or [`TuneError::Study`] when another process holds
    /// it (a worker id is unique on its machine while its process lives).
    pub(crate) fn register(
        study_dir: &Path,
        worker: &str,
        identity: &str,
    ) -> Result<WorkerLock, TuneError> {
        let dir = study_dir.join(WORKERS);
        std::fs::create_dir_all(&dir).map_err(|e| TuneError::io("create", &dir, e))?;
        let path = worker_file(&dir, worker);
        let mut file = open(&path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(TuneError::Study(format!(
                    "the worker lock {} is held by another process",
                    path.display()
                )));
            }
            Err(TryLockError::Error(e)) => return Err(TuneError::io("lock", &path, e)),
        }
        file.set_len(0)
            .and_then(|()| file.write_all(identity.as_bytes()))
            .map_err(|e| TuneError::io("write", &path, e))?;
        Ok(WorkerLock { file, path })
    }
}

impl Drop for WorkerLock {
    fn drop(&mut self) {
        // Removed while still locked: whoever opened it before sees a lock that is free once
        // this worker has ended, with no trial running.
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

fn worker_file(dir: &Path, worker: &str) -> PathBuf {
    dir.join(format!("{worker}.lock"))
}

/// What a worker's lock file says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Its lock is held: the process lives.
    Alive,
    /// Its lock file exists and nobody holds it: the process has ended.
    Gone,
    /// No lock file (a worker of another study directory, or of an older kiln).
    Unknown,
}

/// Whether `worker` of `workers_dir` (a study directory's [`WORKERS`]) is alive.
pub(crate) fn liveness(workers_dir: &Path, worker: &str) -> Liveness {
    let Ok(file) = File::open(worker_file(workers_dir, worker)) else {
        return Liveness::Unknown;
    };
    match file.try_lock_shared() {
        Ok(()) => Liveness::Gone, // released when `file` is dropped
        Err(TryLockError::WouldBlock) => Liveness::Alive,
        Err(TryLockError::Error(_)) => Liveness::Unknown,
    }
}

/// The live workers of `study_dir` (their lock is held), as `(worker, study identity)`.
pub(crate) fn live_workers(study_dir: &Path) -> Vec<(String, String)> {
    let dir = study_dir.join(WORKERS);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut live: Vec<(String, String)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let worker = name.strip_suffix(".lock")?.to_string();
            let mut file = File::open(e.path()).ok()?;
            match file.try_lock_shared() {
                Err(TryLockError::WouldBlock) => {
                    let mut identity = String::new();
                    file.read_to_string(&mut identity).ok()?;
                    Some((worker, identity))
                }
                _ => None,
            }
        })
        .collect();
    live.sort();
    live
}

/// Removes the lock files of `study_dir`'s workers that have ended (killed ones leave theirs).
pub(crate) fn remove_stale(study_dir: &Path) {
    let dir = study_dir.join(WORKERS);
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        if let Ok(file) = File::open(entry.path())
            && file.try_lock().is_ok()
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_worker_is_alive_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let workers = dir.path().join(WORKERS);
        assert_eq!(liveness(&workers, "h:1"), Liveness::Unknown);
        let w = WorkerLock::register(dir.path(), "h:1", "s#1@2").unwrap();
        assert_eq!(liveness(&workers, "h:1"), Liveness::Alive);
        assert_eq!(
            live_workers(dir.path()),
            vec![("h:1".to_string(), "s#1@2".to_string())]
        );
        // A second registration of the same id is refused while the first holds it.
        assert!(WorkerLock::register(dir.path(), "h:1", "s#1@2").is_err());
        drop(w);
        assert_eq!(liveness(&workers, "h:1"), Liveness::Unknown);
        assert!(live_workers(dir.path()).is_empty());
        // A lock file nobody holds (its process was killed): gone, then swept.
        std::fs::write(workers.join("h:2.lock"), "s#1@2").unwrap();
        assert_eq!(liveness(&workers, "h:2"), Liveness::Gone);
        assert!(live_workers(dir.path()).is_empty());
        remove_stale(dir.path());
        assert_eq!(liveness(&workers, "h:2"), Liveness::Unknown);
    }

    #[test]
    fn the_study_lock_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock_study_dir(dir.path()).unwrap();
        let f = File::open(dir.path().join(STUDY_LOCK)).unwrap();
        assert!(matches!(f.try_lock(), Err(TryLockError::WouldBlock)));
        drop(held);
        assert!(f.try_lock().is_ok());
    }
}
