//! Activations kept for backward: which tensors Burn's autodiff (and kiln's fused Dense and
//! Conv2D ops) hold between the forward pass and the backward pass, per example, in values.
//!
//! A layer's output stays alive when the layer itself saves it (Dense/Conv2D with a fused ReLU
//! save their output for the ReLU's gradient), when a consumer saves its input (Dense, Conv2D,
//! pooling, BatchNormalization, LayerNormalization, non-linear activations, attention
//! projections), or when it is the model's output. Layers whose gradient needs only shapes
//! (Add, ZeroPadding2D, Cropping1D, GlobalAveragePooling2D, Flatten, PositionEmbedding) save
//! nothing. On top of that, some layers keep internal tensors (each layer's
//! `Layer::extra_kept`, in its file under `model/layers/`):
//!
//! | layer | extra values kept per example |
//! |---|---|
//! | Dense/Conv2D/Activation with sigmoid, tanh, gelu | the pre-activation: `out` |
//! | … with softmax | `2 · out` |
//! | Dropout | its mask: `out` |
//! | LayerNormalization | `1.3 · out` (normalized values, per-row statistics); on the CPU `2 · rows` |
//! | MultiHeadAttention | `1.1 · s·(2·h·k + 2·h·v) + 3 · h·s_q·s_v` (projections, scores, softmax); on the CPU `1 · h·s_q·s_v` |
//! | TransformerEncoder | attention + `5.6 · s·f + 2 · s·i` (residual sums, two LayerNormalizations, feed-forward); on the CPU `3.0 · s·f` |
//!
//! Burn's operations (GPU backends) keep the first numbers; kiln's fused CPU operations for
//! attention and layer normalization keep only the attention weights and two statistics per
//! row ([`Layer::extra_kept_cpu`](crate::model::Layer::extra_kept_cpu)), so an estimate is made
//! for a device ([`super::estimate_on`]). The constants were measured with a counting allocator
//! (`crates/kiln/tests/estimate_memory.rs` checks the CPU's); for a transformer layer on a GPU
//! they give
//! `18.5·s·h + 3·a·s²` values per example (`s` steps, `h` features, `a` heads, feed-forward
//! `4h`), the same form as Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
//! Transformer Models", eq. 2: `34·s·b·h + 5·a·s²·b` bytes at 2 bytes per value with dropout
//! masks, i.e. `17·s·h + 2.5·a·s²` values).

use crate::device::DeviceKind;
use crate::model::{LayerKind, ModelSpec, NodeRef};

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
        LayerKind::Declared(l) => l.saves_input(),
        LayerKind::Input { .. } => false,
    }
}

/// Does `kind` keep its own output (a fused ReLU's gradient reads it)?
fn keeps_output(kind: &LayerKind) -> bool {
    matches!(kind, LayerKind::Declared(l) if l.keeps_output())
}

/// Internal tensors of layer `i` and its largest tensor (values per example).
fn extras(spec: &ModelSpec, i: usize, device: DeviceKind) -> (f64, f64) {
    let ins = spec.shapes_before(i);
    let out = spec.shape_after(i);
    match &spec.layers()[i].kind {
        LayerKind::Declared(l) => {
            let kept = match device {
                DeviceKind::Cpu => l.extra_kept_cpu(&ins, out),
                DeviceKind::Gpu => l.extra_kept(&ins, out),
            };
            (kept, l.largest_tensor(&ins, out))
        }
        LayerKind::Input { .. } => (0.0, size(out)),
    }
}

/// The tensor whose memory `r`'s output uses: a Flatten of a `(steps, features)` or flat
/// input is a view of its input (no copy); images are permuted to Keras' order, a copy.
fn view_source(spec: &ModelSpec, mut r: NodeRef) -> NodeRef {
    while let NodeRef::Layer(j) = r {
        let l = &spec.layers()[j];
        if l.kind.class_name() == "Flatten" && spec.shape_before(j).len() < 3 {
            r = l.inputs[0];
        } else {
            break;
        }
    }
    r
}

/// Per layer, what it adds to the activations kept for backward (values per example) on
/// `device`, and the values of the model's inputs kept (when their first consumer saves them).
pub fn per_layer(spec: &ModelSpec, device: DeviceKind) -> (Vec<LayerActivations>, f64) {
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
                    // A recurrent layer's final state: `[batch, units]`, counted in its
                    // `extra_kept` (every step's state is kept).
                    NodeRef::State(..) => {}
                }
            }
        }
    }
    let output = spec.output_layer();
    match view_source(spec, NodeRef::Layer(output)) {
        NodeRef::Input(k) => kept_in[k] = true,
        // Reachable: a Flatten of a recurrent layer's state (`inputs = ["lstm:1"]`) as the
        // model's output is a view of that state, `[batch, units]` as the layer's output.
        NodeRef::Layer(j) | NodeRef::State(j, _) => kept_out[j] = true,
    }
    let mut layers = Vec::with_capacity(n);
    for (i, kept) in kept_out.iter().enumerate() {
        let out = size(spec.shape_after(i));
        let (extra, largest) = extras(spec, i, device);
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
