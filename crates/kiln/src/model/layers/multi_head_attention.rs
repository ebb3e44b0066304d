//! `keras.layers.MultiHeadAttention(num_heads, key_dim, value_dim=None, dropout=0.0,
//! use_bias=True)`, with the call's `use_causal_mask` as a layer argument.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::attention::{self, Dims};
use super::{default_true, steps_features};
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, WeightSpec, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// `MultiHeadAttention(num_heads, key_dim, value_dim, use_bias)` called as `layer(query,
/// value)`: `inputs = [query]` is self-attention, `inputs = [query, value]` uses `value` as key
/// and value. Inputs `(steps, features)`; output the query's shape. The Keras masks of the
/// query and value (from `Embedding(mask_zero)` or `Masking`) and `use_causal_mask` restrict
/// which value steps each query step attends to; `dropout` drops attention weights while
/// training.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultiHeadAttention {
    /// Attention heads.
    pub num_heads: usize,
    /// Size of each head's query and key.
    pub key_dim: usize,
    /// Size of each head's value; `key_dim` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_dim: Option<usize>,
    /// Fraction of the attention weights dropped while training, in `[0, 1)`.
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub dropout: f64,
    /// Query step `i` attends only to value steps `j <= i` (Keras' call argument
    /// `use_causal_mask`, here fixed per layer).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_causal_mask: bool,
    /// Biases in the four projections.
    #[serde(default = "default_true")]
    pub use_bias: bool,
}


impl MultiHeadAttention {
    fn dims(&self, inputs: &[&[usize]]) -> Dims {
        let f = inputs[0].last().copied().unwrap_or(0);
        let fv = inputs.get(1).and_then(|s| s.last()).copied().unwrap_or(f);
        let vd = self.value_dim.unwrap_or(self.key_dim);
        [f, fv, self.num_heads, self.key_dim, vd]
    }
}

impl Layer for MultiHeadAttention {
    crate::serde_layer!();
    fn arity(&self) -> (usize, usize) {
        (1, 2)
    }
    fn validate(&self) -> Result<(), String> {
        super::positive("num_heads", self.num_heads)?;
        super::positive("key_dim", self.key_dim)?;
        super::positive("value_dim", self.value_dim.unwrap_or(1))?;
        super::rate("dropout", self.dropout)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [s, f] = steps_features(inputs[0], "MultiHeadAttention")?;
        if let Some(value) = inputs.get(1) {
            steps_features(value, "MultiHeadAttention")?;
        }
        Ok(vec![s, f])
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        attention::weights("", self.dims(inputs), self.use_bias)
    }
    fn forward(&self, inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        self.forward_masked(inputs, &[], w, ctx)
    }
    fn forward_masked(
        &self,
        mut inputs: Vec<Act>,
        masks: &[Option<Tensor<2>>],
        w: &Weights,
        ctx: ForwardContext,
    ) -> Act {
        let value = (inputs.len() == 2).then(|| inputs.pop().expect("two inputs").into_seq());
        let query = inputs.pop().expect("a query").into_seq();
        let value = value.unwrap_or_else(|| query.clone());
        let query_mask = masks.first().cloned().flatten();
        // Self-attention's value is the query, with its mask.
        let value_mask = match masks.len() {
            2 => masks[1].clone(),
            _ => query_mask.clone(),
        };
        let steps = [query.dims()[1], value.dims()[1]];
        let opts = attention::Attend {
            mask: attention::attention_mask(
                query_mask,
                value_mask,
                self.use_causal_mask,
                steps,
                &query.device(),
            ),
            dropout: self.dropout,
            training: ctx.training,
        };
        Act::Seq(attention::forward(query, value, w, "", self.num_heads, &opts))
    }
    fn supports_masking(&self) -> bool {
        true
    }
    fn extra_kept(&self, inputs: &[&[usize]], _: &[usize]) -> f64 {
        self.kept(inputs).0
    }
    fn extra_kept_cpu(&self, inputs: &[&[usize]], _: &[usize]) -> f64 {
        let (all, scores) = self.kept(inputs);
        all - attention::SCORES_NOT_KEPT_ON_CPU * scores
    }
    fn largest_tensor(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        let largest = super::largest(inputs, output);
        largest.max(self.kept(inputs).1)
    }
    fn flops(&self, _: &[&[usize]], output: &[usize], trainable: usize) -> f64 {
        attention::flops(trainable, output[0] as f64, output[1] as f64)
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let value = inputs.get(1).unwrap_or(&inputs[0]);
        let shapes: Vec<&[usize]> = inputs.iter().map(|v| v.shape.as_slice()).collect();
        let pair = [inputs[0].name.as_str(), value.name.as_str()];
        attention::onnx(
            g,
            &format!("{name}/"),
            pair,
            self.dims(&shapes),
            self.use_bias,
            self.use_causal_mask
                .then(|| [inputs[0].shape[0], value.shape[0]]),
        )
    }
}

impl MultiHeadAttention {
    /// Values kept and the largest tensor, per example.
    fn kept(&self, inputs: &[&[usize]]) -> (f64, f64) {
        let sq = inputs[0][0] as f64;
        let sv = inputs.get(1).map_or(sq, |s| s[0] as f64);
        attention::kept(self.dims(inputs), sq, sv)
    }
}

impl LayerConfig for MultiHeadAttention {
    const CLASS_NAME: &'static str = "MultiHeadAttention";
}
