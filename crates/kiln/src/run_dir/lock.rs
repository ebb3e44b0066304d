//! One writer per directory: an exclusive OS file lock on `<dir>/.lock`.
//!
//! The lock is `flock(2)` with `LOCK_EX | LOCK_NB` (through the standard library's
//! `File::try_lock`; `LockFileEx` on Windows). The kernel attaches it to the open file and
//! drops it when that is closed: at the latest when the process ends, however it ends (SIGKILL,
//! a panic, an out-of-memory kill), so a crash never leaves a stale lock and nothing needs
//! cleaning up. It belongs to the open file, not to the process: a second [`DirLock::acquire`]
//! of the same directory inside one process is refused as a second process would be (POSIX
//! `fcntl` locks would let it through, and would drop the first lock as soon as any descriptor
//! of the file was closed).
//!
//! A holder that is already exiting (killed, still freeing its memory or closing its GPU
//! context) is waited for, up to 10 s, as a scheduler that kills a job and restarts it at once
//! expects; a live holder means an immediate refusal.
//!
//! The lock file stays when the lock is released: deleting it would let a third process lock a
//! fresh file while a second one still holds the old one. After locking, the holder writes who
//! it is (pid, host, command, start time) into it, and empties it when it releases the lock; a
//! refused process reads it for its message. That text is only information: the OS lock
//! decides.
//!
//! On NFS, Linux turns `flock` into NFS byte-range locks (NFSv4, or v3 with `lockd`), so
//! processes on different machines exclude each other too. A filesystem that cannot lock at all
//! does not stop the run: it goes on unlocked, with a warning ([`DirLock::warning`]).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use crate::error::lock_holder::{LOCK_FILE, LockHolder};
use crate::error::lock_holder::{hostname, now_s};
use crate::error::{KilnError, Result};

/// How long a refused process waits for the holder to record itself (it locks first, then
/// writes), or for a dead predecessor's leftover record to be replaced.
const RECORD_WAIT: Duration = Duration::from_secs(1);

/// How long a process waits for a holder that is already exiting (killed, and still freeing
/// its memory or closing its device) to release the lock.
const EXIT_WAIT: Duration = Duration::from_secs(10);

impl LockHolder {
    /// This process, doing `command`.
    fn me(command: &str) -> LockHolder {
        LockHolder {
            pid: Some(std::process::id()),
            host: hostname(),
            command: Some(command.to_string()),
            started: Some(now_s()),
        }
    }

    /// The lock file's text: `key value` lines.
    fn to_text(&self) -> String {
        let mut t = String::from("kiln directory lock (held while the lines below are present)\n");
        let mut line = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                t += &format!("{k} {v}\n");
            }
        };
        line("pid", self.pid.map(|p| p.to_string()));
        line("host", self.host.clone());
        line("command", self.command.clone());
        line("started", self.started.map(|s| s.to_string()));
        t
    }

    /// Reads [`Self::to_text`]'s lines; anything else is ignored.
    fn parse(text: &str) -> LockHolder {
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        LockHolder {
            pid: field("pid").and_then(|p| p.parse().ok()),
            host: field("host"),
            command: field("command"),
            started: field("started").and_then(|s| s.parse().ok()),
        }
    }

    /// True when the record certainly names a process that no longer exists: written on this
    /// host, `/proc` mounted, no `/proc/<pid>`. (A leftover of a killed holder, about to be
    /// replaced by the process that holds the lock now.)
    fn is_gone(&self) -> bool {
        let (Some(pid), Some(host)) = (self.pid, &self.host) else {
            return false;
        };
        hostname().as_deref() == Some(host)
            && pid != std::process::id()
            && Path::new("/proc/self").exists()
            && !Path::new(&format!("/proc/{pid}")).exists()
    }

    /// True when the record names a process of this host that is already exiting: a zombie,
    /// or (Linux's `PF_EXITING` in `/proc/<pid>/stat`) one that a signal is tearing down. Its
    /// lock goes with it in a moment; a scheduler that kills a job and starts it again at once
    /// meets this.
    fn is_exiting(&self) -> bool {
        const PF_EXITING: u64 = 0x4;
        let (Some(pid), Some(host)) = (self.pid, &self.host) else {
            return false;
        };
        if hostname().as_deref() != Some(host) {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // `pid (comm) state ppid pgrp session tty_nr tpgid flags ...`; comm may hold spaces.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        let flags = fields.get(6).and_then(|f| f.parse::<u64>().ok());
        matches!(fields.first(), Some(&"Z" | &"X")) || flags.is_some_and(|f| f & PF_EXITING != 0)
    }

    /// How to stop it: `kill 1234`, `kill 1234 on host gpu-3`.
    fn kill_hint(&self) -> Option<String> {
        let pid = self.pid?;
        Some(match &self.host {
            Some(h) if Some(h) != hostname().as_ref() => format!("`kill {pid}` on host {h}"),
            _ => format!("`kill {pid}`"),
        })
    }

    /// What the refused process tells the user to do: wait, stop the holder, or `elsewhere`.
    fn remedy(&self, elsewhere: &str) -> String {
        match (self.is_this_process(), self.kill_hint()) {
            (true, _) => {
                format!("Let the other call in this process finish first, or {elsewhere}.")
            }
            (false, Some(kill)) => {
                format!("Wait for it to finish, stop it ({kill}), or {elsewhere}.")
            }
            (false, None) => format!("Wait for it to finish or stop it, or {elsewhere}."),
        }
    }
}

