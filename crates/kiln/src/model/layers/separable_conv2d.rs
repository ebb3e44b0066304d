//! `keras.layers.SeparableConv2D(filters, kernel_size, strides=1, padding="valid",
//! dilation_rate=1, depth_multiplier=1, activation=None, use_bias=True)` on `(height, width,
//! channels)` inputs.

use serde::{Deserialize, Serialize};

use super::conv::{self, OnnxConv, OnnxKernel, Window};
use super::{activation_onnx, default_one, default_true, image_shape};
use crate::model::act::Act;
use crate::ops::Epilogue;
use crate::model::args::{Activation, Padding, Pair};
use crate::model::layer::{ForwardContext, Layer, LayerConfig, WeightInit, WeightSpec, Weights};
use crate::onnx::{Layout, OnnxGraph, OnnxValue};

/// `SeparableConv2D(filters, kernel_size, strides, padding, dilation_rate, depth_multiplier,
/// activation, use_bias)`: a depthwise convolution (`depthwise_kernel [kh, kw, in,
/// depth_multiplier]`) followed by a 1x1 convolution (`pointwise_kernel [1, 1, in *
/// depth_multiplier, filters]`, both `glorot_uniform`) and `bias [filters]` (zeros). Output
/// `(out_h, out_w, filters)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeparableConv2D {
    /// Output channels.
    pub filters: usize,
    /// Window size of the depthwise step, an integer or `[h, w]`.
    pub kernel_size: Pair,
    /// Step, an integer or `[h, w]`.
    #[serde(default = "default_one")]
    pub strides: Pair,
    /// `valid` or `same`.
    #[serde(default)]
    pub padding: Padding,
    /// Spacing of the window's taps (not with `strides` > 1).
    #[serde(default = "default_one")]
    pub dilation_rate: Pair,
    /// Depthwise output channels per input channel.
    #[serde(default = "conv::one")]
    pub depth_multiplier: usize,
    /// Applied after the pointwise convolution.
    #[serde(default)]
    pub activation: Activation,
    /// Adds a bias per filter.
    #[serde(default = "default_true")]
    pub use_bias: bool,
}

impl SeparableConv2D {
    /// `SeparableConv2D(filters, kernel_size)` with stride 1, `valid` padding, depth
    /// multiplier 1, a bias, no activation.
    pub fn new(filters: usize, kernel_size: [usize; 2]) -> SeparableConv2D {
        SeparableConv2D {
            filters,
            kernel_size: Pair(kernel_size),
            strides: Pair([1, 1]),
            padding: Padding::Valid,
            dilation_rate: Pair([1, 1]),
            depth_multiplier: 1,
            activation: Activation::Linear,
            use_bias: true,
        }
    }

    fn window(&self) -> Window {
        Window::new(self.kernel_size, self.strides, self.dilation_rate)
    }
}

/// The 1x1 window of the pointwise step.
const POINTWISE: Window = Window {
    kernel: [1, 1],
    strides: [1, 1],
    dilation: [1, 1],
};

impl Layer for SeparableConv2D {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        super::positive("filters", self.filters)?;
        super::positive("depth_multiplier", self.depth_multiplier)?;
        conv::validate_window(&self.window(), false)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [h, w, _] = image_shape(inputs[0], "SeparableConv2D")?;
        let ([oh, ow], _) = self.window().resolve(self.padding, [h, w])?;
        Ok(vec![oh, ow, self.filters])
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let cin = inputs[0].last().copied().unwrap_or(0);
        let [kh, kw] = self.kernel_size.0;
        let dm = self.depth_multiplier;
        let init = WeightInit::GlorotUniform;
        let mut out = vec![
            WeightSpec::new("depthwise_kernel", vec![kh, kw, cin, dm], init),
            WeightSpec::new("pointwise_kernel", vec![1, 1, cin * dm, self.filters], init),
        ];
        if self.use_bias {
            out.push(WeightSpec::new("bias", vec![self.filters], WeightInit::Zeros));
        }
        out
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        let x = inputs.pop().expect("one input").into_image();
        let [_, _, h, width] = x.dims();
        let window = self.window();
        let (_, pads) = window.resolve(self.padding, [h, width]).expect("shape checked");
        let depthwise = conv::convolve_depthwise(x, w.get::<4>("depthwise_kernel"), &window, pads);
        // [1, 1, in, out] -> Burn's [out, in, 1, 1]
        let pointwise = w.get::<4>("pointwise_kernel").permute([3, 2, 0, 1]);
        let bias = w.has("bias").then(|| w.get::<1>("bias"));
        let epilogue = Epilogue::new(self.activation == Activation::Relu, None);
        let geometry = (&POINTWISE, [(0, 0); 2], 1);
        let y = Act::Image(conv::convolve(depthwise, pointwise, bias, geometry, epilogue));
        super::finish_affine(y, self.activation, ctx)
    }
    fn keeps_output(&self) -> bool {
        self.activation == Activation::Relu
    }
    fn ends_in_softmax(&self) -> bool {
        self.activation == Activation::Softmax
    }
    fn extra_kept(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        // the depthwise output, which the pointwise step's backward pass reads
        let [oh, ow, _] = [output[0], output[1], output[2]];
        let cin = inputs[0].last().copied().unwrap_or(0);
        let depthwise = (oh * ow * cin * self.depth_multiplier) as f64;
        depthwise + super::activation_extra(self.activation, output)
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let ([kh, kw], cin, dm, f) = (self.kernel_size.0, x.shape[2], self.depth_multiplier, self.filters);
        let dk = g.weight_values(&format!("{name}/depthwise_kernel"), &[kh, kw, cin, dm])?;
        let window = self.window();
        let (out, pads) = window.resolve(self.padding, [x.shape[0], x.shape[1]])?;
        let setup = conv::onnx_depthwise(dk, [kh, kw, cin, dm], None, pads);
        let d = conv::onnx_conv(g, name, x, &window, setup, "depthwise_kernel");
        let pk = g.weight_values(&format!("{name}/pointwise_kernel"), &[1, 1, cin * dm, f])?;
        let kernel = OnnxKernel::from_keras(pk, [1, 1, cin * dm, f]);
        let bias = conv::onnx_bias(g, name, self.use_bias, f)?;
        let setup = OnnxConv {
            op: "Conv",
            kernel,
            bias,
            group: 1,
            pads: [(0, 0); 2],
            output_padding: None,
        };
        let d = OnnxValue {
            name: d,
            shape: vec![out[0], out[1], cin * dm],
        };
        let y = conv::onnx_conv(g, name, &d, &POINTWISE, setup, "pointwise_kernel");
        Ok(activation_onnx(g, name, y, self.activation, Layout::Image))
    }
}

impl LayerConfig for SeparableConv2D {
    const CLASS_NAME: &'static str = "SeparableConv2D";
    const ALIASES: &'static [&'static str] = &["SeparableConvolution2D"];
}
