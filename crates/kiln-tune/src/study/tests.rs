//! The study loop with a stand-in for `kiln train` (a shell script writing what kiln writes:
//! the per-epoch CSV and `history.json`), so that these tests need no model.

use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::trial::TrialRecord;

const BASE: &str = "name = \"m\"\nseed = 1\n[fit]\nepochs = 3\n";

const TUNE: &str = r#"
base = "base.toml"
[tuner]
objective = "val_loss"
seed = 4
TUNER
[[hyperparameters]]
name = "lr"
key = "compile.optimizer.learning_rate"
type = "Choice"
values = [0.1, 0.2, 0.3]
"#;

/// A fake `kiln train`: writes 2 epoch rows and a history whose val_loss is the trial's
/// learning rate (read from its config) plus 0.5, then 0.25 below; `BEHAVIOUR` is shell code
/// run first (`$run` is the run directory).
fn fake_kiln(dir: &Path, behaviour: &str) -> PathBuf {
    let script = dir.join("kiln");
    let body = format!(
        r#"#!/bin/sh
run="$4"
{behaviour}
lr=$(sed -n 's/^learning_rate = //p' "$2" | head -1)
a=$(awk "BEGIN {{ print $lr + 0.5 }}")
b=$(awk "BEGIN {{ print $lr + 0.25 }}")
printf 'epoch,loss,val_loss\r\n0,1.0,%s\r\n1,0.9,%s\r\n' "$a" "$b" > "$run/tune-epochs.csv"
printf '{{"epoch":[0,1],"history":{{"val_loss":[%s,%s]}}}}' "$a" "$b" > "$run/history.json"
"#
    );
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn setup(dir: &Path, tuner: &str, behaviour: &str) -> (TuneConfig, StudyOptions) {
    std::fs::write(dir.join("base.toml"), BASE).unwrap();
    let path = dir.join("t.toml");
    let tuner = if tuner.contains("max_trials") {
        tuner.to_string()
    } else {
        format!("{tuner}\nmax_trials = 3")
    };
    std::fs::write(&path, TUNE.replace("TUNER", &tuner)).unwrap();
    let cfg = TuneConfig::load(&path).unwrap();
    let opts = options(&dir.join("study"), &fake_kiln(dir, behaviour));
    (cfg, opts)
}

/// A worker's options: the study directory and the (fake) kiln binary.
fn options(study_dir: &Path, kiln: &Path) -> StudyOptions {
    let mut runner = Runner::new(kiln);
    runner.poll = Duration::from_millis(20);
    StudyOptions {
        study_dir: study_dir.to_path_buf(),
        storage: None,
        max_trials: None,
        runner,
        check_config: None,
        stop: None,
    }
}

/// Polls `ready` every 10 ms for up to a minute; panics saying `what` did not happen.
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_study_records_each_trial_and_writes_the_best_config() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, opts) = setup(dir.path(), "", "");
    let mut lines = Vec::new();
    let report = run(&cfg, &opts, &mut |l| lines.push(l.to_string())).unwrap();
    assert_eq!(report.trials.len(), 3);
    for t in &report.trials {
        let lr = match t.record.plan.params["lr"] {
            crate::trial::Value::Float(f) => f,
            ref other => panic!("{other:?}"),
        };
        assert_eq!(t.record.state, TrialState::Complete);
        // The best epoch of a minimised objective: lr + 0.25.
        assert!((t.record.value.unwrap() - (lr + 0.25)).abs() < 1e-9);
        let inter: Vec<u32> = t.record.intermediate.iter().map(|(e, _)| *e).collect();
        assert_eq!(inter, vec![0, 1]);
        // The trial's config sets the parameter at its key.
        let text = std::fs::read_to_string(
            opts.study_dir
                .join("trials")
                .join(t.record.number.to_string())
                .join("config.toml"),
        )
        .unwrap();
        let table: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(
            crate::keypath::get(&table, "compile.optimizer.learning_rate")
                .and_then(|v| v.as_float()),
            Some(lr)
        );
    }
    let best = report::ranked(&report.trials, crate::trial::Direction::Min)[0];
    assert_eq!(report.best, Some(best.record.number));
    let text = std::fs::read_to_string(opts.study_dir.join("best.toml")).unwrap();
    assert!(
        text.contains(&format!("trial {}, val_loss", best.record.number)),
        "{text}"
    );
    let table: toml::Table = toml::from_str(&text).unwrap();
    assert!(table.get("callbacks").is_none(), "{text}");
    assert_eq!(table["name"].as_str(), Some("m-best"));
    assert_eq!(
        lines.iter().filter(|l| l.contains("complete")).count(),
        3,
        "{lines:?}"
    );
}

