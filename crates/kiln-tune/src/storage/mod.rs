//! The study database: studies, trials and their per-epoch values, shared by every worker of a
//! study, as Optuna's RDB storage.
//!
//! Tables (the same in SQLite and PostgreSQL):
//! - `kiln_studies(id, name UNIQUE, fingerprint, settings, created_ms)`: `settings` is the JSON
//!   of what defines the study ([`crate::config::TuneConfig::settings_json`]); a study refuses
//!   to resume when it changed.
//! - `kiln_trials(study_id, number, plan, state, value, retries, worker, heartbeat_ms,
//!   started_ms, finished_ms, message)`: `plan` is the [`TrialPlan`] as JSON; `state` one of
//!   `waiting` (failed, to be run again), `running`, `complete`, `pruned`, `failed`.
//! - `kiln_trial_values(study_id, number, epoch, value)`: the intermediate objective values.
//!
//! Claiming a trial is one transaction ([`claim_in`]): running trials whose worker is gone are
//! put back as `waiting` (interrupted, not failed: they run again from their last checkpoint
//! without spending a retry); a waiting trial is claimed before a new one; else the oracle
//! decides from the whole history and the new trial is inserted as running. A worker is gone
//! when its heartbeat is older than the grace period (a lease, for workers on any machine), or
//! at once when it is on this machine and its lock file ([`crate::lock`]) is free or its
//! process no longer exists. Only the worker that ran a trial records it failed
//! ([`finish_in`]), when its child failed by itself.
//! SQLite serialises these transactions with `BEGIN IMMEDIATE`, PostgreSQL by locking the
//! study's row (`SELECT ... FOR UPDATE`), so two workers never claim the same trial or create
//! two trials with one number.

mod postgres;
mod sqlite;
pub mod url;

pub use self::postgres::PostgresStorage;
pub use self::sqlite::SqliteStorage;

use std::path::{Path, PathBuf};

use crate::error::TuneError;
use crate::lock::Liveness;
use crate::trial::{Decision, TrialPlan, TrialRecord, TrialState};

/// One trial row.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredTrial {
    /// The trial as the oracles and pruners see it (a waiting trial is `Running` there: it
    /// will run).
    pub record: TrialRecord,
    /// Failed, and waiting to be started again by the next worker that claims.
    pub waiting: bool,
    /// The worker (`host:pid`) that runs or ran it.
    pub worker: Option<String>,
    /// Its worker's last heartbeat, in milliseconds since the Unix epoch (the database's
    /// clock for PostgreSQL).
    pub heartbeat_ms: Option<i64>,
    /// When its current run started (ms).
    pub started_ms: Option<i64>,
    /// When it ended (ms).
    pub finished_ms: Option<i64>,
    /// Why it failed or was put back, or the prune note.
    pub message: Option<String>,
}

impl StoredTrial {
    /// The `state` column.
    pub fn state_name(&self) -> &'static str {
        if self.waiting {
            return "waiting";
        }
        match self.record.state {
            TrialState::Running => "running",
            TrialState::Complete => "complete",
            TrialState::Pruned => "pruned",
            TrialState::Failed => "failed",
        }
    }

    /// The row for `state` (a column value), `plan` and the other columns.
    ///
    /// # Errors
    /// [`TuneError::Storage`] for an unknown state or a plan that is not JSON.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_row(
        number: i64,
        plan: &str,
        state: &str,
        value: Option<f64>,
        retries: i64,
        worker: Option<String>,
        heartbeat_ms: Option<i64>,
        started_ms: Option<i64>,
        finished_ms: Option<i64>,
        message: Option<String>,
    ) -> Result<StoredTrial, TuneError> {
        let (state, waiting) = match state {
            "waiting" => (TrialState::Running, true),
            "running" => (TrialState::Running, false),
            "complete" => (TrialState::Complete, false),
            "pruned" => (TrialState::Pruned, false),
            "failed" => (TrialState::Failed, false),
            other => {
                return Err(TuneError::Storage(format!(
                    "trial {number} has the unknown state \"{other}\" in the study database"
                )));
            }
        };
        let plan: TrialPlan = serde_json::from_str(plan).map_err(|e| {
            TuneError::Storage(format!(
                "trial {number}'s plan in the study database is not valid: {e}"
            ))
        })?;
        Ok(StoredTrial {
            record: TrialRecord {
                number: number as u64,
                plan,
                state,
                value,
                intermediate: Vec::new(),
                retries: retries as u32,
            },
            waiting,
            worker,
            heartbeat_ms,
            started_ms,
            finished_ms,
            message,
        })
    }
}

