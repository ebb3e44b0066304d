//! A 12-trial study killed with SIGKILL five times, each kill waiting for an event of its own
//! (start-up, a trial's child starting, its first checkpoint, its first epoch, the end of a
//! trial), and resumed after each, ends with 12 complete trials and none failed, although
//! `max_retries_per_trial = 0`: an interrupted trial is not a failure, it runs again from its
//! checkpoint.

mod common;
mod tune_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tune_common::{output_text, trials, tune_command, wait_until, write_study_with};

/// The size of every file under `dir`, recursively.
fn sizes(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(sizes(&path));
        } else if let Ok(m) = entry.metadata() {
            out.insert(path, m.len());
        }
    }
    out
}

/// The trial a file under `trials/` belongs to.
fn trial_of(path: &Path) -> Option<u64> {
    path.ancestors()
        .find(|a| a.parent().and_then(Path::file_name) == Some("trials".as_ref()))
        .and_then(|t| t.file_name()?.to_str()?.parse().ok())
}

/// The moment a kill waits for, in a trial numbered `from` or more, in the run of the tuner
/// started after `before` (the sizes of the files under `trials` then) was taken.
#[derive(Clone, Copy, Debug)]
enum Moment {
    /// The tuner printed its table's header: the study is open, no trial claimed yet.
    StartUp,
    /// A trial's `kiln train` wrote its first output.
    ChildStarted,
    /// A running trial (no `history.json` yet) committed a checkpoint (`kiln train` writes it
    /// under a temporary name, then renames it `ckpt-<N>`).
    Checkpoint,
    /// A running trial's epoch CSV got a new row.
    Epoch,
    /// The tuner printed a finished trial's line: between two trials.
    TrialEnded,
}

impl Moment {
    /// Whether the moment has come: `Some(trial)` it came in (`from` for the start-up).
    fn reached(
        self,
        from: u64,
        out: &str,
        trials: &Path,
        before: &BTreeMap<PathBuf, u64>,
    ) -> Option<u64> {
        let now = sizes(trials);
        let new = |p: &&PathBuf| {
            now[*p] > before.get(*p).copied().unwrap_or(0) && trial_of(p).is_some_and(|n| n >= from)
        };
        let running = |p: &PathBuf| {
            trial_of(p).is_some_and(|n| !trials.join(n.to_string()).join("history.json").exists())
        };
        let named = |p: &PathBuf, n: &str| p.file_name() == Some(n.as_ref());
        let mut grown = now.keys().filter(new);
        let trial = |p: &PathBuf| trial_of(p);
        match self {
            Moment::StartUp => out.contains("trial  state").then_some(from),
            Moment::ChildStarted => grown.find(|p| named(p, "train.log")).and_then(trial),
            Moment::Checkpoint => grown
                .find(|p| named(p, "manifest.json") && committed(p) && running(p))
                .and_then(trial),
            Moment::Epoch => grown
                .find(|p| named(p, "tune-epochs.csv") && running(p))
                .and_then(trial),
            Moment::TrialEnded => out.lines().find_map(|l| {
                let mut words = l.split_whitespace();
                let n = words.next().and_then(|w| w.parse::<u64>().ok())?;
                (n >= from && words.next() == Some("complete")).then_some(n)
            }),
        }
    }
}

/// Whether `path` lies in a committed checkpoint (`checkpoints/ckpt-<N>/`).
fn committed(path: &Path) -> bool {
    path.parent().is_some_and(|d| {
        d.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("ckpt-"))
            && d.parent().and_then(Path::file_name) == Some("checkpoints".as_ref())
    })
}

#[test]
fn kill_9_five_times_and_resume_loses_no_trial() {
    let dir = common::scratch("tune-kill");
    // No retries, and the first failure would end the study: every trial must complete.
    let config = write_study_with(
        &dir,
        "kill",
        "max_trials = 12\nmax_retries_per_trial = 0\nmax_consecutive_failed_trials = 1",
        "",
    );
    let study = dir.join("study");
    let moments = [
        Moment::StartUp,
        Moment::ChildStarted,
        Moment::Checkpoint,
        Moment::Epoch,
        Moment::TrialEnded,
    ];
    // Kill k comes in trial 2k or later, so that the kills spread over the study.
    let mut checkpointed = None;
    for (k, moment) in moments.into_iter().enumerate() {
        let from = 2 * k as u64;
        let out_path = dir.join(format!("tuner-{k}.out"));
        let before = sizes(&study.join("trials"));
        let err_path = dir.join(format!("tuner-{k}.err"));
        let mut child = tune_command(&config, &study, &[])
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap();
        let mut hit = None;
        wait_until(&format!("kill {k} ({moment:?})"), || {
            let out = std::fs::read_to_string(&out_path).unwrap_or_default();
            if let Some(status) = child.try_wait().unwrap() {
                let err = std::fs::read_to_string(&err_path).unwrap_or_default();
                panic!("the tuner ended ({status}) before kill {k} ({moment:?}):\n{out}\n{err}");
            }
            hit = moment.reached(from, &out, &study.join("trials"), &before);
            hit.is_some()
        });
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        eprintln!("killed at {moment:?} in trial {hit:?}");
        if let Moment::Checkpoint = moment {
            checkpointed = hit;
        }
    }
    let out = tune_command(&config, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    let all = trials(&config, &study, None);
    let numbers: Vec<u64> = all.iter().map(|t| t.record.number).collect();
    assert_eq!(numbers, (0..12).collect::<Vec<_>>(), "{text}");
    let mut resumed = Vec::new();
    for t in &all {
        assert_eq!(
            (t.state_name(), t.record.retries),
            ("complete", 0),
            "trial {}: {:?}",
            t.record.number,
            t.message
        );
        assert!(t.record.value.is_some());
        let run = study.join("trials").join(t.record.number.to_string());
        // Each trial trained its 2 epochs once: a run again continues its checkpoint.
        let history = run.join("history.json");
        let h: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&history).unwrap()).unwrap();
        assert_eq!(
            h["epoch"].as_array().unwrap().len(),
            2,
            "{}",
            history.display()
        );
        let log = std::fs::read_to_string(run.join("train.log")).unwrap();
        if log.contains("Resuming from") {
            resumed.push(t.record.number);
        }
    }
    // The trial killed after its first checkpoint ran again from it.
    eprintln!("trials resumed from a checkpoint: {resumed:?}");
    let checkpointed = checkpointed.unwrap();
    assert!(
        resumed.contains(&checkpointed),
        "trial {checkpointed} started over"
    );
    // One run directory per trial, no other.
    let mut dirs: Vec<u64> = std::fs::read_dir(study.join("trials"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().parse().unwrap())
        .collect();
    dirs.sort();
    assert_eq!(dirs, numbers);
    // No orphaned `kiln train` was left behind by the kills: no trial child of this study
    // still runs.
    let ps = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(
        !ps.lines()
            .any(|l| l.contains(study.to_str().unwrap()) && l.contains(" train ")),
        "{ps}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
