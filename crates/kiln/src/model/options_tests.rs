//! Per-layer options (`trainable`, `<weight>_initializer` / `_regularizer` / `_constraint`,
//! `activity_regularizer`): reading and writing TOML, config errors, initialization, the
//! penalties in the loss, constraints and frozen layers through real `fit` calls.

use burn::prelude::*;
use kiln_data::{Array, Buffer, Dataset, Element};

use super::constraints::Constraint;
use super::initializers::Initializer;
use super::regularizers::Regularizer;
use super::weights::{keras_weights, load_with};
use super::{Activation, LayerKind, LayerOptions, ModelSpec, Network};
use crate::Model;
use crate::compile::{Compiled, LossKind, LossSpec, OptimizerSpec};
use crate::error::KilnError;

fn parse(layers: &str) -> crate::Result<ModelSpec> {
    let text = format!("layers = [\n{layers}\n]");
    ModelSpec::from_toml(&toml::from_str(&text).unwrap())
}

fn error(layers: &str) -> String {
    match parse(layers) {
        Err(e @ KilnError::Config { .. }) => e.to_string(),
        other => panic!("expected a config error, got {other:?}"),
    }
}

const INPUT: &str = "{ type = \"Input\", shape = [4] },";

fn weights_of(spec: &ModelSpec, net: &Network, name: &str) -> Vec<f32> {
    keras_weights(spec, net)
        .into_iter()
        .find(|(n, _, _)| n == name)
        .unwrap_or_else(|| panic!("no weight {name}"))
        .2
}

