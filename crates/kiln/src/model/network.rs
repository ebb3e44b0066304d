//! The trainable network: a Burn module holding each layer's parameters, and its forward pass.
//!
//! Layer *arguments* live in the [`ModelSpec`]; this module holds only tensors, so one
//! [`Network`] type serves every Sequential model. Inside the network images are NCHW
//! (`[batch, channels, height, width]`, Burn's convolution layout); the batch is converted from
//! Keras' NHWC once, before the step (see `crate::batch`), and [`LayerKind::Flatten`] flattens in
//! Keras' channels-last order so that weights match Keras element for element.

use burn::module::{Module, Param};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::activation;
use burn::tensor::module::{avg_pool2d, batch_norm, batch_norm_train};
use burn::tensor::ops::AvgPoolOptions;
use rand::SeedableRng;
use rand::rngs::StdRng;

pub use super::act::Act;
use super::layer::{ForwardContext, Weights};
use super::spec::{Activation, LayerKind, ModelSpec, Padding};
use crate::precision::round::{round_act, round_params};

/// Parameters of one layer; which fields are set depends on the layer's kind.
#[derive(Module, Debug)]
pub struct LayerParams {
    /// Dense kernel, `[in_features, units]` (Keras' layout).
    pub dense_kernel: Option<Param<Tensor<2>>>,
    /// Conv2D kernel, `[filters, in_channels, kernel_h, kernel_w]` (Burn's layout; Keras stores
    /// `[kernel_h, kernel_w, in_channels, filters]`).
    pub conv_kernel: Option<Param<Tensor<4>>>,
    /// Bias, `[units]` or `[filters]`.
    pub bias: Option<Param<Tensor<1>>>,
    /// BatchNormalization scale, `[channels]`.
    pub gamma: Option<Param<Tensor<1>>>,
    /// BatchNormalization offset, `[channels]`.
    pub beta: Option<Param<Tensor<1>>>,
    /// BatchNormalization moving mean, `[channels]` (not trained by gradients).
    pub moving_mean: Option<Param<Tensor<1>>>,
    /// BatchNormalization moving variance, `[channels]` (not trained by gradients).
    pub moving_variance: Option<Param<Tensor<1>>>,
    /// Further 2-D kernels (Embedding tables, attention and feed-forward projections), in the
    /// order `network_ext::weight_names` lists them.
    pub kernels: Vec<Param<Tensor<2>>>,
    /// Further vectors (attention biases, an encoder's LayerNormalization and feed-forward
    /// vectors), in the order `network_ext::weight_names` lists them.
    pub vectors: Vec<Param<Tensor<1>>>,
}

