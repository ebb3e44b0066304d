//! The recurrent layers and masks against Keras 3: forward values and the gradients of
//! `sum(output * r)` with respect to the input and every weight, on the fixed inputs, weights
//! and masks of `tests/reference/recurrent_reference.py` (its JSON, `tests/data/`); each layer
//! built from its TOML arguments through the registry.

use std::collections::BTreeMap;

use burn::prelude::*;
use serde::Deserialize;

use super::shape_tests::to_vec;
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, Weights};
use crate::model::params::{LayerParams, Slot, slots};
use crate::model::registry;

#[derive(Deserialize)]
struct Values {
    shape: Vec<usize>,
    values: Vec<f32>,
}

#[derive(Deserialize)]
struct Case {
    layer: serde_json::Value,
    weights: BTreeMap<String, Values>,
    mask: Option<Vec<f32>>,
    output: Values,
    input_grad: Vec<f32>,
    weight_grads: BTreeMap<String, Vec<f32>>,
}

#[derive(Deserialize)]
struct Reference {
    input: Values,
    cases: BTreeMap<String, Case>,
}

fn reference() -> Reference {
    serde_json::from_str(include_str!("../../../tests/data/recurrent_reference.json")).unwrap()
}

fn build(args: &serde_json::Value) -> std::sync::Arc<dyn Layer> {
    let mut table: toml::Table = serde_json::from_value(args.clone()).unwrap();
    let class = table.remove("type").unwrap();
    let reg = registry::lookup(class.as_str().unwrap()).unwrap();
    (reg.build)(table).unwrap()
}

fn assert_close(name: &str, what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{name} {what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 2e-5 + 2e-5 * w.abs(),
            "{name} {what}[{i}]: kiln {g}, Keras {w}"
        );
    }
}

/// The gradient of the stored weight in `slot` (kept in Keras' layout), flattened.
pub(super) fn weight_grad(
    p: &LayerParams,
    slot: Slot,
    grads: &burn::tensor::Gradients,
) -> Vec<f32> {
    match slot {
        Slot::Kernel(k, _) => to_vec(p.kernels[k].val().grad(grads).unwrap()),
        Slot::Vector(v) => to_vec(p.vectors[v].val().grad(grads).unwrap()),
        Slot::Field(_) => unreachable!("recurrent layers use no named fields"),
    }
}

#[test]
fn recurrent_layers_and_masks_match_keras_values_and_gradients() {
    let device = Device::flex().autodiff();
    let reference = reference();
    assert_eq!(reference.cases.len(), 14);
    let [b, t, f]: [usize; 3] = reference.input.shape.clone().try_into().unwrap();
    for (name, case) in &reference.cases {
        let layer = build(&case.layer);
        let shape = layer.output_shape(&[&[t, f]]).unwrap();
        assert_eq!(shape, case.output.shape[1..], "{name}: output shape");
        let specs = layer.weights(&[&[t, f]]);
        let names: Vec<&String> = case.weights.keys().collect();
        assert_eq!(specs.len(), names.len(), "{name}: weights {specs:?}");
        let mut params = LayerParams::empty();
        let at = slots(&specs);
        for (spec, slot) in specs.iter().zip(&at) {
            let want = &case.weights[&spec.name];
            assert_eq!(spec.shape, want.shape, "{name}: {}", spec.name);
            params.put(*slot, spec, want.values.clone(), true, &device);
        }
        let x = Tensor::<3>::from_data(
            TensorData::new(reference.input.values.clone(), [b, t, f]),
            &device,
        )
        .require_grad();
        let mask = case
            .mask
            .as_ref()
            .map(|m| Tensor::<2>::from_data(TensorData::new(m.clone(), [b, t]), &device));
        let weights = Weights::new(specs.clone(), &params);
        let ctx = ForwardContext::new(true);
        let out = layer.forward_masked(vec![Act::Seq(x.clone())], &[mask], &weights, ctx);
        let rows = match out {
            Act::Flat(y) => y,
            Act::Seq(y) => y.flatten(0, 1),
            other => panic!("{name}: {other:?}"),
        };
        assert_close(name, "output", &to_vec(rows.clone()), &case.output.values);
        let n = rows.dims()[0] * rows.dims()[1];
        let r: Vec<f32> = (0..n)
            .map(|i| (0.5 * i as f64 + 0.2).cos() as f32)
            .collect();
        let r = Tensor::<2>::from_data(TensorData::new(r, rows.dims()), &device);
        let grads = (rows * r).sum().backward();
        assert_close(
            name,
            "input gradient",
            &to_vec(x.grad(&grads).unwrap()),
            &case.input_grad,
        );
        for (spec, slot) in specs.iter().zip(at) {
            let got = weight_grad(&params, slot, &grads);
            assert_close(name, &spec.name, &got, &case.weight_grads[&spec.name]);
        }
    }
}

