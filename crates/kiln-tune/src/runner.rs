//! A trial's training run: a `kiln train CONFIG --run-dir DIR` child process, watched while it
//! runs.
//!
//! - Its output goes to `DIR/train.log` (appended: a retried run adds to it).
//! - The per-epoch objective is read from the `CSVLogger` file the trial config adds
//!   ([`crate::config::EPOCHS_CSV`], Keras' CSV: a header `epoch,<keys>`, one row per epoch,
//!   `NA` for a missing value) as rows appear.
//! - Stopping it (pruned, interrupted, or the trial taken over by another worker) sends
//!   SIGTERM: `kiln train` finishes its batch, writes a checkpoint and exits; after
//!   [`Runner::term_timeout`] it is killed.
//! - On Linux the child gets `PR_SET_PDEATHSIG = SIGKILL`: when the tuner dies (even by
//!   `kill -9`), its child dies too instead of training on unseen, so a trial run again never
//!   shares its run directory with an orphan. Should one still hold it (`kiln train` locks its
//!   run directory; the orphan of a tuner on a system without `PR_SET_PDEATHSIG`), the run
//!   exits with code 2 saying so ([`run_dir_in_use`]) and the worker runs it again once the
//!   directory is free.

use std::io::{BufRead, Read, Seek};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::config::EPOCHS_CSV;
use crate::error::TuneError;

/// How trial children are started.
#[derive(Clone, Debug)]
pub struct Runner {
    /// The `kiln` binary (the CLI passes its own executable).
    pub kiln: PathBuf,
    /// Arguments added after `kiln train CONFIG --run-dir DIR` (e.g. `--device gpu`).
    pub train_args: Vec<String>,
    /// How often the child, its CSV file and the callbacks are polled.
    pub poll: Duration,
    /// How long a child may take to checkpoint and exit after SIGTERM before SIGKILL.
    pub term_timeout: Duration,
}

impl Runner {
    /// A runner of `kiln` with a 200 ms poll and a 120 s SIGTERM timeout.
    pub fn new(kiln: impl Into<PathBuf>) -> Runner {
        Runner {
            kiln: kiln.into(),
            train_args: Vec::new(),
            poll: Duration::from_millis(200),
            term_timeout: Duration::from_secs(120),
        }
    }
}

/// What the watcher sees while the child runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event {
    /// An epoch ended (0-based) with this objective value.
    Epoch {
        /// The epoch, 0-based.
        epoch: u32,
        /// The objective after it.
        value: f64,
    },
    /// A poll went by.
    Tick,
}

/// The watcher's answer to an [`Event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Let it train.
    Continue,
    /// Stop it (SIGTERM); the reason is the watcher's.
    Stop,
}

/// How a run ended.
#[derive(Debug)]
pub enum Exit {
    /// The child exited by itself.
    Finished(ExitStatus),
    /// The watcher stopped it; its exit status after the stop.
    Stopped(ExitStatus),
}

/// Why a child exited unsuccessfully, in words, with the end of its log.
pub fn describe_failure(status: &ExitStatus, log: &Path) -> String {
    use std::os::unix::process::ExitStatusExt;
    let how = match (status.code(), status.signal()) {
        (Some(c), _) => format!("kiln train exited with code {c}"),
        (None, Some(9)) => "kiln train was killed by signal 9 (SIGKILL: out of memory?)".into(),
        (None, Some(s)) => format!("kiln train was killed by signal {s}"),
        _ => "kiln train failed".into(),
    };
    let tail = last_error_line(log);
    format!(
        "{how}{}; its output is in {}",
        tail.map(|t| format!(": {t}")).unwrap_or_default(),
        log.display()
    )
}

/// The holder, in `kiln train`'s words, when `exit` is `kiln train` refusing a run directory
/// another process holds (exit code 2, an error line saying the directory is in use, in the
/// part of `log` written after byte `from`). Such a run failed only to start: it runs again
/// once the holder (typically a child left over from an interrupted run) has gone.
pub fn run_dir_in_use(exit: &Exit, log: &Path, from: u64) -> Option<String> {
    let Exit::Finished(status) = exit else {
        return None;
    };
    if status.code() != Some(2) {
        return None;
    }
    let mut f = std::fs::File::open(log).ok()?;
    f.seek(std::io::SeekFrom::Start(from)).ok()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    text.lines()
        .find(|l| {
            let l = l.to_lowercase();
            l.contains("error") && (l.contains("in use") || l.contains("locked by"))
        })
        .map(|l| {
            let l = l.trim();
            l.strip_prefix("kiln: error: ").unwrap_or(l).to_string()
        })
}

