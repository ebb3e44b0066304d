//! The trainable network: a Burn module holding each layer's parameters, and its forward pass.
//!
//! Layer *arguments* live in the [`ModelSpec`]; this module holds only tensors, so one
//! [`Network`] type serves every Sequential model. Inside the network images are NCHW
//! (`[batch, channels, height, width]`, Burn's convolution layout); the batch is converted from
//! Keras' NHWC once, before the step (see `crate::batch`), and `Flatten` flattens in Keras'
//! channels-last order so that weights match Keras element for element. Each layer's own code
//! is its [`crate::model::Layer`] declaration; this module runs the graph.

use burn::module::Module;
use burn::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;

pub use super::act::Act;
use super::layer::{ForwardContext, Weights};
pub use super::params::LayerParams;
use super::round::{cast_act, round_act, round_params, to_float32};
use super::spec::{Activation, LayerKind, ModelSpec};

/// A non-trainable weight's new value from a forward pass (a BatchNormalization moving
/// statistic): `(layer index, weight name, flat value in Keras' layout)`.
pub type StateUpdate = (usize, String, Tensor<1>);

/// All layers' parameters, in the spec's order.
#[derive(Module, Debug)]
pub struct Network {
    /// One entry per layer after `Input`.
    pub layers: Vec<LayerParams>,
}

/// What a forward pass returns.
#[derive(Debug)]
pub struct Forward {
    /// The model's output as rows of its last axis, `[batch * positions, units]` (positions:
    /// the product of the output's other axes, 1 for a vector output), in Keras' order. A
    /// model with several outputs returns their rows side by side (columns in `outputs`
    /// order, [`ModelSpec::output_units`] in all).
    pub output: Tensor<2>,
    /// Per output: the input of its final softmax when it ends in one (for a stable
    /// cross-entropy, as Keras does), shaped as that output's rows.
    pub logits: Vec<Option<Tensor<2>>>,
    /// New values of non-trainable weights (BatchNormalization's moving statistics in training
    /// mode), to store after the step ([`Network::apply_updates`]).
    pub updates: Vec<StateUpdate>,
    /// The layers' `activity_regularizer` penalties on this batch (each divided by the batch
    /// size), summed; `None` when no layer has one.
    pub activity_loss: Option<Tensor<1>>,
}

impl Network {
    /// Initializes parameters as Keras does: each weight with its `<weight>_initializer`
    /// ([`crate::model::LayerOptions`]) when it has one, else kernels `glorot_uniform`, biases
    /// and `beta` zeros, `gamma` and the moving variance ones, the moving mean zeros, a
    /// declared layer's weights as it declares. Values are drawn in Keras' layout (Conv2D
    /// kernels `[kh, kw, in, out]`, then permuted); `seed` makes them identical on every
    /// backend (they are drawn on the host). A frozen layer's (`trainable = false`) parameters
    /// do not require gradients.
    pub fn init(spec: &ModelSpec, seed: u64, device: &Device) -> Network {
        let mut rng = StdRng::seed_from_u64(seed);
        let layers = spec
            .layers()
            .iter()
            .enumerate()
            .map(|(i, layer)| {
                let mut p = LayerParams::empty();
                for (w, slot) in spec.own_weights(i) {
                    let fixed = match &layer.kind {
                        LayerKind::Declared(l) => l.fixed_values(&w),
                        _ => None,
                    };
                    let values =
                        fixed.unwrap_or_else(|| layer.options.initial_values(&w, &mut rng));
                    p.put(slot, &w, values, layer.options.trains(&w), device);
                }
                p
            })
            .collect();
        Network { layers }
    }

    /// Runs the model on a batch.
    ///
    /// # Shapes
    /// - `input`: `[batch, features]`, `[batch, steps, features]` or `[batch, channels, height,
    ///   width]`, matching `spec.input_shape()` (images converted from NHWC to NCHW).
    /// - output: `[batch, units]`.
    ///
    /// `training` turns on Dropout and BatchNormalization's batch statistics.
    pub fn forward(&self, spec: &ModelSpec, input: Act, training: bool) -> Forward {
        self.forward_timed(spec, input, training, &mut |_, _| {})
    }

    /// [`Network::forward`], calling `timed(layer index, wall time)` after each layer (eager
    /// backends only: on a GPU the time is that of queueing the work).
    pub fn forward_timed(
        &self,
        spec: &ModelSpec,
        input: Act,
        training: bool,
        timed: &mut dyn FnMut(usize, std::time::Duration),
    ) -> Forward {
        self.forward_observed(spec, input, training, &mut |i, d, _| timed(i, d))
    }

