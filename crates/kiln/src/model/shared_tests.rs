//! Shared layers against Keras 3 (`tests/reference/shared_layer_reference.py`, whose numbers are
//! in `tests/data/shared_layer_reference.json`): a Siamese model whose one Dense "tower" runs on
//! two inputs predicts as Keras and as an unshared twin holding the same weights, counts its
//! parameters once, and one SGD step moves the shared kernel by the sum of both calls'
//! gradients. Checkpoints, `to_toml` and bad configs.

use burn::module::Module;
use burn::prelude::*;
use burn::store::ModuleRecord;
use burn::tensor::Bytes;
use kiln_data::{Array, Buffer, Dataset, Element};
use serde_json::Value;

use super::weights::{keras_weights, load_with};
use super::{Act, LayerOptions, ModelSpec, Network, RawNode, summary};
use crate::Model;
use crate::batch::LABELS;
use crate::compile::{Compiled, LossKind, LossSpec, OptimizerSpec};
use crate::error::KilnError;

fn reference() -> Value {
    serde_json::from_str(include_str!("../../tests/data/shared_layer_reference.json")).unwrap()
}

pub(super) fn floats(v: &Value) -> Vec<f32> {
    v["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn parse(layers: &str) -> crate::Result<ModelSpec> {
    let text = format!("layers = [\n{layers}\n]");
    ModelSpec::from_toml(&toml::from_str(&text).unwrap())
}

fn error(layers: &str) -> String {
    match parse(layers) {
        Err(e @ KilnError::Config { .. }) => {
            let e = e.to_string();
            assert!(!e.contains('\n'), "one line: {e}");
            e
        }
        other => panic!("expected a config error, got {other:?}"),
    }
}

const INPUTS: &str = r#"{ type = "Input", name = "a", shape = [3] },
    { type = "Input", name = "b", shape = [3] },"#;

/// The Keras model: `tower` on `a`, again on `b`, concatenated, `out`.
fn siamese() -> ModelSpec {
    parse(&format!(
        r#"{INPUTS}
        {{ type = "Dense", name = "tower", units = 4, activation = "tanh", inputs = ["a"] }},
        {{ name = "tower_b", shares = "tower", inputs = ["b"] }},
        {{ type = "Concatenate", name = "concat", inputs = ["tower", "tower_b"] }},
        {{ type = "Dense", name = "out", units = 1 }}"#
    ))
    .unwrap()
}

/// The same graph with two Dense layers.
fn twin() -> ModelSpec {
    parse(&format!(
        r#"{INPUTS}
        {{ type = "Dense", name = "tower_a", units = 4, activation = "tanh", inputs = ["a"] }},
        {{ type = "Dense", name = "tower_b", units = 4, activation = "tanh", inputs = ["b"] }},
        {{ type = "Concatenate", name = "concat", inputs = ["tower_a", "tower_b"] }},
        {{ type = "Dense", name = "out", units = 1 }}"#
    ))
    .unwrap()
}

/// Keras' weights; the twin's towers both get the shared tower's values.
fn keras_network(spec: &ModelSpec, device: &Device) -> Network {
    let r = reference();
    load_with(spec, device, &|name: &str, _: &[usize]| {
        let keras = name
            .replace("tower_a/", "tower/")
            .replace("tower_b/", "tower/");
        Ok(floats(&r["weights"][keras.as_str()]))
    })
    .unwrap()
}

fn input(r: &Value, name: &str) -> Array {
    Array::new(vec![5, 3], Buffer::F32(floats(&r["inputs"][name]))).unwrap()
}

fn predict(spec: &ModelSpec, net: &Network) -> Vec<f32> {
    let r = reference();
    let device = Device::flex();
    let act = |name| {
        Act::Flat(Tensor::from_data(
            TensorData::new(floats(&r["inputs"][name]), [5, 3]),
            &device,
        ))
    };
    let out = net.forward_graph(spec, vec![act("a"), act("b")], false, &mut |_, _, _| {});
    out.output.into_data().try_to_vec::<f32>().unwrap()
}

fn close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol, "{what}[{k}]: kiln {g}, Keras {w}");
    }
}

fn weight(spec: &ModelSpec, net: &Network, name: &str) -> Vec<f32> {
    keras_weights(spec, net)
        .into_iter()
        .find(|(n, _, _)| n == name)
        .unwrap_or_else(|| panic!("no weight {name}"))
        .2
}

