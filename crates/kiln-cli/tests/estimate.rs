//! `kiln estimate`, `--batch-size auto` and the CPU out-of-memory refusal, as a user runs them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{require_data, scratch};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .expect("kiln runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The Params column of the table's total row (the line after the dashes).
fn total_params(out: &str) -> &str {
    let row = out
        .lines()
        .skip_while(|l| !l.starts_with("---"))
        .nth(1)
        .unwrap_or_else(|| panic!("no Total row: {out}"));
    assert!(row.starts_with("Total "), "{out}");
    row.split_whitespace().nth(1).unwrap()
}

#[test]
fn estimate_prints_the_breakdown_and_the_seeds_verdicts() {
    let resnet = examples().join("resnet50.toml");
    let o = kiln(&["estimate", resnet.to_str().unwrap(), "--batch-size", "32"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(out.contains("conv1_conv (Conv2D)"), "{out}");
    assert_eq!(total_params(&out), "25,636,712", "{out}");
    assert!(out.contains("batch size 32, precision float32"), "{out}");
    assert!(out.contains("8 GB fits"), "{out}");
    let bert = examples().join("bert-large.toml");
    let o = kiln(&["estimate", bert.to_str().unwrap(), "--memory", "12GiB"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(total_params(&out), "335,143,938", "{out}");
    assert!(out.contains("Largest batch in 12.00 GiB:"), "{out}");
    // A batch of no examples estimates nothing: a usage error.
    let o = kiln(&["estimate", resnet.to_str().unwrap(), "--batch-size", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("--batch-size"),
        "{}",
        text(&o.stderr)
    );
    let o = kiln(&["estimate", bert.to_str().unwrap(), "--precision", "fp8"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("mixed_bfloat16"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn a_cpu_run_that_cannot_fit_is_refused_before_training() {
    let dir = scratch("estimate-refuse");
    let cfg = examples().join("fashion-mnist/resnet-small.toml");
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["train", cfg.to_str().unwrap(), "--batch-size", "50000000"])
        .args(["--data-dir", "/nonexistent", "--run-dir"])
        .arg(dir.join("run"))
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("training at batch size 50000000 needs about"),
        "{err}"
    );
    assert!(
        err.contains("is available (MemAvailable)") && err.contains("saves no memory"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!dir.join("run").exists());
}

#[test]
fn batch_size_auto_trains_at_the_batch_the_estimate_chooses() {
    require_data();
    let dir = scratch("estimate-auto");
    let text_cfg = std::fs::read_to_string(examples().join("fashion-mnist/mlp.toml"))
        .unwrap()
        .replace(
            "epochs = 10",
            "epochs = 1\nsteps_per_epoch = 2\nmemory_budget = \"400MiB\"",
        )
        .replace("batch_size = 128", "batch_size = \"auto\"");
    let cfg_path = dir.join("mlp.toml");
    std::fs::write(&cfg_path, &text_cfg).unwrap();
    let mut want = kiln::RunConfig::load(&cfg_path).unwrap();
    let chosen = kiln::estimate::resolve_batch_size(
        &mut want,
        kiln::DeviceKind::Cpu,
        kiln::Precision::Float32,
        None,
    )
    .unwrap()
    .unwrap()
    .batch_size;
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["train", cfg_path.to_str().unwrap(), "--run-dir"])
        .arg(dir.join("run"))
        .output()
        .unwrap();
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(
        out.contains(&format!(
            "batch_size = \"auto\": chose {chosen}, the largest batch"
        )),
        "{out}"
    );
    let saved = std::fs::read_to_string(dir.join("run/config.toml")).unwrap();
    assert!(saved.contains(&format!("batch_size = {chosen}")), "{saved}");
}
