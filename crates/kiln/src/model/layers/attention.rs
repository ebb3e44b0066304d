//! Scaled dot-product attention shared by `MultiHeadAttention` and `TransformerEncoder`:
//! its weights (Keras' `keras/src/layers/attention/multi_head_attention.py` names), forward
//! pass, estimate figures and ONNX graph. Not a layer itself.
//!
//! Layouts: the projection kernels' Keras shapes are rank 3 (`query/kernel [features, heads,
//! key_dim]`, `attention_output/kernel [heads, value_dim, features]`); they are held as the
//! matrices of their row-major memory (`[features, heads * key_dim]`, `[heads * value_dim,
//! features]`), so the projections are plain Dense maps.

use burn::prelude::*;

use crate::model::layer::{Storage, WeightInit, WeightSpec, Weights};
use crate::onnx::{OnnxGraph, int};

/// Sizes of an attention: `[features, value features, heads, key_dim, value_dim]`.
pub(super) type Dims = [usize; 5];

/// The weights of an attention with `dims`, their names prefixed by `prefix`: the four
/// kernels (`glorot_uniform`), then the four biases (zeros) when `bias`.
pub(super) fn weights(prefix: &str, dims: Dims, bias: bool) -> Vec<WeightSpec> {
    let [f, fv, h, kd, vd] = dims;
    let kernel = |part: &str, shape: Vec<usize>, rows: usize| {
        let name = format!("{prefix}{part}/kernel");
        WeightSpec::new(&name, shape, WeightInit::GlorotUniform).stored(Storage::Matrix(rows))
    };
    let mut out = vec![
        kernel("query", vec![f, h, kd], 1),
        kernel("key", vec![fv, h, kd], 1),
        kernel("value", vec![fv, h, vd], 1),
        kernel("attention_output", vec![h, vd, f], 2),
    ];
    if bias {
        let b = |part: &str, shape: Vec<usize>| {
            let name = format!("{prefix}{part}/bias");
            WeightSpec::new(&name, shape, WeightInit::Zeros).stored(Storage::Vector)
        };
        out.extend([
            b("query", vec![h, kd]),
            b("key", vec![h, kd]),
            b("value", vec![h, vd]),
            b("attention_output", vec![f]),
        ]);
    }
    out
}

/// `x [n, s, f] · w [f, u] + b` on the rows (kiln's Dense op), `[n, s, u]`.
pub(super) fn dense3(x: Tensor<3>, w: Tensor<2>, b: Option<Tensor<1>>) -> Tensor<3> {
    let [n, s, f] = x.dims();
    let y = crate::ops::dense(x.reshape([n * s, f]), w, b, Default::default());
    let u = y.dims()[1];
    y.reshape([n, s, u])
}

/// A projection `<prefix><part>`: its kernel as the matrix it is held as, and its bias.
fn projection(w: &Weights, prefix: &str, part: &str) -> (Tensor<2>, Option<Tensor<1>>) {
    let kernel = w.get::<3>(&format!("{prefix}{part}/kernel"));
    let [a, b, c] = kernel.dims();
    let rows = if part == "attention_output" { a * b } else { a };
    let kernel = kernel.reshape([rows, a * b * c / rows]);
    let bias_name = format!("{prefix}{part}/bias");
    let bias = w.has(&bias_name).then(|| w.get_flat(&bias_name));
    (kernel, bias)
}

/// `softmax(Q Kᵀ / sqrt(key_dim)) V` over `heads`, then the output projection (Vaswani et al.
/// 2017; Keras' `MultiHeadAttention._compute_attention`), with the weights `<prefix>…`: one
/// kiln operation on the CPU fast path ([`crate::ops::attention`]), except with dropout of the
/// attention weights while training (Burn's operations, the weights dropped between the two).
pub(super) fn forward(
    query: Tensor<3>,
    value: Tensor<3>,
    w: &Weights,
    prefix: &str,
    heads: usize,
    opts: &Attend,
) -> Tensor<3> {
    let (wq, bq) = projection(w, prefix, "query");
    let (wk, bk) = projection(w, prefix, "key");
    let (wv, bv) = projection(w, prefix, "value");
    let (wo, bo) = projection(w, prefix, "attention_output");
    let q = dense3(query, wq, bq);
    let k = dense3(value.clone(), wk, bk);
    let v = dense3(value, wv, bv);
    let context = if opts.training && opts.dropout > 0.0 {
        let weights = crate::ops::attention_weights(q, k, heads, opts.mask.clone());
        let weights = super::dropout::dropped(weights, opts.dropout, opts.training);
        crate::ops::attention_context(weights, v)
    } else {
        crate::ops::attention(q, k, v, heads, opts.mask.clone())
    };
    dense3(context, wo, bo)
}

