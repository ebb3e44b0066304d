//! The image preprocessing layers against Keras 3: forward values and input gradients of
//! `sum(output * r)` on the fixed inputs of `tests/reference/image_preprocessing_reference.py`
//! (its JSON, `tests/data/`), the random layers with degenerate factors that make their draw a
//! constant; and the properties of the random draws (identity at inference, reproducible from
//! the seed, one draw per example).

use std::collections::BTreeMap;

use burn::prelude::*;
use serde::Deserialize;

use super::keras_order::into_rows;
use super::shape_tests::{Values, assert_close, assert_errors, build, grad, input, to_vec};
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Weights};
use crate::model::params::LayerParams;

#[derive(Deserialize)]
struct Case {
    layer: toml::Table,
    training: bool,
    input: Values,
    output: Values,
    input_grad: Option<Vec<f32>>,
    params: usize,
}

#[derive(Deserialize)]
struct Adapted {
    input_shape: Vec<usize>,
    params: usize,
}

#[derive(Deserialize)]
struct Reference {
    cases: BTreeMap<String, Case>,
    adapted_normalization: Adapted,
}

fn reference() -> Reference {
    serde_json::from_str(include_str!(
        "../../../tests/data/image_preprocessing_reference.json"
    ))
    .unwrap()
}

/// Values this far apart agree (Keras' pixel values are up to 255).
fn assert_near(name: &str, what: &str, got: &[f32], want: &[f32]) {
    let scaled: Vec<f32> = got.iter().map(|v| v / 100.0).collect();
    let want: Vec<f32> = want.iter().map(|v| v / 100.0).collect();
    assert_close(name, what, &scaled, &want);
}

#[test]
fn image_preprocessing_layers_match_keras_values_and_gradients() {
    let reference = reference();
    let device = Device::flex().autodiff();
    let mut checked = 0;
    for (name, case) in &reference.cases {
        let class = case.layer["type"].as_str().unwrap();
        if crate::model::registry::lookup(class).is_none() {
            continue;
        }
        let layer = build(&case.layer);
        let shape = &case.input.shape[1..];
        let out_shape = layer.output_shape(&[shape]).unwrap();
        assert_eq!(out_shape, case.output.shape[1..], "{name}: shape");
        let specs = layer.weights(&[shape]);
        let params: usize = specs
            .iter()
            .map(|s| s.shape.iter().product::<usize>())
            .sum();
        assert_eq!(params, case.params, "{name}: parameters");
        let empty = LayerParams::empty();
        let (leaf, act) = input(&case.input, &device);
        let weights = Weights::new(specs, &empty);
        let out = layer.forward(vec![act], &weights, ForwardContext::new(case.training));
        let rows = into_rows(out);
        assert_near(name, "output", &to_vec(rows.clone()), &case.output.values);
        let [b, n] = rows.dims();
        let r: Vec<f32> = (0..b * n)
            .map(|i| (0.5 * i as f64 + 0.2).cos() as f32)
            .collect();
        let r = Tensor::<2>::from_data(TensorData::new(r, [b, n]), &device);
        let grads = (rows * r).sum().backward();
        if let Some(want) = &case.input_grad {
            assert_near(name, "input gradient", &grad(&leaf, &grads), want);
        }
        checked += 1;
    }
    assert_eq!(checked, 35);
}

#[test]
fn an_adapted_normalization_has_keras_non_trainable_weights() {
    let a = reference().adapted_normalization;
    let layer = build(&toml::from_str("type = \"Normalization\"\nadapt = true").unwrap());
    let specs = layer.weights(&[&a.input_shape]);
    let count: usize = specs
        .iter()
        .map(|s| s.shape.iter().product::<usize>())
        .sum();
    assert_eq!(count, a.params);
    assert!(specs.iter().all(|s| !s.trainable));
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["mean", "variance", "count"]);
    let given =
        build(&toml::from_str("type = \"Normalization\"\nmean = 1.0\nvariance = 2.0").unwrap());
    assert!(given.weights(&[&a.input_shape]).is_empty());
}

/// `toml`'s layer on the NCHW batch `x`, as NCHW values.
fn run(toml: &str, x: Tensor<4>, training: bool) -> Vec<f32> {
    let layer = build(&toml::from_str(toml).unwrap());
    let params = LayerParams::empty();
    let w = Weights::new(Vec::new(), &params);
    let out = layer.forward(vec![Act::Image(x)], &w, ForwardContext::new(training));
    to_vec(out.into_image())
}

/// `[batch, 2, 4, 5]` of copies of one image whose values all differ.
fn copies(batch: usize, device: &Device) -> Tensor<4> {
    let values: Vec<f32> = (0..40).map(|v| v as f32).collect();
    let one = Tensor::<4>::from_data(TensorData::new(values, [1, 2, 4, 5]), device);
    one.repeat_dim(0, batch)
}

const RANDOM: [&str; 4] = [
    "type = \"RandomFlip\"",
    "type = \"RandomCrop\"\nheight = 3\nwidth = 4",
    "type = \"RandomContrast\"\nfactor = 0.5",
    "type = \"RandomBrightness\"\nfactor = 0.5",
];

const AFFINE: [&str; 3] = [
    "type = \"RandomRotation\"\nfactor = 0.2",
    "type = \"RandomZoom\"\nheight_factor = 0.3",
    "type = \"RandomTranslation\"\nheight_factor = 0.3\nwidth_factor = 0.3",
];