    /// [`Network::forward`], handing `observe(layer index, wall time, output)` each layer's
    /// output (after its activation; images NCHW) as it is computed, e.g. to find the first
    /// layer whose output is not finite (`crate::fit::nan_report`).
    pub fn forward_observed(
        &self,
        spec: &ModelSpec,
        input: Act,
        training: bool,
        observe: &mut dyn FnMut(usize, std::time::Duration, &Act),
    ) -> Forward {
        self.forward_graph(spec, vec![input], training, observe)
    }

    /// [`Network::forward_observed`] for a model with several `Input`s: `inputs` in the order
    /// of [`ModelSpec::inputs`]. Layers run in the spec's order; each output is dropped once
    /// its last consumer has run, so only what autodiff keeps stays alive.
    pub fn forward_graph(
        &self,
        spec: &ModelSpec,
        inputs: Vec<Act>,
        training: bool,
        observe: &mut dyn FnMut(usize, std::time::Duration, &Act),
    ) -> Forward {
        // A network whose layers live on several devices (pipeline stages) runs each layer on
        // its parameters' device; a layer without parameters runs on the previous one's.
        match self.layer_devices() {
            Some(devices) => {
                let at = move |i: usize| devices[i].clone();
                self.forward_placed(spec, inputs, training, observe, Some(&at))
            }
            None => self.forward_placed(spec, inputs, training, observe, None),
        }
    }

    /// Each layer's device when the parameters live on more than one device; `None` when
    /// they share one (the usual case).
    fn layer_devices(&self) -> Option<Vec<Device>> {
        if self.devices().len() <= 1 {
            return None;
        }
        let mut last: Option<Device> = None;
        let mut per_layer: Vec<Option<Device>> = self
            .layers
            .iter()
            .map(|l| {
                if let Some(d) = l.devices().into_iter().next() {
                    last = Some(d);
                }
                last.clone()
            })
            .collect();
        // Leading parameter-free layers run on the first parameterized layer's device.
        let first = per_layer.iter().flatten().next().cloned()?;
        for d in per_layer.iter_mut().take_while(|d| d.is_none()) {
            *d = Some(first.clone());
        }
        Some(per_layer.into_iter().map(|d| d.expect("filled")).collect())
    }