impl LayerParams {
    pub(crate) fn empty() -> LayerParams {
        LayerParams {
            dense_kernel: None,
            conv_kernel: None,
            bias: None,
            gamma: None,
            beta: None,
            moving_mean: None,
            moving_variance: None,
            kernels: Vec::new(),
            vectors: Vec::new(),
        }
    }
}

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
    /// Batch statistics `(layer index, mean, variance)` of BatchNormalization layers in training
    /// mode, to fold into the moving averages after the step.
    pub batch_stats: Vec<(usize, Tensor<1>, Tensor<1>)>,
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
                    let values = layer.options.initial_values(&w, &mut rng);
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
        let mut batch_stats = Vec::new();
        let mut activity_loss = None;
        let n = spec.layers().len();
        // Remaining consumers of each input and layer output.
        let mut uses_in = vec![0usize; spec.inputs().len()];
        let mut uses = vec![0usize; n];
        for l in spec.layers() {
            for r in &l.inputs {
                match r {
                    NodeRef::Input(k) => uses_in[*k] += 1,
                    NodeRef::Layer(j) => uses[*j] += 1,
                }
            }
        }
        // Outputs stay alive for the end even when other layers consume them.
        for &o in outputs {
            uses[o] += 1;
        }
        let mut values_in: Vec<Option<Act>> = inputs.into_iter().map(Some).collect();
        let mut values: Vec<Option<Act>> = (0..n).map(|_| None).collect();
        // Mixed precision (crate::precision::round): the 16-bit type each layer's output is
        // already rounded to.
        let mut rounded: Vec<Option<burn::tensor::FloatDType>> = vec![None; n];
        for (i, layer) in spec.layers().iter().enumerate() {
            let started = std::time::Instant::now();
            // A call of a shared layer runs on (and trains) that layer's weights.
            let pi = spec.param_owner(i);
            let (owner, p) = (&spec.layers()[pi], &self.layers[pi]);
            let compute = spec.layer_precision(i).compute_dtype();
            let mut xs = Vec::with_capacity(layer.inputs.len());
            for r in &layer.inputs {
                let (slot, left, was) = match r {
                    NodeRef::Input(k) => (&mut values_in[*k], &mut uses_in[*k], None),
                    NodeRef::Layer(j) => (&mut values[*j], &mut uses[*j], rounded[*j]),
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
                if let Some(dt) = compute
                    && was != Some(dt)
                {
                    v = round_act(v, dt);
                }
                xs.push(v);
            }
            let rounded_params;
            let p = match compute {
                Some(dt) => {
                    rounded_params = round_params(p, dt);
                    &rounded_params
                }
                None => p,
            };
            // Keras 3: a frozen BatchNormalization normalizes with its moving statistics.
            let training = training
                && (owner.options.trainable
                    || !matches!(layer.kind, LayerKind::BatchNormalization { .. }));
            let x = match &layer.kind {
                LayerKind::Dense { .. }
                | LayerKind::Conv2D { .. }
                | LayerKind::MaxPooling2D { .. }
                | LayerKind::AveragePooling2D { .. }
                | LayerKind::Flatten {}
                | LayerKind::Dropout { .. }
                | LayerKind::BatchNormalization { .. }
                | LayerKind::Activation { .. }
                | LayerKind::Input { .. } => {
                    let x = xs.pop().expect("one input");
                    let output = outputs.iter().position(|&o| o == i);
                    let mut softmax_input = None;
                    let y = self.layer_forward(
                        pi,
                        output.is_some(),
                        &layer.kind,
                        p,
                        x,
                        training,
                        compute,
                        &mut softmax_input,
                        &mut batch_stats,
                    );
                    if let Some(k) = output {
                        logits[k] = softmax_input;
                    }
                    y
                }
                LayerKind::Declared(l) => {
                    let weights = Weights {
                        specs: l.weights(&spec.shapes_before(i)),
                        kernels: &p.kernels,
                        vectors: &p.vectors,
                    };
                    l.forward(xs, &weights, ForwardContext { training })
                }
                other => super::network_ext::forward(other, p, xs),
            };
            // A layer that passes its one input's values through keeps that input's rounding.
            let input_rounded = match layer.inputs[..] {
                [NodeRef::Layer(j)] => rounded[j],
                _ => None,
            };
            let (x, r) = round_output(x, &layer.kind, compute, input_rounded);
            rounded[i] = r;
            observe(i, started.elapsed(), &x);
            activity_loss = super::regularize::add_activity(activity_loss, owner, &x);
            values[i] = Some(x);
        }
        let mut heads: Vec<Tensor<2>> = outputs
            .iter()
            .map(|&o| rows(values[o].take().expect("the output layers ran")))
            .collect();
        let output = if heads.len() == 1 {
            heads.pop().expect("one output")
        } else {
            Tensor::cat(heads, 1)
        };
        Forward {
            output,
            logits,
            batch_stats,
            activity_loss,
        }
    }

    /// One layer of the original (Sequential) kinds on its single input; `i` is the layer
    /// whose parameters `p` are (the shared layer's for a call of one), which its
    /// BatchNormalization statistics update.
    #[allow(clippy::too_many_arguments)]
    fn layer_forward(
        &self,
        i: usize,
        is_output: bool,
        kind: &LayerKind,
        p: &LayerParams,
        x: Act,
        training: bool,
        compute: Option<burn::tensor::FloatDType>,
        logits: &mut Option<Tensor<2>>,
        batch_stats: &mut Vec<(usize, Tensor<1>, Tensor<1>)>,
    ) -> Act {
        // Mixed precision: a non-linear activation after a Dense or Conv2D sees the rounded
        // affine output.
        let pre = |a: Act, act: Activation| match compute {
            Some(dt) if act != Activation::Linear => round_act(a, dt),
            _ => a,
        };
        match kind {
            LayerKind::Input { .. } => x,
            LayerKind::Dense { activation, .. } => {
                // A ReLU is fused into the layer; other activations follow it.
                if *activation == Activation::Relu {
                    dense(x, p, true)
                } else {
                    let y = pre(dense(x, p, false), *activation);
                    if is_output && *activation == Activation::Softmax {
                        *logits = Some(rows(y.clone()));
                    }
                    apply_activation(y, *activation)
                }
            }
            LayerKind::Conv2D {
                strides,
                padding,
                activation,
                kernel_size,
                ..
            } => {
                let x4 = image(x);
                let [_, _, h, w] = x4.dims();
                let (_, ph) = padding
                    .resolve(h, kernel_size.0[0], strides.0[0])
                    .expect("shape checked");
                let (_, pw) = padding
                    .resolve(w, kernel_size.0[1], strides.0[1])
                    .expect("shape checked");
                // A ReLU is fused into the convolution; other activations follow it.
                let relu = *activation == Activation::Relu;
                let y = crate::ops::conv2d(
                    x4,
                    p.conv_kernel.as_ref().expect("conv kernel").val(),
                    p.bias.as_ref().map(|b| b.val()),
                    strides.0,
                    [ph, pw],
                    relu,
                );
                if relu {
                    Act::Image(y)
                } else {
                    apply_activation(pre(Act::Image(y), *activation), *activation)
                }
            }
            LayerKind::MaxPooling2D {
                pool_size,
                strides,
                padding,
            } => {
                let x4 = image(x);
                let s = strides.unwrap_or(*pool_size).0;
                let pads = pool_padding(&x4, *padding, pool_size.0, s);
                Act::Image(crate::ops::max_pool2d(x4, pool_size.0, s, pads))
            }
            LayerKind::AveragePooling2D {
                pool_size,
                strides,
                padding,
            } => {
                let x4 = image(x);
                let s = strides.unwrap_or(*pool_size).0;
                let pads = pool_padding(&x4, *padding, pool_size.0, s);
                let options = AvgPoolOptions::new(pool_size.0)
                    .with_stride(s)
                    .with_padding_pairs(pads)
                    .with_count_include_pad(false);
                Act::Image(avg_pool2d(x4, options))
            }
            LayerKind::Flatten {} => Act::Flat(match x {
                Act::Flat(t) => t,
                Act::Seq(t) => t.flatten(1, 2),
                // Keras flattens channels-last: [b, h, w, c].
                Act::Image(t) => t.permute([0, 2, 3, 1]).flatten(1, 3),
            }),
            LayerKind::Dropout { rate } => {
                if training && *rate > 0.0 {
                    dropout(x, *rate)
                } else {
                    x
                }
            }
            LayerKind::BatchNormalization { epsilon, .. } => {
                let (y, stats) = batch_normalization(x, p, *epsilon, training);
                if let Some((mean, var)) = stats {
                    batch_stats.push((i, mean, var));
                }
                y
            }
            LayerKind::Activation { activation } => {
                if is_output && *activation == Activation::Softmax {
                    *logits = Some(rows(x.clone()));
                }
                apply_activation(x, *activation)
            }
            other => unreachable!("{} is run by network_ext.rs", other.class_name()),
        }
    }

    /// Folds BatchNormalization batch statistics into the moving averages:
    /// `moving = moving * momentum + batch * (1 - momentum)` (Keras' rule, biased variance).
    pub fn update_moving_stats(
        mut self,
        spec: &ModelSpec,
        stats: Vec<(usize, Tensor<1>, Tensor<1>)>,
    ) -> Network {
        for (i, mean, var) in stats {
            let LayerKind::BatchNormalization { momentum, .. } = spec.layers()[i].kind else {
                continue;
            };
            let p = &mut self.layers[i];
            let blend = |old: Option<Param<Tensor<1>>>, batch: Tensor<1>| {
                old.map(|param| {
                    param.map(|t| {
                        (t.detach() * momentum + batch.detach() * (1.0 - momentum))
                            .set_require_grad(false)
                    })
                })
            };
            p.moving_mean = blend(p.moving_mean.take(), mean);
            p.moving_variance = blend(p.moving_variance.take(), var);
        }
        self
    }
}

