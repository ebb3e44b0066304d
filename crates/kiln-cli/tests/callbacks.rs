//! `[[callbacks]]` as a user meets them: `kiln train` with EarlyStopping, CSVLogger,
//! TensorBoard and two ModelCheckpoints from the config writes what each promises, in the run
//! directory; and a resumed run continues the callbacks' state (EarlyStopping's count, the
//! CSV file) instead of starting them over.

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{DATA, require_data, train_command};

/// A small MLP on 2048 Fashion-MNIST examples (32 batches of 64), validated on 1000 test
/// examples. EarlyStopping watches `loss` with patience 0 and a min_delta no change can beat:
/// the first epoch sets the best, the second cannot improve on it and stops training.
const CONFIG: &str = r#"
name = "callbacks"
seed = 5
[data]
data_dir = "DATA"
[data.train]
source = "idx"
files = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]
components = ["image", "label"]
x = "image"
y = "label"
take = 2048
map = [{ op = "rescale", scale = 0.00392156862745098, component = "image" }]
shuffle = { buffer_size = 2048, seed = 1 }
batch_size = 64
[data.validation]
source = "idx"
files = ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
components = ["image", "label"]
x = "image"
y = "label"
take = 1000
map = [{ op = "rescale", scale = 0.00392156862745098, component = "image" }]
batch_size = 250
[model]
layers = [
  { type = "Input", shape = [28, 28, 1] },
  { type = "Flatten" },
  { type = "Dense", units = 32, activation = "relu" },
  { type = "Dense", units = 10 },
]
[compile]
optimizer = "adam"
loss = { type = "sparse_categorical_crossentropy", from_logits = true }
metrics = ["accuracy"]
[fit]
epochs = 5

[[callbacks]]
type = "EarlyStopping"
monitor = "loss"
patience = 0
min_delta = 100.0

[[callbacks]]
type = "CSVLogger"
filename = "history.csv"

[[callbacks]]
type = "TensorBoard"

[[callbacks]]
type = "ModelCheckpoint"
filepath = "weights/e{epoch:02d}-{val_loss:.3f}.safetensors"

[[callbacks]]
type = "ModelCheckpoint"
filepath = "best.safetensors"
save_best_only = true
"#;

/// CSVLogger's header for these runs: the epoch, then the logs' keys sorted.
const HEADER: &str =
    "epoch,accuracy,input_wait_seconds,loss,samples_per_second,val_accuracy,val_loss";

fn scratch(name: &str) -> PathBuf {
    common::scratch(&format!("callbacks-{name}"))
}

fn write_config(dir: &Path) -> PathBuf {
    require_data();
    let path = dir.join("callbacks.toml");
    std::fs::write(&path, CONFIG.replace("DATA", DATA)).unwrap();
    path
}

fn train(config: &Path, run: &Path, extra: &[&str]) -> Output {
    let o = train_command(config, run, extra).output().unwrap();
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// `history.json`'s per-epoch values of `key`.
fn history(run: &Path, key: &str) -> Vec<f64> {
    let h: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("history.json")).unwrap()).unwrap();
    h["history"][key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in history.json"))
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

fn csv_rows(run: &Path) -> Vec<String> {
    std::fs::read_to_string(run.join("history.csv"))
        .unwrap()
        .split("\r\n")
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn config_callbacks_write_their_files_and_early_stopping_stops() {
    let dir = scratch("train");
    let cfg = write_config(&dir);
    let run = dir.join("run");
    let o = train(&cfg, &run, &[]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    // EarlyStopping: epoch 0 sets the best loss, epoch 1 cannot beat it by 100: stop.
    assert!(stdout.contains("Trained 2 epochs"), "{stdout}");
    let loss = history(&run, "loss");
    let val_loss = history(&run, "val_loss");
    assert_eq!((loss.len(), val_loss.len()), (2, 2));

    // CSVLogger: Keras' header (sorted keys, with kiln's throughput and input-wait logs) and
    // one row per epoch, values as Python's repr.
    let rows = csv_rows(&run);
    assert_eq!(rows[0], HEADER);
    assert_eq!(rows.len(), 3, "{rows:?}");
    // (serde_json, without its float_roundtrip feature, may read history.json's values 1 ulp
    // off: compare to 1e-15.)
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-15 * b.abs();
    for (epoch, row) in rows[1..].iter().enumerate() {
        let fields: Vec<&str> = row.split(',').collect();
        assert_eq!(fields[0], epoch.to_string());
        assert!(close(fields[3].parse().unwrap(), loss[epoch]), "{row}");
        assert!(close(fields[6].parse().unwrap(), val_loss[epoch]), "{row}");
    }

    // TensorBoard: logs/ in the run directory, one epoch_loss per epoch (float32).
    let tb = kiln::summary::read_scalars(&run.join("logs/train"), "epoch_loss").unwrap();
    assert_eq!(
        tb,
        vec![(0, loss[0] as f32), (1, loss[1] as f32)],
        "TensorBoard epoch_loss"
    );
    let val = kiln::summary::read_scalars(&run.join("logs/validation"), "epoch_loss").unwrap();
    assert_eq!(val.len(), 2);

    // ModelCheckpoint every epoch: names formatted from the epoch (1-based) and val_loss.
    let mut names: Vec<String> = std::fs::read_dir(run.join("weights"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let want: Vec<String> = val_loss
        .iter()
        .enumerate()
        .map(|(e, v)| format!("e{:02}-{v:.3}.safetensors", e + 1))
        .collect();
    assert_eq!(names, want);
    // The last epoch's checkpoint holds the final weights, byte for byte.
    let final_weights = std::fs::read(run.join("model.safetensors")).unwrap();
    assert_eq!(
        std::fs::read(run.join("weights").join(&want[1])).unwrap(),
        final_weights
    );
    // save_best_only: the weights of the epoch with the lowest val_loss.
    let best_epoch = if val_loss[1] < val_loss[0] { 1 } else { 0 };
    assert_eq!(
        std::fs::read(run.join("best.safetensors")).unwrap(),
        std::fs::read(run.join("weights").join(&want[best_epoch])).unwrap()
    );

    // The resolved config keeps the callbacks.
    let resolved = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert_eq!(resolved.matches("[[callbacks]]").count(), 5, "{resolved}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_resumed_run_continues_the_callbacks_state() {
    let dir = scratch("resume");
    let cfg = write_config(&dir);
    let run = dir.join("run");
    // One epoch: EarlyStopping's best is epoch 0's loss; the CSV has one row.
    train(&cfg, &run, &["--epochs", "1"]);
    assert_eq!(csv_rows(&run).len(), 2);
    // The same run asked for more epochs resumes after epoch 0. With EarlyStopping's state
    // restored, epoch 1 is its second epoch without improvement: it stops there (a fresh
    // EarlyStopping would take epoch 1 as its first and stop only after epoch 2). The CSV is
    // continued, not started over.
    let o = train(&cfg, &run, &["--epochs", "4"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("Resuming from"), "{stderr}");
    assert_eq!(history(&run, "loss").len(), 2);
    let rows = csv_rows(&run);
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[0], HEADER);
    assert!(
        rows[1].starts_with("0,") && rows[2].starts_with("1,"),
        "{rows:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
