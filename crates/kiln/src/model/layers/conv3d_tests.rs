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

/// Layer `args` (a TOML inline table's body, without `type`) of class `class` on Keras input
/// `shape`.
fn shape_of(class: &str, args: &str, shape: &[usize]) -> Result<Vec<usize>, String> {
    let sep = if args.is_empty() { "" } else { ", " };
    let text = format!("layer = {{ type = \"{class}\"{sep}{args} }}");
    let table: toml::Table = toml::from_str(&text).unwrap();
    build(table["layer"].as_table().unwrap()).output_shape(&[shape])
}

#[test]
fn volume_output_shapes_follow_keras_formulas() {
    let cases: &[(&str, &str, &[usize], &[usize])] = &[
        // keras.io's 3D CT-scan classifier: (128, 128, 64, 1) through its first block.
        (
            "Conv3D",
            "filters = 64, kernel_size = 3, activation = \"relu\"",
            &[128, 128, 64, 1],
            &[126, 126, 62, 64],
        ),
        (
            "MaxPooling3D",
            "pool_size = 2",
            &[126, 126, 62, 64],
            &[63, 63, 31, 64],
        ),
        (
            "Conv3D",
            "filters = 4, kernel_size = [3, 1, 2], strides = 2, padding = \"same\"",
            &[7, 4, 5, 3],
            &[4, 2, 3, 4],
        ),
        (
            "Conv3D",
            "filters = 4, kernel_size = 3, dilation_rate = [1, 2, 3]",
            &[5, 6, 7, 2],
            &[3, 2, 1, 4],
        ),
        (
            "AveragePooling3D",
            "pool_size = 3, strides = 2, padding = \"same\"",
            &[5, 4, 3, 2],
            &[3, 2, 2, 2],
        ),
        (
            "MaxPool3D",
            "pool_size = [1, 2, 2]",
            &[3, 4, 5, 2],
            &[3, 2, 2, 2],
        ),
        (
            "GlobalAvgPool3D",
            "keepdims = true",
            &[3, 4, 5, 2],
            &[1, 1, 1, 2],
        ),
        (
            "GlobalMaxPooling3D",
            "keepdims = false",
            &[3, 4, 5, 2],
            &[2],
        ),
        ("Flatten", "", &[3, 4, 5, 2], &[120]),
        ("Dense", "units = 7", &[3, 4, 5, 2], &[3, 4, 5, 7]),
        (
            "BatchNormalization",
            "axis = 4",
            &[3, 4, 5, 2],
            &[3, 4, 5, 2],
        ),
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
    let shapes: Vec<_> = specs
        .iter()
        .map(|s| (s.name.as_str(), s.shape.clone()))
        .collect();
    assert_eq!(shapes, [("kernel", vec![3, 2, 1, 4, 8]), ("bias", vec![8])]);
    for alias in [
        "Convolution3D",
        "MaxPool3D",
        "AvgPool3D",
        "GlobalAvgPool3D",
        "GlobalMaxPool3D",
    ] {
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
            r#"{type="Input",shape=[4,8,8,3]},{type="Conv3D",filters=4,kernel_size=2,dilation_rate=[4,1,1]}"#,
            "window 5 (kernel 2 dilated) is larger than the input (4)",
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
            r#"{type="Input",shape=[4,8,8,4]},{type="Conv3D",filters=3,kernel_size=3,groups=2}"#,
            "`filters` (3) must be a multiple of `groups` (2)",
        ),
        (
            r#"{type="Input",shape=[4,8,8,3]},{type="Conv3D",filters=4,kernel_size=3,groups=2}"#,
            "Conv3D splits its input's 3 channels into `groups` = 2",
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

/// keras.io's 3D CT-scan classifier (`3D_image_classification`), as its `get_model` builds it.
const CT_SCAN: &str = r#"layers = [
  { type = "Input", shape = [128, 128, 64, 1] },
  { type = "Conv3D", filters = 64, kernel_size = 3, activation = "relu" },
  { type = "MaxPool3D", pool_size = 2 },
  { type = "BatchNormalization" },
  { type = "Conv3D", filters = 64, kernel_size = 3, activation = "relu" },
  { type = "MaxPool3D", pool_size = 2 },
  { type = "BatchNormalization" },
  { type = "Conv3D", filters = 128, kernel_size = 3, activation = "relu" },
  { type = "MaxPool3D", pool_size = 2 },
  { type = "BatchNormalization" },
  { type = "Conv3D", filters = 256, kernel_size = 3, activation = "relu" },
  { type = "MaxPool3D", pool_size = 2 },
  { type = "BatchNormalization" },
  { type = "GlobalAveragePooling3D" },
  { type = "Dense", units = 512, activation = "relu" },
  { type = "Dropout", rate = 0.3 },
  { type = "Dense", units = 1, activation = "sigmoid" },
]"#;

/// The CT-scan model's shapes and parameter counts per layer equal Keras' (printed by
/// `tests/reference/conv3d_reference.py`), and `kiln estimate`'s figures follow from them: the
/// weights, gradients and Adam's two slots in float32, and the activations a convolution with
/// a fused ReLU and a max pooling keep for backward.
#[test]
fn the_keras_io_ct_scan_model_has_keras_shapes_counts_and_estimate() {
    use crate::estimate::{Precision, estimate};
    let spec = crate::model::ModelSpec::from_toml(&toml::from_str(CT_SCAN).unwrap()).unwrap();
    // (class, Keras output shape, trainable, non-trainable)
    let keras: [(&str, &[usize], u64, u64); 16] = [
        ("Conv3D", &[126, 126, 62, 64], 1792, 0),
        ("MaxPooling3D", &[63, 63, 31, 64], 0, 0),
        ("BatchNormalization", &[63, 63, 31, 64], 128, 128),
        ("Conv3D", &[61, 61, 29, 64], 110656, 0),
        ("MaxPooling3D", &[30, 30, 14, 64], 0, 0),
        ("BatchNormalization", &[30, 30, 14, 64], 128, 128),
        ("Conv3D", &[28, 28, 12, 128], 221312, 0),
        ("MaxPooling3D", &[14, 14, 6, 128], 0, 0),
        ("BatchNormalization", &[14, 14, 6, 128], 256, 256),
        ("Conv3D", &[12, 12, 4, 256], 884992, 0),
        ("MaxPooling3D", &[6, 6, 2, 256], 0, 0),
        ("BatchNormalization", &[6, 6, 2, 256], 512, 512),
        ("GlobalAveragePooling3D", &[256], 0, 0),
        ("Dense", &[512], 131584, 0),
        ("Dropout", &[512], 0, 0),
        ("Dense", &[1], 513, 0),
    ];
    let adam = crate::compile::OptimizerSpec::from_toml(&"adam".into()).unwrap();
    let e = estimate(&spec, &adam, 2, Precision::Float32);
    assert_eq!(e.layers.len(), keras.len());
    for (i, (l, (class, shape, t, n))) in e.layers.iter().zip(keras).enumerate() {
        assert_eq!((l.class, spec.shape_after(i)), (class, shape), "layer {i}");
        assert_eq!(
            (l.trainable, l.non_trainable),
            (t, n),
            "layer {i} ({class})"
        );
        assert_eq!(l.weight_bytes, 4 * (t + n), "layer {i}");
        assert_eq!(
            (l.gradient_bytes, l.optimizer_bytes),
            (4 * t, 8 * t),
            "layer {i}"
        );
    }
    assert_eq!(
        e.layers
            .iter()
            .map(|l| l.trainable + l.non_trainable)
            .sum::<u64>(),
        1352897
    );
    // Batch 2, float32: the first Conv3D keeps its output (its pooling's input) and the
    // pre-activation (Burn's ReLU's input); the pooling keeps its output (BatchNormalization's
    // input) and the index of each maximum.
    let (conv, pool) = (126 * 126 * 62 * 64, 63 * 63 * 31 * 64);
    assert_eq!(e.layers[0].activation_bytes, 2 * 4 * 2 * conv);
    assert_eq!(e.layers[1].activation_bytes, 2 * 4 * 2 * pool);
    assert_eq!(e.input_bytes, 2 * 4 * 128 * 128 * 64);
}
