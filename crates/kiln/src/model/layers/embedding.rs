//! `keras.layers.Embedding(input_dim, output_dim)`: integer ids `(steps,)` to vectors
//! `(steps, output_dim)`.

use burn::prelude::*;
use burn::tensor::module::embedding;
use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, WeightInit, WeightSpec, Weights};
use crate::onnx::{OnnxGraph, OnnxValue, int, proto::INT64};

/// `Embedding(input_dim, output_dim)`: one trainable `embeddings [input_dim, output_dim]`
/// table, initialized `uniform(-0.05, 0.05)` as Keras does. Ids arrive as float32 (exact up
/// to 2^24); ids outside `[0, input_dim)` are clamped into it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Embedding {
    /// Vocabulary size.
    pub input_dim: usize,
    /// Vector size.
    pub output_dim: usize,
    /// Id 0 is padding: the output carries a mask that is 0 where the id is 0, which
    /// recurrent layers, `GlobalAveragePooling1D` and `MultiHeadAttention` honour (Keras'
    /// `mask_zero`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mask_zero: bool,
}

impl Layer for Embedding {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        super::positive("input_dim", self.input_dim)?;
        super::positive("output_dim", self.output_dim)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        match inputs[0] {
            [s] => Ok(vec![*s, self.output_dim]),
            other => Err(format!(
                "Embedding expects a 1-D input of ids (steps,), got shape {}",
                crate::model::args::keras_shape(other)
            )),
        }
    }
    fn weights(&self, _: &[&[usize]]) -> Vec<WeightSpec> {
        vec![WeightSpec::new(
            "embeddings",
            vec![self.input_dim, self.output_dim],
            WeightInit::RandomUniform(-0.05, 0.05),
        )]
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, _: ForwardContext) -> Act {
        let ids = inputs.remove(0).into_flat();
        let ids = ids.detach().clamp(0.0, (self.input_dim - 1) as f64).int();
        Act::Seq(embedding(w.get::<2>("embeddings"), ids))
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn compute_mask(&self, inputs: &[&Act], _: &[Option<Tensor<2>>]) -> Option<Tensor<2>> {
        match (self.mask_zero, inputs.first()) {
            (true, Some(Act::Flat(ids))) => Some(ids.clone().detach().not_equal_elem(0.0).float()),
            _ => None,
        }
    }
    /// As the forward pass: ids clipped into `[0, input_dim)`, cast to int64 (truncated),
    /// then `Gather` of the table's rows.
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        if self.mask_zero {
            return Err(super::MASK_NOT_EXPORTED.into());
        }
        let [v, d] = [self.input_dim, self.output_dim];
        let table = g.weight(&format!("{name}/embeddings"), &[v, d], &[v, d])?;
        let (lo, hi) = (g.scalar(name, 0.0), g.scalar(name, (v - 1) as f32));
        let clipped = g.node(name, "Clip", &[&inputs[0].name, &lo, &hi], vec![]);
        let ids = g.node(name, "Cast", &[&clipped], vec![int("to", INT64 as i64)]);
        Ok(g.node(name, "Gather", &[&table, &ids], vec![int("axis", 0)]))
    }
    fn flops(&self, _: &[&[usize]], output: &[usize], _: usize) -> f64 {
        output.iter().map(|&d| d as f64).product()
    }
}

impl LayerConfig for Embedding {
    const CLASS_NAME: &'static str = "Embedding";
}
