//! Training checkpoints for `BackupAndRestore` and NaN rollback: `<run>/checkpoints/ckpt-<N>/`
//! with `model.bpk` (Burn's burnpack record of the network, parameter ids kept), `optimizer.bpk`
//! (the optimizer's state, keyed by those ids) and `manifest.json` ([`Manifest`]).
//!
//! Writing is crash-safe at any instant: the files go into `.tmp-ckpt-<N>-<pid>/`, each is
//! fsynced, the manifest (with every file's size and CRC-32C) is written last, then the
//! directory is renamed to `ckpt-<N>` and its parent fsynced. A kill before the rename leaves
//! only a temporary directory, which is ignored and removed later; the previous checkpoints stay.
//! On load, checkpoints are tried newest first and one whose files do not match their manifest
//! is skipped (with a warning), so a damaged disk block costs one checkpoint, not the run.
//! The newest `keep` checkpoints are kept.

mod manifest;

pub use manifest::{EpochSums, FORMAT, FileEntry, InputPosition, Manifest};

use std::path::{Path, PathBuf};

use crate::error::{KilnError, Result};

/// The checkpoint directory of a run.
#[derive(Debug, Clone)]
pub struct CheckpointDir {
    root: PathBuf,
    keep: usize,
}

/// A checkpoint read back and verified.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// Its directory.
    pub path: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    /// File contents by name (`model.bpk`, `optimizer.bpk`).
    pub files: Vec<(String, Vec<u8>)>,
}

impl Checkpoint {
    /// The content of file `name`.
    ///
    /// # Errors
    /// [`KilnError::Weights`] when the checkpoint has no such file.
    pub fn file(&self, name: &str) -> Result<&[u8]> {
        self.files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.as_slice())
            .ok_or_else(|| KilnError::Weights {
                path: self.path.clone(),
                message: format!("the checkpoint has no {name}"),
            })
    }
}

