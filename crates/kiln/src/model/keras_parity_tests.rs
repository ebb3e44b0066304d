//! kiln against Keras: shapes, parameter counts, a forward pass and losses, with known answers
//! printed by `tests/reference/keras_reference.py` (TensorFlow 2.21, Keras 3, CPU); plus a
//! finite-difference check of the Dense and Conv2D gradients.

// Known answers are pasted verbatim from the reference script's output.
#![allow(clippy::excessive_precision)]

use std::collections::HashMap;

use burn::prelude::*;

use super::spec::{Activation, LayerKind, ModelSpec, Padding, Pair};
use super::weights::{keras_weights, load_with};
use crate::compile::{Labels, LossKind, LossSpec};
use crate::error::KilnError;
use crate::model::{Act, Network};

fn dense(units: usize) -> LayerKind {
    LayerKind::from(crate::model::layers::Dense {
        units,
        activation: Activation::Linear,
        use_bias: true,
    })
}
fn conv(
    filters: usize,
    k: [usize; 2],
    s: [usize; 2],
    padding: Padding,
    use_bias: bool,
) -> LayerKind {
    LayerKind::from(crate::model::layers::Conv2D {
        filters,
        kernel_size: Pair(k),
        strides: Pair(s),
        padding,
        dilation_rate: Pair([1, 1]),
        groups: 1,
        activation: Activation::Linear,
        use_bias,
    })
}
fn pool(max: bool, k: usize, s: Option<usize>, padding: Padding) -> LayerKind {
    let (pool_size, strides) = (Pair([k, k]), s.map(|s| Pair([s, s])));
    if max {
        LayerKind::from(crate::model::layers::MaxPooling2D {
            pool_size,
            strides,
            padding,
        })
    } else {
        LayerKind::from(crate::model::layers::AveragePooling2D {
            pool_size,
            strides,
            padding,
        })
    }
}

#[test]
fn output_shapes_and_parameter_counts_equal_keras() {
    use Padding::{Same, Valid};
    let bn = LayerKind::from(crate::model::layers::BatchNormalization {
        momentum: 0.99,
        epsilon: 1e-3,
        ..Default::default()
    });
    // (layer, input shape, Keras output shape, Keras count_params())
    let cases: Vec<(LayerKind, Vec<usize>, Vec<usize>, usize)> = vec![
        (dense(10), vec![784], vec![10], 7850),
        (
            LayerKind::from(crate::model::layers::Dense {
                units: 7,
                activation: Activation::Linear,
                use_bias: false,
            }),
            vec![5, 3],
            vec![5, 7],
            21,
        ),
        (
            conv(32, [3, 3], [1, 1], Same, true),
            vec![28, 28, 1],
            vec![28, 28, 32],
            320,
        ),
        (
            conv(64, [3, 3], [1, 1], Valid, true),
            vec![13, 13, 32],
            vec![11, 11, 64],
            18496,
        ),
        (
            conv(8, [3, 5], [2, 2], Same, true),
            vec![11, 10, 3],
            vec![6, 5, 8],
            368,
        ),
        (
            conv(4, [2, 2], [2, 3], Valid, false),
            vec![9, 10, 6],
            vec![4, 3, 4],
            96,
        ),
        (
            pool(true, 2, None, Valid),
            vec![28, 28, 32],
            vec![14, 14, 32],
            0,
        ),
        (
            pool(true, 3, Some(2), Same),
            vec![7, 7, 4],
            vec![4, 4, 4],
            0,
        ),
        (
            pool(false, 2, None, Valid),
            vec![13, 13, 8],
            vec![6, 6, 8],
            0,
        ),
        (
            pool(false, 3, Some(1), Same),
            vec![5, 6, 2],
            vec![5, 6, 2],
            0,
        ),
        (
            LayerKind::from(crate::model::layers::Flatten {}),
            vec![7, 7, 64],
            vec![3136],
            0,
        ),
        (
            LayerKind::from(crate::model::layers::Dropout { rate: 0.5 }),
            vec![128],
            vec![128],
            0,
        ),
        (bn.clone(), vec![14, 14, 32], vec![14, 14, 32], 128),
        (bn, vec![100], vec![100], 400),
        (
            LayerKind::from(crate::model::layers::ActivationLayer {
                activation: Activation::Gelu,
            }),
            vec![10],
            vec![10],
            0,
        ),
    ];
    for (kind, input, shape, params) in cases {
        let spec = ModelSpec::builder(&input)
            .add(kind.clone())
            .build()
            .unwrap();
        assert_eq!(
            spec.output_shape(),
            shape.as_slice(),
            "{kind:?} on {input:?}"
        );
        let (t, n) = spec.param_count();
        assert_eq!(t + n, params, "{kind:?} on {input:?}");
        // The network really has that many values, in the shapes the spec promises.
        let net = Network::init(&spec, 0, &Device::flex());
        let stored: usize = keras_weights(&spec, &net)
            .iter()
            .map(|(_, _, v)| v.len())
            .sum();
        assert_eq!(stored, params, "{kind:?}");
        let (b, rest) = (3, &input[..]);
        let x = match rest.len() {
            1 => Act::Flat(Tensor::zeros([b, rest[0]], &Device::flex())),
            2 => Act::Seq(Tensor::zeros([b, rest[0], rest[1]], &Device::flex())),
            _ => Act::Image(Tensor::zeros(
                [b, rest[2], rest[0], rest[1]],
                &Device::flex(),
            )),
        };
        let out = net.forward(&spec, x, false).output;
        // Rows of the last axis: one per example and output position.
        let units = *shape.last().unwrap();
        let positions: usize = shape[..shape.len() - 1].iter().product();
        assert_eq!(out.dims(), [3 * positions, units], "{kind:?}");
    }
}

