//! `keras.layers.RandomFlip(mode="horizontal_and_vertical", seed=None)`: flips each image of a
//! training batch with probability 1/2 (one draw per image; with `"horizontal_and_vertical"`
//! that draw flips both axes, as Keras 3 does); the identity at inference.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::image_ops::{identity_at_inference, in_training, per_example, uniform};
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};

/// Which axes `RandomFlip` flips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FlipAxes {
    /// Left-right.
    Horizontal,
    /// Top-bottom.
    Vertical,
    /// Both at once.
    #[default]
    HorizontalAndVertical,
}

/// `RandomFlip(mode, seed)`. kiln draws from the run's seeded generator; `seed` is accepted
/// for Keras configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomFlip {
    /// `"horizontal"`, `"vertical"` or `"horizontal_and_vertical"` (default).
    #[serde(default)]
    pub mode: FlipAxes,
    /// Keras' seed (accepted; kiln's draws follow the run's seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl RandomFlip {
    /// `t` with the NCHW axes of the mode flipped.
    fn flipped(&self, t: Tensor<4>) -> Tensor<4> {
        match self.mode {
            FlipAxes::Horizontal => t.flip([3]),
            FlipAxes::Vertical => t.flip([2]),
            FlipAxes::HorizontalAndVertical => t.flip([2, 3]),
        }
    }

    /// `t` with the images whose draw is at most 1/2 flipped.
    fn flip(&self, t: Tensor<4>) -> Tensor<4> {
        let b = t.dims()[0];
        let flips: Vec<f32> = uniform(&t.device(), b, (0.0, 1.0))
            .into_iter()
            .map(|u| f32::from(u8::from(u <= 0.5)))
            .collect();
        let m = per_example(&t, flips);
        let flipped = self.flipped(t.clone());
        t * m.clone().neg().add_scalar(1.0) + flipped * m
    }
}

impl Layer for RandomFlip {
    crate::serde_layer!();
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        super::image_shape(inputs[0], "RandomFlip")?;
        Ok(inputs[0].to_vec())
    }
    fn forward(&self, mut inputs: Vec<Act>, _: &Weights, ctx: ForwardContext) -> Act {
        in_training(inputs.remove(0), ctx, |t| self.flip(t))
    }
    fn passes_values(&self) -> bool {
        true
    }
    identity_at_inference!();
}

impl LayerConfig for RandomFlip {
    const CLASS_NAME: &'static str = "RandomFlip";
}
