//! `keras.layers.MaxPooling2D` and `AveragePooling2D(pool_size=2, strides=None,
//! padding="valid")` on `(height, width, channels)` inputs: one type, [`Pooling2D`], with the
//! reduction as its parameter (Keras' `BasePooling`).

use burn::tensor::module::avg_pool2d;
use burn::tensor::ops::AvgPoolOptions;
use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::{default_pool, image_shape, pads2, window};
use crate::model::act::Act;
use crate::model::args::{Padding, Pair};
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue, int, ints};
use crate::tflite::{Options, TfliteGraph, TfliteValue, op};

/// A 2-D pooling window: the maximum (`MAX = true`, [`MaxPooling2D`]) or the mean
/// ([`AveragePooling2D`]; with `same` padding the padded positions are not counted, as in
/// TensorFlow). Output `(out_h, out_w, channels)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pooling2D<const MAX: bool> {
    /// Window, an integer or `[h, w]`.
    #[serde(default = "default_pool")]
    pub pool_size: Pair,
    /// Step; `pool_size` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strides: Option<Pair>,
    /// `valid` or `same`.
    #[serde(default)]
    pub padding: Padding,
}

/// `keras.layers.MaxPooling2D` (alias `MaxPool2D`).
pub type MaxPooling2D = Pooling2D<true>;
/// `keras.layers.AveragePooling2D` (alias `AvgPool2D`).
pub type AveragePooling2D = Pooling2D<false>;

impl<const MAX: bool> Default for Pooling2D<MAX> {
    fn default() -> Self {
        Pooling2D {
            pool_size: default_pool(),
            strides: None,
            padding: Padding::Valid,
        }
    }
}

impl<const MAX: bool> Pooling2D<MAX> {
    fn step(&self) -> [usize; 2] {
        self.strides.unwrap_or(self.pool_size).0
    }
}

impl<const MAX: bool> Layer for Pooling2D<MAX> {
    fn class_name(&self) -> &'static str {
        if MAX {
            "MaxPooling2D"
        } else {
            "AveragePooling2D"
        }
    }
    fn config(&self) -> toml::Table {
        crate::model::config_table(self)
    }
    fn validate(&self) -> Result<(), String> {
        let each = |name: &str, p: [usize; 2]| p.iter().try_for_each(|&v| super::positive(name, v));
        each("pool_size", self.pool_size.0)?;
        each("strides", self.step())
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [h, w, c] = image_shape(inputs[0], self.class_name())?;
        let (k, s) = (self.pool_size.0, self.step());
        let oh = window(self.padding, h, k[0], s[0])?;
        let ow = window(self.padding, w, k[1], s[1])?;
        Ok(vec![oh, ow, c])
    }
    /// The average pooling pads its input first (Burn's `avg_pool2d`); the maximum does not.
    fn largest_tensor(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        let largest = super::largest(inputs, output);
        match (MAX, image_shape(inputs[0], self.class_name())) {
            (false, Ok([h, w, c])) => {
                let pads = pads2(self.padding, [h, w], self.pool_size.0, self.step());
                largest.max(super::padded_copy(&[h, w], &pads, c))
            }
            _ => largest,
        }
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let x = inputs.pop().expect("one input").into_image();
        let [_, _, h, w] = x.dims();
        let (k, s) = (self.pool_size.0, self.step());
        let pads = pads2(self.padding, [h, w], k, s);
        Act::Image(pool(x, MAX, k, s, pads))
    }
    fn passes_values(&self) -> bool {
        MAX
    }
    // The average sums its window first: four float16 values below 65504 may sum to Inf
    // (cuDNN accumulates pooling in float32), so it computes in float32.
    fn computes_in_half(&self) -> bool {
        MAX
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let (k, s) = (self.pool_size.0, self.step());
        let pads = pads2(self.padding, [x.shape[0], x.shape[1]], k, s);
        Ok(pool_onnx(g, name, &x.name, MAX, (k, s, pads), false))
    }

    fn tflite(
        &self,
        g: &mut TfliteGraph,
        inputs: &[TfliteValue],
        name: &str,
    ) -> Result<TfliteValue, String> {
        let x = &inputs[0];
        let shape = self.output_shape(&[&x.shape])?;
        let options = Options::Pool2D {
            padding: super::tflite_ops::padding(self.padding),
            strides: self.strides.unwrap_or(self.pool_size).0,
            filter: self.pool_size.0,
        };
        let code = if MAX { op::MAX_POOL_2D } else { op::AVERAGE_POOL_2D };
        Ok(g.op(name, code, &[x.index], &shape, options))
    }
}

/// The maximum (`max`) or mean (padded positions not counted, as in TensorFlow) of windows `k`
/// with step `s` over NCHW `x` padded by `pads`.
pub(super) fn pool(
    x: Tensor<4>,
    max: bool,
    k: [usize; 2],
    s: [usize; 2],
    pads: [(usize, usize); 2],
) -> Tensor<4> {
    if max {
        return crate::ops::max_pool2d(x, k, s, pads);
    }
    let options = AvgPoolOptions::new(k)
        .with_stride(s)
        .with_padding_pairs(pads)
        .with_count_include_pad(false);
    avg_pool2d(x, options)
}

/// Window, step and padding of a pooling over `[h, w]` (or `N` axes).
pub(super) type PoolWindow<const N: usize = 2> = ([usize; N], [usize; N], [(usize, usize); N]);

/// The ONNX `MaxPool` / `AveragePool` node of [`pool`] on `x`: NCHW (or NCDHW with a window
/// over 3 axes), or `[batch, channels, steps]` when `one_d` (the window's height axis left
/// out).
pub(super) fn pool_onnx<const N: usize>(
    g: &mut OnnxGraph,
    name: &str,
    x: &str,
    max: bool,
    (k, s, pads): PoolWindow<N>,
    one_d: bool,
) -> String {
    let skip = usize::from(one_d);
    let axes = |v: [usize; N]| -> Vec<i64> { v[skip..].iter().map(|&x| x as i64).collect() };
    let mut p = axes(pads.map(|(b, _)| b));
    p.extend(axes(pads.map(|(_, e)| e)));
    let mut attrs = vec![
        ints("kernel_shape", &axes(k)),
        ints("strides", &axes(s)),
        ints("pads", &p),
    ];
    let op = if max { "MaxPool" } else { "AveragePool" };
    if !max {
        // TensorFlow does not count padded positions in the average.
        attrs.push(int("count_include_pad", 0));
    }
    g.node(name, op, &[x], attrs)
}

impl LayerConfig for MaxPooling2D {
    const CLASS_NAME: &'static str = "MaxPooling2D";
    const ALIASES: &'static [&'static str] = &["MaxPool2D"];
}

impl LayerConfig for AveragePooling2D {
    const CLASS_NAME: &'static str = "AveragePooling2D";
    const ALIASES: &'static [&'static str] = &["AvgPool2D"];
}
