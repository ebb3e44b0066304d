//! The weightless shape and merge layers against Keras 3: forward values and the gradients of
//! `sum(output * r)` with respect to every input, on the fixed inputs of
//! `tests/reference/shape_layers_reference.py` (its JSON, `tests/data/`), each layer built from
//! its TOML arguments through the registry; and their errors on bad arguments and shapes.

use burn::prelude::*;
use serde::Deserialize;

use super::keras_order::into_rows;
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, Weights};
use crate::model::params::LayerParams;
use crate::model::{ModelSpec, registry};

#[derive(Deserialize)]
pub(super) struct Values {
    pub(super) shape: Vec<usize>,
    pub(super) values: Vec<f32>,
}

#[derive(Deserialize)]
struct Case {
    layer: toml::Table,
    inputs: Vec<Values>,
    output: Values,
    grads: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
struct Reference {
    cases: std::collections::BTreeMap<String, Case>,
}

fn reference() -> Reference {
    serde_json::from_str(include_str!(
        "../../../tests/data/shape_layers_reference.json"
    ))
    .unwrap()
}

/// The layer of `args` (`type` and its arguments), through the registry as TOML builds it.
pub(super) fn build(args: &toml::Table) -> std::sync::Arc<dyn Layer> {
    let mut table = args.clone();
    let class = table.remove("type").unwrap();
    let reg = registry::lookup(class.as_str().unwrap()).unwrap();
    (reg.build)(table).unwrap()
}

/// An input tracked by autodiff: the leaf in Keras' layout (images NHWC) and the batch kiln
/// runs (images NCHW).
pub(super) fn input(v: &Values, device: &Device) -> (Act, Act) {
    let data = |shape: &[usize]| TensorData::new(v.values.clone(), shape.to_vec());
    match v.shape.len() {
        2 => {
            let t = Tensor::<2>::from_data(data(&v.shape), device).require_grad();
            (Act::Flat(t.clone()), Act::Flat(t))
        }
        3 => {
            let t = Tensor::<3>::from_data(data(&v.shape), device).require_grad();
            (Act::Seq(t.clone()), Act::Seq(t))
        }
        4 => {
            let t = Tensor::<4>::from_data(data(&v.shape), device).require_grad();
            (Act::Image(t.clone()), Act::from_keras_image(t))
        }
        _ => {
            let t = Tensor::<5>::from_data(data(&v.shape), device).require_grad();
            (Act::Volume(t.clone()), Act::from_keras_volume(t))
        }
    }
}

pub(super) fn to_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// The gradient of a leaf made by [`input`], in Keras' layout.
pub(super) fn grad(leaf: &Act, grads: &burn::tensor::Gradients) -> Vec<f32> {
    let missing = "no gradient for an input";
    match leaf {
        Act::Flat(t) => to_vec(t.grad(grads).expect(missing)),
        Act::Seq(t) => to_vec(t.grad(grads).expect(missing)),
        Act::Image(t) => to_vec(t.grad(grads).expect(missing)),
        Act::Volume(t) => to_vec(t.grad(grads).expect(missing)),
    }
}

pub(super) fn assert_close(name: &str, what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{name} {what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 + 1e-5 * w.abs(),
            "{name} {what}[{i}]: kiln {g}, Keras {w}"
        );
    }
}

#[test]
fn shape_and_merge_layers_match_keras_values_and_gradients() {
    let device = Device::flex().autodiff();
    let cases = reference().cases;
    assert_eq!(cases.len(), 36);
    for (name, case) in &cases {
        let layer = build(&case.layer);
        let shapes: Vec<&[usize]> = case.inputs.iter().map(|v| &v.shape[1..]).collect();
        let shape = layer.output_shape(&shapes).unwrap();
        assert_eq!(shape, case.output.shape[1..], "{name}: output shape");
        let (leaves, acts): (Vec<Act>, Vec<Act>) =
            case.inputs.iter().map(|v| input(v, &device)).unzip();
        let params = LayerParams::empty();
        let weights = Weights::new(Vec::new(), &params);
        let out = layer.forward(acts, &weights, ForwardContext::new(true));
        let rows = into_rows(out);
        assert_close(name, "output", &to_vec(rows.clone()), &case.output.values);
        let n = rows.dims()[1];
        let r: Vec<f32> = (0..rows.dims()[0] * n)
            .map(|i| (0.5 * i as f64 + 0.2).cos() as f32)
            .collect();
        let r = Tensor::<2>::from_data(TensorData::new(r, [rows.dims()[0], n]), &device);
        let grads = (rows * r).sum().backward();
        for (k, (leaf, want)) in leaves.iter().zip(&case.grads).enumerate() {
            assert_close(name, &format!("gradient {k}"), &grad(leaf, &grads), want);
        }
    }
}

