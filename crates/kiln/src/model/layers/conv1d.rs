//! `keras.layers.Conv1D(filters, kernel_size, strides=1, padding="valid", dilation_rate=1,
//! groups=1, activation=None, use_bias=True)` on `(steps, channels)` inputs.

use serde::{Deserialize, Serialize};

use super::conv::{self, OnnxConv, OnnxKernel, Window};
use super::{activation_onnx, default_true, steps_features};
use crate::model::act::Act;
use crate::ops::Epilogue;
use crate::model::args::{Activation, Padding};
use crate::model::layer::{ForwardContext, Layer, LayerConfig, WeightInit, WeightSpec, Weights};
use crate::onnx::{Layout, OnnxGraph, OnnxValue};

/// Conv1D's `padding`: Keras' `valid` and `same`, and `causal` (zeros before the steps only,
/// so that output `t` sees steps up to `t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Padding1D {
    /// No padding.
    #[default]
    Valid,
    /// `ceil(steps / strides)` outputs.
    Same,
    /// `dilation_rate * (kernel_size - 1)` zeros before the first step.
    Causal,
}

impl<'de> Deserialize<'de> for Padding1D {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let choices = [
            ("valid", Padding1D::Valid),
            ("same", Padding1D::Same),
            ("causal", Padding1D::Causal),
        ];
        crate::model::args::one_of(d, &choices)
    }
}

/// `Conv1D(filters, kernel_size, strides, padding, dilation_rate, groups, activation,
/// use_bias)`: `kernel [kernel_size, in / groups, filters]` (`glorot_uniform`), `bias
/// [filters]` (zeros). Output `(out_steps, filters)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conv1D {
    /// Output channels.
    pub filters: usize,
    /// Window length (an integer or a 1-tuple, as in Keras).
    #[serde(deserialize_with = "crate::model::args::int_or_one")]
    pub kernel_size: usize,
    /// Step.
    #[serde(default = "conv::one", deserialize_with = "crate::model::args::int_or_one")]
    pub strides: usize,
    /// `valid`, `same` or `causal`.
    #[serde(default)]
    pub padding: Padding1D,
    /// Spacing of the window's taps (not with `strides` > 1).
    #[serde(default = "conv::one", deserialize_with = "crate::model::args::int_or_one")]
    pub dilation_rate: usize,
    /// Channel groups: each group of `filters / groups` outputs sees `in / groups` inputs.
    #[serde(default = "conv::one")]
    pub groups: usize,
    /// Applied after the convolution.
    #[serde(default)]
    pub activation: Activation,
    /// Adds a bias per filter.
    #[serde(default = "default_true")]
    pub use_bias: bool,
}

impl Conv1D {
    /// `Conv1D(filters, kernel_size)` with stride 1, `valid` padding, a bias, no activation.
    pub fn new(filters: usize, kernel_size: usize) -> Conv1D {
        Conv1D {
            filters,
            kernel_size,
            strides: 1,
            padding: Padding1D::Valid,
            dilation_rate: 1,
            groups: 1,
            activation: Activation::Linear,
            use_bias: true,
        }
    }

    fn window(&self) -> Window {
        Window::one_d(self.kernel_size, self.strides, self.dilation_rate)
    }

    /// Output steps and padding over `steps`.
    fn resolve(&self, steps: usize) -> Result<([usize; 2], conv::Pads), String> {
        let w = self.window();
        match self.padding {
            Padding1D::Valid => w.resolve(Padding::Valid, [1, steps]),
            Padding1D::Same => w.resolve(Padding::Same, [1, steps]),
            Padding1D::Causal => Ok(w.causal([1, steps])),
        }
    }
}

impl Layer for Conv1D {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        conv::validate_groups(self.filters, self.groups)?;
        conv::validate_window(&self.window(), true)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [steps, c] = steps_features(inputs[0], "Conv1D")?;
        conv::check_channels("Conv1D", c, self.groups)?;
        let ([_, out], _) = self.resolve(steps)?;
        Ok(vec![out, self.filters])
    }
    /// `causal` padding copies the input behind `span - 1` zeros first.
    fn largest_tensor(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        let largest = super::largest(inputs, output);
        match (self.padding, steps_features(inputs[0], "Conv1D")) {
            (Padding1D::Causal, Ok([steps, c])) => {
                let (_, [_, pads]) = self.window().causal([1, steps]);
                largest.max(super::padded_copy(&[steps], &[pads], c))
            }
            _ => largest,
        }
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let cin = inputs[0].last().copied().unwrap_or(0) / self.groups;
        let shape = vec![self.kernel_size, cin, self.filters];
        let mut out = vec![WeightSpec::new("kernel", shape, WeightInit::GlorotUniform)];
        if self.use_bias {
            out.push(WeightSpec::new("bias", vec![self.filters], WeightInit::Zeros));
        }
        out
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        let x = conv::seq_as_image(inputs.pop().expect("one input").into_seq());
        let (_, pads) = self.resolve(x.dims()[3]).expect("shape checked");
        // [k, in, out] -> Burn's [out, in, 1, k]
        let kernel = w.get::<3>("kernel").permute([2, 1, 0]).unsqueeze_dim(2);
        let bias = w.has("bias").then(|| w.get::<1>("bias"));
        let epilogue = Epilogue::new(self.activation == Activation::Relu, ctx.compute);
        let window = self.window();
        let y = conv::convolve(x, kernel, bias, (&window, pads, self.groups), epilogue);
        let y = Act::Seq(conv::image_as_seq(y));
        super::finish_rounded(y, self.activation, ctx)
    }
    fn rounds_output(&self) -> bool {
        super::rounded_by_kernel(self.activation)
    }
    affine_activation!();
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let (k, cin, f) = (self.kernel_size, x.shape[1] / self.groups, self.filters);
        let values = g.weight_values(&format!("{name}/kernel"), &[k, cin, f])?;
        let kernel = OnnxKernel::from_keras(values, [1, k, cin, f]);
        let bias = conv::onnx_bias(g, name, self.use_bias, f)?;
        let (_, pads) = self.resolve(x.shape[0])?;
        let setup = OnnxConv {
            op: "Conv",
            kernel,
            bias,
            group: self.groups,
            pads,
            output_padding: None,
        };
        let y = conv::onnx_conv(g, name, x, &self.window(), setup, "kernel");
        Ok(activation_onnx(g, name, y, self.activation, Layout::Seq))
    }
}

impl LayerConfig for Conv1D {
    const CLASS_NAME: &'static str = "Conv1D";
    const ALIASES: &'static [&'static str] = &["Convolution1D"];
}
