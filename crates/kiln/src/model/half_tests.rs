//! Mixed precision computed in the 16-bit type for real (`crate::precision::computes_natively`,
//! the route GPUs take) against the emulated route (float32 arithmetic on rounded values), on
//! the CPU through [`with_native_compute`]: the same model and weights give the same outputs
//! and gradients within 16-bit tolerance, the layers that can compute in the 16-bit type hold
//! their outputs in it, and the model's output, the gradients and the master weights stay
//! float32.

use burn::prelude::*;
use burn::tensor::DType;

use super::{Act, ModelSpec, Network};
use crate::precision::{Precision, with_native_compute};

/// Every layer kind of the benchmark CNN and ResNet, plus a layer that never computes in 16
/// bits (Concatenate) and BatchNormalization, which computes in float32 under mixed policies.
const RESNET_LIKE: &str = r#"layers = [
      { type = "Input", shape = [8, 8, 3] },
      { type = "Conv2D", name = "c1", filters = 16, kernel_size = 3, padding = "same", activation = "relu" },
      { type = "BatchNormalization", name = "bn" },
      { type = "Activation", name = "r", activation = "relu" },
      { type = "MaxPooling2D", name = "pool" },
      { type = "Conv2D", name = "c2", filters = 16, kernel_size = 1, use_bias = false },
      { type = "Add", name = "add", inputs = ["pool", "c2"] },
      { type = "GlobalAveragePooling2D", name = "gap", inputs = ["add"] },
      { type = "Flatten", name = "flat", inputs = ["add"] },
      { type = "Concatenate", name = "cat", inputs = ["gap", "flat"] },
      { type = "Dense", name = "d1", units = 32, activation = "relu" },
      { type = "Dense", name = "out", units = 10 },
    ]"#;

/// The other layers that compute in 16 bits: average pooling, the merges, global max
/// pooling, Reshape, a tanh Activation (names keep the gradients' layers: c1, bn, out).
const MERGES: &str = r#"layers = [
      { type = "Input", shape = [6, 6, 4] },
      { type = "Conv2D", name = "c1", filters = 8, kernel_size = 3, padding = "same" },
      { type = "BatchNormalization", name = "bn" },
      { type = "AveragePooling2D", name = "avg", pool_size = 2, inputs = ["bn"] },
      { type = "MaxPooling2D", name = "max", pool_size = 2, inputs = ["bn"] },
      { type = "Maximum", name = "hi", inputs = ["avg", "max"] },
      { type = "Minimum", name = "lo", inputs = ["avg", "max"] },
      { type = "Subtract", name = "sub", inputs = ["hi", "lo"] },
      { type = "Multiply", name = "mul", inputs = ["sub", "avg"] },
      { type = "Average", name = "mean", inputs = ["mul", "max"] },
      { type = "Activation", name = "t", activation = "tanh" },
      { type = "GlobalMaxPooling2D", name = "gmp" },
      { type = "Reshape", name = "rs", target_shape = [2, 4] },
      { type = "Flatten", name = "flat" },
      { type = "Dense", name = "out", units = 5 },
    ]"#;

fn spec(layers: &str, precision: Precision) -> ModelSpec {
    ModelSpec::from_toml(&toml::from_str(layers).unwrap())
        .unwrap()
        .with_precision(precision)
}

fn dtype_of(x: &Act) -> DType {
    match x {
        Act::Flat(t) => t.dtype(),
        Act::Seq(t) => t.dtype(),
        Act::Image(t) => t.dtype(),
        Act::Volume(t) => t.dtype(),
    }
}

/// One training forward and backward: the output, each layer's output dtype, and the
/// gradients of `c1`'s kernel, `bn`'s gamma and `out`'s kernel (with their dtypes).
struct Pass {
    output: Vec<f32>,
    dtypes: Vec<(String, DType)>,
    grads: Vec<(Vec<f32>, DType)>,
}

fn pass(precision: Precision, native: bool) -> Pass {
    pass_of(RESNET_LIKE, [4, 3, 8, 8], precision, native)
}

fn pass_of(layers: &str, shape: [usize; 4], precision: Precision, native: bool) -> Pass {
    let device = Device::flex().autodiff();
    let spec = spec(layers, precision);
    let net = Network::init(&spec, 3, &device);
    // The same input for both routes (a fixed pattern in [-2, 2)).
    let count = shape.iter().product::<usize>();
    let values: Vec<f32> = (0..count)
        .map(|i| ((i * 37 % 101) as f32 / 25.25) - 2.0)
        .collect();
    let x = Tensor::<4>::from_data(TensorData::new(values, shape), &device);
    let mut dtypes = Vec::new();
    let fwd = with_native_compute(native, || {
        net.forward_graph(&spec, vec![Act::Image(x)], true, &mut |i, _, y| {
            dtypes.push((spec.layers()[i].name.clone(), dtype_of(y)));
        })
    });
    let output = fwd.output;
    let grads = (output.clone() * output.clone()).mean().backward();
    let layer = |name: &str| {
        let i = spec.layers().iter().position(|l| l.name == name).unwrap();
        &net.layers[i]
    };
    let values = |g: Tensor<1>| {
        (
            g.clone().into_data().try_to_vec::<f32>().unwrap(),
            g.dtype(),
        )
    };
    let grads = vec![
        values(
            layer("c1")
                .conv_kernel
                .as_ref()
                .unwrap()
                .val()
                .grad(&grads)
                .unwrap()
                .flatten(0, 3),
        ),
        values(
            layer("bn")
                .gamma
                .as_ref()
                .unwrap()
                .val()
                .grad(&grads)
                .unwrap(),
        ),
        values(
            layer("out")
                .dense_kernel
                .as_ref()
                .unwrap()
                .val()
                .grad(&grads)
                .unwrap()
                .flatten(0, 1),
        ),
    ];
    Pass {
        output: output.into_data().try_to_vec::<f32>().unwrap(),
        dtypes,
        grads,
    }
}

