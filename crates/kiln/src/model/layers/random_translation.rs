//! `keras.layers.RandomTranslation(height_factor, width_factor, fill_mode="reflect",
//! interpolation="bilinear", seed=None, fill_value=0.0)`: shifts each image of a training
//! batch by fractions of its height and width drawn per image; the identity at inference.

use serde::{Deserialize, Serialize};

use super::image_ops::{
    Factor, FillMode, Interpolation, affine_in_training, affine_layer, fill_of, uniform,
};
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};

/// `RandomTranslation(height_factor, width_factor, fill_mode, interpolation, seed,
/// fill_value)`. kiln draws from the run's seeded generator; `seed` is accepted for Keras
/// configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomTranslation {
    /// `f` (`[-f, f]`) or `[lower, upper]`, fractions of the height in `[-1, 1]` (positive:
    /// down).
    pub height_factor: Factor,
    /// As `height_factor`, of the width (positive: right).
    pub width_factor: Factor,
    /// `"reflect"` (default), `"wrap"`, `"constant"` or `"nearest"`.
    #[serde(default)]
    pub fill_mode: FillMode,
    /// `"bilinear"` (default) or `"nearest"`.
    #[serde(default)]
    pub interpolation: Interpolation,
    /// Keras' seed (accepted; kiln's draws follow the run's seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The value outside the image with `fill_mode = "constant"`.
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub fill_value: f64,
}

impl RandomTranslation {
    fn ranges(&self) -> Result<[(f64, f64); 2], String> {
        Ok([
            self.height_factor.symmetric("height_factor", false)?,
            self.width_factor.symmetric("width_factor", false)?,
        ])
    }
}

impl Layer for RandomTranslation {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        self.ranges().map(|_| ())
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, ctx: ForwardContext) -> Act {
        let [height, width] = self.ranges().expect("validated");
        affine_in_training(inputs.remove(0), ctx, fill_of!(self), |device, b, [h, w]| {
            let dy = uniform(device, b, height);
            let dx = uniform(device, b, width);
            dx.into_iter()
                .zip(dy)
                .map(|(x, y)| [1.0, 0.0, -x * w as f32, 0.0, 1.0, -y * h as f32])
                .collect()
        })
    }
    affine_layer!();
}

impl LayerConfig for RandomTranslation {
    const CLASS_NAME: &'static str = "RandomTranslation";
}
