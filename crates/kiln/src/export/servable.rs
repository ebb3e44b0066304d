//! Loading an exported version directory for inference (what `kiln serve` runs).
//!
//! A [`Servable`] is the model spec (`model.toml`), the weights (`model.safetensors`) and the
//! signature (`signature.json`) of one version directory, on a Burn device. Its forward pass is
//! kiln's own ([`crate::model::Network::forward`] in inference mode, the same as `kiln
//! predict` and `Model::predict`); the ONNX file beside them is for other runtimes.

use std::path::{Path, PathBuf};

use burn::prelude::*;

use super::signature::{DEFAULT_SIGNATURE, SignatureDefMap};
use super::{MODEL_SPEC_FILE, SIGNATURE_FILE, WEIGHTS_FILE};
use crate::error::{KilnError, Result};
use crate::model::{ModelSpec, Network, weights};

/// Largest `model.toml` / `signature.json` read (1 MiB): anything larger is not kiln's.
const MAX_SMALL_FILE: u64 = 1 << 20;

/// Checks that `dir/name` is a regular file (not a symbolic link, so that nothing outside the
/// directory is ever opened through one) and returns its path and size in bytes.
///
/// # Errors
/// [`KilnError::Weights`] naming the file: missing, a link, not a regular file.
pub fn regular_file(dir: &Path, name: &str) -> Result<(PathBuf, u64)> {
    let path = dir.join(name);
    let bad = |message: String| KilnError::Weights {
        path: path.clone(),
        message,
    };
    let meta = std::fs::symlink_metadata(&path)
        .map_err(|e| bad(format!("cannot read it ({e}); export the model again")))?;
    if meta.file_type().is_symlink() {
        return Err(bad(
            "is a symbolic link; kiln reads only regular files inside the version directory".into(),
        ));
    }
    if !meta.is_file() {
        return Err(bad("is not a regular file".into()));
    }
    Ok((path, meta.len()))
}

/// Reads `dir/name` after [`regular_file`]'s checks, refusing files larger than `limit` bytes.
///
/// # Errors
/// As [`regular_file`]; too large or unreadable.
pub fn read_inside(dir: &Path, name: &str, limit: u64) -> Result<Vec<u8>> {
    let (path, len) = regular_file(dir, name)?;
    if len > limit {
        return Err(KilnError::Weights {
            path,
            message: format!("is {len} bytes, more than the {limit} bytes allowed"),
        });
    }
    std::fs::read(&path).map_err(|e| KilnError::Weights {
        path: path.clone(),
        message: format!("cannot read it ({e})"),
    })
}

/// One exported model version, loaded for inference.
#[derive(Debug)]
pub struct Servable {
    name: String,
    dir: PathBuf,
    spec: ModelSpec,
    signature: SignatureDefMap,
    net: Network,
    device: Device,
}

impl Servable {
    /// Loads the version directory `dir` (written by [`super::export`]) onto `device`.
    ///
    /// # Errors
    /// [`KilnError::Weights`] naming the file when one is missing, a symbolic link, corrupt or
    /// does not match the others (a signature for another model, weights of another shape);
    /// [`KilnError::Config`] for an invalid model spec.
    pub fn load(dir: &Path, device: Device) -> Result<Servable> {
        let text = read_inside(dir, MODEL_SPEC_FILE, MAX_SMALL_FILE)?;
        let spec_path = dir.join(MODEL_SPEC_FILE);
        let corrupt = |path: &Path, message: String| KilnError::Weights {
            path: path.to_path_buf(),
            message,
        };
        let text =
            String::from_utf8(text).map_err(|_| corrupt(&spec_path, "is not UTF-8 text".into()))?;
        let table: toml::Table = toml::from_str(&text)
            .map_err(|e| corrupt(&spec_path, format!("is not valid TOML: {}", e.message())))?;
        let name = table
            .get("name")
            .and_then(|v| v.as_str())
            .ok_or_else(|| corrupt(&spec_path, "has no `name`".into()))?
            .to_string();
        let model = table
            .get("model")
            .and_then(|v| v.as_table())
            .ok_or_else(|| corrupt(&spec_path, "has no [model] table".into()))?;
        let spec = ModelSpec::from_toml(model).map_err(|e| e.in_file(&spec_path))?;
        if spec.has_several_outputs() {
            return Err(corrupt(
                &spec_path,
                format!(
                    "describes a model with several outputs {:?}; kiln serve returns one \
                     output so far (export it as ONNX, whose graph has every output)",
                    spec.output_names()
                ),
            ));
        }

        let sig_path = dir.join(SIGNATURE_FILE);
        let bytes = read_inside(dir, SIGNATURE_FILE, MAX_SMALL_FILE)?;
        let signature: SignatureDefMap = serde_json::from_slice(&bytes)
            .map_err(|e| corrupt(&sig_path, format!("is not a signature file: {e}")))?;
        let expected = SignatureDefMap::for_spec(&spec);
        if signature.signature_def.get(DEFAULT_SIGNATURE)
            != expected.signature_def.get(DEFAULT_SIGNATURE)
        {
            return Err(corrupt(
                &sig_path,
                format!(
                    "its `{DEFAULT_SIGNATURE}` signature does not match {MODEL_SPEC_FILE} \
                     (input {:?}, output {:?}); export the model again",
                    spec.input_shape(),
                    spec.output_shape()
                ),
            ));
        }
        let (weights_path, _) = regular_file(dir, WEIGHTS_FILE)?;
        let net = weights::load(&spec, &weights_path, &device)?;
        Ok(Servable {
            name,
            dir: dir.to_path_buf(),
            spec,
            signature,
            net,
            device,
        })
    }

    /// The model name recorded at export.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The version directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The model spec.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// The signatures (`signature.json`).
    pub fn signature(&self) -> &SignatureDefMap {
        &self.signature
    }

    /// Shape of one input example (no batch axis; images `[height, width, channels]`).
    pub fn input_shape(&self) -> &[usize] {
        self.spec.input_shape()
    }

    /// Shape of one output (no batch axis).
    pub fn output_shape(&self) -> &[usize] {
        self.spec.output_shape()
    }

    /// Model outputs for `batch` examples.
    ///
    /// # Shapes
    /// - `x`: `[batch, ...input_shape]` row-major float32 (images NHWC, as Keras users give
    ///   them).
    /// - returns `[batch, ...output_shape]` row-major.
    ///
    /// Each example's output does not depend on the other examples of the batch (inference
    /// mode: no batch statistics, no dropout).
    ///
    /// # Errors
    /// [`KilnError::Shape`] when `x.len()` is not `batch` times the input's element count.
    pub fn predict(&self, x: Vec<f32>, batch: usize) -> Result<Vec<f32>> {
        if let Some(names) = crate::batch::input_components(&self.spec) {
            return Err(KilnError::Shape(format!(
                "this model has {} inputs ({}); serving feeds one input so far",
                names.len(),
                names.join(", ")
            )));
        }
        let per: usize = self.input_shape().iter().product();
        if x.len() != batch * per {
            return Err(KilnError::Shape(format!(
                "{} values for {batch} examples of shape {:?}; expected {}",
                x.len(),
                self.input_shape(),
                batch * per
            )));
        }
        if batch == 0 {
            return Ok(Vec::new());
        }
        let mut shape = vec![batch];
        shape.extend_from_slice(self.input_shape());
        let array = kiln_data::Array::new(shape, kiln_data::Buffer::F32(x))?;
        let (act, _) = crate::batch::features(&array, &self.spec, &self.device)?;
        let out = self.net.forward(&self.spec, act, false).output;
        Ok(out
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .expect("float outputs"))
    }
}