/// The random layers that exist.
fn random_layers() -> Vec<&'static str> {
    RANDOM
        .into_iter()
        .chain(AFFINE)
        .filter(|t| {
            let class = t.split('"').nth(1).unwrap();
            crate::model::registry::lookup(class).is_some()
        })
        .collect()
}

#[test]
fn random_layers_are_the_identity_at_inference() {
    let device = Device::flex();
    for toml in random_layers() {
        if toml.contains("RandomCrop") {
            continue;
        }
        let x = copies(3, &device);
        assert_eq!(run(toml, x.clone(), false), to_vec(x), "{toml}");
    }
}

#[test]
fn random_layers_repeat_with_the_seed_and_draw_per_example() {
    let device = Device::flex();
    for toml in random_layers() {
        let x = copies(16, &device);
        device.seed(7);
        let a = run(toml, x.clone(), true);
        device.seed(7);
        let b = run(toml, x.clone(), true);
        assert_eq!(a, b, "{toml}: same seed");
        device.seed(8);
        assert_ne!(a, run(toml, x.clone(), true), "{toml}: another seed");
        if toml.contains("RandomCrop") {
            continue; // one place per batch, as Keras 3 draws it
        }
        let per = a.len() / 16;
        let distinct: std::collections::BTreeSet<Vec<u32>> = a
            .chunks(per)
            .map(|e| e.iter().map(|v| v.to_bits()).collect())
            .collect();
        assert!(distinct.len() > 1, "{toml}: one draw for the batch");
    }
}

#[test]
fn random_flip_flips_whole_images_about_half_the_time() {
    let device = Device::flex();
    let x = copies(64, &device);
    let one = to_vec(copies(1, &device));
    let flip = |axes: &[usize]| match axes {
        [a] => to_vec(copies(1, &device).flip([*a])),
        _ => to_vec(copies(1, &device).flip([2, 3])),
    };
    for (mode, axes) in [
        ("horizontal", vec![3]),
        ("vertical", vec![2]),
        ("horizontal_and_vertical", vec![2, 3]),
    ] {
        let toml = format!("type = \"RandomFlip\"\nmode = \"{mode}\"");
        device.seed(3);
        let out = run(&toml, x.clone(), true);
        let flipped = flip(&axes);
        let mut flips = 0;
        for e in out.chunks(40) {
            assert!(
                e == one || e == flipped,
                "{mode}: neither the image nor its flip"
            );
            flips += usize::from(e == flipped);
        }
        assert!((16..=48).contains(&flips), "{mode}: {flips} of 64 flipped");
    }
}

#[test]
fn random_crop_takes_one_window_per_batch_in_training() {
    let device = Device::flex();
    let x = copies(4, &device);
    let image = to_vec(copies(1, &device));
    let mut places = std::collections::BTreeSet::new();
    for seed in 0..20 {
        device.seed(seed);
        let out = run(
            "type = \"RandomCrop\"\nheight = 2\nwidth = 3",
            x.clone(),
            true,
        );
        let first = &out[..12];
        assert!(out.chunks(12).all(|e| e == first), "one place per batch");
        // Channel 0's top-left value is row * 5 + column of the window.
        let at = first[0] as usize;
        let (top, left) = (at / 5, at % 5);
        assert!(top <= 2 && left <= 2, "{top} {left}");
        for (c, row, col) in
            (0..2).flat_map(|c| (0..2).flat_map(move |r| (0..3).map(move |k| (c, r, k))))
        {
            let want = image[c * 20 + (top + row) * 5 + left + col];
            assert_eq!(first[c * 6 + row * 3 + col], want);
        }
        places.insert((top, left));
    }
    assert!(places.len() > 3, "{places:?}");
}

#[test]
fn bad_arguments_are_one_line_errors_naming_the_layer_and_key() {
    let img = r#"{type="Input",shape=[5,6,2]}"#;
    let cases = [
        (
            format!("{img},{{type=\"Normalization\"}}"),
            "needs `mean` and `variance`, or adapt = true",
        ),
        (
            format!("{img},{{type=\"Normalization\",mean=1.0}}"),
            "give both `mean` and `variance`",
        ),
        (
            format!("{img},{{type=\"Normalization\",mean=[1.0,2.0,3.0],variance=1.0}}"),
            "`mean` has 3 values; give one, or 2",
        ),
        (
            format!("{img},{{type=\"Normalization\",axis=4,adapt=true}}"),
            "`axis` 4 is not an axis",
        ),
        (
            format!("{img},{{type=\"Normalization\",mean=0.0,variance=-1.0}}"),
            "`variance` must hold finite non-negative",
        ),
        (
            format!("{img},{{type=\"Resizing\",height=0,width=3}}"),
            "(Resizing): `height` must be positive",
        ),
        (
            format!("{img},{{type=\"Resizing\",height=2,width=3,interpolation=\"bicubic\"}}"),
            "bicubic",
        ),
        (format!("{img},{{type=\"CenterCrop\",height=2}}"), "width"),
        (
            r#"{type="Input",shape=[6]},{type="RandomFlip"}"#.to_string(),
            "RandomFlip expects a 3-D input",
        ),
        (
            format!("{img},{{type=\"RandomCrop\",height=2,width=0}}"),
            "`width` must be positive",
        ),
        (
            format!("{img},{{type=\"RandomFlip\",mode=\"diagonal\"}}"),
            "diagonal",
        ),
    ];
    let cases: Vec<(&str, &str)> = cases.iter().map(|(l, w)| (l.as_str(), *w)).collect();
    assert_errors(&cases);
}
