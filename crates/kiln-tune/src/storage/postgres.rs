//! The PostgreSQL study database, for several workers on several machines: the same tables as
//! SQLite (`BIGINT` and `DOUBLE PRECISION` columns), times from the server's clock (so that
//! workers' clocks need not agree), claims serialised by locking the study's row
//! (`SELECT ... FOR UPDATE`), table creation by a transaction-level advisory lock.
//!
//! The URL's password never leaves this module: messages name the storage by
//! [`super::url::redact`] and database errors pass through [`super::url::scrub`].

use postgres::{Client, NoTls, Transaction};

use super::url::{redact, scrub};
use super::{
    Attempt, Claim, ClaimPolicy, Finished, Outcome, Storage, StoredTrial, Tx, attach_intermediate,
    changed_error, changed_settings, claim_in, fingerprint, finish_in, release_in, study_identity,
};
use crate::error::TuneError;
use crate::trial::{Decision, TrialRecord};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS kiln_studies (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    fingerprint TEXT NOT NULL,
    settings TEXT NOT NULL,
    created_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS kiln_trials (
    study_id BIGINT NOT NULL REFERENCES kiln_studies(id),
    number BIGINT NOT NULL,
    plan TEXT NOT NULL,
    state TEXT NOT NULL,
    value DOUBLE PRECISION,
    retries BIGINT NOT NULL DEFAULT 0,
    worker TEXT,
    heartbeat_ms BIGINT,
    started_ms BIGINT,
    finished_ms BIGINT,
    message TEXT,
    PRIMARY KEY (study_id, number)
);
CREATE TABLE IF NOT EXISTS kiln_trial_values (
    study_id BIGINT NOT NULL,
    number BIGINT NOT NULL,
    epoch BIGINT NOT NULL,
    value DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (study_id, number, epoch)
);
";

/// The server's clock in ms since the Unix epoch, as SQL.
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// Any number, so that concurrent first workers create the tables one after the other.
const SCHEMA_LOCK: i64 = 0x6b696c6e_74756e65; // "klntune"

/// `e` in words with its causes (a server's error is "db error" alone; its cause says what:
/// `FATAL: sorry, too many clients already`), scrubbed of `url`'s password.
fn describe(e: &postgres::Error, url: &str) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text += &format!(": {c}");
        cause = c.source();
    }
    scrub(&text, url)
}

/// A study in a PostgreSQL database.
pub struct PostgresStorage {
    client: Client,
    url: String,
    location: String,
    study: Option<i64>,
}

impl PostgresStorage {
    /// Connects to `url` (`postgresql://user:password@host[:port]/db[?...]`) without TLS.
    ///
    /// # Errors
    /// [`TuneError::Storage`] naming the redacted URL.
    pub fn connect(url: &str) -> Result<PostgresStorage, TuneError> {
        let location = redact(url);
        let client = Client::connect(url, NoTls).map_err(|e| {
            TuneError::Storage(format!(
                "cannot connect to the study database {location}: {}",
                describe(&e, url)
            ))
        })?;
        Ok(PostgresStorage {
            client,
            url: url.to_string(),
            location,
            study: None,
        })
    }

    fn err(&self) -> impl Fn(postgres::Error) -> TuneError + '_ {
        move |e| {
            TuneError::Storage(format!(
                "study database {}: {}",
                self.location,
                describe(&e, &self.url)
            ))
        }
    }

    fn study(&self) -> Result<i64, TuneError> {
        self.study.ok_or_else(|| {
            TuneError::Storage("the study database was used before open_study".into())
        })
    }

    /// Runs `f` in a transaction holding the study row's lock.
    fn in_tx<R>(
        &mut self,
        f: impl FnOnce(&mut dyn Tx) -> Result<R, TuneError>,
    ) -> Result<R, TuneError> {
        let study = self.study()?;
        let (url, location) = (self.url.clone(), self.location.clone());
        let err = move |e: postgres::Error| {
            TuneError::Storage(format!("study database {location}: {}", describe(&e, &url)))
        };
        let mut tx = self.client.transaction().map_err(&err)?;
        tx.query_one(
            "SELECT id FROM kiln_studies WHERE id = $1 FOR UPDATE",
            &[&study],
        )
        .map_err(&err)?;
        let mut ptx = PgTx {
            tx: &mut tx,
            study,
            err: &err,
        };
        let r = f(&mut ptx)?;
        tx.commit().map_err(&err)?;
        Ok(r)
    }
}

struct PgTx<'a, 'b> {
    tx: &'a mut Transaction<'b>,
    study: i64,
    err: &'a dyn Fn(postgres::Error) -> TuneError,
}

impl Tx for PgTx<'_, '_> {
    fn now_ms(&mut self) -> Result<i64, TuneError> {
        let row = self
            .tx
            .query_one(&format!("SELECT {NOW_MS}"), &[])
            .map_err(self.err)?;
        Ok(row.get(0))
    }

    fn load(&mut self) -> Result<Vec<StoredTrial>, TuneError> {
        load(self.tx, self.study, self.err)
    }

