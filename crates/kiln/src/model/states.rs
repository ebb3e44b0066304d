//! Layers that return more than one tensor (Keras' `return_state = true`:
//! `output, h, c = LSTM(..., return_state=True)(x)`). kiln names the extra tensors after the
//! layer, as TensorFlow names a node's outputs: `"lstm:0"` (or `"lstm"` for a layer with one
//! output) is the output, `"lstm:1"`, `"lstm:2"` the states. A layer that returns several
//! tensors must be unpacked: naming it without an index, or letting the next entry of a
//! Sequential stack take it, is an error, as feeding Keras' list to a `Dense` is.

use std::collections::HashMap;

use super::spec::{LayerSpec, NodeRef};
use crate::error::{KilnError, Result};

/// What `"name"` or `"name:k"` in a layer's `inputs` refers to.
///
/// # Errors
/// A one-line message for an unknown name, an index the layer does not have, or a layer with
/// states named without an index.
pub(super) fn resolve(
    written: &str,
    by_name: &HashMap<String, NodeRef>,
    layers: &[LayerSpec],
    states: &[Vec<Vec<usize>>],
) -> std::result::Result<NodeRef, String> {
    let unknown = |n: &str| {
        format!(
            "\"{n}\" is not the name of an earlier layer; list layers so that each comes after \
             its inputs"
        )
    };
    if let Some(r) = by_name.get(written) {
        return single_output(*r, layers, states);
    }
    let Some((name, index)) = written.rsplit_once(':') else {
        return Err(unknown(written));
    };
    let r = *by_name.get(name).ok_or_else(|| unknown(written))?;
    let count = match r {
        NodeRef::Layer(j) => states[j].len(),
        _ => 0,
    };
    let k: usize = index.parse().map_err(|_| {
        format!("\"{written}\": the part after ':' must be a tensor index 0..={count}")
    })?;
    match r {
        NodeRef::Layer(_) | NodeRef::Input(_) if k == 0 => Ok(r),
        NodeRef::Layer(j) if k <= count => Ok(NodeRef::State(j, k)),
        _ => Err(format!(
            "\"{written}\": \"{name}\" returns {} tensor(s), so its indices are 0..={count}",
            count + 1
        )),
    }
}

/// `r` when it is a single tensor, or why a layer with states must be unpacked.
pub(super) fn single_output(
    r: NodeRef,
    layers: &[LayerSpec],
    states: &[Vec<Vec<usize>>],
) -> std::result::Result<NodeRef, String> {
    match r {
        NodeRef::Layer(j) if !states[j].is_empty() => {
            Err(unpack_hint(&layers[j].name, states[j].len()))
        }
        _ => Ok(r),
    }
}

fn unpack_hint(name: &str, count: usize) -> String {
    let states: Vec<String> = (1..=count).map(|k| format!("\"{name}:{k}\"")).collect();
    format!(
        "layer \"{name}\" returns {} tensors (return_state = true), so it cannot feed a layer \
         as one tensor; name one in `inputs`: \"{name}:0\" (its output) or {} (its states)",
        count + 1,
        states.join(", ")
    )
}

/// A model output must be a layer with one output.
///
/// # Errors
/// [`KilnError::Config`] naming `model.outputs`.
pub(super) fn check_outputs(
    outputs: &[usize],
    layers: &[LayerSpec],
    states: &[Vec<Vec<usize>>],
) -> Result<()> {
    for &o in outputs {
        if !states[o].is_empty() {
            return Err(KilnError::config(
                "model.outputs",
                format!(
                    "layer \"{}\" returns its states too (return_state = true); a model output \
                     is one tensor: end the model with a layer after it",
                    layers[o].name
                ),
            ));
        }
    }
    Ok(())
}
