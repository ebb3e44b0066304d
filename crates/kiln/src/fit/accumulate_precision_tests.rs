//! Loss scaling and out-of-memory recovery through the real training step.

use burn::module::Param;
use burn::optim::ModuleOptimizer;
use burn::prelude::*;

use super::GradientAccumulation;
use crate::batch::DeviceBatch;
use crate::compile::{Compiled, Labels, LossKind, LossSpec, OptimizerSpec};
use crate::model::{Act, Activation, LayerKind, LayerParams, ModelSpec, Network, weights};
use crate::precision::{LossScale, Precision};

fn classifier(precision: Precision) -> (ModelSpec, Compiled) {
    let spec = ModelSpec::builder(&[4])
        .add(LayerKind::from(crate::model::layers::Dense {
            units: 8,
            activation: Activation::Relu,
            use_bias: true,
        }))
        .add(LayerKind::from(crate::model::layers::Dense {
            units: 3,
            activation: Activation::Linear,
            use_bias: true,
        }))
        .build()
        .unwrap()
        .with_precision(precision);
    let compiled = Compiled::new(
        &spec,
        OptimizerSpec::from_toml(&"adamw".into()).unwrap(),
        LossSpec {
            kind: LossKind::SparseCategoricalCrossentropy,
            from_logits: true,
        },
        &[],
    )
    .unwrap();
    (spec, compiled)
}

fn class_batch(device: &Device) -> DeviceBatch {
    let x: Vec<f32> = (0..24)
        .map(|i| ((i * 7) % 11) as f32 / 11.0 - 0.4)
        .collect();
    let y = vec![0i64, 1, 2, 0, 1, 2];
    DeviceBatch {
        more: Vec::new(),
        x: Act::Flat(Tensor::from_data(TensorData::new(x, [6, 4]), device)),
        labels: Some(Labels::Sparse(Tensor::from_data(
            TensorData::new(y.clone(), [6]),
            device,
        ))),
        classes: y,
        targets: Vec::new(),
        outputs: vec![],
        size: 6,
        sample_weight: None,
    }
}

fn bits(spec: &ModelSpec, net: &Network) -> Vec<Vec<u32>> {
    weights::keras_weights(spec, net)
        .into_iter()
        .map(|(_, _, v)| v.iter().map(|x| x.to_bits()).collect())
        .collect()
}

fn optimizer_bytes(optim: &ModuleOptimizer) -> Vec<u8> {
    optim.into_bytes().unwrap().to_vec()
}

/// An injected overflow (a scale of 2^40 makes the float16 gradients infinite) skips the
/// update: weights and AdamW's state (moments and step counter) stay bit-identical, the scale
/// halves and the count of finite steps restarts; the next finite step applies normally.
#[test]
fn an_overflow_skips_the_update_and_halves_the_scale() {
    let (spec, compiled) = classifier(Precision::MixedFloat16);
    assert_eq!(compiled.loss_scale.unwrap().initial_scale, 32768.0);
    let device = Device::flex().autodiff();
    let net = Network::init(&spec, 3, &device);
    let mut optim = compiled.optimizer.build();
    let mut acc = GradientAccumulation::new(1).with_loss_scale(compiled.loss_scale);
    let step = |acc: &mut GradientAccumulation, optim: &mut ModuleOptimizer, net| {
        acc.train_step(
            net,
            optim,
            &spec,
            &compiled,
            class_batch(&device),
            0.01,
            true,
            None,
        )
        .unwrap()
    };
    // A normal first step, so that AdamW has state (step 1, moments).
    let (net, out, applied) = step(&mut acc, &mut optim, net);
    assert!(applied && out.loss.is_finite());
    assert_eq!(acc.loss_scale().unwrap().scale, 32768.0);
    assert_eq!(acc.loss_scale().unwrap().finite_steps, 1);
    let (w0, s0) = (bits(&spec, &net), optimizer_bytes(&optim));

    acc.restore_loss_scale(LossScale {
        scale: 2f64.powi(40),
        finite_steps: 7,
        growth_steps: 2000,
    });
    let (net, out, applied) = step(&mut acc, &mut optim, net);
    // The batch counts in the metrics; only the update is skipped.
    assert!(applied && out.loss.is_finite());
    assert_eq!(
        acc.loss_scale().unwrap(),
        LossScale {
            scale: 2f64.powi(39),
            finite_steps: 0,
            growth_steps: 2000
        }
    );
    assert_eq!(acc.take_overflow_skips(), 1);
    assert_eq!(bits(&spec, &net), w0, "weights changed on a skipped step");
    assert_eq!(
        optimizer_bytes(&optim),
        s0,
        "optimizer state changed on a skipped step"
    );

    // Back to a sane scale: the update happens (and AdamW's state moves on).
    acc.restore_loss_scale(LossScale::new(compiled.loss_scale.unwrap()));
    let (net, _, _) = step(&mut acc, &mut optim, net);
    assert_ne!(bits(&spec, &net), w0);
    assert_ne!(optimizer_bytes(&optim), s0);
    assert_eq!(acc.take_overflow_skips(), 0);
}