/// `f(arange(n) * 0.37)` as float32, the reference script's `pattern`.
fn pattern(n: usize, f: fn(f64) -> f64) -> Vec<f32> {
    (0..n).map(|i| f(i as f64 * 0.37) as f32).collect()
}

fn reference_cnn() -> ModelSpec {
    ModelSpec::builder(&[5, 6, 2])
        .add_named(
            "conv",
            LayerKind::from(crate::model::layers::Conv2D {
                filters: 3,
                kernel_size: Pair([3, 3]),
                strides: Pair([2, 2]),
                padding: Padding::Same,
                dilation_rate: Pair([1, 1]),
                groups: 1,
                activation: Activation::Relu,
                use_bias: true,
            }),
        )
        .add_named("max", pool(true, 2, Some(1), Padding::Same))
        .add_named("avg", pool(false, 2, None, Padding::Same))
        .add_named(
            "bn",
            LayerKind::from(crate::model::layers::BatchNormalization {
                momentum: 0.99,
                epsilon: 1e-3,
                ..Default::default()
            }),
        )
        .add(LayerKind::from(crate::model::layers::Flatten {}))
        .add_named(
            "dense",
            LayerKind::from(crate::model::layers::Dense {
                units: 4,
                activation: Activation::Softmax,
                use_bias: true,
            }),
        )
        .build()
        .unwrap()
}

fn map_getter(
    map: HashMap<String, Vec<f32>>,
) -> impl Fn(&str, &[usize]) -> crate::Result<Vec<f32>> {
    move |name: &str, shape: &[usize]| {
        let v = map
            .get(name)
            .cloned()
            .ok_or_else(|| KilnError::Shape(format!("no {name}")))?;
        assert_eq!(v.len(), shape.iter().product::<usize>(), "{name}");
        Ok(v)
    }
}

#[test]
fn forward_pass_and_loss_equal_keras_with_the_same_weights() {
    let spec = reference_cnn();
    let map = HashMap::from([
        ("conv/kernel".to_string(), pattern(3 * 3 * 2 * 3, f64::sin)),
        (
            "conv/bias".into(),
            pattern(3, f64::cos).iter().map(|v| v * 0.1).collect(),
        ),
        ("bn/gamma".into(), vec![1.0, 1.5, 0.5]),
        ("bn/beta".into(), vec![0.1, -0.2, 0.3]),
        ("bn/moving_mean".into(), vec![0.2, 0.1, 0.0]),
        ("bn/moving_variance".into(), vec![0.5, 2.0, 1.0]),
        ("dense/kernel".into(), pattern(12 * 4, f64::cos)),
        (
            "dense/bias".into(),
            pattern(4, f64::sin).iter().map(|v| v * 0.1).collect(),
        ),
    ]);
    let device = Device::flex();
    let net = load_with(&spec, &device, &map_getter(map)).unwrap();
    let x = crate::batch::nhwc_to_nchw(&pattern(2 * 5 * 6 * 2, f64::cos), [2, 5, 6, 2]);
    let x = Act::Image(Tensor::from_data(TensorData::new(x, [2, 2, 5, 6]), &device));
    let fwd = net.forward(&spec, x, false);
    let keras = [
        0.34946576, 0.2531785, 0.20539801, 0.19195773, 0.393215, 0.2754754, 0.19184124, 0.13946828,
    ];
    let ours = fwd.output.clone().into_data().try_to_vec::<f32>().unwrap();
    for (a, b) in ours.iter().zip(keras) {
        assert!((a - b).abs() < 1e-5, "{ours:?} vs {keras:?}");
    }
    let labels = Labels::Sparse(Tensor::from_data(
        TensorData::new(vec![1i64, 3], [2]),
        &device,
    ));
    let loss = LossSpec {
        kind: LossKind::SparseCategoricalCrossentropy,
        from_logits: false,
    };
    let value = loss
        .compute(fwd.output, fwd.logits.into_iter().next().flatten(), &labels)
        .into_scalar::<f32>();
    assert!((value - 1.6717891693115234).abs() < 1e-5, "{value}");
}