#[test]
fn a_crashed_trial_is_retried_in_its_run_directory() {
    let dir = tempfile::tempdir().unwrap();
    // Each trial crashes on its first run (no marker yet), then succeeds.
    let (cfg, opts) = setup(
        dir.path(),
        "max_retries_per_trial = 1",
        "if [ ! -f \"$run/crashed\" ]; then touch \"$run/crashed\"; kill -9 $$; fi",
    );
    let mut lines = Vec::new();
    let report = run(&cfg, &opts, &mut |l| lines.push(l.to_string())).unwrap();
    let numbers: Vec<u64> = report.trials.iter().map(|t| t.record.number).collect();
    assert_eq!(numbers, vec![0, 1, 2]);
    for t in &report.trials {
        assert_eq!(t.record.state, TrialState::Complete);
        assert_eq!(t.record.retries, 1);
    }
    let text = lines.join("\n");
    assert!(text.contains("killed by signal 9"), "{text}");
}

#[test]
fn consecutive_failures_stop_the_study_with_the_last_message() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, opts) = setup(
        dir.path(),
        "max_consecutive_failed_trials = 2\nmax_trials = 5",
        "echo 'kiln: error: out of data' >&2; exit 1",
    );
    let err = run(&cfg, &opts, &mut |_| {}).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, TuneError::Study(_)), "{msg}");
    assert!(msg.contains("2 trials failed in a row"), "{msg}");
    assert!(
        msg.contains("kiln train exited with code 1: kiln: error: out of data"),
        "{msg}"
    );
    // Resuming tries one more trial (the cause may be fixed); failing again, it stops: the
    // count runs over the study's history, not this run's.
    let err = run(&cfg, &opts, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("failed in a row"));
    let mut storage = open_storage(&cfg, &opts).unwrap();
    assert_eq!(storage.trials().unwrap().len(), 3);
}

#[test]
fn a_missing_objective_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cfg, opts) = setup(dir.path(), "", "");
    cfg.objective.name = "val_auc".into();
    let err = run(&cfg, &opts, &mut |_| {}).unwrap_err();
    assert!(err.is_usage(), "{err}");
    assert!(err.to_string().contains("\"val_auc\" is not in"), "{err}");
}

#[test]
fn a_stop_request_puts_the_trial_back() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, mut opts) = setup(
        dir.path(),
        "",
        "trap 'exit 143' TERM; touch \"$run/started\"; sleep 5 & wait",
    );
    let stop = Arc::new(AtomicI32::new(0));
    opts.stop = Some(stop.clone());
    let started = opts.study_dir.join("trials/0/started");
    // Once the trial's child runs, the stop is requested (as the CLI's SIGTERM handler does).
    let setter = std::thread::spawn(move || {
        wait_for("trial 0's start", || started.exists());
        stop.store(15, Ordering::SeqCst);
    });
    let err = run(&cfg, &opts, &mut |_| {}).unwrap_err();
    setter.join().unwrap();
    assert!(matches!(err, TuneError::Interrupted(15)), "{err}");
    let mut storage = open_storage(&cfg, &opts).unwrap();
    let trials = storage.trials().unwrap();
    assert_eq!(trials.len(), 1);
    assert!(trials[0].waiting);
    assert_eq!(trials[0].record.retries, 0);
}

/// Trial 0 trains 1 epoch; trial 1 continues it to 2 epochs (a Hyperband promotion); then
/// done.
struct Promote;

impl Oracle for Promote {
    fn next(&self, history: &[TrialRecord]) -> crate::trial::Decision {
        let mut params = crate::trial::Params::new();
        params.insert("lr".into(), crate::trial::Value::Float(0.1));
        let plan = |epochs, resume_from, round| crate::trial::TrialPlan {
            params: params.clone(),
            epochs,
            resume_from,
            bracket: Some((0, round)),
        };
        match history.len() {
            0 => crate::trial::Decision::Run(plan(1, None, 0)),
            1 if history[0].state == TrialState::Running => crate::trial::Decision::Wait,
            1 => crate::trial::Decision::Run(plan(2, Some(0), 1)),
            _ => crate::trial::Decision::Done,
        }
    }
}