/// The error of building `layers` (a TOML array's items), as one line.
pub(super) fn error(layers: &str) -> String {
    let table: toml::Table = toml::from_str(&format!("layers = [{layers}]")).unwrap();
    let e = ModelSpec::from_toml(&table).unwrap_err().to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

#[test]
fn bad_arguments_and_shapes_are_one_line_errors_naming_the_layer_and_key() {
    let cases = [
        (
            r#"{type="Input",shape=[12]},{type="Reshape",target_shape=[-1,-1]}"#,
            "model.layers[1] (Reshape): `target_shape` [-1, -1] has more than one -1; only one axis can be inferred",
        ),
        (
            r#"{type="Input",shape=[12]},{type="Reshape",target_shape=[5,3]}"#,
            "model.layers[1] (Reshape): `target_shape` [5, 3] holds 15 values per example, the \
             input holds 12; make the product 12, or write -1 for one axis to infer it (input \
             shape (None, 12))",
        ),
        (
            r#"{type="Input",shape=[12]},{type="Reshape",target_shape=[-1,5]}"#,
            "is not a multiple of 5",
        ),
        (
            r#"{type="Input",shape=[12]},{type="Reshape",target_shape=[1,1,3,4]}"#,
            "`target_shape` [1, 1, 3, 4] has 4 axes; kiln's layers take 1 to 3",
        ),
        (
            r#"{type="Input",shape=[12]},{type="Reshape",target_shape=[0,12]}"#,
            "`target_shape` [0, 12] has the axis 0",
        ),
        (
            r#"{type="Input",shape=[3,4]},{type="Permute",dims=[1,1]}"#,
            "model.layers[1] (Permute): `dims` [1, 1] is not a permutation of the axes 1 to 2",
        ),
        (
            r#"{type="Input",shape=[3,4]},{type="Permute",dims=[0,1]}"#,
            "`dims` [0, 1] is not a permutation",
        ),
        (
            r#"{type="Input",shape=[2,3,4]},{type="Permute",dims=[2,1]}"#,
            "model.layers[1] (Permute): `dims` [2, 1] permutes 2 axes, the input (None, 2, 3, 4) \
             has 3",
        ),
        (
            r#"{type="Input",shape=[3],name="a"},{type="Subtract",inputs=["a","a","a"]}"#,
            "model.layers[1].inputs: Subtract takes 2 input(s), got 3",
        ),
        (
            r#"{type="Input",shape=[3],name="a"},{type="Dense",units=4,name="d"},{type="Multiply",inputs=["a","d"]}"#,
            "model.layers[2] (Multiply): Multiply needs inputs of one shape, got (None, 3) and \
             (None, 4)",
        ),
        (
            r#"{type="Input",shape=[3,4]},{type="RepeatVector",n=2}"#,
            "RepeatVector expects a 1-D input (features,), got shape (None, 3, 4)",
        ),
        (
            r#"{type="Input",shape=[4]},{type="RepeatVector",n=0}"#,
            "`n` must be positive",
        ),
        (
            r#"{type="Input",shape=[4,4,1]},{type="UpSampling2D",interpolation="bilinear"}"#,
            "`interpolation` \"bilinear\" is not supported yet; use \"nearest\"",
        ),
        (
            r#"{type="Input",shape=[4,4,1]},{type="UpSampling2D",interpolation="linear"}"#,
            "`interpolation` \"linear\" is not one of Keras'",
        ),
        (
            r#"{type="Input",shape=[4,4,1]},{type="UpSampling2D",size=[2,0]}"#,
            "`size` must be positive",
        ),
        (
            r#"{type="Input",shape=[4,5,1]},{type="Cropping2D",cropping=[[1,0],[2,3]]}"#,
            "`cropping` [[1, 0], [2, 3]] removes all rows or columns of the input (None, 4, 5, 1)",
        ),
        (
            r#"{type="Input",shape=[4,5,1]},{type="GlobalMaxPooling1D"}"#,
            "GlobalMaxPooling1D expects a 2-D input (steps, features)",
        ),
        (
            r#"{type="Input",shape=[4,5]},{type="GlobalMaxPooling2D",keepdims=1}"#,
            "model.layers[1]",
        ),
        (
            r#"{type="Input",shape=[4]},{type="ZeroPadding1D"}"#,
            "ZeroPadding1D expects a 2-D input (steps, features), got shape (None, 4)",
        ),
    ];
    assert_errors(&cases);
}

/// Each `(layers, want)`: building `layers` fails with a one-line error containing `want`.
pub(super) fn assert_errors(cases: &[(&str, &str)]) {
    let wrong: Vec<String> = cases
        .iter()
        .map(|(layers, want)| (layers, want, error(layers)))
        .filter(|(_, want, e)| !e.contains(*want))
        .map(|(layers, want, e)| format!("{layers}:\n  got  {e}\n  want {want}"))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Keras' aliases of the new global pooling layers, and `keepdims` written back to TOML.
#[test]
fn aliases_and_configs_round_trip() {
    for alias in [
        "GlobalAvgPool1D",
        "GlobalMaxPool1D",
        "GlobalMaxPool2D",
        "GlobalAvgPool2D",
    ] {
        assert!(registry::lookup(alias).is_some(), "{alias}");
    }
    let mut args = toml::Table::new();
    args.insert("type".into(), "GlobalMaxPooling2D".into());
    args.insert("keepdims".into(), true.into());
    let layer = build(&args);
    assert_eq!(
        layer.config().get("keepdims"),
        Some(&toml::Value::from(true))
    );
    assert_eq!(layer.output_shape(&[&[3, 4, 5]]).unwrap(), [1, 1, 5]);
}