/// `a` and `b` agree within `tol` of the larger magnitude in `b`.
fn close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "{what}: all zero");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * scale,
            "{what}[{i}]: {x} against {y} (scale {scale})"
        );
    }
}

#[test]
fn float16_computed_for_real_matches_the_emulated_route() {
    let native = pass(Precision::MixedFloat16, true);
    let emulated = pass(Precision::MixedFloat16, false);
    // float16 keeps 11 significant bits (relative step 2^-11 = 4.9e-4); sums over up to 2,048
    // terms held in float16 on the native route, float32 on the emulated one.
    close(&native.output, &emulated.output, 1e-2, "output");
    for (k, ((g, dt), (e, edt))) in native.grads.iter().zip(&emulated.grads).enumerate() {
        assert_eq!(
            (*dt, *edt),
            (DType::F32, DType::F32),
            "gradient {k} reaches float32 masters"
        );
        close(g, e, 3e-2, &format!("gradient {k}"));
    }
}

#[test]
fn layers_that_can_hold_their_outputs_in_float16_and_the_rest_in_float32() {
    let native = pass(Precision::MixedFloat16, true);
    let held: Vec<(&str, DType)> = native
        .dtypes
        .iter()
        .map(|(n, d)| (n.as_str(), *d))
        .collect();
    // Every layer hands float16 on: BatchNormalization and Concatenate compute in float32
    // and cast their outputs, the others compute in float16 (the model's output is cast back
    // to float32 for the loss).
    assert_eq!(held.len(), 11, "{held:?}");
    for (name, dt) in &held {
        assert_eq!(*dt, DType::F16, "{name} in {held:?}");
    }
    // Emulated: float32 everywhere.
    let emulated = pass(Precision::MixedFloat16, false);
    assert!(
        emulated.dtypes.iter().all(|(_, d)| *d == DType::F32),
        "{:?}",
        emulated.dtypes
    );
}

#[test]
fn bfloat16_computed_for_real_matches_the_emulated_route() {
    let native = pass(Precision::MixedBFloat16, true);
    let emulated = pass(Precision::MixedBFloat16, false);
    assert!(
        native.dtypes.iter().all(|(_, d)| *d == DType::BF16),
        "{:?}",
        native.dtypes
    );
    // bfloat16 keeps 8 significant bits (relative step 2^-8 = 3.9e-3).
    close(&native.output, &emulated.output, 5e-2, "output");
    for (k, ((g, _), (e, _))) in native.grads.iter().zip(&emulated.grads).enumerate() {
        close(g, e, 1e-1, &format!("gradient {k}"));
    }
}

#[test]
fn float32_is_unchanged_by_the_native_route() {
    let native = pass(Precision::Float32, true);
    let plain = pass(Precision::Float32, false);
    assert_eq!(native.output, plain.output);
    assert!(native.dtypes.iter().all(|(_, d)| *d == DType::F32));
}

#[test]
fn pooling_merges_and_reshapes_compute_in_float16_as_emulated() {
    let native = pass_of(MERGES, [3, 4, 6, 6], Precision::MixedFloat16, true);
    let emulated = pass_of(MERGES, [3, 4, 6, 6], Precision::MixedFloat16, false);
    assert!(
        native.dtypes.iter().all(|(_, d)| *d == DType::F16),
        "{:?}",
        native.dtypes
    );
    close(&native.output, &emulated.output, 1e-2, "output");
    for (k, ((g, _), (e, _))) in native.grads.iter().zip(&emulated.grads).enumerate() {
        close(g, e, 3e-2, &format!("gradient {k}"));
    }
}

/// Averages sum before they divide: float16 values below 65504 can sum to Inf, so `Average`
/// and `AveragePooling2D` compute in float32 (found by an adversarial run: pixels of 0..255
/// through a Conv2D of 9s, then a 2x2 average, gave Inf in float16).
#[test]
fn averages_of_large_float16_values_stay_finite() {
    let layers = r#"layers = [
      { type = "Input", shape = [4, 4, 1] },
      { type = "Conv2D", name = "c1", filters = 2, kernel_size = 1, use_bias = false, kernel_initializer = { class_name = "Constant", value = 1.0 } },
      { type = "AveragePooling2D", name = "avg", pool_size = 2 },
      { type = "Average", name = "mean", inputs = ["avg", "avg"] },
      { type = "Flatten", name = "flat" },
    ]"#;
    let device = Device::flex();
    let spec = spec(layers, Precision::MixedFloat16);
    let net = Network::init(&spec, 3, &device);
    let x = Tensor::<4>::full([1, 1, 4, 4], 40000.0, &device);
    let fwd = with_native_compute(true, || {
        net.forward_graph(&spec, vec![Act::Image(x)], false, &mut |_, _, _| {})
    });
    let out = fwd.output.into_data().try_to_vec::<f32>().unwrap();
    assert_eq!(out, vec![40000.0; 8]);
}
