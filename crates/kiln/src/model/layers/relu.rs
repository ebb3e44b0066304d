//! `keras.layers.ReLU(max_value=None, negative_slope=0.0, threshold=0.0)`: `min(x, max_value)`
//! for `x >= threshold`, `negative_slope * (x - threshold)` below it.

use burn::prelude::*;
use burn::tensor::activation::relu;
use serde::{Deserialize, Serialize};

use super::pointwise::{non_negative, pointwise_layer};
use crate::model::act::ElementWise;
use crate::model::layer::{Layer, LayerConfig};
use crate::onnx::{OnnxGraph, OnnxValue, float, int};

/// `ReLU(max_value, negative_slope, threshold)`, Keras' `activations.relu` as a layer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReLU {
    /// Largest output (`None`: unbounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_value: Option<f64>,
    /// Slope below the threshold.
    #[serde(default)]
    pub negative_slope: f64,
    /// Values below it are cut (or leak).
    #[serde(default)]
    pub threshold: f64,
}

impl ElementWise for ReLU {
    fn apply<const D: usize>(&self, t: Tensor<D>) -> Tensor<D> {
        // Keras' formula, term by term (so that the gradients agree at every point Keras'
        // do): the negative part, the cut positive part, the clip.
        let negative = (self.negative_slope != 0.0)
            .then(|| relu(t.clone().neg().add_scalar(self.threshold)));
        let th = self.threshold;
        let mut y = if th == 0.0 {
            relu(t)
        } else {
            t.clone() * t.greater_elem(th).float()
        };
        if let Some(m) = self.max_value {
            y = y.clamp(0.0, m);
        }
        match negative {
            Some(n) => y - n * self.negative_slope,
            None => y,
        }
    }
}

impl Layer for ReLU {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    pointwise_layer!();
    fn passes_values(&self) -> bool {
        // Without a slope or a cap the outputs are inputs or 0 (the threshold only picks
        // which); a cap such as 6.1 is not a 16-bit value.
        self.negative_slope == 0.0 && self.max_value.is_none()
    }
    fn validate(&self) -> Result<(), String> {
        non_negative("negative_slope", self.negative_slope)?;
        non_negative("threshold", self.threshold)?;
        self.max_value
            .map_or(Ok(()), |m| non_negative("max_value", m))
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = inputs[0].name.as_str();
        let plain = self.max_value.is_none() && self.threshold == 0.0;
        if plain && self.negative_slope == 0.0 {
            return Ok(g.node(name, "Relu", &[x], vec![]));
        }
        if plain {
            let alpha = vec![float("alpha", self.negative_slope as f32)];
            return Ok(g.node(name, "LeakyRelu", &[x], alpha));
        }
        let mut y = if self.threshold == 0.0 {
            g.node(name, "Relu", &[x], vec![])
        } else {
            let th = g.scalar(name, self.threshold as f32);
            let above = g.node(name, "Greater", &[x, &th], vec![]);
            let mask = g.node(name, "Cast", &[&above], vec![int("to", 1)]);
            g.node(name, "Mul", &[x, &mask], vec![])
        };
        if let Some(m) = self.max_value {
            let (lo, hi) = (g.scalar(name, 0.0), g.scalar(name, m as f32));
            y = g.node(name, "Clip", &[&y, &lo, &hi], vec![]);
        }
        if self.negative_slope == 0.0 {
            return Ok(y);
        }
        let th = g.scalar(name, self.threshold as f32);
        let below = g.node(name, "Sub", &[&th, x], vec![]);
        let below = g.node(name, "Relu", &[&below], vec![]);
        let slope = g.scalar(name, self.negative_slope as f32);
        let leak = g.node(name, "Mul", &[&below, &slope], vec![]);
        Ok(g.node(name, "Sub", &[&y, &leak], vec![]))
    }
}

impl LayerConfig for ReLU {
    const CLASS_NAME: &'static str = "ReLU";
}
