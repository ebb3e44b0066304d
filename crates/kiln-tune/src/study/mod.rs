//! The study loop of one worker: claim a trial, train it in a child, record the result, until
//! the oracle is done and no trial runs anywhere. Every state change is a transaction of the
//! study database, so the loop can be killed at any instant and started again (by the same
//! command) to resume.
//!
//! Layout of the study directory:
//! - `study.db`: the SQLite study database (unless `--storage` names another);
//! - `trials/<number>/`: the trial's run directory (`config.toml`, checkpoints,
//!   `history.json`, `train.log`, `tune-epochs.csv`); execution `k > 0` of the trial in
//!   `trials/<number>/execution-<k>/`;
//! - `logs/<number>/`: its TensorBoard logs, with the parameters as HParams;
//! - `best.toml`: the best configuration so far, ready for `kiln train`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crate::config::TuneConfig;
use crate::error::TuneError;
use crate::lock;
use crate::oracle::Oracle;
use crate::pruner::Pruner;
use crate::report;
use crate::runner::{Action, Event, Exit, Runner, describe_failure, run_dir_in_use};
use crate::storage::{self, Attempt, Claim, ClaimPolicy, Finished, Outcome, Storage, StoredTrial};
use crate::trial::{TrialRecord, TrialState};

/// Checks a trial's run config (TOML text) before it is trained; the CLI passes kiln's own
/// config parser, so that a search space producing an invalid config stops the study with
/// the config error instead of failing trial after trial.
pub type ConfigCheck = Box<dyn Fn(&str) -> Result<(), String>>;

/// How a worker runs a study.
pub struct StudyOptions {
    /// The study directory (trial run directories, TensorBoard logs, `best.toml`, the
    /// SQLite database by default).
    pub study_dir: PathBuf,
    /// `--storage`: a PostgreSQL URL or an SQLite path (default `<study_dir>/study.db`).
    pub storage: Option<String>,
    /// `--max-trials`: replaces `[tuner] max_trials`.
    pub max_trials: Option<u64>,
    /// How trials are trained.
    pub runner: Runner,
    /// Checks each trial's config before training it.
    pub check_config: Option<ConfigCheck>,
    /// Set to a signal number (by the CLI's SIGINT/SIGTERM handler) to stop: the running
    /// trial's child is stopped, the trial put back to run again on resume, and
    /// [`TuneError::Interrupted`] returned.
    pub stop: Option<Arc<AtomicI32>>,
}

/// What [`run`] ends with.
#[derive(Debug)]
pub struct StudyReport {
    /// Every trial of the study at the end.
    pub trials: Vec<StoredTrial>,
    /// The best complete trial's number.
    pub best: Option<u64>,
}

/// The study's default directory: `runs/tune/<tune file stem>`.
pub fn default_study_dir(tune_file: &Path) -> PathBuf {
    let stem = tune_file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "study".into());
    PathBuf::from("runs").join("tune").join(stem)
}

/// The storage of `cfg`'s study under `opts`, opened and checked against the config.
///
/// # Errors
/// [`TuneError::Storage`], or [`TuneError::Config`] when the stored study has other
/// settings.
pub fn open_storage(cfg: &TuneConfig, opts: &StudyOptions) -> Result<Box<dyn Storage>, TuneError> {
    open_storage_with_identity(cfg, opts).map(|(s, _)| s)
}

/// [`open_storage`] and the study's identity ([`storage::study_identity`]).
fn open_storage_with_identity(
    cfg: &TuneConfig,
    opts: &StudyOptions,
) -> Result<(Box<dyn Storage>, String), TuneError> {
    let mut storage = storage::open(opts.storage.as_deref(), &opts.study_dir)?;
    let identity = storage.open_study(&cfg.settings.study_name, &cfg.settings_json())?;
    Ok((storage, identity))
}

/// The file in a trial directory naming the study it belongs to (JSON `{"study": identity}`).
pub const STAMP: &str = "study.json";

