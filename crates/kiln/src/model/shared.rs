//! Shared layers: one layer called on several inputs with one set of weights, as Keras'
//! functional API allows (`tower = Dense(4); tower(a); tower(b)`).
//!
//! In a config, the layer is declared once and each further call is an entry with `shares`:
//!
//! ```toml
//! [model]
//! layers = [
//!   { type = "Input", name = "a", shape = [3] },
//!   { type = "Input", name = "b", shape = [3] },
//!   { type = "Dense", name = "tower", units = 4, activation = "relu", inputs = ["a"] },
//!   { name = "tower_b", shares = "tower", inputs = ["b"] },
//!   { type = "Add", inputs = ["tower", "tower_b"] },
//! ]
//! ```
//!
//! A call (`tower_b`) takes the shared layer's class, arguments, options and dtype; it gives
//! only `name`, `inputs` and `shares`. Its output shape is computed from its own inputs, which
//! must fit the same weight shapes. It holds no parameters ([`crate::model::ModelSpec::layer_params`]
//! is zero; the network's entry for it is empty) and runs on the shared layer's, so gradients
//! of every call add up on the one set of weights. Weights files, checkpoints, `summary` and
//! `estimate` list the weights once, under the shared layer's name.

use std::collections::HashMap;

use super::layer::WeightSpec;
use super::options::{LayerOptions, Slot, stored_weights};
use super::spec::{
    LayerKind, LayerSpec, ModelSpec, NodeRef, RawNode, keras_shape, take_inputs, take_name,
};
use crate::error::{KilnError, Result};

/// The keys a call of a shared layer may have.
const CALL_KEYS: [&str; 3] = ["name", "inputs", "shares"];

/// The entry of `[model] layers` `table` as a call of a shared layer when it has `shares`
/// (`None` otherwise). `key` is `model.layers[i]`.
///
/// # Errors
/// [`KilnError::Config`] naming `model.layers[i].shares` when it is not a string, or the
/// first key other than `name`, `inputs` and `shares` (`type`, arguments, options, `dtype`).
pub(super) fn sharing_entry(table: &mut toml::Table, key: &str) -> Result<Option<RawNode>> {
    let Some(shares) = table.get("shares") else {
        return Ok(None);
    };
    let owner = shares.as_str().map(String::from).ok_or_else(|| {
        KilnError::config(
            format!("{key}.shares"),
            format!("must be the name of an earlier layer, got {shares}"),
        )
    })?;
    if let Some(extra) = table.keys().find(|k| !CALL_KEYS.contains(&k.as_str())) {
        return Err(KilnError::config(
            format!("{key}.{extra}"),
            format!(
                "not allowed next to `shares`: this entry calls layer \"{owner}\" again with \
                 its class, arguments, options and dtype; give only `name`, `inputs` and \
                 `shares`, and set `{extra}` on \"{owner}\""
            ),
        ));
    }
    Ok(Some(RawNode {
        name: take_name(table, key)?,
        inputs: take_inputs(table, key)?,
        ..RawNode::sharing(None, &owner, Vec::new())
    }))
}

/// A call of shared layer `owner` as `to_toml` writes it (`name` and `inputs` are added by
/// the caller).
pub(super) fn sharing_table(owner: &str) -> toml::Table {
    toml::Table::from_iter([("shares".to_string(), toml::Value::String(owner.into()))])
}

/// The index (into the layers built so far) of the layer entry `i` shares: `owner` must name
/// an earlier layer (a call of a shared layer stands for that layer). Entry `i` must have no
/// options of its own.
pub(super) fn shared_owner(
    i: usize,
    owner: &str,
    by_name: &HashMap<String, NodeRef>,
    layers: &[LayerSpec],
    options: &LayerOptions,
) -> Result<usize> {
    let key = format!("model.layers[{i}].shares");
    match by_name.get(owner) {
        // `by_name` holds layers and inputs, never states.
        None | Some(NodeRef::State(..)) => Err(KilnError::config(
            key,
            format!(
                "\"{owner}\" is not the name of an earlier layer; declare the shared layer \
                 first and list each further call after it"
            ),
        )),
        Some(NodeRef::Input(_)) => Err(KilnError::config(
            key,
            format!(
                "\"{owner}\" is an Input, which has no weights to share; to feed it to several \
                 layers, name it in their `inputs`"
            ),
        )),
        Some(NodeRef::Layer(_)) if *options != LayerOptions::default() => Err(KilnError::config(
            format!("model.layers[{i}]"),
            format!(
                "a call of shared layer \"{owner}\" takes no options of its own (trainable, \
                 initializers, regularizers, constraints); set them on \"{owner}\""
            ),
        )),
        Some(NodeRef::Layer(j)) => Ok(layers[*j].shares.unwrap_or(*j)),
    }
}

/// The automatic name of a call of layer `owner`: `owner_call_1`, `owner_call_2`, … (the
/// first not yet taken), so that calls do not use up Keras' automatic layer names.
pub(super) fn shared_call_name(owner: &str, by_name: &HashMap<String, NodeRef>) -> String {
    (1..)
        .map(|k| format!("{owner}_call_{k}"))
        .find(|n| !by_name.contains_key(n))
        .expect("a free name")
}

/// Checks that a call of layer `owner` (of `kind`, built on inputs `built`) on inputs
/// `called` needs the same weight shapes.
pub(super) fn check_shared_weights(
    kind: &LayerKind,
    owner: &str,
    built: &[&[usize]],
    called: &[&[usize]],
) -> std::result::Result<(), String> {
    let describe = |inputs: &[&[usize]]| {
        let shapes: Vec<String> = inputs.iter().map(|s| keras_shape(s)).collect();
        let weights: Vec<String> = stored_weights(kind, inputs)
            .into_iter()
            .map(|(w, _)| format!("{} {}", w.name, tuple(&w.shape)))
            .collect();
        (shapes.join(" and "), weights.join(", "))
    };
    let (want, have) = (describe(built), describe(called));
    if want.1 == have.1 {
        return Ok(());
    }
    Err(format!(
        "layer \"{owner}\" was built for input {} (weights {}); input {} would need weights {}: \
         every call of a shared layer must fit the same weights",
        want.0, want.1, have.0, have.1
    ))
}

/// A shape as Keras prints a weight's: `(3, 4)`, `(4,)`.
fn tuple(shape: &[usize]) -> String {
    match shape {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl ModelSpec {
    /// An error when layer `name` is a call of a shared layer, which takes its `what` (dtype,
    /// options) from that layer.
    pub(super) fn not_a_call(&self, name: &str, what: &str) -> Result<()> {
        match self.layers().iter().find(|l| l.name == name) {
            Some(LayerSpec {
                shares: Some(o), ..
            }) => {
                let owner = &self.layers()[*o].name;
                Err(KilnError::config(
                    "model.layers",
                    format!(
                        "\"{name}\" is a call of shared layer \"{owner}\", which it takes its \
                         {what} from; set them on \"{owner}\""
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The weights layer `i` stores, with where: none for a call of a shared layer, which
    /// runs on the shared layer's.
    pub(crate) fn own_weights(&self, i: usize) -> Vec<(WeightSpec, Slot)> {
        match self.layers()[i].shares {
            Some(_) => Vec::new(),
            None => stored_weights(&self.layers()[i].kind, &self.shapes_before(i)),
        }
    }
}
