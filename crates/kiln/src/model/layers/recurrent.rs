//! The recurrent layers `keras.layers.SimpleRNN`, `LSTM` and `GRU` (`keras/src/layers/rnn/`):
//! one declaration, [`Recurrent`], whose cell is fixed by a constant, as each Keras layer wraps
//! its cell. Input `(steps, features)`; output `(units,)` (the last step's output), or `(steps,
//! units)` with `return_sequences`.
//!
//! The cells follow Keras 3 (`implementation=2`, one matrix product per step):
//! - SimpleRNN: `h = activation(x·kernel + bias + h₋·recurrent_kernel)`;
//! - LSTM (gates `i, f, c, o`): `z = x·kernel + h₋·recurrent_kernel + bias`, `c =
//!   σ(z_f)·c₋ + σ(z_i)·activation(z_c)`, `h = σ(z_o)·activation(c)`;
//! - GRU (gates `z, r, h`): with `reset_after` (Keras' default) `ĥ = activation(x_h + r ·
//!   (h₋·recurrent_kernel_h + recurrent_bias_h))`, else `ĥ = activation(x_h + (r·h₋) ·
//!   recurrent_kernel_h)`; `h = z·h₋ + (1 - z)·ĥ`;
//!
//! where `σ` is `recurrent_activation` (sigmoid). `dropout` drops input features and
//! `recurrent_dropout` drops the previous output fed to the recurrent product, each with one
//! mask for the whole sequence (Keras' `DropoutRNNCell`). A mask (`Embedding(mask_zero=True)`,
//! `Masking`) makes a masked step keep the previous state, and its output repeat the previous
//! output (or be zeros inside a `Bidirectional` that returns sequences), as Keras' `rnn` loop.

use burn::prelude::*;
use burn::tensor::Distribution;
use serde::{Deserialize, Serialize};

use super::{default_true, positive, rate, steps_features};
use crate::model::act::{Act, ElementWise};
use crate::model::args::Activation;
use crate::model::keras_shape;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, WeightInit, WeightSpec, Weights};
use crate::onnx::{OnnxGraph, OnnxValue};

/// The cell of [`SimpleRNN`].
pub const SIMPLE_CELL: u8 = 0;
/// The cell of [`LSTM`].
pub const LSTM_CELL: u8 = 1;
/// The cell of [`GRU`].
pub const GRU_CELL: u8 = 2;

/// `keras.layers.SimpleRNN(units, activation="tanh", use_bias=True, dropout=0.0,
/// recurrent_dropout=0.0, return_sequences=False, go_backwards=False)`.
pub type SimpleRNN = Recurrent<SIMPLE_CELL>;
/// `keras.layers.LSTM(units, activation="tanh", recurrent_activation="sigmoid",
/// use_bias=True, unit_forget_bias=True, dropout=0.0, recurrent_dropout=0.0,
/// return_sequences=False, go_backwards=False)`.
pub type LSTM = Recurrent<LSTM_CELL>;
/// `keras.layers.GRU(units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
/// dropout=0.0, recurrent_dropout=0.0, return_sequences=False, go_backwards=False,
/// reset_after=True)`.
pub type GRU = Recurrent<GRU_CELL>;

fn tanh() -> Activation {
    Activation::Tanh
}

