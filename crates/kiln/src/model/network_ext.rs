//! Weight names and forward passes of the layers residual networks and
//! transformers need (see `spec_ext.rs` for their shapes). Every operation is a Burn tensor
//! operation (or kiln's Dense op), so autodiff records it: no custom kernels.
//! Their parameters are drawn by `Network::init` from `options::layer_weights`.
//!
//! Layouts: 2-D kernels are stored as `[inputs, outputs]`, the row-major memory of Keras'
//! `EinsumDense` kernels (`query/kernel [features, heads, key_dim]` is `[features,
//! heads * key_dim]` here); [`weight_names`] gives the Keras names and shapes.

use burn::module::Param;
use burn::prelude::*;
use burn::tensor::activation;
use burn::tensor::module::layer_norm;

use super::network::{Act, LayerParams, apply_activation};
use super::spec::LayerKind;
use super::spec_ext::attention_dims;

/// Keras' names (after `layer_name/`) and shapes of a layer's `kernels` and `vectors`, in
/// their storage order.
pub type WeightNames = (Vec<(String, Vec<usize>)>, Vec<(String, Vec<usize>)>);

fn attention_names(prefix: &str, dims: [usize; 5], bias: bool) -> WeightNames {
    let [f, fv, h, kd, vd] = dims;
    let kernels = vec![
        (format!("{prefix}query/kernel"), vec![f, h, kd]),
        (format!("{prefix}key/kernel"), vec![fv, h, kd]),
        (format!("{prefix}value/kernel"), vec![fv, h, vd]),
        (format!("{prefix}attention_output/kernel"), vec![h, vd, f]),
    ];
    let vectors = if bias {
        vec![
            (format!("{prefix}query/bias"), vec![h, kd]),
            (format!("{prefix}key/bias"), vec![h, kd]),
            (format!("{prefix}value/bias"), vec![h, vd]),
            (format!("{prefix}attention_output/bias"), vec![f]),
        ]
    } else {
        Vec::new()
    };
    (kernels, vectors)
}

/// The Keras names and shapes of `kind`'s `kernels` and `vectors` for inputs of `inputs`
/// (Keras' `keras/src/layers/attention/multi_head_attention.py` names; keras_hub's
/// `TransformerEncoder` sublayer names).
pub fn weight_names(kind: &LayerKind, inputs: &[&[usize]]) -> WeightNames {
    let last = inputs.first().and_then(|s| s.last()).copied().unwrap_or(0);
    match kind {
        LayerKind::MultiHeadAttention { use_bias, .. } => {
            attention_names("", attention_dims(kind, inputs), *use_bias)
        }
        LayerKind::TransformerEncoder {
            intermediate_dim, ..
        } => {
            let (mut k, mut v) =
                attention_names("self_attention_layer/", attention_dims(kind, inputs), true);
            let i = *intermediate_dim;
            k.push((
                "feedforward_intermediate_dense/kernel".into(),
                vec![last, i],
            ));
            k.push(("feedforward_output_dense/kernel".into(), vec![i, last]));
            v.extend([
                ("self_attention_layer_norm/gamma".into(), vec![last]),
                ("self_attention_layer_norm/beta".into(), vec![last]),
                ("feedforward_intermediate_dense/bias".into(), vec![i]),
                ("feedforward_output_dense/bias".into(), vec![last]),
                ("feedforward_layer_norm/gamma".into(), vec![last]),
                ("feedforward_layer_norm/beta".into(), vec![last]),
            ]);
            (k, v)
        }
        LayerKind::Declared(l) => {
            let (kernels, vectors): (Vec<_>, Vec<_>) =
                l.weights(inputs).into_iter().partition(|w| w.is_kernel());
            let named = |ws: Vec<super::layer::WeightSpec>| -> Vec<(String, Vec<usize>)> {
                ws.into_iter().map(|w| (w.name, w.shape)).collect()
            };
            (named(kernels), named(vectors))
        }
        _ => (vec![], vec![]),
    }
}

/// The stored `[inputs, outputs]` shape of a kernel with Keras name `name` and shape `shape`:
/// the attention output projection `[heads, value_dim, features]` takes its first two axes as
/// inputs; every other kernel its first axis.
pub fn kernel_2d(name: &str, shape: &[usize]) -> [usize; 2] {
    let split = if name.ends_with("attention_output/kernel") {
        2
    } else {
        1
    };
    [
        shape[..split].iter().product(),
        shape[split..].iter().product(),
    ]
}

