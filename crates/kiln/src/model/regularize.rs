//! What a layer's options ([`crate::model::LayerOptions`]) do while training, as Keras does
//! (`keras/src/layers/layer.py`, `keras/src/optimizers/base_optimizer.py`):
//! - weight regularizers add `penalty(weight)` of each trainable layer's weights to the loss
//!   ([`Network::regularization_loss`]);
//! - an `activity_regularizer` adds `penalty(output) / batch size` of the layer's output
//!   ([`activity_penalty`], collected by the forward pass into `Forward::activity_loss`);
//! - constraints replace a weight by `constraint(weight)` after each optimizer update
//!   ([`Network::apply_constraints`]).
//!
//! Weights are handed to the regularizers and constraints in Keras' layout (a Conv2D kernel
//! as `[kh, kw, in, out]`), whatever kiln's storage layout.

use burn::module::Param;
use burn::prelude::*;

use super::constraints::Constraint;
use super::layer::WeightSpec;
use super::network::{Act, LayerParams, Network};
use super::options::{Slot, stored_weights};
use super::spec::{LayerSpec, ModelSpec};

/// `a + b` on `a`'s device (pipeline stages keep weights on several devices).
fn sum(a: Option<Tensor<1>>, b: Tensor<1>) -> Tensor<1> {
    match a {
        Some(a) => {
            let device = a.device();
            a + b.to_device(&device)
        }
        None => b,
    }
}

/// The penalty of `layer`'s `activity_regularizer` on its output `x` for a batch, divided by
/// the batch size (Keras 3's `Layer.__call__`); `None` without one (or for an empty batch,
/// Keras' `divide_no_nan`).
pub(crate) fn activity_penalty(layer: &LayerSpec, x: &Act) -> Option<Tensor<1>> {
    let r = layer.options.activity_regularizer.as_ref()?;
    let (penalty, batch) = match x {
        Act::Flat(t) => (r.penalty(t.clone()), t.dims()[0]),
        Act::Seq(t) => (r.penalty(t.clone()), t.dims()[0]),
        Act::Image(t) => (r.penalty(t.clone()), t.dims()[0]),
    };
    (batch > 0).then(|| penalty.div_scalar(batch as f64))
}

/// Adds `layer`'s activity penalty on `x` to `total` (see [`activity_penalty`]).
pub(crate) fn add_activity(
    total: Option<Tensor<1>>,
    layer: &LayerSpec,
    x: &Act,
) -> Option<Tensor<1>> {
    match activity_penalty(layer, x) {
        Some(p) => Some(sum(total, p)),
        None => total,
    }
}

impl Network {
    /// The sum of the weight regularizers' penalties over the trainable layers' weights (a
    /// one-element tensor tracked by autodiff), or `None` when no layer has one.
    pub fn regularization_loss(&self, spec: &ModelSpec) -> Option<Tensor<1>> {
        let mut total = None;
        for (i, (layer, p)) in spec.layers().iter().zip(&self.layers).enumerate() {
            if layer.options.regularizers.is_empty() {
                continue;
            }
            for (w, slot) in stored_weights(&layer.kind, &spec.shapes_before(i)) {
                if let Some(r) = layer.options.regularizer_of(&w) {
                    total = Some(sum(total, r.penalty(p.keras_flat(slot, &w))));
                }
            }
        }
        total
    }

    /// `loss` plus the weight regularizers' penalties and `activity` (the forward pass's
    /// `activity_loss`): the loss Keras trains on and reports.
    pub fn regularized(
        &self,
        spec: &ModelSpec,
        loss: Tensor<1>,
        activity: Option<Tensor<1>>,
    ) -> Tensor<1> {
        let loss = match self.regularization_loss(spec) {
            Some(r) => sum(Some(loss), r),
            None => loss,
        };
        match activity {
            Some(a) => sum(Some(loss), a),
            None => loss,
        }
    }

    /// The network with each trainable weight that has a constraint replaced by
    /// `constraint(weight)` (Keras applies them after every optimizer update); the
    /// parameters keep their ids and gradient tracking, so the optimizer state still applies.
    pub fn apply_constraints(mut self, spec: &ModelSpec) -> Network {
        for (i, (layer, p)) in spec.layers().iter().zip(&mut self.layers).enumerate() {
            if layer.options.constraints.is_empty() {
                continue;
            }
            for (w, slot) in stored_weights(&layer.kind, &spec.shapes_before(i)) {
                if let Some(c) = layer.options.constraint_of(&w) {
                    p.update(slot, &w, |t| keras_apply(t, &w.shape, |t| constrain(c, t)));
                }
            }
        }
        self
    }
}

/// `f` applied to a flat weight reshaped to its Keras shape (rank 1 to 4, as
/// `LayerOptions::check` allows for constraints), flattened back.
fn keras_apply(t: Tensor<1>, shape: &[usize], f: impl FnOnce(AnyRank) -> AnyRank) -> Tensor<1> {
    let n = t.dims()[0];
    let shaped = match *shape {
        [a] => AnyRank::One(t.reshape([a])),
        [a, b] => AnyRank::Two(t.reshape([a, b])),
        [a, b, c] => AnyRank::Three(t.reshape([a, b, c])),
        [a, b, c, d] => AnyRank::Four(t.reshape([a, b, c, d])),
        _ => unreachable!("constraints are checked to have weights of rank 1 to 4"),
    };
    match f(shaped) {
        AnyRank::One(t) => t,
        AnyRank::Two(t) => t.reshape([n]),
        AnyRank::Three(t) => t.reshape([n]),
        AnyRank::Four(t) => t.reshape([n]),
    }
}

/// A weight in its Keras shape.
enum AnyRank {
    One(Tensor<1>),
    Two(Tensor<2>),
    Three(Tensor<3>),
    Four(Tensor<4>),
}