fn loss_value(
    kind: LossKind,
    from_logits: bool,
    out: (Vec<f32>, [usize; 2]),
    labels: Labels,
) -> f32 {
    let device = Device::flex();
    let out = Tensor::<2>::from_data(TensorData::new(out.0, out.1), &device);
    LossSpec { kind, from_logits }
        .compute(out, None, &labels)
        .into_scalar::<f32>()
}

#[test]
fn losses_equal_keras() {
    let d = Device::flex();
    let sparse =
        |v: Vec<i64>| Labels::Sparse(Tensor::from_data(TensorData::new(v.clone(), [v.len()]), &d));
    let dense =
        |v: Vec<f32>, s: [usize; 2]| Labels::Dense(Tensor::from_data(TensorData::new(v, s), &d));
    // Hand check of the first: -(log softmax([2, -1, .5])[0] + log softmax([.1, .2, .3])[2]) / 2
    // = (0.24131 + 1.00194) / 2 = 0.62163.
    let cases = [
        (
            LossKind::SparseCategoricalCrossentropy,
            true,
            (vec![2.0, -1.0, 0.5, 0.1, 0.2, 0.3], [2, 3]),
            sparse(vec![0, 2]),
            0.6216270923614502,
        ),
        (
            LossKind::CategoricalCrossentropy,
            false,
            (vec![0.2, 0.7, 0.1, 0.3, 0.3, 0.4], [2, 3]),
            dense(vec![0., 1., 0., 0., 0., 1.], [2, 3]),
            0.636482834815979,
        ),
        (
            LossKind::BinaryCrossentropy,
            false,
            (vec![0.9, 0.2], [2, 1]),
            dense(vec![1.0, 0.0], [2, 1]),
            0.16425204277038574,
        ),
        (
            LossKind::BinaryCrossentropy,
            true,
            (vec![0.3, -1.2], [1, 2]),
            dense(vec![1.0, 0.0], [1, 2]),
            0.4088188409805298,
        ),
        (
            LossKind::MeanSquaredError,
            false,
            (vec![1.5, 1.0], [1, 2]),
            dense(vec![1.0, 2.0], [1, 2]),
            0.625,
        ),
    ];
    for (kind, logits, out, labels, keras) in cases {
        let v = loss_value(kind, logits, out, labels);
        assert!((v as f64 - keras).abs() < 1e-5, "{kind:?}: {v} vs {keras}");
    }
}

/// Loss of a small tanh network (smooth, so central differences are accurate).
fn gradient_model() -> ModelSpec {
    ModelSpec::builder(&[4, 5, 2])
        .add_named(
            "conv",
            LayerKind::from(crate::model::layers::Conv2D {
                filters: 3,
                kernel_size: Pair([3, 3]),
                strides: Pair([1, 2]),
                padding: Padding::Same,
                dilation_rate: Pair([1, 1]),
                groups: 1,
                activation: Activation::Tanh,
                use_bias: true,
            }),
        )
        .add(LayerKind::from(crate::model::layers::Flatten {}))
        .add_named(
            "dense",
            LayerKind::from(crate::model::layers::Dense {
                units: 2,
                activation: Activation::Tanh,
                use_bias: true,
            }),
        )
        .build()
        .unwrap()
}

fn mse(net: &Network, spec: &ModelSpec, device: &Device) -> Tensor<1> {
    let x = Tensor::<4>::from_data(
        TensorData::new(pattern(2 * 2 * 4 * 5, f64::cos), [2, 2, 4, 5]),
        device,
    );
    let y = Labels::Dense(Tensor::from_data(
        TensorData::new(vec![0.5f32, -0.25, 0.1, 0.3], [2, 2]),
        device,
    ));
    let out = net.forward(spec, Act::Image(x), true).output;
    LossSpec {
        kind: LossKind::MeanSquaredError,
        from_logits: false,
    }
    .compute(out, None, &y)
}

