//! `keras.layers.RandomContrast(factor, value_range=[0, 255], seed=None)`: scales each image's
//! deviation from its per-channel mean by a factor drawn per image from
//! `[1 - lower, 1 + upper]`, then clips to `value_range`; the identity at inference. As in
//! Keras 3, a single number `f` gives `[0, f]` (factors in `[1, 1 + f]`).

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::image_ops::{Factor, per_example, pixel_adjustment, uniform};
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};

/// `RandomContrast(factor, value_range, seed)`. kiln draws from the run's seeded generator;
/// `seed` is accepted for Keras configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomContrast {
    /// `f` or `[lower, upper]` in `[0, 1]` (Keras' bounds).
    pub factor: Factor,
    /// The pixel range the output is clipped to.
    #[serde(default = "pixels")]
    pub value_range: [f64; 2],
    /// Keras' seed (accepted; kiln's draws follow the run's seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

pub(super) fn pixels() -> [f64; 2] {
    [0.0, 255.0]
}

impl RandomContrast {
    fn range(&self) -> Result<(f64, f64), String> {
        self.factor.bounded("factor", (0.0, 1.0))
    }

    fn adjust(&self, t: Tensor<4>) -> Tensor<4> {
        let (lo, hi) = self.range().expect("validated");
        let [b, ..] = t.dims();
        let f = per_example(&t, uniform(&t.device(), b, (1.0 - lo, 1.0 + hi)));
        let mean = t.clone().mean_dim(2).mean_dim(3);
        let [low, high] = self.value_range;
        ((t - mean.clone()) * f + mean).clamp(low, high)
    }
}

impl Layer for RandomContrast {
    crate::serde_layer!();
    pixel_adjustment!();
}

impl LayerConfig for RandomContrast {
    const CLASS_NAME: &'static str = "RandomContrast";
}