/// One run of a trial by one worker: the trial's number and its `retries` count when
/// claimed. A worker's heartbeats and result count only while the trial is still this
/// attempt of its own (a trial failed for a lost heartbeat and started again is another).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The worker, `host:pid`.
    pub worker: String,
    /// The trial.
    pub number: u64,
    /// The trial's `retries` when it was claimed.
    pub retries: u32,
}

/// The rules a claim follows.
#[derive(Clone, Debug)]
pub struct ClaimPolicy {
    /// Who claims (`host:pid`).
    pub worker: String,
    /// A running trial without a heartbeat for this long (ms) is interrupted: its worker is
    /// gone.
    pub grace_ms: i64,
    /// Where the lock files of this study directory's workers are
    /// ([`crate::lock::WORKERS`]): a worker of this machine whose lock is free is gone at
    /// once.
    pub workers_dir: Option<PathBuf>,
    /// Retries for a failed trial.
    pub max_retries: u32,
    /// No new trial once the study holds this many (all states).
    pub max_trials: u64,
}

/// The answer to a claim.
#[derive(Clone, Debug, PartialEq)]
pub enum Claim {
    /// Run this trial (new, or a failed one started again); it is now running under the
    /// claiming worker.
    Run(Box<StoredTrial>),
    /// Nothing to start now (the oracle waits for running trials).
    Wait,
    /// No new trial will be created; `active` trials are still running or waiting elsewhere.
    Done {
        /// Running or waiting trials.
        active: usize,
    },
}

/// How a trial's run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Trained all its epochs; the objective.
    Complete(f64),
    /// Stopped by the pruner; the last reported objective.
    Pruned(Option<f64>),
    /// Crashed, killed, or its objective was missing; why.
    Failed(String),
}

/// What [`Storage::finish`] recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finished {
    /// The trial's new state; `retry` when a failure put it back as waiting.
    Recorded {
        /// The state written.
        state: TrialState,
        /// A failure with retries left: the trial waits to run again.
        retry: bool,
    },
    /// The trial is no longer this attempt's (failed for a lost heartbeat and taken by
    /// another run): nothing was written.
    Lost,
}

/// A study database. Every method is one transaction.
pub trait Storage: Send {
    /// Where the study lives, for messages, with any password replaced by `***`.
    fn location(&self) -> &str;

    /// Creates the tables if needed, then the study `name` with `settings`, or checks that
    /// the existing study has the same settings.
    ///
    /// # Errors
    /// [`TuneError::Config`] when the study exists with other settings (naming what changed);
    /// [`TuneError::Storage`] for database errors.
    ///
    /// Returns the study's identity ([`study_identity`]): the same for every worker of this
    /// study, another for a study of another name or one created again after its database
    /// was deleted.
    fn open_study(&mut self, name: &str, settings: &serde_json::Value)
    -> Result<String, TuneError>;

    /// Claims the next trial to run ([`claim_in`]).
    ///
    /// # Errors
    /// [`TuneError::Storage`].
    fn claim(
        &mut self,
        policy: &ClaimPolicy,
        decide: &mut dyn FnMut(&[TrialRecord]) -> Decision,
    ) -> Result<Claim, TuneError>;

    /// Records that `attempt`'s worker is alive; `false` when the trial is no longer this
    /// attempt's (the worker should stop its child).
    ///
    /// # Errors
    /// [`TuneError::Storage`].
    fn heartbeat(&mut self, attempt: &Attempt) -> Result<bool, TuneError>;

    /// Stores the objective after `epoch` (0-based) of trial `number` (replacing an earlier
    /// value for the same epoch, as a resumed run reports it again).
    ///
    /// # Errors
    /// [`TuneError::Storage`].
    fn report(&mut self, number: u64, epoch: u32, value: f64) -> Result<(), TuneError>;

    /// Records how `attempt` ended ([`finish_in`]).
    ///
    /// # Errors
    /// [`TuneError::Storage`].
    fn finish(
        &mut self,
        attempt: &Attempt,
        outcome: &Outcome,
        max_retries: u32,
    ) -> Result<Finished, TuneError>;

    /// Puts `attempt`'s trial back as waiting without counting a retry (the worker was
    /// interrupted by the user, not the trial).
    ///
    /// # Errors
    /// [`TuneError::Storage`].
    fn release(&mut self, attempt: &Attempt) -> Result<(), TuneError>;

