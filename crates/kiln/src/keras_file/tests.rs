//! `.keras` files written by Keras 3.15 (tests/reference/keras_files_reference.py) read into
//! kiln and predicting as Keras did; kiln's own files read back; bad files refused by entry.

use std::io::Write;
use std::path::{Path, PathBuf};

use burn::prelude::*;
use serde_json::Value;

use super::*;
use crate::model::Act;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/keras")
        .join(name)
}

fn expected() -> Value {
    let text = std::fs::read_to_string(data("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// kiln's predictions for the reference inputs of `name`.
fn predict(model: &KerasModel, name: &str) -> Vec<f32> {
    let e = &expected()["models"][name];
    let shape: Vec<usize> = e["input_shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    let device = Device::flex();
    let x = floats(&e["inputs"]);
    let act = match shape[..] {
        [n, h, w, c] => {
            Act::from_keras_image(Tensor::from_data(TensorData::new(x, [n, h, w, c]), &device))
        }
        [n, s, f] => Act::Seq(Tensor::from_data(TensorData::new(x, [n, s, f]), &device)),
        [n, f] => Act::Flat(Tensor::from_data(TensorData::new(x, [n, f]), &device)),
        _ => unreachable!(),
    };
    let net = model.network(&device).unwrap();
    let out = net.forward(&model.spec, act, false).output;
    out.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .unwrap()
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5, "{what}[{i}]: kiln {g}, Keras {w}");
    }
}

#[test]
fn keras_written_models_predict_as_keras_does() {
    for name in ["cnn", "mixed", "text"] {
        let model = read(&data(&format!("{name}.keras"))).unwrap();
        let e = &expected()["models"][name];
        let (trainable, frozen) = model.spec.param_count();
        assert_eq!(
            trainable + frozen,
            e["params"].as_u64().unwrap() as usize,
            "{name}: params"
        );
        assert_close(&predict(&model, name), &floats(&e["predictions"]), name);
    }
}

#[test]
fn legacy_h5_files_predict_as_keras_does() {
    for name in ["cnn", "mixed"] {
        let model = read(&data(&format!("{name}.h5"))).unwrap();
        let e = &expected()["models"][name];
        assert_close(&predict(&model, name), &floats(&e["predictions"]), name);
    }
    let cnn = read(&data("cnn.h5")).unwrap().compile.unwrap();
    assert_eq!(cnn["optimizer"]["type"].as_str(), Some("Adam"));
    assert_eq!(
        cnn["loss"].as_str(),
        Some("sparse_categorical_crossentropy")
    );
}

#[test]
fn compile_configs_become_compile_tables() {
    let cnn = read(&data("cnn.keras")).unwrap().compile.unwrap();
    let optimizer = cnn["optimizer"].as_table().unwrap();
    assert_eq!(optimizer["type"].as_str(), Some("Adam"));
    assert!((optimizer["learning_rate"].as_float().unwrap() - 1e-3).abs() < 1e-9);
    assert_eq!(
        cnn["loss"].as_str(),
        Some("sparse_categorical_crossentropy")
    );
    assert_eq!(
        cnn["metrics"].as_array().unwrap()[0].as_str(),
        Some("accuracy")
    );
    let text = read(&data("text.keras")).unwrap().compile.unwrap();
    assert_eq!(text["optimizer"]["momentum"].as_float(), Some(0.9));
    assert!(
        read(&data("mixed.keras")).unwrap().compile.is_none(),
        "saved uncompiled"
    );
}

#[test]
fn kiln_written_files_read_back_with_the_same_model_and_weights() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["cnn", "mixed", "text"] {
        let model = read(&data(&format!("{name}.keras"))).unwrap();
        let net = model.network(&Device::flex()).unwrap();
        let path = dir.path().join(format!("{name}.keras"));
        std::fs::write(&path, to_bytes(&model.spec, &net, name).unwrap()).unwrap();
        let back = read(&path).unwrap();
        assert_eq!(back.spec.to_toml(), model.spec.to_toml(), "{name}: model");
        assert_eq!(back.weights, model.weights, "{name}: weights");
    }
}

/// A zip of `entries` (stored).
fn zip_of(path: &Path, entries: &[(&str, Vec<u8>)]) {
    std::fs::File::create(path)
        .unwrap()
        .write_all(&zip_stored(entries).unwrap())
        .unwrap();
}

fn entry(file: &str, name: &str) -> Vec<u8> {
    let bytes = std::fs::read(data(file)).unwrap();
    unzip(&data(file), bytes).unwrap().remove(name).unwrap()
}

/// The error of reading `path`: a KerasFile error at `entry`, its message.
fn refused(path: &Path, want_entry: &str) -> String {
    match read(path).unwrap_err() {
        KilnError::KerasFile { entry, message, .. } => {
            assert_eq!(entry, want_entry, "{message}");
            assert!(!message.contains('\n'), "one line: {message}");
            message
        }
        other => panic!("not a Keras file error: {other}"),
    }
}

#[test]
fn bad_files_are_refused_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(data("cnn.keras")).unwrap();
    let truncated = dir.path().join("truncated.keras");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    assert!(refused(&truncated, "zip").contains("zip"));

    let no_config = dir.path().join("no_config.keras");
    zip_of(
        &no_config,
        &[(WEIGHTS_ENTRY, entry("cnn.keras", WEIGHTS_ENTRY))],
    );
    assert!(refused(&no_config, CONFIG_ENTRY).contains("missing"));

    // The text model's weights under the CNN's config: nothing matches.
    let mismatched = dir.path().join("mismatched.keras");
    zip_of(
        &mismatched,
        &[
            (CONFIG_ENTRY, entry("cnn.keras", CONFIG_ENTRY)),
            (WEIGHTS_ENTRY, entry("text.keras", WEIGHTS_ENTRY)),
        ],
    );
    let m = refused(&mismatched, WEIGHTS_ENTRY);
    assert!(m.contains("layers/conv2d/vars/0"), "{m}");

    // A CNN whose Dense is 3 units wide in the config but 4 in the weights.
    let config = String::from_utf8(entry("cnn.keras", CONFIG_ENTRY)).unwrap();
    let narrowed = config.replace("\"units\": 4", "\"units\": 3");
    assert_ne!(narrowed, config);
    let shapes = dir.path().join("shapes.keras");
    zip_of(
        &shapes,
        &[
            (CONFIG_ENTRY, narrowed.into_bytes()),
            (WEIGHTS_ENTRY, entry("cnn.keras", WEIGHTS_ENTRY)),
        ],
    );
    let m = refused(&shapes, WEIGHTS_ENTRY);
    assert!(
        m.contains("layers/dense/vars/0") && m.contains("[48, 4]") && m.contains("[48, 3]"),
        "{m}"
    );

    for (class, want) in [("Lambda", "Lambda"), ("MyDense", "MyDense")] {
        let custom = config.replace(
            "\"class_name\": \"Dense\"",
            &format!("\"class_name\": \"{class}\""),
        );
        let path = dir.path().join(format!("{class}.keras"));
        zip_of(
            &path,
            &[
                (CONFIG_ENTRY, custom.into_bytes()),
                (WEIGHTS_ENTRY, entry("cnn.keras", WEIGHTS_ENTRY)),
            ],
        );
        let m = refused(&path, CONFIG_ENTRY);
        assert!(m.contains(want) && m.contains("\"dense\""), "{m}");
    }
}