/// A recurrent layer with Keras' arguments: `kernel [features, gates·units]`
/// (`glorot_uniform`), `recurrent_kernel [units, gates·units]` (`orthogonal`), `bias
/// [gates·units]` (zeros; an LSTM's forget gate ones with `unit_forget_bias`; a GRU with
/// `reset_after` has `[2, 3·units]`: input and recurrent biases). Gates: 1 (SimpleRNN), 4
/// (LSTM), 3 (GRU).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recurrent<const CELL: u8> {
    /// Size of the output and state.
    pub units: usize,
    /// The output activation (`tanh`).
    #[serde(default = "tanh")]
    pub activation: Activation,
    /// The gates' activation (LSTM and GRU; `sigmoid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recurrent_activation: Option<Activation>,
    /// Adds biases.
    #[serde(default = "default_true")]
    pub use_bias: bool,
    /// LSTM: the forget gate's bias starts at 1 (`true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_forget_bias: Option<bool>,
    /// GRU: the reset gate applies after the recurrent product (`true`, Keras 3 and cuDNN's
    /// convention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_after: Option<bool>,
    /// Fraction of input features dropped while training, in `[0, 1)`.
    #[serde(default)]
    pub dropout: f64,
    /// Fraction of the recurrent state's units dropped while training, in `[0, 1)`.
    #[serde(default)]
    pub recurrent_dropout: f64,
    /// Return the output of every step, `(steps, units)`, rather than the last one.
    #[serde(default)]
    pub return_sequences: bool,
    /// Also return the final states (`h`; an LSTM's `h` and `c`), which later layers name
    /// `"name:1"` (and `"name:2"`); the output is `"name:0"`.
    #[serde(default)]
    pub return_state: bool,
    /// Process the sequence from its end; the returned sequence is in that reversed order.
    #[serde(default)]
    pub go_backwards: bool,
    /// Keep the state between batches (refused: kiln's batches are independent).
    #[serde(default)]
    pub stateful: bool,
    /// Keras unrolls the loop symbolically; accepted and without effect (kiln runs the steps
    /// eagerly).
    #[serde(default)]
    pub unroll: bool,
}

impl<const CELL: u8> Recurrent<CELL> {
    /// The layer with `units` and Keras' defaults.
    pub fn new(units: usize) -> Self {
        Recurrent {
            units,
            activation: Activation::Tanh,
            recurrent_activation: None,
            use_bias: true,
            unit_forget_bias: None,
            reset_after: None,
            dropout: 0.0,
            recurrent_dropout: 0.0,
            return_sequences: false,
            return_state: false,
            go_backwards: false,
            stateful: false,
            unroll: false,
        }
    }

    /// The layer returning every step's output.
    pub fn with_return_sequences(mut self, on: bool) -> Self {
        self.return_sequences = on;
        self
    }

    pub(super) fn gates(&self) -> usize {
        match CELL {
            LSTM_CELL => 4,
            GRU_CELL => 3,
            _ => 1,
        }
    }

    fn class(&self) -> &'static str {
        match CELL {
            LSTM_CELL => "LSTM",
            GRU_CELL => "GRU",
            _ => "SimpleRNN",
        }
    }

    pub(super) fn gate_activation(&self) -> Activation {
        self.recurrent_activation.unwrap_or(Activation::Sigmoid)
    }

    /// How many state tensors the cell carries: `h`, and an LSTM's carry `c`.
    fn state_count(&self) -> usize {
        match CELL {
            LSTM_CELL => 2,
            _ => 1,
        }
    }

    pub(super) fn resets_after(&self) -> bool {
        CELL == GRU_CELL && self.reset_after.unwrap_or(true)
    }

    /// The arguments only some cells have, each with the cells that take it.
    fn cell_arguments(&self) -> [(&'static str, bool, bool); 3] {
        [
            (
                "recurrent_activation",
                self.recurrent_activation.is_some(),
                CELL != SIMPLE_CELL,
            ),
            (
                "unit_forget_bias",
                self.unit_forget_bias.is_some(),
                CELL == LSTM_CELL,
            ),
            ("reset_after", self.reset_after.is_some(), CELL == GRU_CELL),
        ]
    }
}


/// What a recurrent layer offers the layers that wrap it ([`super::Bidirectional`]), whatever
/// its cell.
pub(crate) trait Rnn: std::fmt::Debug + Send + Sync {
    /// Whether every step's output is returned.
    fn returns_sequences(&self) -> bool;
    /// The same layer processing the sequence the other way round.
    fn reversed(&self) -> Box<dyn Rnn>;
    /// The weights for `(steps, features)` inputs, named `<prefix><Keras name>`.
    fn weights_named(&self, input: &[usize], prefix: &str) -> Vec<WeightSpec>;
    /// Runs the layer on `[batch, steps, features]` with an optional `[batch, steps]` mask
    /// (1 keeps a step); masked outputs are zeros when `zero_masked`. Returns the output and
    /// the final states (`h`, and an LSTM's `c`).
    fn run(
        &self,
        x: Tensor<3>,
        mask: Option<Tensor<2>>,
        w: &Weights,
        prefix: &str,
        ctx: Run,
    ) -> (Act, Vec<Tensor<2>>);
    /// Checks the arguments.
    fn check(&self) -> Result<(), String>;
    /// Whether it returns its final states too (`return_state`).
    fn returns_state(&self) -> bool;
    /// The shapes of the states it returns (none without `return_state`).
    fn returned_states(&self) -> Vec<Vec<usize>>;
    /// Values per example kept for backward besides input and output, for `(steps, features)`.
    fn kept(&self, input: &[usize]) -> f64;
    /// Writes the layer into an ONNX graph (see [`Recurrent::export`]).
    fn export_onnx(
        &self,
        g: &mut OnnxGraph,
        x: &OnnxValue,
        name: &str,
        prefix: &str,
    ) -> Result<String, String>;
    /// The output shape for `(steps, features)`.
    fn shape(&self, input: &[usize]) -> Result<Vec<usize>, String>;
}

