//! The custom-layer example as a user runs it: its own `kiln` trains the antirectifier model
//! from TOML on real Fashion-MNIST, and a run interrupted after its first epoch and resumed
//! from the checkpoint ends with the same weights' history as one that ran straight through
//! (the layer's weights round-trip through the checkpoint). The run's loss and one of its
//! metrics are the crate's own too; the loss is checked against Keras' numbers.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

use burn::prelude::*;
use kiln::compile::{Labels, LossSpec};

const DATA: &str = "/usr/share/datasets/fashion-mnist";

const CONFIG: &str = r#"
name = "antirectifier"
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
batch_size = 64
[model]
layers = [
  { type = "Input", shape = [28, 28] },
  { type = "Flatten" },
  { type = "Dense", units = 64 },
  { type = "Antirectifier" },
  { type = "Dense", units = 64 },
  { type = "Antirectifier" },
  { type = "Dropout", rate = 0.1 },
  { type = "Dense", units = 10 },
]
[compile]
optimizer = { type = "adamw", learning_rate = 0.003 }
loss = { type = "sparse_focal_crossentropy", gamma = 2.0, from_logits = true }
metrics = ["accuracy", "top2_accuracy"]
[fit]
epochs = 2
"#;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-custom-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `kiln-custom train CONFIG --run-dir RUN EXTRA...`: its output, asserting success.
fn train(config: &Path, run: &Path, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln-custom"))
        .arg("train")
        .arg(config)
        .arg("--run-dir")
        .arg(run)
        .args(extra)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    text
}

/// The crate's layer, loss and metric, registered once in this test process.
fn registered() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| kiln_custom_layer::register().unwrap());
}