    /// [`Network::forward_graph`] with each layer run where `placement(layer index)` says
    /// (pipeline model parallelism, `crate::distribute::PipelineStrategy`): a layer's inputs
    /// that live on another device are copied to its device first (a differentiable copy, so
    /// the backward pass copies their gradients back). The layer's parameters must already be
    /// on that device. `None` runs every layer where its inputs are.
    pub fn forward_placed(
        &self,
        spec: &ModelSpec,
        inputs: Vec<Act>,
        training: bool,
        observe: &mut dyn FnMut(usize, std::time::Duration, &Act),
        placement: Option<&dyn Fn(usize) -> Device>,
    ) -> Forward {
        use super::spec::NodeRef;
        let outputs = spec.output_layers();
        let mut logits: Vec<Option<Tensor<2>>> = vec![None; outputs.len()];
        let mut updates = Vec::new();
        let mut activity_loss = None;
        let n = spec.layers().len();
        // Remaining consumers of each input and layer output.
        let mut uses_in = vec![0usize; spec.inputs().len()];
        let mut uses = vec![0usize; n];
        // Remaining consumers of each layer's states (`return_state`), by state index - 1.
        let mut uses_st: Vec<Vec<usize>> = (0..n).map(|i| vec![0; spec.state_count(i)]).collect();
        for l in spec.layers() {
            for r in &l.inputs {
                match r {
                    NodeRef::Input(k) => uses_in[*k] += 1,
                    NodeRef::Layer(j) => uses[*j] += 1,
                    NodeRef::State(j, k) => uses_st[*j][k - 1] += 1,
                }
            }
        }
        // Outputs stay alive for the end even when other layers consume them.
        for &o in outputs {
            uses[o] += 1;
        }
        let mut values_in: Vec<Option<Act>> = inputs.into_iter().map(Some).collect();
        let mut values: Vec<Option<Act>> = (0..n).map(|_| None).collect();
        let mut states: Vec<Vec<Option<Act>>> = (0..n).map(|_| Vec::new()).collect();
        // Keras' masks (`[batch, steps]`, 1 keeps a step) of the inputs and layer outputs.
        let mut masks: Vec<Option<Tensor<2>>> = vec![None; n];
        // Mixed precision (crate::precision::round): the 16-bit type each layer's output is
        // already rounded to.
        let mut rounded: Vec<Option<burn::tensor::FloatDType>> = vec![None; n];
        // Whether this device computes in each 16-bit type for real (crate::precision).
        let native_on = HalfCompute::of(values_in.iter().flatten().next());
        for (i, layer) in spec.layers().iter().enumerate() {
            let started = std::time::Instant::now();
            // A call of a shared layer runs on (and trains) that layer's weights.
            let pi = spec.param_owner(i);
            let (owner, p) = (&spec.layers()[pi], &self.layers[pi]);
            let compute = spec.layer_precision(i).compute_dtype();
            // The 16-bit type this layer computes in for real, if it does.
            let native = compute.filter(|&dt| native_on.has(dt) && takes_half(&layer.kind));
            let mut xs = Vec::with_capacity(layer.inputs.len());
            let in_masks: Vec<Option<Tensor<2>>> = layer
                .inputs
                .iter()
                .map(|r| match r {
                    NodeRef::Input(_) | NodeRef::State(..) => None,
                    NodeRef::Layer(j) => masks[*j].clone(),
                })
                .collect();
            for r in &layer.inputs {
                let (slot, left, was) = match r {
                    NodeRef::Input(k) => (&mut values_in[*k], &mut uses_in[*k], None),
                    NodeRef::Layer(j) => (&mut values[*j], &mut uses[*j], rounded[*j]),
                    NodeRef::State(j, k) => (&mut states[*j][k - 1], &mut uses_st[*j][k - 1], None),
                };
                *left -= 1;
                let v = if *left == 0 {
                    slot.take()
                } else {
                    slot.clone()
                };
                let mut v = v.expect("inputs are computed before their consumers");
                if let Some(place) = placement {
                    v = v.to_device(&place(pi));
                }
                v = match (native, compute) {
                    (Some(dt), _) => cast_act(v, dt),
                    (None, Some(dt)) if was != Some(dt) => round_act(to_float32(v), dt),
                    (None, _) => to_float32(v),
                };
                xs.push(v);
            }
            let rounded_params;
            let p = match compute {
                Some(dt) => {
                    rounded_params = round_params(p, dt, native.is_some());
                    &rounded_params
                }
                None => p,
            };
            let x = match &layer.kind {
                LayerKind::Input { .. } => {
                    masks[i] = in_masks.into_iter().next().flatten();
                    xs.pop().expect("one input")
                }
                LayerKind::Declared(l) => {
                    let output = outputs.iter().position(|&o| o == i);
                    let ctx = ForwardContext {
                        training,
                        trainable: owner.options.trainable,
                        compute,
                        before_softmax: output.is_some() && l.ends_in_softmax(),
                    };
                    let mut weights = Weights::new(l.weights(&spec.shapes_before(i)), p);
                    weights.earlier = updates
                        .iter()
                        .filter(|(owner, _, _)| *owner == pi)
                        .map(|(_, name, value): &StateUpdate| (name.clone(), value.clone()))
                        .collect();
                    let refs: Vec<&Act> = xs.iter().collect();
                    masks[i] = l.compute_mask(&refs, &in_masks);
                    let (y, extra) = l.forward_states(xs, &in_masks, &weights, ctx);
                    states[i] = extra.into_iter().map(Some).collect();
                    updates.extend(
                        weights
                            .updates
                            .into_inner()
                            .into_iter()
                            .map(|(name, value)| (pi, name, value)),
                    );
                    match output {
                        Some(k) if ctx.before_softmax => {
                            logits[k] = Some(rows(to_float32(y.clone())));
                            y.activated(Activation::Softmax)
                        }
                        _ => y,
                    }
                }
            };
            // A layer that passes its one input's values through keeps that input's rounding.
            let input_rounded = match layer.inputs[..] {
                [NodeRef::Layer(j)] => rounded[j],
                _ => None,
            };
            let (x, r) = match native {
                Some(dt) => (x, Some(dt)),
                None => round_output(x, &layer.kind, (compute, input_rounded), native_on),
            };
            rounded[i] = r;
            observe(i, started.elapsed(), &x);
            activity_loss = super::regularize::add_activity(activity_loss, owner, &x);
            values[i] = Some(x);
        }
        let mut heads: Vec<Tensor<2>> = outputs
            .iter()
            .map(|&o| rows(to_float32(values[o].take().expect("the output layers ran"))))
            .collect();
        let output = if heads.len() == 1 {
            heads.pop().expect("one output")
        } else {
            Tensor::cat(heads, 1)
        };
        Forward {
            output,
            logits,
            updates,
            activity_loss,
        }
    }

