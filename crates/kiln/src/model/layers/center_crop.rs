//! `keras.layers.CenterCrop(height, width)`: the centered `height x width` box of
//! `(height, width, channels)` images; an image smaller than that on either side is resized
//! instead, after cropping the largest centered box of the target's aspect ratio (Keras'
//! `smart_resize`).

use serde::{Deserialize, Serialize};

use super::image_ops::{sized_output, 
    CropBox, Interpolation, aspect_crop, crop_resize, onnx_crop_resize, spatial,
};
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// `CenterCrop(height, width)`: `(h, w, c)` to `(height, width, c)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CenterCrop {
    /// Output height.
    pub height: usize,
    /// Output width.
    pub width: usize,
}

impl CenterCrop {
    /// The box `[top, left, height, width]` of an `[h, w]` image, and how it is resized.
    fn crop_box(&self, [h, w]: [usize; 2]) -> (CropBox, Option<Interpolation>) {
        let target = [self.height, self.width];
        match h >= self.height && w >= self.width {
            true => {
                let [top, left] = [(h - self.height) / 2, (w - self.width) / 2];
                ([top, left, self.height, self.width], None)
            }
            false => (aspect_crop([h, w], target), Some(Interpolation::Bilinear)),
        }
    }
}

impl Layer for CenterCrop {
    crate::serde_layer!();
    sized_output!();
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let t = inputs.remove(0).into_image();
        let (b, resized) = self.crop_box(spatial(&t));
        Act::Image(crop_resize(t, b, resized, [self.height, self.width]))
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn passes_values(&self) -> bool {
        true
    }
    /// Two `Slice`s of the NCHW value (then `Resize` for an image smaller than the box).
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let [h, w, _] = super::image_shape(&inputs[0].shape, "CenterCrop")?;
        let out = [self.height, self.width];
        let (b, resized) = self.crop_box([h, w]);
        Ok(onnx_crop_resize(g, name, &inputs[0], b, resized, out))
    }
}

impl LayerConfig for CenterCrop {
    const CLASS_NAME: &'static str = "CenterCrop";
}