/// `(values kept for backward, largest tensor)` per example of an attention with `dims` over
/// `sq` query and `sv` value steps: the projections, the scores and their softmax.
/// How attention runs besides its inputs: Keras' attention mask and the dropout of the
/// attention weights (training only).
#[derive(Debug, Clone, Default)]
pub(super) struct Attend {
    /// `[batch, query steps (or 1), value steps]`, 1 where a query may attend to a value.
    pub mask: Option<Tensor<3>>,
    /// Fraction of attention weights dropped while training.
    pub dropout: f64,
    /// Training (dropout applies).
    pub training: bool,
}

/// Keras' attention mask (`MultiHeadAttention._compute_attention_mask`): the query's mask
/// `[batch, sq, 1]` and the value's `[batch, 1, sv]` and, with `causal`, the lower triangle
/// (query step `i` sees value steps `j <= i`), combined by AND; `None` when there is none.
pub(super) fn attention_mask(
    query: Option<Tensor<2>>,
    value: Option<Tensor<2>>,
    causal: bool,
    [sq, sv]: [usize; 2],
    device: &Device,
) -> Option<Tensor<3>> {
    let parts = [
        query.map(|m| m.unsqueeze_dim::<3>(2)),
        value.map(|m| m.unsqueeze_dim::<3>(1)),
        causal.then(|| causal_mask(sq, sv, device)),
    ];
    parts.into_iter().flatten().reduce(|a, b| a * b)
}

/// `[1, sq, sv]`: 1 where value step `j <= i` for query step `i`.
fn causal_mask(sq: usize, sv: usize, device: &Device) -> Tensor<3> {
    let values: Vec<f32> = (0..sq * sv)
        .map(|k| if k % sv <= k / sv { 1.0 } else { 0.0 })
        .collect();
    Tensor::<3>::from_data(TensorData::new(values, [1, sq, sv]), device)
}

/// The additive causal bias for ONNX: 0 where value step `j <= i`, -1e9 elsewhere.
fn causal_bias(sq: usize, sv: usize) -> Vec<f32> {
    (0..sq * sv)
        .map(|k| if k % sv <= k / sv { 0.0 } else { -1e9 })
        .collect()
}

pub(super) fn kept(dims: Dims, sq: f64, sv: f64) -> (f64, f64) {
    let [_, _, h, k, v] = dims.map(|d| d as f64);
    let projections = 1.1 * (sq * h * k + sv * h * k + sv * h * v + sq * h * v);
    let scores = h * sq * sv;
    (projections + 3.0 * scores, scores)
}

/// Score-sized tensors that [`kept`] counts and kiln's fused CPU attention does not keep (it
/// keeps the attention weights only, not the scores and the softmax's intermediates too).
pub(super) const SCORES_NOT_KEPT_ON_CPU: f64 = 2.0;

/// Forward operations per example of an attention layer with `trainable` parameters over
/// `positions` steps of `features`: the projections and the two products with the scores.
pub(super) fn flops(trainable: usize, positions: f64, features: f64) -> f64 {
    2.0 * trainable as f64 * positions + 4.0 * positions * positions * features
}

/// The ONNX graph of the attention of `query` over `value` with the weights `<prefix>query/
/// kernel` … `<prefix>attention_output/bias`.
pub(super) fn onnx(
    g: &mut OnnxGraph,
    prefix: &str,
    [query, value]: [&str; 2],
    dims: Dims,
    bias: bool,
    causal: Option<[usize; 2]>,
) -> Result<String, String> {
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
    let mut scores = g.node(layer, "MatMul", &[&q, &k], vec![]);
    if let Some([sq, sv]) = causal {
        let bias = g.constant(layer, &[sq, sv], &causal_bias(sq, sv));
        scores = g.node(layer, "Add", &[&scores, &bias], vec![]);
    }
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