/// The last `kiln: error:` line of a log (or its last line).
fn last_error_line(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines
        .iter()
        .rev()
        .find(|l| l.contains("error"))
        .or(lines.last())
        .map(|l| l.trim().chars().take(400).collect())
}

impl Runner {
    /// Runs `kiln train config --run-dir run_dir` and calls `watch` for every new epoch row
    /// of the objective's column and every poll, until the child exits or `watch` says stop.
    ///
    /// # Errors
    /// [`TuneError::Study`] when the child cannot be started (naming the binary),
    /// [`TuneError::Io`] for the log file.
    pub fn run(
        &self,
        config: &Path,
        run_dir: &Path,
        objective: &str,
        watch: &mut dyn FnMut(Event) -> Action,
    ) -> Result<Exit, TuneError> {
        std::fs::create_dir_all(run_dir).map_err(|e| TuneError::io("create", run_dir, e))?;
        let log_path = run_dir.join("train.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| TuneError::io("open", &log_path, e))?;
        let err_log = log
            .try_clone()
            .map_err(|e| TuneError::io("open", &log_path, e))?;
        let mut cmd = Command::new(&self.kiln);
        cmd.arg("train")
            .arg(config)
            .arg("--run-dir")
            .arg(run_dir)
            .args(&self.train_args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log);
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| {
            TuneError::Study(format!(
                "cannot start {} for a trial: {e}",
                self.kiln.display()
            ))
        })?;
        let mut csv = EpochReader::new(run_dir.join(EPOCHS_CSV), objective);
        loop {
            for (epoch, value) in csv.read_new() {
                if watch(Event::Epoch { epoch, value }) == Action::Stop {
                    return self.stop(child).map(Exit::Stopped);
                }
            }
            if let Some(status) = child
                .try_wait()
                .map_err(|e| TuneError::Study(format!("cannot watch a trial's child: {e}")))?
            {
                return Ok(Exit::Finished(status));
            }
            if watch(Event::Tick) == Action::Stop {
                return self.stop(child).map(Exit::Stopped);
            }
            std::thread::sleep(self.poll);
        }
    }

    /// SIGTERM, wait up to `term_timeout`, then SIGKILL.
    fn stop(&self, mut child: Child) -> Result<ExitStatus, TuneError> {
        let err = |e: std::io::Error| TuneError::Study(format!("cannot stop a trial's child: {e}"));
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < self.term_timeout {
            if let Some(status) = child.try_wait().map_err(err)? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.kill().map_err(err)?;
        child.wait().map_err(err)
    }
}

/// The child gets SIGKILL when the thread that started it ends (the tuner's, which lives as
/// long as the child is watched), so a killed tuner never leaves a `kiln train` behind.
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl, getppid and raise are async-signal-safe; this runs in the child between
    // fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            // The tuner died between fork and prctl: the death signal was missed.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

/// Reads the rows a `CSVLogger` appends, one objective value per complete row.
pub struct EpochReader {
    path: PathBuf,
    objective: String,
    /// Bytes already parsed (complete lines only).
    offset: u64,
    /// The objective's column, once the header was read.
    column: Option<Option<usize>>,
}

impl EpochReader {
    /// A reader of `path` for the `objective` column.
    pub fn new(path: PathBuf, objective: &str) -> EpochReader {
        EpochReader {
            path,
            objective: objective.to_string(),
            offset: 0,
            column: None,
        }
    }

