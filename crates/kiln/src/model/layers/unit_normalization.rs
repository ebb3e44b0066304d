//! `keras.layers.UnitNormalization(axis=-1)`: each position's features divided by their L2
//! norm.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::pointwise::last_axis;
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue, int, ints};

fn default_axis() -> i64 {
    -1
}

/// Keras' `ops.normalize(x, order=2, epsilon=1e-12)` bound: `1 / norm` is at most `1e12`.
const MAX_INVERSE_NORM: f64 = 1e12;

/// `UnitNormalization(axis)` over the last axis: `x * min(1 / sqrt(sum(x²)), 1e12)`, as
/// Keras' `ops.normalize`. Other axes are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitNormalization {
    /// The axis, Keras counting the batch as 0: `-1` or the input's last.
    #[serde(default = "default_axis")]
    pub axis: i64,
}

impl Default for UnitNormalization {
    fn default() -> Self {
        UnitNormalization {
            axis: default_axis(),
        }
    }
}

/// `t` over its L2 norm along `dim`.
fn unit<const D: usize>(t: Tensor<D>, dim: usize) -> Tensor<D> {
    let inverse = t.clone().square().sum_dim(dim).sqrt().recip();
    t * inverse.clamp_max(MAX_INVERSE_NORM)
}

impl Layer for UnitNormalization {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        last_axis(self.axis, inputs[0])?;
        Ok(inputs[0].to_vec())
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        match inputs.pop().expect("one input") {
            Act::Flat(t) => Act::Flat(unit(t, 1)),
            Act::Seq(t) => Act::Seq(unit(t, 2)),
            Act::Image(t) => Act::Image(unit(t, 1)),
            Act::Volume(_) => crate::model::act::volume_refused("UnitNormalization"),
        }
    }
    fn extra_kept(&self, _: &[&[usize]], output: &[usize]) -> f64 {
        // The output and the per-position norms.
        1.1 * super::size(output)
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let axis = x.layout().feature_axis();
        let attrs = vec![ints("axes", &[axis]), int("keepdims", 1)];
        let squares = g.node(name, "ReduceSumSquare", &[&x.name], attrs);
        let norm = g.node(name, "Sqrt", &[&squares], vec![]);
        let inverse = g.node(name, "Reciprocal", &[&norm], vec![]);
        let bound = g.scalar(name, MAX_INVERSE_NORM as f32);
        let inverse = g.node(name, "Min", &[&inverse, &bound], vec![]);
        Ok(g.node(name, "Mul", &[&x.name, &inverse], vec![]))
    }
}

impl LayerConfig for UnitNormalization {
    const CLASS_NAME: &'static str = "UnitNormalization";
}