fn constrain(c: &Constraint, t: AnyRank) -> AnyRank {
    match t {
        AnyRank::One(t) => AnyRank::One(c.apply(t)),
        AnyRank::Two(t) => AnyRank::Two(c.apply(t)),
        AnyRank::Three(t) => AnyRank::Three(c.apply(t)),
        AnyRank::Four(t) => AnyRank::Four(c.apply(t)),
    }
}

fn param<const D: usize>(
    values: Vec<f32>,
    shape: [usize; D],
    device: &Device,
    grad: bool,
) -> Param<Tensor<D>> {
    Param::from_tensor(Tensor::from_data(TensorData::new(values, shape), device))
        .set_require_grad(grad)
}

/// `p` with its value replaced by `f(value)` (outside autodiff), keeping its id and whether
/// it requires gradients.
fn mapped<const D: usize>(
    p: Param<Tensor<D>>,
    f: impl FnOnce(Tensor<D>) -> Tensor<D>,
) -> Param<Tensor<D>> {
    p.map(|t| {
        let grad = t.is_require_grad();
        f(t.detach()).detach().set_require_grad(grad)
    })
}

fn map_slot<const D: usize>(
    slot: &mut Option<Param<Tensor<D>>>,
    f: impl FnOnce(Tensor<D>) -> Tensor<D>,
) {
    if let Some(p) = slot.take() {
        *slot = Some(mapped(p, f));
    }
}

impl LayerParams {
    /// Stores weight `w` (at `slot`) from `values` in Keras' layout, requiring gradients when
    /// `grad`.
    pub(crate) fn put(
        &mut self,
        slot: Slot,
        w: &WeightSpec,
        values: Vec<f32>,
        grad: bool,
        device: &Device,
    ) {
        let n = values.len();
        let vector = |values| Some(param(values, [n], device, grad));
        match slot {
            Slot::DenseKernel => {
                self.dense_kernel = Some(param(values, [w.shape[0], w.shape[1]], device, grad));
            }
            Slot::ConvKernel => {
                let [kh, kw, cin, cout]: [usize; 4] =
                    w.shape[..].try_into().expect("Conv2D kernel");
                let v = super::weights::hwio_to_oihw(&values, [kh, kw, cin, cout]);
                self.conv_kernel = Some(param(v, [cout, cin, kh, kw], device, grad));
            }
            Slot::Bias => self.bias = vector(values),
            Slot::Gamma => self.gamma = vector(values),
            Slot::Beta => self.beta = vector(values),
            Slot::MovingMean => self.moving_mean = vector(values),
            Slot::MovingVariance => self.moving_variance = vector(values),
            Slot::Kernel(_) => {
                let rc = match w.shape[..] {
                    [rows, cols] => [rows, cols],
                    _ => super::network_ext::kernel_2d(&w.name, &w.shape),
                };
                self.kernels.push(param(values, rc, device, grad));
            }
            Slot::Vector(_) => self.vectors.push(param(values, [n], device, grad)),
        }
    }

    /// Weight `w` (at `slot`) flattened in Keras' row-major layout.
    pub(crate) fn keras_flat(&self, slot: Slot, w: &WeightSpec) -> Tensor<1> {
        let n = w.size();
        let vector = |p: &Option<Param<Tensor<1>>>| p.as_ref().expect("stored").val();
        match slot {
            Slot::DenseKernel => self
                .dense_kernel
                .as_ref()
                .expect("stored")
                .val()
                .reshape([n]),
            Slot::ConvKernel => {
                let k = self.conv_kernel.as_ref().expect("stored").val();
                k.permute([2, 3, 1, 0]).reshape([n])
            }
            Slot::Bias => vector(&self.bias),
            Slot::Gamma => vector(&self.gamma),
            Slot::Beta => vector(&self.beta),
            Slot::MovingMean => vector(&self.moving_mean),
            Slot::MovingVariance => vector(&self.moving_variance),
            Slot::Kernel(k) => self.kernels[k].val().reshape([n]),
            Slot::Vector(v) => self.vectors[v].val(),
        }
    }

    /// Replaces weight `w` (at `slot`) by `f(its Keras-layout flat values)`.
    pub(crate) fn update(
        &mut self,
        slot: Slot,
        w: &WeightSpec,
        f: impl FnOnce(Tensor<1>) -> Tensor<1>,
    ) {
        let n = w.size();
        match slot {
            Slot::DenseKernel => map_slot(&mut self.dense_kernel, |t| via_flat(t, n, f)),
            Slot::Kernel(k) => {
                self.kernels[k] = mapped(self.kernels[k].clone(), |t| via_flat(t, n, f));
            }
            Slot::ConvKernel => map_slot(&mut self.conv_kernel, |t| {
                let [o, i, h, kw] = t.dims();
                f(t.permute([2, 3, 1, 0]).reshape([n]))
                    .reshape([h, kw, i, o])
                    .permute([3, 2, 0, 1])
            }),
            Slot::Bias => map_slot(&mut self.bias, f),
            Slot::Gamma => map_slot(&mut self.gamma, f),
            Slot::Beta => map_slot(&mut self.beta, f),
            Slot::MovingMean => map_slot(&mut self.moving_mean, f),
            Slot::MovingVariance => map_slot(&mut self.moving_variance, f),
            Slot::Vector(v) => self.vectors[v] = mapped(self.vectors[v].clone(), f),
        }
    }
}

/// `f` on the `n` values of a rank-2 tensor, reshaped back.
fn via_flat(t: Tensor<2>, n: usize, f: impl FnOnce(Tensor<1>) -> Tensor<1>) -> Tensor<2> {
    let dims = t.dims();
    f(t.reshape([n])).reshape(dims)
}
