//! [`KilnOps`] on `Autodiff<B>`: the forward on the inner backend, and a hand-written backward
//! that calls the inner backend's gradient kernels.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::tensor::FloatTensor;

use super::{ConvArgs, KilnOps, PoolArgs, fused_relu};

#[derive(Debug)]
struct ConvBackward;

impl<B: KilnOps> Backward<B, 3> for ConvBackward {
    /// The input, the kernel, the output when a ReLU was fused, and the geometry.
    type State = (
        FloatTensor<B>,
        FloatTensor<B>,
        Option<FloatTensor<B>>,
        ConvArgs,
    );

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_w, node_b] = ops.parents;
        let dy = grads.consume::<B>(&ops.node);
        let (x, w, y, args) = ops.state;
        // Without a fused ReLU the kernel does not read `y`: any tensor will do.
        let y = y.unwrap_or_else(|| dy.clone());
        let (dx, dw, db) = B::kiln_conv2d_backward(x, w, dy, y, args, node_x.is_some());
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

impl<B: KilnOps, C: CheckpointStrategy> KilnOps for Autodiff<B, C> {
    fn kiln_conv2d(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        args: ConvArgs,
    ) -> FloatTensor<Self> {
        // Node guards are taken before the primitives are consumed.
        let nodes = [x.node(), w.node(), b.node()];
        let (x, w, b) = (x.into_primitive(), w.into_primitive(), b.into_primitive());
        match ConvBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (x_kept, w_kept) = (x.clone(), w.clone());
                let y = B::kiln_conv2d(x, w, b, args);
                let y_kept = fused_relu(&args).then(|| y.clone());
                prep.finish((x_kept, w_kept, y_kept, args), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::kiln_conv2d(x, w, b, args)),
        }
    }

    fn kiln_conv2d_backward(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        y: FloatTensor<Self>,
        args: ConvArgs,
        need_dx: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        // Gradients of gradients are not tracked (first-order autodiff, as Burn).
        let (dx, dw, db) = B::kiln_conv2d_backward(
            x.into_primitive(),
            w.into_primitive(),
            dy.into_primitive(),
            y.into_primitive(),
            args,
            need_dx,
        );
        (
            FloatTensor::<Self>::new(dx),
            FloatTensor::<Self>::new(dw),
            FloatTensor::<Self>::new(db),
        )
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
}
