//! `keras.layers.MaxPooling1D` and `AveragePooling1D(pool_size=2, strides=None,
//! padding="valid")` on `(steps, channels)` inputs: one type, [`Pooling1D`], with the reduction
//! as its parameter; it runs as the 2-D pooling over an image of height 1.

use serde::{Deserialize, Serialize};

use super::conv::{image_as_seq, seq_as_image};
use super::pooling2d::{pool, pool_onnx};
use super::{steps_features, window};
use crate::model::act::Act;
use crate::model::args::Padding;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// A 1-D pooling window: the maximum (`MAX = true`, [`MaxPooling1D`]) or the mean
/// ([`AveragePooling1D`]; with `same` padding the padded steps are not counted, as in
/// TensorFlow). Output `(out_steps, channels)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pooling1D<const MAX: bool> {
    /// Window length (an integer or a 1-tuple, as in Keras).
    #[serde(default = "two", deserialize_with = "crate::model::args::int_or_one")]
    pub pool_size: usize,
    /// Step; `pool_size` when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::model::args::opt_int_or_one"
    )]
    pub strides: Option<usize>,
    /// `valid` or `same`.
    #[serde(default)]
    pub padding: Padding,
}

fn two() -> usize {
    2
}

/// `keras.layers.MaxPooling1D` (alias `MaxPool1D`).
pub type MaxPooling1D = Pooling1D<true>;
/// `keras.layers.AveragePooling1D` (alias `AvgPool1D`).
pub type AveragePooling1D = Pooling1D<false>;

impl<const MAX: bool> Default for Pooling1D<MAX> {
    fn default() -> Self {
        Pooling1D {
            pool_size: 2,
            strides: None,
            padding: Padding::Valid,
        }
    }
}

impl<const MAX: bool> Pooling1D<MAX> {
    fn step(&self) -> usize {
        self.strides.unwrap_or(self.pool_size)
    }

    /// Window, step and padding over `steps` (as a `[1, steps]` image).
    fn geometry(&self, steps: usize) -> super::pooling2d::PoolWindow {
        let (k, s) = (self.pool_size, self.step());
        let (_, pads) = self.padding.resolve(steps, k, s).expect("shape checked");
        ([1, k], [1, s], [(0, 0), pads])
    }
}

impl<const MAX: bool> Layer for Pooling1D<MAX> {
    fn class_name(&self) -> &'static str {
        if MAX {
            "MaxPooling1D"
        } else {
            "AveragePooling1D"
        }
    }
    fn config(&self) -> toml::Table {
        crate::model::config_table(self)
    }
    fn validate(&self) -> Result<(), String> {
        super::positive("pool_size", self.pool_size)?;
        super::positive("strides", self.step())
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [steps, c] = steps_features(inputs[0], self.class_name())?;
        Ok(vec![window(self.padding, steps, self.pool_size, self.step())?, c])
    }
    /// The average pooling pads its input first (Burn's `avg_pool2d`); the maximum does not.
    fn largest_tensor(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        let largest = super::largest(inputs, output);
        match (MAX, steps_features(inputs[0], self.class_name())) {
            (false, Ok([steps, c])) => {
                let (_, _, [_, pads]) = self.geometry(steps);
                largest.max(super::padded_copy(&[steps], &[pads], c))
            }
            _ => largest,
        }
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let x = seq_as_image(inputs.pop().expect("one input").into_seq());
        let (k, s, pads) = self.geometry(x.dims()[3]);
        Act::Seq(image_as_seq(pool(x, MAX, k, s, pads)))
    }
    fn passes_values(&self) -> bool {
        MAX
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let t = g.transpose(name, &x.name, &[0, 2, 1]);
        let y = pool_onnx(g, name, &t, MAX, self.geometry(x.shape[0]), true);
        Ok(g.transpose(name, &y, &[0, 2, 1]))
    }
}

impl LayerConfig for MaxPooling1D {
    const CLASS_NAME: &'static str = "MaxPooling1D";
    const ALIASES: &'static [&'static str] = &["MaxPool1D"];
}

impl LayerConfig for AveragePooling1D {
    const CLASS_NAME: &'static str = "AveragePooling1D";
    const ALIASES: &'static [&'static str] = &["AvgPool1D"];
}
