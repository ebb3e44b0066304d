//! [`KilnOps`] on Burn's flex CPU backend: the kernels on the tensors' host buffers.

use burn::backend::Flex;
use burn::backend::tensor::FloatTensor;
use burn::tensor::TensorData;
use burn_flex::FlexTensor;

use super::{
    AdamArgs, AttentionArgs, ConvArgs, DenseArgs, Epilogue, KilnOps, LstmArgs, PoolArgs,
    conv_epilogue, conv_geometry, pool_geometry,
};
use crate::kernels::adam::{self, AdamStep};
use crate::kernels::attention::{self, AttentionDims};
use crate::kernels::{batch_norm, conv2d, dense, layer_norm, lstm, pool};

/// The tensor's values as a contiguous `f32` slice (copying only when it is a strided view).
fn values(t: &FlexTensor) -> std::borrow::Cow<'_, [f32]> {
    match t.as_slice::<f32>() {
        Some(s) if t.is_contiguous() => std::borrow::Cow::Borrowed(s),
        _ => std::borrow::Cow::Owned(
            t.to_contiguous()
                .as_slice::<f32>()
                .expect("f32 tensor")
                .to_vec(),
        ),
    }
}

/// The tensor itself when its values are one contiguous run from the start of its storage (so
/// that `storage_mut` is exactly its values), else a contiguous copy.
fn dense(t: FlexTensor) -> FlexTensor {
    let n: usize = t.layout().shape().iter().product();
    let whole = t.is_contiguous() && t.storage::<f32>().len() == n && t.as_slice::<f32>().is_some();
    if whole { t } else { t.to_contiguous() }
}

fn tensor(values: Vec<f32>, shape: &[usize]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape.to_vec()))
}

impl KilnOps for Flex {
    fn kiln_conv2d(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        args: ConvArgs,
    ) -> FloatTensor<Self> {
        let g = conv_geometry(&args);
        let epilogue = conv_epilogue(&args);
        let y = conv2d::forward(&values(&x), &values(&w), Some(&values(&b)), &g, epilogue);
        let [oh, ow] = g.out_hw();
        tensor(y, &[g.batch, g.out_channels, oh, ow])
    }

    fn kiln_conv2d_backward(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        y: FloatTensor<Self>,
        args: ConvArgs,
        need_dx: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let g = conv_geometry(&args);
        let y = conv_epilogue(&args).relu.then(|| values(&y));
        let (dx, dw, db) = conv2d::backward(
            &values(&x),
            &values(&w),
            &values(&dy),
            y.as_deref(),
            &g,
            need_dx,
        );
        let dx = match dx {
            Some(dx) => tensor(dx, &[g.batch, g.in_channels, g.height, g.width]),
            None => tensor(Vec::new(), &[0]),
        };
        (
            dx,
            tensor(
                dw,
                &[g.out_channels, g.in_channels, g.kernel[0], g.kernel[1]],
            ),
            tensor(db, &[g.out_channels]),
        )
    }

    fn kiln_dense(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        args: DenseArgs,
    ) -> FloatTensor<Self> {
        let [n, i, u, code] = args;
        let y = dense::forward(
            &values(&x),
            &values(&w),
            Some(&values(&b)),
            [n, i, u],
            Epilogue::from_code(code),
        );
        tensor(y, &[n, u])
    }

    fn kiln_dense_backward(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        y: FloatTensor<Self>,
        args: DenseArgs,
        need_dx: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let [n, i, u, code] = args;
        let y = Epilogue::from_code(code).relu.then(|| values(&y));
        let (dx, dw, db) = dense::backward(
            &values(&x),
            &values(&w),
            &values(&dy),
            y.as_deref(),
            [n, i, u],
            need_dx,
        );
        let dx = match dx {
            Some(dx) => tensor(dx, &[n, i]),
            None => tensor(Vec::new(), &[0]),
        };
        (dx, tensor(dw, &[i, u]), tensor(db, &[u]))
    }

    fn kiln_adam(
        w: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        g: FloatTensor<Self>,
        args: AdamArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let [learning_rate, beta_1, beta_2, epsilon, weight_decay, step] = args;
        let step = AdamStep {
            learning_rate,
            beta_1,
            beta_2,
            epsilon,
            weight_decay,
            step: step as u64,
        };
        // In place when nothing else holds the buffers (the usual case: the optimizer owns the
        // moments, and the parameter was moved into it); copy-on-write otherwise.
        let (mut w, mut m, mut v) = (dense(w), dense(m), dense(v));
        adam::update(
            w.storage_mut::<f32>(),
            m.storage_mut::<f32>(),
            v.storage_mut::<f32>(),
            &values(&g),
            &step,
        );
        (w, m, v)
    }

