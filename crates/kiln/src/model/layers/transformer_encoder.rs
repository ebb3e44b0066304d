//! `keras_hub.layers.TransformerEncoder(intermediate_dim, num_heads, dropout=0.0,
//! activation="relu", layer_norm_epsilon=1e-5)`: BERT's block. A Keras mask on its input (a
//! padding mask from `Embedding(mask_zero)`) keeps every step from attending to padding, as
//! keras_hub's `padding_mask`.

use burn::prelude::*;
use crate::ops::layer_norm;
use serde::{Deserialize, Serialize};

use super::attention::{self, Dims, dense3};
use super::{activation_onnx, steps_features};
use crate::model::act::Act;
use crate::model::args::Activation;
use crate::model::layer::{
    ForwardContext, Layer, LayerConfig, Storage, WeightInit, WeightSpec, Weights,
};
use crate::onnx::{Layout, OnnxGraph, OnnxValue};

fn default_relu() -> Activation {
    Activation::Relu
}
fn default_epsilon() -> f64 {
    1e-5
}

/// `TransformerEncoder(intermediate_dim, num_heads, activation, layer_norm_epsilon)` on
/// `(steps, features)`: self-attention (`key_dim = features / num_heads`), add and
/// LayerNormalization, then `Dense(intermediate_dim, activation)`, `Dense(features)`, add and
/// LayerNormalization (post-norm). Weights under keras_hub's sublayer names
/// (`self_attention_layer/query/kernel`, …, `feedforward_layer_norm/beta`). No dropout, no
/// mask. Output the input's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformerEncoder {
    /// Units of the feed-forward network's hidden layer.
    pub intermediate_dim: usize,
    /// Attention heads; must divide the feature size.
    pub num_heads: usize,
    /// The feed-forward activation.
    #[serde(default = "default_relu")]
    pub activation: Activation,
    /// Epsilon of both LayerNormalizations.
    #[serde(default = "default_epsilon")]
    pub layer_norm_epsilon: f64,
    /// keras_hub's `dropout`: of the attention weights, of the attention block's output and of
    /// the feed-forward block's output, while training; in `[0, 1)`.
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub dropout: f64,
}


const ATTENTION: &str = "self_attention_layer/";

impl TransformerEncoder {
    fn dims(&self, inputs: &[&[usize]]) -> Dims {
        let f = inputs[0].last().copied().unwrap_or(0);
        let kd = f / self.num_heads.max(1);
        [f, f, self.num_heads, kd, kd]
    }
}

