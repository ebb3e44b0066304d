//! `[data]`: where the examples come from and how the input pipeline runs.

use std::path::{Path, PathBuf};

use kiln_data::Parallelism;
use serde::{Deserialize, Serialize};

use super::pipeline::PipelineConfig;
use crate::error::{KilnError, Result};

/// The keys of the `[data]` arrays form that the `[data.train]` / `[data.validation]` /
/// `[data.test]` pipeline tables replace (`data_dir` is shared by both forms).
pub const ARRAY_FORM_KEYS: [&str; 9] = [
    "format",
    "train_images",
    "train_labels",
    "test_images",
    "test_labels",
    "rescale",
    "num_parallel_calls",
    "prefetch",
    "shuffle_buffer_size",
];

/// The pipeline tables of `[data]`.
pub const PIPELINE_KEYS: [&str; 3] = ["train", "validation", "test"];

/// Where Debian's `dataset-fashion-mnist` package puts the files.
pub const DEBIAN_FASHION_MNIST: &str = "/usr/share/datasets/fashion-mnist";

fn default_dir() -> PathBuf {
    PathBuf::from(DEBIAN_FASHION_MNIST)
}
fn default_format() -> String {
    "idx".into()
}
fn s(v: &str) -> String {
    v.to_string()
}
fn train_images() -> String {
    s("train-images-idx3-ubyte.gz")
}
fn train_labels() -> String {
    s("train-labels-idx1-ubyte.gz")
}
fn test_images() -> String {
    s("t10k-images-idx3-ubyte.gz")
}
fn test_labels() -> String {
    s("t10k-labels-idx1-ubyte.gz")
}
fn one() -> f64 {
    1.0
}

/// Either `"AUTOTUNE"` or a non-negative integer, as tf.data accepts for tunable knobs.
pub(super) fn parse_tunable<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        N(i64),
        S(String),
    }
    match Raw::deserialize(d) {
        Ok(Raw::S(s)) if s == "AUTOTUNE" => Ok(None),
        Ok(Raw::N(n)) if n >= 0 => Ok(Some(n as usize)),
        Ok(Raw::N(-1)) => Ok(None),
        _ => Err(serde::de::Error::custom(
            "expected \"AUTOTUNE\" or a non-negative integer",
        )),
    }
}

pub(super) fn ser_tunable<S: serde::Serializer>(
    v: &Option<usize>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match v {
        None => s.serialize_str("AUTOTUNE"),
        Some(n) => s.serialize_u64(*n as u64),
    }
}

/// The `[data]` table, in one of two forms.
///
/// * The arrays form (the keys below but `train` / `validation` / `test`): IDX files (MNIST /
///   Fashion-MNIST layout), images `[examples, height, width]` (uint8) and labels
///   `[examples]` (uint8), gzip or raw, loaded whole and sliced.
/// * The pipeline form: `[data.train]` (required), `[data.validation]` and `[data.test]`
///   tables ([`PipelineConfig`]), tf.data pipelines from any kiln-data source. Only
///   `data_dir` may be combined with them (relative `files` are inside it; default: the
///   current directory).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// File format; `"idx"`.
    #[serde(default = "default_format")]
    pub format: String,
    /// Directory holding the files (`--data-dir` overrides it).
    #[serde(default = "default_dir")]
    pub data_dir: PathBuf,
    /// Training images, relative to `data_dir`.
    #[serde(default = "train_images")]
    pub train_images: String,
    /// Training labels.
    #[serde(default = "train_labels")]
    pub train_labels: String,
    /// Test images.
    #[serde(default = "test_images")]
    pub test_images: String,
    /// Test labels.
    #[serde(default = "test_labels")]
    pub test_labels: String,
    /// Multiplies every feature (`0.00392156862745098` = 1/255 maps pixels to `[0, 1]`).
    #[serde(default = "one")]
    pub rescale: f64,
    /// Threads for the batch preprocessing `map` (`"AUTOTUNE"` = one per core).
    #[serde(
        default,
        deserialize_with = "parse_tunable",
        serialize_with = "ser_tunable"
    )]
    pub num_parallel_calls: Option<usize>,
    /// Batches prefetched on a background thread; `"AUTOTUNE"` (the default) adapts the depth at
    /// run time (kiln-data's `prefetch(AUTOTUNE)`).
    #[serde(
        default,
        deserialize_with = "parse_tunable",
        serialize_with = "ser_tunable"
    )]
    pub prefetch: Option<usize>,
    /// Shuffle buffer in examples; absent = the whole training set (a perfect shuffle, as
    /// Keras' `fit` on arrays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shuffle_buffer_size: Option<usize>,
    /// `[data.train]`: the training pipeline (pipeline form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train: Option<PipelineConfig>,
    /// `[data.validation]`: the validation pipeline, evaluated after each epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<PipelineConfig>,
    /// `[data.test]`: the test pipeline (`kiln train`'s final evaluation, `kiln evaluate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<PipelineConfig>,
}

