//! `keras.layers.Conv2D(filters, kernel_size, strides=1, padding="valid", dilation_rate=1,
//! groups=1, activation=None, use_bias=True)` on `(height, width, channels)` inputs.

use serde::{Deserialize, Serialize};

use super::conv::{self, OnnxConv, OnnxKernel, Window};
use super::{activation_onnx, default_one, default_true, image_shape};
use crate::model::act::Act;
use crate::model::args::{Activation, Padding, Pair};
use crate::model::layer::{
    Field, ForwardContext, Layer, LayerConfig, Storage, WeightInit, WeightSpec, Weights,
};
use crate::ops::Epilogue;
use crate::onnx::{Layout, OnnxGraph, OnnxValue};
use crate::tflite::{Options, TfliteGraph, TfliteValue, op};

/// `Conv2D(filters, kernel_size, strides, padding, dilation_rate, groups, activation,
/// use_bias)`: `kernel [kh, kw, in / groups, filters]` (`glorot_uniform`; held as Burn's
/// `[filters, in / groups, kh, kw]`), `bias [filters]` (zeros). Output `(out_h, out_w,
/// filters)`; `same` padding puts the odd row/column at the end, as TensorFlow does. A ReLU is
/// fused into the convolution (kiln's own kernel without dilation and groups, Burn's with).
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
    /// Spacing of the window's taps, an integer or `[h, w]` (not with `strides` > 1).
    #[serde(default = "default_one", skip_serializing_if = "conv::is_one_pair")]
    pub dilation_rate: Pair,
    /// Channel groups: each group of `filters / groups` outputs sees `in / groups` inputs.
    #[serde(default = "conv::one", skip_serializing_if = "conv::is_one")]
    pub groups: usize,
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
            dilation_rate: Pair([1, 1]),
            groups: 1,
            activation: Activation::Linear,
            use_bias: true,
        }
    }

    fn window(&self) -> Window {
        Window::new(self.kernel_size, self.strides, self.dilation_rate)
    }
}

impl Layer for Conv2D {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        conv::validate_groups(self.filters, self.groups)?;
        conv::validate_window(&self.window(), false)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [h, w, c] = image_shape(inputs[0], "Conv2D")?;
        conv::check_channels("Conv2D", c, self.groups)?;
        let ([oh, ow], _) = self.window().resolve(self.padding, [h, w])?;
        Ok(vec![oh, ow, self.filters])
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let cin = inputs[0].last().copied().unwrap_or(0) / self.groups;
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
        let window = self.window();
        let (_, pads) = window.resolve(self.padding, [h, width]).expect("shape checked");
        // [kh, kw, in, out] -> Burn's [out, in, kh, kw]
        let kernel = w.get::<4>("kernel").permute([3, 2, 0, 1]);
        let bias = w.has("bias").then(|| w.get::<1>("bias"));
        let epilogue = Epilogue::new(self.activation == Activation::Relu, ctx.compute);
        let geometry = (&window, pads, self.groups);
        let y = Act::Image(conv::convolve(x, kernel, bias, geometry, epilogue));
        super::finish_rounded(y, self.activation, ctx)
    }
    fn rounds_output(&self) -> bool {
        super::rounded_by_kernel(self.activation)
    }
    affine_activation!();
    fn computes_in_half(&self) -> bool {
        true
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let ([kh, kw], cin, f) = (self.kernel_size.0, x.shape[2] / self.groups, self.filters);
        let hwio = g.weight_values(&format!("{name}/kernel"), &[kh, kw, cin, f])?;
        let kernel = OnnxKernel::from_keras(hwio, [kh, kw, cin, f]);
        let bias = conv::onnx_bias(g, name, self.use_bias, f)?;
        let window = self.window();
        let (_, pads) = window.resolve(self.padding, [x.shape[0], x.shape[1]])?;
        let setup = OnnxConv {
            op: "Conv",
            kernel,
            bias,
            group: self.groups,
            pads,
            output_padding: None,
        };
        let y = conv::onnx_conv(g, name, x, &window, setup, "kernel");
        Ok(activation_onnx(g, name, y, self.activation, Layout::Image))
    }

    fn tflite(
        &self,
        g: &mut TfliteGraph,
        inputs: &[TfliteValue],
        name: &str,
    ) -> Result<TfliteValue, String> {
        if self.groups != 1 || self.dilation_rate.0 != [1, 1] {
            return Err("grouped and dilated convolutions have no TensorFlow Lite mapping in \
                        kiln yet"
                .into());
        }
        let x = &inputs[0];
        let ([kh, kw], cin, f) = (self.kernel_size.0, x.shape[2], self.filters);
        let hwio = g.weight(&format!("{name}/kernel"), &[kh, kw, cin, f])?;
        // HWIO -> OHWI: [kh * kw * cin, f] transposed.
        let ohwi = super::tflite_ops::transpose(hwio, kh * kw * cin, f);
        let w = g.kernel(&format!("{name}/kernel"), &[f, kh, kw, cin], &ohwi, true);
        let b = match self.use_bias {
            true => {
                let bias = g.weight(&format!("{name}/bias"), &[f])?.to_vec();
                g.constant(&format!("{name}/bias"), &[f], &bias)
            }
            // TFLite's CONV_2D wants a bias: zeros.
            false => g.constant(&format!("{name}/bias"), &[f], &vec![0.0; f]),
        };
        let shape = self.output_shape(&[&x.shape])?;
        let (act, rest) = super::tflite_ops::fused(self.activation);
        let options = Options::Conv2D {
            padding: super::tflite_ops::padding(self.padding),
            strides: self.strides.0,
            act,
        };
        let y = g.op(name, op::CONV_2D, &[x.index, w, b], &shape, options);
        super::tflite_ops::activate(g, name, y, rest)
    }
}

impl LayerConfig for Conv2D {
    const CLASS_NAME: &'static str = "Conv2D";
    const ALIASES: &'static [&'static str] = &["Convolution2D"];
}
