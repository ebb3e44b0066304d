//! Training checkpoints for `BackupAndRestore` and NaN rollback: `<run>/checkpoints/ckpt-<N>/`
//! with `model.bpk` (Burn's burnpack record of the network, parameter ids kept), `optimizer.bpk`
//! (the optimizer's state, keyed by those ids) and `manifest.json` ([`Manifest`]).
//!
//! Writing is crash-safe at any instant: the files go into `.tmp-ckpt-<N>-<pid>/`, each is
//! fsynced, the manifest (with every file's size and CRC-32C) is written last, then the
//! directory is renamed to `ckpt-<N>` and its parent fsynced. A kill before the rename leaves
//! only a temporary directory, which is ignored and removed later; the previous checkpoints stay.
//! On load, checkpoints are tried newest first and one whose files do not match their manifest
//! (or that lacks the network or the optimizer state) is skipped with a warning, so a damaged
//! disk block costs one checkpoint, not the run. When checkpoints exist and none is usable, a
//! resume is refused ([`CheckpointDir::resume_point`]) rather than silently started over.
//! The newest `keep` checkpoints are kept.

mod manifest;

pub use manifest::{EpochSums, FORMAT, FileEntry, InputPosition, Manifest};

use std::path::{Path, PathBuf};

use crate::error::{KilnError, Result};

/// The network's file in a checkpoint (Burn's burnpack record, parameter ids kept).
pub const MODEL_FILE: &str = "model.bpk";
/// The optimizer state's file in a checkpoint (keyed by the network's parameter ids).
pub const OPTIMIZER_FILE: &str = "optimizer.bpk";
/// The files a checkpoint needs to resume training, with what they hold.
const REQUIRED_FILES: [(&str, &str); 2] = [
    (MODEL_FILE, "the network's weights"),
    (OPTIMIZER_FILE, "the optimizer state"),
];

