//! `keras.layers.Normalization(axis=-1, mean=None, variance=None, invert=False)`:
//! `(x - mean) / max(sqrt(variance), 1e-7)` (or its inverse) inside the model, with one mean
//! and variance per index of the kept `axis`es.
//!
//! With `adapt = true` (Keras' `layer.adapt(train_ds)`) the statistics come from the training
//! data: `kiln train` computes them over `[data.train]`'s features component after its `map`
//! ops, before training, and writes them into the layer's config in the run directory (see
//! `crate::pipeline::adapt`), so evaluate, predict and export use the same numbers. Such a
//! layer has Keras' non-trainable `mean`, `variance` and `count` weights (its parameter count
//! is Keras'); the forward pass reads the statistics of the config.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::args::keras_shape;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, WeightInit, WeightSpec, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// One value or a list (Keras' `axis`, `mean`, `variance`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrList<T> {
    /// A single value.
    One(T),
    /// A list.
    List(Vec<T>),
}

impl<T: Clone> OneOrList<T> {
    /// The values as a list.
    pub fn to_vec(&self) -> Vec<T> {
        match self {
            OneOrList::One(v) => vec![v.clone()],
            OneOrList::List(v) => v.clone(),
        }
    }
}

/// `Normalization(axis, mean, variance, invert)`, or `adapt = true` for statistics of the
/// training data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Normalization {
    /// Keras' axes kept (the batch axis counts: `-1` or `3` is an image's channels; `[]` is
    /// Keras' `axis=None`, one mean and variance).
    #[serde(default = "last_axis")]
    pub axis: OneOrList<i64>,
    /// One mean, or one per index of the kept axes (row-major).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<OneOrList<f64>>,
    /// As `mean`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variance: Option<OneOrList<f64>>,
    /// `mean + x * std` instead (de-normalizes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub invert: bool,
    /// The statistics come from the training data (kiln computes them before training).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adapt: bool,
    /// Written by `kiln train` next to the statistics it adapted (the run directory's
    /// config): `mean` and `variance` came from `adapt`, not from the user.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adapted: bool,
}

fn last_axis() -> OneOrList<i64> {
    OneOrList::One(-1)
}

/// Keras' `backend.epsilon()`, the least standard deviation divided by.
const EPSILON: f64 = 1e-7;

impl Normalization {
    /// The example axes (0-based) kept, sorted, for examples of Keras shape `shape`.
    pub fn kept_axes(&self, shape: &[usize]) -> Result<Vec<usize>, String> {
        let rank = shape.len() as i64;
        let mut kept = Vec::new();
        for a in self.axis.to_vec() {
            let r = if a < 0 { a + rank + 1 } else { a };
            if r < 1 || r > rank {
                return Err(format!(
                    "`axis` {a} is not an axis of the examples of input shape {} (1 to {rank}, \
                     or -1 to -{rank}; [] for one mean; 0 is the batch axis)",
                    keras_shape(shape)
                ));
            }
            kept.push(r as usize - 1);
        }
        kept.sort_unstable();
        kept.dedup();
        Ok(kept)
    }

    /// The sizes of the kept axes (the statistics' shape).
    fn stat_shape(&self, shape: &[usize]) -> Result<Vec<usize>, String> {
        Ok(self.kept_axes(shape)?.iter().map(|&a| shape[a]).collect())
    }

    /// `(mean, std)` per value of the statistics' shape (one value when given so), std being
    /// `max(sqrt(variance), 1e-7)`; `None` before adapt.
    fn stats(&self) -> Option<(Vec<f32>, Vec<f32>)> {
        let mean = self.mean.as_ref()?.to_vec();
        let std = self.variance.as_ref()?.to_vec();
        let std = std.iter().map(|v| v.sqrt().max(EPSILON) as f32).collect();
        Some((mean.iter().map(|&m| m as f32).collect(), std))
    }

    /// The statistics' broadcast shape for a batch in Keras' layout of rank `shape.len() + 1`
    /// (one when a single value is given).
    fn broadcast(&self, shape: &[usize], single: bool) -> Vec<usize> {
        let kept = self.kept_axes(shape).expect("checked by output_shape");
        let mut dims = vec![1; shape.len() + 1];
        if !single {
            for a in kept {
                dims[a + 1] = shape[a];
            }
        }
        dims
    }

    /// `t` (Keras' layout) normalized with the statistics `stats`.
    fn apply<const D: usize>(&self, t: Tensor<D>, (mean, std): &(Vec<f32>, Vec<f32>)) -> Tensor<D> {
        let shape: Vec<usize> = t.dims()[1..].to_vec();
        let to = |v: &[f32]| -> Tensor<D> {
            let dims: [usize; D] = self
                .broadcast(&shape, v.len() == 1)
                .try_into()
                .expect("rank");
            Tensor::from_data(TensorData::new(v.to_vec(), dims), &t.device())
        };
        let (mean, std) = (to(mean), to(std));
        match self.invert {
            true => t * std + mean,
            false => (t - mean) / std,
        }
    }
}

