//! Legacy HDF5 model files (`model.save("model.h5")`, Keras 2 and Keras 3's legacy format:
//! `keras/src/legacy/saving/legacy_h5_format.py`): the model's config in the root attribute
//! `model_config` (JSON), the compile settings in `training_config`, each layer's weights under
//! `model_weights/<layer name>/` listed in order by the group's `weight_names` attribute
//! (`sequential/conv2d/kernel`, Keras 2's `conv2d/kernel:0`, a recurrent layer's
//! `…/lstm_cell/kernel`).

use std::collections::BTreeMap;

use serde_json::Value;

use super::h5::{Array, H5};
use crate::model::ModelSpec;

/// The weight name kiln uses for a legacy `weight_names` entry's tail: without `:0` and
/// without the cell components (`forward_gru/gru_cell/kernel` -> `forward_gru/kernel`).
fn normalized(name: &str) -> Vec<&str> {
    let name = name.split(':').next().unwrap_or(name);
    name.split('/')
        .filter(|part| !part.ends_with("_cell") && !part.is_empty())
        .collect()
}

/// Whether the legacy entry `entry` is kiln's weight `weight` (its trailing components).
fn matches(entry: &[&str], weight: &str) -> bool {
    let w: Vec<&str> = weight.split('/').collect();
    entry.len() >= w.len() && entry[entry.len() - w.len()..] == w[..]
}

/// The weights of `spec` from the file's `model_weights`, by kiln name.
///
/// # Errors
/// A layer group or weight missing, a weight of another shape, or more weights in a group than
/// kiln's layer has.
pub(super) fn weights(spec: &ModelSpec, h5: &H5) -> Result<BTreeMap<String, Array>, String> {
    let mut out = BTreeMap::new();
    for (i, layer) in spec.layers().iter().enumerate() {
        let own = spec.own_weights(i);
        if own.is_empty() {
            continue;
        }
        let group = format!("model_weights/{}", layer.name);
        let names = h5
            .attr_strings(&group, "weight_names")
            .ok_or_else(|| format!("{group}: missing (the layer's weights)"))?;
        if names.len() != own.len() {
            return Err(format!(
                "{group} holds {} weights, kiln's {} layer has {}",
                names.len(),
                layer.kind.class_name(),
                own.len()
            ));
        }
        for (w, _) in own {
            let found: Vec<&String> = names
                .iter()
                .filter(|n| matches(&normalized(n), &w.name))
                .collect();
            let [entry] = found[..] else {
                return Err(format!(
                    "{group}: no single weight named like `{}` among {names:?}",
                    w.name
                ));
            };
            let path = format!("{group}/{entry}");
            let (shape, values) = h5.f32s(&path)?.ok_or_else(|| format!("{path}: missing"))?;
            if shape != w.shape {
                return Err(format!(
                    "{path} has shape {shape:?}, the model in model_config needs {:?}",
                    w.shape
                ));
            }
            out.insert(format!("{}/{}", layer.name, w.name), (shape, values));
        }
    }
    Ok(out)
}

/// `training_config` as the `compile_config` Keras 3 writes (`optimizer_config` becomes
/// `optimizer`).
pub(super) fn compile_config(training: &Value) -> Value {
    let mut c = training.clone();
    if let Some(o) = c.as_object_mut()
        && let Some(opt) = o.remove("optimizer_config")
    {
        o.insert("optimizer".into(), opt);
    }
    c
}
