//! Two `kiln tune` workers on one real PostgreSQL database (KILN_TEST_POSTGRES_URL, started by
//! scripts/test.sh) finish a 10-trial study together: no duplicate, none lost, and the
//! database password appears in no output, table or file.

mod common;
mod tune_common;

use tune_common::{output_text, trials, tune_command, write_study};

const NEEDS_SERVER: &str = "KILN_TEST_POSTGRES_URL is not set: start a throwaway cluster with \
    `scripts/postgres-test-server.sh start` and export the URL it prints, e.g. \
    KILN_TEST_POSTGRES_URL=postgresql://kiln:PASSWORD@127.0.0.1:55432/kiln_test \
    (scripts/test.sh and .ci/run do both)";

#[test]
#[ignore = "needs PostgreSQL (KILN_TEST_POSTGRES_URL; scripts/test.sh starts one) and takes about 30 s"]
fn two_workers_share_a_study_in_postgres() {
    let url = std::env::var("KILN_TEST_POSTGRES_URL").unwrap_or_else(|_| panic!("{NEEDS_SERVER}"));
    let password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, p)| p.to_string())
        .expect("the test URL has a password (postgresql://user:password@host/db)");
    let dir = common::scratch("tune-pg");
    let name = format!(
        "pg-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let config = write_study(
        &dir,
        "pg",
        &format!("max_trials = 10\nstudy_name = \"{name}\"\nheartbeat_interval = 1"),
    );
    // Each worker has its own study directory (as on two machines); the database is shared.
    let workers: Vec<_> = ["a", "b"]
        .iter()
        .map(|w| {
            tune_command(&config, &dir.join(w), &["--storage", &url])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<_> = workers
        .into_iter()
        .map(|w| w.wait_with_output().unwrap())
        .collect();
    for o in &outputs {
        let text = output_text(o);
        assert!(o.status.success(), "{text}");
        assert!(
            !text.contains(&password),
            "the password leaked into the output:\n{text}"
        );
        assert!(text.contains("kiln:***@"), "{text}");
    }
    let all = trials(&config, &dir.join("a"), Some(&url));
    let numbers: Vec<u64> = all.iter().map(|t| t.record.number).collect();
    assert_eq!(numbers, (0..10).collect::<Vec<_>>());
    assert!(all.iter().all(|t| t.state_name() == "complete"));
    // Both workers trained trials, and each trial ran in exactly one of them.
    let ran = |w: &str| -> Vec<u64> {
        let trials = dir.join(w).join("trials");
        let mut v: Vec<u64> = std::fs::read_dir(&trials)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().parse().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let (a, b) = (ran("a"), ran("b"));
    assert!(!a.is_empty() && !b.is_empty(), "a ran {a:?}, b ran {b:?}");
    let mut both: Vec<u64> = a.iter().chain(&b).copied().collect();
    both.sort();
    assert_eq!(both, numbers, "a ran {a:?}, b ran {b:?}");
    // Nor is it in the trials' rows.
    for t in &all {
        let row = format!("{:?}", t);
        assert!(!row.contains(&password), "{row}");
    }
    // No file of either study directory (configs, logs, TensorBoard events) holds the password.
    fn scan(dir: &std::path::Path, password: &str) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                scan(&p, password);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                let found = bytes
                    .windows(password.len())
                    .any(|w| w == password.as_bytes());
                assert!(!found, "the password is in {}", p.display());
            }
        }
    }
    scan(&dir, &password);
    std::fs::remove_dir_all(&dir).unwrap();
}
