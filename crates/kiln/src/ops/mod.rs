//! kiln's fast CPU operations as Burn operations with autodiff (Burn's backend-extension API).
//!
//! [`conv2d`] and [`max_pool2d`] run kiln's kernels ([`crate::kernels`]) on the flex CPU backend
//! with float32 tensors, and Burn's own operations everywhere else (GPU backends, other dtypes),
//! so a model gives the same results on every device. Gradients are registered by hand: the
//! extension's backward for `Autodiff<B>` calls the kernels' backward passes.

mod backward;
mod flex;
#[cfg(test)]
mod tests;

use burn::backend::{Backend, backend_extension, tensor::FloatTensor};
use burn::prelude::*;
use burn::tensor::ops::{ConvOptions, MaxPoolOptions};

use crate::kernels::{Conv2dGeometry, PoolGeometry};

/// Geometry of a convolution as plain numbers (extension arguments must be plain data):
/// `[n, c, h, w, o, kh, kw, sh, sw, pad_top, pad_bottom, pad_left, pad_right, epilogue]`, where
/// `epilogue` is [`Epilogue::code`].
pub type ConvArgs = [usize; 14];

/// Geometry of a pooling: `[planes, h, w, kh, kw, sh, sw, pad_top, pad_bottom, pad_left,
/// pad_right]`.
pub type PoolArgs = [usize; 11];

/// Sizes of a dense layer as plain numbers: `[n, in_features, units, epilogue]`, where
/// `epilogue` is [`Epilogue::code`].
pub type DenseArgs = [usize; 4];

/// Sizes of an LSTM layer: `[batch, steps, units]`.
pub type LstmArgs = [usize; 3];

/// Sizes of an attention: `[batch, query_steps, value_steps, heads, key_dim, value_dim,
/// mask_rows]` ([`crate::kernels::attention::AttentionDims`]).
pub type AttentionArgs = [usize; 7];

/// The hyperparameters of one Adam/AdamW update as plain numbers:
/// `[learning_rate, beta_1, beta_2, epsilon, weight_decay, step]`.
pub type AdamArgs = [f64; 6];

pub use crate::kernels::Epilogue;

/// The tensor side of [`Epilogue`] (what [`conv2d`] and [`dense`] do after the bias). With
/// rounding, the backward pass first rounds the output gradient the same way, as the gradient
/// of a cast to the 16-bit type does. Fusing the rounding spares a pass (and, when the output
/// is kept for the ReLU's gradient, a copy) over the layer's output.
impl Epilogue {
    /// A ReLU when `relu`, then rounding to `dtype` when it is float16 or bfloat16.
    pub fn new(relu: bool, dtype: Option<burn::tensor::FloatDType>) -> Epilogue {
        use burn::tensor::FloatDType;
        let round = match dtype {
            Some(FloatDType::BF16) => Some(true),
            Some(FloatDType::F16) => Some(false),
            _ => None,
        };
        Epilogue { relu, round }
    }

    /// The 16-bit dtype of [`Epilogue::round`].
    fn round_dtype(self) -> Option<burn::tensor::FloatDType> {
        use burn::tensor::FloatDType;
        self.round.map(|bf| {
            if bf {
                FloatDType::BF16
            } else {
                FloatDType::F16
            }
        })
    }

    /// `y` after this epilogue with Burn's operations (the path off the fast one).
    pub fn apply<const D: usize>(self, y: Tensor<D>) -> Tensor<D> {
        let y = if self.relu {
            burn::tensor::activation::relu(y)
        } else {
            y
        };
        match self.round_dtype() {
            Some(dt) => round_half(y, dt),
            None => y,
        }
    }
}

/// The operations kiln implements itself.
#[backend_extension(Flex, Autodiff)]
pub trait KilnOps: Backend {
    /// Convolution `y [n, o, oh, ow]` of `x [n, c, h, w]` with `w [o, c, kh, kw]` plus `b [o]`,
    /// then the [`Epilogue`] `args[13]`.
    fn kiln_conv2d(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        args: ConvArgs,
    ) -> FloatTensor<Self>;

