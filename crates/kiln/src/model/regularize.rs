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

use burn::prelude::*;

use super::constraints::Constraint;
use super::network::{Act, Network};
use super::options::stored_weights;
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
    // In float32 when the layer computed in a 16-bit type (Keras sums losses in float32).
    let x = &super::round::to_float32(x.clone());
    let (penalty, batch) = match x {
        Act::Flat(t) => (r.penalty(t.clone()), t.dims()[0]),
        Act::Seq(t) => (r.penalty(t.clone()), t.dims()[0]),
        Act::Image(t) => (r.penalty(t.clone()), t.dims()[0]),
        Act::Volume(t) => (r.penalty(t.clone()), t.dims()[0]),
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
