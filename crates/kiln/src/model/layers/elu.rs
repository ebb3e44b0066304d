//! `keras.layers.ELU(alpha=1.0)`: `x` for `x > 0`, `alpha * (exp(x) - 1)` below.

use burn::prelude::*;
use burn::tensor::activation::elu;
use serde::{Deserialize, Serialize};

use super::pointwise::pointwise_layer;
use crate::model::act::ElementWise;
use crate::model::layer::{Layer, LayerConfig};
use crate::onnx::{OnnxGraph, OnnxValue, float};

fn default_alpha() -> f64 {
    1.0
}

/// `ELU(alpha)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ELU {
    /// Scale of the negative part.
    #[serde(default = "default_alpha")]
    pub alpha: f64,
}

impl Default for ELU {
    fn default() -> Self {
        ELU {
            alpha: default_alpha(),
        }
    }
}

impl ElementWise for ELU {
    fn apply<const D: usize>(&self, t: Tensor<D>) -> Tensor<D> {
        elu(t, self.alpha)
    }
}

impl Layer for ELU {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    pointwise_layer!();
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let alpha = vec![float("alpha", self.alpha as f32)];
        Ok(g.node(name, "Elu", &[&inputs[0].name], alpha))
    }
}

impl LayerConfig for ELU {
    const CLASS_NAME: &'static str = "ELU";
}
