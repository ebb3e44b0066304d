//! The volume layers against Keras 3 (Conv3D, MaxPooling3D, AveragePooling3D, the 3-D global
//! poolings, and Flatten, Dense and BatchNormalization on volumes): forward values and the
//! gradients of the input and every trainable weight, on the fixed inputs of
//! `tests/reference/conv3d_reference.py` (checked as `conv_tests.rs` checks its own); output
//! shapes; and the one-line errors on bad arguments, shapes and volumes where a layer takes
//! none.

use super::conv_tests::{cases_of, check_cases};
use super::shape_tests::{assert_errors, build};
use crate::model::layer::Layer;

#[test]
fn volume_layers_match_keras_values_and_gradients() {
    let cases = cases_of(include_str!("../../../tests/data/conv3d_reference.json"));
    assert_eq!(cases.len(), 15);
    check_cases(&cases);
}

/// Layer `args` (TOML, without `type`) of class `class` on Keras input `shape`.
fn shape_of(class: &str, args: &str, shape: &[usize]) -> Result<Vec<usize>, String> {
    let table: toml::Table =
        toml::from_str(&format!("type = \"{class}\"\n{}", args.replace(", ", "\n"))).unwrap();
    build(&table).output_shape(&[shape])
}

#[test]
fn volume_output_shapes_follow_keras_formulas() {
    let cases: &[(&str, &str, &[usize], &[usize])] = &[
        // keras.io's 3D CT-scan classifier: (128, 128, 64, 1) through its first block.
        ("Conv3D", "filters = 64, kernel_size = 3, activation = \"relu\"", &[128, 128, 64, 1], &[126, 126, 62, 64]),
        ("MaxPooling3D", "pool_size = 2", &[126, 126, 62, 64], &[63, 63, 31, 64]),
        ("Conv3D", "filters = 4, kernel_size = [3, 1, 2], strides = 2, padding = \"same\"", &[7, 4, 5, 3], &[4, 2, 3, 4]),
        ("Conv3D", "filters = 4, kernel_size = 3, dilation_rate = [1, 2, 3]", &[5, 6, 7, 2], &[3, 2, 1, 4]),
        ("AveragePooling3D", "pool_size = 3, strides = 2, padding = \"same\"", &[5, 4, 3, 2], &[3, 2, 2, 2]),
        ("MaxPool3D", "pool_size = [1, 2, 2]", &[3, 4, 5, 2], &[3, 2, 2, 2]),
        ("GlobalAvgPool3D", "keepdims = true", &[3, 4, 5, 2], &[1, 1, 1, 2]),
        ("GlobalMaxPooling3D", "", &[3, 4, 5, 2], &[2]),
        ("Flatten", "", &[3, 4, 5, 2], &[120]),
        ("Dense", "units = 7", &[3, 4, 5, 2], &[3, 4, 5, 7]),
        ("BatchNormalization", "axis = 4", &[3, 4, 5, 2], &[3, 4, 5, 2]),
        ("Dropout", "rate = 0.3", &[3, 4, 5, 2], &[3, 4, 5, 2]),
    ];
    for (class, args, input, want) in cases {
        let got = shape_of(class, args, input).unwrap();
        assert_eq!(got, *want, "{class}({args}) on {input:?}");
    }
}

#[test]
fn conv3d_weights_config_and_aliases() {
    let conv = super::Conv3D::new(8, [3, 2, 1]);
    let config = conv.config();
    assert!(!config.contains_key("dilation_rate") && !config.contains_key("groups"));
    assert_eq!(config["kernel_size"], toml::Value::from(vec![3, 2, 1]));
    let specs = conv.weights(&[&[5, 5, 5, 4]]);
    let shapes: Vec<_> = specs.iter().map(|s| (s.name.as_str(), s.shape.clone())).collect();
    assert_eq!(shapes, [("kernel", vec![3, 2, 1, 4, 8]), ("bias", vec![8])]);
    for alias in ["Convolution3D", "MaxPool3D", "AvgPool3D", "GlobalAvgPool3D", "GlobalMaxPool3D"] {
        assert!(crate::model::registry::lookup(alias).is_some(), "{alias}");
    }
}

#[test]
fn bad_volume_arguments_and_shapes_are_one_line_errors() {
    let cases = [
        (
            r#"{type="Input",shape=[8,8,3]},{type="Conv3D",filters=4,kernel_size=3}"#,
            "model.layers[1] (Conv3D): Conv3D expects a 4-D input (depth, height, width, channels), got shape (None, 8, 8, 3)",
        ),
        (
            r#"{type="Input",shape=[4,8,8,3]},{type="Conv3D",filters=4,kernel_size=5}"#,
            "model.layers[1] (Conv3D): window 5 is larger than the input (4) with padding \"valid\"",
        ),
        (
            r#"{type="Input",shape=[4,8,8,3]},{type="Conv3D",filters=4,kernel_size=2,dilation_rate=[3,1,1]}"#,
            "window 4 (kernel 2 dilated) is larger than the input (4)",
        ),
        (
            r#"{type="Input",shape=[4,8,8,3]},{type="Conv3D",filters=0,kernel_size=3}"#,
            "model.layers[1] (Conv3D): `filters` must be positive, got 0",
        ),
        (
            r#"{type="Input",shape=[4,8,8,3]},{type="Conv3D",filters=4,kernel_size=[3,3]}"#,
            "expected a positive integer or a [depth, height, width] triple of integers",
        ),
        (
            r#"{type="Input",shape=[4,8,8,3]},{type="Conv3D",filters=4,kernel_size=3,strides=2,dilation_rate=2}"#,
            "`strides` [2, 2, 2] > 1 cannot be combined with `dilation_rate` [2, 2, 2] > 1",
        ),
        (
            r#"{type="Input",shape=[4,8,8,3]},{type="Conv3D",filters=4,kernel_size=3,groups=2}"#,
            "`filters` (4) must be a multiple of `groups` (2)",
        ),
        (
            r#"{type="Input",shape=[4,8,8,3]},{type="Conv3D",filters=4,kernel_size=3,padding="causal"}"#,
            "model.layers[1].padding",
        ),
        (
            r#"{type="Input",shape=[4,8,8,3]},{type="MaxPooling3D",pool_size=[2,0,2]}"#,
            "model.layers[1] (MaxPooling3D): `pool_size` must be positive, got 0",
        ),
        (
            r#"{type="Input",shape=[1,8,8,3]},{type="AveragePooling3D"}"#,
            "model.layers[1] (AveragePooling3D): window 2 is larger than the input (1)",
        ),
        (
            r#"{type="Input",shape=[8,8,3]},{type="GlobalAveragePooling3D"}"#,
            "GlobalAveragePooling3D expects a 4-D input (depth, height, width, channels)",
        ),
        (
            r#"{type="Input",shape=[4,8,8,3]},{type="Conv2D",filters=4,kernel_size=3}"#,
            "model.layers[1] (Conv2D): Conv2D does not take a 4-D (depth, height, width, channels) volume input, got shape (None, 4, 8, 8, 3)",
        ),
        (
            r#"{type="Input",shape=[4,8,8,3]},{type="LayerNormalization"}"#,
            "LayerNormalization does not take a 4-D (depth, height, width, channels) volume input",
        ),
        (
            r#"{type="Input",shape=[4,8,8,3]},{type="Reshape",target_shape=[4,8,24]}"#,
            "Reshape does not take a 4-D",
        ),
        (
            r#"{type="Input",shape=[4,8,8,3,1]}"#,
            "`shape` must have 1 to 4 positive dimensions",
        ),
    ];
    assert_errors(&cases);
}