#[test]
fn a_promoted_trial_continues_from_a_copy_of_its_parents_run_directory() {
    let dir = tempfile::tempdir().unwrap();
    // The fake trainer leaves a "checkpoint" naming the epochs it reached; a run that finds
    // one records where it started.
    let (cfg, opts) = setup(
        dir.path(),
        "",
        r#"epochs=$(sed -n 's/^epochs = //p' "$2" | head -1)
if [ -f "$run/checkpoints/ckpt" ]; then cp "$run/checkpoints/ckpt" "$run/resumed-from"; fi
mkdir -p "$run/checkpoints"; echo "$epochs" > "$run/checkpoints/ckpt""#,
    );
    let report = run_with(&cfg, &opts, &Promote, None, &mut |_| {}).unwrap();
    assert_eq!(report.trials.len(), 2);
    assert!(
        report
            .trials
            .iter()
            .all(|t| t.record.state == TrialState::Complete)
    );
    let trial = |n: u64| opts.study_dir.join("trials").join(n.to_string());
    // Trial 1 started from trial 0's checkpoint (1 epoch) and trained to 2.
    assert_eq!(
        std::fs::read_to_string(trial(1).join("resumed-from"))
            .unwrap()
            .trim(),
        "1"
    );
    assert_eq!(
        std::fs::read_to_string(trial(1).join("checkpoints/ckpt"))
            .unwrap()
            .trim(),
        "2"
    );
    assert!(!trial(0).join("resumed-from").exists());
    let config: toml::Table =
        toml::from_str(&std::fs::read_to_string(trial(1).join("config.toml")).unwrap()).unwrap();
    assert_eq!(config["fit"]["epochs"].as_integer(), Some(2));
}

/// Prunes a trial whose latest value is above 0.5.
struct Above;

impl Pruner for Above {
    fn should_prune(
        &self,
        trial: &TrialRecord,
        history: &[TrialRecord],
        _direction: crate::trial::Direction,
    ) -> bool {
        assert!(history.iter().any(|t| t.number == trial.number));
        trial.intermediate.last().is_some_and(|(_, v)| *v > 0.5)
    }
}

#[test]
fn a_pruned_trial_is_stopped_after_the_epoch_that_condemns_it() {
    let dir = tempfile::tempdir().unwrap();
    // Epoch 0 reports 0.75 (> 0.5: pruned), then the trainer would sleep 10 s and exit
    // successfully: only the SIGTERM makes it write `signals` and exit 143.
    let (cfg, opts) = setup(
        dir.path(),
        "max_trials = 1",
        r#"trap 'echo stopped >> "$run/signals"; exit 143' TERM
printf 'epoch,loss,val_loss\r\n0,1.0,0.75\r\n' > "$run/tune-epochs.csv"
sleep 10 & wait
exit 0"#,
    );
    let (oracle, _) = crate::search::build(&cfg).unwrap();
    let report = run_with(&cfg, &opts, oracle.as_ref(), Some(&Above), &mut |_| {}).unwrap();
    let t = &report.trials[0];
    assert_eq!(t.record.state, TrialState::Pruned);
    assert_eq!(t.record.value, Some(0.75));
    assert_eq!(t.record.intermediate, vec![(0, 0.75)]);
    let signals = opts.study_dir.join("trials/0/signals");
    assert_eq!(std::fs::read_to_string(signals).unwrap().trim(), "stopped");
    // No best.toml: no trial completed.
    assert!(!opts.study_dir.join("best.toml").exists());
}

#[test]
fn executions_train_with_their_own_seeds_and_average() {
    let dir = tempfile::tempdir().unwrap();
    // The fake trainer's val_loss is seed / 10 (the base config's seed is 1).
    let (cfg, opts) = setup(
        dir.path(),
        "executions_per_trial = 2\nmax_trials = 1",
        r#"seed=$(sed -n 's/^seed = //p' "$2" | head -1)
v=$(awk "BEGIN { print $seed / 10 }")
printf 'epoch,val_loss\r\n0,%s\r\n' "$v" > "$run/tune-epochs.csv"
printf '{"epoch":[0],"history":{"val_loss":[%s]}}' "$v" > "$run/history.json"
exit 0"#,
    );
    let report = run(&cfg, &opts, &mut |_| {}).unwrap();
    let t = &report.trials[0];
    assert!(
        (t.record.value.unwrap() - 0.15).abs() < 1e-12,
        "{:?}",
        t.record.value
    );
    // Intermediate values come from the first execution.
    assert_eq!(t.record.intermediate, vec![(0, 0.1)]);
    let second = opts.study_dir.join("trials/0/execution-1/history.json");
    assert!(second.is_file());
    let config: toml::Table = toml::from_str(
        &std::fs::read_to_string(opts.study_dir.join("trials/0/execution-1/config.toml")).unwrap(),
    )
    .unwrap();
    assert_eq!(config["seed"].as_integer(), Some(2));
}