impl Layer for TransformerEncoder {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        super::positive("intermediate_dim", self.intermediate_dim)?;
        super::positive("num_heads", self.num_heads)?;
        super::positive_epsilon("layer_norm_epsilon", self.layer_norm_epsilon)?;
        super::rate("dropout", self.dropout)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [s, f] = steps_features(inputs[0], "TransformerEncoder")?;
        if f % self.num_heads != 0 {
            return Err(format!(
                "the feature size {f} is not a multiple of num_heads = {}",
                self.num_heads
            ));
        }
        Ok(vec![s, f])
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let (f, i) = (
            inputs[0].last().copied().unwrap_or(0),
            self.intermediate_dim,
        );
        let all = attention::weights(ATTENTION, self.dims(inputs), true);
        let (mut kernels, mut vectors): (Vec<_>, Vec<_>) =
            all.into_iter().partition(|w| w.is_kernel());
        let w = |name: &str, shape: Vec<usize>, init| {
            WeightSpec::new(name, shape, init).stored(Storage::Auto)
        };
        kernels.push(w(
            "feedforward_intermediate_dense/kernel",
            vec![f, i],
            WeightInit::GlorotUniform,
        ));
        kernels.push(w(
            "feedforward_output_dense/kernel",
            vec![i, f],
            WeightInit::GlorotUniform,
        ));
        vectors.extend([
            w("self_attention_layer_norm/gamma", vec![f], WeightInit::Ones),
            w("self_attention_layer_norm/beta", vec![f], WeightInit::Zeros),
            w(
                "feedforward_intermediate_dense/bias",
                vec![i],
                WeightInit::Zeros,
            ),
            w("feedforward_output_dense/bias", vec![f], WeightInit::Zeros),
            w("feedforward_layer_norm/gamma", vec![f], WeightInit::Ones),
            w("feedforward_layer_norm/beta", vec![f], WeightInit::Zeros),
        ]);
        kernels.extend(vectors);
        kernels
    }
    fn forward(&self, inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        self.forward_masked(inputs, &[], w, ctx)
    }
    fn supports_masking(&self) -> bool {
        true
    }
    fn forward_masked(
        &self,
        mut inputs: Vec<Act>,
        masks: &[Option<Tensor<2>>],
        w: &Weights,
        ctx: ForwardContext,
    ) -> Act {
        let x = inputs.pop().expect("one input").into_seq();
        let steps = x.dims()[1];
        let padding = masks.first().cloned().flatten();
        let opts = attention::Attend {
            mask: attention::attention_mask(None, padding, false, [steps, steps], &x.device()),
            dropout: self.dropout,
            training: ctx.training,
        };
        let eps = self.layer_norm_epsilon;
        let norm = |t, part: &str| {
            let gamma = w.get::<1>(&format!("{part}/gamma"));
            let beta = w.get::<1>(&format!("{part}/beta"));
            layer_norm(t, gamma, beta, eps)
        };
        let dense = |t, part: &str| {
            let kernel = w.get::<2>(&format!("{part}/kernel"));
            dense3(t, kernel, Some(w.get::<1>(&format!("{part}/bias"))))
        };
        let a = attention::forward(x.clone(), x.clone(), w, ATTENTION, self.num_heads, &opts);
        let a = super::dropout::dropped(a, self.dropout, ctx.training);
        let x = norm(x + a, "self_attention_layer_norm");
        let h = dense(x.clone(), "feedforward_intermediate_dense");
        let h = Act::Seq(h).activated(self.activation).into_seq();
        let f = dense(h, "feedforward_output_dense");
        let f = super::dropout::dropped(f, self.dropout, ctx.training);
        Act::Seq(norm(x + f, "feedforward_layer_norm"))
    }
    fn extra_kept(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        self.kept(inputs, output).0
    }
    fn extra_kept_cpu(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        // kiln's fused attention and layer normalizations (2.6 outputs fewer: statistics per
        // row only).
        let s = inputs[0][0] as f64;
        let scores = attention::kept(self.dims(inputs), s, s).1;
        self.kept(inputs, output).0
            - attention::SCORES_NOT_KEPT_ON_CPU * scores
            - 2.6 * super::size(output)
    }
    fn largest_tensor(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        self.kept(inputs, output).1
    }
    fn flops(&self, _: &[&[usize]], output: &[usize], trainable: usize) -> f64 {
        attention::flops(trainable, output[0] as f64, output[1] as f64)
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let dims = self.dims(&[&x.shape]);
        let (f, i, eps) = (dims[0], self.intermediate_dim, self.layer_norm_epsilon);
        let prefix = |part: &str| format!("{name}/{part}/");
        let pair = [x.name.as_str(), x.name.as_str()];
        let a = attention::onnx(g, &prefix("self_attention_layer"), pair, dims, true, None)?;
        let r = g.node(name, "Add", &[&x.name, &a], vec![]);
        let x1 = g.layer_norm(&prefix("self_attention_layer_norm"), &r, f, eps)?;
        let ff = prefix("feedforward_intermediate_dense");
        let hidden = g.dense(&ff, &x1, [f, i], true)?;
        let hidden = activation_onnx(g, name, hidden, self.activation, Layout::Seq);
        let out = g.dense(&prefix("feedforward_output_dense"), &hidden, [i, f], true)?;
        let r = g.node(name, "Add", &[&x1, &out], vec![]);
        g.layer_norm(&prefix("feedforward_layer_norm"), &r, f, eps)
    }
}

impl TransformerEncoder {
    /// Values kept (attention, residual sums, two LayerNormalizations, the feed-forward
    /// network) and the largest tensor, per example.
    fn kept(&self, inputs: &[&[usize]], output: &[usize]) -> (f64, f64) {
        let s = inputs[0][0] as f64;
        let (extra, scores) = attention::kept(self.dims(inputs), s, s);
        let inner = s * self.intermediate_dim as f64;
        let out = super::size(output);
        let largest = super::largest(inputs, output);
        (
            extra + 5.6 * out + 2.0 * inner,
            largest.max(scores).max(inner),
        )
    }
}

impl LayerConfig for TransformerEncoder {
    const CLASS_NAME: &'static str = "TransformerEncoder";
}
