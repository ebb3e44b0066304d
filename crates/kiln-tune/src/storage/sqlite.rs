//! The SQLite study database: one file (default `<study_dir>/study.db`) in WAL mode, so that
//! readers never block the worker; writers wait for each other up to a 60 s busy timeout;
//! claims, the schema and the study's row are written in `BEGIN IMMEDIATE` transactions (the
//! write lock taken before anything is read). The few "database is locked" answers SQLite
//! gives without waiting (the switch of a new file to WAL, a write whose snapshot another
//! worker's commit made stale) are retried within the same 60 s, so that workers started
//! together never fail on them.

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{
    Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior, params,
};

use super::{
    Attempt, Claim, ClaimPolicy, Finished, Outcome, Storage, StoredTrial, Tx, attach_intermediate,
    changed_error, changed_settings, claim_in, fingerprint, finish_in, now_ms, release_in,
    study_identity,
};
use crate::error::TuneError;
use crate::trial::{Decision, TrialRecord};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS kiln_studies (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    fingerprint TEXT NOT NULL,
    settings TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS kiln_trials (
    study_id INTEGER NOT NULL REFERENCES kiln_studies(id),
    number INTEGER NOT NULL,
    plan TEXT NOT NULL,
    state TEXT NOT NULL,
    value REAL,
    retries INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    heartbeat_ms INTEGER,
    started_ms INTEGER,
    finished_ms INTEGER,
    message TEXT,
    PRIMARY KEY (study_id, number)
);
CREATE TABLE IF NOT EXISTS kiln_trial_values (
    study_id INTEGER NOT NULL,
    number INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (study_id, number, epoch)
);
";

const SELECT_TRIALS: &str = "SELECT number, plan, state, value, retries, worker, heartbeat_ms, \
    started_ms, finished_ms, message FROM kiln_trials WHERE study_id = ?1 ORDER BY number";

/// A study in an SQLite file.
pub struct SqliteStorage {
    conn: Connection,
    location: String,
    study: Option<i64>,
}

fn db_err(location: &str) -> impl Fn(rusqlite::Error) -> TuneError + '_ {
    move |e| TuneError::Storage(format!("study database {location}: {e}"))
}

/// How long a writer waits for the others.
const BUSY_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether `e` is SQLite's "database is locked" or "busy".
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Pauses between tries of a busy database: 1 ms growing to 50 ms (varied by the process id
/// so that workers do not retry in step), for up to [`BUSY_TIMEOUT`].
struct Backoff {
    start: Instant,
    pause: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            start: Instant::now(),
            pause: Duration::from_micros(1_000 + u64::from(std::process::id() % 500)),
        }
    }

    /// Whether to try again after `e`: it is busy and the time is not up (then it paused).
    fn again(&mut self, e: &rusqlite::Error) -> bool {
        if !is_busy(e) || self.start.elapsed() >= BUSY_TIMEOUT {
            return false;
        }
        std::thread::sleep(self.pause);
        self.pause = (self.pause * 2).min(Duration::from_millis(50));
        true
    }
}

/// Runs `f` again while it fails with "database is locked" ([`Backoff`]).
fn retry_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let mut backoff = Backoff::new();
    loop {
        match f() {
            Err(e) if backoff.again(&e) => {}
            r => return r,
        }
    }
}

/// `BEGIN IMMEDIATE` on `conn`, tried again while busy ([`Backoff`]). (A connection runs one
/// transaction at a time: each method of the storage opens and ends its own.)
fn begin_immediate(conn: &Connection) -> rusqlite::Result<Transaction<'_>> {
    let mut backoff = Backoff::new();
    loop {
        match Transaction::new_unchecked(conn, TransactionBehavior::Immediate) {
            Err(e) if backoff.again(&e) => {}
            r => return r,
        }
    }
}

