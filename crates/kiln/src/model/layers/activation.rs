//! `keras.layers.Activation(activation)`: an activation function as a layer.

use serde::{Deserialize, Serialize};

use super::activation_onnx;
use crate::model::act::Act;
use crate::model::args::Activation;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};
use crate::tflite::{TfliteGraph, TfliteValue};

/// `Activation(activation)` (Keras' class `Activation`; the Rust type is named apart from the
/// [`Activation`] function names it takes). Output the input's shape; softmax runs over the
/// last (feature) axis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivationLayer {
    /// The function.
    pub activation: Activation,
}

impl Layer for ActivationLayer {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        Ok(inputs[0].to_vec())
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, ctx: ForwardContext) -> Act {
        let x = inputs.pop().expect("one input");
        match ctx.before_softmax {
            true => x,
            false => x.activated(self.activation),
        }
    }
    fn saves_input(&self) -> bool {
        self.activation != Activation::Linear
    }
    fn extra_kept(&self, _: &[&[usize]], output: &[usize]) -> f64 {
        // The input is kept through `saves_input`; softmax keeps one more tensor.
        match self.activation {
            Activation::Softmax => super::size(output),
            _ => 0.0,
        }
    }
    fn ends_in_softmax(&self) -> bool {
        self.activation == Activation::Softmax
    }
    fn passes_values(&self) -> bool {
        // A ReLU's outputs are its inputs or 0: a rounded input needs no second rounding.
        matches!(self.activation, Activation::Linear | Activation::Relu)
    }
    fn computes_in_half(&self) -> bool {
        true
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        Ok(activation_onnx(
            g,
            name,
            x.name.clone(),
            self.activation,
            x.layout(),
        ))
    }

    fn tflite(
        &self,
        g: &mut TfliteGraph,
        inputs: &[TfliteValue],
        name: &str,
    ) -> Result<TfliteValue, String> {
        super::tflite_ops::activate(g, name, inputs[0].clone(), self.activation)
    }
}

impl LayerConfig for ActivationLayer {
    const CLASS_NAME: &'static str = "Activation";
}