impl Layer for Normalization {
    crate::serde_layer!();
    fn supports_masking(&self) -> bool {
        true
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let stat = self.stat_shape(inputs[0])?;
        let want: usize = stat.iter().product();
        for (key, v) in [("mean", &self.mean), ("variance", &self.variance)] {
            let n = v.as_ref().map_or(1, |v| v.to_vec().len());
            if n != 1 && n != want {
                return Err(format!(
                    "`{key}` has {n} values; give one, or {want} (one per index of the kept \
                     axes, shape {stat:?})"
                ));
            }
        }
        Ok(inputs[0].to_vec())
    }
    fn validate(&self) -> Result<(), String> {
        let given = self.mean.is_some() || self.variance.is_some();
        if self.adapt && given && !self.adapted {
            return Err("give either adapt = true or `mean` and `variance`, not both (Keras \
                        refuses to adapt a Normalization built with its statistics)"
                .into());
        }
        if self.adapted && !(self.adapt && given) {
            return Err("`adapted` is written by kiln train with adapt = true and the \
                        statistics it computed; remove it"
                .into());
        }
        match (&self.mean, &self.variance, self.adapt) {
            (Some(_), None, _) | (None, Some(_), _) => {
                Err("give both `mean` and `variance` (or adapt = true)".into())
            }
            (None, None, false) => Err(
                "needs `mean` and `variance`, or adapt = true to compute them from the \
                 training data"
                    .into(),
            ),
            _ => match self.variance.as_ref().map(OneOrList::to_vec) {
                Some(v) if v.iter().any(|v| !(v.is_finite() && *v >= 0.0)) => Err(format!(
                    "`variance` must hold finite non-negative numbers, got {v:?}"
                )),
                _ => Ok(()),
            },
        }
    }
    /// Keras' weights of an adapted layer: `mean`, `variance` and `count`, none trainable.
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        if !self.adapt {
            return Vec::new();
        }
        let Ok(stat) = self.stat_shape(inputs[0]) else {
            return Vec::new();
        };
        let fixed = |name: &str, shape: Vec<usize>, init| WeightSpec {
            trainable: false,
            ..WeightSpec::new(name, shape, init)
        };
        vec![
            fixed("mean", stat.clone(), WeightInit::Zeros),
            fixed("variance", stat, WeightInit::Ones),
            fixed("count", Vec::new(), WeightInit::Zeros),
        ]
    }
    /// An adapted layer's `mean` and `variance` weights hold the config's statistics (the
    /// `count` weight stays 0: kiln does not record it).
    fn fixed_values(&self, weight: &WeightSpec) -> Option<Vec<f32>> {
        let values = match weight.name.rsplit('/').next()? {
            "mean" => self.mean.as_ref()?.to_vec(),
            "variance" => self.variance.as_ref()?.to_vec(),
            _ => return None,
        };
        let n = weight.size();
        match values.len() {
            1 => Some(vec![values[0] as f32; n]),
            len if len == n => Some(values.iter().map(|&v| v as f32).collect()),
            _ => None,
        }
    }
    /// The config's statistics; before adapt, the `mean` and `variance` weights (zeros and
    /// ones: the identity, as a Keras layer that was never adapted).
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, _: ForwardContext) -> Act {
        let stats = self.stats().unwrap_or_else(|| {
            let host = |name: &str| -> Vec<f32> {
                let t = w.get_flat(name);
                t.into_data().convert::<f32>().try_to_vec::<f32>().expect("floats")
            };
            let std = host("variance").iter().map(|v| v.sqrt().max(EPSILON as f32)).collect();
            (host("mean"), std)
        });
        match inputs.remove(0) {
            Act::Flat(t) => Act::Flat(self.apply(t, &stats)),
            Act::Seq(t) => Act::Seq(self.apply(t, &stats)),
            image => Act::from_keras_image(self.apply(image.into_keras_image(), &stats)),
        }
    }
    fn saves_input(&self) -> bool {
        false
    }
    fn flops(&self, _: &[&[usize]], output: &[usize], _: usize) -> f64 {
        2.0 * super::size(output)
    }
    /// `Sub` and `Div` (`Mul` and `Add` with `invert`) by constants laid out as the value is
    /// (channels first for an image).
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let Some((mean, std)) = self.stats() else {
            return Err("its statistics were never adapted (adapt = true without a training \
                        run); train it first, or give `mean` and `variance`"
                .into());
        };
        let shape = inputs[0].shape.clone();
        super::channels_last(g, name, &inputs[0], |g, x| {
            let dims = |v: &[f32]| self.broadcast(&shape, v.len() == 1);
            let m = g.constant(name, &dims(&mean), &mean);
            let s = g.constant(name, &dims(&std), &std);
            Ok(match self.invert {
                true => {
                    let y = g.node(name, "Mul", &[x, &s], vec![]);
                    g.node(name, "Add", &[&y, &m], vec![])
                }
                false => {
                    let y = g.node(name, "Sub", &[x, &m], vec![]);
                    g.node(name, "Div", &[&y, &s], vec![])
                }
            })
        })
    }
}

impl LayerConfig for Normalization {
    const CLASS_NAME: &'static str = "Normalization";
}
