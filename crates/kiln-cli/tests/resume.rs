//! BackupAndRestore as a user meets it: `kiln train` killed with SIGKILL at several instants
//! (one in the middle of writing a checkpoint) or stopped with SIGTERM, then run again with the
//! same command, ends with weights bit-identical to an uninterrupted run's. Also: a resume
//! whose data changed is refused with the change named.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{DATA, require_data, train_command};

/// A seeded MLP with dropout on 8192 shuffled Fashion-MNIST examples (128 batches of 64 per
/// epoch), 3 epochs: every source of randomness that a resume must replay is on.
const CONFIG: &str = r#"
name = "resume"
seed = 7
[data]
data_dir = "DATA"
[data.train]
source = "idx"
files = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]
components = ["image", "label"]
x = "image"
y = "label"
take = TAKE
map = [{ op = "rescale", scale = 0.00392156862745098, component = "image" }]
shuffle = { buffer_size = 4096, seed = 3 }
batch_size = 64
[model]
layers = [
  { type = "Input", shape = [28, 28, 1] },
  { type = "Flatten" },
  { type = "Dense", units = 128, activation = "relu" },
  { type = "Dropout", rate = 0.3 },
  { type = "Dense", units = 10 },
]
[compile]
optimizer = "adamw"
loss = { type = "sparse_categorical_crossentropy", from_logits = true }
metrics = ["accuracy"]
[fit]
epochs = 3
"#;

fn scratch(name: &str) -> PathBuf {
    common::scratch(&format!("resume-{name}"))
}

fn config(dir: &Path, take: usize) -> PathBuf {
    let path = dir.join(format!("resume-{take}.toml"));
    let text = CONFIG
        .replace("DATA", DATA)
        .replace("TAKE", &take.to_string());
    std::fs::write(&path, text).unwrap();
    path
}

/// A ModelCheckpoint every 8 batches to `marks/e{epoch}.safetensors` in the run directory:
/// the file of epoch N appears at its 8th batch, an event a test can wait for before it kills
/// the run in the middle of that epoch (128 batches).
const MARKS: &str = r#"
[[callbacks]]
type = "ModelCheckpoint"
filepath = "marks/e{epoch}.safetensors"
save_freq = 8
"#;

/// [`config`] with [`MARKS`].
fn marked_config(dir: &Path, take: usize) -> PathBuf {
    let path = config(dir, take);
    let text = std::fs::read_to_string(&path).unwrap() + MARKS;
    std::fs::write(&path, text).unwrap();
    path
}

/// Whether epoch `epoch` (1-based) of the run has trained its first 8 batches.
fn inside_epoch(run: &Path, epoch: usize) -> bool {
    run.join(format!("marks/e{epoch}.safetensors")).is_file()
}

fn command(config: &Path, run: &Path, extra: &[&str]) -> Command {
    let mut c = train_command(config, run, extra);
    // One thread: summation orders then do not depend on how work is split.
    c.env("RAYON_NUM_THREADS", "1");
    c
}

fn train(config: &Path, run: &Path, extra: &[&str]) -> Output {
    command(config, run, extra).output().unwrap()
}

