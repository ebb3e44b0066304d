//! `keras.layers.Bidirectional(layer, merge_mode="concat")` (`keras/src/layers/rnn/
//! bidirectional.py`): runs a recurrent layer forwards and a copy of it backwards over the
//! sequence and merges the two outputs.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::recurrent::{GRU, LSTM, Rnn, Run, SimpleRNN};
use crate::model::act::Act;
use crate::model::layer::{
    ForwardContext, Layer, LayerConfig, WeightSpec, Weights, config_table, snake_case,
};
use crate::onnx::{OnnxGraph, OnnxValue, int};

/// How the two directions' outputs combine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MergeMode {
    /// Side by side on the last axis (`2 * units`).
    #[default]
    Concat,
    /// Their sum.
    Sum,
    /// Their product.
    Mul,
    /// Their mean.
    Ave,
}

/// The wrapped recurrent layer, written in TOML as a layer table: `layer = { type = "LSTM",
/// units = 64, return_sequences = true }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "toml::Table", into = "toml::Table")]
pub enum Wrapped {
    /// A `SimpleRNN`.
    SimpleRNN(SimpleRNN),
    /// An `LSTM`.
    LSTM(LSTM),
    /// A `GRU`.
    GRU(GRU),
}

impl Wrapped {
    fn rnn(&self) -> &dyn Rnn {
        match self {
            Wrapped::SimpleRNN(l) => l,
            Wrapped::LSTM(l) => l,
            Wrapped::GRU(l) => l,
        }
    }

    fn class(&self) -> &'static str {
        match self {
            Wrapped::SimpleRNN(_) => "SimpleRNN",
            Wrapped::LSTM(_) => "LSTM",
            Wrapped::GRU(_) => "GRU",
        }
    }
}

/// Reads one recurrent layer's table.
fn parse<L: LayerConfig + Rnn>(table: toml::Table) -> Result<L, String> {
    let layer: L = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| crate::error::humanize(e.message()))?;
    layer.check()?;
    Ok(layer)
}

impl TryFrom<toml::Table> for Wrapped {
    type Error = String;
    fn try_from(mut table: toml::Table) -> Result<Wrapped, String> {
        let ty = match table.remove("type") {
            Some(toml::Value::String(t)) => t,
            _ => return Err("`layer` needs `type = \"LSTM\"`, \"GRU\" or \"SimpleRNN\"".into()),
        };
        let parsed = match ty.as_str() {
            "LSTM" => parse(table).map(Wrapped::LSTM),
            "GRU" => parse(table).map(Wrapped::GRU),
            "SimpleRNN" => parse(table).map(Wrapped::SimpleRNN),
            other => {
                return Err(format!(
                    "`layer` must be a recurrent layer (LSTM, GRU or SimpleRNN), got \"{other}\""
                ));
            }
        };
        parsed.map_err(|e| format!("`layer` ({ty}): {e}"))
    }
}

impl From<Wrapped> for toml::Table {
    fn from(w: Wrapped) -> toml::Table {
        let mut table = match &w {
            Wrapped::SimpleRNN(l) => config_table(l),
            Wrapped::LSTM(l) => config_table(l),
            Wrapped::GRU(l) => config_table(l),
        };
        table.insert("type".into(), toml::Value::String(w.class().into()));
        table
    }
}

/// `Bidirectional(layer, merge_mode)`: weights `forward_<layer>/...` and `backward_<layer>/...`
/// (e.g. `forward_lstm/kernel`), each the wrapped layer's. With `return_sequences` the
/// backward outputs are put back in time order before merging, and masked steps output zeros,
/// as in Keras.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bidirectional {
    /// The recurrent layer run in both directions.
    pub layer: Wrapped,
    /// `concat` (default), `sum`, `mul` or `ave`.
    #[serde(default)]
    pub merge_mode: MergeMode,
}

impl Bidirectional {
    /// `Bidirectional(layer)` with `merge_mode="concat"`.
    pub fn new(layer: Wrapped) -> Bidirectional {
        Bidirectional {
            layer,
            merge_mode: MergeMode::Concat,
        }
    }

    /// The weight name prefixes of the two directions.
    fn prefixes(&self) -> [String; 2] {
        let inner = snake_case(self.layer.class());
        [format!("forward_{inner}/"), format!("backward_{inner}/")]
    }

    fn merge<const D: usize>(&self, a: Tensor<D>, b: Tensor<D>) -> Tensor<D> {
        match self.merge_mode {
            MergeMode::Concat => Tensor::cat(vec![a, b], D - 1),
            MergeMode::Sum => a + b,
            MergeMode::Mul => a * b,
            MergeMode::Ave => (a + b).div_scalar(2.0),
        }
    }
}

