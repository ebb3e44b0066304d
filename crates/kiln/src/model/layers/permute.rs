//! `keras.layers.Permute(dims)`: reorders the axes of each example (the batch axis stays).

use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::args::keras_shape;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// `Permute(dims)`: output axis `i` is input axis `dims[i]`, counting Keras' axes from 1 (the
/// batch axis 0 excluded); `(2, 1)` swaps steps and features.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Permute {
    /// A permutation of `1..=rank`.
    pub dims: Vec<usize>,
}

impl Permute {
    /// The permutation of the values kiln runs (batch axis included). Images are NCHW inside
    /// kiln: Keras' (h, w, c) axes 1, 2, 3 are axes 2, 3, 1 there, so the Keras permutation is
    /// taken between NHWC views: NCHW -> NHWC, permute, -> NCHW, as one permutation.
    fn run_perm(&self) -> Vec<usize> {
        let keras: Vec<usize> = std::iter::once(0)
            .chain(self.dims.iter().copied())
            .collect();
        if keras.len() != 4 {
            return keras;
        }
        let (to_keras, from_keras) = ([0, 2, 3, 1], [0, 3, 1, 2]);
        from_keras.iter().map(|&k| to_keras[keras[k]]).collect()
    }
}

impl Layer for Permute {
    crate::serde_layer!();
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let input = inputs[0];
        if input.len() != self.dims.len() {
            return Err(format!(
                "`dims` {:?} permutes {} axes, the input {} has {}; list each of its axes 1 to \
                 {} once",
                self.dims,
                self.dims.len(),
                keras_shape(input),
                input.len(),
                input.len()
            ));
        }
        Ok(self.dims.iter().map(|&d| input[d - 1]).collect())
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let p = self.run_perm();
        match inputs.remove(0) {
            Act::Flat(t) => Act::Flat(t),
            Act::Seq(t) => Act::Seq(t.permute([p[0], p[1], p[2]])),
            Act::Image(t) => Act::Image(t.permute([p[0], p[1], p[2], p[3]])),
            Act::Volume(_) => crate::model::act::volume_refused("Permute"),
        }
    }
    fn validate(&self) -> Result<(), String> {
        let mut sorted = self.dims.clone();
        sorted.sort_unstable();
        if sorted != (1..=self.dims.len()).collect::<Vec<_>>() {
            return Err(format!(
                "`dims` {:?} is not a permutation of the axes 1 to {} (the batch axis 0 is \
                 excluded); list each axis once, e.g. [2, 1]",
                self.dims,
                self.dims.len()
            ));
        }
        Ok(())
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn passes_values(&self) -> bool {
        true
    }
    /// One `Transpose` (of the NCHW value for images).
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let perm: Vec<i64> = self.run_perm().into_iter().map(|a| a as i64).collect();
        Ok(g.transpose(name, &inputs[0].name, &perm))
    }
}

impl LayerConfig for Permute {
    const CLASS_NAME: &'static str = "Permute";
}
