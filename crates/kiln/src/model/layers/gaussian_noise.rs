//! `keras.layers.GaussianNoise(stddev, seed=None)`: adds zero-mean normal noise while
//! training; the identity at inference.

use serde::{Deserialize, Serialize};

use super::noise::{add_normal, noise_layer};
use crate::model::act::{Act, ElementWise};
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};

/// `GaussianNoise(stddev, seed)`: `x + normal(0, stddev)` in training. kiln draws from the
/// run's seeded generator; `seed` is accepted for Keras configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GaussianNoise {
    /// Standard deviation of the noise, in `[0, 1]`.
    pub stddev: f64,
    /// Keras' seed (accepted; kiln's draws follow the run's seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl ElementWise for GaussianNoise {
    fn apply<const D: usize>(&self, t: burn::prelude::Tensor<D>) -> burn::prelude::Tensor<D> {
        add_normal(t, self.stddev)
    }
}

impl Layer for GaussianNoise {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    noise_layer!(elementwise stddev, unit_interval);
}

impl LayerConfig for GaussianNoise {
    const CLASS_NAME: &'static str = "GaussianNoise";
}
