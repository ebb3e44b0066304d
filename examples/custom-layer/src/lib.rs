//! A layer of one's own, as Keras' "Simple custom layer example: Antirectifier"
//! (keras.io/examples/keras_recipes/antirectifier) writes it, in Rust: the layer is one type
//! that implements [`kiln::model::Layer`], registered under its Keras class name so that a
//! TOML config can say `{ type = "Antirectifier" }`.

use burn::prelude::*;
use burn::tensor::activation::relu;
use kiln::model::{Act, ForwardContext, Layer, LayerConfig, WeightInit, WeightSpec, Weights};
use serde::{Deserialize, Serialize};

/// `Antirectifier()`: centres each example's features, then concatenates their positive and
/// negative parts (`relu(x)`, `relu(-x)`) and mixes them back to the input's size with a
/// trainable `kernel [2 * features, features]`.
///
/// # Shapes
/// - input: `(features,)`
/// - output: `(features,)`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Antirectifier {}

impl Layer for Antirectifier {
    kiln::serde_layer!();

    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        match inputs[0] {
            [f] => Ok(vec![*f]),
            other => Err(format!(
                "Antirectifier expects a 1-D input (features,), got shape {}",
                kiln::model::keras_shape(other)
            )),
        }
    }

    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let f = inputs[0][0];
        vec![WeightSpec::new(
            "kernel",
            vec![2 * f, f],
            WeightInit::GlorotUniform,
        )]
    }

    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, _: ForwardContext) -> Act {
        let x = inputs.remove(0).into_flat();
        let x = x.clone() - x.mean_dim(1);
        let both = Tensor::cat(vec![relu(x.clone()), relu(x.neg())], 1);
        Act::Flat(both.matmul(w.get::<2>("kernel")))
    }

    fn extra_kept(&self, output: &[usize]) -> f64 {
        // The centred input and the concatenation: 3 values per feature.
        3.0 * output[0] as f64
    }
}

impl LayerConfig for Antirectifier {
    const CLASS_NAME: &'static str = "Antirectifier";
}

/// Registers this crate's layers (call once, before reading a config).
///
/// # Errors
/// When a layer type of the same name is already registered.
pub fn register() -> kiln::Result<()> {
    kiln::model::register_layer::<Antirectifier>()
}
