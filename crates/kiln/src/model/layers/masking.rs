//! `keras.layers.Masking(mask_value=0.0)` (`keras/src/layers/core/masking.py`): marks the
//! steps of a `(steps, features)` input whose features all equal `mask_value` as padding.
//! The output carries the mask (recurrent layers skip those steps) and is zero at them.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};

/// `Masking(mask_value)`: mask `[batch, steps]` is 1 where any feature differs from
/// `mask_value`; output `x · mask`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Masking {
    /// The padding value.
    #[serde(default)]
    pub mask_value: f64,
}

impl Masking {
    /// `[batch, steps]`: 1 where a step has a feature other than `mask_value`.
    fn mask(&self, x: &Tensor<3>) -> Tensor<2> {
        let differs = x.clone().detach().not_equal_elem(self.mask_value).float();
        differs.max_dim(2).squeeze_dim(2)
    }
}

impl Layer for Masking {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        match self.mask_value.is_finite() {
            true => Ok(()),
            false => Err(format!("`mask_value` must be finite, got {}", self.mask_value)),
        }
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        super::steps_features(inputs[0], "Masking")?;
        Ok(inputs[0].to_vec())
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let x = inputs.pop().expect("one input").into_seq();
        let m = self.mask(&x).unsqueeze_dim::<3>(2);
        Act::Seq(x * m)
    }
    fn supports_masking(&self) -> bool {
        true
    }
    fn compute_mask(&self, inputs: &[&Act], _: &[Option<Tensor<2>>]) -> Option<Tensor<2>> {
        match inputs.first() {
            Some(Act::Seq(x)) => Some(self.mask(x)),
            _ => None,
        }
    }
    fn onnx_unsupported(&self) -> String {
        super::MASK_NOT_EXPORTED.into()
    }
}

impl LayerConfig for Masking {
    const CLASS_NAME: &'static str = "Masking";
}
