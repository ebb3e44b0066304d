//! `keras.layers.RepeatVector(n)`: `(features,)` to `(n, features)`, the vector `n` times.

use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::args::keras_shape;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

use super::repeat::{onnx_repeat_steps, repeat_steps};

/// `RepeatVector(n)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepeatVector {
    /// How many times (the output's steps).
    pub n: usize,
}

impl Layer for RepeatVector {
    crate::serde_layer!();
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        match inputs[0] {
            [f] => Ok(vec![self.n, *f]),
            other => Err(format!(
                "RepeatVector expects a 1-D input (features,), got shape {}; Flatten it first",
                keras_shape(other)
            )),
        }
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let x = inputs.remove(0).into_flat();
        let [n, f] = x.dims();
        Act::Seq(repeat_steps(x.reshape([n, 1, f]), self.n))
    }
    fn validate(&self) -> Result<(), String> {
        super::positive("n", self.n)
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn passes_values(&self) -> bool {
        true
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let f = inputs[0].shape[0];
        Ok(onnx_repeat_steps(g, name, &inputs[0].name, [1, f], self.n))
    }
}

impl LayerConfig for RepeatVector {
    const CLASS_NAME: &'static str = "RepeatVector";
}
