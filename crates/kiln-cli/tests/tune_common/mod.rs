//! What the `kiln tune` tests share: a tiny study (a small MLP on 512 Fashion-MNIST test
//! images, 2 epochs: about a second a trial), the `kiln tune` command and the study's trials
//! read back from its database.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_tune::storage::StoredTrial;
use kiln_tune::{StudyOptions, TuneConfig};

/// The base run config: 512 training and 256 validation images from the Fashion-MNIST test
/// file, a 1-hidden-layer MLP.
pub const BASE: &str = r#"
name = "tiny"
seed = 5
[data]
data_dir = "DATA"
[data.train]
source = "idx"
files = ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
components = ["image", "label"]
x = "image"
y = "label"
take = 512
map = [{ op = "rescale", scale = 0.00392156862745098, component = "image" }]
batch_size = 64
[data.validation]
source = "idx"
files = ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
components = ["image", "label"]
x = "image"
y = "label"
skip = 512
take = 256
map = [{ op = "rescale", scale = 0.00392156862745098, component = "image" }]
batch_size = 128
[model]
layers = [
  { type = "Input", shape = [28, 28, 1] },
  { type = "Flatten" },
  { type = "Dense", units = 32, activation = "relu" },
  { type = "Dense", units = 10 },
]
[compile]
optimizer = { type = "AdamW" }
loss = { type = "sparse_categorical_crossentropy", from_logits = true }
metrics = ["accuracy"]
[fit]
epochs = 5
"#;

/// The tune config: `TUNER` is replaced by extra `[tuner]` lines, `OVERRIDES` by extra
/// `[overrides]` lines.
pub const TUNE: &str = r#"
base = "base.toml"
[tuner]
objective = "val_accuracy"
seed = 11
TUNER
[overrides]
"fit.epochs" = 2
OVERRIDES
[[hyperparameters]]
name = "learning_rate"
key = "compile.optimizer.learning_rate"
type = "Choice"
values = [0.0003, 0.001, 0.003, 0.01]
[[hyperparameters]]
name = "units"
key = "model.layers[2].units"
type = "Choice"
values = [16, 32, 64]
"#;

/// Writes `base.toml` and `<name>.toml` (with `tuner` lines in `[tuner]`) into `dir`.
pub fn write_study(dir: &Path, name: &str, tuner: &str) -> PathBuf {
    write_study_with(dir, name, tuner, "")
}

/// [`write_study`] with `overrides` lines in `[overrides]`.
pub fn write_study_with(dir: &Path, name: &str, tuner: &str, overrides: &str) -> PathBuf {
    crate::common::require_data();
    std::fs::write(
        dir.join("base.toml"),
        BASE.replace("DATA", crate::common::DATA),
    )
    .unwrap();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        TUNE.replace("TUNER", tuner).replace("OVERRIDES", overrides),
    )
    .unwrap();
    path
}

/// `kiln tune CONFIG --study-dir DIR EXTRA...`, not yet run.
pub fn tune_command(config: &Path, study_dir: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.arg("tune")
        .arg(config)
        .arg("--study-dir")
        .arg(study_dir)
        .args(extra);
    c
}

/// The study's trials, read from its database (`storage`, default the study directory's).
pub fn trials(config: &Path, study_dir: &Path, storage: Option<&str>) -> Vec<StoredTrial> {
    let cfg = TuneConfig::load(config).unwrap();
    let opts = StudyOptions {
        study_dir: study_dir.to_path_buf(),
        storage: storage.map(str::to_string),
        max_trials: None,
        runner: kiln_tune::runner::Runner::new("kiln"),
        check_config: None,
        stop: None,
    };
    let mut storage = kiln_tune::study::open_storage(&cfg, &opts).unwrap();
    storage.trials().unwrap()
}

/// Polls `ready` every 10 ms until it holds; panics after two minutes naming `what` (a
/// generous deadline: the event is awaited, never assumed after a fixed time).
pub fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !ready() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not reached within 120 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Output of a finished command as text, stdout then stderr.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
