//! `keras.layers.BatchNormalization(axis=-1, momentum=0.99, epsilon=0.001, center=True,
//! scale=True)` over the last (channel) axis.

use burn::prelude::*;
use burn::tensor::module::batch_norm;
use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::layer::{
    Field, ForwardContext, Layer, LayerConfig, Storage, WeightInit, WeightSpec, Weights,
};
use crate::onnx::{Layout, OnnxGraph, OnnxValue, float};
use crate::tflite::{Options, TfliteGraph, TfliteValue, op};

fn default_momentum() -> f64 {
    0.99
}
fn default_epsilon() -> f64 {
    1e-3
}
fn default_axis() -> i64 {
    -1
}
fn is_last(axis: &i64) -> bool {
    *axis == -1
}
fn is_true(v: &bool) -> bool {
    *v
}

/// `BatchNormalization(axis, momentum, epsilon, center, scale)`: `gamma` (ones, only with
/// `scale`), `beta` (zeros, only with `center`) and the non-trainable `moving_mean` (zeros) and `moving_variance` (ones), each `[channels]`.
/// Training normalizes with the batch's statistics (across replicas under a synchronized
/// strategy) and moves the moving ones: `moving = moving * momentum + batch * (1 - momentum)`,
/// Keras' rule with the biased variance; inference, and a frozen layer (`trainable = false`,
/// as in Keras 3), use the moving statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchNormalization {
    /// Moving-average momentum: `moving = moving * momentum + batch * (1 - momentum)`.
    #[serde(default = "default_momentum")]
    pub momentum: f64,
    /// Added to the variance before the square root.
    #[serde(default = "default_epsilon")]
    pub epsilon: f64,
    /// The normalized axis, Keras counting the batch as 0: `-1` or the input's last.
    #[serde(default = "default_axis", skip_serializing_if = "is_last")]
    pub axis: i64,
    /// Add the trainable offset `beta`.
    #[serde(default = "super::default_true", skip_serializing_if = "is_true")]
    pub center: bool,
    /// Multiply by the trainable `gamma`.
    #[serde(default = "super::default_true", skip_serializing_if = "is_true")]
    pub scale: bool,
}

impl Default for BatchNormalization {
    fn default() -> Self {
        BatchNormalization {
            momentum: default_momentum(),
            epsilon: default_epsilon(),
            axis: default_axis(),
            center: true,
            scale: true,
        }
    }
}

/// Normalized values and, in training, the batch's `(mean, variance)`.
type Normalized<const D: usize> = (Tensor<D>, Option<(Tensor<1>, Tensor<1>)>);

impl BatchNormalization {
    /// Burn's batch norm over axis 1 of `x` (`[batch, channels, ...]`).
    fn normalize<const D: usize>(&self, x: Tensor<D>, w: &Weights, train: bool) -> Normalized<D> {
        let mean = w.get::<1>("moving_mean");
        let (gamma, beta) = self.gamma_beta(w, &mean);
        let eps = self.epsilon;
        if train && crate::replica::active() {
            // Sums shifted by the moving mean, which every replica holds alike.
            let (y, m, v) = super::batch_norm_sync::batch_norm_sync(x, gamma, beta, mean, eps);
            (y, Some((m, v)))
        } else if train {
            let (y, mean, variance) = crate::ops::batch_norm_train(x, gamma, beta, eps);
            (y, Some((mean, variance)))
        } else {
            let var = w.get::<1>("moving_variance");
            (batch_norm(x, gamma, beta, mean, var, eps), None)
        }
    }

    /// `gamma` and `beta`, or ones and zeros (shaped as `like`) for those `scale` and `center`
    /// leave out.
    fn gamma_beta(&self, w: &Weights, like: &Tensor<1>) -> (Tensor<1>, Tensor<1>) {
        let gamma = match self.scale {
            true => w.get::<1>("gamma"),
            false => like.ones_like(),
        };
        let beta = match self.center {
            true => w.get::<1>("beta"),
            false => like.zeros_like(),
        };
        (gamma, beta)
    }

    /// Moves the moving statistics towards the batch's.
    fn assign_moving(&self, w: &Weights, (mean, var): (Tensor<1>, Tensor<1>)) {
        let m = self.momentum;
        for (name, batch) in [("moving_mean", mean), ("moving_variance", var)] {
            let old = w.get::<1>(name).detach();
            w.assign(name, old * m + batch.detach() * (1.0 - m));
        }
    }
}

