//! The activation and normalization layers against Keras 3: forward values and the gradients
//! of `sum(output * r)` with respect to the input and every trainable weight, on the fixed
//! inputs and weights of `tests/reference/small_layers_reference.py` (its JSON, `tests/data/`),
//! each layer built from its TOML arguments through the registry; their errors on bad
//! arguments; and the noise layers' properties (their draws are not Keras').

use std::collections::BTreeMap;

use burn::prelude::*;
use serde::Deserialize;

use super::keras_order::into_rows;
use super::shape_tests::{Values, assert_close, build, grad, input, to_vec};
use crate::model::act::Act;
use crate::model::layer::{Field, ForwardContext, Weights};
use crate::model::params::{LayerParams, Slot, slots};

#[derive(Deserialize)]
struct Case {
    layer: toml::Table,
    training: bool,
    input: Values,
    weights: BTreeMap<String, Values>,
    output: Vec<f32>,
    input_grad: Vec<f32>,
    weight_grads: BTreeMap<String, Vec<f32>>,
}

#[derive(Deserialize)]
struct Reference {
    cases: BTreeMap<String, Case>,
}

/// The gradient of the stored weight at `slot`, flat in Keras' layout.
fn weight_grad(params: &LayerParams, slot: Slot, grads: &burn::tensor::Gradients) -> Vec<f32> {
    let missing = "no gradient for a weight";
    match slot {
        Slot::Vector(v) => to_vec(params.vectors[v].val().grad(grads).expect(missing)),
        Slot::Kernel(k, _) => to_vec(params.kernels[k].val().grad(grads).expect(missing)),
        Slot::Field(Field::Gamma) => to_vec(
            params
                .gamma
                .as_ref()
                .unwrap()
                .val()
                .grad(grads)
                .expect(missing),
        ),
        Slot::Field(Field::Beta) => to_vec(
            params
                .beta
                .as_ref()
                .unwrap()
                .val()
                .grad(grads)
                .expect(missing),
        ),
        Slot::Field(other) => panic!("no trainable {other:?} here"),
    }
}

#[test]
fn activation_and_normalization_layers_match_keras_values_and_gradients() {
    let reference: Reference = serde_json::from_str(include_str!(
        "../../../tests/data/small_layers_reference.json"
    ))
    .unwrap();
    assert_eq!(reference.cases.len(), 26);
    let device = Device::flex().autodiff();
    for (name, case) in &reference.cases {
        let layer = build(&case.layer);
        let shape = &case.input.shape[1..];
        assert_eq!(
            layer.output_shape(&[shape]).unwrap(),
            shape,
            "{name}: shape"
        );
        let specs = layer.weights(&[shape]);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        let keras: Vec<&str> = case.weights.keys().map(String::as_str).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, keras, "{name}: weight names");
        let mut params = LayerParams::empty();
        let at = slots(&specs);
        for (spec, slot) in specs.iter().zip(&at) {
            let w = &case.weights[&spec.name];
            assert_eq!(spec.shape, w.shape, "{name}: shape of {}", spec.name);
            params.put(*slot, spec, w.values.clone(), spec.trainable, &device);
        }
        let (leaf, act) = input(&case.input, &device);
        let weights = Weights::new(specs.clone(), &params);
        let out = layer.forward(vec![act], &weights, ForwardContext::new(case.training));
        let rows = into_rows(out);
        assert_close(name, "output", &to_vec(rows.clone()), &case.output);
        let [b, n] = rows.dims();
        let r: Vec<f32> = (0..b * n)
            .map(|i| (0.5 * i as f64 + 0.2).cos() as f32)
            .collect();
        let r = Tensor::<2>::from_data(TensorData::new(r, [b, n]), &device);
        let grads = (rows * r).sum().backward();
        assert_close(
            name,
            "input gradient",
            &grad(&leaf, &grads),
            &case.input_grad,
        );
        let trainable = specs.iter().zip(&at).filter(|(s, _)| s.trainable);
        assert_eq!(trainable.clone().count(), case.weight_grads.len(), "{name}");
        for (spec, slot) in trainable {
            let got = weight_grad(&params, *slot, &grads);
            let what = format!("{} gradient", spec.name);
            assert_close(name, &what, &got, &case.weight_grads[&spec.name]);
        }
    }
}

