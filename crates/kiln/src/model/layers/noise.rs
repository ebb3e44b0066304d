//! Code the random regularization layers share (SpatialDropout1D/2D, GaussianNoise,
//! GaussianDropout; not layers): the draws, on the tensor's device and dtype from the
//! device's generator (seeded by the run's seed, per step, as Dropout's), and the layer methods
//! they have alike.

use burn::prelude::*;
use burn::tensor::Distribution;

use crate::model::act::Act;
use crate::model::layer::ForwardContext;

/// A tensor of `dims` drawn from `dist`, on `like`'s device and in its dtype.
fn draw<const D: usize>(like: &Tensor<D>, dims: [usize; D], dist: Distribution) -> Tensor<D> {
    Tensor::random(dims, dist, (&like.device(), like.dtype()))
}

/// `t` with whole channels (axis `channel`) zeroed, each with probability `rate` per example,
/// and the kept ones scaled by `1 / (1 - rate)`.
pub(super) fn drop_channels<const D: usize>(t: Tensor<D>, channel: usize, rate: f64) -> Tensor<D> {
    let keep = 1.0 - rate;
    let full = t.dims();
    let mut dims = [1; D];
    dims[0] = full[0];
    dims[channel] = full[channel];
    let mask = draw(&t, dims, Distribution::Bernoulli(keep));
    t * mask.mul_scalar(1.0 / keep)
}

/// `t` plus normal noise of `stddev`.
pub(super) fn add_normal<const D: usize>(t: Tensor<D>, stddev: f64) -> Tensor<D> {
    let noise = t.random_like(Distribution::Normal(0.0, stddev));
    t + noise
}

/// `t` times normal noise of mean 1 and `sqrt(rate / (1 - rate))` (the variance of dropout of
/// `rate`).
pub(super) fn multiply_normal<const D: usize>(t: Tensor<D>, rate: f64) -> Tensor<D> {
    let stddev = (rate / (1.0 - rate)).sqrt();
    let noise = t.random_like(Distribution::Normal(1.0, stddev));
    t * noise
}

/// `x` with whole channels dropped ([`drop_channels`]) while training: a sequence's last
/// axis, an image's channel axis (axis 1 as kiln lays images out).
pub(super) fn drop_channels_of(x: Act, rate: f64, ctx: ForwardContext) -> Act {
    if !ctx.training || rate == 0.0 {
        return x;
    }
    match x {
        Act::Seq(t) => Act::Seq(drop_channels(t, 2, rate)),
        Act::Image(t) => Act::Image(drop_channels(t, 1, rate)),
        Act::Flat(t) => Act::Flat(drop_channels(t, 1, rate)),
        Act::Volume(_) => crate::model::act::volume_refused("a spatial dropout"),
    }
}

/// The [`crate::model::layer::Layer`] methods the noise layers share: field `$rate` checked
/// by `$check` (a function of `super::pointwise`), nothing of the input kept for backward, the
/// identity in ONNX (an export is for inference, where the layers do nothing). With
/// `elementwise`, also the shape and a forward pass that maps the layer (its
/// [`crate::model::act::ElementWise`]) over the input while training; with `channels`, the
/// shape checked by `$shape` (`steps_features`, `image_shape`), the forward pass of
/// [`drop_channels_of`] and its mask as what is kept.
macro_rules! noise_layer {
    ($rate:ident, $check:ident) => {
        fn validate(&self) -> Result<(), String> {
            super::pointwise::$check(stringify!($rate), self.$rate)
        }
        fn saves_input(&self) -> bool {
            false
        }
        fn onnx(
            &self,
            _: &mut $crate::onnx::OnnxGraph,
            inputs: &[$crate::onnx::OnnxValue],
            _: &str,
        ) -> Result<String, String> {
            Ok(inputs[0].name.clone())
        }
    };
    (elementwise $rate:ident, $check:ident) => {
        noise_layer!($rate, $check);
        fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
            Ok(inputs[0].to_vec())
        }
        fn forward(&self, mut inputs: Vec<Act>, _: &Weights, ctx: ForwardContext) -> Act {
            let x = inputs.pop().expect("one input");
            match ctx.training && self.$rate > 0.0 {
                true => x.map(self.clone()),
                false => x,
            }
        }
    };
    (channels $shape:ident) => {
        noise_layer!(rate, unit_rate);
        fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
            super::$shape(inputs[0], <Self as LayerConfig>::CLASS_NAME)?;
            Ok(inputs[0].to_vec())
        }
        fn forward(&self, mut inputs: Vec<Act>, _: &Weights, ctx: ForwardContext) -> Act {
            let x = inputs.pop().expect("one input");
            super::noise::drop_channels_of(x, self.rate, ctx)
        }
        fn extra_kept(&self, inputs: &[&[usize]], _: &[usize]) -> f64 {
            // The mask: one value per channel.
            inputs[0].last().copied().unwrap_or(0) as f64
        }
    };
}
pub(super) use noise_layer;
