//! `keras.layers.GaussianDropout(rate, seed=None)`: multiplies by normal noise of mean 1 while
//! training; the identity at inference.

use serde::{Deserialize, Serialize};

use super::noise::{multiply_normal, noise_layer};
use crate::model::act::{Act, ElementWise};
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};

/// `GaussianDropout(rate, seed)`: `x * normal(1, sqrt(rate / (1 - rate)))` in training. kiln
/// draws from the run's seeded generator; `seed` is accepted for Keras configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GaussianDropout {
    /// The dropout rate whose variance the noise has, in `[0, 1)`.
    pub rate: f64,
    /// Keras' seed (accepted; kiln's draws follow the run's seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl ElementWise for GaussianDropout {
    fn apply<const D: usize>(&self, t: burn::prelude::Tensor<D>) -> burn::prelude::Tensor<D> {
        multiply_normal(t, self.rate)
    }
}

impl Layer for GaussianDropout {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    noise_layer!(elementwise rate, unit_rate);
    fn extra_kept(&self, _: &[&[usize]], output: &[usize]) -> f64 {
        // The noise.
        super::size(output)
    }
}

impl LayerConfig for GaussianDropout {
    const CLASS_NAME: &'static str = "GaussianDropout";
}
