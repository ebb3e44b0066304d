//! `keras.layers.ZeroPadding2D(padding=1)`: zero rows and columns around `(height, width,
//! channels)` images.

use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::args::Pads2;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// `ZeroPadding2D(padding)`: `(h, w, c)` to `(h + top + bottom, w + left + right, c)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZeroPadding2D {
    /// An integer, `[rows, cols]` or `[[top, bottom], [left, right]]`.
    #[serde(default = "one")]
    pub padding: Pads2,
}

fn one() -> Pads2 {
    Pads2([[1, 1], [1, 1]])
}

impl Layer for ZeroPadding2D {
    crate::serde_layer!();
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [h, w, c] = super::image_shape(inputs[0], "ZeroPadding2D")?;
        let [[top, bottom], [left, right]] = self.padding.0;
        Ok(vec![h + top + bottom, w + left + right, c])
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let [[top, bottom], [left, right]] = self.padding.0;
        Act::Image(inputs.remove(0).into_image().pad(
            [(top, bottom), (left, right)],
            burn::tensor::ops::PadMode::Constant(0.0),
        ))
    }
    fn saves_input(&self) -> bool {
        false
    }
    /// `Pad` (constant zeros) of the NCHW value: `[begins of N, C, H, W, ends of N, C, H, W]`.
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let [[top, bottom], [left, right]] = self.padding.0.map(|p| p.map(|v| v as i64));
        let pads = g.int64s(name, &[0, 0, top, left, 0, 0, bottom, right]);
        Ok(g.node(name, "Pad", &[&inputs[0].name, &pads], vec![]))
    }
}

impl LayerConfig for ZeroPadding2D {
    const CLASS_NAME: &'static str = "ZeroPadding2D";
}