    fn kiln_lstm(
        proj: FloatTensor<Self>,
        rk: FloatTensor<Self>,
        h0: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        dims: LstmArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let [b, t, u] = dims;
        let saved = lstm::forward(
            &values(&proj),
            &values(&rk),
            &values(&h0),
            &values(&c0),
            dims,
        );
        (
            tensor(saved.hs, &[b, t, u]),
            tensor(saved.cells, &[b, t, 5 * u]),
        )
    }

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
    ) {
        let [b, t, u] = dims;
        let g = lstm::backward(
            &values(&dhs),
            &values(&rk),
            (&values(&h0), &values(&c0)),
            (&values(&hs), &values(&cells)),
            dims,
        );
        (
            tensor(g.dproj, &[b, t, 4 * u]),
            tensor(g.drk, &[u, 4 * u]),
            tensor(g.dh0, &[b, u]),
            tensor(g.dc0, &[b, u]),
        )
    }

    fn kiln_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        args: AttentionArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let d = AttentionDims::from_array(args);
        let mask = match d.mask_rows {
            0 => std::borrow::Cow::Borrowed(&[][..]),
            _ => values(&mask),
        };
        let s = attention::forward(&values(&q), &values(&k), &values(&v), &mask, d);
        let (n, sq, sv, h) = (d.batch, d.query_steps, d.value_steps, d.heads);
        (
            tensor(s.context, &[n, sq, h * d.value_dim]),
            tensor(s.weights, &[n, h, sq, sv]),
        )
    }

    fn kiln_attention_backward(
        dctx: FloatTensor<Self>,
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        weights: FloatTensor<Self>,
        args: AttentionArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let d = AttentionDims::from_array(args);
        let g = attention::backward(
            &values(&dctx),
            (&values(&q), &values(&k), &values(&v)),
            &values(&weights),
            d,
        );
        let (n, sq, sv, h) = (d.batch, d.query_steps, d.value_steps, d.heads);
        (
            tensor(g.dq, &[n, sq, h * d.key_dim]),
            tensor(g.dk, &[n, sv, h * d.key_dim]),
            tensor(g.dv, &[n, sv, h * d.value_dim]),
        )
    }

    fn kiln_batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        dims: [usize; 3],
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let shape = x.layout().shape().to_vec();
        let (y, stats) =
            batch_norm::forward(&values(&x), &values(&gamma), &values(&beta), epsilon, dims);
        (
            tensor(y, &shape),
            tensor(stats.mean, &[dims[1]]),
            tensor(stats.variance, &[dims[1]]),
        )
    }

    fn kiln_batch_norm_train_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        variance: FloatTensor<Self>,
        dims: [usize; 3],
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let shape = x.layout().shape().to_vec();
        let stats = batch_norm::Stats {
            mean: values(&mean).into_owned(),
            variance: values(&variance).into_owned(),
        };
        let (dx, dg, db) = batch_norm::backward(
            &values(&x),
            &values(&dy),
            &values(&gamma),
            &stats,
            epsilon,
            dims,
        );
        let c = [dims[1]];
        (tensor(dx, &shape), tensor(dg, &c), tensor(db, &c))
    }

    fn kiln_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        features: usize,
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let shape = x.layout().shape().to_vec();
        let s = layer_norm::forward(
            &values(&x),
            &values(&gamma),
            &values(&beta),
            features,
            epsilon,
        );
        let rows = [s.mean.len()];
        (
            tensor(s.y, &shape),
            tensor(s.mean, &rows),
            tensor(s.inv_std, &rows),
        )
    }

    fn kiln_layer_norm_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        inv_std: FloatTensor<Self>,
        features: usize,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let shape = x.layout().shape().to_vec();
        let g = layer_norm::backward(
            &values(&x),
            &values(&dy),
            &values(&gamma),
            (&values(&mean), &values(&inv_std)),
            features,
        );
        let f = [features];
        (
            tensor(g.dx, &shape),
            tensor(g.dgamma, &f),
            tensor(g.dbeta, &f),
        )
    }

    fn kiln_max_pool2d(x: FloatTensor<Self>, args: PoolArgs) -> FloatTensor<Self> {
        let g = pool_geometry(&args);
        let shape = x.layout().shape().to_vec();
        let y = pool::max_forward(&values(&x), &g);
        let [oh, ow] = g.out_hw();
        tensor(y, &[shape[0], shape[1], oh, ow])
    }

    fn kiln_max_pool2d_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        args: PoolArgs,
    ) -> FloatTensor<Self> {
        let g = pool_geometry(&args);
        let shape = x.layout().shape().to_vec();
        tensor(pool::max_backward(&values(&x), &values(&dy), &g), &shape)
    }

    fn kiln_round_half(x: FloatTensor<Self>, bfloat16: bool) -> FloatTensor<Self> {
        // In place when no one else holds the values: no fresh buffer for the largest
        // activations. Otherwise one pass from the shared values into a new buffer.
        let mut x = dense(x);
        if x.is_unique() {
            crate::kernels::round::round_half(x.storage_mut::<f32>(), bfloat16);
            return x;
        }
        let shape = x.layout().shape().to_vec();
        tensor(
            crate::kernels::round::rounded_half(&values(&x), bfloat16),
            &shape,
        )
    }

    fn kiln_cross_replica_sum(x: FloatTensor<Self>, adjoint: bool) -> FloatTensor<Self> {
        let shape = x.layout().shape().to_vec();
        let mut v = values(&x).into_owned();
        crate::replica::sum_across_replicas(&mut v, adjoint);
        tensor(v, &shape)
    }
}