    /// Stores the forward pass's `updates` (new moving statistics, detached) in their
    /// weights.
    pub fn apply_updates(mut self, spec: &ModelSpec, updates: Vec<StateUpdate>) -> Network {
        for (i, name, value) in updates {
            let found = spec
                .own_weights(i)
                .into_iter()
                .find(|(w, _)| w.name == name);
            let Some((w, slot)) = found else {
                continue;
            };
            self.layers[i].update(slot, &w, |_| value);
        }
        self
    }
}

/// Which 16-bit types the device of a forward pass computes in for real
/// ([`crate::precision::computes_natively`]), asked once per pass.
#[derive(Clone, Copy)]
struct HalfCompute {
    float16: bool,
    bfloat16: bool,
}

impl HalfCompute {
    /// For the device of `input` (none: neither type).
    fn of(input: Option<&Act>) -> HalfCompute {
        use burn::tensor::FloatDType;
        let on = |dt| input.is_some_and(|x| crate::precision::computes_natively(&x.device(), dt));
        HalfCompute {
            float16: on(FloatDType::F16),
            bfloat16: on(FloatDType::BF16),
        }
    }

    fn has(self, dtype: burn::tensor::FloatDType) -> bool {
        match dtype {
            burn::tensor::FloatDType::F16 => self.float16,
            burn::tensor::FloatDType::BF16 => self.bfloat16,
            _ => false,
        }
    }
}

/// Whether a layer of this kind computes in a 16-bit type for real when the device can
/// ([`super::layer::Layer::computes_in_half`]; never one ending in a softmax).
fn takes_half(kind: &LayerKind) -> bool {
    match kind {
        LayerKind::Input { .. } => false,
        LayerKind::Declared(l) => l.computes_in_half() && !l.ends_in_softmax(),
    }
}

/// A layer's output under its compute dtype `compute` (its input having been rounded to
/// `rounded_to`), and the 16-bit type the output is rounded to: Keras' layers return their
/// compute dtype, except that softmax stays float32. Input, Flatten and MaxPooling2D outputs
/// are values of their input, rounded when it was.
fn round_output(
    x: Act,
    kind: &LayerKind,
    (compute, rounded_to): (
        Option<burn::tensor::FloatDType>,
        Option<burn::tensor::FloatDType>,
    ),
    native_on: HalfCompute,
) -> (Act, Option<burn::tensor::FloatDType>) {
    let (softmax, preserves, rounds) = match kind {
        LayerKind::Input { .. } => (false, true, false),
        LayerKind::Declared(l) => (l.ends_in_softmax(), l.passes_values(), l.rounds_output()),
    };
    match compute {
        _ if softmax => (x, None),
        _ if preserves => (x, compute.or(rounded_to)),
        // Held in the 16-bit type where the device computes in it (the next layer that
        // computes in it needs no cast), rounded float32 elsewhere.
        Some(dt) if native_on.has(dt) => (cast_act(x, dt), Some(dt)),
        // Rounded by the layer's own kernel.
        Some(dt) if rounds => (x, Some(dt)),
        Some(dt) => (round_act(x, dt), Some(dt)),
        None => (x, None),
    }
}

/// The output as rows of its last (Keras) axis: `[batch, units]` as it is, `[batch, steps,
/// units]` as `[batch * steps, units]`, images as `[batch * height * width, channels]` (in
/// Keras' NHWC order). Row-major, these are the values of Keras' output tensor; the losses
/// and metrics work on the rows (one per output position) and Keras' `sum_over_batch_size`
/// is their mean.
fn rows(x: Act) -> Tensor<2> {
    match x {
        Act::Flat(t) => t,
        Act::Seq(t) => {
            let [n, s, u] = t.dims();
            t.reshape([n * s, u])
        }
        Act::Image(t) => {
            let [n, c, h, w] = t.dims();
            t.permute([0, 2, 3, 1]).reshape([n * h * w, c])
        }
        Act::Volume(t) => {
            let [n, c, d, h, w] = t.dims();
            t.permute([0, 2, 3, 4, 1]).reshape([n * d * h * w, c])
        }
    }
}
