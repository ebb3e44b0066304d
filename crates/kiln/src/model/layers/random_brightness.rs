//! `keras.layers.RandomBrightness(factor, value_range=[0, 255], seed=None)`: adds to each
//! image a value drawn per image from `factor` (fractions of the value range: `0.2` adds up to
//! 20% of it either way), then clips to `value_range`; the identity at inference.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::image_ops::{Factor, per_example, pixel_adjustment, uniform};
use super::random_contrast::pixels;
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};

/// `RandomBrightness(factor, value_range, seed)`. kiln draws from the run's seeded generator;
/// `seed` is accepted for Keras configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomBrightness {
    /// `f` or `[lower, upper]` in `[-1, 1]`.
    pub factor: Factor,
    /// The pixel range: the draws are fractions of it, the output is clipped to it.
    #[serde(default = "pixels")]
    pub value_range: [f64; 2],
    /// Keras' seed (accepted; kiln's draws follow the run's seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl RandomBrightness {
    fn range(&self) -> Result<(f64, f64), String> {
        self.factor.bounded("factor", (-1.0, 1.0))
    }

    fn adjust(&self, t: Tensor<4>) -> Tensor<4> {
        let (lo, hi) = self.range().expect("validated");
        let [low, high] = self.value_range;
        let [b, ..] = t.dims();
        let span = high - low;
        let delta = per_example(&t, uniform(&t.device(), b, (lo * span, hi * span)));
        (t + delta).clamp(low, high)
    }
}

impl Layer for RandomBrightness {
    crate::serde_layer!();
    pixel_adjustment!();
}

impl LayerConfig for RandomBrightness {
    const CLASS_NAME: &'static str = "RandomBrightness";
}
