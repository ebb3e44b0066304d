//! The 16-bit compute copies of a layer's activations and weights under a mixed precision
//! policy, made with [`crate::precision::round::round`].

use burn::module::Param;
use burn::prelude::*;
use burn::tensor::FloatDType;

use super::{Act, LayerParams};
use crate::precision::round::round;

/// `t` cast to `dtype`, unchanged when it has that dtype already.
fn cast<const D: usize>(t: Tensor<D>, dtype: FloatDType) -> Tensor<D> {
    if FloatDType::from(t.dtype()) == dtype {
        t
    } else {
        t.cast(dtype)
    }
}

/// `x` held in `dtype` (a cast, or nothing when it is held so already): the activation of a
/// layer that computes in a 16-bit type for real ([`crate::precision::computes_natively`]).
pub fn cast_act(x: Act, dtype: FloatDType) -> Act {
    match x {
        Act::Flat(t) => Act::Flat(cast(t, dtype)),
        Act::Seq(t) => Act::Seq(cast(t, dtype)),
        Act::Image(t) => Act::Image(cast(t, dtype)),
        Act::Volume(t) => Act::Volume(cast(t, dtype)),
    }
}

/// `x` in float32 when a 16-bit type holds it (its values unchanged), as it is otherwise.
pub fn to_float32(x: Act) -> Act {
    let half = |dt: burn::tensor::DType| {
        matches!(dt, burn::tensor::DType::F16 | burn::tensor::DType::BF16)
    };
    let held_in_half = match &x {
        Act::Flat(t) => half(t.dtype()),
        Act::Seq(t) => half(t.dtype()),
        Act::Image(t) => half(t.dtype()),
        Act::Volume(t) => half(t.dtype()),
    };
    if held_in_half {
        cast_act(x, FloatDType::F32)
    } else {
        x
    }
}

/// [`round`] on an activation of any rank.
pub fn round_act(x: Act, dtype: FloatDType) -> Act {
    match x {
        Act::Flat(t) => Act::Flat(round(t, dtype)),
        Act::Seq(t) => Act::Seq(round(t, dtype)),
        Act::Image(t) => Act::Image(round(t, dtype)),
        Act::Volume(t) => Act::Volume(round(t, dtype)),
    }
}

/// A compute copy of a weight: rounded to `dtype`'s values (`native` false) or held in it.
fn copy<const D: usize>(t: Tensor<D>, dtype: FloatDType, native: bool) -> Tensor<D> {
    if native {
        cast(t, dtype)
    } else {
        round(t, dtype)
    }
}

fn round_param<const D: usize>(
    p: &Option<Param<Tensor<D>>>,
    dtype: FloatDType,
    native: bool,
) -> Option<Param<Tensor<D>>> {
    p.as_ref()
        .map(|p| Param::initialized(p.id, copy(p.val(), dtype, native)))
}

/// The compute copy of a layer's weights: Dense and Conv2D kernels and biases rounded to
/// `dtype` (Keras' layers autocast their float32 variables to the compute dtype when they
/// read them). BatchNormalization's `gamma`, `beta` and moving statistics are left in
/// float32: Keras' BatchNormalization computes in float32 under mixed policies
/// (`keras/src/layers/normalization/batch_normalization.py`). The copies keep the parameters'
/// ids and stay connected to them in the autodiff graph, so gradients reach the float32
/// master weights. With `native` (a layer that computes in `dtype` for real) the copies are
/// held in `dtype` instead of rounded float32.
pub fn round_params(p: &LayerParams, dtype: FloatDType, native: bool) -> LayerParams {
    LayerParams {
        dense_kernel: round_param(&p.dense_kernel, dtype, native),
        conv_kernel: round_param(&p.conv_kernel, dtype, native),
        bias: round_param(&p.bias, dtype, native),
        gamma: p.gamma.clone(),
        beta: p.beta.clone(),
        moving_mean: p.moving_mean.clone(),
        moving_variance: p.moving_variance.clone(),
        // The functional layers' matrices (Embedding, MultiHeadAttention, TransformerEncoder
        // projections) are rounded; their vectors (LayerNormalization's gamma/beta, which Keras
        // computes in float32, and projection biases) stay float32.
        kernels: p
            .kernels
            .iter()
            .map(|k| Param::initialized(k.id, copy(k.val(), dtype, native)))
            .collect(),
        vectors: p.vectors.clone(),
    }
}
