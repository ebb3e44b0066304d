//! Keras 3's native model file, `.keras`, in and out (`keras/src/saving/saving_lib.py`).
//!
//! A `.keras` file is a zip archive of three entries, stored uncompressed:
//!
//! | entry | content |
//! |---|---|
//! | `metadata.json` | `keras_version`, `date_saved` |
//! | `config.json` | the model: `serialize_keras_object(model)` with its `compile_config` |
//! | `model.weights.h5` | the weights, HDF5 groups `layers/<snake_case class>[_N]/…/vars/<i>` ([`paths`]) |
//!
//! [`to_bytes`] writes one that `keras.saving.load_model` loads without custom objects;
//! [`read`] reads one (from Keras or kiln) into a kiln model spec, the weights in kiln's names
//! and an optional `[compile]` table. kiln stores weights in Keras' layouts (HWIO convolution
//! kernels, `[features, heads, key_dim]` attention kernels), so only names change, never
//! values. Errors name the file, the archive entry and the layer.

mod from_keras;
mod h5;
mod legacy;
mod paths;
mod to_keras;

use std::collections::BTreeMap;
use std::io::{Cursor, Read, Write};
use std::path::{Path, PathBuf};

use burn::prelude::Device;
use serde_json::{Value, json};

use crate::error::{KilnError, Result};
use crate::model::{ModelSpec, Network, weights};

/// The archive's model entry.
pub const CONFIG_ENTRY: &str = "config.json";
/// The archive's metadata entry.
pub const METADATA_ENTRY: &str = "metadata.json";
/// The archive's weights entry.
pub const WEIGHTS_ENTRY: &str = "model.weights.h5";
/// The Keras version whose file layout kiln writes (and reads).
pub const KERAS_FORMAT_VERSION: &str = "3.15.1";

fn bad(path: &Path, entry: &str, message: impl Into<String>) -> KilnError {
    KilnError::KerasFile {
        path: path.to_path_buf(),
        entry: entry.to_string(),
        message: message.into(),
    }
}

/// The `.keras` file of a kiln model named `name`, as bytes.
///
/// # Errors
/// [`KilnError::KerasFile`] (entry `config.json` or `model.weights.h5`) for a model Keras
/// cannot be given: a shared layer, a layer whose weights kiln cannot place in Keras' file.
pub fn to_bytes(spec: &ModelSpec, net: &Network, name: &str) -> Result<Vec<u8>> {
    let here = Path::new(name);
    let config = to_keras::model_config(spec, name).map_err(|m| bad(here, CONFIG_ENTRY, m))?;
    let paths: BTreeMap<String, String> = paths::weight_paths(spec)
        .map_err(|m| bad(here, WEIGHTS_ENTRY, m))?
        .into_iter()
        .collect();
    let datasets = weights::keras_weights(spec, net)
        .into_iter()
        .map(|(n, shape, values)| (paths[&n].clone(), shape, values))
        .collect();
    let h5 =
        h5::write(datasets, &paths::empty_groups(spec)).map_err(|m| bad(here, WEIGHTS_ENTRY, m))?;
    let metadata = json!({"keras_version": KERAS_FORMAT_VERSION,
                          "kiln_version": env!("CARGO_PKG_VERSION")});
    let entries: [(&str, Vec<u8>); 3] = [
        (METADATA_ENTRY, serde_json::to_vec(&metadata).expect("json")),
        (CONFIG_ENTRY, serde_json::to_vec(&config).expect("json")),
        (WEIGHTS_ENTRY, h5),
    ];
    zip_stored(&entries).map_err(|e| bad(here, "zip", e.to_string()))
}

/// A zip archive of `entries` (name, bytes), stored uncompressed as Keras writes `.keras`
/// files (for tools and tests that assemble one).
///
/// # Errors
/// The zip writer's error (an entry over 4 GiB without zip64 support, in practice none).
pub fn zip_stored(entries: &[(&str, Vec<u8>)]) -> zip::result::ZipResult<Vec<u8>> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(entries.iter().any(|(_, b)| b.len() >= u32::MAX as usize));
    for (name, bytes) in entries {
        w.start_file(*name, opts)?;
        w.write_all(bytes)?;
    }
    Ok(w.finish()?.into_inner())
}

/// A model read from a `.keras` file.
#[derive(Debug)]
pub struct KerasModel {
    /// The file.
    pub path: PathBuf,
    /// The model's name in the file.
    pub name: String,
    /// The `[model]` table (kiln reads it with [`ModelSpec::from_toml`]).
    pub model: toml::Table,
    /// The model, checked.
    pub spec: ModelSpec,
    /// The `[compile]` table of the file's `compile_config` (`None`: saved uncompiled).
    pub compile: Option<toml::Table>,
    /// The weights, by kiln name (`dense/kernel`): Keras shape and values.
    pub weights: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
}

