//! `fit` with Keras' gradient options (`gradient_accumulation_steps`, `global_clipnorm`) and
//! loss weights (`sample_weight`, `class_weight`), end to end on a small Dense model.

mod common;

use std::collections::BTreeMap;

use burn::prelude::Device;
use kiln::Model;
use kiln::batch::SAMPLE_WEIGHT;
use kiln::compile::{Compiled, GradientOptions, LossKind, LossSpec, OptimizerSpec};
use kiln::fit::ClassWeight;
use kiln::model::weights::keras_weights;
use kiln_data::{Array, Buffer, Dataset, Element};

/// `n` fixed points in 2-D with 3 classes (no randomness: a deterministic spiral-ish pattern).
fn data(n: usize) -> (Array, Array) {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for i in 0..n {
        let t = i as f32 * 0.37;
        x.push(t.sin() * 2.0 + (i % 7) as f32 * 0.1);
        x.push(t.cos() * 1.5 - (i % 5) as f32 * 0.2);
        y.push(((i * 7) % 3) as i64);
    }
    (
        Array::new(vec![n, 2], Buffer::F32(x)).unwrap(),
        Array::new(vec![n], Buffer::I64(y)).unwrap(),
    )
}

fn slices(x: &Array, y: &Array) -> Dataset {
    Dataset::from_tensor_slices(Element::new().with("x", x.clone()).with("y", y.clone())).unwrap()
}

fn model(optimizer: OptimizerSpec, gradients: GradientOptions) -> Model {
    let spec = common::two_layer_spec(8, 3);
    let compiled = Compiled::new(
        &spec,
        optimizer,
        LossSpec {
            kind: LossKind::SparseCategoricalCrossentropy,
            from_logits: true,
        },
        &["accuracy".to_string()],
    )
    .unwrap()
    .with_gradients(gradients)
    .unwrap();
    Model::new("grads", spec, compiled, 7, Device::flex())
}

fn adamw() -> OptimizerSpec {
    OptimizerSpec::AdamW {
        learning_rate: 0.01.into(),
        weight_decay: 0.004,
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: 1e-7,
        amsgrad: false,
    }
}

fn accumulating(steps: usize) -> GradientOptions {
    GradientOptions {
        gradient_accumulation_steps: steps,
        ..GradientOptions::default()
    }
}