/// A layer's output under its compute dtype `compute` (its input having been rounded to
/// `rounded_to`), and the 16-bit type the output is rounded to: Keras' layers return their
/// compute dtype, except that softmax stays float32. Input, Flatten and MaxPooling2D outputs
/// are values of their input, rounded when it was.
fn round_output(
    x: Act,
    kind: &LayerKind,
    compute: Option<burn::tensor::FloatDType>,
    rounded_to: Option<burn::tensor::FloatDType>,
) -> (Act, Option<burn::tensor::FloatDType>) {
    let softmax = matches!(
        kind,
        LayerKind::Activation {
            activation: Activation::Softmax
        } | LayerKind::Dense {
            activation: Activation::Softmax,
            ..
        } | LayerKind::Conv2D {
            activation: Activation::Softmax,
            ..
        }
    );
    let preserves = matches!(
        kind,
        LayerKind::Input { .. } | LayerKind::Flatten {} | LayerKind::MaxPooling2D { .. }
    );
    match compute {
        _ if softmax => (x, None),
        _ if preserves => (x, compute.or(rounded_to)),
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
    }
}

fn image(x: Act) -> Tensor<4> {
    match x {
        Act::Image(t) => t,
        other => panic!("spec shape checks guarantee a 4-D input here, got {other:?}"),
    }
}

