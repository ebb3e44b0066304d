//! What the `kiln` binary's integration tests share: the Fashion-MNIST location, scratch
//! directories and the `kiln train` command line.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `scripts/setup.sh` installs Fashion-MNIST (Debian's dataset-fashion-mnist).
pub const DATA: &str = "/usr/share/datasets/fashion-mnist";

/// Fails the test with the fix when the dataset is missing.
pub fn require_data() {
    assert!(
        Path::new(DATA).join("t10k-labels-idx1-ubyte.gz").is_file(),
        "Fashion-MNIST is missing: run scripts/setup.sh"
    );
}

/// An empty directory `kiln-cli-<name>-<pid>` under the system's temporary directory.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `kiln train CONFIG --run-dir RUN EXTRA...`, not yet run.
pub fn train_command(config: &Path, run: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.arg("train")
        .arg(config)
        .arg("--run-dir")
        .arg(run)
        .args(extra);
    c
}

/// A seeded MLP on the first TAKE Fashion-MNIST examples in batches of 32, AdamW, with
/// BackupAndRestore every SAVE_FREQ batches.
pub const MLP_CONFIG: &str = r#"
name = "mlp"
seed = 11
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
batch_size = 32
[model]
layers = [
  { type = "Input", shape = [28, 28, 1] },
  { type = "Flatten" },
  { type = "Dense", units = 16, activation = "relu" },
  { type = "Dense", units = 10 },
]
[compile]
optimizer = { type = "adamw", learning_rate = 0.01 }
loss = { type = "sparse_categorical_crossentropy", from_logits = true }
metrics = ["accuracy"]
[fit]
epochs = EPOCHS
[[callbacks]]
type = "BackupAndRestore"
save_freq = SAVE_FREQ
"#;

/// Writes the MLP config (with `extra` TOML appended) as `mlp-TAKE-EPOCHS.toml` in `dir`.
pub fn mlp_config(
    dir: &Path,
    take: usize,
    epochs: usize,
    save_freq: usize,
    extra: &str,
) -> PathBuf {
    let path = dir.join(format!("mlp-{take}-{epochs}.toml"));
    let text = MLP_CONFIG
        .replace("DATA", DATA)
        .replace("TAKE", &take.to_string())
        .replace("EPOCHS", &epochs.to_string())
        .replace("SAVE_FREQ", &save_freq.to_string());
    std::fs::write(&path, text + extra).unwrap();
    path
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The float32 tensors of a safetensors file, by name (its 8-byte header length, JSON header,
/// little-endian data).
pub fn weights(run: &Path) -> Vec<(String, Vec<f32>)> {
    let bytes = std::fs::read(run.join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut out: Vec<(String, Vec<f32>)> = header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| {
            assert_eq!(v["dtype"], "F32", "{k}");
            let at = |i: usize| v["data_offsets"][i].as_u64().unwrap() as usize;
            let values = data[at(0)..at(1)]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            (k.clone(), values)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Largest absolute difference between two runs' weights (same names and shapes).
pub fn max_difference(a: &Path, b: &Path) -> f32 {
    let (a, b) = (weights(a), weights(b));
    assert_eq!(
        a.iter().map(|t| (&t.0, t.1.len())).collect::<Vec<_>>(),
        b.iter().map(|t| (&t.0, t.1.len())).collect::<Vec<_>>()
    );
    a.iter()
        .zip(&b)
        .flat_map(|(x, y)| x.1.iter().zip(&y.1).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}
