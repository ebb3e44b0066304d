//! `keras.layers.Resizing(height, width, interpolation="bilinear", crop_to_aspect_ratio=False)`:
//! resizes `(height, width, channels)` images as TensorFlow's `resize` does (half-pixel
//! centers, no antialiasing), optionally after cropping the largest centered box of the
//! target's aspect ratio.

use serde::{Deserialize, Serialize};

use super::image_ops::{sized_output, 
    CropBox, Interpolation, aspect_crop, crop_resize, onnx_crop_resize, spatial,
};
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// `Resizing(height, width, interpolation, crop_to_aspect_ratio)`: `(h, w, c)` to
/// `(height, width, c)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resizing {
    /// Output height.
    pub height: usize,
    /// Output width.
    pub width: usize,
    /// `"bilinear"` (default) or `"nearest"`.
    #[serde(default)]
    pub interpolation: Interpolation,
    /// Crop the largest centered box of the output's aspect ratio first (no distortion).
    #[serde(default)]
    pub crop_to_aspect_ratio: bool,
}

impl Resizing {
    /// The box of an `[h, w]` image that is resized.
    fn crop_box(&self, [h, w]: [usize; 2]) -> CropBox {
        match self.crop_to_aspect_ratio {
            true => aspect_crop([h, w], [self.height, self.width]),
            false => [0, 0, h, w],
        }
    }
}

impl Layer for Resizing {
    crate::serde_layer!();
    sized_output!();
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let t = inputs.remove(0).into_image();
        let b = self.crop_box(spatial(&t));
        let out = [self.height, self.width];
        Act::Image(crop_resize(t, b, Some(self.interpolation), out))
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn flops(&self, _: &[&[usize]], output: &[usize], _: usize) -> f64 {
        super::image_ops::resample_flops(self.interpolation, output)
    }
    /// `Slice`s of the crop box (with `crop_to_aspect_ratio`), then `Resize`.
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let [h, w, _] = super::image_shape(&inputs[0].shape, "Resizing")?;
        let b = self.crop_box([h, w]);
        let out = [self.height, self.width];
        Ok(onnx_crop_resize(g, name, &inputs[0], b, Some(self.interpolation), out))
    }
}

impl LayerConfig for Resizing {
    const CLASS_NAME: &'static str = "Resizing";
}