/// `y = x · w` with `w = [0.5, 0.5]` is 0 on both examples; targets `1e-8` and `1.5e-8` make
/// the mean-squared-error gradient at the output `dy = y - t = [-1e-8, -1.5e-8]`, below
/// float16's smallest subnormal's half (2.98e-8): without loss scaling it rounds to 0 in
/// float16 and the kernel's gradient `dw = xᵀ dy = [-1.75e-8, 1.75e-8]` is lost; scaled by
/// 2^15 it survives and, unscaled, matches float32's within float16's rounding.
#[test]
fn gradients_that_underflow_in_float16_survive_with_loss_scaling() {
    let device = Device::flex().autodiff();
    let run = |precision: Precision, scaled: bool| -> Vec<f32> {
        let spec = ModelSpec::builder(&[2])
            .add(LayerKind::from(crate::model::layers::Dense {
                units: 1,
                activation: Activation::Linear,
                use_bias: false,
            }))
            .build()
            .unwrap()
            .with_precision(precision);
        let compiled = Compiled::new(
            &spec,
            OptimizerSpec::Sgd {
                learning_rate: 1e6.into(),
                momentum: 0.0,
                nesterov: false,
            },
            LossSpec {
                kind: LossKind::MeanSquaredError,
                from_logits: false,
            },
            &[],
        )
        .unwrap();
        let compiled = if scaled {
            compiled
        } else {
            compiled.with_loss_scale(None).unwrap()
        };
        let kernel = Tensor::<2>::from_data(TensorData::new(vec![0.5f32, 0.5], [2, 1]), &device);
        let net = Network {
            layers: vec![LayerParams {
                dense_kernel: Some(Param::from_tensor(kernel)),
                ..LayerParams::empty()
            }],
        };
        let targets = vec![1e-8f32, 1.5e-8];
        let batch = DeviceBatch {
            more: Vec::new(),
            x: Act::Flat(Tensor::from_data(
                TensorData::new(vec![1.0f32, -1.0, 0.5, -0.5], [2, 2]),
                &device,
            )),
            labels: Some(Labels::Dense(Tensor::from_data(
                TensorData::new(targets.clone(), [2, 1]),
                &device,
            ))),
            classes: vec![0, 0],
            targets,
            outputs: vec![],
            size: 2,
            sample_weight: None,
        };
        let mut optim = compiled.optimizer.build();
        let mut acc = GradientAccumulation::new(1).with_loss_scale(compiled.loss_scale);
        let (net, _, _) = acc
            .train_step(net, &mut optim, &spec, &compiled, batch, 1e6, true, None)
            .unwrap();
        let w = weights::keras_weights(&spec, &net).remove(0).2;
        // The update lr · dw, in units of 1e-2 (lr = 1e6): [1.75, -1.75] for float32.
        w.iter().map(|v| (0.5 - v) * 100.0).collect()
    };
    let f32_update = run(Precision::Float32, false);
    assert!((f32_update[0] + 1.75).abs() < 1e-4 && (f32_update[1] - 1.75).abs() < 1e-4);
    let unscaled = run(Precision::MixedFloat16, false);
    assert_eq!(
        unscaled,
        vec![0.0, 0.0],
        "float16 should lose these gradients"
    );
    let scaled = run(Precision::MixedFloat16, true);
    for (s, f) in scaled.iter().zip(&f32_update) {
        // Two float16 roundings (output gradient, kernel gradient): relative error < 2^-10.
        assert!(
            (s - f).abs() <= 1e-3 * f.abs(),
            "{scaled:?} vs {f32_update:?}"
        );
    }
}

