//! `multi_worker_mirrored` for real: `mpirun -np 2 kiln train` (OpenMPI, which
//! `scripts/setup.sh` installs) against one process training on the same global batch; a
//! worker killed with SIGKILL, then the same command run again.
//!
//! These tests fail, saying how to install it, when `mpirun` is missing: kiln-cli builds with
//! MPI by default, so a machine that builds it has run `scripts/setup.sh`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{max_difference, require_data, text, weights};

const NO_MPIRUN: &str = "mpirun is not installed: run scripts/setup.sh (it installs Debian's \
    openmpi-bin, libopenmpi-dev and libclang-dev; .ci/run does)";

/// MPI jobs of this file run one at a time: each starts workers that remove the scratch
/// directories of dead workers (`kiln-worker-<pid>`), which a concurrent kill test checks, and
/// two jobs of 2 processes would oversubscribe the machine's cores.
fn one_job_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn config(dir: &Path, take: usize, epochs: usize, save_freq: usize) -> PathBuf {
    common::mlp_config(dir, take, epochs, save_freq, "")
}

/// `kiln train CONFIG --run-dir RUN` in one process.
fn one_process(config: &Path, run: &Path) -> Output {
    let out = common::train_command(config, run, &[])
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    out
}

/// `mpirun -np N kiln train CONFIG --run-dir RUN EXTRA...` (as root too; more processes than
/// cores allowed), not yet run.
fn mpirun(n: usize, config: &Path, run: &Path, extra: &[&str]) -> Command {
    let found = Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(found, "{NO_MPIRUN}");
    let mut c = Command::new("mpirun");
    c.args([
        "-np",
        &n.to_string(),
        "--oversubscribe",
        "-x",
        "RAYON_NUM_THREADS",
    ])
    .arg(env!("CARGO_BIN_EXE_kiln"))
    .arg("train")
    .arg(config)
    .arg("--run-dir")
    .arg(run)
    .args(extra)
    .env("RAYON_NUM_THREADS", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    // Containers often forbid the cross-process memory copy (CMA) of the shared-memory
    // transport; plain copies work everywhere.
    .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    .stdin(Stdio::null());
    c
}

/// The epoch lines' `loss: ...` and `accuracy: ...` values, from a `kiln train` stdout.
fn epoch_logs(stdout: &str) -> Vec<String> {
    stdout
        .split(['\n', '\r'])
        .filter(|l| l.contains("samples/s") && l.contains("loss:"))
        .map(|l| {
            let from = l.find("loss:").unwrap();
            let to = l[from..].find(" - ").map_or(l.len(), |i| from + i);
            let acc = l.find("accuracy:").unwrap();
            format!("{} {}", &l[from..to], &l[acc..acc + 16])
        })
        .collect()
}

/// Two workers on 129 examples in global batches of 32 (16 + 16 per worker, then a last
/// batch of 1: `[1, 0]`, worker 1 empty) for 2 epochs: the same weights as one process within
/// 1e-5, the same logged loss and accuracy, one run directory (rank 0's) with its checkpoints,
/// and no scratch directory left behind.
#[test]
fn two_workers_train_to_the_one_process_weights() {
    let _serial = one_job_at_a_time();
    require_data();
    let dir = common::scratch("mpi-same");
    let cfg = config(&dir, 129, 2, 1000);
    let one = dir.join("one");
    let single = one_process(&cfg, &one);

    let two = dir.join("two");
    let out = mpirun(2, &cfg, &two, &["--strategy", "multi_worker_mirrored"])
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let diff = max_difference(&one, &two);
    assert!(diff <= 1e-5, "weights differ by {diff}");
    // Only rank 0 prints: one model summary, one epoch line per epoch.
    assert_eq!(stdout.matches("Total params").count(), 1, "{stdout}");
    let (want, got) = (epoch_logs(&text(&single.stdout)), epoch_logs(&stdout));
    assert_eq!(want.len(), 2, "{}", text(&single.stdout));
    assert_eq!(got, want);
    // The step-time diagnosis is printed for the two workers.
    assert!(stdout.contains("communication"), "{stdout}");
    // Initial checkpoint and one per epoch, in rank 0's run directory.
    let ckpts = std::fs::read_dir(two.join("checkpoints")).unwrap().count();
    assert_eq!(ckpts, 3);
    for f in ["config.toml", "history.json", "model.safetensors"] {
        assert!(two.join(f).is_file(), "{f}");
    }
}

/// With BatchNormalization (per-replica batch statistics, moving statistics averaged over the
/// replicas) two workers train what two in-process `mirrored` replicas train: the same
/// weights, moving mean and variance within 1e-5 (the last batch of 1 gives `[1, 0]`: only
/// worker 0's statistics count).
#[test]
fn two_workers_with_batch_normalization_equal_two_mirrored_replicas() {
    let _serial = one_job_at_a_time();
    require_data();
    let dir = common::scratch("mpi-bn");
    let cfg = bn_config(&dir, "");
    let mirrored = dir.join("mirrored");
    let out = common::train_command(&cfg, &mirrored, &["--num-replicas", "2"])
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let two = dir.join("two");
    let out = mpirun(2, &cfg, &two, &["--strategy", "multi_worker_mirrored"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let names: Vec<String> = weights(&two).into_iter().map(|t| t.0).collect();
    assert!(
        names.iter().any(|n| n.ends_with("moving_variance")),
        "{names:?}"
    );
    let diff = max_difference(&mirrored, &two);
    assert!(diff <= 1e-5, "weights differ by {diff}");
}

/// The MLP on 97 examples for one epoch (global batches 32, 32, 32, 1), with a
/// BatchNormalization layer after its hidden Dense layer, `extra` TOML appended. That Dense
/// layer has no bias, as usual before BatchNormalization: the normalization removes it, so
/// its gradient would be rounding noise, which AdamW scales up to learning-rate-sized steps
/// that differ with the summation order.
fn bn_config(dir: &Path, extra: &str) -> PathBuf {
    let cfg = common::mlp_config(dir, 97, 1, 1000, extra);
    let text_cfg = std::fs::read_to_string(&cfg).unwrap().replace(
        r#"{ type = "Dense", units = 16, activation = "relu" },"#,
        r#"{ type = "Dense", units = 16, use_bias = false },
  { type = "BatchNormalization" },
  { type = "Activation", activation = "relu" },"#,
    );
    assert!(text_cfg.contains("BatchNormalization"));
    std::fs::write(&cfg, text_cfg).unwrap();
    cfg
}

/// With `sync_batch_norm = true` BatchNormalization's statistics are the global batch's, so
/// two workers train what one process trains on the same global batches: the same weights,
/// moving mean and variance within 1e-5. The last batch of 1 splits `[1, 0]`: worker 1 runs
/// a placeholder row to take part in the statistics' all-reduces (else the job would hang).
/// Without the key (per-replica statistics) the weights differ, so the comparison can fail.
/// SGD, not AdamW: the two sides sum in different orders, and AdamW divides by the root of
/// the squared gradients, which turns the rounding noise of near-zero gradients (border
/// pixels) into steps of up to 1.6e-5; SGD keeps differences at the rounding's size.
#[test]
fn two_workers_with_sync_batch_norm_train_to_the_one_process_weights() {
    let _serial = one_job_at_a_time();
    require_data();
    let dir = common::scratch("mpi-sync-bn");
    let with_sgd = |cfg: PathBuf| {
        let adamw = r#"optimizer = { type = "adamw", learning_rate = 0.01 }"#;
        let text_cfg = std::fs::read_to_string(&cfg).unwrap();
        assert!(text_cfg.contains(adamw));
        let sgd = r#"optimizer = { type = "sgd", learning_rate = 0.5 }"#;
        std::fs::write(&cfg, text_cfg.replace(adamw, sgd)).unwrap();
        cfg
    };
    let cfg = with_sgd(bn_config(&dir, "\n[distribute]\nsync_batch_norm = true\n"));
    let one = dir.join("one");
    let single = one_process(&cfg, &one);
    let said = format!("{}{}", text(&single.stdout), text(&single.stderr));
    assert!(
        said.contains("sync_batch_norm: one replica"),
        "one device says the key changes nothing: {said}"
    );
    let two = dir.join("two");
    let out = mpirun(2, &cfg, &two, &["--strategy", "multi_worker_mirrored"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let diff = max_difference(&one, &two);
    assert!(diff <= 1e-5, "weights differ by {diff}");

    let per_replica_dir = dir.join("per-replica");
    std::fs::create_dir_all(&per_replica_dir).unwrap();
    let per_replica_cfg = with_sgd(bn_config(&per_replica_dir, ""));
    let per_replica = dir.join("per-replica-run");
    let out = mpirun(
        2,
        &per_replica_cfg,
        &per_replica,
        &["--strategy", "multi_worker_mirrored"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let diff = max_difference(&one, &per_replica);
    assert!(diff > 1e-4, "per-replica statistics differ by only {diff}");
}

/// `kiln train --strategy multi_worker_mirrored` without `mpirun` is a job of one (MPI's
/// singleton start): it trains as one device, to bit-identical weights.
#[test]
fn one_worker_without_mpirun_trains_as_one_device() {
    let _serial = one_job_at_a_time();
    require_data();
    let dir = common::scratch("mpi-one");
    let cfg = config(&dir, 100, 1, 1000);
    let one = dir.join("one");
    one_process(&cfg, &one);
    let solo = dir.join("solo");
    let out = common::train_command(&cfg, &solo, &["--strategy", "multi_worker_mirrored"])
        .env("RAYON_NUM_THREADS", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(weights(&one), weights(&solo));
}

/// `--num-replicas` does not turn `--strategy multi_worker_mirrored` into `mirrored`: the
/// combination is refused, naming the key, as it is in a config file.
#[test]
fn num_replicas_with_multi_worker_mirrored_is_refused() {
    let _serial = one_job_at_a_time();
    require_data();
    let dir = common::scratch("mpi-num-replicas");
    let cfg = config(&dir, 64, 1, 1000);
    let out = common::train_command(
        &cfg,
        &dir.join("run"),
        &["--strategy", "multi_worker_mirrored", "--num-replicas", "2"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("num_replicas"), "{err}");
    assert!(err.contains("multi_worker_mirrored"), "{err}");
    assert!(!dir.join("run").join("model.safetensors").exists());
}

/// `mpirun -np 2 kiln train` with another strategy is refused (the processes would train
/// alone into the same run directory).
#[test]
fn other_strategies_are_refused_under_mpirun() {
    let _serial = one_job_at_a_time();
    require_data();
    let dir = common::scratch("mpi-refused");
    let cfg = config(&dir, 64, 1, 1000);
    let out = mpirun(2, &cfg, &dir.join("run"), &[]).output().unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("rank 1 of 2 started by mpirun, but the strategy is \"one_device\"")
            && stderr.contains("strategy = \"multi_worker_mirrored\""),
        "{stderr}"
    );
    assert!(!dir.join("run").join("model.safetensors").exists());
}

/// The kiln processes `mpirun` started (its children), by rank.
fn workers(mpirun: &Child) -> Vec<(usize, u32)> {
    let parent = mpirun.id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
        if after.split(' ').nth(1) != Some(parent.as_str()) {
            continue;
        }
        let env = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let rank = env
            .split(|b| *b == 0)
            .filter_map(|v| std::str::from_utf8(v).ok())
            .find_map(|v| v.strip_prefix("OMPI_COMM_WORLD_RANK="))
            .and_then(|r| r.parse().ok());
        if let Some(rank) = rank {
            found.push((rank, pid));
        }
    }
    found.sort();
    found
}

/// Checkpoint directories (`ckpt-*`) of a run.
fn checkpoints(run: &Path) -> usize {
    std::fs::read_dir(run.join("checkpoints")).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("ckpt-"))
            .count()
    })
}

/// SIGKILL of worker 1 in the middle of the run: the job ends (mpirun names the killed rank,
/// the surviving worker says how to resume), the checkpoints written so far stay readable,
/// and the same command run again resumes and ends with the one-process weights (1e-5),
/// removing the killed worker's scratch directory.
#[test]
fn a_killed_worker_ends_the_job_and_the_same_command_resumes() {
    let _serial = one_job_at_a_time();
    require_data();
    let dir = common::scratch("mpi-kill");
    // 6,000 examples, 188 batches of 32 per epoch, 3 epochs, a checkpoint every 40 batches.
    let cfg = config(&dir, 6000, 3, 40);
    let one = dir.join("one");
    one_process(&cfg, &one);

    let run = dir.join("two");
    let args = ["--strategy", "multi_worker_mirrored"];
    let job = mpirun(2, &cfg, &run, &args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    // The initial checkpoint and the one at batch 40.
    while checkpoints(&run) < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no checkpoint after 2 minutes"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let ranks = workers(&job);
    assert_eq!(ranks.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 1]);
    assert!(
        Command::new("kill")
            .args(["-KILL", &ranks[1].1.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let out = job.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("rank 1") && stderr.contains("signal 9"),
        "mpirun names the killed worker: {stderr}"
    );
    assert!(
        !run.join("model.safetensors").exists(),
        "killed after training"
    );
    let left = checkpoints(&run);
    assert!(left >= 2, "{left} checkpoints");
    let stale = std::env::temp_dir().join(format!("kiln-worker-{}", ranks[1].1));
    assert!(stale.is_dir(), "worker 1 writes to {}", stale.display());

    let out = mpirun(2, &cfg, &run, &args).output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("Resuming from"), "{stderr}");
    let diff = max_difference(&one, &run);
    assert!(diff <= 1e-5, "weights differ by {diff}");
    // The killed worker could not remove its scratch directory; the next run's workers did.
    assert!(!stale.exists(), "{} left behind", stale.display());
}

/// A 4-feature, 3-class CSV config over `FILES`, global batch 16, 2 epochs, no shuffle.
const CSV_CONFIG: &str = r#"
name = "shard"
seed = 5
[data]
data_dir = "DIR"
[data.train]
source = "csv"
files = FILES
label_name = "label"
x = "features"
batch_size = 16
map = [{ op = "stack", components = ["a", "b", "c", "d"], output = "features" }]
[model]
layers = [
  { type = "Input", shape = [4] },
  { type = "Dense", units = 8, activation = "relu" },
  { type = "Dense", units = 3 },
]
[compile]
optimizer = { type = "adamw", learning_rate = 0.01 }
loss = { type = "sparse_categorical_crossentropy", from_logits = true }
metrics = ["accuracy"]
[fit]
epochs = 2
"#;

/// CSV rows `rows` (features in [-1, 1), labels 0..3), with the header.
fn csv_rows(rows: impl Iterator<Item = usize>) -> String {
    let mut out = String::from("a,b,c,d,label\n");
    for i in rows {
        let f = |k: usize| ((i * 7 + k * 13) % 20) as f32 / 10.0 - 1.0;
        out += &format!("{},{},{},{},{}\n", f(0), f(1), f(2), f(3), (i * 5 + 1) % 3);
    }
    out
}

/// `auto_shard_policy` "auto" with 2 CSV files for 2 workers shards by file: worker 0 reads
/// rows 0..24 (a.csv), worker 1 rows 24..40 (b.csv), each in batches of 8. Steps: 8 + 8, 8 +
/// 8, then 8 + nothing (worker 1's file has run out; it steps with no examples). One process
/// reading one file with the same rows in that order (a 0..8, b 24..32, a 8..16, b 32..40,
/// a 16..24) in batches of 16 sees the same examples in each step: the weights agree within
/// 1e-5 and so do the logged loss and accuracy, over 2 epochs. (Another order, 0..16 first,
/// differs by 0.056: checked once by hand.)
#[test]
fn workers_reading_their_own_files_train_what_one_process_trains() {
    let _serial = one_job_at_a_time();
    let dir = common::scratch("mpi-shard");
    std::fs::write(dir.join("a.csv"), csv_rows(0..24)).unwrap();
    std::fs::write(dir.join("b.csv"), csv_rows(24..40)).unwrap();
    let joined: Vec<usize> = [0..8, 24..32, 8..16, 32..40, 16..24]
        .into_iter()
        .flatten()
        .collect();
    std::fs::write(dir.join("joined.csv"), csv_rows(joined.into_iter())).unwrap();
    let write = |name: &str, files: &str| {
        let path = dir.join(name);
        let text = CSV_CONFIG
            .replace("DIR", dir.to_str().unwrap())
            .replace("FILES", files);
        std::fs::write(&path, text).unwrap();
        path
    };
    let one_cfg = write("one.toml", r#""joined.csv""#);
    let two_cfg = write("two.toml", r#"["a.csv", "b.csv"]"#);
    let one = dir.join("one");
    let single = one_process(&one_cfg, &one);
    let two = dir.join("two");
    let out = mpirun(2, &two_cfg, &two, &["--strategy", "multi_worker_mirrored"])
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("Input sharded by file"), "{stderr}");
    let diff = max_difference(&one, &two);
    assert!(diff <= 1e-5, "weights differ by {diff}");
    let (a, b) = (epoch_logs(&text(&single.stdout)), epoch_logs(&stdout));
    assert_eq!(a.len(), 2, "{}", text(&single.stdout));
    assert_eq!(a, b);

    // "file" with fewer files than workers is refused, naming the key.
    let few = write("few.toml", r#""joined.csv""#);
    let text_cfg = std::fs::read_to_string(&few).unwrap()
        + "[distribute]\nstrategy = \"multi_worker_mirrored\"\nauto_shard_policy = \"file\"\n";
    std::fs::write(&few, text_cfg).unwrap();
    let out = mpirun(2, &few, &dir.join("few"), &[]).output().unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("distribute.auto_shard_policy") && stderr.contains("1 file for 2 workers"),
        "{stderr}"
    );
}

/// Sharded input, killed in the middle of an epoch in which one worker's file has run out,
/// resumes where it stopped. a.csv has 40 rows (5 batches of 8 on worker 0), b.csv 16 (2 on
/// worker 1, which then steps empty); BackupAndRestore every 3 batches. Rank 0 stalls in its
/// third checkpoint write (`KILN_TEST_CHECKPOINT_STALL`), both workers are killed, and the
/// last complete checkpoint is the one after step 3 of epoch 1 (worker 1 already exhausted).
/// The same command then resumes from it and ends on the weights of an uninterrupted run.
#[test]
fn sharded_input_resumes_in_the_middle_of_an_uneven_epoch() {
    let _serial = one_job_at_a_time();
    let dir = common::scratch("mpi-shard-kill");
    std::fs::write(dir.join("a.csv"), csv_rows(0..40)).unwrap();
    std::fs::write(dir.join("b.csv"), csv_rows(40..56)).unwrap();
    let cfg = dir.join("c.toml");
    let text_cfg = CSV_CONFIG
        .replace("DIR", dir.to_str().unwrap())
        .replace("FILES", r#"["a.csv", "b.csv"]"#)
        + "[[callbacks]]\ntype = \"BackupAndRestore\"\nsave_freq = 3\n";
    std::fs::write(&cfg, text_cfg).unwrap();
    let args = ["--strategy", "multi_worker_mirrored"];
    let whole = dir.join("whole");
    let out = mpirun(2, &cfg, &whole, &args).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    let run = dir.join("run");
    let job = mpirun(2, &cfg, &run, &args)
        .env("KILN_TEST_CHECKPOINT_STALL", "3")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let stalled = || {
        std::fs::read_dir(run.join("checkpoints"))
            .is_ok_and(|d| d.flatten().any(|e| e.path().join("STALLED").exists()))
    };
    while !stalled() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no stalled checkpoint after a minute"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for (_, pid) in workers(&job) {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    let _ = job.wait_with_output().unwrap();
    assert!(!run.join("model.safetensors").exists());

    // Another number of workers would read other files from the checkpoint's step on.
    let out = mpirun(3, &cfg, &run, &args).output().unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("their number changed (2 -> 1 readers)"),
        "{stderr}"
    );
    let out = mpirun(2, &cfg, &run, &args).output().unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Resuming from") && stderr.contains("(epoch 1, batch 3 of it"),
        "{stderr}"
    );
    let diff = max_difference(&whole, &run);
    assert!(diff <= 1e-6, "the resumed run differs by {diff}");
}

/// Sharded input agrees with one process where a worker's files alone cannot tell: with
/// `steps_per_epoch` and no `repeat` the input runs out in epoch 2 (worker 0 still has a
/// batch at its step 0, worker 1 none; then neither), so both stop there with the same
/// warning and weights; with `check_numerics = "skip"` a NaN row in worker 1's file is
/// counted in the logged `skipped_nonfinite` of the whole job (1), as one process counts it.
#[test]
fn sharded_steps_per_epoch_and_skipped_examples_match_one_process() {
    let _serial = one_job_at_a_time();
    let dir = common::scratch("mpi-shard-edges");
    let mut b_rows = csv_rows(24..40);
    // Row 3 of b.csv (example 27) gets a NaN feature.
    let lines: Vec<String> = b_rows.lines().map(String::from).collect();
    let mut fields: Vec<String> = lines[4].split(',').map(String::from).collect();
    fields[1] = "nan".into();
    let nan_line = fields.join(",");
    b_rows = lines
        .iter()
        .enumerate()
        .map(|(i, l)| if i == 4 { nan_line.clone() } else { l.clone() } + "\n")
        .collect();
    std::fs::write(dir.join("a.csv"), csv_rows(0..24)).unwrap();
    std::fs::write(dir.join("b.csv"), &b_rows).unwrap();
    // The same examples in each step in one file: a 0..8, b 24..32, a 8..16, b 32..40, a 16..24.
    let b_body: Vec<&str> = b_rows.lines().skip(1).collect();
    let a_rows = csv_rows(0..24);
    let a_body: Vec<&str> = a_rows.lines().skip(1).collect();
    let mut joined = String::from("a,b,c,d,label\n");
    for part in [
        &a_body[0..8],
        &b_body[0..8],
        &a_body[8..16],
        &b_body[8..16],
        &a_body[16..24],
    ] {
        for l in part {
            joined += l;
            joined.push('\n');
        }
    }
    std::fs::write(dir.join("joined.csv"), joined).unwrap();
    let extra =
        "column_defaults = [\"float32\", \"float32\", \"float32\", \"float32\", \"int32\"]\n";
    let write = |name: &str, files: &str, fit: &str| {
        let path = dir.join(name);
        let text = CSV_CONFIG
            .replace("DIR", dir.to_str().unwrap())
            .replace("FILES", files)
            .replace("batch_size = 16\n", &format!("batch_size = 16\n{extra}"))
            .replace("[fit]\nepochs = 2\n", fit);
        std::fs::write(&path, text).unwrap();
        path
    };
    let args = ["--strategy", "multi_worker_mirrored"];
    let history = |run: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(run.join("history.json")).unwrap()).unwrap()
    };
    for (name, fit, check) in [
        (
            "steps",
            "[fit]\nepochs = 3\nsteps_per_epoch = 2\ncheck_numerics = \"skip\"\n",
            "ran out of data after 1 of",
        ),
        (
            "skip",
            "[fit]\nepochs = 2\ncheck_numerics = \"skip\"\n",
            "Input sharded by file",
        ),
    ] {
        let one_cfg = write(&format!("{name}-one.toml"), r#""joined.csv""#, fit);
        let two_cfg = write(&format!("{name}-two.toml"), r#"["a.csv", "b.csv"]"#, fit);
        let one = dir.join(format!("{name}-one"));
        let single = one_process(&one_cfg, &one);
        let two = dir.join(format!("{name}-two"));
        let out = mpirun(2, &two_cfg, &two, &args).output().unwrap();
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains(check), "{name}: {stderr}");
        if name == "steps" {
            assert!(
                text(&single.stderr).contains(check),
                "{}",
                text(&single.stderr)
            );
        }
        let diff = max_difference(&one, &two);
        assert!(diff <= 1e-5, "{name}: weights differ by {diff}");
        let (h1, h2) = (history(&one), history(&two));
        assert_eq!(h1["epoch"], h2["epoch"], "{name}");
        assert_eq!(
            h1["history"]["skipped_nonfinite"], h2["history"]["skipped_nonfinite"],
            "{name}"
        );
        if name == "skip" {
            assert_eq!(
                h2["history"]["skipped_nonfinite"],
                serde_json::json!([1.0, 1.0])
            );
        }
    }
}