/// Refuses a study directory whose `trials/<n>/` directories belong to another study (their
/// [`STAMP`] names another identity) or to no known study (not stamped, not empty): a trial
/// would resume the other study's finished run and record its value as its own. Call it
/// holding the study directory's lock: a worker stamps a trial directory under that lock
/// before writing anything else in it, so a live study's directories are never seen
/// unstamped.
///
/// # Errors
/// [`TuneError::Config`] naming the directory and the fix.
pub fn check_trial_dirs(study_dir: &Path, identity: &str) -> Result<(), TuneError> {
    let trials = study_dir.join("trials");
    let Ok(entries) = std::fs::read_dir(&trials) else {
        return Ok(());
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let owner = stamp_owner(&dir);
        if owner.as_deref() == Some(identity) {
            continue;
        }
        if owner.is_none() && holds_nothing(&dir) {
            continue;
        }
        return Err(foreign_trial_dir(
            study_dir,
            &dir,
            owner.as_deref(),
            identity,
        ));
    }
    Ok(())
}

/// The identity a trial directory's [`STAMP`] names.
fn stamp_owner(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(STAMP))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("study").and_then(|s| s.as_str()).map(str::to_string))
}

/// The refusal of the trial directory `dir`, which belongs to the study `owner` (`None`: to
/// no known study). Deleting `trials/` is suggested only when no worker of that study runs
/// in this directory now.
fn foreign_trial_dir(
    study_dir: &Path,
    dir: &Path,
    owner: Option<&str>,
    identity: &str,
) -> TuneError {
    let trials = study_dir.join("trials");
    let why = match owner {
        Some(o) => format!("belongs to another study ({o})"),
        None => format!("holds a run of no known study (no {STAMP})"),
    };
    let live = owner.and_then(|o| {
        lock::live_workers(study_dir)
            .into_iter()
            .find(|(_, study)| study == o)
    });
    let fix = match live {
        Some((worker, _)) => format!(
            "That study is running in this directory now (worker {worker}): use another \
             --study-dir"
        ),
        None => format!(
            "Use another --study-dir, or delete {} if that study is no longer needed",
            trials.display()
        ),
    };
    TuneError::Config(format!(
        "the trial directory {} {why}, not to this study ({identity}): its trials would \
         resume that run instead of training. {fix}",
        dir.display()
    ))
}

/// Whether the trial directory `dir` holds nothing: no entry, or only the temporary files of
/// a stamp whose writer was killed before its rename (as older versions wrote it).
fn holds_nothing(dir: &Path) -> bool {
    let leftover = format!(".{STAMP}.tmp-");
    std::fs::read_dir(dir).map_or(true, |d| {
        d.flatten()
            .all(|e| e.file_name().to_string_lossy().starts_with(&leftover))
    })
}

/// Writes `dir`/[`STAMP`] with `identity` (creating `dir`) under the study directory's lock,
/// refusing a directory another study stamped. The stamp is written in the study directory
/// and renamed into `dir`: a kill at any moment leaves `dir` either empty or stamped.
fn stamp(study_dir: &Path, dir: &Path, identity: &str) -> Result<(), TuneError> {
    let _lock = lock::lock_study_dir(study_dir)?;
    let owner = stamp_owner(dir);
    if owner.as_deref() == Some(identity) {
        return Ok(());
    }
    if let Some(o) = owner {
        return Err(foreign_trial_dir(study_dir, dir, Some(&o), identity));
    }
    std::fs::create_dir_all(dir).map_err(|e| TuneError::io("create", dir, e))?;
    // Under the lock, one stamp is written at a time in this study directory.
    let tmp = study_dir.join(format!(".{STAMP}.tmp-{}", std::process::id()));
    let text = serde_json::json!({ "study": identity }).to_string();
    std::fs::write(&tmp, text).map_err(|e| TuneError::io("write", &tmp, e))?;
    let path = dir.join(STAMP);
    std::fs::rename(&tmp, &path).map_err(|e| TuneError::io("write", &path, e))
}