/// Test hook: `KILN_TEST_CHECKPOINT_STALL=<n>` makes the n-th checkpoint write of this process
/// (1-based) stop halfway (model file written, manifest not), create `<dir>/STALLED` and sleep,
/// so that a test can SIGKILL the process in the middle of a checkpoint write.
fn stall_for_test(tmp: &Path, writes: u64) {
    let Ok(n) = std::env::var("KILN_TEST_CHECKPOINT_STALL") else {
        return;
    };
    if n.trim().parse::<u64>().ok() == Some(writes) {
        let _ = std::fs::write(tmp.join("STALLED"), b"");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| KilnError::io(dir, e))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(|e| KilnError::io(path, e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| KilnError::io(path, e))
}

impl CheckpointDir {
    /// `root` (created on the first save), keeping the newest `keep` checkpoints (at least 1).
    pub fn new(root: impl Into<PathBuf>, keep: usize) -> CheckpointDir {
        CheckpointDir {
            root: root.into(),
            keep: keep.max(1),
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    fn name(iterations: u64) -> String {
        format!("ckpt-{iterations:012}")
    }

    /// Writes a checkpoint named after `manifest.iterations` (an existing one of that name is
    /// replaced), then removes the oldest beyond `keep` and stale temporary directories.
    /// `manifest.files` is filled in here.
    ///
    /// # Errors
    /// [`KilnError::Io`] naming the file; the previous checkpoints are untouched.
    pub fn save(&self, manifest: &Manifest, files: &[(&str, &[u8])]) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.root).map_err(|e| KilnError::io(&self.root, e))?;
        let writes = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let name = Self::name(manifest.iterations);
        let tmp = self
            .root
            .join(format!(".tmp-{name}-{}", std::process::id()));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| KilnError::io(&tmp, e))?;
        }
        std::fs::create_dir(&tmp).map_err(|e| KilnError::io(&tmp, e))?;
        let mut manifest = manifest.clone();
        manifest.files.clear();
        for (i, (file, bytes)) in files.iter().enumerate() {
            write_synced(&tmp.join(file), bytes)?;
            manifest.files.push(FileEntry {
                name: (*file).to_string(),
                bytes: bytes.len() as u64,
                crc32c: crc32c::crc32c(bytes),
            });
            if i == 0 {
                stall_for_test(&tmp, writes);
            }
        }
        let json = serde_json::to_vec_pretty(&manifest).expect("manifest serializes");
        write_synced(&tmp.join("manifest.json"), &json)?;
        sync_dir(&tmp)?;
        let dest = self.root.join(&name);
        if dest.exists() {
            std::fs::remove_dir_all(&dest).map_err(|e| KilnError::io(&dest, e))?;
        }
        std::fs::rename(&tmp, &dest).map_err(|e| KilnError::io(&dest, e))?;
        sync_dir(&self.root)?;
        self.prune()?;
        Ok(dest)
    }

    /// Removes this directory's checkpoints (`ckpt-*`) and temporary ones (`.tmp-ckpt-*`), and
    /// nothing else: `backup_dir` may hold other files.
    ///
    /// # Errors
    /// [`KilnError::Io`] naming the checkpoint that could not be removed.
    pub fn clear(&self) -> Result<()> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(KilnError::io(&self.root, e)),
        };
        for e in entries.filter_map(|e| e.ok()) {
            let p = e.path();
            let ours = p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("ckpt-") || n.starts_with(".tmp-ckpt-"));
            if ours {
                std::fs::remove_dir_all(&p).map_err(|e| KilnError::io(&p, e))?;
            }
        }
        // The directory itself goes only when nothing else is in it.
        let _ = std::fs::remove_dir(&self.root);
        Ok(())
    }

    /// Completed checkpoints, oldest first.
    fn list(&self) -> Result<Vec<PathBuf>> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(KilnError::io(&self.root, e)),
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.is_dir()
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("ckpt-"))
            })
            .collect();
        found.sort();
        Ok(found)
    }

    fn prune(&self) -> Result<()> {
        let found = self.list()?;
        let excess = found.len().saturating_sub(self.keep);
        for old in &found[..excess] {
            std::fs::remove_dir_all(old).map_err(|e| KilnError::io(old, e))?;
        }
        // Temporary directories of this process's earlier writes, or of killed processes.
        if let Ok(entries) = std::fs::read_dir(&self.root) {
            for e in entries.filter_map(|e| e.ok()) {
                let p = e.path();
                let is_tmp = p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(".tmp-ckpt-"));
                if is_tmp {
                    let _ = std::fs::remove_dir_all(&p);
                }
            }
        }
        Ok(())
    }

    /// Reads and verifies one checkpoint directory.
    ///
    /// # Errors
    /// [`KilnError::Weights`] saying which file is missing, truncated or corrupt.
    pub fn read(path: &Path) -> Result<Checkpoint> {
        let bad = |message: String| KilnError::Weights {
            path: path.to_path_buf(),
            message,
        };
        let mpath = path.join("manifest.json");
        let text = std::fs::read(&mpath).map_err(|e| KilnError::io(&mpath, e))?;
        let manifest: Manifest = serde_json::from_slice(&text).map_err(|e| {
            bad(format!(
                "manifest.json is not a kiln checkpoint manifest: {e}"
            ))
        })?;
        if manifest.format != FORMAT {
            return Err(bad(format!(
                "manifest format {} is not {FORMAT}, the one this kiln reads",
                manifest.format
            )));
        }
        let mut files = Vec::new();
        for entry in &manifest.files {
            let p = path.join(&entry.name);
            let bytes = std::fs::read(&p).map_err(|e| KilnError::io(&p, e))?;
            if bytes.len() as u64 != entry.bytes {
                return Err(bad(format!(
                    "{} has {} bytes, the manifest says {} (truncated write?)",
                    entry.name,
                    bytes.len(),
                    entry.bytes
                )));
            }
            let crc = crc32c::crc32c(&bytes);
            if crc != entry.crc32c {
                return Err(bad(format!(
                    "{} has CRC-32C {crc:#010x}, the manifest says {:#010x} (corrupt file)",
                    entry.name, entry.crc32c
                )));
            }
            files.push((entry.name.clone(), bytes));
        }
        Ok(Checkpoint {
            path: path.to_path_buf(),
            manifest,
            files,
        })
    }

    /// The newest checkpoint that verifies, and a warning for each newer one that did not.
    ///
    /// # Errors
    /// [`KilnError::Io`] when the directory cannot be listed.
    pub fn latest(&self) -> Result<(Option<Checkpoint>, Vec<String>)> {
        let mut warnings = Vec::new();
        for path in self.list()?.into_iter().rev() {
            match Self::read(&path) {
                Ok(c) => return Ok((Some(c), warnings)),
                Err(e) => warnings.push(format!("skipping checkpoint {e}")),
            }
        }
        Ok((None, warnings))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(iterations: u64) -> Manifest {
        Manifest {
            format: FORMAT,
            kiln_version: "test".into(),
            epoch: 1,
            step_in_epoch: 3,
            iterations,
            learning_rate: 0.001,
            seed: 7,
            epoch_sums: EpochSums::default(),
            input: InputPosition::default(),
            history: Default::default(),
            callbacks: Default::default(),
            rollbacks: 0,
            config: String::new(),
            data_fingerprints: Default::default(),
            files: Vec::new(),
            loss_scale: Some(crate::precision::LossScale {
                scale: 16384.0,
                finite_steps: iterations,
                growth_steps: 2000,
            }),
        }
    }

    #[test]
    fn save_then_latest_round_trips_and_keeps_the_newest_k() {
        let dir = tempfile::tempdir().unwrap();
        let ckpts = CheckpointDir::new(dir.path().join("checkpoints"), 2);
        for it in [10, 20, 30] {
            let model = vec![it as u8; 100];
            ckpts
                .save(
                    &manifest(it),
                    &[("model.bpk", &model), ("optimizer.bpk", b"opt")],
                )
                .unwrap();
        }
        let names: Vec<_> = ckpts
            .list()
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["ckpt-000000000020", "ckpt-000000000030"]);
        let (c, warnings) = ckpts.latest().unwrap();
        let c = c.unwrap();
        assert!(warnings.is_empty());
        assert_eq!(c.manifest.iterations, 30);
        assert_eq!(c.manifest.loss_scale.unwrap().finite_steps, 30);
        assert_eq!(c.file("model.bpk").unwrap(), &[30u8; 100][..]);
        assert_eq!(c.file("optimizer.bpk").unwrap(), b"opt");
        assert_eq!(c.manifest.files[0].bytes, 100);
    }

    #[test]
    fn a_corrupt_or_torn_newest_checkpoint_falls_back_to_the_previous() {
        let dir = tempfile::tempdir().unwrap();
        let ckpts = CheckpointDir::new(dir.path(), 3);
        ckpts.save(&manifest(1), &[("model.bpk", b"one")]).unwrap();
        let newest = ckpts.save(&manifest(2), &[("model.bpk", b"two")]).unwrap();
        // One flipped byte.
        std::fs::write(newest.join("model.bpk"), b"twx").unwrap();
        let (c, warnings) = ckpts.latest().unwrap();
        assert_eq!(c.unwrap().manifest.iterations, 1);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("CRC-32C"), "{warnings:?}");
        // Truncated.
        std::fs::write(newest.join("model.bpk"), b"tw").unwrap();
        let (_, warnings) = ckpts.latest().unwrap();
        assert!(
            warnings[0].contains("has 2 bytes, the manifest says 3"),
            "{warnings:?}"
        );
        // No manifest (killed before it was written, then renamed by hand).
        std::fs::remove_file(newest.join("manifest.json")).unwrap();
        let (c, warnings) = ckpts.latest().unwrap();
        assert_eq!(c.unwrap().manifest.iterations, 1);
        assert!(warnings[0].contains("manifest.json"), "{warnings:?}");
    }

    #[test]
    fn clear_removes_checkpoints_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let ckpts = CheckpointDir::new(dir.path(), 3);
        ckpts.save(&manifest(1), &[("model.bpk", b"one")]).unwrap();
        std::fs::create_dir_all(dir.path().join(".tmp-ckpt-000000000002-7")).unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
        std::fs::create_dir_all(dir.path().join("other-run")).unwrap();
        ckpts.clear().unwrap();
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["notes.txt", "other-run"]);
    }

    #[test]
    fn temporary_directories_of_killed_writes_are_ignored_and_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let ckpts = CheckpointDir::new(dir.path(), 3);
        let torn = dir.path().join(".tmp-ckpt-000000000005-999");
        std::fs::create_dir_all(&torn).unwrap();
        std::fs::write(torn.join("model.bpk"), b"half").unwrap();
        assert!(ckpts.latest().unwrap().0.is_none());
        ckpts.save(&manifest(6), &[("model.bpk", b"six")]).unwrap();
        assert!(!torn.exists());
        assert_eq!(ckpts.latest().unwrap().0.unwrap().manifest.iterations, 6);
    }
}