impl SqliteStorage {
    /// Opens (creating) the database file at `path`, its directory included.
    ///
    /// # Errors
    /// [`TuneError::Storage`] naming the file.
    pub fn open(path: &Path) -> Result<SqliteStorage, TuneError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| TuneError::io("create", dir, e))?;
        }
        let location = path.display().to_string();
        let conn = (|| {
            let conn = Connection::open(path)?;
            conn.busy_timeout(BUSY_TIMEOUT)?;
            retry_busy(|| conn.pragma_update(None, "journal_mode", "WAL"))?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            let tx = begin_immediate(&conn)?;
            tx.execute_batch(SCHEMA)?;
            tx.commit()?;
            Ok(conn)
        })()
        .map_err(db_err(&location))?;
        Ok(SqliteStorage {
            conn,
            location,
            study: None,
        })
    }

    fn study(&self) -> Result<i64, TuneError> {
        self.study.ok_or_else(|| {
            TuneError::Storage("the study database was used before open_study".into())
        })
    }

    /// Runs `f` in an immediate transaction with the study's [`Tx`].
    fn in_tx<R>(
        &mut self,
        f: impl FnOnce(&mut dyn Tx) -> Result<R, TuneError>,
    ) -> Result<R, TuneError> {
        let study = self.study()?;
        let location = self.location.clone();
        let err = db_err(&location);
        let tx = begin_immediate(&self.conn).map_err(&err)?;
        let mut stx = SqliteTx {
            tx: &tx,
            study,
            location: &location,
        };
        let r = f(&mut stx)?;
        tx.commit().map_err(&err)?;
        Ok(r)
    }
}

struct SqliteTx<'a> {
    tx: &'a Transaction<'a>,
    study: i64,
    location: &'a str,
}

impl Tx for SqliteTx<'_> {
    fn now_ms(&mut self) -> Result<i64, TuneError> {
        Ok(now_ms())
    }

    fn load(&mut self) -> Result<Vec<StoredTrial>, TuneError> {
        load(self.tx, self.study, self.location)
    }

    fn update(&mut self, t: &StoredTrial) -> Result<(), TuneError> {
        self.tx
            .execute(
                "UPDATE kiln_trials SET state = ?3, value = ?4, retries = ?5, worker = ?6, \
                 heartbeat_ms = ?7, started_ms = ?8, finished_ms = ?9, message = ?10 \
                 WHERE study_id = ?1 AND number = ?2",
                params![
                    self.study,
                    t.record.number as i64,
                    t.state_name(),
                    t.record.value,
                    t.record.retries as i64,
                    t.worker,
                    t.heartbeat_ms,
                    t.started_ms,
                    t.finished_ms,
                    t.message
                ],
            )
            .map_err(db_err(self.location))?;
        Ok(())
    }

    fn insert(&mut self, t: &StoredTrial) -> Result<(), TuneError> {
        let plan = serde_json::to_string(&t.record.plan).expect("plans serialize");
        self.tx
            .execute(
                "INSERT INTO kiln_trials (study_id, number, plan, state, value, retries, worker, \
                 heartbeat_ms, started_ms, finished_ms, message) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    self.study,
                    t.record.number as i64,
                    plan,
                    t.state_name(),
                    t.record.value,
                    t.record.retries as i64,
                    t.worker,
                    t.heartbeat_ms,
                    t.started_ms,
                    t.finished_ms,
                    t.message
                ],
            )
            .map_err(db_err(self.location))?;
        Ok(())
    }
}

/// Every trial of `study` with its intermediate values.
fn load(conn: &Connection, study: i64, location: &str) -> Result<Vec<StoredTrial>, TuneError> {
    let err = db_err(location);
    let mut stmt = conn.prepare_cached(SELECT_TRIALS).map_err(&err)?;
    let rows = stmt
        .query_map([study], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<f64>>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, Option<i64>>(6)?,
                r.get::<_, Option<i64>>(7)?,
                r.get::<_, Option<i64>>(8)?,
                r.get::<_, Option<String>>(9)?,
            ))
        })
        .map_err(&err)?;
    let mut trials = Vec::new();
    for row in rows {
        let (n, plan, state, value, retries, worker, hb, started, finished, message) =
            row.map_err(&err)?;
        trials.push(StoredTrial::from_row(
            n, &plan, &state, value, retries, worker, hb, started, finished, message,
        )?);
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT number, epoch, value FROM kiln_trial_values WHERE study_id = ?1 \
             ORDER BY number, epoch",
        )
        .map_err(&err)?;
    let values = stmt
        .query_map([study], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, f64>(2)?,
            ))
        })
        .map_err(&err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(&err)?;
    attach_intermediate(&mut trials, values);
    Ok(trials)
}

