//! Code the activation, noise and normalization layer files share (not layers): the axis and
//! rate checks, Keras-shaped weights broadcast over a batch, and the layer methods of an
//! element-wise map.

use burn::prelude::*;

use crate::model::args::keras_shape;

/// The [`crate::model::layer::Layer`] methods of a layer that is an element-wise map: it
/// implements [`crate::model::act::ElementWise`] and `Clone`; output the input's shape.
macro_rules! pointwise_layer {
    () => {
        fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
            Ok(inputs[0].to_vec())
        }
        fn forward(
            &self,
            mut inputs: Vec<$crate::model::act::Act>,
            _: &$crate::model::layer::Weights,
            _: $crate::model::layer::ForwardContext,
        ) -> $crate::model::act::Act {
            inputs.pop().expect("one input").map(self.clone())
        }
    };
}
pub(super) use pointwise_layer;

/// Checks that `axis` is the last axis of an input of Keras shape `input` (`-1` or its rank,
/// Keras counting the batch as axis 0): kiln's layers of this family work on the last one.
pub(super) fn last_axis(axis: i64, input: &[usize]) -> Result<(), String> {
    let rank = input.len() as i64 + 1;
    if axis == -1 || axis == rank - 1 {
        return Ok(());
    }
    Err(format!(
        "`axis` {axis} is not the last axis of input shape {}; kiln supports only the last \
         axis (-1 or {}) here",
        keras_shape(input),
        rank - 1
    ))
}

/// A `rate` (or other fraction) argument in `[0, 1)`.
pub(super) use super::rate as unit_rate;

/// A fraction argument in `[0, 1]`.
pub(super) fn unit_interval(name: &str, v: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(format!("`{name}` must be in [0, 1], got {v}"))
    }
}

/// A non-negative argument.
pub(super) fn non_negative(name: &str, v: f64) -> Result<(), String> {
    if v >= 0.0 {
        Ok(())
    } else {
        Err(format!("`{name}` must not be negative, got {v}"))
    }
}

/// A weight of Keras shape `shape` (the input's shape without the batch, some axes 1) as a
/// rank-`D` tensor that broadcasts against the batch as kiln lays it out (`[1, ...shape]`;
/// images `[1, channels, height, width]`).
pub(super) fn batch_broadcast<const D: usize>(flat: Tensor<1>, shape: &[usize]) -> Tensor<D> {
    let mut dims = [1usize; D];
    dims[1..].copy_from_slice(shape);
    let t = flat.reshape(dims);
    if D == 4 {
        t.permute(std::array::from_fn(|k| [0, 3, 1, 2][k]))
    } else {
        t
    }
}