fn pool_padding(
    x: &Tensor<4>,
    padding: Padding,
    k: [usize; 2],
    s: [usize; 2],
) -> [(usize, usize); 2] {
    let [_, _, h, w] = x.dims();
    let (_, ph) = padding.resolve(h, k[0], s[0]).expect("shape checked");
    let (_, pw) = padding.resolve(w, k[1], s[1]).expect("shape checked");
    [ph, pw]
}

/// Dense on the last axis of any rank ([`crate::ops::dense`] on the rows), with a fused ReLU
/// when `relu`.
fn dense(x: Act, p: &LayerParams, relu: bool) -> Act {
    let w = p.dense_kernel.as_ref().expect("dense kernel").val();
    let b = p.bias.as_ref().map(|b| b.val());
    let affine = |x2: Tensor<2>| crate::ops::dense(x2, w.clone(), b.clone(), relu);
    match x {
        Act::Flat(t) => Act::Flat(affine(t)),
        Act::Seq(t) => {
            let [n, s, f] = t.dims();
            let y = affine(t.reshape([n * s, f]));
            let units = y.dims()[1];
            Act::Seq(y.reshape([n, s, units]))
        }
        Act::Image(t) => {
            let [n, c, h, w_] = t.dims();
            let y = affine(t.permute([0, 2, 3, 1]).reshape([n * h * w_, c]));
            let units = y.dims()[1];
            Act::Image(y.reshape([n, h, w_, units]).permute([0, 3, 1, 2]))
        }
    }
}

fn map_act(
    x: Act,
    f2: impl Fn(Tensor<2>) -> Tensor<2>,
    f3: impl Fn(Tensor<3>) -> Tensor<3>,
    f4: impl Fn(Tensor<4>) -> Tensor<4>,
) -> Act {
    match x {
        Act::Flat(t) => Act::Flat(f2(t)),
        Act::Seq(t) => Act::Seq(f3(t)),
        Act::Image(t) => Act::Image(f4(t)),
    }
}

/// Applies an activation; softmax runs over the feature (channel) axis.
pub fn apply_activation(x: Act, a: Activation) -> Act {
    match a {
        Activation::Linear => x,
        Activation::Relu => map_act(x, activation::relu, activation::relu, activation::relu),
        Activation::Gelu => map_act(x, activation::gelu, activation::gelu, activation::gelu),
        Activation::Sigmoid => map_act(
            x,
            activation::sigmoid,
            activation::sigmoid,
            activation::sigmoid,
        ),
        Activation::Tanh => map_act(x, |t| t.tanh(), |t| t.tanh(), |t| t.tanh()),
        Activation::Softmax => map_act(
            x,
            |t| activation::softmax(t, 1),
            |t| activation::softmax(t, 2),
            |t| activation::softmax(t, 1),
        ),
    }
}

fn dropout(x: Act, rate: f64) -> Act {
    let keep = 1.0 - rate;
    let scale = 1.0 / keep;
    map_act(
        x,
        |t| t.clone().mul(t.random_like(Distribution::Bernoulli(keep))) * scale,
        |t| t.clone().mul(t.random_like(Distribution::Bernoulli(keep))) * scale,
        |t| t.clone().mul(t.random_like(Distribution::Bernoulli(keep))) * scale,
    )
}

type Stats = Option<(Tensor<1>, Tensor<1>)>;

fn batch_normalization(x: Act, p: &LayerParams, eps: f64, training: bool) -> (Act, Stats) {
    let gamma = p.gamma.as_ref().expect("gamma").val();
    let beta = p.beta.as_ref().expect("beta").val();
    let mean = p.moving_mean.as_ref().expect("moving_mean").val();
    let var = p.moving_variance.as_ref().expect("moving_variance").val();
    // Burn normalizes over axis 1 ([batch, channels, ...]): Flat and Image already have the
    // features there; Seq keeps them last and is transposed around the call.
    macro_rules! norm {
        ($t:expr) => {{
            if training && crate::distribute::sync_bn::active() {
                // Sums shifted by the moving mean, which every replica holds alike.
                let (y, batch_mean, batch_var) =
                    crate::distribute::sync_bn::batch_norm_sync($t, gamma, beta, mean, eps);
                (y, Some((batch_mean, batch_var)))
            } else if training {
                let out = batch_norm_train($t, gamma, beta, eps);
                (out.output, Some((out.mean, out.variance)))
            } else {
                (batch_norm($t, gamma, beta, mean, var, eps), None)
            }
        }};
    }
    match x {
        Act::Flat(t) => {
            let (y, s) = norm!(t);
            (Act::Flat(y), s)
        }
        Act::Image(t) => {
            let (y, s) = norm!(t);
            (Act::Image(y), s)
        }
        Act::Seq(t) => {
            let (y, s) = norm!(t.swap_dims(1, 2));
            (Act::Seq(y.swap_dims(1, 2)), s)
        }
    }
}
