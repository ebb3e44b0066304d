//! [`KilnOps`] on `Autodiff<B>`: the forward on the inner backend, and a hand-written backward
//! that calls the inner backend's gradient kernels.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::tensor::FloatTensor;

use super::{
    AdamArgs, AttentionArgs, ConvArgs, DenseArgs, Epilogue, KilnOps, LstmArgs, PoolArgs,
    conv_epilogue,
};

/// The layers whose backward pass [`AffineBackward`] computes: `y = act(x ⊛ w + b)`.
#[derive(Debug, Clone, Copy)]
enum Affine {
    Conv(ConvArgs),
    Dense(DenseArgs),
}

impl Affine {
    fn epilogue(self) -> Epilogue {
        match self {
            Affine::Conv(a) => conv_epilogue(&a),
            Affine::Dense(a) => Epilogue::from_code(a[3]),
        }
    }
}

#[derive(Debug)]
struct AffineBackward;

impl<B: KilnOps> Backward<B, 3> for AffineBackward {
    /// The input, the kernel, the output when a ReLU was fused, and the layer.
    type State = (
        FloatTensor<B>,
        FloatTensor<B>,
        Option<FloatTensor<B>>,
        Affine,
    );

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_w, node_b] = ops.parents;
        let dy = grads.consume::<B>(&ops.node);
        let (x, w, y, layer) = ops.state;
        // The gradient of the fused rounding (a cast's gradient): the output gradient rounded.
        let dy = match layer.epilogue().round {
            Some(bfloat16) => B::kiln_round_half(dy, bfloat16),
            None => dy,
        };
        // Without a fused ReLU the kernels do not read `y`: any tensor will do.
        let y = y.unwrap_or_else(|| dy.clone());
        let need_dx = node_x.is_some();
        let (dx, dw, db) = match layer {
            Affine::Conv(args) => B::kiln_conv2d_backward(x, w, dy, y, args, need_dx),
            Affine::Dense(args) => B::kiln_dense_backward(x, w, dy, y, args, need_dx),
        };
        if let Some(node) = node_x {
            grads.register::<B>(node.id, dx);
        }
        if let Some(node) = node_w {
            grads.register::<B>(node.id, dw);
        }
        if let Some(node) = node_b {
            grads.register::<B>(node.id, db);
        }
    }
}

/// Runs an affine layer's forward on the inner backend, recording [`AffineBackward`] when any
/// input is tracked.
fn affine_forward<B: KilnOps, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    w: FloatTensor<Autodiff<B, C>>,
    b: FloatTensor<Autodiff<B, C>>,
    layer: Affine,
) -> FloatTensor<Autodiff<B, C>> {
    // Node guards are taken before the primitives are consumed.
    let nodes = [x.node(), w.node(), b.node()];
    let (x, w, b) = (x.into_primitive(), w.into_primitive(), b.into_primitive());
    let run = |x, w, b| match layer {
        Affine::Conv(args) => B::kiln_conv2d(x, w, b, args),
        Affine::Dense(args) => B::kiln_dense(x, w, b, args),
    };
    match AffineBackward
        .prepare::<C>(nodes)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let (x_kept, w_kept) = (x.clone(), w.clone());
            let y = run(x, w, b);
            let y_kept = layer.epilogue().relu.then(|| y.clone());
            prep.finish((x_kept, w_kept, y_kept, layer), y)
        }
        OpsKind::UnTracked(prep) => prep.finish(run(x, w, b)),
    }
}

/// Three tensors of one backend: a kernel's `(dx, dw, db)` or `(w, m, v)`.
type Three<B> = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>);

/// A gradient kernel's outputs as untracked autodiff tensors (first-order autodiff, as Burn).
fn untracked3<B: KilnOps, C: CheckpointStrategy>((a, b, c): Three<B>) -> Three<Autodiff<B, C>> {
    (
        FloatTensor::<Autodiff<B, C>>::new(a),
        FloatTensor::<Autodiff<B, C>>::new(b),
        FloatTensor::<Autodiff<B, C>>::new(c),
    )
}

