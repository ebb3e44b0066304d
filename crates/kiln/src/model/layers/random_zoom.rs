//! `keras.layers.RandomZoom(height_factor, width_factor=None, fill_mode="reflect",
//! interpolation="bilinear", seed=None, fill_value=0.0)`: zooms each image of a training batch
//! about its center by factors drawn per image (a positive factor zooms out: `0.2` shows up to
//! 20% more of the scene, `-0.2` up to 20% less); the identity at inference.

use serde::{Deserialize, Serialize};

use super::image_ops::{
    Affine, Factor, FillMode, Interpolation, Range, affine_in_training, affine_layer, fill_of,
    uniform,
};
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};

/// `RandomZoom(height_factor, width_factor, fill_mode, interpolation, seed, fill_value)`.
/// kiln draws from the run's seeded generator; `seed` is accepted for Keras configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomZoom {
    /// `f` (`[-f, f]`) or `[lower, upper]`, each in `(-1, 1]`: the vertical zoom.
    pub height_factor: Factor,
    /// As `height_factor` for the horizontal zoom; absent: the vertical draw, keeping the
    /// aspect ratio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width_factor: Option<Factor>,
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

impl RandomZoom {
    /// The ranges of the vertical and (when given) horizontal factors.
    fn ranges(&self) -> Result<(Range, Option<Range>), String> {
        let h = self.height_factor.symmetric("height_factor", true)?;
        let w = match self.width_factor {
            Some(f) => Some(f.symmetric("width_factor", true)?),
            None => None,
        };
        Ok((h, w))
    }
}

/// Keras' zoom of an `[h, w]` image about its center by `[zx, zy]` (`_get_zoom_matrix`).
fn zoom([zx, zy]: [f32; 2], [h, w]: [usize; 2]) -> Affine {
    let x_offset = (w as f32 - 1.0) / 2.0 * (1.0 - zx);
    let y_offset = (h as f32 - 1.0) / 2.0 * (1.0 - zy);
    [zx, 0.0, x_offset, 0.0, zy, y_offset]
}

impl Layer for RandomZoom {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        self.ranges().map(|_| ())
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, ctx: ForwardContext) -> Act {
        let ((hl, hu), width) = self.ranges().expect("validated");
        affine_in_training(inputs.remove(0), ctx, fill_of!(self), |device, b, hw| {
            let zy = uniform(device, b, (1.0 + hl, 1.0 + hu));
            let zx = match width {
                Some((wl, wu)) => uniform(device, b, (1.0 + wl, 1.0 + wu)),
                None => zy.clone(),
            };
            zx.into_iter()
                .zip(zy)
                .map(|(x, y)| zoom([x, y], hw))
                .collect()
        })
    }
    affine_layer!();
}

impl LayerConfig for RandomZoom {
    const CLASS_NAME: &'static str = "RandomZoom";
}
