//! `keras.layers.MaxPooling3D` and `AveragePooling3D(pool_size=2, strides=None,
//! padding="valid")` on `(depth, height, width, channels)` inputs: one type, [`Pooling3D`], with
//! the reduction as its parameter, as [`super::Pooling2D`].

use burn::prelude::*;
use burn::tensor::module::{avg_pool3d, max_pool3d};
use burn::tensor::ops::{AvgPoolOptions, MaxPoolOptions};
use serde::{Deserialize, Serialize};

use super::conv::{Pads, Window};
use super::pooling2d::pool_onnx;
use super::volume_shape;
use crate::model::act::Act;
use crate::model::args::{Padding, Triple};
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// A 3-D pooling window: the maximum (`MAX = true`, [`MaxPooling3D`]) or the mean
/// ([`AveragePooling3D`]; with `same` padding the padded positions are not counted, as in
/// TensorFlow). Output `(out_d, out_h, out_w, channels)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pooling3D<const MAX: bool> {
    /// Window, an integer or `[d, h, w]`.
    #[serde(default = "default_pool")]
    pub pool_size: Triple,
    /// Step; `pool_size` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strides: Option<Triple>,
    /// `valid` or `same`.
    #[serde(default)]
    pub padding: Padding,
}

/// `keras.layers.MaxPooling3D` (alias `MaxPool3D`).
pub type MaxPooling3D = Pooling3D<true>;
/// `keras.layers.AveragePooling3D` (alias `AvgPool3D`).
pub type AveragePooling3D = Pooling3D<false>;

fn default_pool() -> Triple {
    Triple([2; 3])
}

impl<const MAX: bool> Default for Pooling3D<MAX> {
    fn default() -> Self {
        Pooling3D {
            pool_size: default_pool(),
            strides: None,
            padding: Padding::Valid,
        }
    }
}

impl<const MAX: bool> Pooling3D<MAX> {
    /// The window (a pooling is a window without dilation).
    fn window(&self) -> Window<3> {
        Window {
            kernel: self.pool_size.0,
            strides: self.strides.unwrap_or(self.pool_size).0,
            dilation: [1; 3],
        }
    }
}

impl<const MAX: bool> Layer for Pooling3D<MAX> {
    fn class_name(&self) -> &'static str {
        if MAX {
            "MaxPooling3D"
        } else {
            "AveragePooling3D"
        }
    }
    fn config(&self) -> toml::Table {
        crate::model::config_table(self)
    }
    fn validate(&self) -> Result<(), String> {
        let w = self.window();
        let each = |name: &str, p: [usize; 3]| p.iter().try_for_each(|&v| super::positive(name, v));
        each("pool_size", w.kernel)?;
        each("strides", w.strides)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [d, h, w, c] = volume_shape(inputs[0], self.class_name())?;
        let ([od, oh, ow], _) = self.window().resolve(self.padding, [d, h, w])?;
        Ok(vec![od, oh, ow, c])
    }
    fn takes_volumes(&self) -> bool {
        true
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let x = inputs.pop().expect("one input").into_volume();
        let [_, _, d, h, w] = x.dims();
        let window = self.window();
        let (_, pads) = window.resolve(self.padding, [d, h, w]).expect("shape checked");
        Act::Volume(pool3d(x, MAX, &window, pads))
    }
    fn passes_values(&self) -> bool {
        MAX
    }
    fn extra_kept(&self, _: &[&[usize]], output: &[usize]) -> f64 {
        // Burn's max pooling keeps the index of each maximum, one value's worth per output
        // value (as measured in tests/estimate_memory.rs).
        match MAX {
            true => super::size(output),
            false => 0.0,
        }
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let w = self.window();
        let (_, pads) = w.resolve(self.padding, [x.shape[0], x.shape[1], x.shape[2]])?;
        Ok(pool_onnx(g, name, &x.name, MAX, (w.kernel, w.strides, pads), false))
    }
}

/// The maximum (`max`; padding never wins) or mean (padded positions not counted, as in
/// TensorFlow) of the windows `w` over NCDHW `x` padded by `pads`: Burn's `max_pool3d` /
/// `avg_pool3d`.
fn pool3d(x: Tensor<5>, max: bool, w: &Window<3>, pads: Pads<3>) -> Tensor<5> {
    if max {
        let options = MaxPoolOptions::new(w.kernel)
            .with_stride(w.strides)
            .with_padding_pairs(pads);
        return max_pool3d(x, options);
    }
    let options = AvgPoolOptions::new(w.kernel)
        .with_stride(w.strides)
        .with_padding_pairs(pads)
        .with_count_include_pad(false);
    avg_pool3d(x, options)
}

impl LayerConfig for MaxPooling3D {
    const CLASS_NAME: &'static str = "MaxPooling3D";
    const ALIASES: &'static [&'static str] = &["MaxPool3D"];
}

impl LayerConfig for AveragePooling3D {
    const CLASS_NAME: &'static str = "AveragePooling3D";
    const ALIASES: &'static [&'static str] = &["AvgPool3D"];
}
