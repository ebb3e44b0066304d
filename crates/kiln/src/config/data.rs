//! `[data]`: where the examples come from and how the input pipeline runs.

use std::path::{Path, PathBuf};

use kiln_data::Parallelism;
use serde::{Deserialize, Serialize};

use crate::error::{KilnError, Result};

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
fn parse_tunable<'de, D: serde::Deserializer<'de>>(
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

fn ser_tunable<S: serde::Serializer>(
    v: &Option<usize>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match v {
        None => s.serialize_str("AUTOTUNE"),
        Some(n) => s.serialize_u64(*n as u64),
    }
}

/// The `[data]` table. Today kiln reads IDX files (MNIST / Fashion-MNIST layout): images
/// `[examples, height, width]` (uint8) and labels `[examples]` (uint8), gzip or raw.
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
}

impl DataConfig {
    /// Checks values.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `data.<key>`.
    pub fn validate(&self) -> Result<()> {
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