    fn update(&mut self, t: &StoredTrial) -> Result<(), TuneError> {
        self.tx
            .execute(
                "UPDATE kiln_trials SET state = $3, value = $4, retries = $5, worker = $6, \
                 heartbeat_ms = $7, started_ms = $8, finished_ms = $9, message = $10 \
                 WHERE study_id = $1 AND number = $2",
                &[
                    &self.study,
                    &(t.record.number as i64),
                    &t.state_name(),
                    &t.record.value,
                    &(t.record.retries as i64),
                    &t.worker,
                    &t.heartbeat_ms,
                    &t.started_ms,
                    &t.finished_ms,
                    &t.message,
                ],
            )
            .map_err(self.err)?;
        Ok(())
    }

    fn insert(&mut self, t: &StoredTrial) -> Result<(), TuneError> {
        let plan = serde_json::to_string(&t.record.plan).expect("plans serialize");
        self.tx
            .execute(
                "INSERT INTO kiln_trials (study_id, number, plan, state, value, retries, worker, \
                 heartbeat_ms, started_ms, finished_ms, message) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                &[
                    &self.study,
                    &(t.record.number as i64),
                    &plan,
                    &t.state_name(),
                    &t.record.value,
                    &(t.record.retries as i64),
                    &t.worker,
                    &t.heartbeat_ms,
                    &t.started_ms,
                    &t.finished_ms,
                    &t.message,
                ],
            )
            .map_err(self.err)?;
        Ok(())
    }
}

/// Every trial of `study` with its intermediate values.
fn load(
    client: &mut impl postgres::GenericClient,
    study: i64,
    err: &dyn Fn(postgres::Error) -> TuneError,
) -> Result<Vec<StoredTrial>, TuneError> {
    let rows = client
        .query(
            "SELECT number, plan, state, value, retries, worker, heartbeat_ms, started_ms, \
             finished_ms, message FROM kiln_trials WHERE study_id = $1 ORDER BY number",
            &[&study],
        )
        .map_err(err)?;
    let mut trials = Vec::with_capacity(rows.len());
    for r in rows {
        trials.push(StoredTrial::from_row(
            r.get(0),
            r.get::<_, &str>(1),
            r.get::<_, &str>(2),
            r.get(3),
            r.get(4),
            r.get(5),
            r.get(6),
            r.get(7),
            r.get(8),
            r.get(9),
        )?);
    }
    let values = client
        .query(
            "SELECT number, epoch, value FROM kiln_trial_values WHERE study_id = $1 \
             ORDER BY number, epoch",
            &[&study],
        )
        .map_err(err)?;
    attach_intermediate(
        &mut trials,
        values.iter().map(|v| (v.get(0), v.get(1), v.get(2))),
    );
    Ok(trials)
}

impl Storage for PostgresStorage {
    fn location(&self) -> &str {
        &self.location
    }

    fn open_study(
        &mut self,
        name: &str,
        settings: &serde_json::Value,
    ) -> Result<String, TuneError> {
        let (url, location) = (self.url.clone(), self.location.clone());
        let err = |e: postgres::Error| {
            TuneError::Storage(format!("study database {location}: {}", describe(&e, &url)))
        };
        let text = settings.to_string();
        let mut tx = self.client.transaction().map_err(err)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
            .map_err(err)?;
        tx.batch_execute(SCHEMA).map_err(err)?;
        let found = tx
            .query_opt(
                "SELECT id, settings, created_ms FROM kiln_studies WHERE name = $1",
                &[&name],
            )
            .map_err(err)?;
        let (id, created): (i64, i64) = match found {
            Some(row) => {
                let old: serde_json::Value =
                    serde_json::from_str(row.get::<_, &str>(1)).unwrap_or_default();
                let changed = changed_settings(&old, settings);
                if !changed.is_empty() {
                    return Err(changed_error(name, &location, &changed, &old, settings));
                }
                (row.get(0), row.get(2))
            }
            None => {
                let row = tx
                    .query_one(
                        &format!(
                            "INSERT INTO kiln_studies (name, fingerprint, settings, created_ms) \
                             VALUES ($1, $2, $3, {NOW_MS}) RETURNING id, created_ms"
                        ),
                        &[&name, &fingerprint(&text), &text],
                    )
                    .map_err(err)?;
                (row.get(0), row.get(1))
            }
        };
        tx.commit().map_err(err)?;
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
        let n = self
            .client
            .execute(
                &format!(
                    "UPDATE kiln_trials SET heartbeat_ms = {NOW_MS} WHERE study_id = $1 AND \
                     number = $2 AND state = 'running' AND worker = $3 AND retries = $4"
                ),
                &[
                    &study,
                    &(attempt.number as i64),
                    &attempt.worker,
                    &(attempt.retries as i64),
                ],
            )
            .map_err(self.err())?;
        Ok(n == 1)
    }

    fn report(&mut self, number: u64, epoch: u32, value: f64) -> Result<(), TuneError> {
        let study = self.study()?;
        self.client
            .execute(
                "INSERT INTO kiln_trial_values (study_id, number, epoch, value) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (study_id, number, epoch) \
                 DO UPDATE SET value = excluded.value",
                &[&study, &(number as i64), &i64::from(epoch), &value],
            )
            .map_err(self.err())?;
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
        let (url, location) = (self.url.clone(), self.location.clone());
        let err = move |e: postgres::Error| {
            TuneError::Storage(format!("study database {location}: {}", describe(&e, &url)))
        };
        load(&mut self.client, study, &err)
    }
}
