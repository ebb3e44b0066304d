//! Where each kiln weight sits in a Keras 3 weights file (`model.weights.h5`), as
//! `keras/src/saving/saving_lib.py` (`_save_state`, `_get_unique_name`) and each layer's
//! `save_own_variables` lay it out: `layers/<group>/<sublayer>/vars/<i>`.
//!
//! - `<group>`: the layer's class name in snake_case (`conv2d`, `batch_normalization`), made
//!   unique with `_1`, `_2`, … in the order of `model.layers` (the `Input`s count for a
//!   functional model, not for a Sequential one). The layer's `name` is not used.
//! - `<sublayer>`: where Keras keeps the weights in a sublayer: a recurrent layer's `cell`,
//!   a `Bidirectional`'s `forward_layer/cell` and `backward_layer/cell`, a
//!   `MultiHeadAttention`'s `query_dense`, `key_dense`, `value_dense`, `output_dense`.
//! - `<i>`: the weight's position among its sublayer's weights, trainable ones first, each
//!   group in creation order (`Dense`: kernel 0, bias 1; `BatchNormalization`: gamma, beta,
//!   moving_mean, moving_variance).

use std::collections::BTreeMap;

use crate::model::ModelSpec;
use crate::model::layer::snake_case;

/// The Keras sublayer that holds the kiln weight prefix `prefix` (the weight name up to its
/// last `/`, empty for a layer's own weights) of a layer of class `class`; `None` when kiln
/// does not know where Keras keeps it.
fn sublayer(class: &str, prefix: &str) -> Option<String> {
    let recurrent = matches!(class, "LSTM" | "GRU" | "SimpleRNN");
    match (class, prefix) {
        (_, "") if recurrent => Some("cell/".into()),
        ("TimeDistributed", "") => Some("layer/".into()),
        (_, "") => Some(String::new()),
        ("MultiHeadAttention", p) => {
            let dense = match p {
                "query" => "query_dense",
                "key" => "key_dense",
                "value" => "value_dense",
                "attention_output" => "output_dense",
                _ => return None,
            };
            Some(format!("{dense}/"))
        }
        ("Bidirectional", p) if p.starts_with("forward_") => Some("forward_layer/cell/".into()),
        ("Bidirectional", p) if p.starts_with("backward_") => Some("backward_layer/cell/".into()),
        _ => None,
    }
}

/// The group of every layer in `model.layers` order (the `Input`s first for a functional
/// model): `(kiln name, Keras group)`.
pub(super) fn groups(spec: &ModelSpec) -> Vec<(String, String)> {
    let mut used: BTreeMap<String, usize> = BTreeMap::new();
    let mut unique = |class: &str| {
        let base = snake_case(class);
        let n = used.entry(base.clone()).or_insert(0);
        *n += 1;
        match *n {
            1 => base,
            k => format!("{base}_{}", k - 1),
        }
    };
    let mut out = Vec::new();
    if !spec.is_sequential() {
        for (name, _) in spec.inputs() {
            out.push((name.clone(), unique("InputLayer")));
        }
    }
    for layer in spec.layers() {
        if layer.shares.is_none() {
            out.push((layer.name.clone(), unique(layer.kind.class_name())));
        }
    }
    out
}

/// Every weight of `spec` with its path in the weights file: `(kiln name "<layer>/<weight>",
/// path "layers/<group>/…/vars/<i>")`, in kiln's order.
///
/// # Errors
/// The layer and weight kiln cannot place (a layer whose weights Keras keeps in a sublayer
/// kiln does not know).
pub(super) fn weight_paths(spec: &ModelSpec) -> Result<Vec<(String, String)>, String> {
    let groups: BTreeMap<String, String> = groups(spec).into_iter().collect();
    let mut out = Vec::new();
    for (i, layer) in spec.layers().iter().enumerate() {
        let class = layer.kind.class_name();
        let own = spec.own_weights(i);
        // Trainable weights first, then the others (Keras' `save_own_variables`).
        let ordered = own
            .iter()
            .filter(|(w, _)| w.trainable)
            .chain(own.iter().filter(|(w, _)| !w.trainable));
        let mut count: BTreeMap<String, usize> = BTreeMap::new();
        for (w, _) in ordered {
            let prefix = w.name.rsplit_once('/').map_or("", |(p, _)| p);
            let sub = sublayer(class, prefix).ok_or_else(|| {
                format!(
                    "layer \"{}\" ({class}): kiln does not know where Keras keeps its weight `{}`",
                    layer.name, w.name
                )
            })?;
            let k = count.entry(sub.clone()).or_insert(0);
            let group = &groups[&layer.name];
            out.push((
                format!("{}/{}", layer.name, w.name),
                format!("layers/{group}/{sub}vars/{k}"),
            ));
            *k += 1;
        }
    }
    Ok(out)
}

/// The groups without weights that Keras writes too (every layer's `vars`, a recurrent
/// layer's `cell/vars`, a MultiHeadAttention's softmax and dropout), so that Keras finds a
/// group for every layer it tracks.
pub(super) fn empty_groups(spec: &ModelSpec) -> Vec<String> {
    let classes: BTreeMap<&str, &str> = spec
        .layers()
        .iter()
        .map(|l| (l.name.as_str(), l.kind.class_name()))
        .collect();
    let mut out = vec!["vars".to_string()];
    for (name, group) in groups(spec) {
        out.push(format!("layers/{group}/vars"));
        let extra: &[&str] = match classes.get(name.as_str()).copied() {
            Some("LSTM" | "GRU" | "SimpleRNN") => &["cell/vars"],
            Some("Bidirectional") => &["forward_layer/vars", "backward_layer/vars"],
            Some("MultiHeadAttention") => &["_softmax/vars", "_dropout_layer/vars"],
            Some("TimeDistributed") => &["layer/vars"],
            _ => &[],
        };
        out.extend(extra.iter().map(|e| format!("layers/{group}/{e}")));
    }
    out
}
