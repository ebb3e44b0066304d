//! `keras.layers.RandomRotation(factor, fill_mode="reflect", interpolation="bilinear",
//! seed=None, fill_value=0.0)`: turns each image of a training batch about its center by an
//! angle drawn per image from `factor` (in fractions of a full turn: `0.1` is up to 36
//! degrees either way); the identity at inference.

use serde::{Deserialize, Serialize};

use super::image_ops::{
    Affine, Factor, FillMode, Interpolation, affine_in_training, affine_layer, fill_of, uniform,
};
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};

/// `RandomRotation(factor, fill_mode, interpolation, seed, fill_value)`. kiln draws from the
/// run's seeded generator; `seed` is accepted for Keras configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomRotation {
    /// `f` (turns in `[-f, f]`) or `[lower, upper]`, fractions of a full turn in `[-1, 1]`.
    pub factor: Factor,
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

impl RandomRotation {
    fn range(&self) -> Result<(f64, f64), String> {
        self.factor.bounded("factor", (-1.0, 1.0))
    }
}

/// Keras' rotation about the center of an `[h, w]` image by `degrees` (its
/// `_compute_affine_matrix` without shear, scale or translation).
fn rotation(degrees: f32, [h, w]: [usize; 2]) -> Affine {
    let angle = degrees * (std::f32::consts::PI / 180.0);
    let (cx, cy) = (0.5 * (w as f32 - 1.0), 0.5 * (h as f32 - 1.0));
    let (cos, sin) = (angle.cos(), angle.sin());
    let (a0, a1, b0, b1) = (cos, -sin, sin, cos);
    [a0, a1, cx - cx * a0 - cy * a1, b0, b1, cy - cx * b0 - cy * b1]
}

impl Layer for RandomRotation {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        self.range().map(|_| ())
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, ctx: ForwardContext) -> Act {
        let (lo, hi) = self.range().expect("validated");
        affine_in_training(inputs.remove(0), ctx, fill_of!(self), |device, b, hw| {
            uniform(device, b, (lo * 360.0, hi * 360.0))
                .into_iter()
                .map(|d| rotation(d, hw))
                .collect()
        })
    }
    affine_layer!();
}

impl LayerConfig for RandomRotation {
    const CLASS_NAME: &'static str = "RandomRotation";
}