#[test]
fn a_shared_dense_predicts_as_keras_and_as_two_denses_with_equal_weights() {
    let r = reference();
    let device = Device::flex();
    let (spec, twin) = (siamese(), twin());
    let shared = predict(&spec, &keras_network(&spec, &device));
    close(&shared, &floats(&r["predictions"]), 1e-6, "predictions");
    assert_eq!(shared, predict(&twin, &keras_network(&twin, &device)));
    // The call's output shape is its own; its parameters are the tower's, counted once.
    assert_eq!(spec.shape_after(1), &[4]);
    assert_eq!(spec.layer_params(1), (0, 0));
    assert_eq!(
        spec.param_count().0 as u64,
        r["params"]["shared"].as_u64().unwrap()
    );
    assert_eq!(
        twin.param_count().0 as u64,
        r["params"]["twin"].as_u64().unwrap()
    );
}

#[test]
fn shared_weights_are_listed_once_in_files_summary_and_estimate() {
    let spec = siamese();
    let net = Network::init(&spec, 1, &Device::flex());
    let names: Vec<String> = keras_weights(&spec, &net)
        .into_iter()
        .map(|(n, _, _)| n)
        .collect();
    assert_eq!(
        names,
        ["tower/kernel", "tower/bias", "out/kernel", "out/bias"]
    );
    assert!(net.layers[1].kernels.is_empty() && net.layers[1].dense_kernel.is_none());
    let table = summary("siamese", &spec);
    assert_eq!(table.matches("tower").count(), 1, "{table}");
    assert!(table.contains("Total params: 25 (100.00 B)"), "{table}");
    let sgd = OptimizerSpec::Sgd {
        learning_rate: 0.1.into(),
        momentum: 0.0,
        nesterov: false,
    };
    let e = crate::estimate::estimate(&spec, &sgd, 8, crate::precision::Precision::default());
    let trainable: Vec<u64> = e.layers.iter().map(|l| l.trainable).collect();
    assert_eq!(trainable, [16, 0, 0, 9]);
    // Each call keeps its own activations.
    assert_eq!(e.layers[1].activation_bytes, e.layers[0].activation_bytes);
    assert!(e.layers[1].activation_bytes > 0);
}

fn batch() -> Dataset {
    let r = reference();
    let y = Array::new(vec![5, 1], Buffer::F32(floats(&r["labels"]))).unwrap();
    let el = Element::new()
        .with("a", input(&r, "a"))
        .with("b", input(&r, "b"))
        .with(LABELS, y);
    Dataset::from_tensor_slices(el).unwrap().batch(5, false)
}

fn trained_one_step(spec: ModelSpec) -> (Model, f64) {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    super::weights::save(&spec, &keras_network(&spec, &device), &path).unwrap();
    let sgd = OptimizerSpec::Sgd {
        learning_rate: 0.1.into(),
        momentum: 0.0,
        nesterov: false,
    };
    let mse = LossSpec {
        kind: LossKind::MeanSquaredError,
        from_logits: false,
    };
    let compiled = Compiled::new(&spec, sgd, mse, &[]).unwrap();
    let mut m = Model::from_weights("shared", spec, compiled, &path, device).unwrap();
    let h = m.fit(&batch(), None, 1, &mut []).unwrap();
    (m, h.history["loss"][0])
}

#[test]
fn one_sgd_step_moves_the_shared_kernel_by_the_sum_of_both_calls_gradients() {
    let r = reference();
    let (shared, loss) = trained_one_step(siamese());
    assert!((loss - r["loss"].as_f64().unwrap()).abs() < 1e-6, "{loss}");
    let after = |m: &Model, name: &str| weight(m.spec(), m.network(), name);
    for w in ["tower/kernel", "tower/bias", "out/kernel", "out/bias"] {
        let keras = floats(&r["weights_after_step"][w]);
        close(&after(&shared, w), &keras, 1e-6, w);
    }
    // The twin's two towers each move by their call's gradient; the shared tower by the sum.
    let (twin, twin_loss) = trained_one_step(twin());
    assert!((twin_loss - loss).abs() < 1e-7);
    for w in ["kernel", "bias"] {
        let before = floats(&r["weights"][format!("tower/{w}").as_str()]);
        let step = |values: Vec<f32>| -> Vec<f32> {
            values.iter().zip(&before).map(|(v, b)| v - b).collect()
        };
        let a = step(after(&twin, &format!("tower_a/{w}")));
        let b = step(after(&twin, &format!("tower_b/{w}")));
        let sum: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        close(&step(after(&shared, &format!("tower/{w}"))), &sum, 1e-7, w);
        // And Keras' gradient of the shared weight: step = -0.1 * gradient.
        let keras: Vec<f32> = floats(&r["gradients_shared"][format!("tower/{w}").as_str()])
            .iter()
            .map(|g| -0.1 * g)
            .collect();
        close(&sum, &keras, 1e-7, w);
        assert!(
            a.iter().zip(&b).any(|(x, y)| (x - y).abs() > 1e-4),
            "calls differ"
        );
    }
}

