//! `keras.layers.Dot(axes, normalize=False)` (`keras/src/layers/merging/dot.py`): the dot
//! product of two inputs per example, contracting one axis of each.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::args::keras_shape;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};
use crate::onnx::{OnnxGraph, OnnxValue, int};

/// `axes`: one axis for both inputs, or one per input (Keras counts the batch axis as 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Axes {
    /// The same axis of both inputs.
    One(i64),
    /// `[axis of the first, axis of the second]`.
    Two([i64; 2]),
}

/// `Dot(axes, normalize)` on two `(features,)` inputs (output `(1,)`) or two `(steps,
/// features)` inputs (output the two remaining axes, `(steps_1, steps_2)` for `axes = 2`).
/// With `normalize` each input is first divided by its L2 norm along the contracted axis, so
/// the result is the cosine similarity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dot {
    /// The contracted axes.
    pub axes: Axes,
    /// L2-normalize along the axes first.
    #[serde(default)]
    pub normalize: bool,
}

impl Dot {
    /// The contracted axis of each input as a Keras axis without the batch axis (0-based),
    /// for inputs of rank `rank`.
    fn resolved(&self, rank: usize) -> Result<[usize; 2], String> {
        let pair = match self.axes {
            Axes::One(a) => [a, a],
            Axes::Two(p) => p,
        };
        let mut out = [0; 2];
        for (o, a) in out.iter_mut().zip(pair) {
            let k = if a < 0 { rank as i64 + 1 + a } else { a };
            if k < 1 || k > rank as i64 {
                return Err(format!(
                    "`axes` {a} does not exist for inputs of rank {} (with the batch axis); use \
                     1 to {rank} or -1",
                    rank + 1
                ));
            }
            *o = k as usize - 1;
        }
        Ok(out)
    }
}

/// `x` divided by its L2 norm along `axis` (Keras' `normalize`: `x / sqrt(max(sum(x²),
/// 1e-12))`).
fn l2_normalize<const D: usize>(x: Tensor<D>, axis: usize) -> Tensor<D> {
    let norm = x.clone().powi_scalar(2).sum_dim(axis).clamp_min(1e-12).sqrt();
    x / norm
}

impl Layer for Dot {
    crate::serde_layer!();
    fn arity(&self) -> (usize, usize) {
        (2, 2)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let (a, b) = (inputs[0], inputs[1]);
        if a.len() != b.len() || !(1..=2).contains(&a.len()) {
            return Err(format!(
                "Dot takes two inputs of rank 1 (features,) or 2 (steps, features), got {} and {}",
                keras_shape(a),
                keras_shape(b)
            ));
        }
        let [i, j] = self.resolved(a.len())?;
        if a[i] != b[j] {
            return Err(format!(
                "Dot contracts axes of sizes {} and {} (shapes {} and {}); they must be equal",
                a[i],
                b[j],
                keras_shape(a),
                keras_shape(b)
            ));
        }
        Ok(match a.len() {
            1 => vec![1],
            _ => vec![a[1 - i], b[1 - j]],
        })
    }
    fn forward(&self, inputs: Vec<Act>, _: &Weights, _: ForwardContext) -> Act {
        let mut it = inputs.into_iter();
        match (it.next(), it.next()) {
            (Some(Act::Flat(x)), Some(Act::Flat(y))) => {
                let (x, y) = match self.normalize {
                    true => (l2_normalize(x, 1), l2_normalize(y, 1)),
                    false => (x, y),
                };
                Act::Flat((x * y).sum_dim(1))
            }
            (Some(Act::Seq(x)), Some(Act::Seq(y))) => {
                let [i, j] = self.resolved(2).expect("shape checked");
                let (x, y) = match self.normalize {
                    true => (l2_normalize(x, i + 1), l2_normalize(y, j + 1)),
                    false => (x, y),
                };
                // [b, rest_x, contracted] · [b, contracted, rest_y]
                let x = if i == 1 { x } else { x.swap_dims(1, 2) };
                let y = if j == 0 { y } else { y.swap_dims(1, 2) };
                Act::Seq(x.matmul(y))
            }
            other => panic!("shape checks guarantee two inputs of one rank, got {other:?}"),
        }
    }
    fn flops(&self, inputs: &[&[usize]], output: &[usize], _: usize) -> f64 {
        let contracted = inputs[0].iter().product::<usize>() as f64;
        let rest: f64 = output.iter().map(|&d| d as f64).product();
        2.0 * contracted.max(rest * inputs[0].last().copied().unwrap_or(1) as f64)
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let (x, y) = (&inputs[0], &inputs[1]);
        let rank = x.shape.len();
        let [i, j] = self.resolved(rank)?;
        let norm = |g: &mut OnnxGraph, v: &str, axis: usize| match self.normalize {
            true => {
                let sq = g.node(name, "Mul", &[v, v], vec![]);
                let axes = g.int64s(name, &[axis as i64 + 1]);
                let sum = g.node(name, "ReduceSum", &[&sq, &axes], vec![int("keepdims", 1)]);
                let floor = g.scalar(name, 1e-12);
                let clamped = g.node(name, "Max", &[&sum, &floor], vec![]);
                let n = g.node(name, "Sqrt", &[&clamped], vec![]);
                g.node(name, "Div", &[v, &n], vec![])
            }
            false => v.to_string(),
        };
        let (xn, yn) = (norm(g, &x.name, i), norm(g, &y.name, j));
        if rank == 1 {
            let p = g.node(name, "Mul", &[&xn, &yn], vec![]);
            let axes = g.int64s(name, &[1]);
            return Ok(g.node(name, "ReduceSum", &[&p, &axes], vec![int("keepdims", 1)]));
        }
        let xt = if i == 1 { xn } else { g.transpose(name, &xn, &[0, 2, 1]) };
        let yt = if j == 0 { yn } else { g.transpose(name, &yn, &[0, 2, 1]) };
        Ok(g.node(name, "MatMul", &[&xt, &yt], vec![]))
    }
}

impl LayerConfig for Dot {
    const CLASS_NAME: &'static str = "Dot";
}
