//! `keras.layers.UpSampling2D(size=(2, 2), interpolation="nearest")`: each row and column of
//! `(height, width, channels)` images repeated.

use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::args::Pair;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

use super::repeat::{onnx_repeat_steps, repeat_steps};

/// Keras' interpolations; kiln runs `nearest`.
const INTERPOLATIONS: &[&str] = &["nearest", "bilinear", "bicubic", "lanczos3", "lanczos5"];

/// `UpSampling2D(size, interpolation)`: `(h, w, c)` to `(h * rows, w * cols, c)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpSampling2D {
    /// An integer or `[rows, cols]`: how many times each row and each column is repeated.
    #[serde(default = "two")]
    pub size: Pair,
    /// `"nearest"` (the others of Keras are refused for now).
    #[serde(default = "nearest")]
    pub interpolation: String,
}

fn two() -> Pair {
    Pair([2, 2])
}

fn nearest() -> String {
    "nearest".into()
}

impl Default for UpSampling2D {
    fn default() -> Self {
        UpSampling2D {
            size: two(),
            interpolation: nearest(),
        }
    }
}

impl Layer for UpSampling2D {
    crate::serde_layer!();
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [h, w, c] = super::image_shape(inputs[0], "UpSampling2D")?;
        let [rows, cols] = self.size.0;
        Ok(vec![h * rows, w * cols, c])
    }
    /// Rows: `[n * c, h, w]` with each of the `h` steps repeated; then columns: `[n * c * h',
    /// w, 1]` likewise.
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let x = inputs.remove(0).into_image();
        let [n, c, h, w] = x.dims();
        let [rows, cols] = self.size.0;
        let tall = repeat_steps(x.reshape([n * c, h, w]), rows);
        let wide = repeat_steps(tall.reshape([n * c * h * rows, w, 1]), cols);
        Act::Image(wide.reshape([n, c, h * rows, w * cols]))
    }
    fn validate(&self) -> Result<(), String> {
        super::positive("size", self.size.0[0].min(self.size.0[1]))?;
        match self.interpolation.as_str() {
            "nearest" => Ok(()),
            other if INTERPOLATIONS.contains(&other) => Err(format!(
                "`interpolation` \"{other}\" is not supported yet; use \"nearest\""
            )),
            other => Err(format!(
                "`interpolation` \"{other}\" is not one of Keras' {INTERPOLATIONS:?}; kiln runs \
                 \"nearest\""
            )),
        }
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn passes_values(&self) -> bool {
        true
    }
    /// As the forward pass: two repeats (`Reshape`, `Expand`, `Reshape`) of the NCHW value.
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let [h, w, c] = super::image_shape(&inputs[0].shape, "UpSampling2D")?;
        let [rows, cols] = self.size.0;
        let tall = onnx_repeat_steps(g, name, &inputs[0].name, [h, w], rows);
        let wide = onnx_repeat_steps(g, name, &tall, [w, 1], cols);
        let [c, h, w] = [c, h * rows, w * cols].map(|d| d as i64);
        Ok(g.reshape(name, &wide, &[-1, c, h, w]))
    }
}

impl LayerConfig for UpSampling2D {
    const CLASS_NAME: &'static str = "UpSampling2D";
}
