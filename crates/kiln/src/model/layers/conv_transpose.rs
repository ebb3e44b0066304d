//! `keras.layers.Conv1DTranspose` and `Conv2DTranspose(filters, kernel_size, strides=1,
//! padding="valid", output_padding=None, dilation_rate=1, activation=None, use_bias=True)` on
//! `(steps, channels)` and `(height, width, channels)` inputs: one type, [`ConvTranspose`],
//! over the spatial size type (Keras' `BaseConvTranspose`).

use serde::{Deserialize, Serialize};

use super::conv::{self, OnnxKernel, SpatialSize, Window};
use super::{activation_onnx, default_true, image_shape, size, steps_features};
use crate::model::act::Act;
use crate::model::args::{Activation, Padding, Pair};
use crate::model::layer::{ForwardContext, Layer, LayerConfig, WeightInit, WeightSpec, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// A transposed convolution (the gradient of a convolution with respect to its input):
/// `kernel [k.., filters, in]` (`glorot_uniform`), `bias [filters]` (zeros). Output per axis
/// `(in - 1) * s + max(span, s)` (`valid`) or `in * s` (`same`), where `span = (k - 1) *
/// dilation_rate + 1`; `output_padding` sets the output size instead, as in Keras.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, bound = "S: SpatialSize")]
pub struct ConvTranspose<S: SpatialSize> {
    /// Output channels.
    pub filters: usize,
    /// Window size.
    pub kernel_size: S,
    /// Step (the upsampling factor).
    #[serde(default = "S::one")]
    pub strides: S,
    /// `valid` or `same`.
    #[serde(default)]
    pub padding: Padding,
    /// Extra rows/columns at the end of the output, each below its stride.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_padding: Option<S>,
    /// Spacing of the window's taps (not with `strides` > 1).
    #[serde(default = "S::one")]
    pub dilation_rate: S,
    /// Applied after the convolution.
    #[serde(default)]
    pub activation: Activation,
    /// Adds a bias per filter.
    #[serde(default = "default_true")]
    pub use_bias: bool,
}

/// `keras.layers.Conv1DTranspose` on `(steps, channels)`.
pub type Conv1DTranspose = ConvTranspose<usize>;
/// `keras.layers.Conv2DTranspose` on `(height, width, channels)`.
pub type Conv2DTranspose = ConvTranspose<Pair>;

impl<S: SpatialSize> ConvTranspose<S> {
    /// The layer with stride 1, `valid` padding, a bias, no activation.
    pub fn new(filters: usize, kernel_size: S) -> Self {
        ConvTranspose {
            filters,
            kernel_size,
            strides: S::one(),
            padding: Padding::Valid,
            output_padding: None,
            dilation_rate: S::one(),
            activation: Activation::Linear,
            use_bias: true,
        }
    }

    fn window(&self) -> Window {
        Window {
            kernel: self.kernel_size.pair(),
            strides: self.strides.pair(),
            dilation: self.dilation_rate.pair(),
        }
    }

    /// Output size and leading values dropped over the spatial `input`.
    fn geometry(&self, input: [usize; 2]) -> ([usize; 2], [usize; 2]) {
        self.window()
            .transposed(self.padding, self.output_padding_pair(), input)
    }

    /// `output_padding` over `[h, w]` (none on a 1-D layer's height axis).
    fn output_padding_pair(&self) -> Option<[usize; 2]> {
        self.output_padding.map(|p| {
            let [a, b] = p.pair();
            [if S::ONE_D { 0 } else { a }, b]
        })
    }

    /// The input's spatial size and channels, or why the input has the wrong rank.
    fn input(&self, shape: &[usize]) -> Result<([usize; 2], usize), String> {
        if S::ONE_D {
            let [s, c] = steps_features(shape, self.class_name())?;
            Ok(([1, s], c))
        } else {
            let [h, w, c] = image_shape(shape, self.class_name())?;
            Ok(([h, w], c))
        }
    }

    /// The Keras kernel's shape.
    fn kernel_shape(&self, cin: usize) -> Vec<usize> {
        let k = self.kernel_size.pair();
        let mut shape = if S::ONE_D { vec![k[1]] } else { k.to_vec() };
        shape.extend([self.filters, cin]);
        shape
    }
}

impl<S: SpatialSize> Layer for ConvTranspose<S> {
    fn class_name(&self) -> &'static str {
        if S::ONE_D {
            "Conv1DTranspose"
        } else {
            "Conv2DTranspose"
        }
    }
    fn config(&self) -> toml::Table {
        crate::model::config_table(self)
    }
    fn validate(&self) -> Result<(), String> {
        super::positive("filters", self.filters)?;
        let w = self.window();
        conv::validate_window(&w, S::ONE_D)?;
        conv::validate_output_padding(self.output_padding_pair(), w.strides)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let (spatial, _) = self.input(inputs[0])?;
        let ([h, w], _) = self.geometry(spatial);
        let mut out = if S::ONE_D { vec![w] } else { vec![h, w] };
        out.push(self.filters);
        Ok(out)
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let cin = inputs[0].last().copied().unwrap_or(0);
        let shape = self.kernel_shape(cin);
        let mut out = vec![WeightSpec::new("kernel", shape, WeightInit::GlorotUniform)];
        if self.use_bias {
            out.push(WeightSpec::new("bias", vec![self.filters], WeightInit::Zeros));
        }
        out
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        let x = inputs.pop().expect("one input");
        let x = match x {
            Act::Seq(t) => conv::seq_as_image(t),
            other => other.into_image(),
        };
        let [_, _, h, width] = x.dims();
        // [kh, kw, out, in] -> Burn's [in, out, kh, kw]
        let kernel = match S::ONE_D {
            true => w.get::<3>("kernel").permute([2, 1, 0]).unsqueeze_dim(2),
            false => w.get::<4>("kernel").permute([3, 2, 0, 1]),
        };
        let bias = w.has("bias").then(|| w.get::<1>("bias"));
        let geometry = self.geometry([h, width]);
        let y = conv::convolve_transposed(x, kernel, bias, &self.window(), geometry);
        let y = match S::ONE_D {
            true => Act::Seq(conv::image_as_seq(y)),
            false => Act::Image(y),
        };
        super::activate(y, self.activation, ctx)
    }
    affine_activation!();
    fn flops(&self, inputs: &[&[usize]], _: &[usize], trainable: usize) -> f64 {
        // each input position scatters its channels through the whole kernel
        let cin = inputs[0].last().copied().unwrap_or(1).max(1) as f64;
        2.0 * trainable as f64 * size(inputs[0]) / cin
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let (spatial, cin) = self.input(&x.shape)?;
        let f = self.filters;
        let [kh, kw] = self.kernel_size.pair();
        let values = g.weight_values(&format!("{name}/kernel"), &self.kernel_shape(cin))?;
        let kernel = OnnxKernel::from_keras(values, [kh, kw, f, cin]);
        let bias = conv::onnx_bias(g, name, self.use_bias, f)?;
        let window = self.window();
        let geometry = self.geometry(spatial);
        let setup = conv::onnx_transposed(&window, spatial, geometry, kernel, bias);
        let y = conv::onnx_conv(g, name, x, &window, setup, "kernel");
        Ok(activation_onnx(g, name, y, self.activation, x.layout()))
    }
}

impl LayerConfig for Conv1DTranspose {
    const CLASS_NAME: &'static str = "Conv1DTranspose";
    const ALIASES: &'static [&'static str] = &["Convolution1DTranspose"];
}

impl LayerConfig for Conv2DTranspose {
    const CLASS_NAME: &'static str = "Conv2DTranspose";
    const ALIASES: &'static [&'static str] = &["Convolution2DTranspose"];
}
