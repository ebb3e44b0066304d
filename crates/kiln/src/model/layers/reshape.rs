//! `keras.layers.Reshape(target_shape)`: the same values per example in another shape, in
//! Keras' (channels-last) element order.

use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::args::keras_shape;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

use super::keras_order::{from_rows, into_rows, keras_shape_of, onnx_reshape};

/// `Reshape(target_shape)`: the output shape without the batch axis; one axis may be `-1`,
/// inferred from the input's size (Keras' rule).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reshape {
    /// 1 to 3 axes (kiln's layers take vectors, sequences and images), positive or one `-1`.
    pub target_shape: Vec<i64>,
}

impl Reshape {
    /// The target shape for an input of `size` values per example.
    fn resolve(&self, size: usize) -> Result<Vec<usize>, String> {
        let known: usize = self
            .target_shape
            .iter()
            .filter(|&&d| d > 0)
            .product::<i64>() as usize;
        let shape = |inferred: usize| {
            let axes = self.target_shape.iter();
            axes.map(|&d| if d < 0 { inferred } else { d as usize })
                .collect()
        };
        if !self.target_shape.contains(&-1) {
            return match known == size {
                true => Ok(shape(0)),
                false => Err(format!(
                    "`target_shape` {:?} holds {known} values per example, the input holds \
                     {size}; make the product {size}, or write -1 for one axis to infer it",
                    self.target_shape
                )),
            };
        }
        match size % known {
            0 => Ok(shape(size / known)),
            _ => Err(format!(
                "`target_shape` {:?} cannot hold the input's {size} values per example: {size} \
                 is not a multiple of {known}, the product of the other axes",
                self.target_shape
            )),
        }
    }
}

impl Layer for Reshape {
    crate::serde_layer!();
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        self.resolve(inputs[0].iter().product())
            .map_err(|e| format!("{e} (input shape {})", keras_shape(inputs[0])))
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let x = inputs.remove(0);
        let size = keras_shape_of(&x).iter().product();
        let shape = self.resolve(size).expect("checked by output_shape");
        from_rows(into_rows(x), &shape)
    }
    fn validate(&self) -> Result<(), String> {
        let t = &self.target_shape;
        if t.is_empty() || t.len() > 3 {
            return Err(format!(
                "`target_shape` {t:?} has {} axes; kiln's layers take 1 to 3 (features), \
                 (steps, features) or (height, width, channels)",
                t.len()
            ));
        }
        if let Some(bad) = t.iter().find(|&&d| d == 0 || d < -1) {
            return Err(format!(
                "`target_shape` {t:?} has the axis {bad}; use positive sizes, or -1 for one \
                 axis to infer it"
            ));
        }
        if t.iter().filter(|&&d| d == -1).count() > 1 {
            return Err(format!(
                "`target_shape` {t:?} has more than one -1; only one axis can be inferred"
            ));
        }
        Ok(())
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn passes_values(&self) -> bool {
        true
    }
    fn computes_in_half(&self) -> bool {
        true
    }
    /// `Reshape`, with `Transpose`s to and from NHWC around it for images.
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let shape = self.resolve(inputs[0].shape.iter().product())?;
        Ok(onnx_reshape(g, name, &inputs[0], &shape))
    }
}

impl LayerConfig for Reshape {
    const CLASS_NAME: &'static str = "Reshape";
}