/// An injected out-of-memory failure in the first batch makes the step compute it in two
/// halves; the update equals the one-piece update up to float rounding, and later batches stay
/// in two parts. A one-example batch cannot be split: the error says so.
#[test]
fn an_out_of_memory_step_is_retried_in_halves_with_the_same_update() {
    let (spec, compiled) = classifier(Precision::Float32);
    let device = Device::flex().autodiff();
    let run = |inject: Option<u64>| {
        let net = Network::init(&spec, 5, &device);
        let mut optim = compiled.optimizer.build();
        let mut acc = GradientAccumulation::new(1);
        acc.inject_oom_at(inject);
        let mut net = net;
        let mut losses = Vec::new();
        for _ in 0..3 {
            let (n, out, _) = acc
                .train_step(
                    net,
                    &mut optim,
                    &spec,
                    &compiled,
                    class_batch(&device),
                    0.01,
                    true,
                    None,
                )
                .unwrap();
            net = n;
            losses.push(out.loss);
        }
        (weights::keras_weights(&spec, &net), losses, acc.parts())
    };
    let (whole, whole_losses, parts) = run(None);
    assert_eq!(parts, 1);
    let (halves, halves_losses, parts) = run(Some(0));
    assert_eq!(parts, 2);
    for ((_, _, a), (_, _, b)) in whole.iter().zip(&halves) {
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 1e-6 * (1.0 + x.abs()), "{a:?} vs {b:?}");
        }
    }
    for (a, b) in whole_losses.iter().zip(&halves_losses) {
        assert!((a - b).abs() <= 1e-6 * (1.0 + a.abs()), "{a} vs {b}");
    }

    let mut acc = GradientAccumulation::new(1);
    acc.inject_oom_at(Some(0));
    let one = crate::fit::oom::split(&class_batch(&device), 6).remove(0);
    let net = Network::init(&spec, 5, &device);
    let mut optim = compiled.optimizer.build();
    let e = acc
        .train_step(net, &mut optim, &spec, &compiled, one, 0.01, true, None)
        .unwrap_err();
    assert!(
        matches!(
            e,
            crate::KilnError::OutOfMemory {
                step: 0,
                batch_size: 1,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("Lower fit.batch_size"), "{e}");
}

/// With `gradient_accumulation_steps = 2`, a micro-batch whose gradients overflow is left out
/// of the window (as Keras' inner optimizer never sees it): the update waits for the next
/// finite micro-batch, and equals the update of the two finite ones alone.
#[test]
fn an_overflowing_micro_batch_is_left_out_of_the_accumulated_mean() {
    let (spec, compiled) = classifier(Precision::MixedFloat16);
    let device = Device::flex().autodiff();
    let overflow = LossScale {
        scale: 2f64.powi(40),
        finite_steps: 0,
        growth_steps: 2000,
    };
    let run = |with_overflow: bool| {
        let mut net = Network::init(&spec, 3, &device);
        let mut optim = compiled.optimizer.build();
        let mut acc = GradientAccumulation::new(2).with_loss_scale(compiled.loss_scale);
        let normal = LossScale::new(compiled.loss_scale.unwrap());
        let scales = if with_overflow {
            vec![normal, overflow, normal]
        } else {
            vec![normal, normal]
        };
        let mut pending = Vec::new();
        for scale in scales {
            acc.restore_loss_scale(scale);
            let (n, _, _) = acc
                .train_step(
                    net,
                    &mut optim,
                    &spec,
                    &compiled,
                    class_batch(&device),
                    0.01,
                    true,
                    None,
                )
                .unwrap();
            net = n;
            pending.push(acc.pending());
        }
        (bits(&spec, &net), pending)
    };
    let (plain, pending) = run(false);
    assert_eq!(pending, vec![1, 0]);
    let (skipped, pending) = run(true);
    // Micro-batch 1 overflowed: still one pending after it, the update after micro-batch 2.
    assert_eq!(pending, vec![1, 1, 0]);
    assert_eq!(skipped, plain);
}