fn series(h: &serde_json::Value, key: &str) -> Vec<f64> {
    let values = h[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {h}"));
    values.iter().map(|v| v.as_f64().unwrap()).collect()
}

fn history(run: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(run.join("history.json")).unwrap();
    let h: serde_json::Value = serde_json::from_str(&text).unwrap();
    h["history"].clone()
}

#[test]
fn the_custom_kiln_trains_the_antirectifier_and_resumes_it_exactly() {
    assert!(
        Path::new(DATA).join("train-images-idx3-ubyte.gz").is_file(),
        "Fashion-MNIST is missing: run scripts/setup.sh"
    );
    let dir = scratch("antirectifier");
    let config = dir.join("antirectifier.toml");
    std::fs::write(&config, CONFIG.replace("DATA", DATA)).unwrap();

    let straight = dir.join("straight");
    let text = train(&config, &straight, &[]);
    // summary(): the layer's name, its output shape and its parameters (64 * 2 * 64).
    assert!(text.contains("antirectifier (Antirectifier)"), "{text}");
    assert!(text.contains("8,192"), "{text}");
    let h = history(&straight);
    let loss = series(&h, "loss");
    assert_eq!(loss.len(), 2);
    // The focal loss (alpha 0.25) of a 10-class model starts below 0.25 * ln 10 = 0.58.
    assert!(
        loss[1] < loss[0] && loss[1] < 0.2,
        "the model learns: {loss:?}"
    );
    let accuracy = series(&h, "accuracy");
    assert!(accuracy[1] > 0.6, "accuracy {accuracy:?}");
    // The crate's metric, under its name: a share, at least the top-1 accuracy, and moving.
    let top2 = series(&h, "top2_accuracy");
    assert_eq!(top2.len(), 2);
    for (t, a) in top2.iter().zip(&accuracy) {
        assert!(
            (0.0..=1.0).contains(t) && t >= a,
            "top2 {top2:?}, accuracy {accuracy:?}"
        );
    }
    assert!(
        top2[1] > top2[0],
        "top2_accuracy changes with training: {top2:?}"
    );

    // One epoch, then a resume to two: the same history as the straight run.
    let resumed = dir.join("resumed");
    train(&config, &resumed, &["--epochs", "1"]);
    let text = train(&config, &resumed, &[]);
    assert!(text.contains("Resuming from"), "{text}");
    assert_eq!(history(&resumed)["loss"], h["loss"]);
    assert_eq!(history(&resumed)["accuracy"], h["accuracy"]);
    assert_eq!(history(&resumed)["top2_accuracy"], h["top2_accuracy"]);
    // The run directory's config names the layer by its class and the loss by its name, with
    // its arguments, so `kiln-custom` reads it back.
    let saved = std::fs::read_to_string(resumed.join("config.toml")).unwrap();
    assert!(saved.contains("type = \"Antirectifier\""), "{saved}");
    assert!(
        saved.contains("type = \"sparse_focal_crossentropy\""),
        "{saved}"
    );
    assert!(saved.contains("gamma = 2.0"), "{saved}");
    assert!(saved.contains("\"top2_accuracy\""), "{saved}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Keras 3.15's `CategoricalFocalCrossentropy(alpha, gamma, from_logits=True)` on one-hot
/// labels, from tests/reference/focal_reference.py.
#[test]
#[allow(clippy::excessive_precision)]
fn the_focal_loss_gives_keras_numbers() {
    registered();
    let device = Device::flex();
    let logits: [f32; 12] = [
        2.0, -1.0, 0.5, 0.1, 0.2, 0.3, -1.5, 3.0, 0.0, 1.0, 1.0, -2.0,
    ];
    let logits = Tensor::<2>::from_data(TensorData::new(logits.to_vec(), [4, 3]), &device);
    let classes = TensorData::new(vec![0i64, 2, 1, 1], [4]);
    let labels = Labels::Sparse(Tensor::from_data(classes, &device));
    let sw = Tensor::<1>::from_data(TensorData::new(vec![1.0f32, 2.0, 0.5, 0.0], [4]), &device);
    let spec = |text: &str| {
        let t: toml::Table = toml::from_str(&format!("loss = {text}")).unwrap();
        LossSpec::from_toml(&t["loss"]).unwrap()
    };
    let close = |got: Tensor<1>, want: &[f64]| {
        let got = got.into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!(
                (*g as f64 - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{got:?} vs Keras {want:?}"
            );
        }
    };
    let focal = spec("{ type = \"sparse_focal_crossentropy\", from_logits = true }");
    assert_eq!(focal.name(), "sparse_focal_crossentropy");
    assert!(focal.sparse_labels() && focal.from_logits);
    close(
        focal.per_example(logits.clone(), None, &labels),
        &[
            0.0027731875889003277,
            0.10031440854072571,
            4.869250551564619e-05,
            0.04706408455967903,
        ],
    );
    close(
        focal.compute(logits.clone(), None, &labels),
        &[0.03755009174346924],
    );
    close(
        focal.compute_weighted(logits.clone(), None, &labels, Some(&sw)),
        &[0.050856586545705795],
    );
    // Probabilities in (the clip-and-log path), and the logits of a final softmax.
    let probs = burn::tensor::activation::softmax(logits.clone(), 1);
    let on_probs = spec("\"sparse_focal_crossentropy\"");
    close(
        on_probs.compute(probs.clone(), None, &labels),
        &[0.03755009174346924],
    );
    close(
        on_probs.compute(probs, Some(logits.clone()), &labels),
        &[0.03755009174346924],
    );
    // alpha 1, gamma 0: sparse_categorical_crossentropy.
    let plain = spec(
        "{ type = \"sparse_focal_crossentropy\", alpha = 1.0, gamma = 0.0, from_logits = true }",
    );
    close(
        plain.compute(logits.clone(), None, &labels),
        &[0.5050259828567505],
    );
    close(
        plain.compute_weighted(logits, None, &labels, Some(&sw)),
        &[0.5686885118484497],
    );
}

#[test]
fn registering_a_layer_type_twice_is_an_error_naming_it() {
    registered();
    let e = kiln_custom_layer::register().unwrap_err().to_string();
    assert!(e.contains("\"Antirectifier\" is already registered"), "{e}");
    let e = kiln::compile::register_loss::<kiln_custom_layer::SparseFocalCrossentropy>()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("loss named \"sparse_focal_crossentropy\" is already registered"),
        "{e}"
    );
    let e = kiln::compile::register_metric::<kiln_custom_layer::Top2Accuracy>()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("metric named \"top2_accuracy\" is already registered"),
        "{e}"
    );
    // A built-in name cannot be taken either.
    #[derive(Debug, serde::Deserialize)]
    struct Fake {}
    impl kiln::model::Layer for Fake {
        fn class_name(&self) -> &'static str {
            "Dense"
        }
        fn config(&self) -> toml::Table {
            toml::Table::new()
        }
        fn output_shape(&self, i: &[&[usize]]) -> Result<Vec<usize>, String> {
            Ok(i[0].to_vec())
        }
        fn forward(
            &self,
            mut x: Vec<kiln::model::Act>,
            _: &kiln::model::Weights,
            _: kiln::model::ForwardContext,
        ) -> kiln::model::Act {
            x.remove(0)
        }
    }
    impl kiln::model::LayerConfig for Fake {
        const CLASS_NAME: &'static str = "Dense";
    }
    let e = kiln::model::register_layer::<Fake>()
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"Dense\" is already registered"), "{e}");
}

