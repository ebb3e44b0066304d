//! `keras.layers.LeakyReLU(negative_slope=0.3)`: `x` for `x >= 0`, `negative_slope * x` below.

use burn::prelude::*;
use burn::tensor::activation::leaky_relu;
use serde::{Deserialize, Serialize};

use super::pointwise::{non_negative, pointwise_layer};
use crate::model::act::ElementWise;
use crate::model::layer::{Layer, LayerConfig};
use crate::onnx::{OnnxGraph, OnnxValue, float};

fn default_slope() -> f64 {
    0.3
}

/// `LeakyReLU(negative_slope)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeakyReLU {
    /// Slope below zero (Keras 2's `alpha` is accepted as its old name).
    #[serde(default = "default_slope", alias = "alpha")]
    pub negative_slope: f64,
}

impl Default for LeakyReLU {
    fn default() -> Self {
        LeakyReLU {
            negative_slope: default_slope(),
        }
    }
}

impl ElementWise for LeakyReLU {
    fn apply<const D: usize>(&self, t: Tensor<D>) -> Tensor<D> {
        leaky_relu(t, self.negative_slope)
    }
}

impl Layer for LeakyReLU {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    pointwise_layer!();
    fn validate(&self) -> Result<(), String> {
        non_negative("negative_slope", self.negative_slope)
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let alpha = vec![float("alpha", self.negative_slope as f32)];
        Ok(g.node(name, "LeakyRelu", &[&inputs[0].name], alpha))
    }
}

impl LayerConfig for LeakyReLU {
    const CLASS_NAME: &'static str = "LeakyReLU";
}
