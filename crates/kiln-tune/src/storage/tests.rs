//! The claim, heartbeat, retry and resume rules on a real SQLite file (and, with
//! `KILN_TEST_POSTGRES_URL`, on a real PostgreSQL database).

use super::*;
use crate::trial::{Params, Value};

fn plan(i: usize) -> TrialPlan {
    let mut params = Params::new();
    params.insert("x".into(), Value::Int(i as i64));
    TrialPlan {
        params,
        epochs: 0,
        resume_from: None,
        bracket: None,
    }
}

/// An oracle that proposes `x = <number of trials so far>`.
fn counting(h: &[TrialRecord]) -> Decision {
    Decision::Run(plan(h.len()))
}

fn policy(worker: &str, grace_ms: i64, max_retries: u32) -> ClaimPolicy {
    ClaimPolicy {
        worker: worker.into(),
        grace_ms,
        workers_dir: None,
        max_retries,
        max_trials: 3,
    }
}

fn settings() -> serde_json::Value {
    serde_json::json!({ "[[hyperparameters]]": [{ "name": "x" }], "objective": "val_loss" })
}

fn sqlite(dir: &Path) -> Box<dyn Storage> {
    let mut s: Box<dyn Storage> = Box::new(SqliteStorage::open(&dir.join("study.db")).unwrap());
    s.open_study("s", &settings()).unwrap();
    s
}

fn claimed(c: Claim) -> StoredTrial {
    match c {
        Claim::Run(t) => *t,
        other => panic!("expected a trial, got {other:?}"),
    }
}

fn attempt(worker: &str, t: &StoredTrial) -> Attempt {
    Attempt {
        worker: worker.into(),
        number: t.record.number,
        retries: t.record.retries,
    }
}

/// Workers named like this are never "gone" (no such host).
const A: &str = "host-a.test:1";
const B: &str = "host-b.test:2";

fn claims_number_trials_in_order_until_max_trials(s: &mut dyn Storage) {
    let p = policy(A, 60_000, 0);
    for n in 0..3 {
        let t = claimed(s.claim(&p, &mut counting).unwrap());
        assert_eq!(t.record.number, n);
        assert_eq!(t.record.plan, plan(n as usize));
        assert_eq!(t.record.state, TrialState::Running);
        assert_eq!(t.worker.as_deref(), Some(A));
    }
    // Three trials exist: no more, and all three still run.
    assert_eq!(
        s.claim(&p, &mut counting).unwrap(),
        Claim::Done { active: 3 }
    );
    let t1 = Attempt {
        worker: A.into(),
        number: 1,
        retries: 0,
    };
    assert!(s.heartbeat(&t1).unwrap());
    s.report(1, 0, 0.5).unwrap();
    s.report(1, 1, 0.25).unwrap();
    s.report(1, 1, 0.3).unwrap(); // a resumed run reports epoch 1 again
    assert_eq!(
        s.finish(&t1, &Outcome::Complete(0.3), 0).unwrap(),
        Finished::Recorded {
            state: TrialState::Complete,
            retry: false
        }
    );
    // Its heartbeat and a second result no longer count.
    assert!(!s.heartbeat(&t1).unwrap());
    assert_eq!(
        s.finish(&t1, &Outcome::Complete(0.9), 0).unwrap(),
        Finished::Lost
    );
    let trials = s.trials().unwrap();
    assert_eq!(trials[1].record.value, Some(0.3));
    assert_eq!(trials[1].record.intermediate, vec![(0, 0.5), (1, 0.3)]);
    assert!(trials[1].finished_ms.is_some());
    assert_eq!(
        s.claim(&p, &mut counting).unwrap(),
        Claim::Done { active: 2 }
    );
}

