//! `MultiHeadAttention` with Keras masks and `use_causal_mask` against Keras 3
//! (`tests/reference/attention_masks_reference.py`): outputs at the unmasked query steps and
//! the input gradient; dropout of the attention weights acts in training only.

use std::collections::BTreeMap;

use burn::prelude::*;
use serde::Deserialize;

use super::MultiHeadAttention;
use super::shape_tests::to_vec;
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, Weights};
use crate::model::params::{LayerParams, slots};

#[derive(Deserialize)]
struct Values {
    values: Vec<f32>,
}

#[derive(Deserialize)]
struct Case {
    masked: bool,
    causal: bool,
    weights: BTreeMap<String, Values>,
    output: Vec<f32>,
    input_grad: Vec<f32>,
}

#[derive(Deserialize)]
struct Reference {
    x: Vec<f32>,
    mask: Vec<f32>,
    cases: Vec<Case>,
}

fn layer(causal: bool, dropout: f64) -> MultiHeadAttention {
    MultiHeadAttention {
        num_heads: 2,
        key_dim: 3,
        value_dim: None,
        dropout,
        use_causal_mask: causal,
        use_bias: true,
    }
}

#[test]
fn masked_and_causal_attention_match_keras() {
    let r: Reference = serde_json::from_str(include_str!(
        "../../../tests/data/attention_masks_reference.json"
    ))
    .unwrap();
    let device = Device::flex().autodiff();
    for case in &r.cases {
        let mha = layer(case.causal, 0.0);
        let specs = mha.weights(&[&[5, 4]]);
        let mut params = LayerParams::empty();
        for (spec, slot) in specs.iter().zip(slots(&specs)) {
            let v = case.weights[&spec.name].values.clone();
            params.put(slot, spec, v, true, &device);
        }
        let weights = Weights::new(specs, &params);
        let x =
            Tensor::<3>::from_data(TensorData::new(r.x.clone(), [2, 5, 4]), &device).require_grad();
        let rows = match case.masked {
            true => r.mask.clone(),
            false => vec![1.0; 10],
        };
        let mask = Tensor::<2>::from_data(TensorData::new(r.mask.clone(), [2, 5]), &device);
        let masks = [case.masked.then_some(mask)];
        let y = mha
            .forward_masked(
                vec![Act::Seq(x.clone())],
                &masks,
                &weights,
                ForwardContext::new(false),
            )
            .into_seq();
        let got = to_vec(y.clone());
        let what = format!("masked {}, causal {}", case.masked, case.causal);
        for (i, (g, w)) in got.iter().zip(&case.output).enumerate() {
            if rows[i / 4] == 1.0 {
                assert!(
                    (g - w).abs() <= 1e-5,
                    "{what}: output[{i}] kiln {g}, Keras {w}"
                );
            }
        }
        let weight: Vec<f32> = (0..40)
            .map(|i| (0.5 * i as f64 + 0.2).cos() as f32 * rows[i / 4])
            .collect();
        let weight = Tensor::<3>::from_data(TensorData::new(weight, [2, 5, 4]), &device);
        let grads = (y * weight).sum().backward();
        let grad = to_vec(x.grad(&grads).unwrap());
        for (i, (g, w)) in grad.iter().zip(&case.input_grad).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5,
                "{what}: gradient[{i}] kiln {g}, Keras {w}"
            );
        }
    }
}

/// `dropout` changes the output while training (and differs between draws), never at
/// inference.
#[test]
fn attention_dropout_acts_in_training_only() {
    let device = Device::flex();
    let mha = layer(false, 0.5);
    let specs = mha.weights(&[&[5, 4]]);
    let mut params = LayerParams::empty();
    for (k, (spec, slot)) in specs.iter().zip(slots(&specs)).enumerate() {
        let n: usize = spec.shape.iter().product();
        let v = (0..n)
            .map(|i| (0.7 * i as f32 + k as f32).sin() * 0.4)
            .collect();
        params.put(slot, spec, v, false, &device);
    }
    let weights = Weights::new(specs, &params);
    let x: Vec<f32> = (0..40).map(|i| (0.9 * i as f32).sin()).collect();
    let run = |training| {
        let x = Tensor::<3>::from_data(TensorData::new(x.clone(), [2, 5, 4]), &device);
        to_vec(
            mha.forward(vec![Act::Seq(x)], &weights, ForwardContext::new(training))
                .into_seq(),
        )
    };
    let plain = layer(false, 0.0);
    let x0 = Tensor::<3>::from_data(TensorData::new(x.clone(), [2, 5, 4]), &device);
    let reference = to_vec(
        plain
            .forward(vec![Act::Seq(x0)], &weights, ForwardContext::new(true))
            .into_seq(),
    );
    assert_eq!(
        run(false),
        reference,
        "inference is the attention without dropout"
    );
    let (a, b) = (run(true), run(true));
    assert_ne!(a, reference);
    assert_ne!(a, b, "two training draws differ");
}
