//! ONNX graphs of the attention layers kept in [`LayerKind`]'s own variants
//! (`MultiHeadAttention`, `TransformerEncoder`), as kiln runs them (`model::network_ext`):
//! `softmax(Q Kᵀ / sqrt(key_dim)) V` per head, then the output projection; keras_hub's BERT
//! block around it.

use crate::model::{Activation, LayerKind, attention_dims};
use crate::onnx::{Layout, OnnxGraph, OnnxValue, int};

type LayerResult = std::result::Result<String, String>;

/// How the caller maps an activation (`export::onnx`'s).
pub(super) type ActivationFn = fn(&mut OnnxGraph, &str, String, Activation, Layout) -> String;

/// Multi-head attention of `query` over `value` with the weights `<prefix>query/kernel` …
/// `<prefix>attention_output/bias`; `dims` are [`attention_dims`]'s.
fn attention(
    g: &mut OnnxGraph,
    prefix: &str,
    [query, value]: [&str; 2],
    dims: [usize; 5],
    bias: bool,
) -> LayerResult {
    let [f, fv, h, kd, vd] = dims;
    let layer = prefix.trim_end_matches('/');
    let project = |g: &mut OnnxGraph, part: &str, x: &str, [fin, d]: [usize; 2]| {
        let w = g.weight(
            &format!("{prefix}{part}/kernel"),
            &[fin, h, d],
            &[fin, h * d],
        )?;
        let b = match bias {
            true => Some(g.weight(&format!("{prefix}{part}/bias"), &[h, d], &[h * d])?),
            false => None,
        };
        let y = g.matmul_bias(layer, x, &w, b.as_deref());
        // [n, s, h * d] -> [n, s, h, d]
        Ok::<_, String>(g.reshape(layer, &y, &[0, 0, h as i64, d as i64]))
    };
    let q = project(g, "query", query, [f, kd])?;
    let k = project(g, "key", value, [fv, kd])?;
    let v = project(g, "value", value, [fv, vd])?;
    let q = g.transpose(layer, &q, &[0, 2, 1, 3]); // [n, h, sq, kd]
    let scale = g.scalar(layer, 1.0 / (kd as f32).sqrt());
    let q = g.node(layer, "Mul", &[&q, &scale], vec![]);
    let k = g.transpose(layer, &k, &[0, 2, 3, 1]); // [n, h, kd, sv]
    let v = g.transpose(layer, &v, &[0, 2, 1, 3]); // [n, h, sv, vd]
    let scores = g.node(layer, "MatMul", &[&q, &k], vec![]);
    let weights = g.node(layer, "Softmax", &[&scores], vec![int("axis", 3)]);
    let context = g.node(layer, "MatMul", &[&weights, &v], vec![]);
    let context = g.transpose(layer, &context, &[0, 2, 1, 3]); // [n, sq, h, vd]
    let context = g.reshape(layer, &context, &[0, 0, (h * vd) as i64]);
    let key = format!("{prefix}attention_output/kernel");
    let w = g.weight(&key, &[h, vd, f], &[h * vd, f])?;
    let b = match bias {
        true => Some(g.weight(&format!("{prefix}attention_output/bias"), &[f], &[f])?),
        false => None,
    };
    Ok(g.matmul_bias(layer, &context, &w, b.as_deref()))
}

/// keras_hub's `TransformerEncoder` (post-norm): attention, add, LayerNormalization, the
/// feed-forward pair of Dense maps, add, LayerNormalization.
fn encoder(
    g: &mut OnnxGraph,
    n: &str,
    kind: &LayerKind,
    x: &OnnxValue,
    activation: ActivationFn,
) -> LayerResult {
    let LayerKind::TransformerEncoder {
        intermediate_dim: i,
        activation: act,
        layer_norm_epsilon: eps,
        ..
    } = kind
    else {
        unreachable!("called for TransformerEncoder")
    };
    let dims = attention_dims(kind, &[&x.shape]);
    let f = dims[0];
    let prefix = |part: &str| format!("{n}/{part}/");
    let a = attention(
        g,
        &prefix("self_attention_layer"),
        [&x.name, &x.name],
        dims,
        true,
    )?;
    let r = g.node(n, "Add", &[&x.name, &a], vec![]);
    let x1 = g.layer_norm(&prefix("self_attention_layer_norm"), &r, f, *eps)?;
    let ff = prefix("feedforward_intermediate_dense");
    let hidden = g.dense(&ff, &x1, [f, *i], true)?;
    let hidden = activation(g, n, hidden, *act, Layout::Seq);
    let out = g.dense(&prefix("feedforward_output_dense"), &hidden, [*i, f], true)?;
    let r = g.node(n, "Add", &[&x1, &out], vec![]);
    g.layer_norm(&prefix("feedforward_layer_norm"), &r, f, *eps)
}

/// `MultiHeadAttention` (`xs` = `[query]` or `[query, value]`) or `TransformerEncoder` layer
/// `n`; returns its output value.
pub(super) fn layer(
    g: &mut OnnxGraph,
    n: &str,
    kind: &LayerKind,
    xs: &[OnnxValue],
    activation: ActivationFn,
) -> LayerResult {
    match kind {
        LayerKind::MultiHeadAttention { use_bias, .. } => {
            let value = xs.get(1).unwrap_or(&xs[0]);
            let shapes: Vec<&[usize]> = xs.iter().map(|v| v.shape.as_slice()).collect();
            let dims = attention_dims(kind, &shapes);
            attention(
                g,
                &format!("{n}/"),
                [&xs[0].name, &value.name],
                dims,
                *use_bias,
            )
        }
        _ => encoder(g, n, kind, &xs[0], activation),
    }
}
