//! Activations kept for backward: which tensors Burn's autodiff (and kiln's fused Dense and
//! Conv2D ops) hold between the forward pass and the backward pass, per example, in values.
//!
//! A layer's output stays alive when the layer itself saves it (Dense/Conv2D with a fused ReLU
//! save their output for the ReLU's gradient), when a consumer saves its input (Dense, Conv2D,
//! pooling, BatchNormalization, LayerNormalization, non-linear activations, attention
//! projections), or when it is the model's output. Layers whose gradient needs only shapes
//! (Add, ZeroPadding2D, Cropping1D, GlobalAveragePooling2D, Flatten, PositionEmbedding) save
//! nothing. On top of that, some layers keep internal tensors (`extras`):
//!
//! | layer | extra values kept per example |
//! |---|---|
//! | Dense/Conv2D/Activation with sigmoid, tanh, gelu | the pre-activation: `out` |
//! | … with softmax | `2 · out` |
//! | Dropout | its mask: `out` |
//! | LayerNormalization | `1.3 · out` (normalized values, per-row statistics) |
//! | MultiHeadAttention | `1.1 · s·(2·h·k + 2·h·v) + 3 · h·s_q·s_v` (projections, scores, softmax) |
//! | TransformerEncoder | attention + `5.6 · s·f + 2 · s·i` (residual sums, two LayerNormalizations, feed-forward) |
//!
//! The constants were measured on kiln's CPU backend with a counting allocator
//! (`crates/kiln/tests/estimate_memory.rs` checks them); for a transformer layer they give
//! `18.5·s·h + 3·a·s²` values per example (`s` steps, `h` features, `a` heads, feed-forward
//! `4h`), the same form as Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
//! Transformer Models", eq. 2: `34·s·b·h + 5·a·s²·b` bytes at 2 bytes per value with dropout
//! masks, i.e. `17·s·h + 2.5·a·s²` values).

use crate::model::{Activation, LayerKind, ModelSpec, NodeRef};

/// What one layer adds to the activations kept for backward, per example (in values).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LayerActivations {
    /// Values kept until the backward pass: the layer's output when something keeps it, plus
    /// the layer's internal tensors.
    pub kept: f64,
    /// The largest single tensor the layer creates (its gradient is what the backward pass
    /// holds at once on top of the kept tensors).
    pub largest: f64,
}

fn size(shape: &[usize]) -> f64 {
    shape.iter().map(|&d| d as f64).product()
}

/// Does `kind`'s backward pass need its (first) input's values?
fn saves_input(kind: &LayerKind) -> bool {
    match kind {
        LayerKind::Dense { .. }
        | LayerKind::Conv2D { .. }
        | LayerKind::MaxPooling2D { .. }
        | LayerKind::AveragePooling2D { .. }
        | LayerKind::BatchNormalization { .. }
        | LayerKind::LayerNormalization { .. }
        | LayerKind::MultiHeadAttention { .. }
        | LayerKind::TransformerEncoder { .. } => true,
        LayerKind::Activation { activation } => *activation != Activation::Linear,
        LayerKind::Declared(l) => l.saves_input(),
        _ => false,
    }
}

/// Does `kind` keep its own output (a fused ReLU's gradient reads it)?
fn keeps_output(kind: &LayerKind) -> bool {
    matches!(
        kind,
        LayerKind::Dense {
            activation: Activation::Relu,
            ..
        } | LayerKind::Conv2D {
            activation: Activation::Relu,
            ..
        }
    )
}

/// Extra values for an activation applied after a Dense/Conv2D or as a layer.
fn activation_extra(a: Activation, out: f64) -> f64 {
    match a {
        Activation::Linear | Activation::Relu => 0.0,
        Activation::Softmax => 2.0 * out,
        _ => out,
    }
}

/// `(extra values, largest tensor)` of attention with `dims = [f, fv, h, k, v]`.
fn attention(dims: [usize; 5], sq: f64, sv: f64) -> (f64, f64) {
    let [_, _, h, k, v] = dims.map(|d| d as f64);
    let projections = 1.1 * (sq * h * k + sv * h * k + sv * h * v + sq * h * v);
    let scores = h * sq * sv;
    (projections + 3.0 * scores, scores)
}

