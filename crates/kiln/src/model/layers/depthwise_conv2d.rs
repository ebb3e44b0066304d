//! `keras.layers.DepthwiseConv2D(kernel_size, strides=1, padding="valid", depth_multiplier=1,
//! dilation_rate=1, activation=None, use_bias=True)` on `(height, width, channels)` inputs.

use serde::{Deserialize, Serialize};

use super::conv::{self, Window};
use super::{activation_onnx, default_one, default_true, image_shape};
use crate::model::act::Act;
use crate::model::args::{Activation, Padding, Pair};
use crate::model::layer::{ForwardContext, Layer, LayerConfig, WeightInit, WeightSpec, Weights};
use crate::onnx::{Layout, OnnxGraph, OnnxValue};

/// `DepthwiseConv2D(kernel_size, strides, padding, depth_multiplier, dilation_rate, activation,
/// use_bias)`: each input channel convolved with its own `depth_multiplier` filters. `kernel
/// [kh, kw, in, depth_multiplier]` (`glorot_uniform`, Keras 3's name), `bias [in *
/// depth_multiplier]` (zeros). Output `(out_h, out_w, in * depth_multiplier)`, channel `c *
/// depth_multiplier + m` from input channel `c`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DepthwiseConv2D {
    /// Window size, an integer or `[h, w]`.
    pub kernel_size: Pair,
    /// Step, an integer or `[h, w]`.
    #[serde(default = "default_one")]
    pub strides: Pair,
    /// `valid` or `same`.
    #[serde(default)]
    pub padding: Padding,
    /// Output channels per input channel.
    #[serde(default = "conv::one")]
    pub depth_multiplier: usize,
    /// Spacing of the window's taps (not with `strides` > 1).
    #[serde(default = "default_one")]
    pub dilation_rate: Pair,
    /// Applied after the convolution.
    #[serde(default)]
    pub activation: Activation,
    /// Adds a bias per output channel.
    #[serde(default = "default_true")]
    pub use_bias: bool,
}

impl DepthwiseConv2D {
    /// `DepthwiseConv2D(kernel_size)` with stride 1, `valid` padding, one filter per channel,
    /// a bias, no activation.
    pub fn new(kernel_size: [usize; 2]) -> DepthwiseConv2D {
        DepthwiseConv2D {
            kernel_size: Pair(kernel_size),
            strides: Pair([1, 1]),
            padding: Padding::Valid,
            depth_multiplier: 1,
            dilation_rate: Pair([1, 1]),
            activation: Activation::Linear,
            use_bias: true,
        }
    }

    fn window(&self) -> Window {
        Window::new(self.kernel_size, self.strides, self.dilation_rate)
    }
}

impl Layer for DepthwiseConv2D {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        super::positive("depth_multiplier", self.depth_multiplier)?;
        conv::validate_window(&self.window(), false)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [h, w, c] = image_shape(inputs[0], "DepthwiseConv2D")?;
        let ([oh, ow], _) = self.window().resolve(self.padding, [h, w])?;
        Ok(vec![oh, ow, c * self.depth_multiplier])
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let cin = inputs[0].last().copied().unwrap_or(0);
        let [kh, kw] = self.kernel_size.0;
        let shape = vec![kh, kw, cin, self.depth_multiplier];
        let mut out = vec![WeightSpec::new("kernel", shape, WeightInit::GlorotUniform)];
        if self.use_bias {
            let bias = vec![cin * self.depth_multiplier];
            out.push(WeightSpec::new("bias", bias, WeightInit::Zeros));
        }
        out
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        let x = inputs.pop().expect("one input").into_image();
        let [_, _, h, width] = x.dims();
        let window = self.window();
        let (_, pads) = window.resolve(self.padding, [h, width]).expect("shape checked");
        let y = conv::convolve_depthwise(x, w.get::<4>("kernel"), &window, pads);
        let y = conv::plus_bias(y, w.has("bias").then(|| w.get::<1>("bias")));
        super::activate(Act::Image(y), self.activation, ctx)
    }
    affine_activation!();
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let ([kh, kw], cin, dm) = (self.kernel_size.0, x.shape[2], self.depth_multiplier);
        let values = g.weight_values(&format!("{name}/kernel"), &[kh, kw, cin, dm])?.to_vec();
        let bias = conv::onnx_bias(g, name, self.use_bias, cin * dm)?;
        let window = self.window();
        let (_, pads) = window.resolve(self.padding, [x.shape[0], x.shape[1]])?;
        let setup = conv::onnx_depthwise(&values, [kh, kw, cin, dm], bias, pads);
        let y = conv::onnx_conv(g, name, x, &window, setup, "kernel");
        Ok(activation_onnx(g, name, y, self.activation, Layout::Image))
    }
}

impl LayerConfig for DepthwiseConv2D {
    const CLASS_NAME: &'static str = "DepthwiseConv2D";
}