#[derive(Debug)]
struct LstmBackward;

impl<B: KilnOps> Backward<B, 4> for LstmBackward {
    /// The recurrent kernel, the initial state, the outputs, the saved cells and the sizes.
    type State = (
        [FloatTensor<B>; 3],
        FloatTensor<B>,
        FloatTensor<B>,
        LstmArgs,
    );

    fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dhs = grads.consume::<B>(&ops.node);
        let ([rk, h0, c0], hs, cells, dims) = ops.state;
        let (dproj, drk, dh0, dc0) = B::kiln_lstm_backward(dhs, rk, h0, c0, hs, cells, dims);
        for (node, grad) in ops.parents.into_iter().zip([dproj, drk, dh0, dc0]) {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

#[derive(Debug)]
struct AttentionBackward;

impl<B: KilnOps> Backward<B, 3> for AttentionBackward {
    /// The queries, keys and values, the attention weights and the sizes.
    type State = ([FloatTensor<B>; 3], FloatTensor<B>, AttentionArgs);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dctx = grads.consume::<B>(&ops.node);
        let ([q, k, v], weights, args) = ops.state;
        let (dq, dk, dv) = B::kiln_attention_backward(dctx, q, k, v, weights, args);
        for (node, grad) in ops.parents.into_iter().zip([dq, dk, dv]) {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

/// The normalizations whose backward pass [`NormBackward`] computes, with their sizes.
#[derive(Debug, Clone, Copy)]
enum Norm {
    /// Batch normalization over `dims = [n, c, s]`, with epsilon.
    Batch([usize; 3], f64),
    /// Layer normalization over a last axis of this many features, with epsilon.
    Layer(usize, f64),
}

#[derive(Debug)]
struct NormBackward;

impl<B: KilnOps> Backward<B, 3> for NormBackward {
    /// The input, `gamma`, the two statistics the forward returned and the normalization.
    type State = (
        FloatTensor<B>,
        FloatTensor<B>,
        (FloatTensor<B>, FloatTensor<B>),
        Norm,
    );

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        let (x, gamma, (s1, s2), norm) = ops.state;
        let (dx, dg, db) = match norm {
            Norm::Batch(dims, epsilon) => {
                B::kiln_batch_norm_train_backward(x, dy, gamma, s1, s2, dims, epsilon)
            }
            Norm::Layer(features, _) => B::kiln_layer_norm_backward(x, dy, gamma, s1, s2, features),
        };
        for (node, grad) in ops.parents.into_iter().zip([dx, dg, db]) {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

/// Runs a normalization's forward on the inner backend, recording [`NormBackward`] when any
/// input is tracked: the output and the two statistics (not differentiable).
fn norm_forward<B: KilnOps, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    gamma: FloatTensor<Autodiff<B, C>>,
    beta: FloatTensor<Autodiff<B, C>>,
    norm: Norm,
) -> Three<Autodiff<B, C>> {
    let nodes = [x.node(), gamma.node(), beta.node()];
    let (x, gamma, beta) = (
        x.into_primitive(),
        gamma.into_primitive(),
        beta.into_primitive(),
    );
    let kept = (x.clone(), gamma.clone());
    let (y, s1, s2) = match norm {
        Norm::Batch(dims, epsilon) => B::kiln_batch_norm_train(x, gamma, beta, dims, epsilon),
        Norm::Layer(features, epsilon) => B::kiln_layer_norm(x, gamma, beta, features, epsilon),
    };
    let stats = (s1.clone(), s2.clone());
    let y = match NormBackward.prepare::<C>(nodes).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish((kept.0, kept.1, stats, norm), y),
        OpsKind::UnTracked(prep) => prep.finish(y),
    };
    (
        y,
        FloatTensor::<Autodiff<B, C>>::new(s1),
        FloatTensor::<Autodiff<B, C>>::new(s2),
    )
}

#[derive(Debug)]
struct MaxPoolBackward;

impl<B: KilnOps> Backward<B, 1> for MaxPoolBackward {
    /// The input and the geometry (the maxima are found again in the backward pass).
    type State = (FloatTensor<B>, PoolArgs);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x] = ops.parents;
        let dy = grads.consume::<B>(&ops.node);
        if let Some(node) = node_x {
            let (x, args) = ops.state;
            grads.register::<B>(node.id, B::kiln_max_pool2d_backward(x, dy, args));
        }
    }
}

#[derive(Debug)]
struct RoundBackward;

impl<B: KilnOps> Backward<B, 1> for RoundBackward {
    /// Whether the rounding is to bfloat16 (else float16).
    type State = bool;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x] = ops.parents;
        let dy = grads.consume::<B>(&ops.node);
        if let Some(node) = node_x {
            grads.register::<B>(node.id, B::kiln_round_half(dy, ops.state));
        }
    }
}

