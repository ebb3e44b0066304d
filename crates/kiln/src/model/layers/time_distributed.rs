//! `keras.layers.TimeDistributed(layer)` (`keras/src/layers/rnn/time_distributed.py`): applies
//! one layer to every step of a `(steps, features)` input, with one set of weights.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::layer::{
    DeclaredLayer, ForwardContext, Layer, LayerConfig, WeightSpec, Weights,
};
use crate::model::registry;
use crate::onnx::{OnnxGraph, OnnxValue};

/// The wrapped layer, written in TOML as a layer table (`layer = { type = "Dense", units = 8
/// }`); any registered layer that takes one `(features,)` input.
#[derive(Debug, Clone, PartialEq)]
pub struct Inner(pub DeclaredLayer);

impl Serialize for Inner {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut table = self.0.config();
        table.insert("type".into(), toml::Value::String(self.0.class_name().into()));
        table.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Inner {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Inner, D::Error> {
        let mut table = toml::Table::deserialize(d)?;
        let ty = match table.remove("type") {
            Some(toml::Value::String(t)) => t,
            _ => return Err(serde::de::Error::custom("`layer` needs a `type`")),
        };
        let reg = registry::lookup(&ty).ok_or_else(|| {
            serde::de::Error::custom(format!("`layer` has an unknown layer type \"{ty}\""))
        })?;
        let layer = (reg.build)(table)
            .map_err(|e| serde::de::Error::custom(format!("`layer` ({ty}): {e}")))?;
        Ok(Inner(DeclaredLayer(layer)))
    }
}

/// `TimeDistributed(layer)`: output `(steps, *layer's output)`, where the layer's output for
/// one step must be `(units,)`. The weights are the wrapped layer's, with its names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeDistributed {
    /// The layer applied to each step.
    pub layer: Inner,
}

impl TimeDistributed {
    /// `TimeDistributed(layer)`.
    pub fn new(layer: impl Layer) -> TimeDistributed {
        TimeDistributed {
            layer: Inner(DeclaredLayer(Arc::new(layer))),
        }
    }
}

impl Layer for TimeDistributed {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        match self.layer.0.arity() {
            (1, _) => self.layer.0.validate(),
            _ => Err(format!(
                "`layer` ({}) takes several inputs; TimeDistributed wraps a one-input layer",
                self.layer.0.class_name()
            )),
        }
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let [steps, features] = super::steps_features(inputs[0], "TimeDistributed")?;
        let inner = self.layer.0.output_shape(&[&[features]])?;
        match inner[..] {
            [units] => Ok(vec![steps, units]),
            _ => Err(format!(
                "`layer` ({}) gives each step the shape {inner:?}; TimeDistributed needs a \
                 vector per step",
                self.layer.0.class_name()
            )),
        }
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let features = inputs[0].last().copied().unwrap_or(0);
        self.layer.0.weights(&[&[features]])
    }
    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        let x = inputs.pop().expect("one input").into_seq();
        let [b, t, f] = x.dims();
        let y = self
            .layer
            .0
            .forward(vec![Act::Flat(x.reshape([b * t, f]))], w, ctx)
            .into_flat();
        let units = y.dims()[1];
        Act::Seq(y.reshape([b, t, units]))
    }
    fn supports_masking(&self) -> bool {
        true
    }
    fn keeps_output(&self) -> bool {
        self.layer.0.keeps_output()
    }
    fn ends_in_softmax(&self) -> bool {
        self.layer.0.ends_in_softmax()
    }
    fn extra_kept(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        let steps = output.first().copied().unwrap_or(1) as f64;
        let features = inputs[0].last().copied().unwrap_or(0);
        steps * self.layer.0.extra_kept(&[&[features]], &output[1..])
    }
    fn flops(&self, inputs: &[&[usize]], output: &[usize], trainable: usize) -> f64 {
        let steps = output.first().copied().unwrap_or(1) as f64;
        let features = inputs[0].last().copied().unwrap_or(0);
        steps * self.layer.0.flops(&[&[features]], &output[1..], trainable)
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        // The steps join the batch (`[batch * steps, features]`), the wrapped layer writes
        // itself on that, and the result is split back into steps.
        let x = &inputs[0];
        let features = x.shape.last().copied().unwrap_or(0);
        let step = OnnxValue {
            name: g.reshape(name, &x.name, &[-1, features as i64]),
            shape: vec![features],
        };
        let y = self.layer.0.onnx(g, &[step], name)?;
        let units = self.layer.0.output_shape(&[&[features]])?[0];
        Ok(g.reshape(name, &y, &[-1, x.shape[0] as i64, units as i64]))
    }
}

impl LayerConfig for TimeDistributed {
    const CLASS_NAME: &'static str = "TimeDistributed";
}
