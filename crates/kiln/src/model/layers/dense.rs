//! `keras.layers.Dense(units, activation=None, use_bias=True)`: an affine map of the last axis.

use serde::{Deserialize, Serialize};

use super::{activation_onnx, channels_last, default_true};
use crate::model::act::Act;
use crate::ops::Epilogue;
use crate::model::args::{Activation, keras_shape};
use crate::model::layer::{
    Field, ForwardContext, Layer, LayerConfig, Storage, WeightInit, WeightSpec, Weights,
};
use crate::onnx::{OnnxGraph, OnnxValue};
use crate::tflite::{Options, TfliteGraph, TfliteValue, op};

/// `Dense(units, activation, use_bias)` on the last axis of an input of any rank: `kernel
/// [inputs, units]` (`glorot_uniform`), `bias [units]` (zeros); output the input's shape with
/// the last axis `units`. A ReLU is fused into the matrix product.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dense {
    /// Output features.
    pub units: usize,
    /// Applied after the affine map.
    #[serde(default)]
    pub activation: Activation,
    /// Adds a bias vector.
    #[serde(default = "default_true")]
    pub use_bias: bool,
}

impl Dense {
    /// `Dense(units)` with a bias and no activation.
    pub fn new(units: usize) -> Dense {
        Dense {
            units,
            activation: Activation::Linear,
            use_bias: true,
        }
    }

    /// The layer with `activation`.
    pub fn with_activation(mut self, activation: Activation) -> Dense {
        self.activation = activation;
        self
    }
}

/// `x · kernel + bias` on the rows of the last axis ([`crate::ops::dense`]), fused with a ReLU
/// when `relu`; images are taken channels-last.
fn affine(x: Act, w: &Weights, epilogue: Epilogue) -> Act {
    let kernel = w.get::<2>("kernel");
    let bias = w.has("bias").then(|| w.get::<1>("bias"));
    let f = |x2| crate::ops::dense(x2, kernel.clone(), bias.clone(), epilogue);
    match x {
        Act::Flat(t) => Act::Flat(f(t)),
        Act::Seq(t) => {
            let [n, s, features] = t.dims();
            let y = f(t.reshape([n * s, features]));
            let units = y.dims()[1];
            Act::Seq(y.reshape([n, s, units]))
        }
        Act::Image(t) => {
            let [n, c, h, width] = t.dims();
            let y = f(t.permute([0, 2, 3, 1]).reshape([n * h * width, c]));
            let units = y.dims()[1];
            Act::Image(y.reshape([n, h, width, units]).permute([0, 3, 1, 2]))
        }
        volume @ Act::Volume(_) => {
            let t = volume.into_keras_volume();
            let [n, d, h, width, c] = t.dims();
            let y = f(t.reshape([n * d * h * width, c]));
            let units = y.dims()[1];
            Act::from_keras_volume(y.reshape([n, d, h, width, units]))
        }
    }
}

impl Layer for Dense {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        super::positive("units", self.units)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let input = inputs[0];
        if input.is_empty() {
            return Err(format!(
                "Dense needs an input with at least one axis, got {}",
                keras_shape(input)
            ));
        }
        let mut out = input.to_vec();
        *out.last_mut().expect("not empty") = self.units;
        Ok(out)
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let cin = inputs[0].last().copied().unwrap_or(0);
        let kernel = WeightSpec::new("kernel", vec![cin, self.units], WeightInit::GlorotUniform);
        let mut out = vec![kernel.stored(Storage::Field(Field::DenseKernel))];
        if self.use_bias {
            let bias = WeightSpec::new("bias", vec![self.units], WeightInit::Zeros);
            out.push(bias.stored(Storage::Field(Field::Bias)));
        }
        out
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        let x = inputs.pop().expect("one input");
        let relu = self.activation == Activation::Relu;
        let y = affine(x, w, Epilogue::new(relu, ctx.compute));
        super::finish_rounded(y, self.activation, ctx)
    }
    fn rounds_output(&self) -> bool {
        super::rounded_by_kernel(self.activation)
    }
    affine_activation!();
    fn computes_in_half(&self) -> bool {
        true
    }
    fn supports_masking(&self) -> bool {
        true
    }
    fn takes_volumes(&self) -> bool {
        true
    }

    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let cin = x.shape.last().copied().unwrap_or(0);
        let prefix = format!("{name}/");
        let y = channels_last(g, name, x, |g, v| {
            g.dense(&prefix, v, [cin, self.units], self.use_bias)
        })?;
        Ok(activation_onnx(g, name, y, self.activation, x.layout()))
    }

    fn tflite(
        &self,
        g: &mut TfliteGraph,
        inputs: &[TfliteValue],
        name: &str,
    ) -> Result<TfliteValue, String> {
        let x = &inputs[0];
        let cin = x.shape.last().copied().unwrap_or(0);
        let kernel = g.weight(&format!("{name}/kernel"), &[cin, self.units])?;
        let kernel = super::tflite_ops::transpose(kernel, cin, self.units);
        let w = g.kernel(&format!("{name}/kernel"), &[self.units, cin], &kernel, false);
        let b = match self.use_bias {
            true => {
                let bias = g.weight(&format!("{name}/bias"), &[self.units])?.to_vec();
                g.constant(&format!("{name}/bias"), &[self.units], &bias)
            }
            false => -1,
        };
        let (act, rest) = super::tflite_ops::fused(self.activation);
        let mut shape = x.shape.clone();
        *shape.last_mut().expect("Dense takes a feature axis") = self.units;
        let options = Options::FullyConnected {
            act,
            keep_num_dims: x.shape.len() > 1,
        };
        let y = g.op(name, op::FULLY_CONNECTED, &[x.index, w, b], &shape, options);
        super::tflite_ops::activate(g, name, y, rest)
    }
}

impl LayerConfig for Dense {
    const CLASS_NAME: &'static str = "Dense";
}
