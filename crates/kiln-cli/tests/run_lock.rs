//! One writer per run directory, as a user meets it: a second `kiln train` on a directory that a
//! live `kiln train` is writing is refused at once (exit 2) naming the first's pid; a SIGKILLed
//! holder leaves no lock behind, so the next run resumes. And a run directory whose checkpoints
//! are all unusable is refused (exit 2, each checkpoint named) instead of silently trained anew.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{mlp_config, require_data, scratch, text, train_command};

/// Waits until `ready` holds (polling), panicking after two minutes.
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The names of the completed checkpoints (`ckpt-*`), sorted.
fn checkpoints(run: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(run.join("checkpoints"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("ckpt-"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// True once a checkpoint write stalled by `KILN_TEST_CHECKPOINT_STALL` is under way.
fn stalled(run: &Path) -> bool {
    std::fs::read_dir(run.join("checkpoints"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .any(|e| e.path().join("STALLED").exists())
        })
        .unwrap_or(false)
}

fn epochs_in_history(run: &Path) -> usize {
    let h: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("history.json")).unwrap()).unwrap();
    h["epoch"].as_array().unwrap().len()
}

#[test]
fn a_second_train_is_refused_at_once_and_a_killed_holder_leaves_no_lock() {
    require_data();
    let dir = scratch("run-lock");
    // 16 batches per epoch, a checkpoint every 4.
    let cfg = mlp_config(&dir, 512, 2, 4, "");
    let run = dir.join("run");

    // The first run stops for good inside its third checkpoint write (the initial one, step 4,
    // then step 8): alive, holding the lock, with the step-4 checkpoint complete.
    let mut first: Child = train_command(&cfg, &run, &[])
        .env("KILN_TEST_CHECKPOINT_STALL", "3")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = first.id();
    wait_for("the first run's stalled checkpoint write", || {
        let exited = first.try_wait().unwrap();
        assert!(exited.is_none(), "the first run ended early: {exited:?}");
        stalled(&run)
    });
    let record = std::fs::read_to_string(run.join(".lock")).unwrap();
    assert!(record.contains(&format!("pid {pid}\n")), "{record}");
    assert!(record.contains("command kiln train\n"), "{record}");
    let before = checkpoints(&run);
    assert_eq!(before, ["ckpt-000000000000", "ckpt-000000000004"]);

    let second = train_command(&cfg, &run, &[]).output().unwrap();
    let err = text(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first run must still be running: the second was refused, it did not wait"
    );
    assert!(
        err.contains(&format!("is in use by kiln train (pid {pid}")),
        "{err}"
    );
    assert!(err.contains(&format!("`kill {pid}`")), "{err}");
    assert!(err.contains("--run-dir"), "{err}");
    assert!(!err.contains("Resuming"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    // The refused run wrote nothing: same checkpoints, still the first's record.
    assert_eq!(checkpoints(&run), before);
    assert_eq!(std::fs::read_to_string(run.join(".lock")).unwrap(), record);

    // SIGKILL: the OS drops the lock with the process.
    first.kill().unwrap();
    first.wait().unwrap();
    let third = train_command(&cfg, &run, &[]).output().unwrap();
    let err = text(&third.stderr);
    assert!(third.status.success(), "{err}");
    assert!(err.contains("Resuming from"), "{err}");
    assert!(err.contains("ckpt-000000000004"), "{err}");
    assert_eq!(epochs_in_history(&run), 2);
    // Released at the end: the record is emptied, the file stays.
    assert_eq!(std::fs::read_to_string(run.join(".lock")).unwrap(), "");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn checkpoints_none_of_which_can_resume_are_refused_not_trained_anew() {
    require_data();
    let dir = scratch("run-lock-unusable");
    // 8 batches, a checkpoint every 4: ckpt 0, 4 and 8 are kept.
    let cfg = mlp_config(&dir, 256, 1, 4, "");
    let run = dir.join("run");
    let o = train_command(&cfg, &run, &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let found = checkpoints(&run);
    assert_eq!(
        found,
        [
            "ckpt-000000000000",
            "ckpt-000000000004",
            "ckpt-000000000008"
        ]
    );
    // Every optimizer state lost, and the newest manifest torn.
    for name in &found {
        std::fs::remove_file(run.join("checkpoints").join(name).join("optimizer.bpk")).unwrap();
    }
    let newest = run.join("checkpoints/ckpt-000000000008/manifest.json");
    let manifest = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &manifest[..manifest.len() / 2]).unwrap();

    let o = train_command(&cfg, &run, &["--epochs", "2"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("holds 3 checkpoints and none can resume training"),
        "{err}"
    );
    for name in &found[..2] {
        assert!(
            err.contains(&format!(
                "  {name}: optimizer.bpk (the optimizer state) is missing"
            )),
            "{err}"
        );
    }
    assert!(
        err.contains("  ckpt-000000000008: manifest.json is not a kiln checkpoint manifest"),
        "{err}"
    );
    assert!(err.contains("--no-resume"), "{err}");
    // Nothing trained, nothing removed.
    assert_eq!(epochs_in_history(&run), 1);
    assert_eq!(checkpoints(&run), found);

    // --no-resume starts over as told.
    let o = train_command(&cfg, &run, &["--epochs", "2", "--no-resume"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("Resuming"), "{err}");
    assert_eq!(epochs_in_history(&run), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}
