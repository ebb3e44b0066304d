//! The custom-layer example as a user runs it: its own `kiln` trains the antirectifier model
//! from TOML on real Fashion-MNIST, and a run interrupted after its first epoch and resumed
//! from the checkpoint ends with the same weights' history as one that ran straight through
//! (the layer's weights round-trip through the checkpoint).

use std::path::{Path, PathBuf};
use std::process::Command;

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
loss = { type = "sparse_categorical_crossentropy", from_logits = true }
metrics = ["accuracy"]
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
    let loss: Vec<f64> = h["loss"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(loss.len(), 2);
    assert!(
        loss[1] < loss[0] && loss[1] < 1.2,
        "the model learns: {loss:?}"
    );
    let accuracy = h["accuracy"][1].as_f64().unwrap();
    assert!(accuracy > 0.6, "accuracy {accuracy}");

    // One epoch, then a resume to two: the same history as the straight run.
    let resumed = dir.join("resumed");
    train(&config, &resumed, &["--epochs", "1"]);
    let text = train(&config, &resumed, &[]);
    assert!(text.contains("Resuming from"), "{text}");
    assert_eq!(history(&resumed)["loss"], h["loss"]);
    assert_eq!(history(&resumed)["accuracy"], h["accuracy"]);
    // The run directory's config names the layer by its class, so `kiln-custom` reads it back.
    let saved = std::fs::read_to_string(resumed.join("config.toml")).unwrap();
    assert!(saved.contains("type = \"Antirectifier\""), "{saved}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn registering_a_layer_type_twice_is_an_error_naming_it() {
    kiln_custom_layer::register().unwrap();
    let e = kiln_custom_layer::register().unwrap_err().to_string();
    assert!(e.contains("\"Antirectifier\" is already registered"), "{e}");
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
fn bad_layers_are_one_line_errors_with_exit_code_2_and_write_nothing() {
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
        assert!(err.contains(expected), "{layer}: {err}");
        assert!(!run.exists(), "{layer}: the run directory was created");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
