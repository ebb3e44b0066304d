//! Who holds a run directory's lock ([`LockHolder`]), as [`KilnError::RunDirLocked`] names
//! it. Taking and releasing the lock is [`crate::run_dir`]'s.
//!
//! [`KilnError::RunDirLocked`]: super::KilnError::RunDirLocked

use std::time::{SystemTime, UNIX_EPOCH};

/// The lock file's name inside a locked directory.
pub const LOCK_FILE: &str = ".lock";

/// Who holds a directory's lock, as it recorded itself in the lock file. Fields it did not
/// record (an older or foreign writer, or one that has just locked) are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockHolder {
    /// Its process id.
    pub pid: Option<u32>,
    /// The machine (or container) it runs on: a pid only means something there.
    pub host: Option<String>,
    /// What it is doing (`kiln train`, `kiln export`).
    pub command: Option<String>,
    /// When it took the lock, in seconds since the Unix epoch.
    pub started: Option<u64>,
}

pub(crate) fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// This machine's (or container's) name: Linux's `/proc/sys/kernel/hostname`, else `$HOSTNAME`.
pub(crate) fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

/// `42 s`, `5 min`, `3 h 2 min`, `2 days`.
pub(crate) fn duration_words(s: u64) -> String {
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        7200..172_800 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} days", s / 86_400),
    }
}

impl LockHolder {
    /// True when the record is this process's.
    pub(crate) fn is_this_process(&self) -> bool {
        self.pid == Some(std::process::id()) && self.host == hostname()
    }
}

impl std::fmt::Display for LockHolder {
    /// `kiln train (pid 1234 on host gpu-3, started 5 min ago)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(pid) = self.pid else {
            return write!(f, "another process (it has not recorded its pid)");
        };
        let what = self.command.as_deref().unwrap_or("a kiln process");
        if self.is_this_process() {
            return write!(f, "another {what} in this same process (pid {pid})");
        }
        write!(f, "{what} (pid {pid}")?;
        if let Some(h) = &self.host {
            write!(f, " on host {h}")?;
        }
        if let Some(s) = self.started {
            write!(
                f,
                ", started {} ago",
                duration_words(now_s().saturating_sub(s))
            )?;
        }
        write!(f, ")")
    }
}
