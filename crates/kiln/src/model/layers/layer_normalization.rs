//! `keras.layers.LayerNormalization(epsilon=0.001)` over the last axis.

use crate::ops::layer_norm;
use serde::{Deserialize, Serialize};

use super::channels_last;
use crate::model::act::Act;
use crate::model::layer::{
    Field, ForwardContext, Layer, LayerConfig, Storage, WeightInit, WeightSpec, Weights,
};
use crate::onnx::{OnnxGraph, OnnxValue};

fn default_epsilon() -> f64 {
    1e-3
}

/// `LayerNormalization(epsilon)` with `gamma` (ones) and `beta` (zeros) of `[features]`:
/// each position's features normalized to mean 0 and variance 1, then scaled and shifted.
/// Output the input's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerNormalization {
    /// Added to the variance before the square root.
    #[serde(default = "default_epsilon")]
    pub epsilon: f64,
}

impl Default for LayerNormalization {
    fn default() -> Self {
        LayerNormalization {
            epsilon: default_epsilon(),
        }
    }
}

impl Layer for LayerNormalization {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    fn validate(&self) -> Result<(), String> {
        super::positive_epsilon("epsilon", self.epsilon)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        Ok(inputs[0].to_vec())
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let f = inputs[0].last().copied().unwrap_or(0);
        vec![
            WeightSpec::new("gamma", vec![f], WeightInit::Ones)
                .stored(Storage::Field(Field::Gamma)),
            WeightSpec::new("beta", vec![f], WeightInit::Zeros).stored(Storage::Field(Field::Beta)),
        ]
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, _: ForwardContext) -> Act {
        let (gamma, beta, eps) = (w.get::<1>("gamma"), w.get::<1>("beta"), self.epsilon);
        match inputs.pop().expect("one input") {
            Act::Flat(t) => Act::Flat(layer_norm(t, gamma, beta, eps)),
            Act::Seq(t) => Act::Seq(layer_norm(t, gamma, beta, eps)),
            // Keras normalizes the last (channel) axis: NCHW -> NHWC and back.
            Act::Image(t) => Act::Image(
                layer_norm(t.permute([0, 2, 3, 1]), gamma, beta, eps).permute([0, 3, 1, 2]),
            ),
            Act::Volume(_) => crate::model::act::volume_refused("LayerNormalization"),
        }
    }
    fn extra_kept(&self, _: &[&[usize]], output: &[usize]) -> f64 {
        // Burn's operations: the normalized values and the per-row statistics.
        1.3 * super::size(output)
    }
    fn extra_kept_cpu(&self, _: &[&[usize]], output: &[usize]) -> f64 {
        // kiln's fused operation: two statistics per row (its input is counted as the
        // previous layer's output).
        let features = output.last().copied().unwrap_or(1).max(1);
        2.0 * super::size(output) / features as f64
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let f = x.shape.last().copied().unwrap_or(0);
        let prefix = format!("{name}/");
        channels_last(g, name, x, |g, v| g.layer_norm(&prefix, v, f, self.epsilon))
    }
}

impl LayerConfig for LayerNormalization {
    const CLASS_NAME: &'static str = "LayerNormalization";
}
