//! `keras.layers.Dropout(rate)`: zeroes a fraction `rate` of the inputs while training and
//! scales the rest by `1 / (1 - rate)`; the identity at inference.

use burn::prelude::*;
use burn::tensor::Distribution;
use serde::{Deserialize, Serialize};

use crate::model::act::{Act, ElementWise};
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};
use crate::tflite::{TfliteGraph, TfliteValue};

/// `Dropout(rate)`: output the input's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dropout {
    /// Fraction dropped, in `[0, 1)`.
    pub rate: f64,
}

/// Keeps each value with probability `keep` and scales the kept ones by `1 / keep`.
pub(super) struct Drop {
    /// The fraction kept.
    pub(super) keep: f64,
}

/// `x` with a fraction `rate` of its values dropped (the rest scaled by `1 / (1 - rate)`)
/// while `training`; `x` itself otherwise.
pub(super) fn dropped<const D: usize>(x: Tensor<D>, rate: f64, training: bool) -> Tensor<D> {
    match training && rate > 0.0 {
        true => Drop { keep: 1.0 - rate }.apply(x),
        false => x,
    }
}

impl ElementWise for Drop {
    fn apply<const D: usize>(&self, t: Tensor<D>) -> Tensor<D> {
        let mask = t.random_like(Distribution::Bernoulli(self.keep));
        t.mul(mask) * (1.0 / self.keep)
    }
}

impl Layer for Dropout {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        super::rate("rate", self.rate)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        Ok(inputs[0].to_vec())
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, ctx: ForwardContext) -> Act {
        let x = inputs.pop().expect("one input");
        if ctx.training && self.rate > 0.0 {
            x.map(Drop {
                keep: 1.0 - self.rate,
            })
        } else {
            x
        }
    }
    fn takes_volumes(&self) -> bool {
        true
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn supports_masking(&self) -> bool {
        true
    }

    fn extra_kept(&self, _: &[&[usize]], output: &[usize]) -> f64 {
        // The mask.
        output.iter().map(|&d| d as f64).product()
    }
    fn onnx(&self, _: &mut OnnxGraph, inputs: &[OnnxValue], _: &str) -> Result<String, String> {
        Ok(inputs[0].name.clone())
    }

    fn tflite(&self, _: &mut TfliteGraph, inputs: &[TfliteValue], _: &str) -> Result<TfliteValue, String> {
        // Inference: the identity.
        Ok(inputs[0].clone())
    }
}

impl LayerConfig for Dropout {
    const CLASS_NAME: &'static str = "Dropout";
}
