//! `keras.layers.Add()`: the element-wise sum of two or more inputs of one shape.

use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::args::keras_shape;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// `Add()`: inputs of one shape, any rank; output the same shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Add {}

impl Layer for Add {
    crate::serde_layer!();
    fn arity(&self) -> (usize, usize) {
        (2, usize::MAX)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let first = inputs[0];
        match inputs.iter().find(|s| **s != first) {
            Some(other) => Err(format!(
                "Add needs inputs of one shape, got {} and {}",
                keras_shape(first),
                keras_shape(other)
            )),
            None => Ok(first.to_vec()),
        }
    }
    fn forward(&self, inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let mut it = inputs.into_iter();
        let first = it.next().expect("Add has inputs");
        it.fold(first, |acc, x| match (acc, x) {
            (Act::Flat(a), Act::Flat(b)) => Act::Flat(a + b),
            (Act::Seq(a), Act::Seq(b)) => Act::Seq(a + b),
            (Act::Image(a), Act::Image(b)) => Act::Image(a + b),
            (a, b) => panic!("shape checks guarantee equal ranks, got {a:?} + {b:?}"),
        })
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let first = inputs[0].name.clone();
        Ok(inputs[1..].iter().fold(first, |acc, x| {
            g.node(name, "Add", &[&acc, &x.name], vec![])
        }))
    }
}

impl LayerConfig for Add {
    const CLASS_NAME: &'static str = "Add";
}