#[test]
fn bad_layers_losses_and_metrics_are_one_line_errors_with_exit_code_2_and_write_nothing() {
    let dir = scratch("bad");
    let anti = "{ type = \"Antirectifier\" }";
    let cases = [
        (
            anti,
            "{ type = \"Antirectifer\" }",
            "model.layers[3].type: unknown layer type \"Antirectifer\"; allowed:",
        ),
        (
            anti,
            "{ type = \"Antirectifier\", units = 3 }",
            "model.layers[3] (Antirectifier): unknown field `units`",
        ),
        (
            "{ type = \"Flatten\" }",
            anti,
            "model.layers[1] (Antirectifier): Antirectifier expects a 1-D input (features,), \
             got shape (None, 28, 28)",
        ),
        (
            "gamma = 2.0",
            "gamma = -1.0",
            "compile.loss (sparse_focal_crossentropy): gamma must be a finite number >= 0, got -1",
        ),
        (
            "gamma = 2.0",
            "gama = 2.0",
            "compile.loss (sparse_focal_crossentropy): unknown field `gama`",
        ),
        (
            "\"sparse_focal_crossentropy\"",
            "\"focal_crossentropy\"",
            "compile.loss.type: unknown loss \"focal_crossentropy\"; allowed: \
             sparse_categorical_crossentropy, … categorical_focal_crossentropy, \
             sparse_focal_crossentropy",
        ),
        (
            "\"top2_accuracy\"",
            "\"top3_accuracy\"",
            "compile.metrics[1]: unknown metric \"top3_accuracy\"; allowed: accuracy, … \
             mean_io_u (MeanIoU), top2_accuracy",
        ),
    ];
    for (i, (from, layer, expected)) in cases.into_iter().enumerate() {
        let text = CONFIG.replace("DATA", DATA).replacen(from, layer, 1);
        let config = dir.join(format!("bad-{i}.toml"));
        std::fs::write(&config, text).unwrap();
        let run = dir.join(format!("run-{i}"));
        let out = Command::new(env!("CARGO_BIN_EXE_kiln-custom"))
            .arg("train")
            .arg(&config)
            .arg("--run-dir")
            .arg(&run)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{layer}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{layer}: {err}");
        // " … " separates parts that appear in this order.
        let mut rest = err.as_ref();
        for part in expected.split(" … ") {
            let at = rest
                .find(part)
                .unwrap_or_else(|| panic!("{layer}: {part:?} in {err}"));
            rest = &rest[at + part.len()..];
        }
        assert!(!run.exists(), "{layer}: the run directory was created");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