#[test]
fn a_trial_whose_worker_died_runs_again_without_spending_a_retry() {
    let dir = tempfile::tempdir().unwrap();
    // Retries 0: a crash of the child would fail the trial for good.
    let (cfg, opts) = setup(
        dir.path(),
        "max_retries_per_trial = 0\nmax_trials = 2",
        "echo run >> \"$run/runs\"",
    );
    // A worker of this machine claimed trial 0 and was killed: its lock file is left, free.
    let mut storage = open_storage(&cfg, &opts).unwrap();
    let dead = format!("{}-dead", storage::new_worker_id());
    let policy = ClaimPolicy {
        worker: dead.clone(),
        grace_ms: 3_600_000,
        workers_dir: None,
        max_retries: 0,
        max_trials: 2,
    };
    let (oracle, _) = crate::search::build(&cfg).unwrap();
    let claim = storage.claim(&policy, &mut |h| oracle.next(h)).unwrap();
    assert!(matches!(claim, Claim::Run(_)), "{claim:?}");
    let workers = opts.study_dir.join(lock::WORKERS);
    std::fs::create_dir_all(&workers).unwrap();
    std::fs::write(workers.join(format!("{dead}.lock")), "").unwrap();
    let mut lines = Vec::new();
    let report = run(&cfg, &opts, &mut |l| lines.push(l.to_string())).unwrap();
    for t in &report.trials {
        assert_eq!(t.record.state, TrialState::Complete, "{lines:?}");
        assert_eq!(t.record.retries, 0);
    }
    // Trial 0 ran once more, in its own run directory.
    let runs = std::fs::read_to_string(opts.study_dir.join("trials/0/runs")).unwrap();
    assert_eq!(runs.lines().count(), 1);
    // The dead worker's lock file is swept once the study is done; the study's own workers
    // removed theirs.
    assert_eq!(std::fs::read_dir(&workers).unwrap().count(), 0);
}

#[test]
fn a_run_directory_in_use_is_waited_for_not_failed() {
    let dir = tempfile::tempdir().unwrap();
    // The first start of each trial finds its run directory held by a leftover process.
    let (cfg, opts) = setup(
        dir.path(),
        "max_retries_per_trial = 0\nmax_consecutive_failed_trials = 1\nmax_trials = 2",
        r#"if [ ! -f "$run/held" ]; then
  touch "$run/held"
  echo "kiln: error: the run directory $run is in use by kiln train (pid 4242 on host h): wait for it to end" >&2
  exit 2
fi"#,
    );
    let mut lines = Vec::new();
    let report = run(&cfg, &opts, &mut |l| lines.push(l.to_string())).unwrap();
    assert_eq!(report.trials.len(), 2);
    for t in &report.trials {
        assert_eq!(t.record.state, TrialState::Complete, "{lines:?}");
        assert_eq!(t.record.retries, 0);
    }
    let waits: Vec<&String> = lines.iter().filter(|l| l.contains("waiting:")).collect();
    assert_eq!(waits.len(), 2, "{lines:?}");
    assert!(
        waits[0].contains("in use by kiln train (pid 4242"),
        "{lines:?}"
    );
    // Any other exit code 2 is still a usage error that stops the study.
    let dir = tempfile::tempdir().unwrap();
    let (cfg, opts) = setup(
        dir.path(),
        "",
        "echo 'kiln: error: unknown argument --bogus' >&2; exit 2",
    );
    let err = run(&cfg, &opts, &mut |_| {}).unwrap_err();
    assert!(err.is_usage(), "{err}");
}

