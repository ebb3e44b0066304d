//! What a fresh user met with the Keras vocabulary (issue 20): mistakes in a config are refused
//! before training with a one-line error naming the key (exit code 2), and an adapted
//! `Normalization` carries its statistics into the saved and exported weights.

use std::path::{Path, PathBuf};
use std::process::Output;

use kiln_data::{Array, Buffer};

mod common;
use common::{scratch, text, train_command, weights};

/// `x.npy` (`x`, float32) and `y.npy` (16 labels `i % 2`, int64) in `dir`.
fn write_data(dir: &Path, x: Array) {
    let y = Array::new(vec![16], Buffer::I64((0..16).map(|i| i % 2).collect())).unwrap();
    kiln_data::npy::write_npy(&dir.join("x.npy"), &x).unwrap();
    kiln_data::npy::write_npy(&dir.join("y.npy"), &y).unwrap();
}

/// A run config over `dir`'s `x.npy` / `y.npy` in batches of 8, one epoch; `train` is
/// appended to `[data.train]`, `layers` follow the Input of shape `input`.
fn config(dir: &Path, train: &str, input: &str, layers: &str, loss: &str) -> PathBuf {
    let text = format!(
        "name = \"left\"\nseed = 1\n[data]\ndata_dir = {:?}\n[data.train]\nsource = \"npy\"\n\
         files = [\"x.npy\", \"y.npy\"]\nbatch_size = 8\n{train}\n[model]\nlayers = [\n  \
         {{ type = \"Input\", shape = {input} }},\n{layers}\n]\n[compile]\noptimizer = \"sgd\"\n\
         loss = \"{loss}\"\n[fit]\nepochs = 1\n",
        dir.display().to_string()
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn train(dir: &Path, config: &Path) -> Output {
    train_command(config, &dir.join("run"), &[])
        .output()
        .unwrap()
}

/// Exit code 2 and a stderr of one `kiln: error:` line holding `want`, before any epoch.
fn assert_refused(out: &Output, want: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(want), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        !text(&out.stdout).contains("Epoch"),
        "{}",
        text(&out.stdout)
    );
}

fn images() -> Array {
    Array::new(
        vec![16, 4, 4, 1],
        Buffer::F32((0..256).map(|v| v as f32).collect()),
    )
    .unwrap()
}

const IMAGE_MODEL: &str =
    "  { type = \"Flatten\" },\n  { type = \"Dense\", units = 2, activation = \"softmax\" },";

#[test]
fn mix_up_on_class_ids_is_refused_before_training() {
    let dir = scratch("mix-ids");
    write_data(&dir, images());
    for (mix, loss) in [
        ("mix_up = {}", "sparse_categorical_crossentropy"),
        ("cut_mix = {}", "categorical_crossentropy"),
    ] {
        let cfg = config(&dir, mix, "[4, 4, 1]", IMAGE_MODEL, loss);
        let name = mix.split(' ').next().unwrap();
        assert_refused(
            &train(&dir, &cfg),
            &format!(
                "data.train.{name}: {name} blends one-hot labels, but the labels \"y\" are int64 \
                 scalars (class ids); add {{ op = \"one_hot\", component = \"y\""
            ),
        );
    }
    // One-hot labels train.
    let cfg = config(
        &dir,
        "mix_up = {}\nmap = [{ op = \"one_hot\", component = \"y\", depth = 2 }]",
        "[4, 4, 1]",
        IMAGE_MODEL,
        "categorical_crossentropy",
    );
    let out = train(&dir, &cfg);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn contradicting_preprocessing_arguments_are_config_errors() {
    let dir = scratch("contradict");
    let x = Array::new(
        vec![16, 2],
        Buffer::F32((0..32).map(|v| v as f32).collect()),
    )
    .unwrap();
    write_data(&dir, x);
    let dense = "  { type = \"Dense\", units = 2 },";
    let loss = "sparse_categorical_crossentropy";
    let norm = "  { type = \"Normalization\", name = \"norm\", adapt = true, mean = 1.0, \
                variance = 1.0 },";
    let cfg = config(&dir, "", "[2]", &format!("{norm}\n{dense}"), loss);
    assert_refused(
        &train(&dir, &cfg),
        "model.layers[1] (Normalization): give either adapt = true or `mean` and `variance`, not both",
    );
    let text_op = "map = [{ op = \"text_vectorization\", ngrams = 0, vocabulary = [\"a\"] }]";
    let cfg = config(&dir, text_op, "[2]", dense, loss);
    assert_refused(
        &train(&dir, &cfg),
        "data.train.map[0].ngrams: 0 makes no tokens",
    );
    let text_op = text_op.replace("ngrams = 0", "ngrams = []");
    let cfg = config(&dir, &text_op, "[2]", dense, loss);
    assert_refused(
        &train(&dir, &cfg),
        "data.train.map[0].ngrams: an empty list makes no tokens",
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn padded_batch_longer_than_the_input_says_which_shape_to_change() {
    let dir = scratch("padded");
    let x = Array::new(vec![16, 6, 2], Buffer::F32(vec![0.5; 192])).unwrap();
    write_data(&dir, x);
    let cfg = config(
        &dir,
        "padded_batch = { padded_shapes = { x = [10, 2] } }",
        "[6, 2]",
        "  { type = \"LSTM\", units = 3 },\n  { type = \"Dense\", units = 2 },",
        "sparse_categorical_crossentropy",
    );
    assert_refused(
        &train(&dir, &cfg),
        "set the Input's `shape` to the padded shape, or pad to the Input's with \
         data.train.padded_batch = { padded_shapes = { x = [6, 2] } }",
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A `Normalization` with `adapt = true` after training: the run's weights and the exported
/// ones hold the statistics of the training features (Keras' `mean` and `variance` weights),
/// not the placeholder zeros and ones.
#[test]
fn adapted_normalization_weights_are_saved_and_exported() {
    let dir = scratch("adapted");
    // Columns i and 2 i + 1 for i in 0..16: means 7.5 and 16, variances 21.25 and 85.
    let x: Vec<f32> = (0..16)
        .flat_map(|i| [i as f32, 2.0 * i as f32 + 1.0])
        .collect();
    write_data(&dir, Array::new(vec![16, 2], Buffer::F32(x)).unwrap());
    let layers = "  { type = \"Normalization\", name = \"norm\", adapt = true },\n  \
                  { type = \"Dense\", units = 2 },";
    let cfg = config(&dir, "", "[2]", layers, "sparse_categorical_crossentropy");
    let out = train(&dir, &cfg);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run = dir.join("run");
    let export = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["export", "--format", "safetensors", "--out"])
        .arg(dir.join("export"))
        .arg(&run)
        .output()
        .unwrap();
    assert!(export.status.success(), "{}", text(&export.stderr));
    for saved in [run, dir.join("export/left/1")] {
        let w = weights(&saved);
        let get = |name: &str| -> &[f32] {
            &w.iter()
                .find(|(k, _)| k.ends_with(name))
                .unwrap_or_else(|| panic!("{name} in {w:?}"))
                .1
        };
        assert_eq!(get("norm/mean"), [7.5, 16.0], "{}", saved.display());
        assert_eq!(get("norm/variance"), [21.25, 85.0], "{}", saved.display());
    }
    std::fs::remove_dir_all(dir).unwrap();
}