impl Layer for Bidirectional {
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        self.layer.rnn().check()
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let mut shape = self.layer.rnn().shape(inputs[0])?;
        if self.merge_mode == MergeMode::Concat {
            *shape.last_mut().expect("a recurrent output has an axis") *= 2;
        }
        Ok(shape)
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let [fw, bw] = self.prefixes();
        let rnn = self.layer.rnn();
        let mut out = rnn.weights_named(inputs[0], &fw);
        out.extend(rnn.reversed().weights_named(inputs[0], &bw));
        out
    }
    fn forward(&self, inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        self.forward_masked(inputs, &[None], w, ctx)
    }
    fn state_shapes(&self, _: &[&[usize]]) -> Vec<Vec<usize>> {
        // Keras: `[output] + forward states + backward states`.
        let states = self.layer.rnn().returned_states();
        [states.clone(), states].concat()
    }
    fn forward_masked(
        &self,
        inputs: Vec<Act>,
        masks: &[Option<Tensor<2>>],
        w: &Weights,
        ctx: ForwardContext,
    ) -> Act {
        self.forward_states(inputs, masks, w, ctx).0
    }
    fn forward_states(
        &self,
        inputs: Vec<Act>,
        masks: &[Option<Tensor<2>>],
        w: &Weights,
        ctx: ForwardContext,
    ) -> (Act, Vec<Act>) {
        let (x, mask) = super::recurrent::sequence_and_mask(inputs, masks);
        let [fw, bw] = self.prefixes();
        let rnn = self.layer.rnn();
        let run = Run {
            training: ctx.training,
            zero_masked: rnn.returns_sequences(),
            carry: rnn.returns_state(),
        };
        let (y, mut states) = rnn.run(x.clone(), mask.clone(), w, &fw, run);
        let (y_rev, states_rev) = rnn.reversed().run(x, mask, w, &bw, run);
        let y = match (y, y_rev) {
            (Act::Seq(a), Act::Seq(b)) => Act::Seq(self.merge(a, b.flip([1]))),
            (Act::Flat(a), Act::Flat(b)) => Act::Flat(self.merge(a, b)),
            (a, b) => panic!("both directions return alike, got {a:?} and {b:?}"),
        };
        if !rnn.returns_state() {
            return (y, Vec::new());
        }
        states.extend(states_rev);
        (y, states.into_iter().map(Act::Flat).collect())
    }
    fn supports_masking(&self) -> bool {
        true
    }
    fn compute_mask(&self, _: &[&Act], masks: &[Option<Tensor<2>>]) -> Option<Tensor<2>> {
        match self.layer.rnn().returns_sequences() {
            true => masks.first().cloned().flatten(),
            false => None,
        }
    }
    fn extra_kept(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        let _ = output;
        2.0 * self.layer.rnn().kept(inputs[0])
    }
    fn flops(&self, inputs: &[&[usize]], _: &[usize], trainable: usize) -> f64 {
        let steps = inputs[0].first().copied().unwrap_or(1);
        2.0 * trainable as f64 * steps as f64
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let [fw, bw] = self.prefixes();
        let (x, rnn) = (&inputs[0], self.layer.rnn());
        let a = rnn.export_onnx(g, x, name, &fw)?;
        let mut b = rnn.reversed().export_onnx(g, x, name, &bw)?;
        if rnn.returns_sequences() {
            let steps = x.shape[0] as i64;
            let starts = g.int64s(name, &[steps - 1]);
            let ends = g.int64s(name, &[-steps - 1]);
            let axes = g.int64s(name, &[1]);
            let by = g.int64s(name, &[-1]);
            b = g.node(name, "Slice", &[&b, &starts, &ends, &axes, &by], vec![]);
        }
        let axis = if rnn.returns_sequences() { 2 } else { 1 };
        Ok(match self.merge_mode {
            MergeMode::Concat => g.node(name, "Concat", &[&a, &b], vec![int("axis", axis)]),
            MergeMode::Sum => g.node(name, "Add", &[&a, &b], vec![]),
            MergeMode::Mul => g.node(name, "Mul", &[&a, &b], vec![]),
            MergeMode::Ave => {
                let s = g.node(name, "Add", &[&a, &b], vec![]);
                let half = g.scalar(name, 0.5);
                g.node(name, "Mul", &[&s, &half], vec![])
            }
        })
    }
}

impl LayerConfig for Bidirectional {
    const CLASS_NAME: &'static str = "Bidirectional";
}