/// Runs (or resumes) `cfg`'s study as one worker; `out` receives the lines of the live table.
///
/// # Errors
/// Config errors ([`TuneError::Config`]: invalid search space, an invalid trial config, a
/// missing objective), storage errors, [`TuneError::Study`] when
/// `max_consecutive_failed_trials` trials failed in a row, [`TuneError::Interrupted`].
pub fn run(
    cfg: &TuneConfig,
    opts: &StudyOptions,
    out: &mut dyn FnMut(&str),
) -> Result<StudyReport, TuneError> {
    let mut cfg = cfg.clone();
    if let Some(n) = opts.max_trials {
        cfg.settings.max_trials = n;
        cfg.tuner
            .insert("max_trials".into(), toml::Value::Integer(n as i64));
    }
    let (oracle, pruner) = crate::search::build(&cfg)?;
    run_with(&cfg, opts, oracle.as_ref(), pruner.as_deref(), out)
}

/// [`run`] with the oracle and pruner given (a library user's own algorithm); `cfg`'s
/// `max_trials` is used as it is.
///
/// # Errors
/// As [`run`].
pub fn run_with(
    cfg: &TuneConfig,
    opts: &StudyOptions,
    oracle: &dyn Oracle,
    pruner: Option<&dyn Pruner>,
    out: &mut dyn FnMut(&str),
) -> Result<StudyReport, TuneError> {
    let (mut storage, identity) = open_storage_with_identity(cfg, opts)?;
    let id = storage::new_worker_id();
    let registered = {
        let _lock = lock::lock_study_dir(&opts.study_dir)?;
        check_trial_dirs(&opts.study_dir, &identity)?;
        lock::WorkerLock::register(&opts.study_dir, &id, &identity)?
    };
    let mut worker = Worker {
        identity,
        cfg,
        opts,
        oracle,
        pruner,
        storage: storage.as_mut(),
        id,
        out,
    };
    let report = worker.run();
    drop(registered);
    if report.is_ok() {
        // Every trial has ended: the lock files killed workers left are no longer needed.
        let _lock = lock::lock_study_dir(&opts.study_dir)?;
        lock::remove_stale(&opts.study_dir);
    }
    report
}

struct Worker<'a> {
    identity: String,
    cfg: &'a TuneConfig,
    opts: &'a StudyOptions,
    oracle: &'a dyn Oracle,
    pruner: Option<&'a dyn Pruner>,
    storage: &'a mut dyn Storage,
    id: String,
    out: &'a mut dyn FnMut(&str),
}

/// Why a child was stopped.
#[derive(Clone, Copy, PartialEq)]
enum Stop {
    Pruned,
    Interrupted(i32),
    Lost,
}