impl KerasModel {
    /// The network with the file's weights.
    ///
    /// # Errors
    /// None in practice: [`read`] has checked every weight.
    pub fn network(&self, device: &Device) -> Result<Network> {
        self.network_for(&self.spec, device)
    }

    /// A network for `spec` (a model with the same layers as the file's) with the file's
    /// weights, as Keras' `model.load_weights` fills a model.
    ///
    /// # Errors
    /// [`KilnError::Weights`] naming a weight `spec` needs that the file lacks or holds with
    /// another shape.
    pub fn network_for(&self, spec: &ModelSpec, device: &Device) -> Result<Network> {
        let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
            match self.weights.get(name) {
                Some((s, v)) if s == shape => Ok(v.clone()),
                _ => Err(KilnError::Weights {
                    path: self.path.clone(),
                    message: format!(
                        "the file's model has no weight `{name}` of shape {shape:?}; the \
                         weights must come from a model with the same layers"
                    ),
                }),
            }
        };
        weights::load_with(spec, device, &get)
    }
}

/// The entries of the zip archive `bytes` (read from `path`), by name.
fn unzip(path: &Path, bytes: Vec<u8>) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| {
        bad(
            path,
            "zip",
            format!("not a readable zip archive ({e}); a .keras file is the zip Keras' model.save writes"),
        )
    })?;
    let mut out = BTreeMap::new();
    for i in 0..archive.len() {
        let mut f = archive
            .by_index(i)
            .map_err(|e| bad(path, &format!("entry {i}"), e.to_string()))?;
        let name = f
            .name()
            .map_err(|e| bad(path, &format!("entry {i}"), e.to_string()))?
            .to_string();
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).map_err(|e| {
            bad(
                path,
                &name,
                format!("cannot be read: {e} (stored and deflate entries are read)"),
            )
        })?;
        out.insert(name, buf);
    }
    Ok(out)
}

/// A config error of the `[model]` table read from a file, naming the layer (`layer "lstm"
/// (LSTM): …`) instead of kiln's `model.layers[4]` key.
fn named(model: &toml::Table, e: KilnError) -> String {
    let KilnError::Config { key, message, .. } = &e else {
        return e.to_string();
    };
    let index = key
        .strip_prefix("model.layers[")
        .and_then(|r| r.split(']').next())
        .and_then(|i| i.parse::<usize>().ok());
    let layer = index.and_then(|i| model["layers"].as_array()?.get(i)?.as_table());
    match layer {
        Some(l) => {
            let rest = key.split_once(']').map_or("", |(_, f)| f);
            // kiln's key may already carry the class: `model.layers[4] (LSTM)`.
            let rest = match rest.strip_prefix(" (") {
                Some(r) => r.split_once(')').map_or("", |(_, f)| f),
                None => rest,
            };
            let field = rest.trim_start_matches('.');
            let name = l.get("name").and_then(toml::Value::as_str).unwrap_or("?");
            let class = l.get("type").and_then(toml::Value::as_str).unwrap_or("?");
            let at = if field.is_empty() {
                String::new()
            } else {
                format!(" {field}")
            };
            format!("layer \"{name}\" ({class}){at}: {message}")
        }
        None => e.to_string(),
    }
}

/// Reads the `.keras` file (or legacy `.h5` model file, told by its first bytes) at `path`: its model (checked by kiln's config reader), compile
/// config and weights (every weight present with the shape the model needs, and no weight the
/// model lacks).
///
/// # Errors
/// [`KilnError::KerasFile`] naming the entry: not a zip (or truncated), `config.json` or
/// `model.weights.h5` missing or unreadable, a layer kiln does not have or an argument it would
/// ignore (with the layer's name and class), a weight missing or of another shape.
pub fn read(path: &Path) -> Result<KerasModel> {
    let bytes = std::fs::read(path).map_err(|e| KilnError::io(path, e))?;
    read_bytes(path, bytes)
}