#[test]
fn a_checkpoint_of_a_shared_model_round_trips() {
    let (m, _) = trained_one_step(siamese());
    let files = m.checkpoint_files().unwrap();
    let bytes = files
        .iter()
        .find(|(n, _)| n == crate::checkpoint::MODEL_FILE)
        .unwrap();
    let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(bytes.1.clone())).unwrap();
    let spec = siamese();
    let fresh = Network::init(&spec, 99, &Device::flex().autodiff());
    assert_ne!(
        keras_weights(&spec, &fresh),
        keras_weights(m.spec(), m.network())
    );
    let loaded = fresh.try_load_record(record).unwrap();
    assert_eq!(
        keras_weights(&spec, &loaded),
        keras_weights(m.spec(), m.network())
    );
}

#[test]
fn sharing_round_trips_through_toml_and_can_be_the_output() {
    let spec = siamese();
    assert!(!spec.is_sequential());
    let t = spec.to_toml();
    let layers = t["layers"].as_array().unwrap();
    assert_eq!(
        layers[3].as_table().unwrap(),
        &toml::from_str::<toml::Table>(
            r#"shares = "tower"
name = "tower_b"
inputs = ["b"]"#
        )
        .unwrap()
    );
    assert_eq!(ModelSpec::from_toml(&t).unwrap(), spec);
    // A call with an automatic name, on the tower's own output, as the model's output.
    let text = r#"outputs = ["tower_call_1"]
        layers = [
        { type = "Input", name = "a", shape = [3] },
        { type = "Dense", name = "tower", units = 3 },
        { shares = "tower" },
        ]"#;
    let spec = ModelSpec::from_toml(&toml::from_str(text).unwrap()).unwrap();
    assert_eq!(spec.layers()[1].name, "tower_call_1");
    assert_eq!(spec.output_layer(), 1);
    assert_eq!(spec.param_count(), (12, 0));
    assert_eq!(ModelSpec::from_toml(&spec.to_toml()).unwrap(), spec);
}

#[test]
fn the_rust_door_shares_through_raw_nodes() {
    let input = |name: &str| RawNode {
        name: Some(name.into()),
        kind: super::LayerKind::Input { shape: vec![3] },
        inputs: None,
        options: LayerOptions::default(),
        shares: None,
    };
    let nodes = vec![
        input("a"),
        input("b"),
        RawNode {
            name: Some("tower".into()),
            kind: super::LayerKind::from(crate::model::layers::Dense {
                units: 4,
                activation: super::Activation::Tanh,
                use_bias: true,
            }),
            inputs: Some(vec!["a".into()]),
            options: LayerOptions::default(),
            shares: None,
        },
        RawNode::sharing(Some("tower_b".into()), "tower", vec!["b".into()]),
        RawNode {
            name: Some("concat".into()),
            kind: super::layers::Concatenate::default().into(),
            inputs: Some(vec!["tower".into(), "tower_b".into()]),
            options: LayerOptions::default(),
            shares: None,
        },
        RawNode {
            name: Some("out".into()),
            kind: super::LayerKind::from(crate::model::layers::Dense {
                units: 1,
                activation: super::Activation::Linear,
                use_bias: true,
            }),
            inputs: None,
            options: LayerOptions::default(),
            shares: None,
        },
    ];
    assert_eq!(
        ModelSpec::from_nodes(nodes.clone(), &[]).unwrap(),
        siamese()
    );
    // Nor a dtype or options set afterwards.
    let e = siamese()
        .with_layer_dtype("tower_b", crate::precision::Precision::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"tower_b\" is a call of shared layer \"tower\""),
        "{e}"
    );
    let frozen = LayerOptions {
        trainable: false,
        ..LayerOptions::default()
    };
    assert!(siamese().with_layer_options("tower_b", frozen).is_err());
    // A call has no options of its own.
    let mut bad = nodes;
    bad[3].options.trainable = false;
    let e = ModelSpec::from_nodes(bad, &[]).unwrap_err().to_string();
    assert!(
        e.starts_with("model.layers[3]: a call of shared layer \"tower\" takes no options"),
        "{e}"
    );
}