#[derive(Debug)]
struct CrossReplicaSumBackward;

impl<B: KilnOps> Backward<B, 1> for CrossReplicaSumBackward {
    type State = ();

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x] = ops.parents;
        let dy = grads.consume::<B>(&ops.node);
        // Runs even when this replica's input needs no gradient: the other replicas wait for
        // its share of the all-reduce.
        let dx = B::kiln_cross_replica_sum(dy, true);
        if let Some(node) = node_x {
            grads.register::<B>(node.id, dx);
        }
    }
}

impl<B: KilnOps, C: CheckpointStrategy> KilnOps for Autodiff<B, C> {
    fn kiln_conv2d(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        args: ConvArgs,
    ) -> FloatTensor<Self> {
        affine_forward::<B, C>(x, w, b, Affine::Conv(args))
    }

    fn kiln_conv2d_backward(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        y: FloatTensor<Self>,
        args: ConvArgs,
        need_dx: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        untracked3::<B, C>(B::kiln_conv2d_backward(
            x.into_primitive(),
            w.into_primitive(),
            dy.into_primitive(),
            y.into_primitive(),
            args,
            need_dx,
        ))
    }

    fn kiln_dense(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        args: DenseArgs,
    ) -> FloatTensor<Self> {
        affine_forward::<B, C>(x, w, b, Affine::Dense(args))
    }

    fn kiln_dense_backward(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        y: FloatTensor<Self>,
        args: DenseArgs,
        need_dx: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        untracked3::<B, C>(B::kiln_dense_backward(
            x.into_primitive(),
            w.into_primitive(),
            dy.into_primitive(),
            y.into_primitive(),
            args,
            need_dx,
        ))
    }

    fn kiln_adam(
        w: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        g: FloatTensor<Self>,
        args: AdamArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        // Optimizer updates are not differentiated.
        untracked3::<B, C>(B::kiln_adam(
            w.into_primitive(),
            m.into_primitive(),
            v.into_primitive(),
            g.into_primitive(),
            args,
        ))
    }

