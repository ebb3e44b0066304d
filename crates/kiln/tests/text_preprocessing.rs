//! Text and categorical preprocessing ops end to end: a text folder read by
//! `source = "text_folder"`, vectorized by `text_vectorization` adapted on the training data,
//! a model trained through `kiln::run::train`, then `kiln predict` on raw strings with the
//! vocabulary the run directory recorded; and the one-line config errors of bad input.

use std::path::Path;

use burn::prelude::Device;
use kiln::config::{OpConfig, RunConfig};
use kiln_data::npy::write_npy;
use kiln_data::{Array, Buffer};

const POSITIVE: [&str; 6] = [
    "A great, wonderful film!",
    "Great acting and a great story.",
    "Wonderful: I loved it.",
    "loved the great music",
    "What a wonderful day",
    "great great great",
];
const NEGATIVE: [&str; 6] = [
    "An awful, boring film.",
    "Boring story and awful acting!",
    "I hated it; awful.",
    "hated the boring music",
    "What an awful day",
    "boring boring boring",
];

fn write_folder(dir: &Path) {
    for (class, texts) in [("neg", NEGATIVE), ("pos", POSITIVE)] {
        std::fs::create_dir_all(dir.join("reviews").join(class)).unwrap();
        for (i, t) in texts.iter().enumerate() {
            std::fs::write(dir.join(format!("reviews/{class}/{i}.txt")), t).unwrap();
        }
    }
    std::fs::write(dir.join("reviews/pos/.DS_Store.txt"), b"\xff\xfe hidden").unwrap();
}

fn config(dir: &Path, map: &str) -> RunConfig {
    RunConfig::from_toml_str(&config_text(dir, map)).unwrap()
}

fn config_text(dir: &Path, map: &str) -> String {
    format!(
        r#"
name = "text"
seed = 3
[data]
data_dir = "{}"
[data.train]
source = "text_folder"
files = "reviews"
map = [{map}]
shuffle = {{ buffer_size = 12 }}
batch_size = 4
[model]
layers = [
  {{ type = "Input", shape = [8] }},
  {{ type = "Embedding", input_dim = 20, output_dim = 8 }},
  {{ type = "GlobalAveragePooling1D" }},
  {{ type = "Dense", units = 2, activation = "softmax" }},
]
[compile]
optimizer = {{ type = "adam", learning_rate = 0.05 }}
loss = "sparse_categorical_crossentropy"
metrics = ["accuracy"]
[fit]
epochs = 12
batch_size = 4
"#,
        dir.display()
    )
}

const VECTORIZE: &str =
    r#"{ op = "text_vectorization", max_tokens = 20, output_sequence_length = 8, adapt = true }"#;

#[test]
fn text_folder_vectorized_trains_and_predicts_raw_strings() {
    let dir = tempfile::tempdir().unwrap();
    write_folder(dir.path());
    let cfg = config(dir.path(), VECTORIZE);
    let run = tempfile::tempdir().unwrap();
    let report = kiln::run::train(&cfg, run.path(), Device::flex(), &mut [], |_| {}).unwrap();
    let loss = &report.history.history["loss"];
    assert!(loss.last().unwrap() < &(loss[0] * 0.5), "{loss:?}");

    // The run directory records the adapted vocabulary: most frequent first.
    let recorded = RunConfig::load(&run.path().join("config.toml")).unwrap();
    let OpConfig::TextVectorization(tv) = &recorded.data.train.as_ref().unwrap().map[0] else {
        panic!("{recorded:?}")
    };
    let vocabulary = tv.vocabulary.as_ref().unwrap().as_array().unwrap();
    let first: Vec<&str> = vocabulary[..4]
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(first, ["great", "boring", "awful", "wonderful"]);
    assert!(!tv.adapt);

    let input = dir.path().join("raw.npy");
    let raw = [
        "what a great wonderful film",
        "boring awful acting",
        "AWFUL!",
    ];
    let strings = raw.iter().map(|s| s.as_bytes().to_vec()).collect();
    write_npy(
        &input,
        &Array::new(vec![3], Buffer::String(strings)).unwrap(),
    )
    .unwrap();
    let p = kiln::run::predict(run.path(), &input, Device::flex()).unwrap();
    assert_eq!(p.units, 2);
    assert!(p.values[1] > 0.5, "{:?}", p.values); // class 1 = "pos" (sorted folders)
    assert!(p.values[2] > 0.5 && p.values[4] > 0.5, "{:?}", p.values);
}

/// The error `kiln train` reports (the CLI exits with 2 for config errors).
/// Config values are checked when the config loads; data-dependent errors when `kiln train`
/// adapts and reads the first example.
fn train_error(dir: &Path, map: &str) -> String {
    let run = tempfile::tempdir().unwrap();
    let err = match RunConfig::from_toml_str(&config_text(dir, map)) {
        Ok(cfg) => kiln::run::train(&cfg, run.path(), Device::flex(), &mut [], |_| {}).unwrap_err(),
        Err(e) => e,
    };
    assert!(err.is_usage(), "{err}");
    err.to_string()
}

#[test]
fn bad_text_ops_name_their_key() {
    let dir = tempfile::tempdir().unwrap();
    write_folder(dir.path());
    let e = train_error(
        dir.path(),
        &format!(
            r#"{VECTORIZE}, {{ op = "string_lookup", component = "text", vocabulary = "missing.txt" }}"#
        ),
    );
    assert!(
        e.starts_with("data.train.map[1].vocabulary: cannot read the vocabulary file"),
        "{e}"
    );
    let e = train_error(
        dir.path(),
        r#"{ op = "text_vectorization", output_mode = "bag", adapt = true }"#,
    );
    assert!(
        e.starts_with("data.train.map[0].output_mode: unknown output_mode \"bag\""),
        "{e}"
    );
    let e = train_error(
        dir.path(),
        r#"{ op = "discretization", component = "text", bin_boundaries = [0.5] }"#,
    );
    assert!(
        e.starts_with(
            "data.train.map[0]: discretization on component \"text\": discretization needs numbers"
        ),
        "{e}"
    );
    let e = train_error(
        dir.path(),
        r#"{ op = "text_vectorization", component = "label", adapt = true }"#,
    );
    assert!(
        e.starts_with("data.train.map[0].adapt: text_vectorization needs string values"),
        "{e}"
    );
    let empty = format!(
        r#"{VECTORIZE}, {{ op = "integer_lookup", component = "label", adapt = true, mask_token = 0, oov_token = 1 }}"#
    );
    let e = train_error(dir.path(), &empty);
    assert!(
        e.starts_with("data.train.map[1].adapt: the dataset has no tokens"),
        "{e}"
    );
    // A folder without .txt files names the source's `files` key.
    let bare = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(bare.path().join("reviews/pos")).unwrap();
    let e = train_error(bare.path(), VECTORIZE);
    assert!(e.starts_with("data.train.files: "), "{e}");
    assert!(e.contains("no .txt files"), "{e}");
}
