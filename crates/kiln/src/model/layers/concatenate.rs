//! `keras.layers.Concatenate(axis=-1)`: joins two or more inputs along one axis.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::args::keras_shape;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue, int};

/// `Concatenate(axis=-1)`: inputs of one rank whose shapes agree except along `axis`; the
/// output's `axis` is the sum of theirs. `axis` counts Keras' axes with the batch axis as 0
/// (`-1`, the last, is the features or channels).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Concatenate {
    /// The axis joined: `1..=rank` or negative from the end (`-1` the last).
    #[serde(default = "last_axis")]
    pub axis: i64,
}

fn last_axis() -> i64 {
    -1
}

impl Default for Concatenate {
    fn default() -> Self {
        Concatenate { axis: -1 }
    }
}

impl Concatenate {
    /// The axis as an index into a Keras shape without the batch axis.
    fn index(&self, rank: usize) -> Result<usize, String> {
        let a = if self.axis < 0 {
            rank as i64 + 1 + self.axis
        } else {
            self.axis
        };
        if a < 1 || a > rank as i64 {
            return Err(format!(
                "`axis` {} does not exist for inputs of rank {} (with the batch axis); use 1 to \
                 {rank} or -1 to -{rank}",
                self.axis,
                rank + 1
            ));
        }
        Ok(a as usize - 1)
    }

    /// The axis of the values kiln runs (with the batch axis; images NCHW: Keras' (h, w, c)
    /// axes 1, 2, 3 are 2, 3, 1 there).
    fn run_axis(&self, rank: usize) -> Result<usize, String> {
        let axis = self.index(rank)? + 1;
        Ok(if rank == 3 { [0, 2, 3, 1][axis] } else { axis })
    }
}

impl Layer for Concatenate {
    crate::serde_layer!();
    fn arity(&self) -> (usize, usize) {
        (2, usize::MAX)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let first = inputs[0];
        let axis = self.index(first.len())?;
        let mut out = first.to_vec();
        for other in &inputs[1..] {
            let agree = other.len() == first.len()
                && (0..first.len()).all(|d| d == axis || other[d] == first[d]);
            if !agree {
                return Err(format!(
                    "Concatenate(axis={}) needs inputs whose shapes agree except along that \
                     axis, got {} and {}",
                    self.axis,
                    keras_shape(first),
                    keras_shape(other)
                ));
            }
            out[axis] += other[axis];
        }
        Ok(out)
    }
    fn forward(&self, inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let rank = match &inputs[0] {
            Act::Flat(_) => 1,
            Act::Seq(_) => 2,
            Act::Image(_) => 3,
            Act::Volume(_) => crate::model::act::volume_refused("Concatenate"),
        };
        let axis = self.run_axis(rank).expect("checked by output_shape");
        macro_rules! cat {
            ($variant:ident, $dim:expr) => {
                Act::$variant(Tensor::cat(
                    inputs
                        .into_iter()
                        .map(|a| match a {
                            Act::$variant(t) => t,
                            other => panic!("shape checks guarantee one rank, got {other:?}"),
                        })
                        .collect(),
                    $dim,
                ))
            };
        }
        match rank {
            1 => cat!(Flat, axis),
            2 => cat!(Seq, axis),
            _ => cat!(Image, axis),
        }
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let axis = self.run_axis(inputs[0].shape.len())? as i64;
        let names: Vec<&str> = inputs.iter().map(|v| v.name.as_str()).collect();
        Ok(g.node(name, "Concat", &names, vec![int("axis", axis)]))
    }
}

impl LayerConfig for Concatenate {
    const CLASS_NAME: &'static str = "Concatenate";
}
