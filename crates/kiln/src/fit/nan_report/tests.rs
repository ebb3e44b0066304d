use std::collections::HashMap;

use burn::prelude::Device;
use kiln_data::{Array, Buffer, Element};

use super::*;
use crate::compile::{LossKind, LossSpec, OptimizerSpec};
use crate::model::{Activation, LayerKind, weights};

/// Input(2) -> Dense(4, relu) "dense" -> Dense(3) "dense_1", sparse cross-entropy.
fn model(from_logits: bool) -> (ModelSpec, Compiled) {
    let spec = ModelSpec::builder(&[2])
        .add(LayerKind::from(crate::model::layers::Dense {
            units: 4,
            activation: Activation::Relu,
            use_bias: true,
        }))
        .add(LayerKind::from(crate::model::layers::Dense {
            units: 3,
            activation: Activation::Linear,
            use_bias: true,
        }))
        .build()
        .unwrap();
    let compiled = Compiled::new(
        &spec,
        OptimizerSpec::Sgd {
            learning_rate: 0.5.into(),
            momentum: 0.0,
            nesterov: false,
        },
        LossSpec {
            kind: LossKind::SparseCategoricalCrossentropy,
            from_logits,
        },
        &[],
    )
    .unwrap();
    (spec, compiled)
}

/// A training network whose kernels are all `kernel`, biases all `bias`, except the values
/// `(weight, flat index, value)` in `special`.
fn network(spec: &ModelSpec, kernel: f32, bias: f32, special: &[(&str, usize, f32)]) -> Network {
    let special: HashMap<&str, (usize, f32)> =
        special.iter().map(|&(n, i, v)| (n, (i, v))).collect();
    let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
        let fill = if name.ends_with("/bias") {
            bias
        } else {
            kernel
        };
        let mut v = vec![fill; shape.iter().product()];
        if let Some(&(i, x)) = special.get(name) {
            v[i] = x;
        }
        Ok(v)
    };
    weights::load_with(spec, &Device::flex().autodiff(), &get).unwrap()
}

fn batch(x: Vec<f32>) -> Element {
    Element::new()
        .with("x", Array::new(vec![2, 2], Buffer::F32(x)).unwrap())
        .with("y", Array::new(vec![2], Buffer::I32(vec![0, 2])).unwrap())
}

fn info() -> StepInfo {
    StepInfo {
        epoch: 2,
        step: 41,
        learning_rate: 0.5,
        recent_grad_norms: [(38, 0.5), (39, 2.0), (40, 50.0)]
            .map(|(step, norm)| GradNormSample { step, norm })
            .to_vec(),
        global_clipnorm: None,
    }
}

fn keys(r: &NanReport) -> Vec<&str> {
    r.remedies.iter().map(|r| r.key).collect()
}

#[test]
fn names_the_layer_whose_output_overflows_first() {
    // Every weight 1e20 (but dense/bias[0] = 0): "dense" gives x0 * 1e20 + x1 * 1e20 + bias,
    // at most 3e20 (finite in float32); "dense_1" sums four such values times 1e20, about
    // 1e41, beyond float32's 3.4e38: all 2 x 3 outputs Inf.
    let (spec, compiled) = model(false);
    let net = network(&spec, 1e20, 1e20, &[("dense/bias", 0, 0.0)]);
    let dir = tempfile::tempdir().unwrap();
    let b = batch(vec![1.0, 1.0, 0.5, 0.5]);
    let r = diagnose(&net, &spec, &compiled, &b, &info(), dir.path()).unwrap();
    let first = r.first_non_finite.as_ref().unwrap();
    assert_eq!(
        (first.kind, first.name.as_str(), first.shape.as_slice()),
        (TensorKind::LayerOutput, "dense_1", &[2, 3][..])
    );
    assert_eq!((first.nan, first.inf), (0, 6));
    let order: Vec<(TensorKind, &str)> = r
        .tensors
        .iter()
        .take(9)
        .map(|t| (t.kind, t.name.as_str()))
        .collect();
    use TensorKind::*;
    assert_eq!(
        order,
        vec![
            (Input, "x"),
            (Input, "y"),
            (Weight, "dense/kernel"),
            (Weight, "dense/bias"),
            (LayerOutput, "dense"),
            (Weight, "dense_1/kernel"),
            (Weight, "dense_1/bias"),
            (LayerOutput, "dense_1"),
            (Loss, "loss"),
        ]
    );
    // "dense"'s output is finite, its largest value 3e20 (row 0: 1e20 + 1e20 + bias 1e20).
    let dense = &r.tensors[4];
    assert!(dense.is_finite());
    let want = 3.0 * f64::from(1e20f32);
    assert!(
        (dense.max_abs - want).abs() / want < 1e-6,
        "{}",
        dense.max_abs
    );
    assert!(r.loss.is_nan() && r.grad_norm.is_nan() && r.gradients_checked);
    let grads: Vec<&str> = r
        .tensors
        .iter()
        .filter(|t| t.kind == Gradient)
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(
        grads,
        [
            "dense/kernel",
            "dense/bias",
            "dense_1/kernel",
            "dense_1/bias"
        ]
    );
    // Sparse cross-entropy on a linear output without from_logits: compute from logits.
    assert_eq!(
        keys(&r),
        ["lower_learning_rate", "global_clipnorm", "from_logits"]
    );
    let text = r.to_string();
    assert!(
        text.starts_with("NaN report, epoch 3 step 41: loss NaN\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "first non-finite tensor: layer output `dense_1` [2, 3] float32: 0 NaN, 6 Inf"
        ),
        "{text}"
    );
    assert!(
        text.contains("step 38: 5.000e-1, step 39: 2.000e0, step 40: 5.000e1 (x100.000 from step 38 to step 40)"),
        "{text}"
    );

    // The JSON file says the same.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(REPORT_FILE)).unwrap())
            .unwrap();
    assert_eq!(json["first_non_finite"]["kind"], "layer_output");
    assert_eq!(json["first_non_finite"]["name"], "dense_1");
    assert_eq!(json["first_non_finite"]["inf"], 6);
    assert_eq!(json["epoch"], 2);
    assert_eq!(json["step"], 41);
    assert_eq!(json["loss"], serde_json::Value::Null);
    assert_eq!(json["remedies"][0]["key"], "lower_learning_rate");
}

