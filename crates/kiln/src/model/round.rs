//! The 16-bit compute copies of a layer's activations and weights under a mixed precision
//! policy, made with [`crate::precision::round::round`].

use burn::module::Param;
use burn::prelude::*;
use burn::tensor::FloatDType;

use super::{Act, LayerParams};
use crate::precision::round::round;

/// [`round`] on an activation of any rank.
pub fn round_act(x: Act, dtype: FloatDType) -> Act {
    match x {
        Act::Flat(t) => Act::Flat(round(t, dtype)),
        Act::Seq(t) => Act::Seq(round(t, dtype)),
        Act::Image(t) => Act::Image(round(t, dtype)),
        Act::Volume(t) => Act::Volume(round(t, dtype)),
    }
}

fn round_param<const D: usize>(
    p: &Option<Param<Tensor<D>>>,
    dtype: FloatDType,
) -> Option<Param<Tensor<D>>> {
    p.as_ref()
        .map(|p| Param::initialized(p.id, round(p.val(), dtype)))
}

/// The compute copy of a layer's weights: Dense and Conv2D kernels and biases rounded to
/// `dtype` (Keras' layers autocast their float32 variables to the compute dtype when they
/// read them). BatchNormalization's `gamma`, `beta` and moving statistics are left in
/// float32: Keras' BatchNormalization computes in float32 under mixed policies
/// (`keras/src/layers/normalization/batch_normalization.py`). The copies keep the parameters'
/// ids and stay connected to them in the autodiff graph, so gradients reach the float32
/// master weights.
pub fn round_params(p: &LayerParams, dtype: FloatDType) -> LayerParams {
    LayerParams {
        dense_kernel: round_param(&p.dense_kernel, dtype),
        conv_kernel: round_param(&p.conv_kernel, dtype),
        bias: round_param(&p.bias, dtype),
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
            .map(|k| Param::initialized(k.id, round(k.val(), dtype)))
            .collect(),
        vectors: p.vectors.clone(),
    }
}