fn a_silent_trial_runs_again_before_a_new_one_without_spending_a_retry(s: &mut dyn Storage) {
    let t0 = claimed(s.claim(&policy(A, 60_000, 0), &mut counting).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(30));
    // B claims with a grace period A's heartbeat has outlived: A is gone, its trial was
    // interrupted (not failed): even with no retries allowed it is B's next trial (same
    // number, same plan, retries unchanged), not a new one.
    let t = claimed(s.claim(&policy(B, 10, 0), &mut counting).unwrap());
    assert_eq!(t.record.number, 0);
    assert_eq!(t.record.plan, t0.record.plan);
    assert_eq!(t.record.retries, 0);
    assert_eq!(t.worker.as_deref(), Some(B));
    let why = t.message.as_deref().unwrap();
    assert!(
        why.contains("no heartbeat from its worker host-a.test:1"),
        "{why}"
    );
    assert!(why.contains("not counted as a failure"), "{why}");
    // A finds out: its heartbeat and its result are refused, B's result counts.
    assert!(!s.heartbeat(&attempt(A, &t0)).unwrap());
    assert_eq!(
        s.finish(&attempt(A, &t0), &Outcome::Complete(1.0), 0)
            .unwrap(),
        Finished::Lost
    );
    assert!(s.heartbeat(&attempt(B, &t)).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(30));
    // Silent again: interrupted again, however often.
    let again = claimed(s.claim(&policy(A, 10, 0), &mut counting).unwrap());
    assert_eq!((again.record.number, again.record.retries), (0, 0));
    assert_eq!(
        s.finish(&attempt(A, &again), &Outcome::Complete(0.5), 0)
            .unwrap(),
        Finished::Recorded {
            state: TrialState::Complete,
            retry: false
        }
    );
    // A crash of the child (the worker's own report) with a retry left: waiting with one
    // retry spent, then claimed again first.
    let t1 = claimed(s.claim(&policy(A, 60_000, 1), &mut counting).unwrap());
    assert_eq!(t1.record.number, 1);
    assert_eq!(
        s.finish(&attempt(A, &t1), &Outcome::Failed("exit 137".into()), 1)
            .unwrap(),
        Finished::Recorded {
            state: TrialState::Running,
            retry: true
        }
    );
    let again = claimed(s.claim(&policy(A, 60_000, 1), &mut counting).unwrap());
    assert_eq!((again.record.number, again.record.retries), (1, 1));
    // An interrupt puts it back without spending a retry.
    s.release(&attempt(A, &again)).unwrap();
    let trials = s.trials().unwrap();
    assert!(trials[1].waiting);
    assert_eq!(trials[1].record.retries, 1);
    let again = claimed(s.claim(&policy(B, 60_000, 1), &mut counting).unwrap());
    assert_eq!((again.record.number, again.record.retries), (1, 1));
    // Crashed again with its retry spent: failed for good; the next claim is a new trial.
    assert_eq!(
        s.finish(&attempt(B, &again), &Outcome::Failed("exit 1".into()), 1)
            .unwrap(),
        Finished::Recorded {
            state: TrialState::Failed,
            retry: false
        }
    );
    let t2 = claimed(s.claim(&policy(B, 60_000, 1), &mut counting).unwrap());
    assert_eq!(t2.record.number, 2);
    let trials = s.trials().unwrap();
    assert_eq!(trials[1].record.state, TrialState::Failed);
    assert_eq!(trials[1].message.as_deref(), Some("exit 1"));
}

#[test]
fn sqlite_claims_number_trials_in_order_until_max_trials() {
    let dir = tempfile::tempdir().unwrap();
    claims_number_trials_in_order_until_max_trials(sqlite(dir.path()).as_mut());
}

#[test]
fn sqlite_a_silent_trial_runs_again_without_spending_a_retry() {
    let dir = tempfile::tempdir().unwrap();
    a_silent_trial_runs_again_before_a_new_one_without_spending_a_retry(
        sqlite(dir.path()).as_mut(),
    );
}

#[test]
fn a_trial_of_a_dead_local_worker_runs_again_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = sqlite(dir.path());
    let me = new_worker_id();
    let host = me.rsplit_once(':').unwrap().0.to_string();
    let claim_as = |s: &mut Box<dyn Storage>, worker: &str| {
        claimed(
            s.claim(&policy(worker, 3_600_000, 0), &mut counting)
                .unwrap(),
        )
    };
    // A process of this machine that has exited, without a lock file: its trial needs no
    // grace period.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let dead = format!("{host}:{pid}");
    claim_as(&mut s, &dead);
    let t = claim_as(&mut s, &me);
    assert_eq!((t.record.number, t.record.retries), (0, 0));
    assert!(
        t.message
            .unwrap()
            .contains(&format!("its worker {dead} is gone"))
    );
    // A worker whose lock file is free is gone though its process id lives (that of this
    // test process): the lock decides, not the process id.
    let workers = dir.path().join(crate::lock::WORKERS);
    std::fs::create_dir_all(&workers).unwrap();
    let local = |n: u32| format!("{host}:{}-{n}", std::process::id());
    let with_locks = |worker: &str| ClaimPolicy {
        workers_dir: Some(workers.clone()),
        ..policy(worker, 3_600_000, 0)
    };
    let reused = local(7);
    std::fs::write(workers.join(format!("{reused}.lock")), "").unwrap();
    assert_eq!(claim_as(&mut s, &reused).record.number, 1);
    let t = claimed(s.claim(&with_locks(&local(8)), &mut counting).unwrap());
    assert_eq!((t.record.number, t.record.retries), (1, 0));
    assert!(
        t.message
            .unwrap()
            .contains(&format!("its worker {reused} is gone"))
    );
    // A worker whose lock is held is alive: its trial stays its own.
    let alive = crate::lock::WorkerLock::register(dir.path(), &reused, "s").unwrap();
    assert_eq!(claim_as(&mut s, &reused).record.number, 2);
    assert_eq!(
        s.claim(&with_locks(&local(9)), &mut counting).unwrap(),
        Claim::Done { active: 3 }
    );
    drop(alive);
    // The claimer's own id on a running trial: an earlier process with this id (a worker
    // claims only when it runs nothing).
    let t = claimed(s.claim(&with_locks(&me), &mut counting).unwrap());
    assert_eq!((t.record.number, t.record.retries), (0, 0));
    assert!(
        t.message
            .unwrap()
            .contains(&format!("its worker {me} is gone"))
    );
}

