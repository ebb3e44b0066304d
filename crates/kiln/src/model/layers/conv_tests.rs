//! The convolution and 1-D pooling layers against Keras 3: forward values and the gradients
//! of `sum(output * r)` with respect to the input and every weight, on the fixed inputs and
//! weights of `tests/reference/convolution_reference.py` (its JSON, `tests/data/`), each layer
//! built from its TOML arguments through the registry and its weights held as kiln holds them;
//! and their errors on bad arguments and shapes.

use burn::prelude::*;
use serde::Deserialize;

use super::keras_order::into_rows;
use super::shape_tests::{Values, assert_close, assert_errors, build, grad, input, to_vec};
use crate::model::layer::{ForwardContext, Layer, WeightSpec, Weights};
use crate::model::params::{Field, LayerParams, Slot, slots};
use crate::model::weights::oihw_to_hwio;

#[derive(Deserialize)]
struct Weight {
    name: String,
    shape: Vec<usize>,
    values: Vec<f32>,
}

#[derive(Deserialize)]
pub(super) struct Case {
    layer: toml::Table,
    input: Values,
    weights: Vec<Weight>,
    output: Values,
    input_grad: Vec<f32>,
    weight_grads: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
struct Reference {
    cases: std::collections::BTreeMap<String, Case>,
}

fn reference() -> Reference {
    serde_json::from_str(include_str!(
        "../../../tests/data/convolution_reference.json"
    ))
    .unwrap()
}

/// The cases of a reference JSON in this file's format (written by
/// `tests/reference/convolution_reference.py` and its kin).
pub(super) fn cases_of(json: &str) -> std::collections::BTreeMap<String, Case> {
    serde_json::from_str::<Reference>(json).unwrap().cases
}

/// The layer's parameters holding Keras' weight values, tracked by autodiff.
fn params(specs: &[WeightSpec], weights: &[Weight], device: &Device) -> LayerParams {
    let mut p = LayerParams::empty();
    for ((spec, slot), w) in specs.iter().zip(slots(specs)).zip(weights) {
        p.put(slot, spec, w.values.clone(), true, device);
    }
    p
}

/// The gradient of weight `spec` (held at `slot`) in Keras' layout.
fn weight_grad(
    p: &LayerParams,
    spec: &WeightSpec,
    slot: Slot,
    grads: &burn::tensor::Gradients,
) -> Vec<f32> {
    let g = |t: Tensor<1>| to_vec(t.grad(grads).expect("a weight gradient"));
    match slot {
        Slot::Field(Field::ConvKernel) => {
            let t = p.conv_kernel.as_ref().unwrap().val();
            let dims = t.dims();
            let oihw = to_vec(t.grad(grads).expect("a kernel gradient"));
            oihw_to_hwio(&oihw, dims)
        }
        Slot::Field(Field::Bias) => g(p.bias.as_ref().unwrap().val()),
        Slot::Field(Field::DenseKernel) => to_vec(
            p.dense_kernel
                .as_ref()
                .unwrap()
                .val()
                .grad(grads)
                .expect("a gradient"),
        ),
        Slot::Field(Field::Gamma) => g(p.gamma.as_ref().unwrap().val()),
        Slot::Field(Field::Beta) => g(p.beta.as_ref().unwrap().val()),
        Slot::Vector(v) => g(p.vectors[v].val()),
        other => panic!("{}: unexpected storage {other:?}", spec.name),
    }
}

#[test]
fn convolutions_and_1d_pooling_match_keras_values_and_gradients() {
    let cases = reference().cases;
    assert_eq!(cases.len(), 27);
    check_cases(&cases);
}

/// Each case's output shape, weights, forward values (in training mode) and the gradients of
/// the input and of every trainable weight against Keras'.
pub(super) fn check_cases(cases: &std::collections::BTreeMap<String, Case>) {
    let device = Device::flex().autodiff();
    for (name, case) in cases {
        let layer = build(&case.layer);
        let shape = [&case.input.shape[1..]];
        let out_shape = layer.output_shape(&shape).unwrap();
        assert_eq!(out_shape, case.output.shape[1..], "{name}: output shape");
        let specs = layer.weights(&shape);
        let declared: Vec<_> = specs.iter().map(|s| (&s.name, &s.shape)).collect();
        let keras: Vec<_> = case.weights.iter().map(|w| (&w.name, &w.shape)).collect();
        assert_eq!(declared, keras, "{name}: weights");
        let p = params(&specs, &case.weights, &device);
        let (leaf, x) = input(&case.input, &device);
        let weights = Weights::new(specs.clone(), &p);
        let out = layer.forward(vec![x], &weights, ForwardContext::new(true));
        let rows = into_rows(out);
        assert_close(name, "output", &to_vec(rows.clone()), &case.output.values);
        let [n, m] = rows.dims();
        let r: Vec<f32> = (0..n * m)
            .map(|i| (0.5 * i as f64 + 0.2).cos() as f32)
            .collect();
        let r = Tensor::<2>::from_data(TensorData::new(r, [n, m]), &device);
        let grads = (rows * r).sum().backward();
        assert_close(
            name,
            "input gradient",
            &grad(&leaf, &grads),
            &case.input_grad,
        );
        for ((spec, slot), want) in specs.iter().zip(slots(&specs)).zip(&case.weight_grads) {
            let got = weight_grad(&p, spec, slot, &grads);
            assert_close(name, &format!("{} gradient", spec.name), &got, want);
        }
    }
}

/// Layer `args` (a TOML inline table without `type`) of class `class` on Keras input `shape`.
fn shape_of(class: &str, args: &str, shape: &[usize]) -> Result<Vec<usize>, String> {
    let table: toml::Table =
        toml::from_str(&format!("type = \"{class}\"\n{}", args.replace(", ", "\n"))).unwrap();
    build(&table).output_shape(&[shape])
}

#[test]
fn output_shapes_follow_keras_formulas() {
    let cases: &[(&str, &str, &[usize], &[usize])] = &[
        ("Conv1D", "filters = 4, kernel_size = 3", &[10, 2], &[8, 4]),
        (
            "Conv1D",
            "filters = 4, kernel_size = 3, padding = \"same\", strides = 3",
            &[10, 2],
            &[4, 4],
        ),
        (
            "Conv1D",
            "filters = 4, kernel_size = 3, padding = \"causal\", dilation_rate = 4",
            &[10, 2],
            &[10, 4],
        ),
        (
            "Conv1D",
            "filters = 4, kernel_size = 3, dilation_rate = 4",
            &[10, 2],
            &[2, 4],
        ),
        ("MaxPooling1D", "padding = \"valid\"", &[9, 3], &[4, 3]),
        (
            "AveragePooling1D",
            "pool_size = 3, strides = 2, padding = \"same\"",
            &[9, 3],
            &[5, 3],
        ),
        (
            "Conv2D",
            "filters = 6, kernel_size = 3, dilation_rate = 2, groups = 3",
            &[9, 8, 3],
            &[5, 4, 6],
        ),
        (
            "Conv2DTranspose",
            "filters = 5, kernel_size = 3, strides = 2",
            &[4, 5, 3],
            &[9, 11, 5],
        ),
        (
            "Conv2DTranspose",
            "filters = 5, kernel_size = 3, strides = 2, padding = \"same\"",
            &[4, 5, 3],
            &[8, 10, 5],
        ),
        (
            "Conv2DTranspose",
            "filters = 5, kernel_size = 2, strides = 4",
            &[4, 5, 3],
            &[16, 20, 5],
        ),
        (
            "Conv1DTranspose",
            "filters = 2, kernel_size = 5, strides = 2, padding = \"same\", output_padding = 1",
            &[4, 3],
            &[8, 2],
        ),
        (
            "DepthwiseConv2D",
            "kernel_size = 3, depth_multiplier = 3",
            &[5, 6, 2],
            &[3, 4, 6],
        ),
        (
            "SeparableConv2D",
            "filters = 7, kernel_size = 3, strides = 2, padding = \"same\"",
            &[5, 6, 2],
            &[3, 3, 7],
        ),
    ];
    for (class, args, input, want) in cases {
        let got = shape_of(class, args, input).unwrap();
        assert_eq!(got, *want, "{class}({args}) on {input:?}");
    }
}

/// A model config reads Conv1D's `causal` padding (other layers refuse it, naming the key).
#[test]
fn causal_conv1d_reads_from_a_model_config() {
    let text = r#"layers = [{ type = "Input", shape = [6, 2] }, { type = "Conv1D", filters = 3, kernel_size = 3, padding = "causal", dilation_rate = 2 }]"#;
    let spec = crate::model::ModelSpec::from_toml(&toml::from_str(text).unwrap()).unwrap();
    assert_eq!(spec.output_shape().to_vec(), vec![6, 3]);
}

#[test]
fn conv2d_without_dilation_and_groups_writes_its_old_config_and_weights() {
    let conv = super::Conv2D::new(8, [3, 3]);
    let config = conv.config();
    assert!(!config.contains_key("dilation_rate") && !config.contains_key("groups"));
    let specs = conv.weights(&[&[5, 5, 4]]);
    assert_eq!(specs[0].shape, [3, 3, 4, 8]);
    assert_eq!(
        specs[0].storage,
        crate::model::params::Storage::Field(Field::ConvKernel)
    );
    let grouped = shape_of(
        "Conv2D",
        "filters = 8, kernel_size = 3, groups = 2",
        &[5, 5, 4],
    );
    assert_eq!(grouped.unwrap(), [3, 3, 8]);
    for alias in [
        "Convolution1D",
        "Convolution1DTranspose",
        "Convolution2DTranspose",
        "SeparableConvolution2D",
        "MaxPool1D",
        "AvgPool1D",
    ] {
        assert!(crate::model::registry::lookup(alias).is_some(), "{alias}");
    }
}

#[test]
fn bad_convolution_arguments_and_shapes_are_one_line_errors() {
    let cases = [
        (
            r#"{type="Input",shape=[8,4]},{type="Conv1D",filters=6,kernel_size=3,groups=4}"#,
            "model.layers[1] (Conv1D): `filters` (6) must be a multiple of `groups` (4)",
        ),
        (
            r#"{type="Input",shape=[8,3]},{type="Conv1D",filters=4,kernel_size=3,groups=2}"#,
            "Conv1D splits its input's 3 channels into `groups` = 2",
        ),
        (
            r#"{type="Input",shape=[8,3]},{type="Conv1D",filters=4,kernel_size=0}"#,
            "`kernel_size` must be positive, got 0",
        ),
        // Sizes so large that the shape arithmetic would wrap around (found by fuzzing: a
        // wrong output shape, a crash, a hang on an empty output).
        (
            r#"{type="Input",shape=[28,28,1]},{type="Conv2D",filters=2,kernel_size=3,dilation_rate=9223372036854775807,padding="same"}"#,
            "model.layers[1].dilation_rate: Conv2D: 9223372036854775807 is too large; a size, stride or padding is at most 2147483648 (2^31)",
        ),
        (
            r#"{type="Input",shape=[28,28,1]},{type="ZeroPadding2D",padding=[[1,2],[3,9223372036854775807]]}"#,
            "model.layers[1].padding: ZeroPadding2D: 9223372036854775807 is too large",
        ),
        (
            r#"{type="Input",shape=[28,28,1]},{type="UpSampling2D",size=4611686018427387904}"#,
            "model.layers[1].size: UpSampling2D: 4611686018427387904 is too large",
        ),
        (
            r#"{type="Input",shape=[28,28,1]},{type="Conv2DTranspose",filters=2,kernel_size=3,strides=[1,2147483649]}"#,
            "model.layers[1].strides: Conv2DTranspose: 2147483649 is too large",
        ),
        (
            r#"{type="Input",shape=[8,3]},{type="Conv1D",filters=4,kernel_size=3,strides=2,dilation_rate=2}"#,
            "`strides` 2 > 1 cannot be combined with `dilation_rate` 2 > 1 (as in Keras)",
        ),
        (
            r#"{type="Input",shape=[4,3]},{type="Conv1D",filters=4,kernel_size=3,dilation_rate=2}"#,
            "window 5 (kernel 3 dilated) is larger than the input (4) with padding \"valid\"",
        ),
        (
            r#"{type="Input",shape=[4,4,3]},{type="Conv2D",filters=4,kernel_size=3,padding="causal"}"#,
            "model.layers[1].padding",
        ),
        (
            r#"{type="Input",shape=[4,4,3]},{type="Conv2D",filters=4,kernel_size=3,padding=3}"#,
            "model.layers[1].padding: Conv2D: expected \"valid\" or \"same\", got 3",
        ),
        (
            r#"{type="Input",shape=[4,3]},{type="Conv1D",filters=4,kernel_size=3,padding="full"}"#,
            "model.layers[1].padding: \"full\" is not allowed; allowed: valid, same, causal",
        ),
        (
            r#"{type="Input",shape=[8,8,3]},{type="Conv1D",filters=4,kernel_size=3}"#,
            "Conv1D expects a 2-D input (steps, features), got shape (None, 8, 8, 3)",
        ),
        (
            r#"{type="Input",shape=[8,3]},{type="Conv2DTranspose",filters=4,kernel_size=3}"#,
            "Conv2DTranspose expects a 3-D input (height, width, channels)",
        ),
        (
            r#"{type="Input",shape=[8,8,3]},{type="Conv2DTranspose",filters=4,kernel_size=3,strides=2,output_padding=2}"#,
            "`output_padding` 2 must be smaller than its stride 2",
        ),
        (
            r#"{type="Input",shape=[8,3]},{type="Conv1DTranspose",filters=0,kernel_size=3}"#,
            "model.layers[1] (Conv1DTranspose): `filters` must be positive, got 0",
        ),
        (
            r#"{type="Input",shape=[8,8,3]},{type="DepthwiseConv2D",kernel_size=3,depth_multiplier=0}"#,
            "`depth_multiplier` must be positive, got 0",
        ),
        (
            r#"{type="Input",shape=[8,8,3]},{type="SeparableConv2D",filters=4,kernel_size=3,filter=2}"#,
            "model.layers[1]",
        ),
        (
            r#"{type="Input",shape=[8,3]},{type="MaxPooling1D",pool_size=0}"#,
            "`pool_size` must be positive, got 0",
        ),
        (
            r#"{type="Input",shape=[3,2]},{type="AveragePooling1D",pool_size=4}"#,
            "window 4 is larger than the input (3)",
        ),
    ];
    assert_errors(&cases);
}

/// Layers that copy their input into a zero-padded tensor count that copy as their largest
/// tensor (so `kiln estimate` and the CPU memory check see a window far wider than its input):
/// average pooling with `same` padding and Conv1D's `causal` padding; the max pooling, which
/// pads nothing, keeps the default.
#[test]
fn padded_copies_count_in_the_largest_tensor() {
    use super::{AveragePooling1D, AveragePooling2D, Conv1D, MaxPooling2D};
    use crate::model::args::{Padding, Pair};
    let image: &[usize] = &[28, 28, 3];
    let avg = AveragePooling2D {
        pool_size: Pair([65536, 65536]),
        strides: Some(Pair([1, 1])),
        padding: Padding::Same,
    };
    let out = avg.output_shape(&[image]).unwrap();
    assert_eq!(out, vec![28, 28, 3]);
    // same: out 28, total padding 27 + 65536 - 28 = 65535 per axis.
    assert_eq!(avg.largest_tensor(&[image], &out), 65563.0 * 65563.0 * 3.0);
    let max = MaxPooling2D {
        pool_size: Pair([65536, 65536]),
        strides: Some(Pair([1, 1])),
        padding: Padding::Same,
    };
    assert_eq!(max.largest_tensor(&[image], &out), 28.0 * 28.0 * 3.0);
    // An ordinary window keeps the default: 2x2 same on 28x28 pads nothing.
    let small = AveragePooling2D {
        pool_size: Pair([2, 2]),
        strides: None,
        padding: Padding::Same,
    };
    let out = small.output_shape(&[image]).unwrap();
    assert_eq!(small.largest_tensor(&[image], &out), 28.0 * 28.0 * 3.0);
    let seq: &[usize] = &[28, 4];
    let avg1: AveragePooling1D =
        toml::from_str("pool_size = 1000\nstrides = 1\npadding = \"same\"").unwrap();
    let out = avg1.output_shape(&[seq]).unwrap();
    assert_eq!(avg1.largest_tensor(&[seq], &out), (28.0 + 999.0) * 4.0);
    let causal: Conv1D =
        toml::from_str("filters = 2\nkernel_size = 2\ndilation_rate = 65536\npadding = \"causal\"")
            .unwrap();
    let out = causal.output_shape(&[seq]).unwrap();
    assert_eq!(causal.largest_tensor(&[seq], &out), (28.0 + 65536.0) * 4.0);
}

/// Keras' 1-D layers take their window arguments as an integer or a 1-tuple
/// (`MaxPooling1D(pool_size=(28,))`, TOML `[28]`); both read the same, other lengths are
/// refused with the accepted forms.
#[test]
fn one_d_window_arguments_take_an_integer_or_a_one_tuple() {
    let cases = [
        ("MaxPooling1D", "pool_size = [28]", "pool_size = 28"),
        (
            "AveragePooling1D",
            "pool_size = [3], strides = [2]",
            "pool_size = 3, strides = 2",
        ),
        (
            "Conv1D",
            "filters = 4, kernel_size = [3], strides = [1], dilation_rate = [2]",
            "filters = 4, kernel_size = 3, strides = 1, dilation_rate = 2",
        ),
    ];
    for (class, tuple, int) in cases {
        let a = shape_of(class, tuple, &[28, 2]).unwrap();
        let b = shape_of(class, int, &[28, 2]).unwrap();
        assert_eq!(a, b, "{class}({tuple})");
    }
    assert_eq!(
        shape_of("MaxPooling1D", "pool_size = [28]", &[28, 2]).unwrap(),
        [1, 2]
    );
    // Keras lowercases `padding`.
    let same = shape_of(
        "Conv1D",
        "filters = 4, kernel_size = 3, padding = \"SAME\"",
        &[9, 2],
    );
    assert_eq!(same.unwrap(), [9, 4]);
    let text = |args: &str| {
        format!(
            r#"layers = [{{ type = "Input", shape = [8, 2] }}, {{ type = "MaxPooling1D", {args} }}]"#
        )
    };
    for bad in ["pool_size = [2, 2]", "pool_size = []", "strides = [\"2\"]"] {
        let e = crate::model::ModelSpec::from_toml(&toml::from_str(&text(bad)).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("a positive integer or a 1-tuple"), "{bad}: {e}");
    }
}
