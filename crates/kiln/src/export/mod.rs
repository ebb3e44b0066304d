//! Export: a trained run as a numbered version directory that `kiln serve` (TF Serving's
//! layout) and ONNX runtimes read.
//!
//! `export(run_dir, opts)` writes `OUT/<name>/<version>/`:
//!
//! | file | content |
//! |---|---|
//! | `model.onnx` | the inference graph, ONNX opset 17 ([`onnx`]); `--format onnx` only |
//! | `model.keras` | Keras 3's model file ([`crate::keras_file`]); `--format keras` only |
//! | `model.tflite` | a TensorFlow Lite flatbuffer, float32 ([`tflite`]); `--format tflite` only |
//! | `model.safetensors` | the weights (Keras names and layouts, as the run directory's) |
//! | `model.toml` | `name` and the `[model]` table (the layer spec) |
//! | `signature.json` | the `serving_default` signature, as a SavedModel's ([`signature`]) |
//!
//! The model is the Keras model alone: preprocessing of the run's input pipeline (`rescale`,
//! `map` ops) is not part of it, and a `from_logits` model outputs logits, as a Keras model
//! exported with `model.export()` does. The directory is written under a temporary name and
//! renamed into place, so a server polling `OUT/<name>/` never sees half a version.

pub mod onnx;
pub use crate::onnx::proto as onnx_proto;
pub mod servable;
pub mod signature;
pub mod tflite;

use std::path::{Path, PathBuf};

use burn::prelude::Device;

use crate::config::RunConfig;
use crate::error::{KilnError, Result};
use crate::model::weights;
use crate::run_dir::{DirLock, RunDir};

pub use servable::Servable;
pub use signature::SignatureDefMap;

/// File name of the ONNX graph in a version directory.
pub const ONNX_FILE: &str = "model.onnx";
/// File name of the TensorFlow Lite model in a version directory.
pub const TFLITE_FILE: &str = "model.tflite";
/// File name of the Keras model in a version directory.
pub const KERAS_FILE: &str = "model.keras";
/// File name of the weights in a version directory.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// File name of the model spec in a version directory.
pub const MODEL_SPEC_FILE: &str = "model.toml";
/// File name of the signature in a version directory.
pub const SIGNATURE_FILE: &str = "signature.json";

/// What `kiln export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExportFormat {
    /// `model.onnx` plus the files `kiln serve` reads.
    #[default]
    Onnx,
    /// Only the files `kiln serve` reads (weights, spec, signature).
    Safetensors,
    /// `model.keras` (for `keras.saving.load_model`) plus the files `kiln serve` reads.
    Keras,
    /// `model.tflite` (TensorFlow Lite, float32) plus the files `kiln serve` reads.
    Tflite,
}

impl std::str::FromStr for ExportFormat {
    type Err = KilnError;
    fn from_str(s: &str) -> Result<ExportFormat> {
        match s {
            "onnx" => Ok(ExportFormat::Onnx),
            "safetensors" => Ok(ExportFormat::Safetensors),
            "keras" => Ok(ExportFormat::Keras),
            "tflite" => Ok(ExportFormat::Tflite),
            other => Err(KilnError::config(
                "--format",
                format!(
                    "unknown export format \"{other}\"; allowed: onnx, keras, tflite, safetensors"
                ),
            )),
        }
    }
}

/// Options of [`export`].
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// What to write.
    pub format: ExportFormat,
    /// The version number (a positive integer); default: one more than the largest version
    /// already in `OUT/<name>/`, or 1.
    pub version: Option<u64>,
    /// The base directory `OUT`; default: `<run_dir>/export`.
    pub out: Option<PathBuf>,
    /// The model name (the directory under `OUT` and the name clients use); default: the
    /// run's `name`.
    pub name: Option<String>,
    /// How `--format tflite` stores kernels (float32 by default).
    pub quantization: crate::tflite::Quantization,
    /// Reads the representative examples a full-integer model is calibrated on (values in
    /// Keras' layout, count) from the run directory, e.g. `crate::run::representative_set`;
    /// called only once the model is known to export.
    pub representative: Option<Representative>,
}

/// Reads a run directory's representative examples: values in Keras' layout and their count.
pub type Representative = fn(&Path) -> Result<(Vec<f32>, usize)>;

/// What [`export`] wrote.
#[derive(Debug, Clone)]
pub struct Exported {
    /// The model name.
    pub name: String,
    /// The version number.
    pub version: u64,
    /// `OUT/<name>` (the `--model-base-path` for `kiln serve`).
    pub base_path: PathBuf,
    /// `OUT/<name>/<version>`.
    pub dir: PathBuf,
    /// The files written, in the version directory.
    pub files: Vec<PathBuf>,
}

