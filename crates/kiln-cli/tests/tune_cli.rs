//! `kiln tune` end to end on a 3-trial study of a tiny MLP: the live table, trial run
//! directories and TensorBoard logs, best.toml, resume, --max-trials, --summary, and the
//! config errors (exit code 2).

mod common;
mod tune_common;

use tune_common::{output_text, trials, tune_command, write_study};

#[test]
fn a_small_study_runs_resumes_and_summarises() {
    let dir = common::scratch("tune-cli");
    let config = write_study(&dir, "small", "max_trials = 3");
    let study = dir.join("study");
    let out = tune_command(&config, &study, &["--summary"])
        .output()
        .unwrap();
    assert!(
        output_text(&out).contains("No study in"),
        "{}",
        output_text(&out)
    );
    let out = tune_command(&config, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    // The table: a header and one line per trial with its parameters.
    assert!(text.contains("trial  state"), "{text}");
    assert!(text.contains("val_accuracy"), "{text}");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("  complete  "))
        .collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("learning_rate=") && l.contains("units=")),
        "{text}"
    );
    let all = trials(&config, &study, None);
    assert_eq!(all.len(), 3);
    for t in &all {
        assert_eq!(t.state_name(), "complete");
        let v = t.record.value.unwrap();
        assert!((0.0..=1.0).contains(&v), "{v}");
        // 2 epochs reported while it trained, and the value is the best of them.
        assert_eq!(
            t.record.intermediate.len(),
            2,
            "{:?}",
            t.record.intermediate
        );
        let best = t
            .record
            .intermediate
            .iter()
            .map(|(_, v)| *v)
            .fold(f64::MIN, f64::max);
        assert_eq!(v, best);
        let run = study.join("trials").join(t.record.number.to_string());
        // The trial's run config carries its parameters at their keys.
        let cfg = kiln::RunConfig::load(&run.join("config.toml")).unwrap();
        assert_eq!(cfg.fit.epochs, 2);
        let units = t.record.plan.params["units"].clone();
        let dense = cfg.model.to_toml()["layers"].as_array().unwrap()[2].clone();
        assert_eq!(
            dense["units"].as_integer(),
            match units {
                kiln_tune::Value::Int(u) => Some(u),
                other => panic!("{other:?}"),
            }
        );
        assert!(run.join("history.json").is_file());
        // TensorBoard logs in logs/<number>.
        let logs = study
            .join("logs")
            .join(t.record.number.to_string())
            .join("validation");
        assert!(
            std::fs::read_dir(&logs).unwrap().count() > 0,
            "{}",
            logs.display()
        );
    }
    // The TensorBoard logs carry the trial's parameters as HParams (the plugin's session
    // summaries name each hyperparameter).
    let mut event_bytes = Vec::new();
    for split in ["", "train", "validation"] {
        let d = study.join("logs/0").join(split);
        for e in std::fs::read_dir(&d).into_iter().flatten() {
            let p = e.unwrap().path();
            if p.is_file() {
                event_bytes.extend(std::fs::read(&p).unwrap());
            }
        }
    }
    let has = |needle: &str| {
        event_bytes
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    };
    assert!(has("hparams") && has("learning_rate") && has("units"));
    // best.toml: the best trial's config, ready to train, without the tuner's callbacks.
    let best_text = std::fs::read_to_string(study.join("best.toml")).unwrap();
    let best_cfg = kiln::RunConfig::from_toml_str(&best_text).unwrap();
    assert!(best_cfg.callbacks.is_empty());
    let ranked = kiln_tune::report::ranked(&all, kiln_tune::Direction::Max);
    assert!(
        best_text.contains(&format!("trial {},", ranked[0].record.number)),
        "{best_text}"
    );

    // Running it again resumes: nothing left to do.
    let out = tune_command(&config, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("3 trials so far"), "{text}");
    assert_eq!(trials(&config, &study, None).len(), 3);
    // --max-trials extends it by one.
    let out = tune_command(&config, &study, &["--max-trials", "4"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let all = trials(&config, &study, None);
    assert_eq!(all.len(), 4);
    assert_eq!(all[3].record.number, 3);
    // --summary lists the best trials, best first, and runs nothing.
    let out = tune_command(&config, &study, &["--summary", "--top", "2"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("4 trials (4 complete"), "{text}");
    let ranked = kiln_tune::report::ranked(&all, kiln_tune::Direction::Max);
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("  complete  "))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(
        rows[0]
            .trim_start()
            .starts_with(&ranked[0].record.number.to_string()),
        "{text}"
    );

    // A changed search space is refused (exit 2), naming what changed.
    std::fs::write(
        &config,
        std::fs::read_to_string(&config)
            .unwrap()
            .replace("[16, 32, 64]", "[16, 128]"),
    )
    .unwrap();
    let out = tune_command(&config, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("[[hyperparameters]] changed"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn config_errors_exit_with_code_2_before_any_trial() {
    let dir = common::scratch("tune-cli-errors");
    let config = write_study(&dir, "bad", "max_trials = 2");
    std::fs::write(
        dir.join("base.toml"),
        std::fs::read_to_string(dir.join("base.toml"))
            .unwrap()
            .replace("optimizer = { type = \"AdamW\" }", "optimizer = \"adamw\""),
    )
    .unwrap();
    let study = dir.join("study");
    let out = tune_command(&config, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("bad.toml"), "{text}");
    assert!(
        text.contains("compile.optimizer is the string \"adamw\""),
        "{text}"
    );
    assert!(text.contains("{ type = \"AdamW\" }"), "{text}");
    assert!(!study.join("trials").exists());
    // An override that makes the base config invalid is caught by kiln's own config check.
    let config = write_study(&dir, "bad2", "max_trials = 2");
    std::fs::write(
        &config,
        std::fs::read_to_string(&config)
            .unwrap()
            .replace("\"fit.epochs\" = 2", "\"fit.epochs\" = \"two\""),
    )
    .unwrap();
    let out = tune_command(&config, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("not a valid run config"), "{text}");
    let out = tune_command(&config, &study, &["--storage", "mysql://u:hunter2@h/db"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_trial_that_does_not_learn_is_pruned_by_the_median_pruner() {
    let dir = common::scratch("tune-cli-prune");
    let config =
        tune_common::write_study_with(&dir, "prune", "max_trials = 2", "\"fit.epochs\" = 20");
    // Grid search: trial 0 learns (lr 0.003), trial 1 cannot (lr 1e-9) and is below the
    // median of trial 0 after its first epoch. (`fit.epochs` is set twice: the TOML refuses
    // that, so the template's line is replaced.)
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("\"fit.epochs\" = 2\n", "")
        .replace(
            "seed = 11",
            "seed = 11\nalgorithm = \"grid\"\npruner = { type = \"median\", n_startup_trials = 1 }",
        )
        .replace(
            "values = [0.0003, 0.001, 0.003, 0.01]",
            "values = [0.003, 0.000000001]",
        )
        .replace("values = [16, 32, 64]", "values = [32]");
    std::fs::write(&config, text).unwrap();
    let study = dir.join("study");
    let out = tune_command(&config, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    let all = trials(&config, &study, None);
    assert_eq!(all.len(), 2, "{text}");
    assert_eq!(all[0].state_name(), "complete", "{text}");
    assert_eq!(all[0].record.intermediate.len(), 20);
    assert_eq!(all[1].state_name(), "pruned", "{text}");
    // Stopped after a few of its 20 epochs, its value the last one reported.
    let reported = &all[1].record.intermediate;
    assert!(!reported.is_empty() && reported.len() < 20, "{reported:?}");
    assert_eq!(all[1].record.value, Some(reported.last().unwrap().1));
    // kiln train got SIGTERM: it checkpointed and exited.
    let log = std::fs::read_to_string(study.join("trials/1/train.log")).unwrap();
    assert!(log.contains("signal 15"), "{log}");
    assert!(study.join("trials/1/checkpoints").is_dir());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sigterm_stops_the_study_and_the_trial_resumes_from_its_checkpoint() {
    let dir = common::scratch("tune-cli-sigterm");
    // Epochs of a few milliseconds: enough of them that the trial is still training when the
    // SIGTERM arrives on a loaded machine (30 were over before it once, in CI).
    let config =
        tune_common::write_study_with(&dir, "term", "max_trials = 1", "\"fit.epochs\" = 400");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("\"fit.epochs\" = 2\n", "");
    std::fs::write(&config, text).unwrap();
    let study = dir.join("study");
    let child = tune_command(&config, &study, &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once trial 0 has finished an epoch, SIGTERM the tuner (not its child).
    let csv = study.join("trials/0/tune-epochs.csv");
    tune_common::wait_until("trial 0's first epoch", || {
        std::fs::read_to_string(&csv).map_or(0, |t| t.lines().count()) >= 2
    });
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(143), "{text}");
    assert!(text.contains("run the same command to resume"), "{text}");
    let all = trials(&config, &study, None);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].state_name(), "waiting");
    assert_eq!(all[0].record.retries, 0);
    // The same command finishes the trial from its checkpoint.
    let out = tune_command(&config, &study, &[]).output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let all = trials(&config, &study, None);
    assert_eq!(all[0].state_name(), "complete");
    assert_eq!(all[0].record.retries, 0);
    let log = std::fs::read_to_string(study.join("trials/0/train.log")).unwrap();
    assert!(log.contains("Resuming from"), "{log}");
    let h: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(study.join("trials/0/history.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(h["epoch"].as_array().unwrap().len(), 400);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hyperband_promotes_trials_that_continue_from_their_parents_checkpoints() {
    let dir = common::scratch("tune-cli-hyperband");
    let config = write_study(
        &dir,
        "hb",
        "max_trials = 50\nalgorithm = \"hyperband\"\nmax_epochs = 3\nfactor = 3",
    );
    let study = dir.join("study");
    let out = tune_command(&config, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    let all = trials(&config, &study, None);
    assert!(all.iter().all(|t| t.state_name() == "complete"), "{text}");
    let promoted: Vec<_> = all
        .iter()
        .filter(|t| t.record.plan.resume_from.is_some())
        .collect();
    assert!(!promoted.is_empty(), "{text}");
    for t in promoted {
        let parent = &all[t.record.plan.resume_from.unwrap() as usize];
        assert_eq!(parent.record.plan.params, t.record.plan.params);
        assert!(parent.record.plan.epochs < t.record.plan.epochs);
        let run = study.join("trials").join(t.record.number.to_string());
        // It started from its parent's checkpoint and trained up to its own epochs.
        let log = std::fs::read_to_string(run.join("train.log")).unwrap();
        assert!(log.contains("Resuming from"), "{log}");
        let h: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("history.json")).unwrap())
                .unwrap();
        assert_eq!(
            h["epoch"].as_array().unwrap().len(),
            t.record.plan.epochs as usize
        );
        let cfg = kiln::RunConfig::load(&run.join("config.toml")).unwrap();
        assert_eq!(cfg.fit.epochs, t.record.plan.epochs as usize);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_second_study_in_the_same_directory_does_not_reuse_the_first_ones_runs() {
    let dir = common::scratch("tune-cli-second");
    let config = write_study(&dir, "first", "max_trials = 1");
    let study = dir.join("study");
    let out = tune_command(&config, &study, &[]).output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let stamp = std::fs::read_to_string(study.join("trials/0/study.json")).unwrap();
    assert!(stamp.contains("\"study\":\"first#1@"), "{stamp}");
    let best = std::fs::read_to_string(study.join("best.toml")).unwrap();
    // Another study name in the same directory: refused before any trial.
    let other = write_study(&dir, "other", "max_trials = 1\nstudy_name = \"other\"");
    let out = tune_command(&other, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("trials/0 belongs to another study"), "{text}");
    assert!(text.contains("Use another --study-dir"), "{text}");
    assert!(!text.contains("evaluating it again"), "{text}");
    // The same study started again after its database was deleted: refused too.
    for f in std::fs::read_dir(&study).unwrap() {
        let p = f.unwrap().path();
        if p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("study.db")
        {
            std::fs::remove_file(p).unwrap();
        }
    }
    let out = tune_command(&config, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("belongs to another study"), "{text}");
    // The first study's results are untouched.
    assert_eq!(
        std::fs::read_to_string(study.join("best.toml")).unwrap(),
        best
    );
    assert!(study.join("trials/0/history.json").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn failed_studies_exit_non_zero_and_a_usage_error_is_not_retried() {
    let dir = common::scratch("tune-cli-failing");
    // Every trial fails at run time (no data): exit code 1, "none complete".
    let config = tune_common::write_study_with(
        &dir,
        "nodata",
        "max_trials = 1\nmax_retries_per_trial = 0",
        "\"data.data_dir\" = \"/nonexistent-kiln-data\"",
    );
    let out = tune_command(&config, &dir.join("s1"), &[])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("Study done: 1 trial, none complete"),
        "{text}"
    );
    // kiln train's usage error (exit code 2): the study stops at once with it, no retry.
    let config = write_study(&dir, "bogus", "max_trials = 3\nmax_retries_per_trial = 2");
    let study = dir.join("s2");
    let out = tune_command(&config, &study, &["--train-arg=--bogus"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("--bogus"), "{text}");
    assert!(text.contains("not retried"), "{text}");
    let all = trials(&config, &study, None);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].state_name(), "failed");
    assert_eq!(all[0].record.retries, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_misspelt_key_is_refused_before_the_study_naming_the_tune_file_entry() {
    let dir = common::scratch("tune-cli-misspelt");
    let config = write_study(&dir, "typo", "max_trials = 1");
    let tune = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        tune.replace(
            "\"compile.optimizer.learning_rate\"",
            "\"compile.optimiser.learning_rate\"",
        ),
    )
    .unwrap();
    let study = dir.join("study");
    let out = tune_command(&config, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("typo.toml"), "{text}");
    assert!(
        text.contains("hyperparameters[0].key = \"compile.optimiser.learning_rate\""),
        "{text}"
    );
    assert!(text.contains(": unknown field `optimiser`"), "{text}");
    assert!(!text.contains(": :"), "{text}");
    assert!(!text.contains("line "), "{text}");
    // Nothing was created: no database, no trial.
    assert!(!study.join("study.db").exists(), "{text}");
    // A misspelt override key likewise.
    std::fs::write(
        &config,
        tune.replace("\"fit.epochs\" = 2", "\"fit.epoch\" = 2"),
    )
    .unwrap();
    let out = tune_command(&config, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("[overrides] \"fit.epoch\" = 2"), "{text}");
    assert!(!text.contains("line "), "{text}");
    assert!(!study.join("study.db").exists(), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_exhausted_grid_says_so_and_zero_counts_are_refused() {
    let dir = common::scratch("tune-cli-exhausted");
    let config = write_study(&dir, "one", "max_trials = 3\nalgorithm = \"grid\"");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("values = [0.0003, 0.001, 0.003, 0.01]", "values = [0.003]")
        .replace("values = [16, 32, 64]", "values = [32]");
    std::fs::write(&config, text).unwrap();
    let study = dir.join("study");
    for bad in [["--max-trials", "0"], ["--top", "0"]] {
        let out = tune_command(&config, &study, &bad).output().unwrap();
        let text = output_text(&out);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {text}");
        assert!(text.contains(bad[0]), "{text}");
    }
    assert!(!study.exists());
    let out = tune_command(&config, &study, &[]).output().unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("The search space has no more new points: 1 trial of max_trials = 3"),
        "{text}"
    );
    assert!(text.contains("Study done: 1 trial (1 complete)"), "{text}");
    let out = tune_command(&config, &study, &["--summary"])
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(text.contains(": 1 trial (1 complete"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_trial_whose_run_directory_is_held_waits_for_it_and_runs() {
    let dir = common::scratch("tune-cli-held");
    let config = write_study(&dir, "held", "max_trials = 1\nmax_retries_per_trial = 0");
    let study = dir.join("study");
    let out = tune_command(&config, &study, &[]).output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    // Trial 1's run directory, stamped for this study, is held by another process (as by a
    // `kiln train` left over from an interrupted run): this test, through the same OS lock
    // on its `.lock`.
    let run = study.join("trials/1");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::copy(study.join("trials/0/study.json"), run.join("study.json")).unwrap();
    let holder = std::fs::File::create(run.join(".lock")).unwrap();
    holder.lock().unwrap();
    let out_path = dir.join("tune.out");
    let tuner = tune_command(&config, &study, &["--max-trials", "2"])
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The tuner says it waits; once the holder is gone, the trial trains.
    tune_common::wait_until("the tuner waiting for trial 1's run directory", || {
        std::fs::read_to_string(&out_path).is_ok_and(|t| t.contains("    1  waiting: "))
    });
    drop(holder);
    let out = tuner.wait_with_output().unwrap();
    let text = std::fs::read_to_string(&out_path).unwrap() + &output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("is in use by"), "{text}");
    let all = trials(&config, &study, None);
    assert_eq!(all.len(), 2);
    assert_eq!(
        (all[1].state_name(), all[1].record.retries),
        ("complete", 0),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
