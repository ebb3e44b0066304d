//! `kiln estimate` (scaling on paper) and `kiln train --strategy` errors; no data needed.

use std::path::Path;
use std::process::{Command, Output};

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .unwrap()
}

/// ResNet-50's preset at 25 Gb/s, 10 µs: by hand, 2 workers all-reduce 102,334,368 bytes in
/// 2·1·10 µs + 2·1/2 · 102,334,368 · 8 / 25e9 s = 32.77 ms on top of 102.40 ms of compute
/// (256 examples at 2,500/s): 512 / 0.13517 s = 3,788 samples/s, 75.8% efficiency; 4 workers
/// 60 µs + 1.5 · 32.747 ms = 49.18 ms.
#[test]
fn estimate_projects_the_ring_all_reduce() {
    let out = kiln(&[
        "estimate",
        "--workers",
        "4",
        "--bandwidth",
        "25Gbit",
        "--model",
        "resnet50",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| !l.starts_with("workers"))
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["1", "25Gb/s", "102.40", "0.00", "2500", "100.0%"],
            ["2", "25Gb/s", "102.40", "32.77", "3788", "75.8%"],
            ["4", "25Gb/s", "102.40", "49.18", "6755", "67.6%"],
        ],
        "{text}"
    );
}

#[test]
fn estimate_without_bandwidth_covers_25_100_400_gbit_for_the_presets() {
    let out = kiln(&["estimate", "--workers", "64"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    for name in ["fashion-cnn:", "resnet50:", "bert-large:"] {
        assert!(text.contains(name), "{text}");
    }
    // 3 presets × 3 bandwidths × 7 worker counts (1, 2, 4, ..., 64).
    let rows = text.lines().filter(|l| l.contains("Gb/s ")).count();
    assert_eq!(rows, 63, "{text}");
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let out = kiln(&["estimate", "--bandwidth", "100Xb"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--bandwidth: \"100Xb\" has an unknown unit"),
        "{err}"
    );
    let out = kiln(&[
        "estimate",
        "examples/fashion-mnist/cnn.toml",
        "--workers",
        "8",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("--samples-per-second")
    );
    let mlp = "examples/fashion-mnist/mlp.toml";
    let out = kiln(&["train", mlp, "--strategy", "ring"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--strategy: unknown strategy \"ring\""),
        "{err}"
    );
    let out = kiln(&[
        "train",
        mlp,
        "--strategy",
        "pipeline",
        "--num-replicas",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--num-replicas"), "{err}");
}