/// How a recurrent layer runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    /// Training: dropout applies.
    pub training: bool,
    /// Masked steps output zeros in a returned sequence (Keras' `zero_output_for_mask`,
    /// which `Bidirectional` sets exactly when it returns sequences); the last output is the
    /// final state either way.
    pub zero_masked: bool,
    /// The final carry (an LSTM's `c`) is used: returned as a state.
    pub carry: bool,
}

/// The state between steps: the output `h` and an LSTM's carry `c`.
struct State {
    h: Tensor<2>,
    c: Option<Tensor<2>>,
}

/// The weights a step reads.
struct StepWeights {
    recurrent_kernel: Tensor<2>,
    recurrent_bias: Option<Tensor<1>>,
}

impl<const CELL: u8> Recurrent<CELL> {
    /// One step: `xt` is `x·kernel + input bias` (`[batch, gates·units]`), `h_in` the previous
    /// output after recurrent dropout.
    fn step(&self, xt: Tensor<2>, h_in: Tensor<2>, s: &State, w: &StepWeights) -> State {
        let (act, gate) = (self.activation, self.gate_activation());
        let rk = w.recurrent_kernel.clone();
        match CELL {
            LSTM_CELL => {
                let z = xt + h_in.matmul(rk);
                let [i, f, c, o]: [Tensor<2>; 4] = z.chunk(4, 1).try_into().expect("4 gates");
                let carry = s.c.clone().expect("an LSTM state has a carry");
                let c = gate.apply(f) * carry + gate.apply(i) * act.apply(c);
                State {
                    h: gate.apply(o) * act.apply(c.clone()),
                    c: Some(c),
                }
            }
            GRU_CELL => {
                let u = self.units;
                let [xz, xr, xh]: [Tensor<2>; 3] = xt.chunk(3, 1).try_into().expect("3 gates");
                let (rz, rr, rh_of) = if self.resets_after() {
                    let mut inner = h_in.clone().matmul(rk);
                    if let Some(b) = &w.recurrent_bias {
                        inner = inner + b.clone().unsqueeze_dim(0);
                    }
                    let [rz, rr, rh]: [Tensor<2>; 3] =
                        inner.chunk(3, 1).try_into().expect("3 gates");
                    (rz, rr, Err(rh))
                } else {
                    let inner = h_in.clone().matmul(rk.clone().narrow(1, 0, 2 * u));
                    let [rz, rr]: [Tensor<2>; 2] = inner.chunk(2, 1).try_into().expect("2 gates");
                    (rz, rr, Ok(rk.narrow(1, 2 * u, u)))
                };
                let z = gate.apply(xz + rz);
                let r = gate.apply(xr + rr);
                let hh = match rh_of {
                    Err(rh) => act.apply(xh + r * rh),
                    Ok(rk_h) => act.apply(xh + (r * h_in).matmul(rk_h)),
                };
                let h = z.clone() * s.h.clone() + (z.neg().add_scalar(1.0)) * hh;
                State { h, c: None }
            }
            _ => State {
                h: act.apply(xt + h_in.matmul(rk)),
                c: None,
            },
        }
    }

    /// The input and recurrent biases (a `reset_after` GRU has both).
    fn biases(&self, w: &Weights, prefix: &str) -> (Option<Tensor<1>>, Option<Tensor<1>>) {
        let name = format!("{prefix}bias");
        if !self.use_bias {
            return (None, None);
        }
        if self.resets_after() {
            let n = 3 * self.units;
            let b = w.get::<2>(&name);
            let row = |k| b.clone().narrow(0, k, 1).reshape([n]);
            return (Some(row(0)), Some(row(1)));
        }
        (Some(w.get::<1>(&name)), None)
    }
}

