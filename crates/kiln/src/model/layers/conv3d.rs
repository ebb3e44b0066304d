//! `keras.layers.Conv3D(filters, kernel_size, strides=1, padding="valid", dilation_rate=1,
//! groups=1, activation=None, use_bias=True)` on `(depth, height, width, channels)` inputs.

use burn::prelude::*;
use burn::tensor::module::conv3d;
use burn::tensor::ops::{ConvOptions, PadMode};
use serde::{Deserialize, Serialize};

use super::conv::{self, Pads, Window};
use super::{activation_onnx, default_true, volume_shape};
use crate::model::act::Act;
use crate::model::args::{Activation, Padding, Triple};
use crate::model::layer::{ForwardContext, Layer, LayerConfig, WeightInit, WeightSpec, Weights};
use crate::model::weights::hwio_to_oihw;
use crate::onnx::{Layout, OnnxGraph, OnnxValue, int};

/// `Conv3D(filters, kernel_size, strides, padding, dilation_rate, groups, activation,
/// use_bias)`: `kernel [kd, kh, kw, in / groups, filters]` (`glorot_uniform`), `bias
/// [filters]` (zeros). Output `(out_d, out_h, out_w, filters)`; `same` padding puts the odd
/// plane/row/column at the end, as TensorFlow does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conv3D {
    /// Output channels.
    pub filters: usize,
    /// Window size, an integer or `[d, h, w]`.
    pub kernel_size: Triple,
    /// Step, an integer or `[d, h, w]`.
    #[serde(default = "ones")]
    pub strides: Triple,
    /// `valid` or `same`.
    #[serde(default)]
    pub padding: Padding,
    /// Spacing of the window's taps, an integer or `[d, h, w]` (not with `strides` > 1).
    #[serde(default = "ones", skip_serializing_if = "is_ones")]
    pub dilation_rate: Triple,
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

/// serde default: 1 on every axis.
pub(super) fn ones() -> Triple {
    Triple([1; 3])
}

fn is_ones(v: &Triple) -> bool {
    *v == ones()
}

impl Conv3D {
    /// `Conv3D(filters, kernel_size)` with stride 1, `valid` padding, a bias, no activation.
    pub fn new(filters: usize, kernel_size: [usize; 3]) -> Conv3D {
        Conv3D {
            filters,
            kernel_size: Triple(kernel_size),
            strides: ones(),
            padding: Padding::Valid,
            dilation_rate: ones(),
            groups: 1,
            activation: Activation::Linear,
            use_bias: true,
        }
    }

    fn window(&self) -> Window<3> {
        Window {
            kernel: self.kernel_size.0,
            strides: self.strides.0,
            dilation: self.dilation_rate.0,
        }
    }
}

impl Layer for Conv3D {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        conv::validate_groups(self.filters, self.groups)?;
        conv::validate_window(&self.window(), false)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [d, h, w, c] = volume_shape(inputs[0], "Conv3D")?;
        conv::check_channels("Conv3D", c, self.groups)?;
        let ([od, oh, ow], _) = self.window().resolve(self.padding, [d, h, w])?;
        Ok(vec![od, oh, ow, self.filters])
    }
    fn takes_volumes(&self) -> bool {
        true
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let cin = inputs[0].last().copied().unwrap_or(0) / self.groups;
        let [kd, kh, kw] = self.kernel_size.0;
        let shape = vec![kd, kh, kw, cin, self.filters];
        let mut out = vec![WeightSpec::new("kernel", shape, WeightInit::GlorotUniform)];
        if self.use_bias {
            out.push(WeightSpec::new("bias", vec![self.filters], WeightInit::Zeros));
        }
        out
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        let x = inputs.pop().expect("one input").into_volume();
        let [_, _, d, h, width] = x.dims();
        let window = self.window();
        let (_, pads) = window.resolve(self.padding, [d, h, width]).expect("shape checked");
        // [kd, kh, kw, in, out] -> Burn's [out, in, kd, kh, kw]
        let kernel = w.get::<5>("kernel").permute([4, 3, 0, 1, 2]);
        let bias = w.has("bias").then(|| w.get::<1>("bias"));
        let y = convolve3d(x, kernel, bias, (&window, pads, self.groups));
        let y = match self.activation {
            Activation::Relu => burn::tensor::activation::relu(y),
            _ => y,
        };
        super::finish_affine(Act::Volume(y), self.activation, ctx)
    }
    /// Burn's ReLU (not fused into `conv3d`) keeps its input, the pre-activation, as the other
    /// activations do; the output itself is not kept.
    fn extra_kept(&self, _: &[&[usize]], output: &[usize]) -> f64 {
        match self.activation {
            Activation::Relu => super::size(output),
            a => super::activation_extra(a, output),
        }
    }
    fn ends_in_softmax(&self) -> bool {
        self.activation == Activation::Softmax
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let [kd, kh, kw] = self.kernel_size.0;
        let (cin, f) = (x.shape[3] / self.groups, self.filters);
        let key = format!("{name}/kernel");
        let values = g.weight_values(&key, &[kd, kh, kw, cin, f])?;
        // [kd * kh, kw, in, out] -> [out, in, kd * kh, kw] is ONNX's [out, in, kd, kh, kw].
        let oidhw = hwio_to_oihw(values, [kd * kh, kw, cin, f]);
        let kernel = g.named_constant(&key, &[f, cin, kd, kh, kw], &oidhw);
        let mut args = vec![x.name.clone(), kernel];
        args.extend(conv::onnx_bias(g, name, self.use_bias, f)?);
        let window = self.window();
        let (_, pads) = window.resolve(self.padding, [x.shape[0], x.shape[1], x.shape[2]])?;
        let mut attrs = window.onnx_attrs(pads, false);
        attrs.push(int("group", self.groups as i64));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let y = g.node(name, "Conv", &refs, attrs);
        Ok(activation_onnx(g, name, y, self.activation, Layout::Volume))
    }
}

/// 3-D convolution of NCDHW `x` with `kernel` (Burn's `[out, in / groups, kd, kh, kw]`) and
/// `pads`. Burn's `conv3d` pads symmetrically only: the part of `pads` both sides share goes to
/// it, the odd rest (TensorFlow's `same` puts it at the end) is zeros appended first.
fn convolve3d(
    x: Tensor<5>,
    kernel: Tensor<5>,
    bias: Option<Tensor<1>>,
    (w, pads, groups): (&Window<3>, Pads<3>, usize),
) -> Tensor<5> {
    let both = pads.map(|(b, e)| b.min(e));
    let rest: Pads<3> = std::array::from_fn(|i| (pads[i].0 - both[i], pads[i].1 - both[i]));
    let x = match rest.iter().any(|&(b, e)| b + e > 0) {
        true => x.pad(rest, PadMode::Constant(0.0)),
        false => x,
    };
    conv3d(x, kernel, bias, ConvOptions::new(w.strides, both, w.dilation, groups))
}

impl LayerConfig for Conv3D {
    const CLASS_NAME: &'static str = "Conv3D";
    const ALIASES: &'static [&'static str] = &["Convolution3D"];
}