#[test]
fn names_a_nan_in_the_input_and_saves_the_batch_for_replay() {
    let (spec, compiled) = model(true);
    let net = network(&spec, 0.1, 0.0, &[]);
    let dir = tempfile::tempdir().unwrap();
    let b = batch(vec![1.0, 2.0, f32::NAN, 4.0]);
    let r = diagnose(&net, &spec, &compiled, &b, &info(), dir.path()).unwrap();
    let first = r.first_non_finite.as_ref().unwrap();
    assert_eq!((first.kind, first.name.as_str()), (TensorKind::Input, "x"));
    assert_eq!((first.nan, first.inf), (1, 0));
    assert_eq!(keys(&r), ["check_inputs"]);
    // Round trip: the saved files hold the batch exactly (NaN included).
    assert_eq!(
        r.batch_files,
        vec![
            dir.path().join("batch_x.npy"),
            dir.path().join("batch_y.npy")
        ]
    );
    let x = kiln_data::npy::read_npy(&r.batch_files[0]).unwrap();
    let y = kiln_data::npy::read_npy(&r.batch_files[1]).unwrap();
    assert_eq!(x.shape(), &[2, 2]);
    let (Buffer::F32(saved), Buffer::F32(orig)) = (x.data(), b.get("x").unwrap().data()) else {
        panic!("float32 features");
    };
    assert_eq!(
        saved.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        orig.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    assert_eq!(&y, b.get("y").unwrap());
}

#[test]
fn names_a_non_finite_weight_before_the_output_it_spoils() {
    let (spec, compiled) = model(true);
    let net = network(&spec, 0.1, 0.0, &[("dense_1/bias", 1, f32::NAN)]);
    let dir = tempfile::tempdir().unwrap();
    let r = diagnose(
        &net,
        &spec,
        &compiled,
        &batch(vec![1.0, 2.0, 3.0, 4.0]),
        &StepInfo {
            global_clipnorm: Some(1.0),
            ..info()
        },
        dir.path(),
    )
    .unwrap();
    let first = r.first_non_finite.as_ref().unwrap();
    assert_eq!(
        (first.kind, first.name.as_str(), first.nan),
        (TensorKind::Weight, "dense_1/bias", 1)
    );
    assert_eq!(
        keys(&r),
        ["restore_weights", "lower_learning_rate", "global_clipnorm"]
    );
    assert!(
        r.remedies[2]
            .advice
            .starts_with("lower `global_clipnorm` (now 1)")
    );
}

#[test]
fn a_finite_replay_reports_no_culprit_and_the_gradient_norm() {
    // Kernels all 0.5, biases 0; both examples have x0 + x1 = 2, so every hidden unit is
    // h = relu(0.5 * 2) = 1 and every logit 4 * 0.5 * 1 = 2: the loss is ln 3, and
    // dL/dlogits = (softmax - onehot) / 2 (the mean over 2 examples) =
    // (-2/3, 1/3, 1/3) / 2 for label 0 and (1/3, 1/3, -2/3) / 2 for label 2.
    let (spec, compiled) = model(true);
    let net = network(&spec, 0.5, 0.0, &[]);
    let dir = tempfile::tempdir().unwrap();
    let r = diagnose(
        &net,
        &spec,
        &compiled,
        &batch(vec![1.0, 1.0, 0.0, 2.0]),
        &info(),
        dir.path(),
    )
    .unwrap();
    assert_eq!(r.first_non_finite, None);
    assert!((r.loss - 3f64.ln()).abs() < 1e-6, "{}", r.loss);
    // dense_1/bias = sum over examples = (-1/6, 1/3, -1/6), squares summing to 1/6; every
    // row of dense_1/kernel is the same (h = 1); dL/dh = 0.5 * (sum of a row of
    // softmax - onehot) = 0, so "dense" gets zero gradients. Global norm sqrt(5 / 6).
    assert!(
        (r.grad_norm - (5.0f64 / 6.0).sqrt()).abs() < 1e-6,
        "{}",
        r.grad_norm
    );
    assert_eq!(keys(&r), ["lower_learning_rate", "global_clipnorm"]);
    assert!(
        r.to_string()
            .contains("the replay of this step stayed finite")
    );
}