impl Worker<'_> {
    fn stop_requested(&self) -> Option<i32> {
        self.opts
            .stop
            .as_ref()
            .map(|s| s.load(Ordering::SeqCst))
            .filter(|s| *s != 0)
    }

    fn run(&mut self) -> Result<StudyReport, TuneError> {
        let s = &self.cfg.settings;
        let policy = ClaimPolicy {
            worker: self.id.clone(),
            grace_ms: (s.grace_period * 1000.0) as i64,
            workers_dir: Some(self.opts.study_dir.join(lock::WORKERS)),
            max_retries: s.max_retries_per_trial,
            max_trials: s.max_trials,
        };
        let before = self.storage.trials()?;
        (self.out)(&format!(
            "Study \"{}\" ({}) in {}: {} {}, {} trial{} so far, worker {}",
            s.study_name,
            self.cfg.path.display(),
            self.storage.location(),
            if self.cfg.objective.direction == crate::trial::Direction::Max {
                "maximising"
            } else {
                "minimising"
            },
            self.cfg.objective.name,
            before.len(),
            if before.len() == 1 { "" } else { "s" },
            self.id
        ));
        (self.out)(&report::header(&self.cfg.objective.name));
        let mut waiting_said = false;
        loop {
            if let Some(sig) = self.stop_requested() {
                return Err(TuneError::Interrupted(sig));
            }
            let oracle = self.oracle;
            let claim = self.storage.claim(&policy, &mut |h| oracle.next(h))?;
            match claim {
                Claim::Run(t) => {
                    waiting_said = false;
                    self.run_trial(*t)?;
                }
                Claim::Done { active: 0 } => break,
                Claim::Done { .. } | Claim::Wait => {
                    if !waiting_said {
                        let n = match claim {
                            Claim::Done { active } => active,
                            _ => 0,
                        };
                        (self.out)(&if n > 0 {
                            format!(
                                "  (no new trial: waiting for {n} running trial{} of other workers)",
                                if n == 1 { "" } else { "s" }
                            )
                        } else {
                            "  (waiting for running trials before the next)".to_string()
                        });
                        waiting_said = true;
                    }
                    self.sleep(Duration::from_secs_f64(s.heartbeat_interval.min(2.0)));
                }
            }
        }
        let trials = self.storage.trials()?;
        if (trials.len() as u64) < s.max_trials {
            (self.out)(&format!(
                "The search space has no more new points: {} trial{} of max_trials = {}",
                trials.len(),
                if trials.len() == 1 { "" } else { "s" },
                s.max_trials
            ));
        }
        let best = report::ranked(&trials, self.cfg.objective.direction)
            .first()
            .map(|t| t.record.number);
        Ok(StudyReport { trials, best })
    }

    fn sleep(&self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end && self.stop_requested().is_none() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn trial_dir(&self, number: u64) -> PathBuf {
        self.opts.study_dir.join("trials").join(number.to_string())
    }

    /// Trains `t` (all its executions), records the outcome and prints its line.
    fn run_trial(&mut self, t: StoredTrial) -> Result<(), TuneError> {
        if let Some(why) = &t.message {
            // Run again: interrupted with its worker, or a failure with retries left.
            (self.out)(&format!("{:>5}  again: {why}", t.record.number));
        }
        let attempt = Attempt {
            worker: self.id.clone(),
            number: t.record.number,
            retries: t.record.retries,
        };
        let outcome = match self.train(&t, &attempt) {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(Stop::Lost)) => {
                (self.out)(&format!(
                    "{:>5}  lost: another worker took this trial over (no heartbeat within the \
                     grace period)",
                    t.record.number
                ));
                return Ok(());
            }
            Ok(Err(Stop::Interrupted(sig))) => {
                self.storage.release(&attempt)?;
                return Err(TuneError::Interrupted(sig));
            }
            Ok(Err(Stop::Pruned)) => unreachable!("pruning is an outcome"),
            Err(e @ TuneError::Config(_)) => {
                // Every trial would fail the same way: record it and stop the study.
                self.storage.finish(
                    &attempt,
                    &Outcome::Failed(e.to_string()),
                    0, // a config error is not retried
                )?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let finished =
            self.storage
                .finish(&attempt, &outcome, self.cfg.settings.max_retries_per_trial)?;
        let trials = self.storage.trials()?;
        if let Some(now) = trials.iter().find(|x| x.record.number == t.record.number) {
            let mut text = report::line(now, &self.cfg.objective.name);
            if let (Outcome::Failed(why), Finished::Recorded { .. }) = (&outcome, &finished) {
                text += &format!("\n       {why}");
            }
            (self.out)(&text);
        }
        if matches!(outcome, Outcome::Complete(_)) {
            self.write_best()?;
        }
        self.check_failures(&trials)
    }

    /// Rewrites `best.toml` from the trials as they are once the study directory's lock is
    /// held, so that a worker never replaces a newer best with an older one.
    fn write_best(&mut self) -> Result<(), TuneError> {
        let _lock = lock::lock_study_dir(&self.opts.study_dir)?;
        let trials = self.storage.trials()?;
        report::write_best(&trials, self.cfg, &self.opts.study_dir.join("best.toml"))?;
        Ok(())
    }

    /// `max_consecutive_failed_trials` failed trials in a row (by finishing time) end the
    /// study.
    fn check_failures(&self, trials: &[StoredTrial]) -> Result<(), TuneError> {
        let max = self.cfg.settings.max_consecutive_failed_trials as usize;
        let mut ended: Vec<&StoredTrial> = trials
            .iter()
            .filter(|t| t.record.state != TrialState::Running && t.finished_ms.is_some())
            .collect();
        ended.sort_by_key(|t| (t.finished_ms, t.record.number));
        let failed: Vec<&&StoredTrial> = ended
            .iter()
            .rev()
            .take_while(|t| t.record.state == TrialState::Failed)
            .collect();
        if failed.len() >= max {
            let last = failed[0];
            return Err(TuneError::Study(format!(
                "{} trials failed in a row ([tuner] max_consecutive_failed_trials = {max}); the \
                 last, trial {}: {}. Fix the cause and run the same command to resume the study",
                failed.len(),
                last.record.number,
                last.message.as_deref().unwrap_or("no message")
            )));
        }
        Ok(())
    }

    /// Prepares the trial's directory: a Hyperband continuation starts from a copy of its
    /// parent's run directory (checkpoints included).
    fn prepare(&self, t: &StoredTrial, dir: &Path) -> Result<(), TuneError> {
        let Some(parent) = t.record.plan.resume_from else {
            return Ok(());
        };
        if dir.join("checkpoints").exists() {
            return Ok(()); // a continuation run again resumes from its own checkpoints
        }
        let from = self.trial_dir(parent);
        if !from.is_dir() {
            return Err(TuneError::Study(format!(
                "trial {} continues trial {parent}, whose run directory {} is not on this \
                 machine; Hyperband with several machines needs a study directory they share",
                t.record.number,
                from.display()
            )));
        }
        // The checkpoints come last, through a temporary name: a copy cut short by a kill
        // is made again instead of being resumed from.
        let (checkpoints, partial) = (dir.join("checkpoints"), dir.join("checkpoints.partial"));
        // Not `.lock`: `kiln train`'s lock of the parent's run directory is the parent's.
        copy_dir(&from, dir, &["checkpoints", ".lock"])?;
        if partial.exists() {
            std::fs::remove_dir_all(&partial).map_err(|e| TuneError::io("remove", &partial, e))?;
        }
        if from.join("checkpoints").is_dir() {
            copy_dir(&from.join("checkpoints"), &partial, &[])?;
            std::fs::rename(&partial, &checkpoints)
                .map_err(|e| TuneError::io("rename", &partial, e))?;
        }
        Ok(())
    }

    /// Runs every execution of `t`: `Ok(Ok(outcome))`, or `Ok(Err(stop))` when it was stopped
    /// for another reason than pruning.
    fn train(
        &mut self,
        t: &StoredTrial,
        attempt: &Attempt,
    ) -> Result<Result<Outcome, Stop>, TuneError> {
        let dir = self.trial_dir(t.record.number);
        // Stamped first: a worker starting now never sees this directory unstamped.
        stamp(&self.opts.study_dir, &dir, &self.identity)?;
        if let Err(e) = self.prepare(t, &dir) {
            return Ok(Ok(Outcome::Failed(e.to_string())));
        }
        let mut values = Vec::new();
        let executions = self.cfg.settings.executions_per_trial;
        for k in 0..executions {
            let (run_dir, log_dir) = if k == 0 {
                (
                    dir.clone(),
                    self.opts
                        .study_dir
                        .join("logs")
                        .join(t.record.number.to_string()),
                )
            } else {
                let sub = format!("execution-{k}");
                (
                    dir.join(&sub),
                    self.opts
                        .study_dir
                        .join("logs")
                        .join(t.record.number.to_string())
                        .join(&sub),
                )
            };
            let log_dir = std::path::absolute(&log_dir).unwrap_or(log_dir);
            let table = self.cfg.trial_config(&t.record.plan, k, &log_dir)?;
            let text = format!(
                "# Trial {} of study \"{}\" ({}), execution {k}: {}\n{}",
                t.record.number,
                self.cfg.settings.study_name,
                self.cfg.path.display(),
                report::format_params(&t.record.plan.params),
                toml::to_string_pretty(&table)
                    .map_err(|e| TuneError::Io(format!("cannot write a trial config: {e}")))?
            );
            if let Some(check) = &self.opts.check_config {
                check(&text).map_err(|m| {
                    TuneError::Config(format!(
                        "trial {} ({}) has an invalid run config: {m}",
                        t.record.number,
                        report::format_params(&t.record.plan.params)
                    ))
                })?;
            }
            std::fs::create_dir_all(&run_dir).map_err(|e| TuneError::io("create", &run_dir, e))?;
            let config = run_dir.join("config.toml");
            report::write_atomic(&config, text.as_bytes())?;
            match self.execute(t, attempt, &config, &run_dir, k == 0)? {
                Ok(Some(status)) if status.success() => {
                    let history = run_dir.join("history.json");
                    match crate::objective::best_value(&history, &self.cfg.objective) {
                        Ok(Some(v)) => values.push(v),
                        Ok(None) => {
                            return Ok(Ok(Outcome::Failed(format!(
                                "{} has no finite {} value",
                                history.display(),
                                self.cfg.objective.name
                            ))));
                        }
                        Err(e @ TuneError::Config(_)) => return Err(e),
                        Err(e) => return Ok(Ok(Outcome::Failed(e.to_string()))),
                    }
                }
                Ok(Some(status)) if status.code() == Some(2) => {
                    // kiln train's usage/config error: every retry and every trial would
                    // fail the same way, so the study stops (exit code 2).
                    return Err(TuneError::Config(format!(
                        "trial {}: {} (a usage or config error: not retried; fix the tune \
                         config or the --train-arg values)",
                        t.record.number,
                        describe_failure(&status, &run_dir.join("train.log"))
                    )));
                }
                Ok(Some(status)) => {
                    return Ok(Ok(Outcome::Failed(describe_failure(
                        &status,
                        &run_dir.join("train.log"),
                    ))));
                }
                Ok(None) => {
                    let trials = self.storage.trials()?;
                    let last = trials
                        .iter()
                        .find(|x| x.record.number == t.record.number)
                        .and_then(|x| x.record.intermediate.last().map(|(_, v)| *v));
                    return Ok(Ok(Outcome::Pruned(last)));
                }
                Err(stop) => return Ok(Err(stop)),
            }
        }
        let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
        Ok(Ok(Outcome::Complete(mean)))
    }

    /// One child run: `Ok(Ok(Some(status)))` when it exited by itself, `Ok(Ok(None))` when
    /// it was pruned, `Ok(Err(stop))` when it was stopped otherwise.
    fn execute(
        &mut self,
        t: &StoredTrial,
        attempt: &Attempt,
        config: &Path,
        run_dir: &Path,
        report_epochs: bool,
    ) -> Result<Result<Option<std::process::ExitStatus>, Stop>, TuneError> {
        let interval = Duration::from_secs_f64(self.cfg.settings.heartbeat_interval);
        let mut last_beat = Instant::now();
        let mut stop: Option<Stop> = None;
        let mut failure: Option<TuneError> = None;
        let number = t.record.number;
        let direction = self.cfg.objective.direction;
        let opts = self.opts;
        let pruner = self.pruner;
        let storage = &mut *self.storage;
        let mut watch = |e: Event| -> Action {
            let result: Result<Action, TuneError> = (|| {
                if let Some(sig) = opts
                    .stop
                    .as_ref()
                    .map(|s| s.load(Ordering::SeqCst))
                    .filter(|s| *s != 0)
                {
                    stop = Some(Stop::Interrupted(sig));
                    return Ok(Action::Stop);
                }
                if last_beat.elapsed() >= interval {
                    last_beat = Instant::now();
                    if !storage.heartbeat(attempt)? {
                        stop = Some(Stop::Lost);
                        return Ok(Action::Stop);
                    }
                }
                if let Event::Epoch { epoch, value } = e
                    && report_epochs
                {
                    storage.report(number, epoch, value)?;
                    if let Some(p) = pruner {
                        let trials = storage.trials()?;
                        let history: Vec<TrialRecord> =
                            trials.iter().map(|x| x.record.clone()).collect();
                        if let Some(me) = history.iter().find(|x| x.number == number)
                            && p.should_prune(me, &history, direction)
                        {
                            stop = Some(Stop::Pruned);
                            return Ok(Action::Stop);
                        }
                    }
                }
                Ok(Action::Continue)
            })();
            result.unwrap_or_else(|e| {
                failure = Some(e);
                Action::Stop
            })
        };
        let exit = run_when_free(
            &opts.runner,
            config,
            run_dir,
            &self.cfg.objective.name,
            &mut watch,
            &mut |holder: &str| {
                (self.out)(&format!(
                    "{number:>5}  waiting: its run directory is in use ({holder}); the trial \
                     runs once it is free"
                ))
            },
        )?;
        if let Some(e) = failure {
            return Err(e);
        }
        // A Ctrl-C reaches the child too (same process group): it may have exited on it
        // before a poll saw the request. Its checkpoint is kept; the trial runs again.
        if stop.is_none()
            && let Some(sig) = self.stop_requested()
        {
            stop = Some(Stop::Interrupted(sig));
        }
        Ok(match (exit, stop) {
            (_, Some(Stop::Interrupted(sig))) => Err(Stop::Interrupted(sig)),
            (_, Some(Stop::Lost)) => Err(Stop::Lost),
            (Exit::Finished(status), _) => Ok(Some(status)),
            (Exit::Stopped(_), Some(Stop::Pruned)) => Ok(None),
            (Exit::Stopped(status), None) => Ok(Some(status)),
        })
    }
}

/// How long a worker waits before it starts a trial's child again when the run directory
/// was in use.
const IN_USE_RETRY: Duration = Duration::from_secs(1);

/// Runs the trial's child ([`Runner::run`]); while it exits because another process holds
/// its run directory ([`run_dir_in_use`]: a `kiln train` left over from an interrupted
/// run), tells `waiting` once, waits (polling `watch`, which sends the heartbeats) and runs
/// it again. Returns the last exit, or the in-use one when `watch` said stop while waiting.
fn run_when_free(
    runner: &Runner,
    config: &Path,
    run_dir: &Path,
    objective: &str,
    watch: &mut dyn FnMut(Event) -> Action,
    waiting: &mut dyn FnMut(&str),
) -> Result<Exit, TuneError> {
    let log = run_dir.join("train.log");
    let mut told = false;
    loop {
        let from = std::fs::metadata(&log).map_or(0, |m| m.len());
        let exit = runner.run(config, run_dir, objective, watch)?;
        let Some(holder) = run_dir_in_use(&exit, &log, from) else {
            return Ok(exit);
        };
        if !told {
            waiting(&holder);
            told = true;
        }
        let until = Instant::now() + IN_USE_RETRY;
        while Instant::now() < until {
            if watch(Event::Tick) == Action::Stop {
                return Ok(exit);
            }
            std::thread::sleep(runner.poll.min(IN_USE_RETRY));
        }
    }
}

/// Copies the directory `from` into `to` (created), recursively, but for the entries of
/// `from` named in `skip`.
///
/// # Errors
/// [`TuneError::Io`] naming the file.
fn copy_dir(from: &Path, to: &Path, skip: &[&str]) -> Result<(), TuneError> {
    std::fs::create_dir_all(to).map_err(|e| TuneError::io("create", to, e))?;
    let entries = std::fs::read_dir(from).map_err(|e| TuneError::io("read", from, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| TuneError::io("read", from, e))?;
        if skip.iter().any(|s| entry.file_name() == *s) {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst, &[])?;
        } else {
            std::fs::copy(&src, &dst).map_err(|e| TuneError::io("copy", &src, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