    /// Every trial of the study, by number, with its intermediate values.
    ///
    /// # Errors
    /// [`TuneError::Storage`].
    fn trials(&mut self) -> Result<Vec<StoredTrial>, TuneError>;
}

/// Opens the storage `spec` names: a `postgresql://` (or `postgres://`) URL, a `sqlite://`
/// path or a plain file path; without `spec`, `study.db` in `study_dir`.
///
/// # Errors
/// [`TuneError::Storage`] naming the storage (password redacted) when it cannot be opened.
pub fn open(spec: Option<&str>, study_dir: &Path) -> Result<Box<dyn Storage>, TuneError> {
    match spec {
        Some(s) if s.starts_with("postgresql://") || s.starts_with("postgres://") => {
            Ok(Box::new(PostgresStorage::connect(s)?))
        }
        Some(s) if s.contains("://") && !s.starts_with("sqlite://") => {
            Err(TuneError::Config(format!(
                "--storage {}: unknown kind of storage; give postgresql://user:password@host/db, \
                 sqlite:///path/study.db or a file path",
                url::redact(s)
            )))
        }
        Some(s) if !s.contains("://") && s.contains('=') => Err(TuneError::Config(format!(
            "--storage {}: a keyword=value connection string is not supported (it would be \
             taken as an SQLite file name); use postgresql://user:password@host:port/db, \
             sqlite:///path/study.db or a file path",
            url::redact(s)
        ))),
        Some(s) => Ok(Box::new(SqliteStorage::open(Path::new(
            s.strip_prefix("sqlite://").unwrap_or(s),
        ))?)),
        None => Ok(Box::new(SqliteStorage::open(&study_dir.join("study.db"))?)),
    }
}

/// The database operations [`claim_in`], [`finish_in`] and [`release_in`] need, inside one
/// transaction of one study.
pub(crate) trait Tx {
    /// The database's clock, ms since the Unix epoch.
    fn now_ms(&mut self) -> Result<i64, TuneError>;
    /// Every trial of the study, by number (intermediate values not needed).
    fn load(&mut self) -> Result<Vec<StoredTrial>, TuneError>;
    /// Writes `t`'s state columns (all but the plan).
    fn update(&mut self, t: &StoredTrial) -> Result<(), TuneError>;
    /// Inserts a new trial.
    fn insert(&mut self, t: &StoredTrial) -> Result<(), TuneError>;
}

