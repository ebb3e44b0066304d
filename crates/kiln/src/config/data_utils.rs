//! The pipeline keys of the data utilities: `source = "timeseries"`
//! (`timeseries_dataset_from_array`), the `pad_sequences` op, `padded_batch`, and the
//! batch-level augmentations `mix_up` and `cut_mix` of keras.io's examples.

use std::collections::BTreeMap;

use kiln_data::preprocess::Side;
use kiln_data::sources::TimeseriesOptions;
use kiln_data::{Array, Buffer, Element, PaddedShapes, Preprocess};
use serde::{Deserialize, Serialize};

use super::{PipelineConfig, Source};
use crate::error::{KilnError, Result};

/// `padded_batch = true`, or `padded_batch = { padded_shapes, padding_values }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PaddedBatchConfig {
    /// `true`: every component padded to the longest in its batch, with zeros.
    On(bool),
    /// tf.data's `padded_shapes` and `padding_values`, by component.
    Options(PaddedBatchOptions),
}

/// `padded_batch`'s arguments, by component name after `x` / `y` are selected (`x`, `y`, or
/// the model's Input / output names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaddedBatchOptions {
    /// The padded shape of a component; `-1` pads that dimension to the batch's longest.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub padded_shapes: BTreeMap<String, Vec<i64>>,
    /// The padding value of a component (default 0): an integer for `int64` components, a
    /// float for `float32` ones, as tf.data needs the component's dtype.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub padding_values: BTreeMap<String, toml::Value>,
}

/// `mix_up = { alpha, seed }` / `cut_mix = { alpha, seed }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixConfig {
    /// `λ ~ Beta(alpha, alpha)`; default 0.2 for `mix_up`, 0.25 for `cut_mix` (the examples').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// Seed; default: the run's `seed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// The `pad_sequences` op's kiln-data form; `key` is the op's config path.
pub(super) fn pad_sequences(
    component: String,
    maxlen: usize,
    padding: &str,
    truncating: &str,
    value: f64,
    key: &str,
) -> Result<Preprocess> {
    let side = |name: &str, v: &str| {
        v.parse::<Side>().map_err(|_| {
            KilnError::config(
                format!("{key}.{name}"),
                format!("\"{v}\" is not a side; allowed: \"pre\", \"post\" (Keras' names)"),
            )
        })
    };
    if maxlen == 0 {
        return Err(KilnError::config(
            format!("{key}.maxlen"),
            "must be at least 1 (the steps of every sequence)",
        ));
    }
    if !value.is_finite() {
        return Err(KilnError::config(
            format!("{key}.value"),
            "must be a finite number",
        ));
    }
    Ok(Preprocess::PadSequences {
        component,
        maxlen,
        padding: side("padding", padding)?,
        truncating: side("truncating", truncating)?,
        value,
    })
}

impl PipelineConfig {
    /// The window arguments of a `timeseries` source.
    pub fn timeseries_options(&self) -> TimeseriesOptions {
        TimeseriesOptions {
            sequence_length: self.sequence_length.unwrap_or(0),
            sequence_stride: self.sequence_stride.unwrap_or(1),
            sampling_rate: self.sampling_rate.unwrap_or(1),
            start_index: self.start_index.unwrap_or(0),
            end_index: self.end_index,
        }
    }

    /// The timeseries keys: only with `source = "timeseries"`, which needs `sequence_length`,
    /// one data file and at most one targets file, and counts of at least 1.
    pub(super) fn validate_timeseries(&self, key: &str, files: usize) -> Result<()> {
        let err = |k: &str, msg: String| Err(KilnError::config(format!("{key}.{k}"), msg));
        let given = [
            ("sequence_length", self.sequence_length),
            ("sequence_stride", self.sequence_stride),
            ("sampling_rate", self.sampling_rate),
            ("start_index", self.start_index),
            ("end_index", self.end_index),
        ];
        if self.source != Source::Timeseries {
            return match given.iter().find(|(_, v)| v.is_some()) {
                Some((k, _)) => err(
                    k,
                    format!(
                        "applies to source = \"timeseries\" only, not \"{}\"",
                        self.source.name()
                    ),
                ),
                None => Ok(()),
            };
        }
        if files > 2 {
            return err(
                "files",
                format!(
                    "source = \"timeseries\" takes the data .npy file and optionally a targets \
                     .npy file, not {files} files"
                ),
            );
        }
        if self.sequence_length.is_none() {
            return err(
                "sequence_length",
                "source = \"timeseries\" needs sequence_length, the time steps per window".into(),
            );
        }
        for (k, v) in &given[..3] {
            if *v == Some(0) {
                return err(k, "must be at least 1".into());
            }
        }
        if let (Some(end), start) = (self.end_index, self.start_index.unwrap_or(0))
            && end <= start
        {
            return err(
                "end_index",
                format!("{end} must be larger than start_index {start}"),
            );
        }
        Ok(())
    }

