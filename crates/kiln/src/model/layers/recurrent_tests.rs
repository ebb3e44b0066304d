//! The recurrent layers and masks against Keras 3: forward values and the gradients of
//! `sum(output * r)` with respect to the input and every weight, on the fixed inputs, weights
//! and masks of `tests/reference/recurrent_reference.py` (its JSON, `tests/data/`); each layer
//! built from its TOML arguments through the registry.

use std::collections::BTreeMap;

use burn::prelude::*;
use serde::Deserialize;

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
    serde_json::from_str(include_str!(
        "../../../tests/data/recurrent_reference.json"
    ))
    .unwrap()
}

fn build(args: &serde_json::Value) -> std::sync::Arc<dyn Layer> {
    let mut table: toml::Table = serde_json::from_value(args.clone()).unwrap();
    let class = table.remove("type").unwrap();
    let reg = registry::lookup(class.as_str().unwrap()).unwrap();
    (reg.build)(table).unwrap()
}

fn to_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
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
fn weight_grad(p: &LayerParams, slot: Slot, grads: &burn::tensor::Gradients) -> Vec<f32> {
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
        let r: Vec<f32> = (0..n).map(|i| (0.5 * i as f64 + 0.2).cos() as f32).collect();
        let r = Tensor::<2>::from_data(TensorData::new(r, rows.dims()), &device);
        let grads = (rows * r).sum().backward();
        assert_close(name, "input gradient", &to_vec(x.grad(&grads).unwrap()), &case.input_grad);
        for (spec, slot) in specs.iter().zip(at) {
            let got = weight_grad(&params, slot, &grads);
            assert_close(name, &spec.name, &got, &case.weight_grads[&spec.name]);
        }
    }
}
