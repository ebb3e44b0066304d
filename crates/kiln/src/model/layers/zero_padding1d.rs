//! `keras.layers.ZeroPadding1D(padding=1)`: zero steps at the start and end of
//! `(steps, features)` inputs.

use burn::tensor::ops::PadMode;
use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::args::Pair;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// `ZeroPadding1D(padding)`: `(steps, features)` to `(start + steps + end, features)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZeroPadding1D {
    /// Zero steps added: an integer (both ends) or `[start, end]`.
    #[serde(default = "one")]
    pub padding: Pair,
}

fn one() -> Pair {
    Pair([1, 1])
}

impl Layer for ZeroPadding1D {
    crate::serde_layer!();
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [s, f] = super::steps_features(inputs[0], "ZeroPadding1D")?;
        Ok(vec![self.padding.0[0] + s + self.padding.0[1], f])
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let [start, end] = self.padding.0;
        let t = inputs.remove(0).into_seq();
        Act::Seq(t.pad([(start, end), (0, 0)], PadMode::Constant(0.0)))
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn passes_values(&self) -> bool {
        true
    }
    /// `Pad` (constant zeros): `[begins of N, S, F, ends of N, S, F]`.
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let [start, end] = self.padding.0.map(|p| p as i64);
        let pads = g.int64s(name, &[0, start, 0, 0, end, 0]);
        Ok(g.node(name, "Pad", &[&inputs[0].name, &pads], vec![]))
    }
}

impl LayerConfig for ZeroPadding1D {
    const CLASS_NAME: &'static str = "ZeroPadding1D";
}