/// A dropout mask of `shape` keeping a fraction `1 - rate`, scaled by `1 / (1 - rate)`.
fn keep_mask<const D: usize>(like: &Tensor<D>, shape: [usize; D], rate: f64) -> Tensor<D> {
    let keep = 1.0 - rate;
    Tensor::<D>::random(shape, Distribution::Bernoulli(keep), &like.device()).div_scalar(keep)
}

/// `new` where the mask `m` (`[batch, 1]`) is 1, `old` where it is 0.
fn blend(m: &Tensor<2>, new: Tensor<2>, old: Tensor<2>) -> Tensor<2> {
    old.clone() + (new - old) * m.clone()
}

impl<const CELL: u8> Rnn for Recurrent<CELL> {
    fn returns_sequences(&self) -> bool {
        self.return_sequences
    }
    fn reversed(&self) -> Box<dyn Rnn> {
        let mut other = self.clone();
        other.go_backwards = !self.go_backwards;
        Box::new(other)
    }
    fn weights_named(&self, input: &[usize], prefix: &str) -> Vec<WeightSpec> {
        let features = input.last().copied().unwrap_or(0);
        let (u, n) = (self.units, self.gates() * self.units);
        let name = |n: &str| format!("{prefix}{n}");
        let mut out = vec![
            WeightSpec::new(&name("kernel"), vec![features, n], WeightInit::GlorotUniform),
            WeightSpec::new(&name("recurrent_kernel"), vec![u, n], WeightInit::Orthogonal),
        ];
        if self.use_bias {
            let bias = match CELL {
                LSTM_CELL if self.unit_forget_bias.unwrap_or(true) => {
                    WeightSpec::new(&name("bias"), vec![n], WeightInit::UnitForgetBias)
                }
                _ if self.resets_after() => {
                    WeightSpec::new(&name("bias"), vec![2, n], WeightInit::Zeros)
                }
                _ => WeightSpec::new(&name("bias"), vec![n], WeightInit::Zeros),
            };
            out.push(bias);
        }
        out
    }
    fn run(
        &self,
        x: Tensor<3>,
        mask: Option<Tensor<2>>,
        w: &Weights,
        prefix: &str,
        ctx: Run,
    ) -> (Act, Vec<Tensor<2>>) {
        let (y, s) = self.run_from(x, mask, None, w, prefix, ctx);
        (y, std::iter::once(s.h).chain(s.c).collect())
    }
    fn check(&self) -> Result<(), String> {
        positive("units", self.units)?;
        rate("dropout", self.dropout)?;
        rate("recurrent_dropout", self.recurrent_dropout)?;
        for (name, given, takes) in self.cell_arguments() {
            if given && !takes {
                return Err(format!("{} has no argument `{name}`", self.class()));
            }
        }
        if self.stateful {
            return Err(
                "`stateful = true` is not supported: kiln's batches are independent".into(),
            );
        }
        Ok(())
    }
    fn returns_state(&self) -> bool {
        self.return_state
    }
    fn returned_states(&self) -> Vec<Vec<usize>> {
        match self.return_state {
            true => vec![vec![self.units]; self.state_count()],
            false => Vec::new(),
        }
    }
    fn kept(&self, input: &[usize]) -> f64 {
        kept_per_step(input, self.gates(), self.units)
    }
    fn export_onnx(
        &self,
        g: &mut OnnxGraph,
        x: &OnnxValue,
        name: &str,
        prefix: &str,
    ) -> Result<String, String> {
        self.export(g, x, name, prefix)
    }
    fn shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        let [steps, _] = steps_features(input, self.class())?;
        if steps == 0 {
            return Err(format!("{} needs at least one step, got 0", self.class()));
        }
        Ok(match self.return_sequences {
            true => vec![steps, self.units],
            false => vec![self.units],
        })
    }
}