/// Starts 20 studies of 4 workers each at one instant (threads past a barrier; each worker
/// opens its own database connection, as a process would), in `storage` (`None`: each
/// study's own SQLite file), and checks that no worker dies and each study has its 3 trials.
fn start_twenty_studies_of_four_workers(storage: Option<String>) {
    let dir = tempfile::tempdir().unwrap();
    // A name of its own per study, for a shared PostgreSQL database.
    let tag = format!("race-{}-{}", std::process::id(), storage::now_ms());
    // Everything is written before any worker starts (a script being written while another
    // thread forks could not be executed).
    let studies: Vec<(TuneConfig, PathBuf, PathBuf)> = (0..20)
        .map(|s| {
            let d = dir.path().join(format!("s{s}"));
            std::fs::create_dir_all(&d).unwrap();
            let tuner = format!("study_name = \"{tag}-{s}\"");
            let (cfg, opts) = setup(&d, &tuner, "");
            (cfg, opts.study_dir, opts.runner.kiln)
        })
        .collect();
    let opts = |study_dir: &Path, kiln: &Path| StudyOptions {
        storage: storage.clone(),
        ..options(study_dir, kiln)
    };
    let start = Arc::new(std::sync::Barrier::new(80));
    let workers: Vec<_> = studies
        .iter()
        .flat_map(|(cfg, study_dir, kiln)| {
            (0..4).map(|_| {
                let (cfg, study_dir, kiln) = (cfg.clone(), study_dir.clone(), kiln.clone());
                let (start, storage) = (start.clone(), storage.clone());
                std::thread::spawn(move || {
                    let opts = StudyOptions {
                        storage,
                        ..options(&study_dir, &kiln)
                    };
                    let mut lines = Vec::new();
                    start.wait();
                    let r = run(&cfg, &opts, &mut |l| lines.push(l.to_string()));
                    (study_dir, r.map(|_| ()).map_err(|e| e.to_string()), lines)
                })
            })
        })
        .collect();
    let mut died = Vec::new();
    for w in workers {
        let (study_dir, result, lines) = w.join().unwrap();
        if let Err(e) = result {
            died.push(format!("{}: {e}\n{lines:?}", study_dir.display()));
        }
    }
    assert!(
        died.is_empty(),
        "{} workers died:\n{}",
        died.len(),
        died.join("\n")
    );
    for (cfg, study_dir, kiln) in &studies {
        let trials = open_storage(cfg, &opts(study_dir, kiln))
            .unwrap()
            .trials()
            .unwrap();
        let numbers: Vec<u64> = trials.iter().map(|t| t.record.number).collect();
        // The whole search space: its 3 points, each trained once.
        assert_eq!(numbers, vec![0, 1, 2], "{}", study_dir.display());
        assert!(
            trials
                .iter()
                .all(|t| t.record.state == TrialState::Complete),
            "{trials:?}"
        );
    }
}

#[test]
fn twenty_studies_of_four_workers_started_at_once_all_finish() {
    start_twenty_studies_of_four_workers(None);
}

#[test]
#[ignore = "needs PostgreSQL: KILN_TEST_POSTGRES_URL (scripts/test.sh starts one)"]
fn twenty_studies_of_four_workers_started_at_once_all_finish_in_postgres() {
    let url = std::env::var("KILN_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "KILN_TEST_POSTGRES_URL is not set: scripts/postgres-test-server.sh start prints \
             one (scripts/test.sh sets it)"
        )
    });
    start_twenty_studies_of_four_workers(Some(url));
}

#[test]
fn a_stamp_interrupted_before_its_rename_leaves_a_usable_trial_dir() {
    let dir = std::env::temp_dir().join(format!("kiln-stamp-{}", std::process::id()));
    let trial = dir.join("trials").join("0");
    std::fs::create_dir_all(&trial).unwrap();
    // What an older tuner killed between the write and the rename of its stamp left.
    std::fs::write(trial.join(format!(".{STAMP}.tmp-123-0")), "{\"stu").unwrap();
    check_trial_dirs(&dir, "mine").unwrap();
    stamp(&dir, &trial, "mine").unwrap();
    assert_eq!(stamp_owner(&trial).as_deref(), Some("mine"));
    // A run of no known study is still refused.
    std::fs::write(trial.join(STAMP), "not json").unwrap();
    std::fs::write(trial.join("train.log"), "x").unwrap();
    let e = check_trial_dirs(&dir, "mine").unwrap_err().to_string();
    assert!(e.contains("no known study"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