#[test]
fn a_shared_batch_normalization_updates_its_moving_statistics_from_both_calls() {
    let spec = parse(&format!(
        r#"{INPUTS}
        {{ type = "BatchNormalization", name = "bn", inputs = ["a"] }},
        {{ shares = "bn", inputs = ["b"] }},
        {{ type = "Add", inputs = ["bn", "bn_call_1"] }}"#
    ))
    .unwrap();
    let device = Device::flex();
    let net = Network::init(&spec, 1, &device);
    let act = |v: f32| {
        Act::Flat(Tensor::from_data(
            TensorData::new(vec![v; 6], [2, 3]),
            &device,
        ))
    };
    let fwd = net.forward_graph(&spec, vec![act(1.0), act(3.0)], true, &mut |_, _, _| {});
    let owners: Vec<(usize, &str)> = fwd.updates.iter().map(|u| (u.0, u.1.as_str())).collect();
    let stats = [(0, "moving_mean"), (0, "moving_variance")];
    assert_eq!(owners, [stats, stats].concat());
    // moving = moving * 0.99 + batch * 0.01, once per call: 0 -> 0.01 -> 0.0399.
    let net = net.apply_updates(&spec, fwd.updates);
    let mean = net.layers[0].moving_mean.as_ref().unwrap().val();
    let mean = mean.into_data().try_to_vec::<f32>().unwrap();
    close(&mean, &[0.0399; 3], 1e-6, "moving_mean");
}

#[test]
fn bad_shares_are_one_line_config_errors_naming_the_key() {
    let tower = r#"{ type = "Dense", name = "tower", units = 4, inputs = ["a"] },"#;
    let tail = r#"{ type = "Concatenate", inputs = ["tower", "t2"] }"#;
    let call = |extra: &str| format!("{INPUTS} {tower} {{ name = \"t2\", {extra} }}, {tail}");
    let cases = [
        (
            call(r#"shares = "towr", inputs = ["b"]"#),
            "model.layers[3].shares: \"towr\" is not the name of an earlier layer",
        ),
        (
            format!(
                "{INPUTS} {{ name = \"t2\", shares = \"tower\", inputs = [\"b\"] }}, {tower} {tail}"
            ),
            "model.layers[2].shares: \"tower\" is not the name of an earlier layer",
        ),
        (
            call(r#"shares = "a", inputs = ["b"]"#),
            "model.layers[3].shares: \"a\" is an Input, which has no weights to share",
        ),
        (
            call(r#"shares = 3, inputs = ["b"]"#),
            "model.layers[3].shares: must be the name of an earlier layer, got 3",
        ),
        (
            call(r#"shares = "tower", inputs = ["b"], units = 4"#),
            "model.layers[3].units: not allowed next to `shares`",
        ),
        (
            call(r#"shares = "tower", type = "Dense", inputs = ["b"]"#),
            "model.layers[3].type: not allowed next to `shares`",
        ),
        (
            call(r#"shares = "tower", inputs = ["b"], trainable = false"#),
            "model.layers[3].trainable: not allowed next to `shares`",
        ),
        (
            call(r#"shares = "tower", inputs = ["b"], dtype = "float32""#),
            "model.layers[3].dtype: not allowed next to `shares`",
        ),
    ];
    for (layers, want) in cases {
        let e = error(&layers);
        assert!(e.starts_with(want), "{e}\nwant: {want}");
    }
    let wide = r#"{ type = "Input", name = "a", shape = [3] },
        { type = "Input", name = "b", shape = [5] },"#;
    let e = error(&format!(
        "{wide} {tower} {{ name = \"t2\", shares = \"tower\", inputs = [\"b\"] }}, {tail}"
    ));
    assert_eq!(
        e,
        "model.layers[3].shares: layer \"tower\" was built for input (None, 3) (weights \
         kernel (3, 4), bias (4,)); input (None, 5) would need weights kernel (5, 4), bias \
         (4,): every call of a shared layer must fit the same weights"
    );
}