/// An exclusive lock on a directory (see the module docs), held until dropped.
#[derive(Debug)]
pub struct DirLock {
    /// The locked lock file; `None` when the filesystem cannot lock.
    file: Option<File>,
    path: PathBuf,
    warning: Option<String>,
}

impl DirLock {
    /// Locks `dir` (created if missing) for `command` (`kiln train`), or refuses at once.
    /// `elsewhere` completes the refusal's remedy, e.g. "use another run directory
    /// (--run-dir)".
    ///
    /// # Errors
    /// [`KilnError::RunDirLocked`] naming the holder when another process, or another
    /// `DirLock` of this process, holds the lock; [`KilnError::Io`] when the directory or
    /// the lock file cannot be created.
    pub fn acquire(dir: &Path, command: &str, elsewhere: &str) -> Result<DirLock> {
        std::fs::create_dir_all(dir).map_err(|e| KilnError::io(dir, e))?;
        let path = dir.join(LOCK_FILE);
        // Not truncated on open: the text is the holder's until the lock is ours.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| KilnError::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = read_holder(&path);
                if !(holder.is_exiting() && lock_within(&file, EXIT_WAIT)) {
                    let holder = if holder.is_exiting() {
                        read_holder(&path)
                    } else {
                        holder
                    };
                    return Err(KilnError::RunDirLocked {
                        dir: dir.to_path_buf(),
                        remedy: holder.remedy(elsewhere),
                        holder,
                    });
                }
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Ok(DirLock {
                    file: None,
                    warning: Some(format!(
                        "warning: cannot lock {} ({e}): this filesystem offers no file locks, \
                         so nothing stops a second process from writing {} at the same time",
                        path.display(),
                        dir.display()
                    )),
                    path,
                });
            }
        }
        let mut lock = DirLock {
            file: Some(file),
            path,
            warning: None,
        };
        lock.record(&LockHolder::me(command))?;
        Ok(lock)
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why the directory is not locked after all (a filesystem without locks), for the user.
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }

    /// Replaces the lock file's text with `holder`'s record.
    fn record(&mut self, holder: &LockHolder) -> Result<()> {
        let Some(file) = &mut self.file else {
            return Ok(());
        };
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(holder.to_text().as_bytes()))
            .map_err(|e| KilnError::io(&self.path, e))
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Still locked here: the file is closed (and the lock released) after this.
        if let Some(f) = &self.file {
            let _ = f.set_len(0);
        }
    }
}

/// Tries to lock `file` until `wait` has passed; true when locked.
fn lock_within(file: &File, wait: Duration) -> bool {
    let start = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return true,
            Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < wait => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => return false,
        }
    }
}

