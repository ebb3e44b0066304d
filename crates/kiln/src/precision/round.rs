//! Rounding float32 tensors to a 16-bit type's values: how kiln runs a layer "in float16".
//!
//! [`round`] casts a tensor to `float16`/`bfloat16` and back to its own type. The values are
//! then exactly those the 16-bit type can hold (round to nearest even; beyond the range they
//! become ±Inf in float16), and Burn's autodiff differentiates each cast as a cast of the
//! gradient (`burn-autodiff/src/ops/tensor.rs`, `float_cast`), so the gradient flowing back
//! through a rounded tensor is rounded the same way. Keeping float32 storage lets the layers
//! keep kiln's float32 CPU kernels, which play the part of tensor cores: 16-bit inputs,
//! float32 accumulation, a 16-bit result.

use burn::module::Param;
use burn::prelude::*;
use burn::tensor::FloatDType;

use crate::model::{Act, LayerParams};

/// `t` rounded to the values of `dtype`, in `t`'s own dtype (a no-op when they are equal).
pub fn round<const D: usize>(t: Tensor<D>, dtype: FloatDType) -> Tensor<D> {
    crate::ops::round_half(t, dtype)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn vec1(v: &[f32], device: &Device) -> Tensor<1> {
        Tensor::from_data(TensorData::new(v.to_vec(), [v.len()]), device)
    }

    #[test]
    fn float16_rounding_overflows_and_underflows_as_ieee_half() {
        let d = Device::flex();
        // 65504 is float16's largest; 65520 rounds up to Inf; 1e-8 is below the smallest
        // subnormal (5.96e-8 / 2) and flushes to 0; 1/3 keeps 11 significant bits.
        let x = vec1(&[65504.0, 65520.0, -1e6, 1e-8, 1.0 / 3.0], &d);
        let y = round(x, FloatDType::F16)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert_eq!(y[0], 65504.0);
        assert_eq!(y[1], f32::INFINITY);
        assert_eq!(y[2], f32::NEG_INFINITY);
        assert_eq!(y[3], 0.0);
        assert_eq!(y[4], 0.333_251_95);
        // bfloat16 keeps float32's range with 8 significant bits.
        let x = vec1(&[1e30, 1e-30, 1.0 / 3.0], &d);
        let y = round(x, FloatDType::BF16)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert!((y[0] / 1e30 - 1.0).abs() < 4e-3 && (y[1] / 1e-30 - 1.0).abs() < 4e-3);
        assert_eq!(y[2], 0.333_984_38);
    }

    #[test]
    fn gradients_through_a_rounded_tensor_are_rounded_too() {
        let d = Device::flex().autodiff();
        let w = vec1(&[1.0, 2.0], &d).require_grad();
        // d/dw sum(round(w) * c) = round(c) elementwise, where c's values are f16-subnormal
        // or beyond f16's range.
        let c = vec1(&[1e-8, 1e5], &d);
        let loss = (round(w.clone(), FloatDType::F16) * c).sum();
        let g = w.grad(&loss.backward()).unwrap();
        assert_eq!(
            g.into_data().try_to_vec::<f32>().unwrap(),
            vec![0.0, f32::INFINITY]
        );
    }
}
