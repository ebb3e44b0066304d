//! `keras_hub.layers.PositionEmbedding(sequence_length)`: a trainable position table.

use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, WeightInit, WeightSpec, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// `PositionEmbedding(sequence_length)`: a `[sequence_length, features]` table
/// (`glorot_uniform`) whose first `steps` rows it returns for a `(steps, features)` input. The
/// input's values are not used; add the result to it with `Add`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PositionEmbedding {
    /// Longest sequence the table covers.
    pub sequence_length: usize,
}

impl Layer for PositionEmbedding {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        super::positive("sequence_length", self.sequence_length)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [s, f] = super::steps_features(inputs[0], "PositionEmbedding")?;
        if s > self.sequence_length {
            return Err(format!(
                "the input has {s} steps, more than sequence_length = {}",
                self.sequence_length
            ));
        }
        Ok(vec![s, f])
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let features = inputs[0].last().copied().unwrap_or(0);
        vec![WeightSpec::new(
            "embeddings",
            vec![self.sequence_length, features],
            WeightInit::GlorotUniform,
        )]
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, _: ForwardContext) -> Act {
        let [n, s, _] = inputs.remove(0).into_seq().dims();
        let table = w.get::<2>("embeddings").narrow(0, 0, s);
        Act::Seq(table.unsqueeze_dim::<3>(0).repeat_dim(0, n))
    }
    fn saves_input(&self) -> bool {
        false
    }
    /// The table's first `steps` rows (`[1, steps, features]`), `Expand`ed to the input's
    /// shape.
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let [s, f] = super::steps_features(&inputs[0].shape, "PositionEmbedding")?;
        let n = self.sequence_length;
        let table = g.weight(&format!("{name}/embeddings"), &[n, f], &[1, n, f])?;
        let rows = g.slice(name, &table, 1, 0, s);
        let shape = g.node(name, "Shape", &[&inputs[0].name], vec![]);
        Ok(g.node(name, "Expand", &[&rows, &shape], vec![]))
    }
    fn flops(&self, _: &[&[usize]], output: &[usize], _: usize) -> f64 {
        output.iter().map(|&d| d as f64).product()
    }
}

impl LayerConfig for PositionEmbedding {
    const CLASS_NAME: &'static str = "PositionEmbedding";
}
