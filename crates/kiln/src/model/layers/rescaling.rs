//! `keras.layers.Rescaling(scale, offset=0.0)`: `x * scale + offset` (e.g. `scale = 1/255`
//! inside the model, so that an export takes raw pixels).

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::pointwise::pointwise_layer;
use crate::model::act::ElementWise;
use crate::model::layer::{Layer, LayerConfig};
use crate::onnx::{OnnxGraph, OnnxValue};

/// `Rescaling(scale, offset)` with one scalar each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rescaling {
    /// Multiplies the input.
    pub scale: f64,
    /// Added after scaling.
    #[serde(default)]
    pub offset: f64,
}

impl ElementWise for Rescaling {
    fn apply<const D: usize>(&self, t: Tensor<D>) -> Tensor<D> {
        t.mul_scalar(self.scale).add_scalar(self.offset)
    }
}

impl Layer for Rescaling {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    pointwise_layer!();
    fn validate(&self) -> Result<(), String> {
        match self.scale.is_finite() && self.offset.is_finite() {
            true => Ok(()),
            false => Err("`scale` and `offset` must be finite numbers".into()),
        }
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let scale = g.scalar(name, self.scale as f32);
        let offset = g.scalar(name, self.offset as f32);
        let y = g.node(name, "Mul", &[&inputs[0].name, &scale], vec![]);
        Ok(g.node(name, "Add", &[&y, &offset], vec![]))
    }
}

impl LayerConfig for Rescaling {
    const CLASS_NAME: &'static str = "Rescaling";
}
