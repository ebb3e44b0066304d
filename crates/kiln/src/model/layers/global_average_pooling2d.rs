//! `keras.layers.GlobalAveragePooling2D()`: `(height, width, channels)` to `(channels,)`, the
//! mean over positions.

use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue, int};

/// `GlobalAveragePooling2D()`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalAveragePooling2D {}

impl Layer for GlobalAveragePooling2D {
    crate::serde_layer!();
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [_, _, c] = super::image_shape(inputs[0], "GlobalAveragePooling2D")?;
        Ok(vec![c])
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let t = inputs.remove(0).into_image();
        let [n, c, _, _] = t.dims();
        Act::Flat(t.flatten::<3>(2, 3).mean_dim(2).reshape([n, c]))
    }
    fn saves_input(&self) -> bool {
        false
    }
    /// `GlobalAveragePool` (`[n, c, 1, 1]`), then `Flatten` to `[n, c]`.
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let pooled = g.node(name, "GlobalAveragePool", &[&inputs[0].name], vec![]);
        Ok(g.node(name, "Flatten", &[&pooled], vec![int("axis", 1)]))
    }
}

impl LayerConfig for GlobalAveragePooling2D {
    const CLASS_NAME: &'static str = "GlobalAveragePooling2D";
    const ALIASES: &'static [&'static str] = &["GlobalAvgPool2D"];
}