/// A checkpoint that cannot resume training, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    /// The checkpoint's directory.
    pub path: PathBuf,
    /// What is missing, truncated or corrupt.
    pub reason: String,
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

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

    /// Reads and verifies one checkpoint directory: a manifest of this format listing the
    /// network and the optimizer state, every listed file present with its size and CRC-32C.
    ///
    /// # Errors
    /// [`KilnError::Weights`] saying which file is missing, truncated or corrupt;
    /// [`KilnError::Io`] when a file exists but cannot be read.
    pub fn read(path: &Path) -> Result<Checkpoint> {
        let bad = |message: String| KilnError::Weights {
            path: path.to_path_buf(),
            message,
        };
        let read_file = |name: &str, what: &str| {
            let p = path.join(name);
            std::fs::read(&p).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => bad(format!("{name} ({what}) is missing")),
                _ => KilnError::io(&p, e),
            })
        };
        let text = read_file("manifest.json", "what the checkpoint holds")?;
        let manifest: Manifest = serde_json::from_slice(&text).map_err(|e| {
            bad(format!(
                "manifest.json is not a kiln checkpoint manifest (torn or overwritten?): {e}"
            ))
        })?;
        if manifest.format != FORMAT {
            return Err(bad(format!(
                "manifest format {} is not {FORMAT}, the one this kiln reads",
                manifest.format
            )));
        }
        for (name, what) in REQUIRED_FILES {
            if !manifest.files.iter().any(|f| f.name == name) {
                return Err(bad(format!(
                    "the manifest lists no {name} ({what}), which a resume needs"
                )));
            }
        }
        let mut files = Vec::new();
        for entry in &manifest.files {
            let what = REQUIRED_FILES
                .iter()
                .find(|(n, _)| *n == entry.name)
                .map_or("listed in the manifest", |(_, w)| *w);
            let bytes = read_file(&entry.name, what)?;
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

    /// The newest checkpoint that verifies, and the newer ones that did not (newest first).
    ///
    /// # Errors
    /// [`KilnError::Io`] when the directory cannot be listed.
    pub fn latest(&self) -> Result<(Option<Checkpoint>, Vec<Unusable>)> {
        let mut skipped = Vec::new();
        for path in self.list()?.into_iter().rev() {
            match Self::read(&path) {
                Ok(c) => return Ok((Some(c), skipped)),
                Err(e) => skipped.push(Unusable {
                    reason: match e {
                        KilnError::Weights { message, .. } => message,
                        other => other.to_string(),
                    },
                    path,
                }),
            }
        }
        Ok((None, skipped))
    }

    /// The checkpoint a resume starts from: [`Self::latest`], or `None` when there are no
    /// checkpoints (a fresh run).
    ///
    /// # Errors
    /// [`KilnError::UnusableCheckpoints`] when there are checkpoints and none verifies, listing
    /// each with its reason (starting over would silently discard them); [`KilnError::Io`] when
    /// the directory cannot be listed.
    pub fn resume_point(&self) -> Result<(Option<Checkpoint>, Vec<Unusable>)> {
        let (latest, skipped) = self.latest()?;
        if latest.is_none() && !skipped.is_empty() {
            let lines: Vec<String> = skipped
                .iter()
                .rev()
                .map(|u| {
                    let name = u.path.file_name().unwrap_or(u.path.as_os_str());
                    format!("  {}: {}", name.to_string_lossy(), u.reason)
                })
                .collect();
            let n = skipped.len();
            return Err(KilnError::UnusableCheckpoints(format!(
                "cannot resume: {} holds {n} checkpoint{} and none can resume training:\n{}\n\
                 Training is not started over silently. To start over, run again with \
                 --no-resume (it removes these checkpoints); to resume, put the damaged files \
                 back (e.g. from a backup) and run the same command again.",
                self.root.display(),
                if n == 1 { "" } else { "s" },
                lines.join("\n")
            )));
        }
        Ok((latest, skipped))
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
            stopped: false,
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

    /// Saves a checkpoint at `iterations` whose network file holds `model`.
    fn save(ckpts: &CheckpointDir, iterations: u64, model: &[u8]) -> PathBuf {
        ckpts
            .save(
                &manifest(iterations),
                &[(MODEL_FILE, model), (OPTIMIZER_FILE, b"opt")],
            )
            .unwrap()
    }

    fn reasons(skipped: &[Unusable]) -> Vec<&str> {
        skipped.iter().map(|u| u.reason.as_str()).collect()
    }

    #[test]
    fn a_corrupt_or_torn_newest_checkpoint_falls_back_to_the_previous() {
        let dir = tempfile::tempdir().unwrap();
        let ckpts = CheckpointDir::new(dir.path(), 3);
        save(&ckpts, 1, b"one");
        let newest = save(&ckpts, 2, b"two");
        // One flipped byte.
        std::fs::write(newest.join(MODEL_FILE), b"twx").unwrap();
        let (c, skipped) = ckpts.resume_point().unwrap();
        assert_eq!(c.unwrap().manifest.iterations, 1);
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].path, newest);
        assert!(skipped[0].reason.contains("CRC-32C"), "{skipped:?}");
        // Truncated.
        std::fs::write(newest.join(MODEL_FILE), b"tw").unwrap();
        let (_, skipped) = ckpts.latest().unwrap();
        assert_eq!(
            reasons(&skipped),
            ["model.bpk has 2 bytes, the manifest says 3 (truncated write?)"]
        );
        // No optimizer state.
        std::fs::write(newest.join(MODEL_FILE), b"two").unwrap();
        std::fs::remove_file(newest.join(OPTIMIZER_FILE)).unwrap();
        let (c, skipped) = ckpts.latest().unwrap();
        assert_eq!(c.unwrap().manifest.iterations, 1);
        assert_eq!(
            reasons(&skipped),
            ["optimizer.bpk (the optimizer state) is missing"]
        );
        // No manifest (killed before it was written, then renamed by hand).
        std::fs::remove_file(newest.join("manifest.json")).unwrap();
        let (c, skipped) = ckpts.latest().unwrap();
        assert_eq!(c.unwrap().manifest.iterations, 1);
        assert_eq!(
            reasons(&skipped),
            ["manifest.json (what the checkpoint holds) is missing"]
        );
    }

    #[test]
    fn a_checkpoint_whose_manifest_lists_no_optimizer_state_is_unusable() {
        let dir = tempfile::tempdir().unwrap();
        let ckpts = CheckpointDir::new(dir.path(), 3);
        ckpts.save(&manifest(1), &[(MODEL_FILE, b"one")]).unwrap();
        let (c, skipped) = ckpts.latest().unwrap();
        assert!(c.is_none());
        assert_eq!(
            reasons(&skipped),
            ["the manifest lists no optimizer.bpk (the optimizer state), which a resume needs"]
        );
    }

    #[test]
    fn checkpoints_none_of_which_is_usable_refuse_the_resume_listing_each() {
        let dir = tempfile::tempdir().unwrap();
        let ckpts = CheckpointDir::new(dir.path().join("checkpoints"), 3);
        // No checkpoints at all: a fresh run.
        let (c, skipped) = ckpts.resume_point().unwrap();
        assert!(c.is_none() && skipped.is_empty());
        let older = save(&ckpts, 4, b"four");
        let newer = save(&ckpts, 8, b"eight");
        std::fs::remove_file(older.join(OPTIMIZER_FILE)).unwrap();
        std::fs::write(newer.join("manifest.json"), b"{\"format\": 1, \"kil").unwrap();
        let err = ckpts.resume_point().unwrap_err();
        assert!(matches!(err, KilnError::UnusableCheckpoints(_)), "{err:?}");
        assert!(err.is_usage());
        let text = err.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            format!(
                "cannot resume: {} holds 2 checkpoints and none can resume training:",
                ckpts.path().display()
            )
        );
        assert_eq!(
            lines[1],
            "  ckpt-000000000004: optimizer.bpk (the optimizer state) is missing"
        );
        assert!(
            lines[2].starts_with(
                "  ckpt-000000000008: manifest.json is not a kiln checkpoint manifest (torn or \
                 overwritten?): EOF while parsing"
            ),
            "{text}"
        );
        assert!(lines[3].contains("--no-resume"), "{text}");
        // The refusal removes nothing.
        assert!(older.join(MODEL_FILE).exists() && newer.join(MODEL_FILE).exists());
    }

    #[test]
    fn clear_removes_checkpoints_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let ckpts = CheckpointDir::new(dir.path(), 3);
        save(&ckpts, 1, b"one");
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
        save(&ckpts, 6, b"six");
        assert!(!torn.exists());
        assert_eq!(ckpts.latest().unwrap().0.unwrap().manifest.iterations, 6);
    }
}
