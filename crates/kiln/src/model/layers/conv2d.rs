//! `keras.layers.Conv2D(filters, kernel_size, strides=1, padding="valid", activation=None,
//! use_bias=True)` on `(height, width, channels)` inputs.

use serde::{Deserialize, Serialize};

use super::{
    activation_onnx, default_one, default_true, image_shape, onnx_pads, window,
};
use crate::model::act::Act;
use crate::model::args::{Activation, Padding, Pair};
use crate::model::layer::{
    Field, ForwardContext, Layer, LayerConfig, Storage, WeightInit, WeightSpec, Weights,
};
use crate::model::weights::hwio_to_oihw;
use crate::onnx::{Layout, OnnxGraph, OnnxValue, int, ints};

/// `Conv2D(filters, kernel_size, strides, padding, activation, use_bias)`: `kernel [kh, kw,
/// in, filters]` (`glorot_uniform`; held as Burn's `[filters, in, kh, kw]`), `bias [filters]`
/// (zeros). Output `(out_h, out_w, filters)`; `same` padding puts the odd row/column at the
/// end, as TensorFlow does. A ReLU is fused into the convolution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conv2D {
    /// Output channels.
    pub filters: usize,
    /// Window size, an integer or `[h, w]`.
    pub kernel_size: Pair,
    /// Step, an integer or `[h, w]`.
    #[serde(default = "default_one")]
    pub strides: Pair,
    /// `valid` or `same`.
    #[serde(default)]
    pub padding: Padding,
    /// Applied after the convolution.
    #[serde(default)]
    pub activation: Activation,
    /// Adds a bias per filter.
    #[serde(default = "default_true")]
    pub use_bias: bool,
}

impl Conv2D {
    /// `Conv2D(filters, kernel_size)` with stride 1, `valid` padding, a bias, no activation.
    pub fn new(filters: usize, kernel_size: [usize; 2]) -> Conv2D {
        Conv2D {
            filters,
            kernel_size: Pair(kernel_size),
            strides: Pair([1, 1]),
            padding: Padding::Valid,
            activation: Activation::Linear,
            use_bias: true,
        }
    }
}

impl Layer for Conv2D {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        super::positive("filters", self.filters)?;
        let each = |name: &str, p: Pair| p.0.iter().try_for_each(|&v| super::positive(name, v));
        each("kernel_size", self.kernel_size)?;
        each("strides", self.strides)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [h, w, _] = image_shape(inputs[0], "Conv2D")?;
        let [(kh, kw), (sh, sw)] = [self.kernel_size.0, self.strides.0].map(|p| (p[0], p[1]));
        let oh = window(self.padding, h, kh, sh)?;
        let ow = window(self.padding, w, kw, sw)?;
        Ok(vec![oh, ow, self.filters])
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let cin = inputs[0].last().copied().unwrap_or(0);
        let [kh, kw] = self.kernel_size.0;
        let shape = vec![kh, kw, cin, self.filters];
        let kernel = WeightSpec::new("kernel", shape, WeightInit::GlorotUniform);
        let mut out = vec![kernel.stored(Storage::Field(Field::ConvKernel))];
        if self.use_bias {
            let bias = WeightSpec::new("bias", vec![self.filters], WeightInit::Zeros);
            out.push(bias.stored(Storage::Field(Field::Bias)));
        }
        out
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        let x = inputs.pop().expect("one input").into_image();
        let [_, _, h, width] = x.dims();
        let pads = super::pads2(self.padding, [h, width], self.kernel_size.0, self.strides.0);
        // [kh, kw, in, out] -> Burn's [out, in, kh, kw]
        let kernel = w.get::<4>("kernel").permute([3, 2, 0, 1]);
        let bias = w.has("bias").then(|| w.get::<1>("bias"));
        let relu = self.activation == Activation::Relu;
        let y = Act::Image(crate::ops::conv2d(
            x,
            kernel,
            bias,
            self.strides.0,
            pads,
            relu,
        ));
        if relu {
            return y;
        }
        super::activate(y, self.activation, ctx)
    }
    affine_activation!();
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let ([kh, kw], cin, f) = (self.kernel_size.0, x.shape[2], self.filters);
        let hwio = g.weight_values(&format!("{name}/kernel"), &[kh, kw, cin, f])?;
        let oihw = hwio_to_oihw(hwio, [kh, kw, cin, f]);
        let kernel = g.named_constant(&format!("{name}/kernel"), &[f, cin, kh, kw], &oihw);
        let mut args = vec![x.name.clone(), kernel];
        if self.use_bias {
            args.push(g.weight(&format!("{name}/bias"), &[f], &[f])?);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let pads = onnx_pads(self.padding, &x.shape, self.kernel_size.0, self.strides.0);
        let attrs = vec![
            ints("kernel_shape", &[kh as i64, kw as i64]),
            ints("strides", &self.strides.0.map(|v| v as i64)),
            ints("pads", &pads),
            ints("dilations", &[1, 1]),
            int("group", 1),
        ];
        let y = g.node(name, "Conv", &refs, attrs);
        Ok(activation_onnx(g, name, y, self.activation, Layout::Image))
    }
}

impl LayerConfig for Conv2D {
    const CLASS_NAME: &'static str = "Conv2D";
    const ALIASES: &'static [&'static str] = &["Convolution2D"];
}