/// A new worker id: `host:pid` for the process's first worker, `host:pid-<n>` for the
/// `n`-th more (a library user running several workers in one process).
pub fn new_worker_id() -> String {
    static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let id = format!("{}:{}", hostname(), std::process::id());
    if n == 0 { id } else { format!("{id}-{n}") }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes a NUL-terminated name.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// `(host, pid)` of a worker id (`host:pid` or `host:pid-<n>`).
fn host_and_pid(worker: &str) -> Option<(&str, i32)> {
    let (host, rest) = worker.rsplit_once(':')?;
    let pid = rest.split_once('-').map_or(rest, |(p, _)| p);
    Some((host, pid.parse().ok()?))
}

/// Whether `owner` is a worker on this machine that is gone, so that its
/// trial need not wait for the grace period: the claimer itself (a worker claims only when it
/// runs no trial, so this is an earlier process that had its id), a worker whose lock file in
/// `policy.workers_dir` is free, or, without a lock file, one whose process no longer exists.
fn owner_gone(owner: &str, policy: &ClaimPolicy) -> bool {
    let Some((host, pid)) = host_and_pid(owner) else {
        return false;
    };
    if host != hostname() {
        return false;
    }
    if owner == policy.worker {
        return true;
    }
    let by_lock = policy
        .workers_dir
        .as_deref()
        .map_or(Liveness::Unknown, |d| crate::lock::liveness(d, owner));
    match by_lock {
        Liveness::Alive => false,
        Liveness::Gone => true,
        Liveness::Unknown => {
            // SAFETY: signal 0 only checks that the process exists.
            let rc = unsafe { libc::kill(pid, 0) };
            rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        }
    }
}

/// The claim transaction's logic (see the module docs): put back the trials of workers that
/// are gone, claim the lowest waiting trial, else ask `decide` (the oracle) with the whole
/// history and insert its plan as a new running trial numbered after the last.
pub(crate) fn claim_in(
    tx: &mut dyn Tx,
    policy: &ClaimPolicy,
    decide: &mut dyn FnMut(&[TrialRecord]) -> Decision,
) -> Result<Claim, TuneError> {
    let now = tx.now_ms()?;
    let mut trials = tx.load()?;
    for t in trials.iter_mut() {
        if t.record.state != TrialState::Running || t.waiting {
            continue;
        }
        let owner = t.worker.clone().unwrap_or_default();
        let why = if owner_gone(&owner, policy) {
            format!("its worker {owner} is gone")
        } else if t.heartbeat_ms.is_none_or(|h| now - h > policy.grace_ms) {
            format!(
                "no heartbeat from its worker {owner} for more than {} s",
                policy.grace_ms as f64 / 1000.0
            )
        } else {
            continue;
        };
        interrupted(t, &why);
        tx.update(t)?;
    }
    if let Some(t) = trials.iter_mut().find(|t| t.waiting) {
        t.waiting = false;
        t.worker = Some(policy.worker.clone());
        t.heartbeat_ms = Some(now);
        t.started_ms = Some(now);
        tx.update(t)?;
        return Ok(Claim::Run(Box::new(t.clone())));
    }
    let active = trials
        .iter()
        .filter(|t| t.record.state == TrialState::Running)
        .count();
    if trials.len() as u64 >= policy.max_trials {
        return Ok(Claim::Done { active });
    }
    let history: Vec<TrialRecord> = trials.iter().map(|t| t.record.clone()).collect();
    match decide(&history) {
        Decision::Run(plan) => {
            let number = trials.last().map_or(0, |t| t.record.number + 1);
            let t = StoredTrial {
                record: TrialRecord {
                    number,
                    plan,
                    state: TrialState::Running,
                    value: None,
                    intermediate: Vec::new(),
                    retries: 0,
                },
                waiting: false,
                worker: Some(policy.worker.clone()),
                heartbeat_ms: Some(now),
                started_ms: Some(now),
                finished_ms: None,
                message: None,
            };
            tx.insert(&t)?;
            Ok(Claim::Run(Box::new(t)))
        }
        Decision::Wait => Ok(Claim::Wait),
        Decision::Done => Ok(Claim::Done { active }),
    }
}

/// Puts `t` back as waiting, its retries unchanged: its worker was interrupted (stopped,
/// killed, or lost), not the trial.
fn interrupted(t: &mut StoredTrial, why: &str) {
    t.waiting = true;
    t.worker = None;
    t.message = Some(format!(
        "interrupted ({why}): runs again from its last checkpoint, not counted as a failure"
    ));
}

/// Marks `t` failed, or waiting with one more retry while `retries < max_retries`.
fn fail_or_retry(t: &mut StoredTrial, why: String, max_retries: u32, now: i64) {
    if t.record.retries < max_retries {
        t.waiting = true;
        t.record.retries += 1;
        t.message = Some(format!(
            "{why}; retry {} of {max_retries}",
            t.record.retries
        ));
    } else {
        t.record.state = TrialState::Failed;
        t.finished_ms = Some(now);
        t.message = Some(why);
    }
    t.worker = None;
}

/// Whether `t` is still `attempt`'s: running under its worker with the same retry count.
fn owns(t: &StoredTrial, attempt: &Attempt) -> bool {
    t.record.state == TrialState::Running
        && !t.waiting
        && t.worker.as_deref() == Some(attempt.worker.as_str())
        && t.record.retries == attempt.retries
}

/// The finish transaction's logic: nothing when the trial is no longer `attempt`'s
/// ([`Finished::Lost`]); else its final state and value, or for a failure with retries left,
/// waiting again.
pub(crate) fn finish_in(
    tx: &mut dyn Tx,
    attempt: &Attempt,
    outcome: &Outcome,
    max_retries: u32,
) -> Result<Finished, TuneError> {
    let now = tx.now_ms()?;
    let trials = tx.load()?;
    let Some(mut t) = trials
        .into_iter()
        .find(|t| t.record.number == attempt.number)
    else {
        return Ok(Finished::Lost);
    };
    if !owns(&t, attempt) {
        return Ok(Finished::Lost);
    }
    let retry = match outcome {
        Outcome::Complete(v) => {
            t.record.state = TrialState::Complete;
            t.record.value = Some(*v);
            t.finished_ms = Some(now);
            t.message = None;
            false
        }
        Outcome::Pruned(v) => {
            t.record.state = TrialState::Pruned;
            t.record.value = *v;
            t.finished_ms = Some(now);
            false
        }
        Outcome::Failed(why) => {
            fail_or_retry(&mut t, why.clone(), max_retries, now);
            t.worker = Some(attempt.worker.clone());
            t.waiting
        }
    };
    if retry {
        t.worker = None;
    }
    t.heartbeat_ms = Some(now);
    tx.update(&t)?;
    Ok(Finished::Recorded {
        state: t.record.state,
        retry,
    })
}

/// The release transaction's logic: `attempt`'s trial waits again, its retries unchanged.
pub(crate) fn release_in(tx: &mut dyn Tx, attempt: &Attempt) -> Result<(), TuneError> {
    let trials = tx.load()?;
    if let Some(mut t) = trials
        .into_iter()
        .find(|t| t.record.number == attempt.number && owns(t, attempt))
    {
        interrupted(&mut t, "its worker was stopped");
        tx.update(&t)?;
    }
    Ok(())
}

/// Adds the rows of `kiln_trial_values` (`(number, epoch, value)`, ordered by number and
/// epoch) to the trials' `intermediate` values; `trials` are ordered by number (both backends
/// select them so). A row of an unknown trial is ignored.
pub(crate) fn attach_intermediate(
    trials: &mut [StoredTrial],
    values: impl IntoIterator<Item = (i64, i64, f64)>,
) {
    for (n, epoch, value) in values {
        if let Ok(i) = trials.binary_search_by_key(&(n as u64), |t| t.record.number) {
            trials[i].record.intermediate.push((epoch as u32, value));
        }
    }
}

/// The settings keys whose values differ between a study's stored settings and `new`.
pub(crate) fn changed_settings(old: &serde_json::Value, new: &serde_json::Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let (o, n) = (
        old.as_object().unwrap_or(&empty),
        new.as_object().unwrap_or(&empty),
    );
    let mut keys: Vec<&String> = o.keys().chain(n.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| o.get(*k) != n.get(*k))
        .cloned()
        .collect()
}

/// The error for a study whose settings changed.
pub(crate) fn changed_error(
    name: &str,
    location: &str,
    changed: &[String],
    old: &serde_json::Value,
    new: &serde_json::Value,
) -> TuneError {
    let first = changed.first().and_then(|k| {
        let (o, n) = (old.get(k)?, new.get(k)?);
        let (at, was, now) = first_difference(Some(o), Some(n), k.clone())?;
        Some(format!(
            " (first difference: {at}: was {}, now {})",
            short(was),
            short(now)
        ))
    });
    TuneError::Config(format!(
        "the study \"{name}\" in {location} was started with other settings: {} changed since{}. \
         A study keeps its search space, base config and objective: put them back, or start a \
         new study (another --study-dir, or another [tuner] study_name with --storage)",
        changed.join(", "),
        first.unwrap_or_default()
    ))
}

/// The path (`<at>[1].values`, `<at>.fit.epochs`) of the first place where `a` and `b`
/// differ, with the two values there (`None`: absent), or `None` when they are equal.
type Difference<'a> = (
    String,
    Option<&'a serde_json::Value>,
    Option<&'a serde_json::Value>,
);

