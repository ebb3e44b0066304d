//! Several inputs and outputs of any rank, against Keras 3: a two-input model fed from
//! components named like its Inputs (Keras' dict inputs), evaluated and trained one SGD step; a per-timestep output `[batch, time, classes]` with
//! sparse labels `[batch, time]`, a per-pixel segmentation `[batch, h, w, classes]` with labels
//! `[batch, h, w]`, and an autoencoder's reconstruction with `mse`. The models carry the fixed
//! weights of `tests/reference/multi_io_reference.py`, whose Keras `evaluate` numbers are in
//! `tests/data/multi_io_reference.json`; kiln's loss (Keras' `sum_over_batch_size`: the mean
//! over every output position) and accuracy (the mean over positions) must equal them.

use std::collections::HashMap;

use burn::prelude::*;
use kiln::batch::{FEATURES, LABELS, SAMPLE_WEIGHT};
use kiln::compile::{Compiled, LossKind, LossSpec, OptimizerSpec};
use kiln::model::{ModelSpec, weights};
use kiln::{Logs, Model};
use kiln_data::{Array, Buffer, Dataset, Element};
use serde_json::Value;

fn reference() -> Value {
    let text = include_str!("data/multi_io_reference.json");
    serde_json::from_str(text).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn shape(v: &Value) -> Vec<usize> {
    v["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

/// The array of a JSON `{shape, dtype, values}`: integers stay integers (sparse labels).
fn array(v: &Value) -> Array {
    let buffer = if v["dtype"].as_str().unwrap().starts_with("int") {
        Buffer::I32(floats(v).iter().map(|&x| x as i32).collect())
    } else {
        Buffer::F32(floats(v))
    };
    Array::new(shape(v), buffer).unwrap()
}

/// The model of `layers` (TOML) with the case's Keras weights, compiled with `loss`.
fn model(case: &Value, layers: &str, loss: LossSpec, metrics: &[&str]) -> Model {
    let table: toml::Table = toml::from_str(&format!("layers = [{layers}]")).unwrap();
    let spec = ModelSpec::from_toml(&table).unwrap();
    let metrics: Vec<String> = metrics.iter().map(|m| m.to_string()).collect();
    let compiled = Compiled::new(&spec, SGD, loss, &metrics).unwrap();
    with_weights(case, spec, compiled)
}

/// SGD(learning_rate=0.1), as the reference script's step.
const SGD: OptimizerSpec = OptimizerSpec::Sgd {
    learning_rate: kiln::compile::LearningRate::Constant(0.1),
    momentum: 0.0,
    nesterov: false,
};

/// `spec` compiled as `compiled`, with the case's Keras weights.
fn with_weights(case: &Value, spec: ModelSpec, compiled: Compiled) -> Model {
    let mut map = HashMap::new();
    for w in case["weights"].as_array().unwrap() {
        map.insert(w["name"].as_str().unwrap().to_string(), floats(w));
    }
    let device = Device::flex();
    let net = weights::load_with(&spec, &device, &|name: &str, _: &[usize]| {
        Ok(map.get(name).unwrap_or_else(|| panic!("{name}")).clone())
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    weights::save(&spec, &net, &path).unwrap();
    Model::from_weights("reference", spec, compiled, &path, device).unwrap()
}

/// The case's whole batch as one dataset batch (with its `sample_weight` when `weighted`):
/// one Input's features as `x`, several Inputs' under their names (Keras' dict inputs).
fn batch(case: &Value, weighted: bool) -> Dataset {
    let inputs = case["inputs"].as_object().unwrap();
    let labels = case["labels"].as_object().unwrap();
    let x = array(inputs.values().next().unwrap());
    let n = x.shape()[0];
    // The autoencoder's labels are its input ("same as inputs.image").
    let y = match labels.values().next().unwrap() {
        Value::String(_) => x.clone(),
        v => array(v),
    };
    let mut el = Element::new().with(LABELS, y);
    if inputs.len() == 1 {
        el = el.with(FEATURES, x);
    } else {
        for (name, v) in inputs {
            el = el.with(name.as_str(), array(v));
        }
    }
    if weighted {
        // Keras 3 takes the weights shaped [batch, 1, ...]; kiln takes [batch] and spreads them
        // over the positions the same way.
        let w = floats(&case["sample_weight_rank_matched"]);
        el = el.with(SAMPLE_WEIGHT, Array::new(vec![n], Buffer::F32(w)).unwrap());
    }
    Dataset::from_tensor_slices(el).unwrap().batch(n, false)
}

/// `evaluate` on the case's whole batch.
fn evaluate(model: &Model, case: &Value, weighted: bool) -> Logs {
    model.evaluate(&batch(case, weighted)).unwrap()
}

fn close(logs: &Logs, name: &str, keras: &Value) {
    let want = keras[name].as_f64().unwrap();
    let got = logs.get(name).unwrap();
    assert!(
        (got - want).abs() < 1e-5,
        "{name}: kiln {got}, Keras {want}"
    );
}

const SPARSE: LossSpec = LossSpec {
    kind: LossKind::SparseCategoricalCrossentropy,
    from_logits: false,
};

#[test]
fn a_per_timestep_output_has_keras_loss_and_accuracy() {
    let r = reference();
    for (name, head, loss) in [
        ("per_timestep", ", activation = \"softmax\"", SPARSE),
        (
            "per_timestep_logits",
            "",
            LossSpec {
                from_logits: true,
                ..SPARSE
            },
        ),
    ] {
        let case = &r["cases"][name];
        let layers = format!(
            r#"{{ type = "Input", name = "tokens", shape = [7] }},
               {{ type = "Embedding", name = "embed", input_dim = 11, output_dim = 4 }},
               {{ type = "Dense", name = "tags", units = 5{head} }}"#
        );
        let m = model(case, &layers, loss, &["accuracy"]);
        assert_eq!(m.spec().output_shape(), &[7, 5]);
        let keras = &case["evaluate"]["values"];
        let logs = evaluate(&m, case, false);
        close(&logs, "loss", keras);
        close(&logs, "accuracy", keras);
        let logs = evaluate(&m, case, true);
        close(&logs, "loss", &case["evaluate_weighted"]["values"]);
    }
}

#[test]
fn a_per_pixel_segmentation_has_keras_loss_and_accuracy() {
    let r = reference();
    let case = &r["cases"]["per_pixel_segmentation"];
    let layers = r#"{ type = "Input", name = "image", shape = [6, 6, 2] },
        { type = "Conv2D", name = "c1", filters = 4, kernel_size = 3, padding = "same", activation = "relu" },
        { type = "Conv2D", name = "seg", filters = 3, kernel_size = 1, activation = "softmax" }"#;
    let m = model(case, layers, SPARSE, &["accuracy"]);
    let keras = &case["evaluate"]["values"];
    let logs = evaluate(&m, case, false);
    close(&logs, "loss", keras);
    close(&logs, "accuracy", keras);
    let logs = evaluate(&m, case, true);
    close(&logs, "loss", &case["evaluate_weighted"]["values"]);
}

#[test]
fn an_autoencoder_reconstruction_has_keras_mse() {
    let r = reference();
    let case = &r["cases"]["per_pixel_autoencoder"];
    let layers = r#"{ type = "Input", name = "image", shape = [6, 6, 2] },
        { type = "Conv2D", name = "enc", filters = 4, kernel_size = 3, padding = "same", activation = "relu" },
        { type = "Conv2D", name = "recon", filters = 2, kernel_size = 1 }"#;
    let mse = LossSpec {
        kind: LossKind::MeanSquaredError,
        from_logits: false,
    };
    let m = model(case, layers, mse, &[]);
    close(
        &evaluate(&m, case, false),
        "loss",
        &case["evaluate"]["values"],
    );
    close(
        &evaluate(&m, case, true),
        "loss",
        &case["evaluate_weighted"]["values"],
    );
}

#[test]
fn a_two_input_model_fed_by_component_names_matches_keras_before_and_after_a_step() {
    let r = reference();
    let case = &r["cases"]["two_inputs"];
    let layers = r#"{ type = "Input", name = "a", shape = [4] },
        { type = "Input", name = "b", shape = [3] },
        { type = "Dense", name = "dense_a", units = 8, activation = "relu", inputs = ["a"] },
        { type = "Dense", name = "dense_b", units = 8, activation = "relu", inputs = ["b"] },
        { type = "Add", name = "add", inputs = ["dense_a", "dense_b"] },
        { type = "Dense", name = "out", units = 3, activation = "softmax" }"#;
    let mut m = model(case, layers, SPARSE, &["accuracy"]);
    let keras = &case["evaluate"]["values"];
    let logs = evaluate(&m, case, false);
    close(&logs, "loss", keras);
    close(&logs, "accuracy", keras);
    // One step of SGD(0.1) on the whole batch: the logged loss is the one before the update
    // (as train_on_batch's), and evaluate afterwards gives Keras' loss after its step.
    let h = m.fit(&batch(case, false), None, 1, &mut []).unwrap();
    let step = &case["sgd_step"];
    let before = step["train_on_batch_logs"]["loss"].as_f64().unwrap();
    assert!((h.history["loss"][0] - before).abs() < 1e-5, "{h:?}");
    close(
        &evaluate(&m, case, false),
        "loss",
        &step["evaluate_after_step"]["values"],
    );
}

/// The two-output model with the case's Keras weights, compiled as Keras' `compile(loss={...},
/// loss_weights={...}, metrics={...})` from the TOML a config would hold.
fn two_output_model(case: &Value) -> Model {
    let layers = r#"layers = [
        { type = "Input", name = "x", shape = [5] },
        { type = "Dense", name = "trunk", units = 8, activation = "relu" },
        { type = "Dense", name = "class", units = 3, activation = "softmax", inputs = ["trunk"] },
        { type = "Dense", name = "value", units = 1, inputs = ["trunk"] },
    ]
    outputs = ["class", "value"]"#;
    let spec = ModelSpec::from_toml(&toml::from_str(layers).unwrap()).unwrap();
    assert_eq!(spec.output_names(), ["class", "value"]);
    let compile: toml::Table = toml::from_str(
        r#"loss = { class = "sparse_categorical_crossentropy", value = "mse" }
        loss_weights = { class = 1.0, value = 0.5 }
        metrics = { class = ["accuracy"], value = ["mae"] }"#,
    )
    .unwrap();
    let raw = kiln::compile::RawOutputs {
        loss: &compile["loss"],
        loss_weights: compile.get("loss_weights"),
        metrics: compile.get("metrics"),
    };
    let compiled = Compiled::for_outputs(&spec, SGD, &raw).unwrap();
    with_weights(case, spec, compiled)
}

/// The case's batch: `x`, and each output's labels under the output's name (Keras' dict
/// labels).
fn two_output_batch(case: &Value) -> Dataset {
    let x = array(&case["inputs"]["x"]);
    let n = x.shape()[0];
    let mut el = Element::new().with(FEATURES, x);
    for (name, v) in case["labels"].as_object().unwrap() {
        el = el.with(name.as_str(), array(v));
    }
    Dataset::from_tensor_slices(el).unwrap().batch(n, false)
}

/// Keras 3's log keys of the two-output model.
const KEYS: [&str; 5] = [
    "loss",
    "class_loss",
    "value_loss",
    "class_accuracy",
    "value_mae",
];

#[test]
fn a_two_output_model_has_keras_per_output_losses_metrics_and_step() {
    let r = reference();
    let case = &r["cases"]["two_outputs"];
    let mut m = two_output_model(case);
    let keras = &case["evaluate"]["values"];
    let logs = m.evaluate(&two_output_batch(case)).unwrap();
    // loss = 1.0 × class_loss + 0.5 × value_loss, each output's loss unweighted in the logs.
    for key in KEYS {
        close(&logs, key, keras);
    }
    let h = m.fit(&two_output_batch(case), None, 1, &mut []).unwrap();
    let step = &case["sgd_step"];
    for key in ["loss", "class_loss", "value_loss"] {
        let before = step["train_on_batch_logs"][key].as_f64().unwrap();
        assert!((h.history[key][0] - before).abs() < 1e-5, "{key}: {h:?}");
    }
    let after = m.evaluate(&two_output_batch(case)).unwrap();
    for key in KEYS {
        close(&after, key, &step["evaluate_after_step"]["values"]);
    }
    // The weights after the step: the gradient of the weighted sum reaches the shared trunk.
    let saved = weights::keras_weights(m.spec(), m.network());
    for w in step["weights_after_step"].as_array().unwrap() {
        let name = w["name"].as_str().unwrap();
        let (_, _, got) = saved.iter().find(|(n, _, _)| n == name).unwrap();
        for (g, k) in got.iter().zip(floats(w)) {
            assert!((g - k).abs() < 1e-5, "{name}: kiln {g}, Keras {k}");
        }
    }
}