#[test]
fn a_study_resumes_from_its_file_and_refuses_changed_settings() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s = sqlite(dir.path());
        let t = claimed(s.claim(&policy(A, 60_000, 0), &mut counting).unwrap());
        s.finish(&attempt(A, &t), &Outcome::Complete(0.7), 0)
            .unwrap();
    }
    let mut s = sqlite(dir.path());
    let trials = s.trials().unwrap();
    assert_eq!(trials.len(), 1);
    assert_eq!(trials[0].record.value, Some(0.7));
    let t = claimed(s.claim(&policy(A, 60_000, 0), &mut counting).unwrap());
    assert_eq!(t.record.number, 1);
    let mut other = SqliteStorage::open(&dir.path().join("study.db")).unwrap();
    let changed =
        serde_json::json!({ "[[hyperparameters]]": [{ "name": "y" }], "objective": "val_loss" });
    let err = other.open_study("s", &changed).unwrap_err();
    assert!(err.is_usage());
    let msg = err.to_string();
    assert!(msg.contains("[[hyperparameters]] changed"), "{msg}");
    assert!(
        msg.contains("(first difference: [[hyperparameters]][0].name: was \"x\", now \"y\")"),
        "{msg}"
    );
    assert!(msg.contains("another --study-dir"), "{msg}");
    // Another name is another study in the same file.
    other.open_study("t", &changed).unwrap();
    assert!(other.trials().unwrap().is_empty());
}

#[test]
fn concurrent_workers_never_claim_the_same_trial() {
    let dir = tempfile::tempdir().unwrap();
    drop(sqlite(dir.path()));
    let path = dir.path().join("study.db");
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut s = SqliteStorage::open(&path).unwrap();
                s.open_study("s", &settings()).unwrap();
                let worker = format!("host-{w}.test:{w}");
                let p = ClaimPolicy {
                    max_trials: 40,
                    ..policy(&worker, 60_000, 0)
                };
                let mut mine = Vec::new();
                while let Claim::Run(t) = s.claim(&p, &mut counting).unwrap() {
                    s.finish(&attempt(&worker, &t), &Outcome::Complete(1.0), 0)
                        .unwrap();
                    mine.push(t.record.number);
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<u64> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    all.sort();
    assert_eq!(all, (0..40).collect::<Vec<_>>());
    let mut s = SqliteStorage::open(&path).unwrap();
    s.open_study("s", &settings()).unwrap();
    let trials = s.trials().unwrap();
    // Each plan is the oracle's answer to the history it saw: trial n has x = n.
    for t in &trials {
        assert_eq!(t.record.plan, plan(t.record.number as usize));
        assert_eq!(t.record.state, TrialState::Complete);
    }
}

/// The URL of the PostgreSQL database `scripts/test.sh` starts; panics saying how to start
/// one when unset.
fn postgres_url() -> String {
    std::env::var("KILN_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "KILN_TEST_POSTGRES_URL is not set: scripts/test.sh starts a throwaway PostgreSQL \
             cluster and sets it (scripts/postgres-test-server.sh start prints the URL)"
        )
    })
}

/// A fresh study (a new name) in the test PostgreSQL database.
fn postgres() -> Box<dyn Storage> {
    let url = postgres_url();
    let mut s: Box<dyn Storage> = Box::new(PostgresStorage::connect(&url).unwrap());
    let name = format!("storage-test-{}-{}", std::process::id(), now_ms());
    s.open_study(&name, &settings()).unwrap();
    s
}

#[test]
#[ignore = "needs PostgreSQL: KILN_TEST_POSTGRES_URL (scripts/test.sh starts one)"]
fn postgres_claim_heartbeat_retry() {
    claims_number_trials_in_order_until_max_trials(postgres().as_mut());
    a_silent_trial_runs_again_before_a_new_one_without_spending_a_retry(postgres().as_mut());
}

#[test]
#[ignore = "needs PostgreSQL: KILN_TEST_POSTGRES_URL (scripts/test.sh starts one)"]
fn postgres_errors_never_show_the_password() {
    let url = postgres_url();
    // The right server with a wrong password: the error names the server, not the password.
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let bad = format!("{scheme}://kiln_nobody:Sup3rSecretPw@{host}");
    let err = match PostgresStorage::connect(&bad) {
        Ok(_) => panic!("a wrong password connected"),
        Err(e) => e.to_string(),
    };
    assert!(!err.contains("Sup3rSecretPw"), "{err}");
    assert!(err.contains("kiln_nobody:***@"), "{err}");
}

#[test]
fn a_keyword_value_connection_string_is_refused_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let spec = "host=127.0.0.1 port=1 password=kvsecret";
    let Err(err) = super::open(Some(spec), dir.path()) else {
        panic!("{spec} was accepted");
    };
    let text = err.to_string();
    assert!(err.is_usage(), "{text}");
    assert!(
        text.contains("use postgresql://user:password@host:port/db"),
        "{text}"
    );
    assert!(!text.contains("kvsecret"), "{text}");
    assert!(!std::path::Path::new(spec).exists());
}
