//! `keras.layers.UpSampling1D(size=2)`: each step of `(steps, features)` repeated `size` times.

use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

use super::repeat::{onnx_repeat_steps, repeat_steps};

/// `UpSampling1D(size)`: `(steps, features)` to `(steps * size, features)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpSampling1D {
    /// How many times each step is repeated.
    #[serde(default = "two")]
    pub size: usize,
}

fn two() -> usize {
    2
}

impl Default for UpSampling1D {
    fn default() -> Self {
        UpSampling1D { size: 2 }
    }
}

impl Layer for UpSampling1D {
    crate::serde_layer!();
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [s, f] = super::steps_features(inputs[0], "UpSampling1D")?;
        Ok(vec![s * self.size, f])
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        Act::Seq(repeat_steps(inputs.remove(0).into_seq(), self.size))
    }
    fn validate(&self) -> Result<(), String> {
        super::positive("size", self.size)
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn passes_values(&self) -> bool {
        true
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let sf = super::steps_features(&inputs[0].shape, "UpSampling1D")?;
        Ok(onnx_repeat_steps(g, name, &inputs[0].name, sf, self.size))
    }
}

impl LayerConfig for UpSampling1D {
    const CLASS_NAME: &'static str = "UpSampling1D";
}