fn first_difference<'a>(
    a: Option<&'a serde_json::Value>,
    b: Option<&'a serde_json::Value>,
    at: String,
) -> Option<Difference<'a>> {
    use serde_json::Value as J;
    if a == b {
        return None;
    }
    match (a, b) {
        (Some(J::Object(x)), Some(J::Object(y))) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .find_map(|k| first_difference(x.get(k), y.get(k), format!("{at}.{k}")))
        }
        (Some(J::Array(x)), Some(J::Array(y))) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(Some(p), Some(q), format!("{at}[{i}]"))),
        _ => Some((at, a, b)),
    }
}

/// A JSON value in a message, cut to 80 characters; `absent` for none.
fn short(v: Option<&serde_json::Value>) -> String {
    match v {
        None => "absent".into(),
        Some(v) => {
            let t = v.to_string();
            if t.chars().count() > 80 {
                format!("{}...", t.chars().take(80).collect::<String>())
            } else {
                t
            }
        }
    }
}

/// A study's identity: `<name>#<id>@<created_ms>` (its row in `kiln_studies`, with its
/// creation time in ms since the Unix epoch, so that a study created again in a new database
/// file under the same name and id differs). Trial directories are stamped with it.
pub fn study_identity(name: &str, id: i64, created_ms: i64) -> String {
    format!("{name}#{id}@{created_ms}")
}

/// 64-bit FNV-1a of `text`, in hex: the `fingerprint` column (a quick check; the settings
/// JSON is what is compared).
pub(crate) fn fingerprint(text: &str) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

/// Milliseconds since the Unix epoch on this machine.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests;