fn weights(m: &Model) -> Vec<f32> {
    keras_weights(m.spec(), m.network())
        .into_iter()
        .flat_map(|(_, _, v)| v)
        .collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn four_accumulated_batches_of_32_give_the_weights_of_batches_of_128() {
    let (x, y) = data(512);
    let mut big = model(adamw(), accumulating(1));
    let initial = weights(&big);
    big.fit(&slices(&x, &y).batch(128, false), None, 2, &mut [])
        .unwrap();
    let mut acc = model(adamw(), accumulating(4));
    acc.fit(&slices(&x, &y).batch(32, false), None, 2, &mut [])
        .unwrap();
    let mut plain = model(adamw(), accumulating(1));
    plain
        .fit(&slices(&x, &y).batch(32, false), None, 2, &mut [])
        .unwrap();
    let (w_big, w_acc, w_plain) = (weights(&big), weights(&acc), weights(&plain));
    // 8 updates of lr 0.01 moved the weights...
    assert!(max_diff(&w_big, &initial) > 0.05, "{w_big:?}");
    // ... identically with 4 x 32 accumulated (Adam's step counts updates) ...
    assert!(
        max_diff(&w_big, &w_acc) <= 1e-6,
        "{}",
        max_diff(&w_big, &w_acc)
    );
    // ... and not as 32 updates of 32 would.
    assert!(max_diff(&w_big, &w_plain) > 1e-2);
}

#[test]
fn an_epoch_ending_mid_accumulation_applies_the_mean_of_the_batches_seen() {
    // 160 examples in batches of 32: with 4 steps, one update on the first 128 and one on the
    // last 32 (the partial accumulation, averaged over its 1 batch), in each epoch.
    let (x, y) = data(160);
    let mut acc = model(adamw(), accumulating(4));
    acc.fit(&slices(&x, &y).batch(32, false), None, 2, &mut [])
        .unwrap();
    let uneven = slices(&x, &y)
        .take(128)
        .batch(128, false)
        .concatenate(slices(&x, &y).skip(128).batch(32, false));
    let mut reference = model(adamw(), accumulating(1));
    reference.fit(&uneven, None, 2, &mut []).unwrap();
    let d = max_diff(&weights(&acc), &weights(&reference));
    assert!(d <= 1e-6, "{d}");
}

#[test]
fn global_clipnorm_bounds_each_sgd_update() {
    // SGD without momentum: w' = w - lr * clip(g), so the update's global norm is exactly
    // lr * global_clipnorm when the gradient's norm is larger.
    let (x, y) = data(32);
    let sgd = OptimizerSpec::Sgd {
        learning_rate: 1.0.into(),
        momentum: 0.0,
        nesterov: false,
    };
    let clip = GradientOptions {
        global_clipnorm: Some(1e-3),
        ..GradientOptions::default()
    };
    let mut clipped = model(sgd.clone(), clip);
    let before = weights(&clipped);
    clipped
        .fit(&slices(&x, &y).batch(32, false), None, 1, &mut [])
        .unwrap();
    let step: f64 = weights(&clipped)
        .iter()
        .zip(&before)
        .map(|(a, b)| ((a - b) as f64).powi(2))
        .sum::<f64>()
        .sqrt();
    assert!((step - 1e-3).abs() < 2e-5, "{step}");
    // Unclipped, the same step is much larger (so the clip did act).
    let mut free = model(sgd, GradientOptions::default());
    free.fit(&slices(&x, &y).batch(32, false), None, 1, &mut [])
        .unwrap();
    let free_step = max_diff(&weights(&free), &before);
    assert!(free_step > 1e-2, "{free_step}");
}

/// Softmax cross-entropy of each row of `logits` against `labels`, in f64 on the host.
fn host_losses(logits: &[f32], labels: &[i64], units: usize) -> Vec<f64> {
    logits
        .chunks_exact(units)
        .zip(labels)
        .map(|(row, &c)| {
            let max = row.iter().fold(f32::MIN, |a, &b| a.max(b)) as f64;
            let lse = row
                .iter()
                .map(|&v| (v as f64 - max).exp())
                .sum::<f64>()
                .ln()
                + max;
            lse - row[c as usize] as f64
        })
        .collect()
}

#[test]
fn sample_weights_weight_the_loss_over_the_batch_size_and_not_the_metrics() {
    let (x, y) = data(48);
    let labels = y.data().try_to_i64().unwrap();
    let w: Vec<f32> = (0..48).map(|i| [0.0, 0.5, 1.0, 3.0][i % 4]).collect();
    let m = model(adamw(), GradientOptions::default());
    let (logits, units) = m.predict(&slices(&x, &y).batch(16, false)).unwrap();
    let per_example = host_losses(&logits, &labels, units);
    let sw = Array::new(vec![48], Buffer::F32(w.clone())).unwrap();
    let weighted = Dataset::from_tensor_slices(
        Element::new()
            .with("x", x.clone())
            .with("y", y.clone())
            .with(SAMPLE_WEIGHT, sw),
    )
    .unwrap()
    .batch(16, false);
    let logs = m.evaluate(&weighted).unwrap();
    let plain = m.evaluate(&slices(&x, &y).batch(16, false)).unwrap();
    // Keras' sum_over_batch_size: Σ w·l / 48 (batches of equal size), not Σ w·l / Σ w.
    let want: f64 = per_example
        .iter()
        .zip(&w)
        .map(|(l, &w)| l * w as f64)
        .sum::<f64>()
        / 48.0;
    assert!(
        (logs.get("loss").unwrap() - want).abs() < 1e-5,
        "{logs:?} vs {want}"
    );
    let unweighted = per_example.iter().sum::<f64>() / 48.0;
    assert!((plain.get("loss").unwrap() - unweighted).abs() < 1e-5);
    assert!(
        (want - unweighted).abs() > 1e-2,
        "the weights change the loss"
    );
    // Keras 3: `metrics` are unweighted (only `weighted_metrics` see sample weights).
    assert_eq!(logs.get("accuracy"), plain.get("accuracy"));
}

#[test]
fn class_weight_trains_as_the_matching_sample_weights() {
    let (x, y) = data(96);
    let labels = y.data().try_to_i64().unwrap();
    let table: BTreeMap<usize, f64> = [(0, 0.25), (2, 4.0)].into_iter().collect();
    let by_class = ClassWeight::new(&table, 3)
        .unwrap()
        .apply(slices(&x, &y).batch(32, false));
    let w: Vec<f32> = labels
        .iter()
        .map(|&c| [0.25, 1.0, 4.0][c as usize])
        .collect();
    let sw = Array::new(vec![96], Buffer::F32(w)).unwrap();
    let by_sample = Dataset::from_tensor_slices(
        Element::new()
            .with("x", x.clone())
            .with("y", y.clone())
            .with(SAMPLE_WEIGHT, sw),
    )
    .unwrap()
    .batch(32, false);
    let mut a = model(adamw(), GradientOptions::default());
    let ha = a.fit(&by_class, None, 2, &mut []).unwrap();
    let mut b = model(adamw(), GradientOptions::default());
    let hb = b.fit(&by_sample, None, 2, &mut []).unwrap();
    assert_eq!(weights(&a), weights(&b));
    assert_eq!(ha.history["loss"], hb.history["loss"]);
    // Uniform class weights of 1 train exactly as no weights.
    let ones = ClassWeight::new(&BTreeMap::new(), 3)
        .unwrap()
        .apply(slices(&x, &y).batch(32, false));
    let mut c = model(adamw(), GradientOptions::default());
    c.fit(&ones, None, 2, &mut []).unwrap();
    let mut d = model(adamw(), GradientOptions::default());
    d.fit(&slices(&x, &y).batch(32, false), None, 2, &mut [])
        .unwrap();
    assert_eq!(weights(&c), weights(&d));
    assert_ne!(weights(&a), weights(&d));
}