impl<const CELL: u8> Recurrent<CELL> {
    /// [`Rnn::run`] from the state `initial` (`h`, and an LSTM's `c`; zeros when `None`,
    /// Keras' `initial_state`), returning the output and the final state.
    fn run_from(
        &self,
        x: Tensor<3>,
        mask: Option<Tensor<2>>,
        initial: Option<State>,
        w: &Weights,
        prefix: &str,
        ctx: Run,
    ) -> (Act, State) {
        let [b, t, f] = x.dims();
        let (u, n) = (self.units, self.gates() * self.units);
        let (x, mask) = match self.go_backwards {
            true => (x.flip([1]), mask.map(|m| m.flip([1]))),
            false => (x, mask),
        };
        let drop = ctx.training && self.dropout > 0.0;
        let x = match drop {
            true => x.clone() * keep_mask(&x, [b, 1, f], self.dropout),
            false => x,
        };
        let (input_bias, recurrent_bias) = self.biases(w, prefix);
        let kernel = w.get::<2>(&format!("{prefix}kernel"));
        let proj = crate::ops::dense(x.reshape([b * t, f]), kernel, input_bias, Default::default());
        let proj = proj.reshape([b, t, n]);
        let rk = w.get::<2>(&format!("{prefix}recurrent_kernel"));
        if self.fused(&proj, mask.is_none(), ctx) {
            return self.run_fused(proj, rk, initial);
        }
        let sw = StepWeights {
            recurrent_kernel: rk,
            recurrent_bias,
        };
        let zeros = Tensor::<2>::zeros([b, u], &proj.device());
        let rec_mask = (ctx.training && self.recurrent_dropout > 0.0)
            .then(|| keep_mask(&zeros, [b, u], self.recurrent_dropout));
        let mut s = initial.unwrap_or_else(|| State {
            c: (CELL == LSTM_CELL).then(|| zeros.clone()),
            h: zeros,
        });
        let mut outputs = Vec::with_capacity(if self.return_sequences { t } else { 0 });
        for step in 0..t {
            let xt = proj.clone().narrow(1, step, 1).reshape([b, n]);
            let h_in = match &rec_mask {
                Some(m) => s.h.clone() * m.clone(),
                None => s.h.clone(),
            };
            let new = self.step(xt, h_in, &s, &sw);
            let (next, out) = match &mask {
                Some(m) => {
                    let m = m.clone().narrow(1, step, 1);
                    let out = match ctx.zero_masked {
                        true => new.h.clone() * m.clone(),
                        false => blend(&m, new.h.clone(), s.h.clone()),
                    };
                    let c = new.c.zip(s.c).map(|(c, old)| blend(&m, c, old));
                    (State { h: blend(&m, new.h, s.h), c }, out)
                }
                None => (State { h: new.h.clone(), c: new.c }, new.h),
            };
            s = next;
            if self.return_sequences {
                outputs.push(out);
            }
        }
        let out = match self.return_sequences {
            true => Act::Seq(Tensor::stack(outputs, 1)),
            false => Act::Flat(s.h.clone()),
        };
        (out, s)
    }

    /// Whether the whole sequence runs as one kiln operation ([`crate::ops::lstm`]): an LSTM
    /// with Keras' default activations on the CPU in float32, without a mask, recurrent
    /// dropout or a returned carry (Keras' cuDNN conditions, less the carry).
    fn fused(&self, proj: &Tensor<3>, unmasked: bool, ctx: Run) -> bool {
        CELL == LSTM_CELL
            && self.activation == Activation::Tanh
            && self.gate_activation() == Activation::Sigmoid
            && unmasked
            && !(ctx.training && self.recurrent_dropout > 0.0)
            && !ctx.carry
            && crate::ops::fast_path(&proj.device(), proj.dtype())
    }

    /// [`Self::run_from`] through [`crate::ops::lstm`]: every step's output, the last one as
    /// the state (the carry is not returned).
    fn run_fused(&self, proj: Tensor<3>, rk: Tensor<2>, initial: Option<State>) -> (Act, State) {
        let [b, t, _] = proj.dims();
        let u = self.units;
        let zeros = || Tensor::<2>::zeros([b, u], &proj.device());
        let (h0, c0) = match initial {
            Some(s) => (s.h, s.c.unwrap_or_else(zeros)),
            None => (zeros(), zeros()),
        };
        let hs = crate::ops::lstm(proj, rk, h0, c0);
        let last = hs.clone().narrow(1, t - 1, 1).reshape([b, u]);
        let out = match self.return_sequences {
            true => Act::Seq(hs),
            false => Act::Flat(last.clone()),
        };
        (out, State { h: last, c: None })
    }