impl Storage for SqliteStorage {
    fn location(&self) -> &str {
        &self.location
    }

    fn open_study(
        &mut self,
        name: &str,
        settings: &serde_json::Value,
    ) -> Result<String, TuneError> {
        let location = self.location.clone();
        let err = db_err(&location);
        let text = settings.to_string();
        let tx = begin_immediate(&self.conn).map_err(&err)?;
        let found: Option<(i64, String, i64)> = tx
            .query_row(
                "SELECT id, settings, created_ms FROM kiln_studies WHERE name = ?1",
                [name],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(&err)?;
        let (id, created) = match found {
            Some((id, stored, created)) => {
                let old: serde_json::Value = serde_json::from_str(&stored).unwrap_or_default();
                let changed = changed_settings(&old, settings);
                if !changed.is_empty() {
                    return Err(changed_error(name, &location, &changed, &old, settings));
                }
                (id, created)
            }
            None => {
                let created = now_ms();
                tx.execute(
                    "INSERT INTO kiln_studies (name, fingerprint, settings, created_ms) \
                     VALUES (?1, ?2, ?3, ?4)",
                    params![name, fingerprint(&text), text, created],
                )
                .map_err(&err)?;
                (tx.last_insert_rowid(), created)
            }
        };
        tx.commit().map_err(&err)?;
        self.study = Some(id);
        Ok(study_identity(name, id, created))
    }

    fn claim(
        &mut self,
        policy: &ClaimPolicy,
        decide: &mut dyn FnMut(&[TrialRecord]) -> Decision,
    ) -> Result<Claim, TuneError> {
        self.in_tx(|tx| claim_in(tx, policy, decide))
    }

    fn heartbeat(&mut self, attempt: &Attempt) -> Result<bool, TuneError> {
        let study = self.study()?;
        let n = retry_busy(|| {
            self.conn.execute(
                "UPDATE kiln_trials SET heartbeat_ms = ?1 WHERE study_id = ?2 AND number = ?3 \
                 AND state = 'running' AND worker = ?4 AND retries = ?5",
                params![
                    now_ms(),
                    study,
                    attempt.number as i64,
                    attempt.worker,
                    attempt.retries as i64
                ],
            )
        })
        .map_err(db_err(&self.location))?;
        Ok(n == 1)
    }

    fn report(&mut self, number: u64, epoch: u32, value: f64) -> Result<(), TuneError> {
        let study = self.study()?;
        retry_busy(|| {
            self.conn.execute(
                "INSERT INTO kiln_trial_values (study_id, number, epoch, value) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (study_id, number, epoch) \
                 DO UPDATE SET value = excluded.value",
                params![study, number as i64, epoch as i64, value],
            )
        })
        .map_err(db_err(&self.location))?;
        Ok(())
    }

    fn finish(
        &mut self,
        attempt: &Attempt,
        outcome: &Outcome,
        max_retries: u32,
    ) -> Result<Finished, TuneError> {
        self.in_tx(|tx| finish_in(tx, attempt, outcome, max_retries))
    }

    fn release(&mut self, attempt: &Attempt) -> Result<(), TuneError> {
        self.in_tx(|tx| release_in(tx, attempt))
    }

    fn trials(&mut self) -> Result<Vec<StoredTrial>, TuneError> {
        let study = self.study()?;
        load(&self.conn, study, &self.location)
    }
}