#[test]
fn dense_and_conv_gradients_match_finite_differences() {
    let spec = gradient_model();
    let device = Device::flex().autodiff();
    let net = Network::init(&spec, 7, &device);
    let grads = mse(&net, &spec, &device).backward();
    let conv_grad = net.layers[0]
        .conv_kernel
        .as_ref()
        .unwrap()
        .val()
        .grad(&grads)
        .unwrap();
    let [o, i, h, w] = conv_grad.dims();
    let conv_grad = super::weights::oihw_to_hwio(
        &conv_grad.into_data().try_to_vec::<f32>().unwrap(),
        [o, i, h, w],
    );
    let dense_grad = net.layers[2]
        .dense_kernel
        .as_ref()
        .unwrap()
        .val()
        .grad(&grads)
        .unwrap()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let bias_grad = net.layers[2]
        .bias
        .as_ref()
        .unwrap()
        .val()
        .grad(&grads)
        .unwrap()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();

    let plain = Device::flex();
    let base: HashMap<String, Vec<f32>> = keras_weights(&spec, &net)
        .into_iter()
        .map(|(n, _, v)| (n, v))
        .collect();
    let numeric = |name: &str, index: usize| -> f32 {
        let h = 1e-2f32;
        let at = |delta: f32| {
            let mut m = base.clone();
            m.get_mut(name).unwrap()[index] += delta;
            let net = load_with(&spec, &plain, &map_getter(m)).unwrap();
            mse(&net, &spec, &plain).into_scalar::<f32>() as f64
        };
        ((at(h) - at(-h)) / (2.0 * h as f64)) as f32
    };
    let checks: Vec<(&str, &[f32], usize)> = vec![
        ("conv/kernel", &conv_grad, 0),
        ("conv/kernel", &conv_grad, 17),
        ("conv/kernel", &conv_grad, 53),
        ("dense/kernel", &dense_grad, 3),
        ("dense/kernel", &dense_grad, 40),
        ("dense/bias", &bias_grad, 1),
    ];
    for (name, analytic, index) in checks {
        let n = numeric(name, index);
        let a = analytic[index];
        assert!(
            (a - n).abs() <= 2e-3 + 0.02 * n.abs(),
            "{name}[{index}]: autodiff {a} vs finite difference {n}"
        );
    }
    // The gradients are not trivially zero.
    assert!(conv_grad.iter().any(|g| g.abs() > 1e-4) && dense_grad.iter().any(|g| g.abs() > 1e-4));
}

#[test]
fn batch_normalization_moves_its_statistics_in_training_only() {
    let spec = ModelSpec::builder(&[3])
        .add_named(
            "bn",
            LayerKind::from(crate::model::layers::BatchNormalization {
                momentum: 0.9,
                epsilon: 1e-3,
                ..Default::default()
            }),
        )
        .build()
        .unwrap();
    let device = Device::flex();
    let net = Network::init(&spec, 0, &device);
    // Batch of 2: column means [2, 0, 5], biased variances [1, 4, 0].
    let x = Tensor::<2>::from_data(
        TensorData::new(vec![1.0f32, -2.0, 5.0, 3.0, 2.0, 5.0], [2, 3]),
        &device,
    );
    let fwd = net.forward(&spec, Act::Flat(x), true);
    // Normalized with batch statistics: (x - mean) / sqrt(var + eps).
    let out = fwd.output.into_data().try_to_vec::<f32>().unwrap();
    let expect = [-1.0 / 1.001f32.sqrt(), -2.0 / 4.001f32.sqrt(), 0.0];
    for (a, b) in out.iter().zip(expect) {
        assert!((a - b).abs() < 1e-5, "{out:?}");
    }
    let net = net.apply_updates(&spec, fwd.updates);
    let mean = net.layers[0]
        .moving_mean
        .as_ref()
        .unwrap()
        .val()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let var = net.layers[0]
        .moving_variance
        .as_ref()
        .unwrap()
        .val()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    // moving = 0.9 * moving + 0.1 * batch, from mean 0 and variance 1.
    for (a, b) in mean.iter().zip([0.2f32, 0.0, 0.5]) {
        assert!((a - b).abs() < 1e-6, "{mean:?}");
    }
    for (a, b) in var.iter().zip([1.0f32, 1.3, 0.9]) {
        assert!((a - b).abs() < 1e-6, "{var:?}");
    }
}

#[test]
fn dropout_zeroes_about_rate_and_rescales_in_training_only() {
    let spec = ModelSpec::builder(&[10_000])
        .add(LayerKind::from(crate::model::layers::Dropout {
            rate: 0.25,
        }))
        .build()
        .unwrap();
    let device = Device::flex();
    device.seed(3);
    let net = Network::init(&spec, 0, &device);
    let ones = || Act::Flat(Tensor::<2>::ones([1, 10_000], &device));
    let out = net
        .forward(&spec, ones(), true)
        .output
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let zeros = out.iter().filter(|&&v| v == 0.0).count() as f64 / 10_000.0;
    assert!((zeros - 0.25).abs() < 0.02, "{zeros}");
    assert!(
        out.iter()
            .all(|&v| v == 0.0 || (v - 4.0 / 3.0).abs() < 1e-6)
    );
    let out = net
        .forward(&spec, ones(), false)
        .output
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    assert!(out.iter().all(|&v| v == 1.0));
}
