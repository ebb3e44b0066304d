//! `keras.layers.GroupNormalization(groups=32, axis=-1, epsilon=1e-3, center=True,
//! scale=True)`: the channels split into `groups`, each group normalized per example over
//! its channels and all positions, then scaled and shifted per channel.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::pointwise::last_axis;
use super::{channels_last, default_true, positive_epsilon};
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, WeightInit, WeightSpec, Weights};
use crate::onnx::{OnnxGraph, OnnxValue, int, ints};

fn default_groups() -> i64 {
    32
}
fn default_axis() -> i64 {
    -1
}
fn default_epsilon() -> f64 {
    1e-3
}

/// `GroupNormalization(groups, axis, epsilon, center, scale)` over the last (channel) axis:
/// `gamma` (ones) and `beta` (zeros) of `[channels]`, each only when `scale` / `center`.
/// `groups = -1` is instance normalization (a group per channel). Other axes are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupNormalization {
    /// Number of groups, dividing the channels (`-1`: one per channel).
    #[serde(default = "default_groups")]
    pub groups: i64,
    /// The axis, Keras counting the batch as 0: `-1` or the input's last.
    #[serde(default = "default_axis")]
    pub axis: i64,
    /// Added to the variance before the square root.
    #[serde(default = "default_epsilon")]
    pub epsilon: f64,
    /// Add the trainable offset `beta`.
    #[serde(default = "default_true")]
    pub center: bool,
    /// Multiply by the trainable `gamma`.
    #[serde(default = "default_true")]
    pub scale: bool,
}

impl Default for GroupNormalization {
    fn default() -> Self {
        GroupNormalization {
            groups: default_groups(),
            axis: default_axis(),
            epsilon: default_epsilon(),
            center: true,
            scale: true,
        }
    }
}

impl GroupNormalization {
    /// The number of groups over `channels`.
    fn groups_of(&self, channels: usize) -> usize {
        match self.groups {
            -1 => channels,
            g => g as usize,
        }
    }

    /// `x` (`[batch, positions, channels]`) normalized per example and group.
    fn normalize(&self, x: Tensor<3>, w: &Weights) -> Tensor<3> {
        let [b, n, c] = x.dims();
        let g = self.groups_of(c);
        let x = x.reshape([b, n, g, c / g]);
        let mean = x.clone().mean_dim(1).mean_dim(3);
        let centered = x - mean;
        let var = centered.clone().square().mean_dim(1).mean_dim(3);
        let mut y = (centered / var.add_scalar(self.epsilon).sqrt()).reshape([b, n, c]);
        if self.scale {
            y = y * w.get::<1>("gamma").reshape([1, 1, c]);
        }
        if self.center {
            y = y + w.get::<1>("beta").reshape([1, 1, c]);
        }
        y
    }
}

impl Layer for GroupNormalization {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    fn validate(&self) -> Result<(), String> {
        if self.groups <= 0 && self.groups != -1 {
            return Err(format!(
                "`groups` must be positive (or -1 for a group per channel), got {}",
                self.groups
            ));
        }
        positive_epsilon("epsilon", self.epsilon)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let input = inputs[0];
        last_axis(self.axis, input)?;
        let c = input.last().copied().unwrap_or(0);
        let g = self.groups_of(c);
        if g == 0 || g > c || c % g != 0 {
            return Err(format!(
                "`groups` {g} does not divide the {c} channels of the input; choose a divisor \
                 of {c}"
            ));
        }
        Ok(input.to_vec())
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let c = inputs[0].last().copied().unwrap_or(0);
        let mut specs = Vec::new();
        if self.scale {
            specs.push(WeightSpec::new("gamma", vec![c], WeightInit::Ones));
        }
        if self.center {
            specs.push(WeightSpec::new("beta", vec![c], WeightInit::Zeros));
        }
        specs
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, _: ForwardContext) -> Act {
        match inputs.pop().expect("one input") {
            Act::Flat(t) => {
                let [b, c] = t.dims();
                Act::Flat(self.normalize(t.reshape([b, 1, c]), w).reshape([b, c]))
            }
            Act::Seq(t) => Act::Seq(self.normalize(t, w)),
            Act::Image(t) => {
                let [b, c, h, wd] = t.dims();
                let rows = t.permute([0, 2, 3, 1]).reshape([b, h * wd, c]);
                let y = self.normalize(rows, w).reshape([b, h, wd, c]);
                Act::Image(y.permute([0, 3, 1, 2]))
            }
            Act::Volume(_) => crate::model::act::volume_refused("GroupNormalization"),
        }
    }
    fn extra_kept(&self, _: &[&[usize]], output: &[usize]) -> f64 {
        // The normalized values and the per-group statistics.
        1.1 * super::size(output)
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        channels_last(g, name, x, |g, v| self.onnx_channels_last(g, v, &x.shape, name))
    }
}

impl GroupNormalization {
    /// The ONNX nodes on `v`, channels last, of Keras shape `shape`: reshaped to `[batch,
    /// positions, groups, channels / groups]`, normalized over axes 1 and 3, reshaped back,
    /// scaled and shifted.
    fn onnx_channels_last(
        &self,
        g: &mut OnnxGraph,
        v: &str,
        shape: &[usize],
        name: &str,
    ) -> Result<String, String> {
        let c = shape.last().copied().unwrap_or(0);
        let groups = self.groups_of(c);
        let positions: usize = shape[..shape.len() - 1].iter().product();
        let grouped = [0, positions, groups, c / groups].map(|d| d as i64);
        let x = g.reshape(name, v, &grouped);
        let mean_attrs = || vec![ints("axes", &[1, 3]), int("keepdims", 1)];
        let mean = g.node(name, "ReduceMean", &[&x], mean_attrs());
        let centered = g.node(name, "Sub", &[&x, &mean], vec![]);
        let squares = g.node(name, "Mul", &[&centered, &centered], vec![]);
        let var = g.node(name, "ReduceMean", &[&squares], mean_attrs());
        let eps = g.scalar(name, self.epsilon as f32);
        let var = g.node(name, "Add", &[&var, &eps], vec![]);
        let std = g.node(name, "Sqrt", &[&var], vec![]);
        let normed = g.node(name, "Div", &[&centered, &std], vec![]);
        let back: Vec<i64> = std::iter::once(0)
            .chain(shape.iter().map(|&d| d as i64))
            .collect();
        let mut y = g.reshape(name, &normed, &back);
        for (on, part, op) in [(self.scale, "gamma", "Mul"), (self.center, "beta", "Add")] {
            if on {
                let p = g.weight(&format!("{name}/{part}"), &[c], &[c])?;
                y = g.node(name, op, &[&y, &p], vec![]);
            }
        }
        Ok(y)
    }
}

impl LayerConfig for GroupNormalization {
    const CLASS_NAME: &'static str = "GroupNormalization";
}