fn spawn(config: &Path, run: &Path, env: &[(&str, &str)]) -> Child {
    let mut c = command(config, run, &[]);
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

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

/// Waits until `ready` holds (polling), panicking after two minutes.
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn sigkill(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

fn weights(run: &Path) -> Vec<u8> {
    std::fs::read(run.join("model.safetensors")).unwrap()
}

fn resumed_ok(config: &Path, run: &Path) -> Output {
    let o = train(config, run, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("Resuming from"), "{err}");
    o
}

#[test]
fn killed_runs_resume_to_bit_identical_weights() {
    require_data();
    let dir = scratch("kill");
    let cfg = marked_config(&dir, 8192);

    let reference = dir.join("reference");
    let o = train(&cfg, &reference, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = weights(&reference);
    // Initial checkpoint + one per epoch, all kept (keep = 3 keeps the newest three).
    assert_eq!(checkpoints(&reference).len(), 3);

    // 1. SIGKILL early in the first epoch (only the initial checkpoint exists).
    let run = dir.join("early");
    let mut child = spawn(&cfg, &run, &[]);
    wait_for("8 batches of epoch 1", || inside_epoch(&run, 1));
    sigkill(&mut child);
    assert!(!run.join("model.safetensors").exists(), "killed too late");
    resumed_ok(&cfg, &run);
    assert!(
        weights(&run) == want,
        "resumed after an early kill: weights differ"
    );

    // 2. SIGKILL in the middle of writing the end-of-epoch-2 checkpoint (the third write:
    //    initial, epoch 1, epoch 2): the model file is written, the manifest is not.
    let run = dir.join("torn");
    let mut child = spawn(&cfg, &run, &[("KILN_TEST_CHECKPOINT_STALL", "3")]);
    wait_for("the stalled checkpoint write", || {
        std::fs::read_dir(run.join("checkpoints"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .any(|e| e.path().join("STALLED").exists())
            })
            .unwrap_or(false)
    });
    sigkill(&mut child);
    assert_eq!(
        checkpoints(&run).len(),
        2,
        "the torn checkpoint must not count"
    );
    resumed_ok(&cfg, &run);
    assert!(
        weights(&run) == want,
        "resumed after a torn checkpoint: weights differ"
    );

    // 3. SIGKILL during the third epoch.
    let run = dir.join("late");
    let mut child = spawn(&cfg, &run, &[]);
    wait_for("8 batches of epoch 3", || inside_epoch(&run, 3));
    sigkill(&mut child);
    assert!(!run.join("model.safetensors").exists(), "killed too late");
    resumed_ok(&cfg, &run);
    assert!(
        weights(&run) == want,
        "resumed after a late kill: weights differ"
    );

    // 4. SIGTERM mid-epoch: the batch is finished, a checkpoint written there, exit 143; the
    //    resume starts inside the epoch.
    let run = dir.join("term");
    let child = spawn(&cfg, &run, &[]);
    wait_for("8 batches of epoch 2", || inside_epoch(&run, 2));
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(err.contains("stopped by signal 15"), "{err}");
    let o = resumed_ok(&cfg, &run);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        !said.contains(", batch 0 of it"),
        "SIGTERM should checkpoint mid-epoch: {said}"
    );
    assert!(
        weights(&run) == want,
        "resumed after SIGTERM: weights differ"
    );

    // The history continues across the resume: three epochs, as the reference's.
    let h = |r: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(r.join("history.json")).unwrap()).unwrap()
    };
    assert_eq!(h(&run)["history"]["loss"], h(&reference)["history"]["loss"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_kill_inside_gradient_accumulation_resumes_to_identical_weights() {
    let dir = scratch("accumulate");
    // Updates every 4 batches; a batch-count checkpoint every 6 batches falls inside a window
    // half of the time and is then written at the window's end.
    let text = std::fs::read_to_string(config(&dir, 4096))
        .unwrap()
        .replace(
            "optimizer = \"adamw\"",
            "optimizer = { type = \"AdamW\", gradient_accumulation_steps = 4 }",
        )
        + "\n[[callbacks]]\ntype = \"BackupAndRestore\"\nsave_freq = 6\nkeep = 50\n";
    let cfg = dir.join("accumulate.toml");
    std::fs::write(&cfg, text).unwrap();
    let reference = dir.join("reference");
    let o = train(&cfg, &reference, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let steps: Vec<u64> = checkpoints(&reference)
        .iter()
        .map(|n| n.trim_start_matches("ckpt-").parse().unwrap())
        .collect();
    assert!(steps.len() > 10, "{steps:?}");
    assert!(
        steps.iter().all(|s| s % 4 == 0),
        "checkpoints only at update boundaries: {steps:?}"
    );
    let run = dir.join("killed");
    let mut child = spawn(&cfg, &run, &[]);
    wait_for("a few batch checkpoints", || checkpoints(&run).len() >= 4);
    sigkill(&mut child);
    assert!(!run.join("model.safetensors").exists(), "killed too late");
    resumed_ok(&cfg, &run);
    assert!(
        weights(&run) == weights(&reference),
        "weights differ after the resume"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_resume_with_changed_data_is_refused_naming_the_change() {
    let dir = scratch("changed");
    let run = dir.join("run");
    let small = config(&dir, 1024);
    let o = train(&small, &run, &["--epochs", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bigger = config(&dir, 2048);
    let o = train(&bigger, &run, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("the data or its pipeline changed"), "{err}");
    assert!(err.contains("data.train.take: 1024 -> 2048"), "{err}");
    assert!(err.contains("--allow-changed-data"), "{err}");
    // Allowed: it resumes and trains epochs 2 and 3.
    let o = train(&bigger, &run, &["--allow-changed-data"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("resuming with changed data"), "{err}");
    // --no-resume starts over.
    let o = train(&bigger, &run, &["--no-resume", "--epochs", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("Resuming"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
