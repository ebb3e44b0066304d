//! `keras.layers.Cropping1D(cropping=1)`: drops steps at the start and end of
//! `(steps, features)` inputs.

use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::args::Pair;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// `Cropping1D(cropping)`: `(steps, features)` to `(steps - start - end, features)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cropping1D {
    /// Steps dropped: an integer (both ends) or `[start, end]`.
    #[serde(default = "one")]
    pub cropping: Pair,
}

fn one() -> Pair {
    Pair([1, 1])
}

impl Layer for Cropping1D {
    crate::serde_layer!();
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [s, f] = super::steps_features(inputs[0], "Cropping1D")?;
        let cut = self.cropping.0[0] + self.cropping.0[1];
        if cut >= s {
            return Err(format!(
                "cropping {:?} removes all {s} steps of the input",
                self.cropping.0
            ));
        }
        Ok(vec![s - cut, f])
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let t = inputs.remove(0).into_seq();
        let [_, s, _] = t.dims();
        let [start, end] = self.cropping.0;
        Act::Seq(t.narrow(1, start, s - start - end))
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let [s, _] = super::steps_features(&inputs[0].shape, "Cropping1D")?;
        let [start, end] = self.cropping.0;
        Ok(g.slice(name, &inputs[0].name, 1, start, s - end))
    }
}

impl LayerConfig for Cropping1D {
    const CLASS_NAME: &'static str = "Cropping1D";
}