    /// `(dx, dw, db)` of [`KilnOps::kiln_conv2d`] for the output gradient `dy`; `dx` is an empty
    /// tensor unless `need_dx`. `y` is the forward output (read only when a ReLU was fused).
    fn kiln_conv2d_backward(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        y: FloatTensor<Self>,
        args: ConvArgs,
        need_dx: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// Dense layer `y [n, u] = x [n, i] · w [i, u] + b [u]`, then the [`Epilogue`] `args[3]`.
    fn kiln_dense(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        args: DenseArgs,
    ) -> FloatTensor<Self>;

    /// `(dx, dw, db)` of [`KilnOps::kiln_dense`] for the output gradient `dy`; `dx` is an empty
    /// tensor unless `need_dx`. `y` is the forward output (read only when a ReLU was fused).
    fn kiln_dense_backward(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        y: FloatTensor<Self>,
        args: DenseArgs,
        need_dx: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// One Adam/AdamW update of a parameter `w` with moments `m`, `v` and gradient `g` (all the
    /// same shape): returns the new `(w, m, v)`, reusing the inputs' memory when it is not shared
    /// ([`crate::kernels::adam`]).
    fn kiln_adam(
        w: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        g: FloatTensor<Self>,
        args: AdamArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// A whole LSTM layer over `dims = [b, t, u]` ([`crate::kernels::lstm`]): the outputs
    /// `hs [b, t, u]` of every step from `proj [b, t, 4u]` (`x·kernel + bias`), the recurrent
    /// kernel `rk [u, 4u]` and the initial state `h0`, `c0 [b, u]`, and the cells the backward
    /// pass reads (`[b, t, 5u]`, not differentiable).
    fn kiln_lstm(
        proj: FloatTensor<Self>,
        rk: FloatTensor<Self>,
        h0: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        dims: LstmArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// `(dproj, drk, dh0, dc0)` of [`KilnOps::kiln_lstm`] for the output gradient `dhs`.
    fn kiln_lstm_backward(
        dhs: FloatTensor<Self>,
        rk: FloatTensor<Self>,
        h0: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        hs: FloatTensor<Self>,
        cells: FloatTensor<Self>,
        dims: LstmArgs,
    ) -> (
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
    );

    /// Multi-head scaled dot-product attention ([`crate::kernels::attention`]) of `q [n, sq,
    /// heads·kd]`, `k [n, sv, heads·kd]` and `v [n, sv, heads·vd]` with the mask `[n,
    /// mask_rows, sv]` (read only when `mask_rows > 0`): returns the context `[n, sq,
    /// heads·vd]` (differentiable in `q`, `k`, `v`) and the attention weights `[n, heads, sq,
    /// sv]` (not differentiable).
    fn kiln_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        args: AttentionArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// `(dq, dk, dv)` of [`KilnOps::kiln_attention`] for the context's gradient `dctx`, given
    /// the weights it returned.
    fn kiln_attention_backward(
        dctx: FloatTensor<Self>,
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        weights: FloatTensor<Self>,
        args: AttentionArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// Batch normalization with the batch's statistics ([`crate::kernels::batch_norm`]) of `x`
    /// (`dims = [n, c, s]`: examples, channels, values per channel): returns the output
    /// (differentiable in `x`, `gamma`, `beta`) and the batch's mean and biased variance `[c]`
    /// (not differentiable).
    fn kiln_batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        dims: [usize; 3],
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// `(dx, dgamma, dbeta)` of [`KilnOps::kiln_batch_norm_train`] for the output gradient
    /// `dy`, given the statistics it returned.
    fn kiln_batch_norm_train_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        variance: FloatTensor<Self>,
        dims: [usize; 3],
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// Layer normalization of `x` over its last axis of `features` values
    /// ([`crate::kernels::layer_norm`]): returns the output (differentiable in `x`, `gamma`,
    /// `beta`) and each row's mean and `1 / sqrt(variance + epsilon)` (not differentiable).
    fn kiln_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        features: usize,
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// `(dx, dgamma, dbeta)` of [`KilnOps::kiln_layer_norm`] for the output gradient `dy`,
    /// given the row statistics it returned.
    fn kiln_layer_norm_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        inv_std: FloatTensor<Self>,
        features: usize,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// Max pooling of `x [n, c, h, w]`.
    fn kiln_max_pool2d(x: FloatTensor<Self>, args: PoolArgs) -> FloatTensor<Self>;

    /// Gradient of [`KilnOps::kiln_max_pool2d`] for the output gradient `dy`.
    fn kiln_max_pool2d_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        args: PoolArgs,
    ) -> FloatTensor<Self>;

    /// `x` rounded to bfloat16 (`bfloat16`) or float16 values, kept float32
    /// ([`crate::kernels::round`]); its gradient is the output gradient rounded the same way.
    fn kiln_round_half(x: FloatTensor<Self>, bfloat16: bool) -> FloatTensor<Self>;

    /// `x` summed element-wise over the replicas of the current `sync_batch_norm` group
    /// ([`crate::replica`]); `adjoint` for the backward pass.
    fn kiln_cross_replica_sum(x: FloatTensor<Self>, adjoint: bool) -> FloatTensor<Self>;
}

/// The plain-number form of a convolution's geometry, with or without a fused ReLU.
pub fn conv_args(g: &Conv2dGeometry, epilogue: Epilogue) -> ConvArgs {
    let [(pt, pb), (pl, pr)] = g.padding;
    [
        g.batch,
        g.in_channels,
        g.height,
        g.width,
        g.out_channels,
        g.kernel[0],
        g.kernel[1],
        g.stride[0],
        g.stride[1],
        pt,
        pb,
        pl,
        pr,
        epilogue.code(),
    ]
}

/// The [`Epilogue`] of convolution `args`.
pub fn conv_epilogue(args: &ConvArgs) -> Epilogue {
    Epilogue::from_code(args[13])
}

/// The geometry back from [`conv_args`].
pub fn conv_geometry(a: &ConvArgs) -> Conv2dGeometry {
    Conv2dGeometry {
        batch: a[0],
        in_channels: a[1],
        height: a[2],
        width: a[3],
        out_channels: a[4],
        kernel: [a[5], a[6]],
        stride: [a[7], a[8]],
        padding: [(a[9], a[10]), (a[11], a[12])],
    }
}

/// The geometry back from a [`PoolArgs`].
pub fn pool_geometry(a: &PoolArgs) -> PoolGeometry {
    PoolGeometry {
        planes: a[0],
        height: a[1],
        width: a[2],
        kernel: [a[3], a[4]],
        stride: [a[5], a[6]],
        padding: [(a[7], a[8]), (a[9], a[10])],
    }
}

/// True when kiln's kernels serve tensors on `device` with float32 values: the flex CPU backend.
pub fn fast_path(device: &Device, dtype: burn::tensor::DType) -> bool {
    dtype == burn::tensor::DType::F32 && device.clone().inner() == Device::flex()
}

/// `x` rounded to the values of `dtype` (float16 or bfloat16), in `x`'s own dtype: a cast there
/// and back, as one pass of [`crate::kernels::round`] on the fast path (flex, float32), Burn's
/// casts elsewhere. Differentiable: the gradient is rounded the same way, as Burn's casts do.
pub fn round_half<const D: usize>(x: Tensor<D>, dtype: burn::tensor::FloatDType) -> Tensor<D> {
    use burn::tensor::FloatDType;
    let own = FloatDType::from(x.dtype());
    if own == dtype {
        return x;
    }
    let bfloat16 = match dtype {
        FloatDType::BF16 => true,
        FloatDType::F16 => false,
        _ => return x.cast(dtype).cast(own),
    };
    if !fast_path(&x.device(), x.dtype()) {
        return x.cast(dtype).cast(own);
    }
    Tensor::from_dispatch(burn::backend::Dispatch::kiln_round_half(
        x.into_dispatch(),
        bfloat16,
    ))
}

/// `x [n]` summed element-wise over the replicas of the `sync_batch_norm` group current on
/// this thread (see [`crate::replica`]), and unchanged without one. Differentiable:
/// the gradient is summed over the replicas the same way (a sum is its own adjoint). Runs on
/// the host: a tensor on another device goes through the CPU (the values are a few per
/// channel).
pub fn cross_replica_sum(x: Tensor<1>) -> Tensor<1> {
    let device = x.device();
    let on_host = device.clone().inner() == Device::flex();
    let x = if on_host {
        x
    } else if device.clone().inner() == device {
        x.to_device(&Device::flex())
    } else {
        // Keep the autodiff graph: the host device with autodiff.
        x.to_device(&Device::flex().autodiff())
    };
    let x = if x.dtype() == burn::tensor::DType::F32 {
        x
    } else {
        x.cast(burn::tensor::FloatDType::F32)
    };
    let y = Tensor::from_dispatch(burn::backend::Dispatch::kiln_cross_replica_sum(
        x.into_dispatch(),
        false,
    ));
    if on_host { y } else { y.to_device(&device) }
}

/// 2-D convolution with explicit `(begin, end)` padding per spatial axis, as
/// [`burn::tensor::module::conv2d`] (stride, no dilation, one group), followed by the
/// `epilogue` (fused into the kernel on the fast path: one pass over the output instead of
/// three).
///
/// # Shapes
/// - `x`: `[batch, channels_in, height, width]`
/// - `weight`: `[channels_out, channels_in, kernel_h, kernel_w]`
/// - `bias`: `[channels_out]`
/// - output: `[batch, channels_out, out_h, out_w]`
pub fn conv2d(
    x: Tensor<4>,
    weight: Tensor<4>,
    bias: Option<Tensor<1>>,
    stride: [usize; 2],
    padding: [(usize, usize); 2],
    epilogue: Epilogue,
) -> Tensor<4> {
    if !fast_path(&x.device(), x.dtype()) {
        let options = ConvOptions::new_with_padding(stride, padding, [1, 1], 1);
        return epilogue.apply(burn::tensor::module::conv2d(x, weight, bias, options));
    }
    let [n, c, h, w] = x.dims();
    let [o, _, kh, kw] = weight.dims();
    let g = Conv2dGeometry {
        batch: n,
        in_channels: c,
        height: h,
        width: w,
        out_channels: o,
        kernel: [kh, kw],
        stride,
        padding,
    };
    let bias = bias.unwrap_or_else(|| Tensor::zeros([o], &weight.device()));
    Tensor::from_dispatch(burn::backend::Dispatch::kiln_conv2d(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        conv_args(&g, epilogue),
    ))
}

/// Dense layer `x · weight + bias` (Keras' `Dense`), followed by the `epilogue` (fused on the
/// fast path).
///
/// # Shapes
/// - `x`: `[batch, in_features]`
/// - `weight`: `[in_features, units]` (Keras' layout)
/// - `bias`: `[units]`
/// - output: `[batch, units]`
pub fn dense(
    x: Tensor<2>,
    weight: Tensor<2>,
    bias: Option<Tensor<1>>,
    epilogue: Epilogue,
) -> Tensor<2> {
    if !fast_path(&x.device(), x.dtype()) {
        let y = x.matmul(weight);
        let y = match bias {
            Some(b) => y + b.unsqueeze::<2>(),
            None => y,
        };
        return epilogue.apply(y);
    }
    let [n, i] = x.dims();
    let [_, u] = weight.dims();
    let bias = bias.unwrap_or_else(|| Tensor::zeros([u], &weight.device()));
    Tensor::from_dispatch(burn::backend::Dispatch::kiln_dense(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        [n, i, u, epilogue.code()],
    ))
}

/// Keras' LSTM cell (`sigmoid` gates, `tanh` activation) over every step at once, on the fast
/// path only ([`fast_path`]; the caller runs the step-by-step loop elsewhere): returns every
/// step's output `h`. Differentiable in all four inputs.
///
/// # Shapes
/// - `proj`: `[batch, steps, 4·units]`, `x·kernel + bias` for every step (gates `i, f, c, o`)
/// - `recurrent_kernel`: `[units, 4·units]`
/// - `h0`, `c0`: `[batch, units]`
/// - output: `[batch, steps, units]`
pub fn lstm(
    proj: Tensor<3>,
    recurrent_kernel: Tensor<2>,
    h0: Tensor<2>,
    c0: Tensor<2>,
) -> Tensor<3> {
    let [b, t, _] = proj.dims();
    let [u, _] = recurrent_kernel.dims();
    let (hs, _cells) = burn::backend::Dispatch::kiln_lstm(
        proj.into_dispatch(),
        recurrent_kernel.into_dispatch(),
        h0.into_dispatch(),
        c0.into_dispatch(),
        [b, t, u],
    );
    Tensor::from_dispatch(hs)
}

/// Multi-head scaled dot-product attention, `softmax(Q Kᵀ / sqrt(key_dim)) V` per head with
/// Keras' attention mask (masked scores get no weight; a query that may attend to nothing gets
/// zeros): kiln's kernel on the fast path ([`fast_path`]), [`attention_weights`] then
/// [`attention_context`] (Burn's operations) elsewhere. Differentiable in `q`, `k` and `v`.
///
/// # Shapes
/// - `q`: `[batch, query_steps, heads·key_dim]`, the projected queries, heads side by side
/// - `k`: `[batch, value_steps, heads·key_dim]`
/// - `v`: `[batch, value_steps, heads·value_dim]`
/// - `mask`: `[batch or 1, query_steps or 1, value_steps or 1]`, 1 where a query may attend
/// - output: `[batch, query_steps, heads·value_dim]`
pub fn attention(
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    heads: usize,
    mask: Option<Tensor<3>>,
) -> Tensor<3> {
    if !fast_path(&q.device(), q.dtype()) {
        return attention_context(attention_weights(q, k, heads, mask), v);
    }
    let [n, sq, qf] = q.dims();
    let [_, sv, vf] = v.dims();
    // A mask broadcast over the batch (causal) or the value steps (a query mask alone) is
    // spelled out.
    let mask = mask.map(|m| {
        let rows = m.dims()[1];
        m.expand([n, rows, sv])
    });
    let dims = crate::kernels::attention::AttentionDims {
        batch: n,
        query_steps: sq,
        value_steps: sv,
        heads,
        key_dim: qf / heads,
        value_dim: vf / heads,
        mask_rows: mask.as_ref().map_or(0, |m| m.dims()[1]),
    };
    // Without a mask the kernel reads none: any tensor stands in.
    let mask = mask.unwrap_or_else(|| q.clone().detach());
    let (context, _weights) = burn::backend::Dispatch::kiln_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        mask.into_dispatch(),
        dims.to_array(),
    );
    Tensor::from_dispatch(context)
}

/// The attention weights `softmax(Q Kᵀ / sqrt(key_dim))` per head, `[batch, heads,
/// query_steps, value_steps]`, with Keras' masked softmax (masked scores become -1e9 and masked
/// weights 0, so a query that may attend to nothing gets zeros, not a uniform average), as
/// Burn's operations. Shapes of `q`, `k` and `mask` as for [`attention`].
pub fn attention_weights(
    q: Tensor<3>,
    k: Tensor<3>,
    heads: usize,
    mask: Option<Tensor<3>>,
) -> Tensor<4> {
    let [n, sq, qf] = q.dims();
    let sv = k.dims()[1];
    let kd = qf / heads;
    let q = q.reshape([n, sq, heads, kd]).swap_dims(1, 2) * (1.0 / (kd as f64).sqrt());
    let k = k.reshape([n, sv, heads, kd]).swap_dims(1, 2);
    let scores = q.matmul(k.swap_dims(2, 3));
    match mask {
        Some(m) => {
            let m = m.unsqueeze_dim::<4>(1); // [n, 1, sq | 1, sv]
            let masked = scores * m.clone() + (m.clone() - 1.0) * 1e9;
            burn::tensor::activation::softmax(masked, 3) * m
        }
        None => burn::tensor::activation::softmax(scores, 3),
    }
}

/// The weighted sum of the values per head with `weights [batch, heads, query_steps,
/// value_steps]`, heads joined again: `[batch, query_steps, heads·value_dim]` for `v [batch,
/// value_steps, heads·value_dim]`, as Burn's operations.
pub fn attention_context(weights: Tensor<4>, v: Tensor<3>) -> Tensor<3> {
    let [n, heads, sq, _] = weights.dims();
    let [_, sv, vf] = v.dims();
    let v = v.reshape([n, sv, heads, vf / heads]).swap_dims(1, 2);
    weights.matmul(v).swap_dims(1, 2).reshape([n, sq, vf])
}

/// Batch normalization of `x` over axis 1 with the batch's statistics, as
/// [`burn::tensor::module::batch_norm_train`]: returns the output and the batch's mean and
/// biased variance (`[channels]`, detached). kiln's kernel on the fast path ([`fast_path`]),
/// Burn's operation elsewhere.
///
/// # Shapes
/// - `x`: `[batch, channels, ...]`
/// - `gamma`, `beta`: `[channels]`
pub fn batch_norm_train<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    epsilon: f64,
) -> (Tensor<D>, Tensor<1>, Tensor<1>) {
    if !fast_path(&x.device(), x.dtype()) {
        let out = burn::tensor::module::batch_norm_train(x, gamma, beta, epsilon);
        return (out.output, out.mean, out.variance);
    }
    let shape = x.dims();
    let dims = [shape[0], shape[1], shape[2..].iter().product()];
    let (y, mean, variance) = burn::backend::Dispatch::kiln_batch_norm_train(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        dims,
        epsilon,
    );
    (
        Tensor::from_dispatch(y),
        Tensor::from_dispatch(mean),
        Tensor::from_dispatch(variance),
    )
}

/// Layer normalization of `x` over its last axis, `gamma · (x − mean) / sqrt(variance +
/// epsilon) + beta` per row (biased variance), as [`burn::tensor::module::layer_norm`]: kiln's
/// kernel on the fast path ([`fast_path`]), Burn's operation elsewhere.
///
/// # Shapes
/// - `x`: `[..., features]`
/// - `gamma`, `beta`: `[features]`
/// - output: `x`'s shape
pub fn layer_norm<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    epsilon: f64,
) -> Tensor<D> {
    let features = x.dims()[D - 1];
    if !fast_path(&x.device(), x.dtype()) || x.shape().num_elements() == 0 || features == 0 {
        return burn::tensor::module::layer_norm(x, gamma, Some(beta), epsilon);
    }
    let (y, _mean, _inv_std) = burn::backend::Dispatch::kiln_layer_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        features,
        epsilon,
    );
    Tensor::from_dispatch(y)
}

/// 2-D max pooling with explicit `(begin, end)` padding per spatial axis (padding never wins),
/// as [`burn::tensor::module::max_pool2d`].
///
/// # Shapes
/// - `x`: `[batch, channels, height, width]`
/// - output: `[batch, channels, out_h, out_w]`
pub fn max_pool2d(
    x: Tensor<4>,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [(usize, usize); 2],
) -> Tensor<4> {
    if !fast_path(&x.device(), x.dtype()) {
        let options = MaxPoolOptions::new(kernel)
            .with_stride(stride)
            .with_padding_pairs(padding);
        return burn::tensor::module::max_pool2d(x, options);
    }
    let [n, c, h, w] = x.dims();
    let args = [
        n * c,
        h,
        w,
        kernel[0],
        kernel[1],
        stride[0],
        stride[1],
        padding[0].0,
        padding[0].1,
        padding[1].0,
        padding[1].1,
    ];
    Tensor::from_dispatch(burn::backend::Dispatch::kiln_max_pool2d(
        x.into_dispatch(),
        args,
    ))
}