/// Internal tensors of layer `i` and its largest tensor (values per example).
fn extras(spec: &ModelSpec, i: usize) -> (f64, f64) {
    let kind = &spec.layers()[i].kind;
    let ins = spec.shapes_before(i);
    let out = size(spec.shape_after(i));
    let largest = ins.iter().map(|s| size(s)).fold(out, f64::max);
    match kind {
        LayerKind::Dense { activation, .. } | LayerKind::Conv2D { activation, .. } => {
            (activation_extra(*activation, out), largest)
        }
        // The input is kept through `saves_input`; softmax keeps one more tensor.
        LayerKind::Activation { activation } => (
            if *activation == Activation::Softmax {
                out
            } else {
                0.0
            },
            largest,
        ),
        LayerKind::Dropout { .. } => (out, largest),
        LayerKind::Declared(l) => (l.extra_kept(spec.shape_after(i)), largest),
        LayerKind::LayerNormalization { .. } => (1.3 * out, largest),
        LayerKind::BatchNormalization { .. } => (0.0, largest),
        LayerKind::MultiHeadAttention { .. } => {
            let dims = crate::model::attention_dims(kind, &ins);
            let sq = ins[0][0] as f64;
            let sv = ins.get(1).map_or(sq, |s| s[0] as f64);
            let (extra, scores) = attention(dims, sq, sv);
            (extra, largest.max(scores))
        }
        LayerKind::TransformerEncoder {
            intermediate_dim, ..
        } => {
            let dims = crate::model::attention_dims(kind, &ins);
            let s = ins[0][0] as f64;
            let (extra, scores) = attention(dims, s, s);
            let inner = s * *intermediate_dim as f64;
            (
                extra + 5.6 * out + 2.0 * inner,
                largest.max(scores).max(inner),
            )
        }
        _ => (0.0, largest),
    }
}

/// The tensor whose memory `r`'s output uses: a Flatten of a `(steps, features)` or flat
/// input is a view of its input (no copy); images are permuted to Keras' order, a copy.
fn view_source(spec: &ModelSpec, mut r: NodeRef) -> NodeRef {
    while let NodeRef::Layer(j) = r {
        let l = &spec.layers()[j];
        if matches!(l.kind, LayerKind::Flatten {}) && spec.shape_before(j).len() < 3 {
            r = l.inputs[0];
        } else {
            break;
        }
    }
    r
}

/// Per layer, what it adds to the activations kept for backward (values per example), and
/// the values of the model's inputs kept (when their first consumer saves them).
pub fn per_layer(spec: &ModelSpec) -> (Vec<LayerActivations>, f64) {
    let n = spec.layers().len();
    let mut kept_out = vec![false; n];
    let mut kept_in = vec![false; spec.inputs().len()];
    for (i, l) in spec.layers().iter().enumerate() {
        if keeps_output(&l.kind) {
            kept_out[i] = true;
        }
        if saves_input(&l.kind) {
            for r in &l.inputs {
                match view_source(spec, *r) {
                    NodeRef::Input(k) => kept_in[k] = true,
                    NodeRef::Layer(j) => kept_out[j] = true,
                }
            }
        }
    }
    let output = spec.output_layer();
    match view_source(spec, NodeRef::Layer(output)) {
        NodeRef::Input(k) => kept_in[k] = true,
        NodeRef::Layer(j) => kept_out[j] = true,
    }
    let mut layers = Vec::with_capacity(n);
    for (i, kept) in kept_out.iter().enumerate() {
        let out = size(spec.shape_after(i));
        let (extra, largest) = extras(spec, i);
        let mut kept = if *kept { out } else { 0.0 } + extra;
        if i == output && spec.shape_after(i).len() > 1 {
            kept += out; // the output is flattened (copied) for the loss
        }
        layers.push(LayerActivations { kept, largest });
    }
    let inputs = spec
        .inputs()
        .iter()
        .zip(&kept_in)
        .map(|((_, s), k)| if *k { size(s) } else { 0.0 })
        .sum();
    (layers, inputs)
}