/// The error of building `layers` (a TOML array's items), as one line.
fn error(layers: &str) -> String {
    let table: toml::Table = toml::from_str(&format!("layers = [{layers}]")).unwrap();
    let e = crate::model::ModelSpec::from_toml(&table)
        .unwrap_err()
        .to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

#[test]
fn bad_arguments_are_one_line_errors_naming_the_layer_and_key() {
    let seq = r#"{type="Input",shape=[3,4]}"#;
    let cases = [
        (
            r#"{type="ReLU",max_value=-1.0}"#,
            "(ReLU): `max_value` must not be negative, got -1",
        ),
        (
            r#"{type="ReLU",threshold=-0.5}"#,
            "`threshold` must not be negative",
        ),
        (
            r#"{type="LeakyReLU",negative_slope=-0.1}"#,
            "`negative_slope` must not be negative",
        ),
        (
            r#"{type="PReLU",shared_axes=[3]}"#,
            "`shared_axes` holds 3, not an axis of input shape (None, 3, 4) (1 to 2)",
        ),
        (
            r#"{type="Softmax",axis=1}"#,
            "`axis` 1 is not the last axis of input shape (None, 3, 4); kiln supports only the last axis (-1 or 2) here",
        ),
        (
            r#"{type="UnitNormalization",axis=0}"#,
            "`axis` 0 is not the last axis",
        ),
        (
            r#"{type="GroupNormalization",groups=3}"#,
            "`groups` 3 does not divide the 4 channels",
        ),
        (
            r#"{type="GroupNormalization"}"#,
            "`groups` 32 does not divide the 4 channels",
        ),
        (
            r#"{type="GroupNormalization",groups=0}"#,
            "`groups` must be positive (or -1",
        ),
        (
            r#"{type="BatchNormalization",axis=1}"#,
            "(BatchNormalization): `axis` 1 is not the last axis",
        ),
        (
            r#"{type="SpatialDropout1D",rate=1.0}"#,
            "`rate` must be in [0, 1), got 1",
        ),
        (
            r#"{type="SpatialDropout2D",rate=0.5}"#,
            "SpatialDropout2D expects a 3-D input",
        ),
        (
            r#"{type="GaussianNoise",stddev=1.5}"#,
            "`stddev` must be in [0, 1], got 1.5",
        ),
        (
            r#"{type="GaussianDropout",rate=-0.1}"#,
            "`rate` must be in [0, 1), got -0.1",
        ),
        (r#"{type="Rescaling"}"#, "scale"),
        (
            r#"{type="LayerNormalization",epsilon=inf}"#,
            "(LayerNormalization): `epsilon` must be a positive finite number, got inf",
        ),
        (
            r#"{type="BatchNormalization",epsilon=0.0}"#,
            "`epsilon` must be a positive finite number, got 0",
        ),
        (
            r#"{type="TransformerEncoder",intermediate_dim=8,num_heads=2,layer_norm_epsilon=nan}"#,
            "`layer_norm_epsilon` must be a positive finite number, got NaN",
        ),
    ];
    for (layer, want) in cases {
        let e = error(&format!("{seq},{layer}"));
        assert!(e.contains(want), "{layer}: {e}");
        assert!(e.contains("model.layers[1]"), "{layer}: {e}");
    }
}

/// The layer of `toml` run on `x` in training or inference mode, as flat values.
fn run(toml: &str, x: Act, training: bool) -> Vec<f32> {
    let layer = build(&toml::from_str(toml).unwrap());
    let params = LayerParams::empty();
    let w = Weights::new(Vec::new(), &params);
    to_vec(into_rows(layer.forward(
        vec![x],
        &w,
        ForwardContext::new(training),
    )))
}

/// `[batch, steps, channels]` of ones as a sequence, or `[batch, channels, h, w]` as an image.
fn ones(seq: bool, device: &Device) -> Act {
    match seq {
        true => Act::Seq(Tensor::ones([64, 5, 16], device)),
        false => Act::Image(Tensor::ones([64, 16, 3, 2], device)),
    }
}

#[test]
fn spatial_dropout_zeroes_whole_channels_and_rescales_in_training_only() {
    let device = Device::flex();
    for (seq, toml, positions) in [
        (true, "type = \"SpatialDropout1D\"\nrate = 0.25", 5),
        (false, "type = \"SpatialDropout2D\"\nrate = 0.25", 6),
    ] {
        let out = run(toml, ones(seq, &device), true);
        assert!(
            out.iter()
                .all(|&v| v == 0.0 || (v - 4.0 / 3.0).abs() < 1e-6)
        );
        // Keras' channels-last rows: the channel of flat index i is i % 16, the example
        // i / (positions * 16); every value of one example's channel is alike.
        let mut dropped = 0;
        for example in 0..64 {
            for c in 0..16 {
                let at = |p: usize| out[example * positions * 16 + p * 16 + c];
                let first = at(0);
                assert!(
                    (0..positions).all(|p| at(p) == first),
                    "{toml}: a split channel"
                );
                dropped += usize::from(first == 0.0);
            }
        }
        let fraction = dropped as f64 / (64.0 * 16.0);
        assert!((fraction - 0.25).abs() < 0.06, "{toml}: dropped {fraction}");
        assert!(
            run(toml, ones(seq, &device), false)
                .iter()
                .all(|&v| v == 1.0)
        );
    }
}

#[test]
fn gaussian_layers_have_keras_moments_in_training_and_are_the_identity_at_inference() {
    let device = Device::flex();
    let x = || Act::Flat(Tensor::ones([100, 100], &device).mul_scalar(2.0));
    let stats = |v: &[f32]| {
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt())
    };
    // x + normal(0, 0.5): mean 2, stddev 0.5.
    let (mean, std) = stats(&run("type = \"GaussianNoise\"\nstddev = 0.5", x(), true));
    assert!(
        (mean - 2.0).abs() < 0.03 && (std - 0.5).abs() < 0.03,
        "{mean} {std}"
    );
    // x * normal(1, sqrt(0.2 / 0.8) = 0.5): mean 2, stddev 1.
    let (mean, std) = stats(&run("type = \"GaussianDropout\"\nrate = 0.2", x(), true));
    assert!(
        (mean - 2.0).abs() < 0.05 && (std - 1.0).abs() < 0.05,
        "{mean} {std}"
    );
    for toml in [
        "type = \"GaussianNoise\"\nstddev = 0.5\nseed = 3",
        "type = \"GaussianDropout\"\nrate = 0.2",
    ] {
        assert!(run(toml, x(), false).iter().all(|&v| v == 2.0), "{toml}");
    }
}