fn seq(x: Act) -> Tensor<3> {
    match x {
        Act::Seq(t) => t,
        other => panic!("spec shape checks guarantee a 3-D input here, got {other:?}"),
    }
}

/// `x [n, s, f] · w [f, u] + b` on the rows (kiln's Dense op), `[n, s, u]`.
fn dense3(x: Tensor<3>, w: Tensor<2>, b: Option<Tensor<1>>) -> Tensor<3> {
    let [n, s, f] = x.dims();
    let y = crate::ops::dense(x.reshape([n * s, f]), w, b, false);
    let u = y.dims()[1];
    y.reshape([n, s, u])
}

/// Scaled dot-product attention over `heads` with the four projections `k[0..4]`, biases
/// `b[0..4]` when present: `softmax(Q Kᵀ / sqrt(key_dim)) V`, then the output projection
/// (Vaswani et al. 2017; Keras' `MultiHeadAttention._compute_attention`).
fn attention(
    query: Tensor<3>,
    value: Tensor<3>,
    k: &[Param<Tensor<2>>],
    b: &[Param<Tensor<1>>],
    heads: usize,
) -> Tensor<3> {
    let bias = |i: usize| b.get(i).map(|p| p.val());
    let [n, sq, _] = query.dims();
    let sv = value.dims()[1];
    let q = dense3(query, k[0].val(), bias(0));
    let kk = dense3(value.clone(), k[1].val(), bias(1));
    let v = dense3(value, k[2].val(), bias(2));
    let kd = q.dims()[2] / heads;
    let vd = v.dims()[2] / heads;
    let split = |t: Tensor<3>, s: usize, d: usize| t.reshape([n, s, heads, d]).swap_dims(1, 2);
    let q = split(q, sq, kd) * (1.0 / (kd as f64).sqrt());
    let kk = split(kk, sv, kd);
    let v = split(v, sv, vd);
    let scores = q.matmul(kk.swap_dims(2, 3)); // [n, heads, sq, sv]
    let weights = activation::softmax(scores, 3);
    let context = weights
        .matmul(v)
        .swap_dims(1, 2)
        .reshape([n, sq, heads * vd]);
    dense3(context, k[3].val(), bias(3))
}

/// Runs one of the layers this file covers on its inputs (in call order).
pub(super) fn forward(kind: &LayerKind, p: &LayerParams, mut xs: Vec<Act>) -> Act {
    match kind {
        LayerKind::LayerNormalization { epsilon } => {
            let gamma = p.gamma.as_ref().expect("gamma").val();
            let beta = p.beta.as_ref().expect("beta").val();
            match xs.remove(0) {
                Act::Flat(t) => Act::Flat(layer_norm(t, gamma, Some(beta), *epsilon)),
                Act::Seq(t) => Act::Seq(layer_norm(t, gamma, Some(beta), *epsilon)),
                // Keras normalizes the last (channel) axis: NCHW -> NHWC and back.
                Act::Image(t) => Act::Image(
                    layer_norm(t.permute([0, 2, 3, 1]), gamma, Some(beta), *epsilon)
                        .permute([0, 3, 1, 2]),
                ),
            }
        }
        LayerKind::MultiHeadAttention { num_heads, .. } => {
            let query = seq(xs.remove(0));
            let value = if xs.is_empty() {
                query.clone()
            } else {
                seq(xs.remove(0))
            };
            Act::Seq(attention(query, value, &p.kernels, &p.vectors, *num_heads))
        }
        LayerKind::TransformerEncoder {
            num_heads,
            activation: act,
            layer_norm_epsilon: eps,
            ..
        } => {
            let x = seq(xs.remove(0));
            let v = &p.vectors;
            let a = attention(x.clone(), x.clone(), &p.kernels[..4], &v[..4], *num_heads);
            let x = layer_norm(x + a, v[4].val(), Some(v[5].val()), *eps);
            let h = dense3(x.clone(), p.kernels[4].val(), Some(v[6].val()));
            let h = match apply_activation(Act::Seq(h), *act) {
                Act::Seq(t) => t,
                _ => unreachable!("activations keep the rank"),
            };
            let f = dense3(h, p.kernels[5].val(), Some(v[7].val()));
            Act::Seq(layer_norm(x + f, v[8].val(), Some(v[9].val()), *eps))
        }
        other => unreachable!("{} is run by network.rs", other.class_name()),
    }
}