#[test]
fn options_are_read_and_written_back() {
    let spec = parse(&format!(
        "{INPUT}
         {{ type = \"Dense\", units = 3, kernel_initializer = \"he_normal\", bias_initializer = {{ class_name = \"Constant\", value = 0.5 }}, kernel_regularizer = {{ class_name = \"L2\", l2 = 0.01 }}, kernel_constraint = \"max_norm\", activity_regularizer = \"l1\" }},
         {{ type = \"BatchNormalization\", trainable = false, moving_variance_initializer = \"ones\", gamma_regularizer = \"l2\", beta_constraint = \"non_neg\" }}"
    ))
    .unwrap();
    let dense = &spec.layers()[0].options;
    assert_eq!(
        dense.initializers["kernel"],
        Initializer::HeNormal { seed: None }
    );
    assert_eq!(
        dense.initializers["bias"],
        Initializer::Constant { value: 0.5 }
    );
    assert_eq!(dense.regularizers["kernel"], Regularizer::L2 { l2: 0.01 });
    assert_eq!(
        dense.constraints["kernel"],
        Constraint::MaxNorm {
            max_value: 2.0,
            axis: vec![0]
        }
    );
    assert_eq!(
        dense.activity_regularizer,
        Some(Regularizer::L1 { l1: 0.01 })
    );
    assert!(dense.trainable);
    assert!(!spec.layers()[1].options.trainable);
    let written = spec.to_toml();
    let again = ModelSpec::from_toml(&written).unwrap();
    assert_eq!(again, spec);
    let text = toml::to_string(&written).unwrap();
    assert!(text.contains("trainable = false"), "{text}");
    // Layers without options write what they wrote before.
    let plain = parse(&format!("{INPUT} {{ type = \"Dense\", units = 3 }}")).unwrap();
    let written = plain.to_toml();
    let table = &written["layers"].as_array().unwrap()[1];
    assert_eq!(
        table.as_table().unwrap().keys().collect::<Vec<_>>(),
        ["activation", "name", "type", "units", "use_bias"]
    );
}

#[test]
fn the_builder_takes_the_same_options() {
    let dense = LayerKind::from(crate::model::layers::Dense {
        units: 3,
        activation: Activation::Linear,
        use_bias: true,
    });
    let options = LayerOptions::default()
        .with_trainable(false)
        .with_initializer("kernel", Initializer::Zeros)
        .with_regularizer("bias", Regularizer::L1 { l1: 0.1 })
        .with_constraint("kernel", Constraint::NonNeg)
        .with_activity_regularizer(Regularizer::L2 { l2: 0.1 });
    let built = ModelSpec::builder(&[4])
        .add_with(dense.clone(), options.clone())
        .build()
        .unwrap();
    let read = ModelSpec::from_toml(&built.to_toml()).unwrap();
    assert_eq!(read.layers()[0].options, options);
    let later = ModelSpec::builder(&[4])
        .add(dense)
        .build()
        .unwrap()
        .with_layer_options("dense", options.clone())
        .unwrap();
    assert_eq!(later, built);
    let bad = LayerOptions::default().with_initializer("kernl", Initializer::Zeros);
    let err = later.with_layer_options("dense", bad).unwrap_err();
    assert!(err.to_string().contains("no weight \"kernl\""), "{err}");
}

#[test]
fn bad_options_are_config_errors_naming_the_key() {
    let dense = |extra: &str| {
        format!("{INPUT} {{ type = \"Flatten\" }}, {{ type = \"Dense\", units = 3, {extra} }}")
    };
    assert_eq!(
        error(&dense("kernl_initializer = \"zeros\"")),
        "model.layers[2].kernl_initializer: Dense has no weight \"kernl\"; its weights: kernel, bias"
    );
    let e = error(&dense("kernel_initializer = \"he_normall\""));
    assert!(
        e.starts_with("model.layers[2].kernel_initializer: unknown name \"he_normall\""),
        "{e}"
    );
    let e = error(&dense(
        "kernel_regularizer = { class_name = \"L2\", l2 = -1 }",
    ));
    assert!(
        e.starts_with("model.layers[2].kernel_regularizer.l2: "),
        "{e}"
    );
    let e = error(&dense("bias_constraint = \"max_nrm\""));
    assert!(e.starts_with("model.layers[2].bias_constraint: "), "{e}");
    let e = error(&dense("trainable = \"no\""));
    assert_eq!(
        e,
        "model.layers[2].trainable: must be true or false, got \"no\""
    );
    let e = error(&dense("use_bias = false, bias_initializer = \"zeros\""));
    assert_eq!(
        e,
        "model.layers[2].bias_initializer: Dense has no weight \"bias\"; its weights: kernel"
    );
    let e = error(&dense("bias_initializer = \"identity\""));
    assert!(
        e.starts_with("model.layers[2].bias_initializer: identity works on rank-2"),
        "{e}"
    );
    let e = error(&dense(
        "bias_constraint = { class_name = \"MaxNorm\", axis = 1 }",
    ));
    assert!(
        e.starts_with("model.layers[2].bias_constraint.axis: axis 1"),
        "{e}"
    );
    let e = error(&format!(
        "{INPUT} {{ type = \"Flatten\", kernel_initializer = \"zeros\" }}"
    ));
    assert_eq!(
        e,
        "model.layers[1].kernel_initializer: Flatten has no weight \"kernel\"; it has no weights"
    );
    let e = error(&format!(
        "{INPUT} {{ type = \"BatchNormalization\", moving_mean_regularizer = \"l2\" }}"
    ));
    assert!(
        e.starts_with(
            "model.layers[1].moving_mean_regularizer: BatchNormalization's weight \"moving_mean\" \
             is not trainable"
        ),
        "{e}"
    );
    let e = error(
        "{ type = \"Input\", shape = [5] }, { type = \"Embedding\", input_dim = 10, output_dim = 2, embedings_initializer = \"zeros\" }",
    );
    assert_eq!(
        e,
        "model.layers[1].embedings_initializer: Embedding has no weight \"embedings\"; its weights: embeddings"
    );
}

#[test]
fn initializers_replace_the_defaults_in_keras_layout() {
    let spec = parse(
        "{ type = \"Input\", shape = [5, 5, 2] },
         { type = \"Conv2D\", filters = 3, kernel_size = [2, 3], kernel_initializer = { class_name = \"RandomNormal\", seed = 4 }, bias_initializer = \"ones\" },
         { type = \"Flatten\" },
         { type = \"Dense\", units = 400, kernel_initializer = \"zeros\" },
         { type = \"Dense\", units = 300, kernel_initializer = \"he_normal\" },
         { type = \"LayerNormalization\", gamma_initializer = { class_name = \"Constant\", value = 2 } }",
    )
    .unwrap();
    let net = Network::init(&spec, 1, &Device::flex());
    let conv = weights_of(&spec, &net, "conv2d/kernel");
    let want = Initializer::RandomNormal {
        mean: 0.0,
        stddev: 0.05,
        seed: Some(4),
    }
    .sample(&[2, 3, 2, 3], &mut rand::rng())
    .unwrap();
    assert_eq!(conv, want, "drawn in Keras' [kh, kw, in, out] order");
    assert_eq!(weights_of(&spec, &net, "conv2d/bias"), vec![1.0; 3]);
    assert!(
        weights_of(&spec, &net, "dense/kernel")
            .iter()
            .all(|v| *v == 0.0)
    );
    assert_eq!(
        weights_of(&spec, &net, "layer_normalization/gamma"),
        vec![2.0; 300]
    );
    // he_normal: stddev sqrt(2 / fan_in) = sqrt(2 / 400).
    let he = weights_of(&spec, &net, "dense_1/kernel");
    let n = he.len() as f64;
    let mean = he.iter().map(|v| f64::from(*v)).sum::<f64>() / n;
    let std = (he
        .iter()
        .map(|v| (f64::from(*v) - mean).powi(2))
        .sum::<f64>()
        / n)
        .sqrt();
    let want = (2.0f64 / 400.0).sqrt();
    assert!(mean.abs() < 0.01 * want, "mean {mean}");
    assert!((std / want - 1.0).abs() < 0.01, "std {std} vs {want}");
    let limit = 2.0 * want / crate::model::initializers::TRUNCATION_STDDEV;
    assert!(
        he.iter()
            .all(|v| f64::from(v.abs()) <= limit * (1.0 + 1e-6))
    );
}

#[test]
fn options_without_initializers_leave_the_seeded_weights_unchanged() {
    let plain = parse(&format!(
        "{INPUT} {{ type = \"Dense\", units = 8 }}, {{ type = \"BatchNormalization\" }}, {{ type = \"Dense\", units = 2 }}"
    ))
    .unwrap();
    let with = parse(&format!(
        "{INPUT} {{ type = \"Dense\", units = 8, kernel_regularizer = \"l2\", kernel_constraint = \"non_neg\" }},
         {{ type = \"BatchNormalization\", trainable = false }}, {{ type = \"Dense\", units = 2, activity_regularizer = \"l1\" }}"
    ))
    .unwrap();
    let device = Device::flex();
    assert_eq!(
        keras_weights(&plain, &Network::init(&plain, 9, &device)),
        keras_weights(&with, &Network::init(&with, 9, &device))
    );
}

/// 16 fixed examples of 4 features, 3 classes, one batch.
fn data() -> Dataset {
    let n = 16;
    let x: Vec<f32> = (0..n * 4)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
        .collect();
    let y: Vec<i64> = (0..n).map(|i| (i * 5 % 3) as i64).collect();
    let el = Element::new()
        .with("x", Array::new(vec![n, 4], Buffer::F32(x)).unwrap())
        .with("y", Array::new(vec![n], Buffer::I64(y)).unwrap());
    Dataset::from_tensor_slices(el).unwrap().batch(16, false)
}

fn model(spec: ModelSpec, optimizer: OptimizerSpec) -> Model {
    let loss = LossSpec {
        kind: LossKind::SparseCategoricalCrossentropy,
        from_logits: true,
    };
    let compiled = Compiled::new(&spec, optimizer, loss, &[]).unwrap();
    Model::new("options", spec, compiled, 3, Device::flex())
}

fn sgd(learning_rate: f64) -> OptimizerSpec {
    OptimizerSpec::Sgd {
        learning_rate: learning_rate.into(),
        momentum: 0.0,
        nesterov: false,
    }
}

fn dense_model(extra: &str) -> ModelSpec {
    parse(&format!(
        "{INPUT} {{ type = \"Dense\", units = 3, {extra} }}"
    ))
    .unwrap()
}

#[test]
fn weight_and_activity_penalties_are_added_to_the_loss() {
    let data = data();
    let plain = model(dense_model("use_bias = true"), sgd(0.0));
    let base = plain.evaluate(&data).unwrap().get("loss").unwrap();
    let kernel = weights_of(plain.spec(), plain.network(), "dense/kernel");
    let squares: f64 = kernel.iter().map(|v| f64::from(*v).powi(2)).sum();

    let mut l2 = model(
        dense_model("kernel_regularizer = { class_name = \"L2\", l2 = 0.01 }"),
        sgd(0.0),
    );
    let got = l2.evaluate(&data).unwrap().get("loss").unwrap();
    assert!(
        (got - (base + 0.01 * squares)).abs() < 1e-6,
        "{got} vs {base} + 0.01 * {squares}"
    );
    // The training step reports the same loss (learning rate 0: one step changes nothing).
    let h = l2.fit(&data, None, 1, &mut []).unwrap();
    let logged = h.history["loss"][0];
    assert!(
        (logged - got).abs() < 1e-6,
        "fit logged {logged}, evaluate {got}"
    );

    // Activity: 0.1 * sum(output^2) / batch size.
    let act = model(
        dense_model("activity_regularizer = { class_name = \"L2\", l2 = 0.1 }"),
        sgd(0.0),
    );
    let (out, _) = act.predict(&data).unwrap();
    let penalty = 0.1 * out.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / 16.0;
    let got = act.evaluate(&data).unwrap().get("loss").unwrap();
    assert!(
        (got - (base + penalty)).abs() < 1e-6,
        "{got} vs {base} + {penalty}"
    );

    // A frozen layer's weights are not regularized (Keras: trainable weights only).
    let frozen = model(
        dense_model("trainable = false, kernel_regularizer = \"l2\""),
        sgd(0.0),
    );
    let got = frozen.evaluate(&data).unwrap().get("loss").unwrap();
    assert_eq!(got, base);
}

fn column_norms(kernel: &[f32], units: usize) -> Vec<f64> {
    (0..units)
        .map(|u| {
            kernel
                .iter()
                .skip(u)
                .step_by(units)
                .map(|v| f64::from(*v).powi(2))
                .sum::<f64>()
                .sqrt()
        })
        .collect()
}

#[test]
fn constraints_hold_after_every_update() {
    let data = data().repeat(Some(3));
    let ones = "kernel_initializer = { class_name = \"Constant\", value = 1.0 }";
    let mut free = model(dense_model(ones), sgd(0.5));
    free.fit(&data, None, 1, &mut []).unwrap();
    let norms = column_norms(&weights_of(free.spec(), free.network(), "dense/kernel"), 3);
    assert!(norms.iter().any(|n| *n > 0.6), "{norms:?}");

    let mut held = model(
        dense_model(&format!(
            "{ones}, kernel_constraint = {{ class_name = \"MaxNorm\", max_value = 0.5 }}, bias_constraint = \"non_neg\""
        )),
        sgd(0.5),
    );
    held.fit(&data, None, 1, &mut []).unwrap();
    let kernel = weights_of(held.spec(), held.network(), "dense/kernel");
    for n in column_norms(&kernel, 3) {
        assert!(n <= 0.5 + 1e-6, "{n}");
    }
    let bias = weights_of(held.spec(), held.network(), "dense/bias");
    assert!(bias.iter().all(|b| *b >= 0.0), "{bias:?}");
    assert!(bias.contains(&0.0), "{bias:?}");
}

#[test]
fn frozen_layers_keep_their_weights_and_count_as_non_trainable() {
    let spec = parse(&format!(
        "{INPUT}
         {{ type = \"Dense\", units = 8, activation = \"relu\", trainable = false }},
         {{ type = \"BatchNormalization\", trainable = false }},
         {{ type = \"BatchNormalization\" }},
         {{ type = \"Dense\", units = 3 }}"
    ))
    .unwrap();
    // Keras: Dense(4->8) 40 + BN 16 + 16 frozen, BN 16 + 16 moving, Dense(8->3) 27.
    assert_eq!(spec.param_count(), (16 + 27, 40 + 32 + 16));
    let adam = OptimizerSpec::Adam {
        learning_rate: 0.05.into(),
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: 1e-7,
        amsgrad: false,
    };
    let mut m = model(spec, adam);
    let summary = m.summary();
    assert!(summary.contains("Non-trainable params: 88"), "{summary}");
    let before = keras_weights(m.spec(), m.network());
    m.fit(&data().repeat(Some(4)), None, 1, &mut []).unwrap();
    let after = keras_weights(m.spec(), m.network());
    for ((name, _, b), (_, _, a)) in before.iter().zip(&after) {
        let frozen = name.starts_with("dense/") || name.starts_with("batch_normalization/");
        assert_eq!(frozen, a == b, "{name}: frozen {frozen}");
    }
    // Reloaded weights stay frozen.
    let device = Device::flex().autodiff();
    let map: std::collections::HashMap<String, Vec<f32>> =
        after.into_iter().map(|(n, _, v)| (n, v)).collect();
    let net = load_with(
        m.spec(),
        &device,
        &|n: &str, _: &[usize]| Ok(map[n].clone()),
    )
    .unwrap();
    let kernel = |i: usize| net.layers[i].dense_kernel.as_ref().unwrap().val();
    assert!(!kernel(0).is_require_grad());
    assert!(kernel(3).is_require_grad());
}

#[test]
fn an_input_takes_no_options() {
    for extra in [
        "kernel_initializer = \"zeros\"",
        "activity_regularizer = \"l2\"",
        "trainable = false",
    ] {
        let e = error(&format!(
            "{{ type = \"Input\", shape = [4], {extra} }}, {{ type = \"Dense\", units = 2 }}"
        ));
        assert!(
            e.starts_with("model.layers[0]: an `Input` has no weights"),
            "{extra}: {e}"
        );
    }
}