impl Layer for BatchNormalization {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    fn takes_volumes(&self) -> bool {
        true
    }
    fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.momentum) {
            return Err(format!(
                "`momentum` must be in [0, 1], got {}",
                self.momentum
            ));
        }
        super::positive_epsilon("epsilon", self.epsilon)
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        super::pointwise::last_axis(self.axis, inputs[0])?;
        Ok(inputs[0].to_vec())
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let c = inputs[0].last().copied().unwrap_or(0);
        let w = |name: &str, init, field| {
            WeightSpec::new(name, vec![c], init).stored(Storage::Field(field))
        };
        let gamma = self.scale.then(|| w("gamma", WeightInit::Ones, Field::Gamma));
        let beta = self.center.then(|| w("beta", WeightInit::Zeros, Field::Beta));
        let moving = [
            w("moving_mean", WeightInit::Zeros, Field::MovingMean).frozen(),
            w("moving_variance", WeightInit::Ones, Field::MovingVariance).frozen(),
        ];
        gamma.into_iter().chain(beta).chain(moving).collect()
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        // Keras 3: a frozen BatchNormalization normalizes with its moving statistics.
        let train = ctx.training && ctx.trainable;
        // Burn normalizes over axis 1: Flat, Image and Volume have the features there; Seq keeps them
        // last and is transposed around the call.
        let (y, stats) = match inputs.pop().expect("one input") {
            Act::Flat(t) => {
                let (y, s) = self.normalize(t, w, train);
                (Act::Flat(y), s)
            }
            Act::Image(t) => {
                let (y, s) = self.normalize(t, w, train);
                (Act::Image(y), s)
            }
            Act::Volume(t) => {
                let (y, s) = self.normalize(t, w, train);
                (Act::Volume(y), s)
            }
            Act::Seq(t) => {
                let (y, s) = self.normalize(t.swap_dims(1, 2), w, train);
                (Act::Seq(y.swap_dims(1, 2)), s)
            }
        };
        if let Some(stats) = stats {
            self.assign_moving(w, stats);
        }
        y
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let x = &inputs[0];
        let c = x.shape.last().copied().unwrap_or(0);
        let mut args = vec![x.name.clone()];
        for (part, on, fill) in [
            ("gamma", self.scale, 1.0),
            ("beta", self.center, 0.0),
            ("moving_mean", true, 0.0),
            ("moving_variance", true, 0.0),
        ] {
            args.push(match on {
                true => g.weight(&format!("{name}/{part}"), &[c], &[c])?,
                false => g.constant(name, &[c], &vec![fill; c]),
            });
        }
        let attrs = vec![float("epsilon", self.epsilon as f32)];
        if x.layout() != Layout::Seq {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            return Ok(g.node(name, "BatchNormalization", &refs, attrs));
        }
        // ONNX normalizes axis 1: [n, s, f] -> [n, f, s] and back.
        args[0] = g.transpose(name, &x.name, &[0, 2, 1]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let y = g.node(name, "BatchNormalization", &refs, attrs);
        Ok(g.transpose(name, &y, &[0, 2, 1]))
    }

    fn tflite(
        &self,
        g: &mut TfliteGraph,
        inputs: &[TfliteValue],
        name: &str,
    ) -> Result<TfliteValue, String> {
        // Inference: x * scale + shift per channel (the last axis), with scale = gamma /
        // sqrt(moving_variance + epsilon) and shift = beta - moving_mean * scale.
        let x = &inputs[0];
        let c = x.shape.last().copied().unwrap_or(0);
        let get = |g: &TfliteGraph, w: &str, present: bool, default: f32| -> Result<Vec<f32>, String> {
            match present {
                true => Ok(g.weight(&format!("{name}/{w}"), &[c])?.to_vec()),
                false => Ok(vec![default; c]),
            }
        };
        let gamma = get(g, "gamma", self.scale, 1.0)?;
        let beta = get(g, "beta", self.center, 0.0)?;
        let mean = get(g, "moving_mean", true, 0.0)?;
        let var = get(g, "moving_variance", true, 1.0)?;
        let scale: Vec<f32> = (0..c)
            .map(|i| (gamma[i] as f64 / (var[i] as f64 + self.epsilon).sqrt()) as f32)
            .collect();
        let shift: Vec<f32> = (0..c).map(|i| beta[i] - mean[i] * scale[i]).collect();
        let s = g.constant(&format!("{name}/scale"), &[c], &scale);
        let t = g.constant(&format!("{name}/shift"), &[c], &shift);
        let shape = x.shape.clone();
        let y = g.op(&format!("{name}/mul"), op::MUL, &[x.index, s], &shape, Options::Elementwise);
        Ok(g.op(name, op::ADD, &[y.index, t], &shape, Options::Elementwise))
    }
}

impl LayerConfig for BatchNormalization {
    const CLASS_NAME: &'static str = "BatchNormalization";
}