/// [`read`] on the bytes of a `.keras` file (`path` names it in errors).
///
/// # Errors
/// As [`read`].
pub fn read_bytes(path: &Path, bytes: Vec<u8>) -> Result<KerasModel> {
    if bytes.starts_with(HDF5_SIGNATURE) {
        return read_legacy(path, bytes);
    }
    let mut entries = unzip(path, bytes)?;
    let config = entries
        .remove(CONFIG_ENTRY)
        .ok_or_else(|| bad(path, CONFIG_ENTRY, "missing: not a Keras 3 .keras file"))?;
    let (config, name, model, spec) = model_of(path, CONFIG_ENTRY, &config)?;
    let compile = from_keras::compile_table(&config["compile_config"])
        .map_err(|m| bad(path, CONFIG_ENTRY, m))?;
    let h5 = entries
        .remove(WEIGHTS_ENTRY)
        .ok_or_else(|| bad(path, WEIGHTS_ENTRY, "missing (only .h5 weights are read)"))?;
    let h5 = h5::H5::parse(h5).map_err(|m| bad(path, WEIGHTS_ENTRY, m))?;
    let weights = read_weights(&spec, &h5).map_err(|m| bad(path, WEIGHTS_ENTRY, m))?;
    Ok(KerasModel {
        path: path.to_path_buf(),
        name,
        model,
        spec,
        compile,
        weights,
    })
}

/// The serialized model `json` (the file's `entry`): the parsed JSON, the model's name, its
/// `[model]` table and spec, checked by kiln's config reader.
///
/// # Errors
/// [`KilnError::KerasFile`] at `entry`: not JSON, or a model kiln cannot import.
fn model_of(
    path: &Path,
    entry: &str,
    json: &[u8],
) -> Result<(Value, String, toml::Table, ModelSpec)> {
    let config: Value = serde_json::from_slice(json)
        .map_err(|e| bad(path, entry, format!("not valid JSON: {e}")))?;
    let name = config["config"]["name"]
        .as_str()
        .unwrap_or("model")
        .to_string();
    let model = from_keras::model_table(&config).map_err(|m| bad(path, entry, m))?;
    let spec = ModelSpec::from_toml(&model).map_err(|e| bad(path, entry, named(&model, e)))?;
    Ok((config, name, model, spec))
}

/// The first bytes of an HDF5 file (a legacy `.h5` model).
const HDF5_SIGNATURE: &[u8] = b"\x89HDF\r\n\x1a\n";

/// A legacy `.h5` model file ([`legacy`]): entries are the file's attributes and groups.
fn read_legacy(path: &Path, bytes: Vec<u8>) -> Result<KerasModel> {
    let h5 = h5::H5::parse(bytes).map_err(|m| bad(path, "hdf5", m))?;
    let text = h5.attr_string("", "model_config").ok_or_else(|| {
        bad(
            path,
            "model_config",
            "missing: a weights-only .h5 file (model.save_weights) has no model; save the \
             whole model (model.save)",
        )
    })?;
    let (_, name, model, spec) = model_of(path, "model_config", text.as_bytes())?;
    let training = h5
        .attr_string("", "training_config")
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .unwrap_or(Value::Null);
    let compile = from_keras::compile_table(&legacy::compile_config(&training))
        .map_err(|m| bad(path, "training_config", m))?;
    let weights = legacy::weights(&spec, &h5).map_err(|m| bad(path, "model_weights", m))?;
    Ok(KerasModel {
        path: path.to_path_buf(),
        name,
        model,
        spec,
        compile,
        weights,
    })
}

/// Every weight of `spec` from the weights file, checked against the shape kiln needs; a
/// `vars` group holding more datasets than kiln reads is refused (a weight kiln would drop).
fn read_weights(
    spec: &ModelSpec,
    h5: &h5::H5,
) -> std::result::Result<BTreeMap<String, h5::Array>, String> {
    let shapes: BTreeMap<String, Vec<usize>> = spec
        .layers()
        .iter()
        .enumerate()
        .flat_map(|(i, l)| {
            spec.own_weights(i)
                .into_iter()
                .map(move |(w, _)| (format!("{}/{}", l.name, w.name), w.shape))
        })
        .collect();
    let mut per_group: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for (name, path) in paths::weight_paths(spec)? {
        let (shape, values) = h5
            .f32s(&path)?
            .ok_or_else(|| format!("{path}: missing; the model needs `{name}` there"))?;
        if shape != shapes[&name] {
            return Err(format!(
                "{path} (`{name}`) has shape {shape:?}, the model in config.json needs {:?}",
                shapes[&name]
            ));
        }
        let group = path.rsplit_once('/').map_or("", |g| g.0).to_string();
        *per_group.entry(group).or_insert(0) += 1;
        out.insert(name, (shape, values));
    }
    for (group, n) in per_group {
        let found = h5.datasets_in(&group).len();
        if found != n {
            return Err(format!(
                "{group} holds {found} weights, kiln's layer has {n}: a weight kiln would drop"
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
