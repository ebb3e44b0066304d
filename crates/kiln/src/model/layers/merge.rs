//! The element-wise merge layers (`Add`, `Subtract`, `Multiply`, `Average`, `Maximum`,
//! `Minimum`): inputs of one shape, one value out per position. [`Merge`] holds what differs
//! between them; [`merge_layer!`] writes each layer's type from it (its file is one call).
//! Keras broadcasts inputs of different shapes; kiln asks for equal shapes.

use burn::prelude::*;

use crate::model::act::Act;
use crate::model::args::keras_shape;
use crate::onnx::{OnnxGraph, OnnxValue};

/// How the inputs are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Merge {
    Add,
    Subtract,
    Multiply,
    Average,
    Maximum,
    Minimum,
}

impl Merge {
    /// The Keras class name.
    pub(super) fn class(self) -> &'static str {
        match self {
            Merge::Add => "Add",
            Merge::Subtract => "Subtract",
            Merge::Multiply => "Multiply",
            Merge::Average => "Average",
            Merge::Maximum => "Maximum",
            Merge::Minimum => "Minimum",
        }
    }

    /// `(least, most)` inputs: `Subtract` takes exactly two.
    pub(super) fn arity(self) -> (usize, usize) {
        match self {
            Merge::Subtract => (2, 2),
            _ => (2, usize::MAX),
        }
    }

    /// The common shape of `inputs`, or the message naming two that differ.
    pub(super) fn output_shape(self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let first = inputs[0];
        match inputs.iter().find(|s| **s != first) {
            Some(other) => Err(format!(
                "{} needs inputs of one shape, got {} and {}",
                self.class(),
                keras_shape(first),
                keras_shape(other)
            )),
            None => Ok(first.to_vec()),
        }
    }

    fn combine<const D: usize>(self, a: Tensor<D>, b: Tensor<D>) -> Tensor<D> {
        match self {
            Merge::Add | Merge::Average => a + b,
            Merge::Subtract => a - b,
            Merge::Multiply => a * b,
            Merge::Maximum => a.max_pair(b),
            Merge::Minimum => a.min_pair(b),
        }
    }

    /// Keras' order: the inputs folded left to right; `Average` divides the sum by their count.
    pub(super) fn forward(self, inputs: Vec<Act>) -> Act {
        let count = inputs.len() as f32;
        let mut it = inputs.into_iter();
        let first = it.next().expect("merge layers have inputs");
        let folded = it.fold(first, |acc, x| match (acc, x) {
            (Act::Flat(a), Act::Flat(b)) => Act::Flat(self.combine(a, b)),
            (Act::Seq(a), Act::Seq(b)) => Act::Seq(self.combine(a, b)),
            (Act::Image(a), Act::Image(b)) => Act::Image(self.combine(a, b)),
            (a, b) => panic!("shape checks guarantee equal ranks, got {a:?} and {b:?}"),
        });
        if self != Merge::Average {
            return folded;
        }
        match folded {
            Act::Flat(t) => Act::Flat(t / count),
            Act::Seq(t) => Act::Seq(t / count),
            Act::Image(t) => Act::Image(t / count),
            Act::Volume(_) => crate::model::act::volume_refused("Average"),
        }
    }

    /// Whether the backward pass keeps the inputs' values (a product's gradient is the other
    /// factor; sums and differences need only shapes; `Maximum`/`Minimum` keep a mask).
    pub(super) fn saves_input(self) -> bool {
        self == Merge::Multiply
    }

    /// `Maximum`/`Minimum` keep, per pairwise step, a boolean mask (a quarter of a float32
    /// value per output value).
    pub(super) fn extra_kept(self, output: &[usize]) -> f64 {
        match self {
            Merge::Maximum | Merge::Minimum => 0.25 * super::size(output),
            _ => 0.0,
        }
    }

    /// All but `Average` compute in a 16-bit type where the device can: `Average` sums its
    /// inputs before dividing, and two finite float16 values may sum to Inf.
    pub(super) fn computes_in_half(self) -> bool {
        !matches!(self, Merge::Average)
    }

    /// `Maximum`/`Minimum` output values of their inputs.
    pub(super) fn passes_values(self) -> bool {
        matches!(self, Merge::Maximum | Merge::Minimum)
    }

    /// `Add`, `Sub`, `Mul` folded over the inputs; ONNX's variadic `Mean`, `Max`, `Min`.
    pub(super) fn onnx(self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> String {
        let names: Vec<&str> = inputs.iter().map(|v| v.name.as_str()).collect();
        let binary = match self {
            Merge::Add => "Add",
            Merge::Subtract => "Sub",
            Merge::Multiply => "Mul",
            Merge::Average => return g.node(name, "Mean", &names, vec![]),
            Merge::Maximum => return g.node(name, "Max", &names, vec![]),
            Merge::Minimum => return g.node(name, "Min", &names, vec![]),
        };
        let first = names[0].to_string();
        names[1..]
            .iter()
            .fold(first, |acc, x| g.node(name, binary, &[&acc, x], vec![]))
    }
}

/// Declares the merge layer type `$name` (no arguments) doing [`Merge`]`::$name`.
macro_rules! merge_layer {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {}

        impl $crate::model::layer::Layer for $name {
            $crate::serde_layer!();
            fn arity(&self) -> (usize, usize) {
                super::merge::Merge::$name.arity()
            }
            fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
                super::merge::Merge::$name.output_shape(inputs)
            }
            fn forward(
                &self,
                inputs: Vec<$crate::model::act::Act>,
                _: &$crate::model::layer::Weights,
                _: $crate::model::layer::ForwardContext,
            ) -> $crate::model::act::Act {
                super::merge::Merge::$name.forward(inputs)
            }
            fn saves_input(&self) -> bool {
                super::merge::Merge::$name.saves_input()
            }
            fn extra_kept(&self, _: &[&[usize]], output: &[usize]) -> f64 {
                super::merge::Merge::$name.extra_kept(output)
            }
            fn passes_values(&self) -> bool {
                super::merge::Merge::$name.passes_values()
            }
            fn computes_in_half(&self) -> bool {
                super::merge::Merge::$name.computes_in_half()
            }
            fn onnx(
                &self,
                g: &mut $crate::onnx::OnnxGraph,
                inputs: &[$crate::onnx::OnnxValue],
                name: &str,
            ) -> Result<String, String> {
                Ok(super::merge::Merge::$name.onnx(g, inputs, name))
            }
        }

        impl $crate::model::layer::LayerConfig for $name {
            const CLASS_NAME: &'static str = stringify!($name);
        }
    };
}

pub(super) use merge_layer;
