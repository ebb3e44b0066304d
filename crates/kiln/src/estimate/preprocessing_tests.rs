//! The estimate of the image preprocessing layers inside a model: Keras 3's output shapes and
//! parameter counts (tests/reference/image_preprocessing_estimate.py), and no memory for
//! layers with no weights that no gradient reaches.

use super::*;
use crate::model::ModelSpec;

/// The reference script's model: Input (32, 40, 3) through every image preprocessing layer.
const LAYERS: &str = r#"layers = [
  { type = "Input", shape = [32, 40, 3] },
  { type = "Resizing", height = 24, width = 30 },
  { type = "CenterCrop", height = 20, width = 28 },
  { type = "RandomCrop", height = 16, width = 24 },
  { type = "RandomFlip" },
  { type = "RandomRotation", factor = 0.1 },
  { type = "RandomZoom", height_factor = 0.2 },
  { type = "RandomTranslation", height_factor = 0.1, width_factor = 0.1 },
  { type = "RandomContrast", factor = 0.2 },
  { type = "RandomBrightness", factor = 0.2 },
  { type = "Rescaling", scale = 0.5, offset = 1.0 },
  { type = "Normalization", mean = [1.0, 2.0, 3.0], variance = [1.0, 4.0, 9.0] },
  { type = "Normalization", adapt = true },
  { type = "Flatten" },
  { type = "Dense", units = 10 },
]"#;

/// `(class, Keras output shape, trainable, non-trainable)` as Keras 3 reports them.
const KERAS: [(&str, &[usize], u64, u64); 14] = [
    ("Resizing", &[24, 30, 3], 0, 0),
    ("CenterCrop", &[20, 28, 3], 0, 0),
    ("RandomCrop", &[16, 24, 3], 0, 0),
    ("RandomFlip", &[16, 24, 3], 0, 0),
    ("RandomRotation", &[16, 24, 3], 0, 0),
    ("RandomZoom", &[16, 24, 3], 0, 0),
    ("RandomTranslation", &[16, 24, 3], 0, 0),
    ("RandomContrast", &[16, 24, 3], 0, 0),
    ("RandomBrightness", &[16, 24, 3], 0, 0),
    ("Rescaling", &[16, 24, 3], 0, 0),
    ("Normalization", &[16, 24, 3], 0, 0),
    ("Normalization", &[16, 24, 3], 0, 7),
    ("Flatten", &[1152], 0, 0),
    ("Dense", &[10], 11530, 0),
];

#[test]
fn image_preprocessing_layers_have_keras_shapes_and_parameters() {
    let spec = ModelSpec::from_toml(&toml::from_str(LAYERS).unwrap()).unwrap();
    let adam = OptimizerSpec::from_toml(&"adam".into()).unwrap();
    let e = estimate(&spec, &adam, 8, Precision::Float32);
    assert_eq!(e.layers.len(), KERAS.len());
    for (i, (l, (class, shape, trainable, fixed))) in e.layers.iter().zip(KERAS).enumerate() {
        let at = format!("layer {i} ({})", l.name);
        assert_eq!(l.class, class, "{at}");
        assert_eq!(spec.shape_after(i), shape, "{at}");
        assert_eq!((l.trainable, l.non_trainable), (trainable, fixed), "{at}");
        // float32 weights; gradients and optimizer state for trainable ones only (Adam: 2).
        assert_eq!(l.weight_bytes, 4 * (trainable + fixed), "{at}");
        assert_eq!(l.gradient_bytes, 4 * trainable, "{at}");
        assert_eq!(l.optimizer_bytes, 8 * trainable, "{at}");
        if i < 12 {
            // No trainable layer before them: no gradient flows through, nothing is kept.
            assert_eq!(l.activation_bytes, 0, "{at}");
        }
    }
    // The Dense layer keeps its input (8 examples of 1152 float32 values) for its kernel's
    // gradient, which the estimate counts at the Flatten that produced it.
    assert_eq!(e.layers[12].activation_bytes, 8 * 1152 * 4);
    assert_eq!(e.params(), 11530 + 7);
}