/// The output rows of a model of `layers` (TOML items after an Input of `steps` ids) with the
/// weights of seed 7, on `ids` (`[batch, steps]`).
fn run_model(layers: &str, steps: usize, ids: &[f32]) -> Vec<f32> {
    use crate::model::{ModelSpec, Network};
    let text = format!("layers = [{{ type = \"Input\", shape = [{steps}] }}, {layers}]");
    let spec = ModelSpec::from_toml(&toml::from_str(&text).unwrap()).unwrap();
    let device = Device::flex();
    let net = Network::init(&spec, 7, &device);
    let batch = ids.len() / steps;
    let x = Tensor::<2>::from_data(TensorData::new(ids.to_vec(), [batch, steps]), &device);
    to_vec(net.forward(&spec, Act::Flat(x), false).output)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Keras' masks through a network: with `Embedding(mask_zero = true)`, padding (id 0) before
/// or after a sequence changes neither a recurrent stack's output (the mask passes through
/// `Dense` and a `return_sequences` LSTM to a GRU) nor `GlobalAveragePooling1D`'s mean, which
/// all equal the outputs on the unpadded ids; without `mask_zero` they differ.
#[test]
fn padding_masked_by_embedding_leaves_recurrent_and_pooled_outputs_unchanged() {
    let post_and_pre = [1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0];
    let unpadded = [1.0, 2.0, 3.0, 1.0, 2.0, 3.0];
    for tail in [
        "{ type = \"Dense\", units = 4, activation = \"tanh\" }, \
         { type = \"LSTM\", units = 3, return_sequences = true }, { type = \"GRU\", units = 3 }",
        "{ type = \"Bidirectional\", layer = { type = \"LSTM\", units = 2 } }",
        "{ type = \"Dropout\", rate = 0.5 }, { type = \"GlobalAveragePooling1D\" }",
    ] {
        let layers = |mask: bool| {
            format!(
                "{{ type = \"Embedding\", input_dim = 10, output_dim = 4, mask_zero = {mask} }}, {tail}"
            )
        };
        let padded = run_model(&layers(true), 5, &post_and_pre);
        let short = run_model(&layers(true), 3, &unpadded);
        assert!(
            max_diff(&padded, &short) < 1e-6,
            "{tail}: {padded:?} vs {short:?}"
        );
        let unmasked = run_model(&layers(false), 5, &post_and_pre);
        assert!(
            max_diff(&unmasked, &short) > 1e-3,
            "{tail}: the mask had no effect"
        );
    }
}

/// `Masking` marks the steps whose features all equal `mask_value` (here `-1` after a `Reshape`
/// of raw values to one feature per step), and a recurrent layer skips them.
#[test]
fn masking_layer_makes_recurrent_layers_skip_padded_steps() {
    let tail = "{ type = \"Reshape\", target_shape = [-1, 1] }, \
                { type = \"Masking\", mask_value = -1.0 }, { type = \"SimpleRNN\", units = 3 }";
    let padded = run_model(tail, 5, &[0.5, -0.25, 1.0, -1.0, -1.0]);
    let short = run_model(tail, 3, &[0.5, -0.25, 1.0]);
    assert!(max_diff(&padded, &short) < 1e-6, "{padded:?} vs {short:?}");
}

/// Bad arguments are one-line errors naming the layer and the argument.
#[test]
fn bad_recurrent_arguments_are_one_line_errors() {
    use crate::model::ModelSpec;
    let error = |layer: &str| {
        let text = format!("layers = [{{ type = \"Input\", shape = [5, 2] }}, {layer}]");
        let e = ModelSpec::from_toml(&toml::from_str(&text).unwrap())
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\n'), "one line: {e}");
        e
    };
    for (layer, want) in [
        (
            "{ type = \"LSTM\", units = 0 }",
            "model.layers[1] (LSTM): `units` must be positive",
        ),
        (
            "{ type = \"GRU\", units = 2, dropout = 1.0 }",
            "`dropout` must be in [0, 1), got 1",
        ),
        (
            "{ type = \"SimpleRNN\", units = 2, reset_after = true }",
            "SimpleRNN has no argument `reset_after`",
        ),
        (
            "{ type = \"LSTM\", units = 2, stateful = true }",
            "`stateful = true` is not supported",
        ),
        (
            "{ type = \"LSTM\", units = 2, unit = 3 }",
            "unknown field `unit`",
        ),
        (
            "{ type = \"Bidirectional\", layer = { type = \"Dense\", units = 2 } }",
            "must be a recurrent layer (LSTM, GRU or SimpleRNN), got \"Dense\"",
        ),
        (
            "{ type = \"Bidirectional\", layer = { type = \"GRU\", units = 2 }, merge_mode = \"max\" }",
            "unknown variant `max`, expected one of `concat`",
        ),
        (
            "{ type = \"Bidirectional\", layer = { type = \"GRU\", units = 0 } }",
            "(Bidirectional): `layer` (GRU): `units` must be positive",
        ),
        (
            "{ type = \"Flatten\" }, { type = \"LSTM\", units = 2 }",
            "LSTM expects a 2-D input (steps, features), got shape (None, 10)",
        ),
    ] {
        let e = error(layer);
        assert!(e.contains(want), "{layer}: {e}");
    }
}

/// `TimeDistributed(Dense)` is Keras' `Dense` on a sequence, weights and all; wrapping a layer
/// that does not give a vector per step is a one-line error.
#[test]
fn time_distributed_dense_equals_dense_on_steps() {
    use crate::model::{ModelSpec, Network};
    let device = Device::flex();
    let x: Vec<f32> = (0..24).map(|i| (0.37 * i as f32).sin()).collect();
    let run = |layer: &str| {
        let text = format!("layers = [{{ type = \"Input\", shape = [4, 3] }}, {layer}]");
        let spec = ModelSpec::from_toml(&toml::from_str(&text).unwrap()).unwrap();
        assert_eq!(spec.output_shape(), &[4, 5]);
        let net = Network::init(&spec, 3, &device);
        let input = Tensor::<3>::from_data(TensorData::new(x.clone(), [2, 4, 3]), &device);
        to_vec(net.forward(&spec, Act::Seq(input), false).output)
    };
    let wrapped = run(
        "{ type = \"TimeDistributed\", layer = { type = \"Dense\", units = 5, activation = \"softmax\" } }",
    );
    let plain = run("{ type = \"Dense\", units = 5, activation = \"softmax\" }");
    assert_eq!(wrapped.len(), 40);
    assert!(
        max_diff(&wrapped, &plain) < 1e-7,
        "{wrapped:?} vs {plain:?}"
    );
    let text = "layers = [{ type = \"Input\", shape = [4, 3] }, { type = \"TimeDistributed\", layer = { type = \"RepeatVector\", n = 2 } }]";
    let e = ModelSpec::from_toml(&toml::from_str(text).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("model.layers[1] (TimeDistributed): `layer` (RepeatVector) gives each step the shape [2, 3]"), "{e}");
}

/// The fused LSTM ([`crate::ops::lstm`], taken when the carry is not returned) equals the
/// step-by-step loop (taken when it is) in outputs and in the gradients of the input, every
/// weight and the initial state, on random values bigger than the Keras cases.
#[test]
fn fused_lstm_equals_the_step_loop_in_values_and_gradients() {
    use super::recurrent::{LSTM, Rnn, Run};
    let device = Device::flex().autodiff();
    let [b, t, f, u] = [9, 7, 5, 16];
    let layer = LSTM::new(u).with_return_sequences(true);
    let specs = Layer::weights(&layer, &[&[t, f]]);
    let mut params = LayerParams::empty();
    let at = slots(&specs);
    for (k, (spec, slot)) in specs.iter().zip(&at).enumerate() {
        let n: usize = spec.shape.iter().product();
        let v = (0..n)
            .map(|i| (0.31 * i as f32 + k as f32).sin() * 0.4)
            .collect();
        params.put(*slot, spec, v, true, &device);
    }
    let x: Vec<f32> = (0..b * t * f).map(|i| (0.17 * i as f32).cos()).collect();
    let r: Vec<f32> = (0..b * t * u).map(|i| (0.23 * i as f32).sin()).collect();
    let run = |carry: bool| {
        let x =
            Tensor::<3>::from_data(TensorData::new(x.clone(), [b, t, f]), &device).require_grad();
        let weights = Weights::new(specs.clone(), &params);
        let ctx = Run {
            training: true,
            zero_masked: false,
            carry,
        };
        let (y, _) = layer.run(x.clone(), None, &weights, "", ctx);
        let Act::Seq(y) = y else { panic!("a sequence") };
        let rt = Tensor::<3>::from_data(TensorData::new(r.clone(), [b, t, u]), &device);
        let grads = (y.clone() * rt).sum().backward();
        let mut all = vec![
            to_vec(y.flatten::<2>(0, 1)),
            to_vec(x.grad(&grads).unwrap()),
        ];
        all.extend(at.iter().map(|slot| weight_grad(&params, *slot, &grads)));
        all
    };
    let (fused, looped) = (run(false), run(true));
    for (k, (a, b)) in fused.iter().zip(&looped).enumerate() {
        let scale = b.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        assert!(
            max_diff(a, b) < 2e-5 * scale,
            "result {k}: {}",
            max_diff(a, b)
        );
    }
}
