//! `keras.layers.RandomCrop(height, width, seed=None)`: while training, a `height x width` box
//! at a random place (one place per batch, as Keras 3 draws it) of images larger than that on
//! both sides; otherwise (at inference, or for smaller images) a `height x width` box from the
//! corner of the largest centered box of the target's aspect ratio, cut at the image's edges
//! and resized to `height x width` (bilinear), as Keras 3 computes it.
//!
//! Keras 3.15 computes that centered box at inference but then returns the input unchanged,
//! which contradicts the layer's own output shape; kiln applies the box, as Keras 2 did.

use serde::{Deserialize, Serialize};

use super::image_ops::{sized_output, 
    CropBox, Interpolation, aspect_crop, crop_resize, onnx_crop_resize, spatial, uniform,
};
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// `RandomCrop(height, width, seed)`: `(h, w, c)` to `(height, width, c)`. kiln draws from the
/// run's seeded generator; `seed` is accepted for Keras configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomCrop {
    /// Output height.
    pub height: usize,
    /// Output width.
    pub width: usize,
    /// Keras' seed (accepted; kiln's draws follow the run's seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl RandomCrop {
    /// The box Keras 3 crops when it does not draw one: `height x width` (cut at the image's
    /// edges) from the corner of the centered box of the target's aspect ratio, and whether
    /// it needs resizing.
    fn center(&self, [h, w]: [usize; 2]) -> (CropBox, Option<Interpolation>) {
        let [top, left, _, _] = aspect_crop([h, w], [self.height, self.width]);
        let b = [top, left, self.height.min(h - top), self.width.min(w - left)];
        let resized = (b[2..] != [self.height, self.width]).then_some(Interpolation::Bilinear);
        (b, resized)
    }
}

impl Layer for RandomCrop {
    crate::serde_layer!();
    sized_output!();
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, ctx: ForwardContext) -> Act {
        let t = inputs.remove(0).into_image();
        let [h, w] = spatial(&t);
        let out = [self.height, self.width];
        if ctx.training && h > self.height && w > self.width {
            let device = t.device();
            let top = uniform(&device, 1, (0.0, (h - self.height + 1) as f64))[0] as usize;
            let left = uniform(&device, 1, (0.0, (w - self.width + 1) as f64))[0] as usize;
            let b = [top.min(h - self.height), left.min(w - self.width), out[0], out[1]];
            return Act::Image(crop_resize(t, b, None, out));
        }
        let (b, resized) = self.center([h, w]);
        Act::Image(crop_resize(t, b, resized, out))
    }
    fn saves_input(&self) -> bool {
        false
    }
    /// The inference pass: `Slice`s of the centered box, then `Resize` where needed.
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let [h, w, _] = super::image_shape(&inputs[0].shape, "RandomCrop")?;
        let (b, resized) = self.center([h, w]);
        let out = [self.height, self.width];
        Ok(onnx_crop_resize(g, name, &inputs[0], b, resized, out))
    }
}

impl LayerConfig for RandomCrop {
    const CLASS_NAME: &'static str = "RandomCrop";
}