    /// `(epoch, value)` of the complete rows written since the last call (rows with `NA` or
    /// a non-finite value are skipped). A file that shrank (a resumed run cut it back) is
    /// read again from its start.
    pub fn read_new(&mut self) -> Vec<(u32, f64)> {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        let len = f.metadata().map_or(0, |m| m.len());
        if len < self.offset {
            self.offset = 0;
            self.column = None;
        }
        if f.seek(std::io::SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut text = String::new();
        if f.read_to_string(&mut text).is_err() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut reader = std::io::BufReader::new(text.as_bytes());
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 0 {
            if !line.ends_with('\n') {
                break; // a row being written: read it next time
            }
            self.offset += line.len() as u64;
            let fields: Vec<&str> = line.trim_end().split(',').collect();
            match self.column {
                None => {
                    self.column = Some(fields.iter().position(|f| *f == self.objective));
                }
                Some(Some(col)) => {
                    let epoch = fields.first().and_then(|e| e.parse::<u32>().ok());
                    let value = fields.get(col).and_then(|v| v.parse::<f64>().ok());
                    if let (Some(e), Some(v)) = (epoch, value.filter(|v| v.is_finite())) {
                        out.push((e, v));
                    }
                }
                Some(None) => {}
            }
            line.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for `kiln train`: a shell script that writes CSV rows with a pause between
    /// them, then `history.json`, and exits with `code` (0 when empty).
    fn fake_kiln(dir: &Path, rows: &[&str], pause: f64, code: i32) -> PathBuf {
        let script = dir.join("fake-kiln.sh");
        let mut body = String::from(
            "#!/bin/sh\n# fake kiln: $1=train $2=config $3=--run-dir $4=dir\nrun=\"$4\"\n\
             trap 'echo terminated; exit 143' TERM\n\
             printf 'epoch,loss,val_loss\\r\\n' > \"$run/tune-epochs.csv\"\n",
        );
        for r in rows {
            body += &format!("sleep {pause}\nprintf '{r}\\r\\n' >> \"$run/tune-epochs.csv\"\n");
        }
        body += &format!(
            "echo '{{\"epoch\":[0],\"history\":{{\"val_loss\":[0.5]}}}}' > \"$run/history.json\"\n\
             echo 'kiln: error: boom' >&2\nexit {code}\n"
        );
        std::fs::write(&script, body).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        script
    }

    fn runner(kiln: PathBuf) -> Runner {
        Runner {
            poll: Duration::from_millis(20),
            ..Runner::new(kiln)
        }
    }

    #[test]
    fn reports_each_epoch_row_and_the_exit() {
        let dir = tempfile::tempdir().unwrap();
        let kiln = fake_kiln(dir.path(), &["0,1.0,0.9", "1,0.8,NA", "2,0.6,0.7"], 0.05, 0);
        let run = dir.path().join("run");
        let mut seen = Vec::new();
        let exit = runner(kiln)
            .run(&run.join("config.toml"), &run, "val_loss", &mut |e| {
                if let Event::Epoch { epoch, value } = e {
                    seen.push((epoch, value));
                }
                Action::Continue
            })
            .unwrap();
        assert!(matches!(exit, Exit::Finished(s) if s.success()));
        // Epoch 1 had no val_loss (NA): skipped.
        assert_eq!(seen, vec![(0, 0.9), (2, 0.7)]);
    }

    #[test]
    fn stop_sends_sigterm_and_a_failure_names_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let kiln = fake_kiln(dir.path(), &["0,1,0.9", "1,1,0.8", "2,1,0.7"], 0.3, 0);
        let run = dir.path().join("run");
        let exit = runner(kiln)
            .run(
                &run.join("config.toml"),
                &run,
                "val_loss",
                &mut |e| match e {
                    Event::Epoch { .. } => Action::Stop,
                    Event::Tick => Action::Continue,
                },
            )
            .unwrap();
        let Exit::Stopped(status) = exit else {
            panic!("not stopped: {exit:?}")
        };
        assert_eq!(status.code(), Some(143));
        assert!(!run.join("history.json").exists());
        let kiln = fake_kiln(dir.path(), &[], 0.0, 3);
        let exit = runner(kiln)
            .run(&run.join("config.toml"), &run, "val_loss", &mut |_| {
                Action::Continue
            })
            .unwrap();
        let Exit::Finished(status) = exit else {
            panic!("{exit:?}")
        };
        let why = describe_failure(&status, &run.join("train.log"));
        assert!(
            why.starts_with("kiln train exited with code 3: kiln: error: boom"),
            "{why}"
        );
        assert!(why.contains("train.log"), "{why}");
    }

    #[test]
    fn a_csv_cut_back_by_a_resume_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("e.csv");
        std::fs::write(&p, "epoch,val_loss\r\n0,0.5\r\n1,0.4\r\n2,0.3").unwrap();
        let mut r = EpochReader::new(p.clone(), "val_loss");
        assert_eq!(r.read_new(), vec![(0, 0.5), (1, 0.4)]); // row 2 is incomplete
        std::fs::write(&p, "epoch,val_loss\r\n0,0.5\r\n").unwrap();
        assert_eq!(r.read_new(), vec![(0, 0.5)]);
        std::fs::write(&p, "epoch,val_loss\r\n0,0.5\r\n1,0.45\r\n").unwrap();
        assert_eq!(r.read_new(), vec![(1, 0.45)]);
    }
}
