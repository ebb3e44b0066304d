//! `keras.layers.Flatten()`: one vector per example, in Keras' (channels-last) order.

use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{Layout, OnnxGraph, OnnxValue, int};
use crate::tflite::{TfliteGraph, TfliteValue};

/// `Flatten()`: any input shape to `(product of its axes,)`. Images are flattened as Keras
/// holds them, `[height, width, channels]`, so that the next Dense's kernel matches Keras'.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flatten {}

impl Layer for Flatten {
    crate::serde_layer!();
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        Ok(vec![inputs[0].iter().product()])
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        // Keras flattens channels-last: [b, h, w, c].
        Act::Flat(super::keras_order::into_rows(inputs.pop().expect("one input")))
    }
    fn takes_volumes(&self) -> bool {
        true
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn passes_values(&self) -> bool {
        true
    }
    fn computes_in_half(&self) -> bool {
        true
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let flat = |g: &mut OnnxGraph, v: &str| g.node(name, "Flatten", &[v], vec![int("axis", 1)]);
        Ok(match x.layout() {
            Layout::Flat => x.name.clone(),
            Layout::Seq => flat(g, &x.name),
            channels_first => {
                let perm = channels_first.to_channels_last().expect("an image or a volume");
                let t = g.transpose(name, &x.name, perm);
                flat(g, &t)
            }
        })
    }

    fn tflite(
        &self,
        g: &mut TfliteGraph,
        inputs: &[TfliteValue],
        name: &str,
    ) -> Result<TfliteValue, String> {
        let size = inputs[0].shape.iter().product::<usize>();
        Ok(g.reshape(name, &inputs[0], &[size]))
    }
}

impl LayerConfig for Flatten {
    const CLASS_NAME: &'static str = "Flatten";
}
