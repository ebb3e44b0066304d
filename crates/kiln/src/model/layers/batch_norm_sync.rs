//! BatchNormalization over the global batch of a synchronized step: the statistics' sums
//! cross the replicas with [`crate::ops::cross_replica_sum`] (see [`crate::replica`] and
//! [`crate::distribute::sync_bn`]).

use burn::prelude::*;

/// Batch normalization of `x [batch, channels, ...]` with the global batch's statistics
/// (training mode): `y = (x - mean) / sqrt(variance + epsilon) * gamma + beta`, per channel.
/// Returns `y` and the (detached) batch mean and biased variance `[channels]` for the moving
/// averages.
///
/// The sums are taken of `x - shift` (`shift [channels]`, a constant every replica holds
/// alike: the layer's moving mean), which keeps `Σx²/n - mean²` from cancelling when the
/// mean is large against the spread (the shifted-data algorithm; TensorFlow's
/// `tf.nn.sufficient_statistics` has the same `shift` argument). The result does not depend
/// on the shift but through rounding.
pub fn batch_norm_sync<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    shift: Tensor<1>,
    epsilon: f64,
) -> (Tensor<D>, Tensor<1>, Tensor<1>) {
    let dims = x.dims();
    let (batch, channels) = (dims[0], dims[1]);
    let positions: usize = dims[2..].iter().product();
    let shift = shift.detach();
    let centered = x
        .reshape([batch, channels, positions])
        .sub(shift.clone().reshape([1, channels, 1]));
    let device = centered.device();
    let sum = centered.clone().sum_dim(2).sum_dim(0).reshape([channels]);
    let squares = centered
        .clone()
        .mul(centered.clone())
        .sum_dim(2)
        .sum_dim(0)
        .reshape([channels]);
    let count = Tensor::<1>::from_floats([(batch * positions) as f32], &device);
    let global = crate::ops::cross_replica_sum(Tensor::cat(vec![sum, squares, count], 0));
    let n = global
        .clone()
        .slice(2 * channels..2 * channels + 1)
        .detach();
    let offset = global.clone().slice(0..channels).div(n.clone());
    let mean_sq = global.slice(channels..2 * channels).div(n);
    let variance = mean_sq
        .sub(offset.clone().mul(offset.clone()))
        .clamp_min(0.0);
    let scale = gamma.div(variance.clone().add_scalar(epsilon).sqrt());
    let y = centered
        .sub(offset.clone().reshape([1, channels, 1]))
        .mul(scale.reshape([1, channels, 1]))
        .add(beta.reshape([1, channels, 1]));
    let mean = offset.add(shift).detach();
    (y.reshape(dims), mean, variance.detach())
}

#[cfg(test)]
#[path = "batch_norm_sync_tests.rs"]
mod tests;
