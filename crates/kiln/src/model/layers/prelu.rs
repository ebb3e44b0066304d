//! `keras.layers.PReLU(alpha_initializer="zeros", shared_axes=None)`: a leaky ReLU whose slope
//! `alpha` is learnt, one per input value or shared along `shared_axes`.

use burn::prelude::*;
use burn::tensor::activation::relu;
use serde::{Deserialize, Deserializer, Serialize};

use super::pointwise::batch_broadcast;
use crate::model::act::Act;
use crate::model::args::keras_shape;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, WeightInit, WeightSpec, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// `PReLU(shared_axes)`: `relu(x) - alpha * relu(-x)`, with a trainable `alpha` of the
/// input's shape (without the batch) in which the `shared_axes` have size 1. Its initializer,
/// regularizer and constraint are the per-weight options `alpha_initializer` (default
/// `"zeros"`), `alpha_regularizer`, `alpha_constraint`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PReLU {
    /// Axes (Keras counting the batch as 0, so from 1) along which one slope is shared; an
    /// integer or a list.
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Option::is_none"
    )]
    pub shared_axes: Option<Vec<i64>>,
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<i64>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Axes {
        One(i64),
        Many(Vec<i64>),
    }
    Ok(Some(match Axes::deserialize(d)? {
        Axes::One(a) => vec![a],
        Axes::Many(v) => v,
    }))
}

impl PReLU {
    /// `alpha`'s shape for an input of Keras shape `input`, or why an axis does not fit.
    fn alpha_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        let mut shape = input.to_vec();
        for &a in self.shared_axes.iter().flatten() {
            if a < 1 || a as usize > input.len() {
                return Err(format!(
                    "`shared_axes` holds {a}, not an axis of input shape {} (1 to {})",
                    keras_shape(input),
                    input.len()
                ));
            }
            shape[a as usize - 1] = 1;
        }
        Ok(shape)
    }
}

impl Layer for PReLU {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        self.alpha_shape(inputs[0])?;
        Ok(inputs[0].to_vec())
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        // Model building asks for the weights before the shape check reports a bad axis.
        let shape = self.alpha_shape(inputs[0]).unwrap_or_else(|_| inputs[0].to_vec());
        vec![WeightSpec::new("alpha", shape, WeightInit::Zeros)]
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, _: ForwardContext) -> Act {
        let spec = w.specs.iter().find(|s| s.name == "alpha");
        let shape = &spec.expect("PReLU declares `alpha`").shape;
        let alpha = w.get_flat("alpha");
        match inputs.pop().expect("one input") {
            Act::Flat(t) => Act::Flat(prelu(t, alpha, shape)),
            Act::Seq(t) => Act::Seq(prelu(t, alpha, shape)),
            Act::Image(t) => Act::Image(prelu(t, alpha, shape)),
            Act::Volume(_) => crate::model::act::volume_refused("PReLU"),
        }
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let shape = self.alpha_shape(&x.shape)?;
        // ONNX's PRelu broadcasts the slope against `[batch, ...]` as kiln lays the value
        // out (images NCHW): alpha as `[c, h, w]` for images.
        let values = g.weight_values(&format!("{name}/alpha"), &shape)?.to_vec();
        let (dims, values) = match shape.as_slice() {
            [h, w, c] => (vec![*c, *h, *w], hwc_to_chw(&values, [*h, *w, *c])),
            other => (other.to_vec(), values),
        };
        let alpha = g.named_constant(&format!("{name}/alpha"), &dims, &values);
        Ok(g.node(name, "PRelu", &[&x.name, &alpha], vec![]))
    }
}

/// `relu(t) - alpha * relu(-t)`, `alpha` (flat, of Keras shape `shape`) broadcast over the
/// batch.
fn prelu<const D: usize>(t: Tensor<D>, alpha: Tensor<1>, shape: &[usize]) -> Tensor<D> {
    relu(t.clone()) - batch_broadcast::<D>(alpha, shape) * relu(-t)
}

/// Row-major `[h, w, c]` values reordered to `[c, h, w]`.
fn hwc_to_chw(v: &[f32], [h, w, c]: [usize; 3]) -> Vec<f32> {
    let at = |k: usize| {
        let (ch, rest) = (k / (h * w), k % (h * w));
        v[rest * c + ch]
    };
    (0..v.len()).map(at).collect()
}

impl LayerConfig for PReLU {
    const CLASS_NAME: &'static str = "PReLU";
}