    fn kiln_lstm(
        proj: FloatTensor<Self>,
        rk: FloatTensor<Self>,
        h0: FloatTensor<Self>,
        c0: FloatTensor<Self>,
        dims: LstmArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let nodes = [proj.node(), rk.node(), h0.node(), c0.node()];
        let (proj, rk, h0, c0) = (
            proj.into_primitive(),
            rk.into_primitive(),
            h0.into_primitive(),
            c0.into_primitive(),
        );
        let kept = [rk.clone(), h0.clone(), c0.clone()];
        let (hs, cells) = B::kiln_lstm(proj, rk, h0, c0, dims);
        let out = match LstmBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish((kept, hs.clone(), cells.clone(), dims), hs),
            OpsKind::UnTracked(prep) => prep.finish(hs),
        };
        (out, FloatTensor::<Self>::new(cells))
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
        let (a, b, c, d) = B::kiln_lstm_backward(
            dhs.into_primitive(),
            rk.into_primitive(),
            h0.into_primitive(),
            c0.into_primitive(),
            hs.into_primitive(),
            cells.into_primitive(),
            dims,
        );
        let (a, b, c) = untracked3::<B, C>((a, b, c));
        (a, b, c, FloatTensor::<Self>::new(d))
    }

    fn kiln_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: FloatTensor<Self>,
        args: AttentionArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let nodes = [q.node(), k.node(), v.node()];
        let (q, k, v) = (q.into_primitive(), k.into_primitive(), v.into_primitive());
        let kept = [q.clone(), k.clone(), v.clone()];
        let (context, weights) = B::kiln_attention(q, k, v, mask.into_primitive(), args);
        let out = match AttentionBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((kept, weights.clone(), args), context),
            OpsKind::UnTracked(prep) => prep.finish(context),
        };
        (out, FloatTensor::<Self>::new(weights))
    }

    fn kiln_attention_backward(
        dctx: FloatTensor<Self>,
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        weights: FloatTensor<Self>,
        args: AttentionArgs,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        untracked3::<B, C>(B::kiln_attention_backward(
            dctx.into_primitive(),
            q.into_primitive(),
            k.into_primitive(),
            v.into_primitive(),
            weights.into_primitive(),
            args,
        ))
    }

    fn kiln_batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        dims: [usize; 3],
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        norm_forward::<B, C>(x, gamma, beta, Norm::Batch(dims, epsilon))
    }

    fn kiln_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        features: usize,
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        norm_forward::<B, C>(x, gamma, beta, Norm::Layer(features, epsilon))
    }

    fn kiln_layer_norm_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        inv_std: FloatTensor<Self>,
        features: usize,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        untracked3::<B, C>(B::kiln_layer_norm_backward(
            x.into_primitive(),
            dy.into_primitive(),
            gamma.into_primitive(),
            mean.into_primitive(),
            inv_std.into_primitive(),
            features,
        ))
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
        untracked3::<B, C>(B::kiln_batch_norm_train_backward(
            x.into_primitive(),
            dy.into_primitive(),
            gamma.into_primitive(),
            mean.into_primitive(),
            variance.into_primitive(),
            dims,
            epsilon,
        ))
    }

    fn kiln_max_pool2d(x: FloatTensor<Self>, args: PoolArgs) -> FloatTensor<Self> {
        let nodes = [x.node()];
        let x = x.into_primitive();
        match MaxPoolBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((x.clone(), args), B::kiln_max_pool2d(x, args)),
            OpsKind::UnTracked(prep) => prep.finish(B::kiln_max_pool2d(x, args)),
        }
    }

    fn kiln_max_pool2d_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        args: PoolArgs,
    ) -> FloatTensor<Self> {
        FloatTensor::<Self>::new(B::kiln_max_pool2d_backward(
            x.into_primitive(),
            dy.into_primitive(),
            args,
        ))
    }

    fn kiln_round_half(x: FloatTensor<Self>, bfloat16: bool) -> FloatTensor<Self> {
        let nodes = [x.node()];
        let x = x.into_primitive();
        match RoundBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(bfloat16, B::kiln_round_half(x, bfloat16)),
            OpsKind::UnTracked(prep) => prep.finish(B::kiln_round_half(x, bfloat16)),
        }
    }

    fn kiln_cross_replica_sum(x: FloatTensor<Self>, adjoint: bool) -> FloatTensor<Self> {
        let nodes = [x.node()];
        let x = x.into_primitive();
        match CrossReplicaSumBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((), B::kiln_cross_replica_sum(x, adjoint)),
            OpsKind::UnTracked(prep) => prep.finish(B::kiln_cross_replica_sum(x, adjoint)),
        }
    }
}
