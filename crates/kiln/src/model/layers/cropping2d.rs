//! `keras.layers.Cropping2D(cropping=((0, 0), (0, 0)))`: drops rows and columns at the edges
//! of `(height, width, channels)` images.

use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::args::{Pads2, keras_shape};
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// `Cropping2D(cropping)`: `(h, w, c)` to `(h - top - bottom, w - left - right, c)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cropping2D {
    /// An integer, `[rows, cols]` (each at both ends) or `[[top, bottom], [left, right]]`.
    #[serde(default = "none")]
    pub cropping: Pads2,
}

fn none() -> Pads2 {
    Pads2([[0, 0], [0, 0]])
}

impl Layer for Cropping2D {
    crate::serde_layer!();
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [h, w, c] = super::image_shape(inputs[0], "Cropping2D")?;
        let [[top, bottom], [left, right]] = self.cropping.0;
        if top + bottom >= h || left + right >= w {
            return Err(format!(
                "`cropping` {:?} removes all rows or columns of the input {}",
                self.cropping.0,
                keras_shape(inputs[0])
            ));
        }
        Ok(vec![h - top - bottom, w - left - right, c])
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let t = inputs.remove(0).into_image();
        let [_, _, h, w] = t.dims();
        let [[top, bottom], [left, right]] = self.cropping.0;
        Act::Image(
            t.narrow(2, top, h - top - bottom)
                .narrow(3, left, w - left - right),
        )
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn passes_values(&self) -> bool {
        true
    }
    /// Two `Slice`s of the NCHW value (rows on axis 2, columns on axis 3).
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let [h, w, _] = super::image_shape(&inputs[0].shape, "Cropping2D")?;
        let [[top, bottom], [left, right]] = self.cropping.0;
        let rows = g.slice(name, &inputs[0].name, 2, top, h - bottom);
        Ok(g.slice(name, &rows, 3, left, w - right))
    }
}

impl LayerConfig for Cropping2D {
    const CLASS_NAME: &'static str = "Cropping2D";
}