impl DataConfig {
    /// Checks values.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `data.<key>`.
    pub fn validate(&self) -> Result<()> {
        if self.uses_pipelines() {
            return self.validate_pipelines();
        }
        if self.format != "idx" {
            return Err(KilnError::config(
                "data.format",
                format!("unknown format \"{}\"; allowed: \"idx\"", self.format),
            ));
        }
        if !(self.rescale.is_finite() && self.rescale != 0.0) {
            return Err(KilnError::config(
                "data.rescale",
                format!("must be a finite non-zero number, got {}", self.rescale),
            ));
        }
        if self.shuffle_buffer_size == Some(0) {
            return Err(KilnError::config(
                "data.shuffle_buffer_size",
                "must be at least 1",
            ));
        }
        self.check_sizes()
    }

    /// The arrays form's counts against the machine (see [`super::limits`]).
    fn check_sizes(&self) -> Result<()> {
        use super::limits::{check_memory, check_threads};
        check_threads("data.num_parallel_calls", self.num_parallel_calls)?;
        if let Some(n) = self.prefetch {
            let what = format!("prefetching {n} batches");
            check_memory("data.prefetch", &n.to_string(), &what, &[n])?;
        }
        if let Some(n) = self.shuffle_buffer_size {
            let what = "the shuffle buffer";
            check_memory("data.shuffle_buffer_size", &n.to_string(), what, &[n])?;
        }
        Ok(())
    }

    /// True in the pipeline form (a `[data.train]`, `[data.validation]` or `[data.test]`
    /// table is present).
    pub fn uses_pipelines(&self) -> bool {
        self.train.is_some() || self.validation.is_some() || self.test.is_some()
    }

    /// The pipeline tables present, with their keys.
    pub fn pipelines(&self) -> impl Iterator<Item = (&'static str, &PipelineConfig)> {
        [
            ("data.train", &self.train),
            ("data.validation", &self.validation),
            ("data.test", &self.test),
        ]
        .into_iter()
        .filter_map(|(k, p)| p.as_ref().map(|p| (k, p)))
    }

    /// Checks the pipeline form: `[data.train]` present, every table valid, and no key of the
    /// arrays form set to a value other than its default (for configs built in Rust;
    /// [`crate::RunConfig::from_toml_str`] also rejects such keys written at their default).
    fn validate_pipelines(&self) -> Result<()> {
        let defaults: DataConfig = toml::from_str("").expect("[data] has defaults for every key");
        let changed = [
            ("format", self.format != defaults.format),
            ("train_images", self.train_images != defaults.train_images),
            ("train_labels", self.train_labels != defaults.train_labels),
            ("test_images", self.test_images != defaults.test_images),
            ("test_labels", self.test_labels != defaults.test_labels),
            ("rescale", self.rescale != defaults.rescale),
            ("num_parallel_calls", self.num_parallel_calls.is_some()),
            ("prefetch", self.prefetch.is_some()),
            ("shuffle_buffer_size", self.shuffle_buffer_size.is_some()),
        ];
        if let Some((key, _)) = changed.iter().find(|(_, c)| *c) {
            return Err(form_conflict(key, self));
        }
        if self.train.is_none() {
            return Err(KilnError::config(
                "data.train",
                "the pipeline form needs a [data.train] table ([data.validation] and [data.test] \
                 are optional)",
            ));
        }
        for (key, p) in self.pipelines() {
            p.validate(key)?;
        }
        Ok(())
    }

    /// The map's parallelism.
    pub fn parallelism(&self) -> Parallelism {
        match self.num_parallel_calls {
            None => Parallelism::Autotune,
            Some(0) | Some(1) => Parallelism::Sequential,
            Some(n) => Parallelism::Fixed(n),
        }
    }

    /// Prefetch buffer in batches: the configured number, or autotuned.
    pub fn prefetch_buffer(&self) -> kiln_data::BufferSize {
        match self.prefetch {
            Some(n) => kiln_data::BufferSize::Fixed(n),
            None => kiln_data::BufferSize::Autotune,
        }
    }

    /// `data_dir / file`.
    pub fn path(&self, file: &str) -> PathBuf {
        Path::new(&self.data_dir).join(file)
    }
}

/// The error for an arrays-form key (`data.rescale`, …) next to pipeline tables.
pub(super) fn form_conflict(key: &str, data: &DataConfig) -> KilnError {
    let table = data
        .pipelines()
        .next()
        .map(|(k, _)| k)
        .unwrap_or("data.train");
    let hint = match key {
        "rescale" => "; move it into the pipeline as map = [{ op = \"rescale\", scale = ... }]",
        "prefetch" | "num_parallel_calls" => "; set it inside each pipeline table instead",
        "shuffle_buffer_size" => "; use shuffle = { buffer_size = ... } inside the pipeline table",
        _ => "; name the files with the pipeline's `files` key",
    };
    KilnError::config(
        format!("data.{key}"),
        format!(
            "cannot be combined with [{table}]: the [data.train] / [data.validation] / \
             [data.test] tables replace the [data] arrays keys ({}){hint}",
            ARRAY_FORM_KEYS.join(", ")
        ),
    )
}
