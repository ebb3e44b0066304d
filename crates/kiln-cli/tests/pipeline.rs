//! `kiln train` with `strategy = "pipeline"` against one device on the same global batch.

use std::process::Output;

mod common;
use common::{max_difference, mlp_config, require_data, scratch, text, train_command};

fn train(config: &std::path::Path, run: &std::path::Path, extra: &[&str]) -> Output {
    train_command(config, run, extra).output().unwrap()
}

/// The MLP (Flatten, Dense 16, Dense 10) on 200 Fashion-MNIST examples in batches of 32 (the
/// last has 8), 2 epochs: 2 stages balanced by parameters (Flatten + Dense 16 | Dense 10),
/// 4 micro-batches, give the one-device weights within 1e-5; the run prints its plan and
/// keeps the strategy in its resolved config.
#[test]
fn two_stages_train_the_one_device_weights() {
    require_data();
    let dir = scratch("pipeline");
    let one_cfg = mlp_config(&dir, 200, 2, 1000, "");
    let one = dir.join("one");
    let out = train(&one_cfg, &one, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pipe_cfg = dir.join("pipeline.toml");
    let pipeline_table =
        "\n[distribute]\nstrategy = \"pipeline\"\nstages = 2\nnum_micro_batches = 4\n";
    std::fs::write(
        &pipe_cfg,
        std::fs::read_to_string(&one_cfg).unwrap() + pipeline_table,
    )
    .unwrap();
    let two = dir.join("two");
    let out = train(&pipe_cfg, &two, &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains("Pipeline: 2 stages balanced by parameters, 4 micro-batches per batch")
            && all.contains("stage 0: flatten … dense (2 layers), 12,560 parameters")
            && all.contains("stage 1: dense_1 (1 layer), 170 parameters"),
        "{all}"
    );
    let diff = max_difference(&one, &two);
    assert!(diff <= 1e-5, "2 stages differ from one device by {diff}");
    let resolved = std::fs::read_to_string(two.join("config.toml")).unwrap();
    assert!(
        resolved.contains("strategy = \"pipeline\"") && resolved.contains("num_micro_batches = 4"),
        "{resolved}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// More stages than layers, or `--strategy pipeline` with `--num-replicas`: exit 2 before
/// anything is trained, naming the key.
#[test]
fn impossible_plans_are_refused_naming_the_key() {
    require_data();
    let dir = scratch("pipeline-bad");
    let cfg = mlp_config(
        &dir,
        64,
        1,
        1000,
        "\n[distribute]\nstrategy = \"pipeline\"\nstages = 4\n",
    );
    let out = train(&cfg, &dir.join("run"), &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("distribute.stages") && stderr.contains("between 1 and 3"),
        "{stderr}"
    );
    assert!(!dir.join("run").join("model.safetensors").exists());
    let plain = mlp_config(&dir, 64, 1, 1000, "");
    let out = train(
        &plain,
        &dir.join("run2"),
        &["--strategy", "pipeline", "--num-replicas", "2"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("distribute.num_replicas"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--strategy pipeline` with the pipeline's keys in the file (and no strategy there) trains:
/// the keys are checked against the strategy the flags chose. Bad `stages` values say what
/// is expected; sizes too large to add up are refused, not a crash.
#[test]
fn the_flag_chooses_the_strategy_and_bad_stages_are_explained() {
    require_data();
    let dir = scratch("pipeline-flag");
    let cfg = mlp_config(&dir, 64, 1, 1000, "\n[distribute]\nstages = 2\n");
    let out = train(&cfg, &dir.join("run"), &["--strategy", "pipeline"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = train(&cfg, &dir.join("run1"), &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("distribute.stages") && stderr.contains("--strategy"),
        "{stderr}"
    );
    for (stages, want) in [
        ("\"two\"", "expected a number of stages"),
        ("[1.5, 2]", "expected a number of stages"),
        (
            "[9223372036854775807, 9223372036854775807, 6]",
            "distribute.stages[0]",
        ),
    ] {
        let bad = mlp_config(
            &dir,
            64,
            1,
            1000,
            &format!("\n[distribute]\nstrategy = \"pipeline\"\nstages = {stages}\n"),
        );
        let out = train(&bad, &dir.join("bad"), &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stages}: {stderr}");
        assert!(stderr.contains(want), "{stages}: {stderr}");
        assert!(!stderr.contains("internal error"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