/// The holder's record, waiting up to [`RECORD_WAIT`] while it is missing (the holder has
/// locked but not yet written) or names a process that is gone (a killed predecessor's text,
/// not yet replaced).
fn read_holder(path: &Path) -> LockHolder {
    let start = Instant::now();
    loop {
        let mut text = String::new();
        let _ = File::open(path).and_then(|mut f| f.read_to_string(&mut text));
        let holder = LockHolder::parse(&text);
        let settled = holder.pid.is_some() && !holder.is_gone();
        if settled {
            return holder;
        }
        if start.elapsed() >= RECORD_WAIT {
            // A gone process cannot hold the lock: its record says nothing about who does.
            return if holder.is_gone() {
                LockHolder::default()
            } else {
                holder
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::lock_holder::duration_words;

    const ELSEWHERE: &str = "use another run directory";

    #[test]
    fn a_second_lock_in_the_same_process_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let first = DirLock::acquire(&run, "kiln train", ELSEWHERE).unwrap();
        assert!(first.warning().is_none(), "{:?}", first.warning());
        let err = DirLock::acquire(&run, "kiln export", ELSEWHERE).unwrap_err();
        let KilnError::RunDirLocked {
            dir: locked,
            holder,
            remedy,
        } = &err
        else {
            panic!("expected RunDirLocked, got {err}");
        };
        assert_eq!(locked, &run);
        assert_eq!(holder.pid, Some(std::process::id()));
        assert_eq!(holder.command.as_deref(), Some("kiln train"));
        assert_eq!(holder.host, hostname());
        assert!(remedy.contains("this process"), "{remedy}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        assert!(text.contains(".lock"), "{text}");
        drop(first);
        let again = DirLock::acquire(&run, "kiln train", ELSEWHERE).unwrap();
        assert_eq!(again.path(), run.join(LOCK_FILE));
    }

    #[test]
    fn the_holder_records_itself_and_empties_the_file_when_it_releases() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path(), "kiln train", ELSEWHERE).unwrap();
        let text = std::fs::read_to_string(lock.path()).unwrap();
        let recorded = LockHolder::parse(&text);
        assert_eq!(recorded.pid, Some(std::process::id()));
        assert_eq!(recorded.command.as_deref(), Some("kiln train"));
        let age = now_s() - recorded.started.unwrap();
        assert!(age < 60, "started {age} s ago");
        let path = lock.path().to_path_buf();
        drop(lock);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }

    #[test]
    fn a_leftover_record_of_a_killed_holder_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        // A process that has exited: its record stays in the file, its lock went with it.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = LockHolder {
            pid: Some(dead),
            host: hostname(),
            command: Some("kiln train".into()),
            started: Some(1),
        };
        assert!(stale.is_gone(), "pid {dead} should be gone");
        std::fs::write(dir.path().join(LOCK_FILE), stale.to_text()).unwrap();
        let lock = DirLock::acquire(dir.path(), "kiln train", ELSEWHERE).unwrap();
        let now = LockHolder::parse(&std::fs::read_to_string(lock.path()).unwrap());
        assert_eq!(now.pid, Some(std::process::id()));
    }

    #[test]
    fn a_zombie_holder_is_exiting_a_live_one_is_not() {
        let me = LockHolder::me("kiln train");
        assert!(!me.is_exiting());
        // Exited but not yet reaped: a zombie, as a killed holder is on its way out.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let zombie = LockHolder {
            pid: Some(child.id()),
            ..me.clone()
        };
        let start = Instant::now();
        while !zombie.is_exiting() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "pid {} never showed as exiting",
                child.id()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        child.wait().unwrap();
        let elsewhere = LockHolder {
            host: Some("another-host".into()),
            ..zombie
        };
        assert!(
            !elsewhere.is_exiting(),
            "a pid of another host is never judged"
        );
    }

    #[test]
    fn a_holder_on_another_host_is_described_with_its_host() {
        let h = LockHolder {
            pid: Some(4242),
            host: Some("gpu-node-7".into()),
            command: Some("kiln train".into()),
            started: Some(now_s() - 300),
        };
        assert_eq!(
            h.to_string(),
            "kiln train (pid 4242 on host gpu-node-7, started 5 min ago)"
        );
        assert!(!h.is_gone(), "a pid of another host is never judged gone");
        assert_eq!(
            h.remedy("use another run directory"),
            "Wait for it to finish, stop it (`kill 4242` on host gpu-node-7), or use another \
             run directory."
        );
        assert_eq!(LockHolder::parse(&h.to_text()), h);
        assert_eq!(LockHolder::parse("").pid, None);
        assert_eq!(
            LockHolder::parse("").to_string(),
            "another process (it has not recorded its pid)"
        );
    }

    #[test]
    fn durations_read_as_words() {
        assert_eq!(duration_words(42), "42 s");
        assert_eq!(duration_words(300), "5 min");
        assert_eq!(duration_words(3 * 3600 + 120), "3 h 2 min");
        assert_eq!(duration_words(5 * 86_400), "5 days");
    }
}