    /// `padded_batch`, `mix_up` and `cut_mix`: shapes of sizes >= -1, number padding values,
    /// the mixes in `data.train` only, one of them, with a positive `alpha`.
    pub(super) fn validate_batching(&self, key: &str) -> Result<()> {
        let err = |k: &str, msg: String| Err(KilnError::config(format!("{key}.{k}"), msg));
        if let Some(PaddedBatchConfig::Options(o)) = &self.padded_batch {
            self.padded_shapes(key)?;
            self.padding_values(key)?;
            if o.padded_shapes.is_empty() && o.padding_values.is_empty() {
                return err(
                    "padded_batch",
                    "give padded_shapes and/or padding_values, or write padded_batch = true".into(),
                );
            }
        }
        for (name, mix) in [("mix_up", &self.mix_up), ("cut_mix", &self.cut_mix)] {
            let Some(m) = mix else { continue };
            if key != "data.train" {
                return err(
                    name,
                    format!("{name} augments training batches; it applies to data.train only"),
                );
            }
            if let Some(a) = m.alpha
                && !(a.is_finite() && a > 0.0)
            {
                return err(&format!("{name}.alpha"), format!("must be > 0, got {a}"));
            }
        }
        if self.mix_up.is_some() && self.cut_mix.is_some() {
            return err(
                "cut_mix",
                "give mix_up or cut_mix, not both (the examples use one each)".into(),
            );
        }
        Ok(())
    }

    /// `padded_batch`'s `padded_shapes` (`None` for `padded_batch = true`).
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `key.padded_batch.padded_shapes.<name>` for a size below -1.
    pub fn padded_shapes(&self, key: &str) -> Result<Option<PaddedShapes>> {
        let Some(PaddedBatchConfig::Options(o)) = &self.padded_batch else {
            return Ok(None);
        };
        let mut shapes = PaddedShapes::new();
        for (name, dims) in &o.padded_shapes {
            if let Some(d) = dims.iter().find(|&&d| d < -1) {
                return Err(KilnError::config(
                    format!("{key}.padded_batch.padded_shapes.{name}"),
                    format!("{d} is not a size; give sizes >= 0, or -1 for the batch's longest"),
                ));
            }
            let dims: Vec<Option<usize>> = dims.iter().map(|&d| usize::try_from(d).ok()).collect();
            shapes = shapes.with(name.as_str(), dims);
        }
        Ok(Some(shapes))
    }

    /// `padded_batch`'s `padding_values` as scalars: integers `int64`, floats `float32`.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `key.padded_batch.padding_values.<name>` for a value that
    /// is not a number.
    pub fn padding_values(&self, key: &str) -> Result<Option<Element>> {
        let Some(PaddedBatchConfig::Options(o)) = &self.padded_batch else {
            return Ok(None);
        };
        let mut values = Element::new();
        for (name, v) in &o.padding_values {
            let data = match v {
                toml::Value::Integer(i) => Buffer::I64(vec![*i]),
                toml::Value::Float(f) => Buffer::F32(vec![*f as f32]),
                other => {
                    return Err(KilnError::config(
                        format!("{key}.padded_batch.padding_values.{name}"),
                        format!(
                            "{other} is not a number; give an integer for int64 components, a \
                             float for float32 ones"
                        ),
                    ));
                }
            };
            let scalar = Array::scalar(data).map_err(|e| KilnError::config(key, e.to_string()))?;
            values.insert(name.as_str(), scalar);
        }
        Ok(Some(values))
    }
}
