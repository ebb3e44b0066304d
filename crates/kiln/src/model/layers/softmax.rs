//! `keras.layers.Softmax(axis=-1)` over the last axis.

use serde::{Deserialize, Serialize};

use super::ActivationLayer;
use super::pointwise::last_axis;
use crate::model::act::Act;
use crate::model::args::Activation;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};
use crate::tflite::{TfliteGraph, TfliteValue};

fn default_axis() -> i64 {
    -1
}

/// `Softmax(axis)`: the softmax over the last (feature) axis, as `Activation("softmax")` (a
/// model output of it hands its logits to the loss). Other axes are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Softmax {
    /// The axis, Keras counting the batch as 0: `-1` or the input's last.
    #[serde(default = "default_axis")]
    pub axis: i64,
}

impl Default for Softmax {
    fn default() -> Self {
        Softmax {
            axis: default_axis(),
        }
    }
}

/// The layer it computes as.
const SOFTMAX: ActivationLayer = ActivationLayer {
    activation: Activation::Softmax,
};

impl Layer for Softmax {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        last_axis(self.axis, inputs[0])?;
        SOFTMAX.output_shape(inputs)
    }
    fn forward(&self, inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        SOFTMAX.forward(inputs, w, ctx)
    }
    fn extra_kept(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        SOFTMAX.extra_kept(inputs, output)
    }
    fn ends_in_softmax(&self) -> bool {
        true
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        SOFTMAX.onnx(g, inputs, name)
    }

    fn tflite(
        &self,
        g: &mut TfliteGraph,
        inputs: &[TfliteValue],
        name: &str,
    ) -> Result<TfliteValue, String> {
        let last = inputs[0].shape.len() as i64;
        if self.axis != -1 && self.axis != last {
            return Err("a softmax over another axis than the last has no TensorFlow Lite \
                        mapping in kiln yet"
                .into());
        }
        super::tflite_ops::activate(g, name, inputs[0].clone(), Activation::Softmax)
    }
}

impl LayerConfig for Softmax {
    const CLASS_NAME: &'static str = "Softmax";
}