    /// The inputs after the sequence (Keras' `initial_state`) must each be `(units,)`.
    fn check_initial_state(&self, states: &[&[usize]]) -> Result<(), String> {
        match states.iter().find(|s| **s != [self.units]) {
            Some(s) => Err(format!(
                "its inputs after the sequence are its initial state ({} tensor(s) of shape \
                 (None, {})), got {}",
                self.state_count(),
                self.units,
                keras_shape(s)
            )),
            None => Ok(()),
        }
    }
}

/// A recurrent layer's one `(steps, features)` input and its mask.
pub(super) fn sequence_and_mask(
    mut inputs: Vec<Act>,
    masks: &[Option<Tensor<2>>],
) -> (Tensor<3>, Option<Tensor<2>>) {
    let x = inputs.pop().expect("one input").into_seq();
    (x, masks.first().cloned().flatten())
}

/// Per example: the gates and the state of every step kept for backward.
fn kept_per_step(input: &[usize], gates: usize, units: usize) -> f64 {
    let steps = input.first().copied().unwrap_or(1) as f64;
    steps * ((gates + 2) * units) as f64
}

impl<const CELL: u8> Layer for Recurrent<CELL>
where
    Recurrent<CELL>: LayerConfig,
{
    crate::serde_layer!();
    fn validate(&self) -> Result<(), String> {
        self.check()
    }
    fn arity(&self) -> (usize, usize) {
        // The sequence, then optionally its initial state (`initial_state`).
        (1, 1 + self.state_count())
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        if inputs.len() > 1 {
            if inputs.len() != 1 + self.state_count() {
                return Err(format!(
                    "{} takes its sequence, or its sequence and {} initial state tensor(s), \
                     got {} inputs",
                    self.class(),
                    self.state_count(),
                    inputs.len()
                ));
            }
            self.check_initial_state(&inputs[1..])?;
        }
        self.shape(inputs[0])
    }
    fn state_shapes(&self, _: &[&[usize]]) -> Vec<Vec<usize>> {
        self.returned_states()
    }
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        self.weights_named(inputs[0], "")
    }
    fn forward(&self, inputs: Vec<Act>, w: &Weights, ctx: ForwardContext) -> Act {
        self.forward_masked(inputs, &[None], w, ctx)
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
        let mut inputs = inputs.into_iter();
        let x = inputs.next().expect("a sequence").into_seq();
        let mut given = inputs.map(Act::into_flat);
        let initial = given.next().map(|h| State { h, c: given.next() });
        let run = Run {
            training: ctx.training,
            zero_masked: false,
            carry: self.return_state,
        };
        let mask = masks.first().cloned().flatten();
        let (y, s) = self.run_from(x, mask, initial, w, "", run);
        let states = match self.return_state {
            true => std::iter::once(s.h).chain(s.c).map(Act::Flat).collect(),
            false => Vec::new(),
        };
        (y, states)
    }
    fn supports_masking(&self) -> bool {
        true
    }
    fn compute_mask(&self, _: &[&Act], masks: &[Option<Tensor<2>>]) -> Option<Tensor<2>> {
        match self.return_sequences {
            true => masks.first().cloned().flatten(),
            false => None,
        }
    }
    fn extra_kept(&self, inputs: &[&[usize]], _: &[usize]) -> f64 {
        self.kept(inputs[0])
    }
    fn flops(&self, inputs: &[&[usize]], _: &[usize], trainable: usize) -> f64 {
        // Two operations per weight and step.
        let steps = inputs[0].first().copied().unwrap_or(1);
        2.0 * trainable as f64 * steps as f64
    }
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        if inputs.len() > 1 {
            return Err("it starts from a given initial state, which kiln's ONNX export of \
                        recurrent layers does not write"
                .into());
        }
        self.export(g, &inputs[0], name, "")
    }
}

impl LayerConfig for SimpleRNN {
    const CLASS_NAME: &'static str = "SimpleRNN";
}
impl LayerConfig for LSTM {
    const CLASS_NAME: &'static str = "LSTM";
}
impl LayerConfig for GRU {
    const CLASS_NAME: &'static str = "GRU";
}