#[test]
fn arguments_kiln_would_ignore_are_refused_with_the_layer() {
    let dir = tempfile::tempdir().unwrap();
    let config = String::from_utf8(entry("cnn.keras", CONFIG_ENTRY)).unwrap();
    let renorm = config.replace("\"renorm\": false", "\"renorm\": true");
    assert_ne!(renorm, config);
    let path = dir.path().join("renorm.keras");
    zip_of(
        &path,
        &[
            (CONFIG_ENTRY, renorm.into_bytes()),
            (WEIGHTS_ENTRY, entry("cnn.keras", WEIGHTS_ENTRY)),
        ],
    );
    let m = refused(&path, CONFIG_ENTRY);
    assert!(
        m.contains("\"batch_normalization\"") && m.contains("renorm"),
        "{m}"
    );
}

#[test]
fn keras_2_configs_map_their_input_shape_and_wrapped_metrics() {
    // tf.keras 2 writes the input shape on the first layer and metrics per output, wrapped.
    let model: Value = serde_json::from_str(
        r#"{"class_name": "Sequential", "config": {"name": "k2", "layers": [
            {"class_name": "Dense", "config": {"name": "d", "units": 3, "activation": "relu",
             "batch_input_shape": [null, 4], "use_bias": true, "dtype": "float32"}}]}}"#,
    )
    .unwrap();
    let t = from_keras::model_table(&model).unwrap();
    let spec = ModelSpec::from_toml(&t).unwrap();
    assert_eq!(spec.input_shape(), &[4]);
    assert_eq!(spec.output_shape(), &[3]);
    let training: Value = serde_json::from_str(
        r#"{"loss": "mse", "metrics": [[{"class_name": "MeanMetricWrapper",
            "config": {"name": "accuracy", "dtype": "float32", "fn": "categorical_accuracy"}}]],
            "optimizer_config": {"class_name": "SGD", "config": {"name": "SGD", "learning_rate": 0.1}}}"#,
    )
    .unwrap();
    let c = from_keras::compile_table(&legacy::compile_config(&training))
        .unwrap()
        .unwrap();
    assert_eq!(
        c["metrics"].as_array().unwrap()[0].as_str(),
        Some("accuracy")
    );
    assert_eq!(c["optimizer"]["type"].as_str(), Some("SGD"));
    assert_eq!(c["loss"].as_str(), Some("mse"));
}