/// Checks a model name as TF Serving clients and `kiln serve` use it in URLs: 1 to 255
/// characters from `[A-Za-z0-9_.-]`, without `..` (so a name can never climb out of a
/// directory) and not `.`.
///
/// # Errors
/// A message saying what is wrong.
pub fn check_model_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() || name.len() > 255 {
        return Err(format!(
            "model name must have 1 to 255 characters, got {}",
            name.len()
        ));
    }
    if name == "." || name.contains("..") {
        return Err(format!(
            "model name {name:?} is not allowed: it must not be \".\" or contain \"..\""
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "model name {name:?} has the character {c:?}; use only letters, digits, '_', '.' and '-'"
        ));
    }
    Ok(())
}

/// The numbered version directories in `base` (names that are decimal integers ≥ 1 without
/// leading zeros), sorted; other entries are ignored. An absent `base` has none.
///
/// # Errors
/// [`KilnError::Io`] when `base` exists but cannot be listed.
pub fn versions_in(base: &Path) -> Result<Vec<u64>> {
    let entries = match std::fs::read_dir(base) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(KilnError::io(base, e)),
    };
    let mut out: Vec<u64> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| parse_version(&e.file_name().to_string_lossy()))
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// A version directory's number: a decimal integer ≥ 1 without a sign or leading zeros.
pub fn parse_version(name: &str) -> Option<u64> {
    if name.is_empty() || name.len() > 19 || name.starts_with('0') {
        return None;
    }
    if !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// Exports the run in `run_dir` as `OUT/<name>/<version>/` (see the module docs).
///
/// # Errors
/// [`KilnError::MissingData`] when `run_dir` is not a run directory; config and weights errors
/// of the run; [`KilnError::Config`] for an invalid name or version, or a version that already
/// exists (`--version`); [`KilnError::Io`] when the directory cannot be written;
/// [`KilnError::RunDirLocked`] when OUT is inside `run_dir` (the default) and another process
/// (a `kiln train` of the run, another export) is writing it.
pub fn export(run_dir: &Path, opts: &ExportOptions) -> Result<Exported> {
    let dir = RunDir::open(run_dir)?;
    // Writing into the run directory (the default OUT): one writer at a time, as `kiln train`.
    let lock = writes_into(opts.out.as_deref(), run_dir)
        .then(|| DirLock::acquire(run_dir, "kiln export", "export elsewhere with --out DIR"))
        .transpose()?;
    if let Some(w) = lock.as_ref().and_then(DirLock::warning) {
        eprintln!("{w}");
    }
    let cfg = RunConfig::load(&dir.config())?;
    let name = opts.name.clone().unwrap_or_else(|| cfg.name.clone());
    check_model_name(&name).map_err(|m| {
        KilnError::config(
            if opts.name.is_some() {
                "--name"
            } else {
                "name"
            },
            format!("{m} (pass --name to export under another name)"),
        )
    })?;
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| dir.path().join("export"));
    let base = out.join(&name);
    if opts.quantization != crate::tflite::Quantization::None && opts.format != ExportFormat::Tflite
    {
        return Err(KilnError::config(
            "--quantization",
            "applies to --format tflite only",
        ));
    }
    let version = match opts.version {
        Some(0) => return Err(KilnError::config("--version", "must be at least 1")),
        Some(v) => v,
        None => versions_in(&base)?.last().map_or(1, |v| v + 1),
    };
    let target = base.join(version.to_string());
    if target.exists() {
        return Err(KilnError::config(
            "--version",
            format!(
                "{} already exists; versions are never overwritten (a server may be serving \
                 it): pass another --version, or leave it out for the next number",
                target.display()
            ),
        ));
    }

    let spec = cfg.model.clone();
    let net = weights::load(&spec, &dir.weights(), &Device::flex())?;
    let keras = weights::keras_weights(&spec, &net);
    // Built before anything is written: a model that cannot be exported leaves no trace.
    let model_file = match opts.format {
        ExportFormat::Onnx => Some((
            ONNX_FILE,
            onnx::to_bytes(&name, &spec, &keras, version as i64)?,
        )),
        ExportFormat::Keras => Some((KERAS_FILE, crate::keras_file::to_bytes(&spec, &net, &name)?)),
        ExportFormat::Tflite => Some((
            TFLITE_FILE,
            tflite::to_bytes(
                &name,
                &spec,
                &keras,
                opts.quantization,
                opts.representative.map(|read| move || read(run_dir)),
            )?,
        )),
        ExportFormat::Safetensors => None,
    };

    std::fs::create_dir_all(&base).map_err(|e| KilnError::io(&base, e))?;
    // Not a version name (it starts with '.'), so a polling server ignores it until the rename.
    let tmp = base.join(format!(".tmp-{version}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir(&tmp).map_err(|e| KilnError::io(&tmp, e))?;
    let written = write_version(&tmp, &name, &spec, &net, model_file);
    let files = match written {
        Ok(files) => files,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    std::fs::rename(&tmp, &target).map_err(|e| {
        let _ = std::fs::remove_dir_all(&tmp);
        KilnError::io(&target, e)
    })?;
    Ok(Exported {
        name,
        version,
        base_path: base,
        files: files.iter().map(|f| target.join(f)).collect(),
        dir: target,
    })
}

/// The values of every layer of `spec`, in order, after `inputs`' values, for a graph format
/// (`format`, e.g. "ONNX"): `layer(i, values of its inputs)` writes layer `i` and returns its
/// output value or why it cannot. Reading a recurrent layer's extra state (`NodeRef::State`)
/// is refused (`unwritten` says how to export such a model instead).
///
/// # Errors
/// [`KilnError::Config`] at `model.layers[k]`, naming the layer, its class and the reason.
pub(crate) fn layer_values<V: Clone>(
    spec: &crate::model::ModelSpec,
    inputs: &[V],
    format: &str,
    unwritten: &str,
    mut layer: impl FnMut(usize, Vec<V>) -> std::result::Result<V, String>,
) -> Result<Vec<V>> {
    use crate::model::NodeRef;
    let mut values: Vec<V> = Vec::with_capacity(spec.layers().len());
    for (i, l) in spec.layers().iter().enumerate() {
        let xs: std::result::Result<Vec<V>, String> = l
            .inputs
            .iter()
            .map(|r| match *r {
                NodeRef::Input(k) => Ok(inputs[k].clone()),
                NodeRef::Layer(j) => Ok(values[j].clone()),
                NodeRef::State(..) => Err(format!(
                    "it reads \"{}\", a state of a layer with `return_state = true`, which \
                     kiln's {format} export does not write{unwritten}",
                    spec.node_name(*r)
                )),
            })
            .collect();
        let value = xs.and_then(|xs| layer(i, xs)).map_err(|why| {
            KilnError::config(
                format!("model.layers[{}]", i + spec.inputs().len()),
                format!(
                    "layer `{}` ({}) cannot be exported to {format} because {why}",
                    l.name,
                    l.kind.class_name()
                ),
            )
        })?;
        values.push(value);
    }
    Ok(values)
}

/// Whether exporting to `out` (`None`: the default, `<run_dir>/export`) writes inside
/// `run_dir`.
fn writes_into(out: Option<&Path>, run_dir: &Path) -> bool {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    out.is_none_or(|o| absolute(o).starts_with(absolute(run_dir)))
}

/// Writes the files of one version into `dir` (`model`: the model file of the format, e.g.
/// `model.onnx`, and its bytes); returns their names.
fn write_version(
    dir: &Path,
    name: &str,
    spec: &crate::model::ModelSpec,
    net: &crate::model::Network,
    model: Option<(&'static str, Vec<u8>)>,
) -> Result<Vec<&'static str>> {
    let mut files = Vec::new();
    if let Some((file, bytes)) = model {
        std::fs::write(dir.join(file), bytes).map_err(|e| KilnError::io(dir, e))?;
        files.push(file);
    }
    weights::save(spec, net, &dir.join(WEIGHTS_FILE))?;
    files.push(WEIGHTS_FILE);
    let mut t = toml::Table::new();
    t.insert("name".into(), name.into());
    t.insert("model".into(), toml::Value::Table(spec.to_toml()));
    let text = format!(
        "# Exported by kiln {}: the model spec `kiln serve` loads with model.safetensors.\n{}",
        env!("CARGO_PKG_VERSION"),
        toml::to_string(&t).expect("model specs serialize")
    );
    std::fs::write(dir.join(MODEL_SPEC_FILE), text).map_err(|e| KilnError::io(dir, e))?;
    files.push(MODEL_SPEC_FILE);
    let sig =
        serde_json::to_vec_pretty(&SignatureDefMap::for_spec(spec)).expect("signatures serialize");
    std::fs::write(dir.join(SIGNATURE_FILE), sig).map_err(|e| KilnError::io(dir, e))?;
    files.push(SIGNATURE_FILE);
    // fsync the files before the rename makes the version visible.
    for f in &files {
        std::fs::File::open(dir.join(f))
            .and_then(|f| f.sync_all())
            .map_err(|e| KilnError::io(dir.join(f), e))?;
    }
    Ok(files)
}

#[cfg(test)]
mod tests;
