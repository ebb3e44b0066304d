//! A 12-trial study killed with SIGKILL at five random instants and resumed each time ends
//! with exactly 12 complete trials: none duplicated, none lost.

mod common;
mod tune_common;

use std::time::{Duration, Instant};

use tune_common::{output_text, trials, tune_command, write_study_with};

/// A small xorshift generator seeded from the clock: the instants differ between runs (each
/// run prints its seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn kill_9_at_five_random_instants_and_resume() {
    let dir = common::scratch("tune-kill");
    // A killed trial is retried (same number) when the study resumes: five kills need up to
    // five retries of one trial.
    // 4096 training images: a trial takes about a second or two, so that the kills land in
    // trials as well as between them.
    let config = write_study_with(
        &dir,
        "kill",
        "max_trials = 12\nmax_retries_per_trial = 5\nheartbeat_interval = 1\ngrace_period = 3",
        "\"data.train.take\" = 4096",
    );
    let study = dir.join("study");
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("kill instants seed: {seed}");
    let mut rng = Rng(seed);
    let mut kills = 0;
    while kills < 5 {
        let mut child = tune_command(&config, &study, &[])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Kill k comes once at least 2k complete trials exist (so that the study progresses
        // whatever the machine's speed), after a further random 0-800 ms: during start-up, a
        // trial or a database write.
        let complete = |study: &std::path::Path| {
            trials(&config, study, None)
                .iter()
                .filter(|t| t.state_name() == "complete")
                .count()
        };
        while complete(&study) < 2 * kills {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the tuner exited early"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let wait = Duration::from_millis(rng.next() % 800);
        let start = Instant::now();
        while start.elapsed() < wait {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the study finished before the five kills"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
    }
    let out = tune_command(&config, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    let all = trials(&config, &study, None);
    let numbers: Vec<u64> = all.iter().map(|t| t.record.number).collect();
    let retried: Vec<(u64, u32)> = all
        .iter()
        .filter(|t| t.record.retries > 0)
        .map(|t| (t.record.number, t.record.retries))
        .collect();
    eprintln!("trials killed mid-training and run again (number, retries): {retried:?}");
    assert_eq!(numbers, (0..12).collect::<Vec<_>>(), "{text}");
    for t in &all {
        assert_eq!(
            t.state_name(),
            "complete",
            "trial {}: {:?}",
            t.record.number,
            t.message
        );
        assert!(t.record.value.is_some());
        // Each trial trained its 2 epochs once: a resumed run continues its checkpoint.
        let history = study
            .join("trials")
            .join(t.record.number.to_string())
            .join("history.json");
        let h: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&history).unwrap()).unwrap();
        assert_eq!(
            h["epoch"].as_array().unwrap().len(),
            2,
            "{}",
            history.display()
        );
    }
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
