//! `[data.train]`, `[data.validation]`, `[data.test]`: tf.data input pipelines described with
//! tf.data's names — a source, preprocessing ops, shuffle, batch, prefetch.
//!
//! ```toml
//! [data.train]
//! source = "idx"
//! files = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]
//! components = ["image", "label"]
//! x = "image"
//! y = "label"
//! map = [{ op = "rescale", scale = 0.00392156862745098, component = "image" }]
//! shuffle = { buffer_size = 60000, seed = 42 }
//! batch_size = 128
//! prefetch = "AUTOTUNE"
//! ```
//!
//! This module holds the tables and their checks (no file is read); `crate::pipeline` builds
//! the `Dataset`s. See docs/config.md for every key.

use std::collections::BTreeMap;

use kiln_data::preprocess::FlipMode;
use kiln_data::{DType, Normalization, Parallelism, Preprocess};
use serde::{Deserialize, Serialize};

use super::data::{parse_tunable, ser_tunable};
use super::text_ops;
pub use super::text_ops::{LookupConfig, TextVectorizationConfig};
use crate::error::{KilnError, Result};
use kiln_data::preprocess::TokenKind;

/// One value or a list, as TOML lets a key hold either (`files = "a.csv"` or `files = [...]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    /// A single value.
    One(T),
    /// A list.
    Many(Vec<T>),
}

impl<T: Clone> OneOrMany<T> {
    /// The values as a list.
    pub fn to_vec(&self) -> Vec<T> {
        match self {
            OneOrMany::One(v) => vec![v.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

impl<T: Serialize> Serialize for OneOrMany<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            OneOrMany::One(v) => v.serialize(s),
            OneOrMany::Many(v) => v.serialize(s),
        }
    }
}

/// Where the elements come from (`source = "..."`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// IDX files (MNIST layout), one file per component, sliced along the first axis
    /// (`from_tensor_slices`).
    Idx,
    /// NumPy `.npy` files, one per component, sliced along the first axis.
    Npy,
    /// CSV files with a header: `make_csv_dataset`'s reading (column types inferred), one
    /// element per row, one scalar component per column.
    Csv,
    /// TFRecord files of `tf.train.Example`s, parsed with the `features` spec.
    Tfrecord,
    /// Text files, one element `{"line": string}` per line (`TextLineDataset`).
    Text,
    /// A folder with one subfolder of images per class (`image_dataset_from_directory`):
    /// elements `{"image": uint8 [h, w, c], "label": int64}`.
    ImageFolder,
    /// A folder with one subfolder of `.txt` files per class (`text_dataset_from_directory`):
    /// elements `{"text": string, "label": ...}` (see `label_mode`).
    TextFolder,
    /// Sliding windows over a time series in a `.npy` file `[time, …]`, with an optional
    /// `.npy` file of targets (`keras.utils.timeseries_dataset_from_array`).
    Timeseries,
}

impl Source {
    /// The name as configs spell it.
    pub fn name(self) -> &'static str {
        match self {
            Source::Idx => "idx",
            Source::Npy => "npy",
            Source::Csv => "csv",
            Source::Tfrecord => "tfrecord",
            Source::Text => "text",
            Source::ImageFolder => "image_folder",
            Source::TextFolder => "text_folder",
            Source::Timeseries => "timeseries",
        }
    }
}

/// `shuffle = { buffer_size, seed, reshuffle_each_iteration }`: `Dataset.shuffle`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShuffleConfig {
    /// Elements in the shuffle buffer (at least the dataset's size for a perfect shuffle).
    pub buffer_size: usize,
    /// Seed; default: the run's `seed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// A new order every epoch (tf.data's default `true`).
    #[serde(default = "yes")]
    pub reshuffle_each_iteration: bool,
}

fn yes() -> bool {
    true
}

/// One feature of a TFRecord `features` table: `tf.io.FixedLenFeature` or
/// `tf.io.VarLenFeature`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureConfig {
    /// `"FixedLenFeature"` (default) or `"VarLenFeature"`.
    #[serde(rename = "type", default = "fixed_len_name")]
    pub kind: String,
    /// `"int64"`, `"float32"` or `"string"`.
    pub dtype: String,
    /// Shape of a fixed-length feature (`[]` for a scalar, the default).
    #[serde(default)]
    pub shape: Vec<usize>,
    /// Value(s) used when a fixed-length feature is missing; absent = required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_value: Option<toml::Value>,
}

fn fixed_len_name() -> String {
    "FixedLenFeature".into()
}

/// Keras' `axis` for `normalize`: one axis or a list (`[]` = a single mean and variance).
pub type AxisConfig = OneOrMany<i64>;

fn last_axis() -> AxisConfig {
    OneOrMany::One(-1)
}

fn default_flip() -> String {
    FlipMode::default().name().into()
}

fn multi_hot_mode() -> String {
    "multi_hot".into()
}

fn int_output_mode() -> String {
    "int".into()
}

fn default_epsilon() -> f64 {
    0.01
}

/// One entry of `map`: a preprocessing op on one component (`component` defaults to the
/// pipeline's `x`). Names and arguments follow Keras' preprocessing layers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum OpConfig {
    /// `Rescaling(scale, offset)`.
    Rescale {
        /// Component (default: the pipeline's `x`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        component: Option<String>,
        /// Multiplier.
        scale: f64,
        /// Added after scaling.
        #[serde(default)]
        offset: f64,
    },
    /// `Normalization(axis, mean, variance)`, or `adapt = true` to compute them from the
    /// training data.
    Normalize {
        /// Component (default: the pipeline's `x`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        component: Option<String>,
        /// Keras' `axis` (default `-1`; `[]` for one mean).
        #[serde(default = "last_axis")]
        axis: AxisConfig,
        /// Mean(s).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mean: Option<OneOrMany<f64>>,
        /// Variance(s) (Keras' argument).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        variance: Option<OneOrMany<f64>>,
        /// Standard deviation(s), instead of `variance`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        std: Option<OneOrMany<f64>>,
        /// Compute mean and variance over the training pipeline (`layer.adapt(ds)`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        adapt: bool,
    },
    /// `tf.one_hot(depth)`.
    OneHot {
        /// Component (default: the pipeline's `x`; usually the label).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        component: Option<String>,
        /// Number of classes.
        depth: usize,
    },
    /// `tf.cast(dtype)`.
    Cast {
        /// Component (default: the pipeline's `x`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        component: Option<String>,
        /// `"uint8"`, `"int32"`, `"int64"`, `"float32"` or `"float64"`.
        dtype: String,
    },
    /// `tf.io.decode_raw(out_type, little_endian)`: the bytes of a `string` feature as
    /// numbers (a raw pixel buffer); follow it with `reshape`.
    DecodeRaw {
        /// Component (default: the pipeline's `x`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        component: Option<String>,
        /// `"uint8"`, `"int32"`, `"int64"`, `"float32"` or `"float64"`.
        out_type: String,
        /// Byte order of multi-byte values (default `true`, as TensorFlow).
        #[serde(default = "yes")]
        little_endian: bool,
    },
    /// `tf.reshape(shape)` of one example (one `-1` allowed).
    Reshape {
        /// Component (default: the pipeline's `x`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        component: Option<String>,
        /// New shape.
        shape: Vec<i64>,
    },
    /// `RandomFlip(mode)`: training only.
    RandomFlip {
        /// Component (default: the pipeline's `x`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        component: Option<String>,
        /// `"horizontal"`, `"vertical"` or `"horizontal_and_vertical"` (default).
        #[serde(default = "default_flip")]
        mode: String,
    },
    /// `RandomCrop(height, width)`: random window in training, central one otherwise.
    RandomCrop {
        /// Component (default: the pipeline's `x`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        component: Option<String>,
        /// Window height.
        height: usize,
        /// Window width.
        width: usize,
    },
    /// `Resizing(height, width)` (bilinear).
    Resize {
        /// Component (default: the pipeline's `x`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        component: Option<String>,
        /// Output height.
        height: usize,
        /// Output width.
        width: usize,
    },
    /// Stack numeric components into one `float32` vector (CSV columns to features).
    Stack {
        /// Components to stack, in order.
        components: Vec<String>,
        /// Name of the stacked component.
        output: String,
    },
    /// `CategoryEncoding(num_tokens, output_mode)`: integer indices to vectors.
    CategoryEncoding {
        /// Component (default: the pipeline's `x`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        component: Option<String>,
        /// Number of classes.
        num_tokens: usize,
        /// `"multi_hot"` (default), `"one_hot"` or `"count"`.
        #[serde(default = "multi_hot_mode")]
        output_mode: String,
    },
    /// `Hashing(num_bins, mask_value, salt, output_mode)`: strings or integers to bins.
    Hashing {
        /// Component (default: the pipeline's `x`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        component: Option<String>,
        /// Number of bins.
        num_bins: usize,
        /// The value sent to bin 0 (a string or an integer).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mask_value: Option<toml::Value>,
        /// SipHash key: one integer or two (default: FarmHash, no key).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        salt: Option<OneOrMany<u64>>,
        /// `"int"` (default), `"one_hot"`, `"multi_hot"` or `"count"`.
        #[serde(default = "int_output_mode")]
        output_mode: String,
    },
    /// `Discretization(bin_boundaries | num_bins + adapt, epsilon, output_mode)`.
    Discretization {
        /// Component (default: the pipeline's `x`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        component: Option<String>,
        /// Increasing boundaries (`adapt` writes them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bin_boundaries: Option<Vec<f64>>,
        /// Number of bins `adapt` makes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        num_bins: Option<usize>,
        /// Error tolerance of `adapt`'s quantiles (default 0.01).
        #[serde(default = "default_epsilon")]
        epsilon: f64,
        /// `"int"` (default), `"one_hot"`, `"multi_hot"` or `"count"`.
        #[serde(default = "int_output_mode")]
        output_mode: String,
        /// Compute the boundaries from the training data.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        adapt: bool,
    },
    /// `StringLookup(...)`: strings to indices (or back, with `invert`).
    StringLookup(LookupConfig),
    /// `IntegerLookup(...)`: integers to indices (or back, with `invert`).
    IntegerLookup(LookupConfig),
    /// `TextVectorization(...)`: strings to token indices or vectors.
    TextVectorization(TextVectorizationConfig),
    /// `keras.utils.pad_sequences(maxlen, padding, truncating, value)` of one sequence.
    PadSequences {
        /// Component (default: the pipeline's `x`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        component: Option<String>,
        /// Steps of every sequence after padding or truncating.
        maxlen: usize,
        /// `"pre"` (Keras' default) or `"post"`: where short sequences are padded.
        #[serde(default = "pre")]
        padding: String,
        /// `"pre"` (Keras' default) or `"post"`: where long sequences are cut.
        #[serde(default = "pre")]
        truncating: String,
        /// The padding value (default 0).
        #[serde(default)]
        value: f64,
    },
}

fn pre() -> String {
    "pre".into()
}

/// The dtype named `name` for `cast`.
fn parse_dtype(name: &str) -> Option<DType> {
    Some(match name {
        "uint8" => DType::U8,
        "int32" => DType::I32,
        "int64" => DType::I64,
        "float32" => DType::F32,
        "float64" => DType::F64,
        _ => return None,
    })
}

impl OpConfig {
    /// The op's name (`rescale`, …).
    pub fn name(&self) -> &'static str {
        match self {
            OpConfig::Rescale { .. } => "rescale",
            OpConfig::Normalize { .. } => "normalize",
            OpConfig::OneHot { .. } => "one_hot",
            OpConfig::Cast { .. } => "cast",
            OpConfig::DecodeRaw { .. } => "decode_raw",
            OpConfig::Reshape { .. } => "reshape",
            OpConfig::RandomFlip { .. } => "random_flip",
            OpConfig::RandomCrop { .. } => "random_crop",
            OpConfig::Resize { .. } => "resize",
            OpConfig::Stack { .. } => "stack",
            OpConfig::CategoryEncoding { .. } => "category_encoding",
            OpConfig::Hashing { .. } => "hashing",
            OpConfig::Discretization { .. } => "discretization",
            OpConfig::StringLookup(_) => "string_lookup",
            OpConfig::IntegerLookup(_) => "integer_lookup",
            OpConfig::TextVectorization(_) => "text_vectorization",
            OpConfig::PadSequences { .. } => "pad_sequences",
        }
    }

    /// The `component` given, if any.
    pub fn component(&self) -> Option<&str> {
        match self {
            OpConfig::Rescale { component, .. }
            | OpConfig::Normalize { component, .. }
            | OpConfig::OneHot { component, .. }
            | OpConfig::Cast { component, .. }
            | OpConfig::DecodeRaw { component, .. }
            | OpConfig::Reshape { component, .. }
            | OpConfig::RandomFlip { component, .. }
            | OpConfig::RandomCrop { component, .. }
            | OpConfig::Resize { component, .. }
            | OpConfig::CategoryEncoding { component, .. }
            | OpConfig::Hashing { component, .. }
            | OpConfig::Discretization { component, .. } => component.as_deref(),
            OpConfig::StringLookup(c) | OpConfig::IntegerLookup(c) => c.component.as_deref(),
            OpConfig::TextVectorization(c) => c.component.as_deref(),
            OpConfig::PadSequences { component, .. } => component.as_deref(),
            OpConfig::Stack { output, .. } => Some(output),
        }
    }

    /// True for an op still waiting for `adapt` (`normalize`, `discretization`, the lookups,
    /// `text_vectorization`).
    pub fn needs_adapt(&self) -> bool {
        match self {
            OpConfig::StringLookup(c) | OpConfig::IntegerLookup(c) => c.adapt,
            OpConfig::TextVectorization(c) => c.adapt,
            _ => matches!(
                self,
                OpConfig::Normalize { adapt: true, .. }
                    | OpConfig::Discretization { adapt: true, .. }
            ),
        }
    }

    /// The token kind of a lookup op (`None` for other ops).
    pub fn token_kind(&self) -> Option<TokenKind> {
        match self {
            OpConfig::StringLookup(_) | OpConfig::TextVectorization(_) => Some(TokenKind::String),
            OpConfig::IntegerLookup(_) => Some(TokenKind::Integer),
            _ => None,
        }
    }

    /// The vocabulary file path of a lookup or `text_vectorization` op, if it names one.
    pub fn vocabulary_file(&self) -> Option<&str> {
        let v = match self {
            OpConfig::StringLookup(c) | OpConfig::IntegerLookup(c) => c.vocabulary.as_ref(),
            OpConfig::TextVectorization(c) => c.vocabulary.as_ref(),
            _ => None,
        };
        v.and_then(toml::Value::as_str)
    }

    /// The op with its vocabulary file replaced by the file's tokens (`vocabulary`).
    pub fn with_vocabulary(&self, vocabulary: toml::Value) -> OpConfig {
        let mut out = self.clone();
        match &mut out {
            OpConfig::StringLookup(c) | OpConfig::IntegerLookup(c) => {
                c.vocabulary = Some(vocabulary)
            }
            OpConfig::TextVectorization(c) => c.vocabulary = Some(vocabulary),
            _ => {}
        }
        out
    }

    /// The op with `component` in place of its own (an adapted training op copied to the
    /// validation or test pipeline).
    pub fn with_component(&self, component: Option<String>) -> OpConfig {
        let mut out = self.clone();
        match &mut out {
            OpConfig::Rescale { component: c, .. }
            | OpConfig::Normalize { component: c, .. }
            | OpConfig::OneHot { component: c, .. }
            | OpConfig::Cast { component: c, .. }
            | OpConfig::DecodeRaw { component: c, .. }
            | OpConfig::Reshape { component: c, .. }
            | OpConfig::RandomFlip { component: c, .. }
            | OpConfig::RandomCrop { component: c, .. }
            | OpConfig::Resize { component: c, .. }
            | OpConfig::CategoryEncoding { component: c, .. }
            | OpConfig::Hashing { component: c, .. }
            | OpConfig::Discretization { component: c, .. }
            | OpConfig::PadSequences { component: c, .. } => *c = component,
            OpConfig::StringLookup(l) | OpConfig::IntegerLookup(l) => l.component = component,
            OpConfig::TextVectorization(t) => t.component = component,
            OpConfig::Stack { .. } => {}
        }
        out
    }

    /// Adapts the op over `component` of `ds` (Keras' `layer.adapt`): the op with what it
    /// learned recorded (statistics, bin boundaries or vocabulary) and `adapt = false`.
    ///
    /// # Errors
    /// [`KilnError::Config`] at `key.adapt` with the data error (an empty dataset, strings
    /// where numbers are needed, ...).
    pub fn adapt_over(
        &self,
        key: &str,
        ds: &kiln_data::Dataset,
        component: &str,
    ) -> Result<OpConfig> {
        Ok(match self {
            OpConfig::Normalize { axis, .. } => {
                let n = Normalization::adapt(ds, component, axis.to_vec())
                    .map_err(|e| text_ops::adapt_error(key, e))?;
                self.adapted(&n)
            }
            OpConfig::Discretization {
                component: c,
                num_bins,
                epsilon,
                output_mode,
                ..
            } => {
                let b = kiln_data::preprocess::Discretization::adapt(
                    ds,
                    component,
                    num_bins.unwrap_or(1),
                    *epsilon,
                )
                .map_err(|e| text_ops::adapt_error(key, e))?;
                OpConfig::Discretization {
                    component: c.clone(),
                    bin_boundaries: Some(b),
                    num_bins: None,
                    epsilon: *epsilon,
                    output_mode: output_mode.clone(),
                    adapt: false,
                }
            }
            OpConfig::StringLookup(c) => {
                OpConfig::StringLookup(c.adapted(key, TokenKind::String, ds, component)?)
            }
            OpConfig::IntegerLookup(c) => {
                OpConfig::IntegerLookup(c.adapted(key, TokenKind::Integer, ds, component)?)
            }
            OpConfig::TextVectorization(c) => {
                OpConfig::TextVectorization(c.adapted(key, ds, component)?)
            }
            other => other.clone(),
        })
    }

    /// Checks the arguments; `key` is the op's dotted config path (`data.train.map[2]`).
    fn validate(&self, key: &str) -> Result<()> {
        let bad = |field: &str, msg: String| Err(KilnError::config(format!("{key}.{field}"), msg));
        match self {
            OpConfig::Rescale { scale, offset, .. } => {
                if !(scale.is_finite() && offset.is_finite()) {
                    return bad("scale", "scale and offset must be finite numbers".into());
                }
            }
            OpConfig::Normalize {
                mean,
                variance,
                std,
                adapt,
                ..
            } => {
                let given = mean.is_some() || variance.is_some() || std.is_some();
                if *adapt && given {
                    return bad(
                        "adapt",
                        "give either adapt = true or mean and variance (or std), not both".into(),
                    );
                }
                if !*adapt {
                    if mean.is_none() || variance.is_some() == std.is_some() {
                        return bad(
                            "mean",
                            "normalize needs mean and one of variance or std, or adapt = true \
                             to compute them from the training data"
                                .into(),
                        );
                    }
                    self.normalization(key)?;
                }
            }
            OpConfig::OneHot { depth, .. } => {
                if *depth == 0 {
                    return bad("depth", "must be at least 1 (the number of classes)".into());
                }
            }
            OpConfig::DecodeRaw { out_type, .. } => {
                if parse_dtype(out_type).is_none() {
                    return bad(
                        "out_type",
                        format!(
                            "unknown dtype \"{out_type}\"; allowed: uint8, int32, int64, \
                             float32, float64"
                        ),
                    );
                }
            }
            OpConfig::Cast { dtype, .. } => {
                if parse_dtype(dtype).is_none() {
                    return bad(
                        "dtype",
                        format!(
                            "unknown dtype \"{dtype}\"; allowed: uint8, int32, int64, float32, \
                             float64"
                        ),
                    );
                }
            }
            OpConfig::Reshape { shape, .. } => {
                if shape.iter().filter(|&&d| d == -1).count() > 1 || shape.iter().any(|&d| d < -1) {
                    return bad(
                        "shape",
                        format!("{shape:?}: sizes are non-negative, with at most one -1"),
                    );
                }
            }
            OpConfig::RandomFlip { mode, .. } => {
                if let Err(e) = mode.parse::<FlipMode>() {
                    return bad("mode", e.to_string().replace("invalid argument: ", ""));
                }
            }
            OpConfig::RandomCrop { height, width, .. } | OpConfig::Resize { height, width, .. } => {
                if *height == 0 || *width == 0 {
                    return bad("height", "height and width must be at least 1".into());
                }
            }
            OpConfig::Stack { components, output } => {
                if components.is_empty() || output.is_empty() {
                    return bad(
                        "components",
                        "stack needs at least one component and an output name".into(),
                    );
                }
            }
            OpConfig::CategoryEncoding { .. } | OpConfig::Hashing { .. } => {
                self.to_preprocess("x", key)?;
            }
            OpConfig::Discretization {
                bin_boundaries,
                num_bins,
                epsilon,
                output_mode,
                adapt,
                ..
            } => text_ops::check_discretization(
                key,
                bin_boundaries.as_deref(),
                *num_bins,
                *epsilon,
                *adapt,
                output_mode,
            )?,
            OpConfig::StringLookup(c) => c.validate(key, TokenKind::String)?,
            OpConfig::IntegerLookup(c) => c.validate(key, TokenKind::Integer)?,
            OpConfig::TextVectorization(c) => c.validate(key)?,
            OpConfig::PadSequences { .. } => {
                self.to_preprocess("x", key)?;
            }
        }
        Ok(())
    }

    /// The `Normalization` of a `normalize` op with its statistics given.
    fn normalization(&self, key: &str) -> Result<Normalization> {
        let OpConfig::Normalize {
            axis,
            mean: Some(mean),
            variance,
            std,
            ..
        } = self
        else {
            return Err(KilnError::config(
                key,
                "normalize has no statistics: run adapt first",
            ));
        };
        let made = match (variance, std) {
            (Some(v), _) => Normalization::new(axis.to_vec(), mean.to_vec(), v.to_vec()),
            (None, Some(s)) => Normalization::from_std(axis.to_vec(), mean.to_vec(), s.to_vec()),
            (None, None) => {
                return Err(KilnError::config(key, "normalize needs variance or std"));
            }
        };
        made.map_err(|e| KilnError::config(key, e.to_string().replace("invalid argument: ", "")))
    }

    /// The kiln-data op, with `component` defaulting to `x`.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `key` for a `normalize` op that still needs `adapt`.
    pub fn to_preprocess(&self, x: &str, key: &str) -> Result<Preprocess> {
        let component = self.component().unwrap_or(x).to_string();
        Ok(match self {
            OpConfig::Rescale { scale, offset, .. } => Preprocess::Rescale {
                component,
                scale: *scale,
                offset: *offset,
            },
            OpConfig::Normalize { .. } => Preprocess::Normalize {
                component,
                normalization: self.normalization(key)?,
            },
            OpConfig::OneHot { depth, .. } => Preprocess::OneHot {
                component,
                depth: *depth,
            },
            OpConfig::Cast { dtype, .. } => Preprocess::Cast {
                component,
                dtype: parse_dtype(dtype)
                    .ok_or_else(|| KilnError::config(key, format!("unknown dtype \"{dtype}\"")))?,
            },
            OpConfig::DecodeRaw {
                out_type,
                little_endian,
                ..
            } => Preprocess::DecodeRaw {
                component,
                out_type: parse_dtype(out_type).ok_or_else(|| {
                    KilnError::config(key, format!("unknown dtype \"{out_type}\""))
                })?,
                little_endian: *little_endian,
            },
            OpConfig::Reshape { shape, .. } => Preprocess::Reshape {
                component,
                shape: shape.clone(),
            },
            OpConfig::RandomFlip { mode, .. } => Preprocess::RandomFlip {
                component,
                mode: mode
                    .parse()
                    .map_err(|e: kiln_data::DataError| KilnError::config(key, e.to_string()))?,
            },
            OpConfig::RandomCrop { height, width, .. } => Preprocess::RandomCrop {
                component,
                height: *height,
                width: *width,
            },
            OpConfig::Resize { height, width, .. } => Preprocess::Resize {
                component,
                height: *height,
                width: *width,
            },
            OpConfig::Stack { components, output } => Preprocess::Stack {
                components: components.clone(),
                output: output.clone(),
            },
            OpConfig::CategoryEncoding {
                num_tokens,
                output_mode,
                ..
            } => text_ops::category_encoding(key, component, *num_tokens, output_mode)?,
            OpConfig::Hashing {
                num_bins,
                mask_value,
                salt,
                output_mode,
                ..
            } => text_ops::hashing(
                key,
                component,
                *num_bins,
                mask_value.as_ref(),
                salt.as_ref(),
                output_mode,
            )?,
            OpConfig::Discretization {
                bin_boundaries,
                output_mode,
                ..
            } => text_ops::discretization(key, component, bin_boundaries.as_deref(), output_mode)?,
            OpConfig::StringLookup(c) => c.to_preprocess(key, component, TokenKind::String)?,
            OpConfig::IntegerLookup(c) => c.to_preprocess(key, component, TokenKind::Integer)?,
            OpConfig::TextVectorization(c) => c.to_preprocess(key, component)?,
            OpConfig::PadSequences {
                maxlen,
                padding,
                truncating,
                value,
                ..
            } => super::data_utils::pad_sequences(
                component, *maxlen, padding, truncating, *value, key,
            )?,
        })
    }

    /// A `normalize` op with computed statistics (what `adapt` writes to the resolved config).
    pub fn adapted(&self, n: &Normalization) -> OpConfig {
        OpConfig::Normalize {
            component: self.component().map(str::to_string),
            axis: OneOrMany::Many(n.axis().to_vec()),
            mean: Some(OneOrMany::Many(n.mean().to_vec())),
            variance: Some(OneOrMany::Many(n.variance().to_vec())),
            std: None,
            adapt: false,
        }
    }
}

/// One input pipeline: `[data.train]`, `[data.validation]` or `[data.test]`.
///
/// The pipeline runs in tf.data's recommended order, whatever the order of the keys:
/// source → (tfrecord: parse) → `skip` → `take` → the `map` ops up to the first random one →
/// `cache` → `shuffle` → `repeat` → the remaining `map` ops → select `x` and `y` → `batch` →
/// `prefetch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// `"idx"`, `"npy"`, `"csv"`, `"tfrecord"`, `"text"` or `"image_folder"`.
    pub source: Source,
    /// Paths or glob patterns, relative to `data.data_dir` (an image folder: one directory).
    pub files: OneOrMany<String>,
    /// idx / npy: the component name of each file, in order (default `["x", "y"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub components: Option<Vec<String>>,
    /// tfrecord, csv, text: `compression_type`, `""` (default), `"GZIP"` or `"ZLIB"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression_type: Option<String>,
    /// tfrecord: the parsing spec, feature name → `{ type, dtype, shape, default_value }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<BTreeMap<String, FeatureConfig>>,
    /// csv: the first line holds the column names (default `true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<bool>,
    /// csv: the names of all the file's columns, in order (`make_csv_dataset`'s
    /// `column_names`): required with `header = false`; with a header, they replace the
    /// header's names (the header line is still skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column_names: Option<Vec<String>>,
    /// csv: the label column (also the default `y`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_name: Option<String>,
    /// csv: the columns to read, by name (or 0-based index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select_cols: Option<Vec<ColumnRef>>,
    /// csv: one entry per selected column: a default value (`0`, `0.0`, `""`) or a dtype name
    /// (`"float32"`) for a required column; default: types inferred from the first rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column_defaults: Option<Vec<toml::Value>>,
    /// csv: the field separator (default `","`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_delim: Option<String>,
    /// csv: a field equal to this counts as empty (default `""`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub na_value: Option<String>,
    /// timeseries: time steps per window (`sequence_length`, required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_length: Option<usize>,
    /// timeseries: steps between the starts of two windows (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_stride: Option<usize>,
    /// timeseries: steps between two time steps of a window (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_rate: Option<usize>,
    /// timeseries: the first time step used (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_index: Option<usize>,
    /// timeseries: time steps from this one on are not used (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_index: Option<usize>,
    /// image_folder: resize every image to `[height, width]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<[usize; 2]>,
    /// image_folder: `"grayscale"`, `"rgb"` (default) or `"rgba"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color_mode: Option<String>,
    /// image_folder, text_folder: the classes in label order (default: the sorted
    /// subfolders).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_names: Option<Vec<String>>,
    /// text_folder: `"int"` (default), `"categorical"` or `"binary"` (Keras' `label_mode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_mode: Option<String>,
    /// text_folder: keep at most this many bytes of each file (Keras' `max_length`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<usize>,
    /// tf.data's `ignore_errors`: drop an example whose reading, decoding, parsing or `map`
    /// ops fail (a corrupt image, a bad CSV row, a damaged TFRecord record) instead of
    /// stopping the run; the epoch log counts and lists them (default `false`: strict).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_errors: bool,
    /// Let glob patterns in `files` and image_folder's listing take hidden files and
    /// folders, whose names start with `.` (default `false`: left out, as the shell's and
    /// Python's globs do; a pattern that spells the dot, `.*.csv`, still matches them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_hidden: bool,
    /// The features component fed to the model (default `"x"`; `"image"` for image_folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    /// The labels component (default `"y"`; `"label"` for image_folder; `label_name` for csv).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y: Option<String>,
    /// `Dataset.skip(count)` right after the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip: Option<u64>,
    /// `Dataset.take(count)` right after `skip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub take: Option<u64>,
    /// `Dataset.cache`: `"memory"`, or a file prefix (relative to the current directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    /// `Dataset.shuffle`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shuffle: Option<ShuffleConfig>,
    /// `Dataset.repeat(count)` after `shuffle`: one epoch is `count` passes (reshuffled each
    /// pass); `-1` repeats forever (`data.train` with `fit.steps_per_epoch` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<i64>,
    /// tf.data's `map(..., deterministic)` for the `map` ops: `false` lets parallel ops
    /// emit elements out of order (default `true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deterministic: Option<bool>,
    /// Preprocessing ops, applied in order to each example.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub map: Vec<OpConfig>,
    /// Examples per batch (default: `fit.batch_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<usize>,
    /// Drop the last, smaller batch.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drop_remainder: bool,
    /// `Dataset.padded_batch` instead of `batch`: `true`, or `{ padded_shapes,
    /// padding_values }` by component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub padded_batch: Option<super::data_utils::PaddedBatchConfig>,
    /// keras.io's MixUp on each training batch: `{ alpha = 0.2, seed }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mix_up: Option<super::data_utils::MixConfig>,
    /// keras.io's CutMix on each training batch: `{ alpha = 0.25, seed }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_mix: Option<super::data_utils::MixConfig>,
    /// Batches prepared ahead (`"AUTOTUNE"` = 2, the default).
    #[serde(
        default,
        deserialize_with = "parse_tunable",
        serialize_with = "ser_tunable"
    )]
    pub prefetch: Option<usize>,
    /// Threads of the `map` ops and of TFRecord parsing (`"AUTOTUNE"` = one per core).
    #[serde(
        default,
        deserialize_with = "parse_tunable",
        serialize_with = "ser_tunable"
    )]
    pub num_parallel_calls: Option<usize>,
}

/// A CSV column by name or by 0-based index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ColumnRef {
    /// By 0-based index.
    Index(usize),
    /// By header name.
    Name(String),
}

impl PipelineConfig {
    /// The features component.
    pub fn x_name(&self) -> &str {
        match (&self.x, self.source) {
            (Some(x), _) => x,
            (None, Source::ImageFolder) => kiln_data::sources::IMAGE_COMPONENT,
            (None, Source::TextFolder) => kiln_data::sources::TEXT_COMPONENT,
            (None, _) => crate::batch::FEATURES,
        }
    }

    /// The labels component.
    pub fn y_name(&self) -> &str {
        match (&self.y, self.source, &self.label_name) {
            (Some(y), _, _) => y,
            (None, Source::ImageFolder | Source::TextFolder, _) => {
                kiln_data::sources::LABEL_COMPONENT
            }
            (None, Source::Csv, Some(label)) => label,
            (None, _, _) => crate::batch::LABELS,
        }
    }

    /// The `map` ops' parallelism.
    pub fn parallelism(&self) -> Parallelism {
        match self.num_parallel_calls {
            None => Parallelism::Autotune,
            Some(0) | Some(1) => Parallelism::Sequential,
            Some(n) => Parallelism::Fixed(n),
        }
    }

    /// Index of the first random op in `map` (`map.len()` when none): ops before it run
    /// before `cache` and `shuffle`, the rest after.
    pub fn random_from(&self) -> usize {
        self.map
            .iter()
            .position(|op| {
                matches!(
                    op,
                    OpConfig::RandomFlip { .. } | OpConfig::RandomCrop { .. }
                )
            })
            .unwrap_or(self.map.len())
    }

    /// Checks the table; `key` is `data.train`, `data.validation` or `data.test`.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming the key: a key of another source (`header` with
    /// `source = "idx"`), missing `files` / `features`, bad op arguments, zero sizes.
    pub fn validate(&self, key: &str) -> Result<()> {
        let err = |k: &str, msg: String| Err(KilnError::config(format!("{key}.{k}"), msg));
        let files = self.files.to_vec();
        if files.is_empty() || files.iter().any(String::is_empty) {
            return err("files", "give at least one path or glob pattern".into());
        }
        // Keys that belong to one source only.
        let only: [(&str, bool, &[Source]); 15] = [
            (
                "components",
                self.components.is_some(),
                &[Source::Idx, Source::Npy, Source::Timeseries],
            ),
            (
                "compression_type",
                self.compression_type.is_some(),
                &[Source::Tfrecord, Source::Csv, Source::Text],
            ),
            ("features", self.features.is_some(), &[Source::Tfrecord]),
            ("header", self.header.is_some(), &[Source::Csv]),
            ("column_names", self.column_names.is_some(), &[Source::Csv]),
            ("label_name", self.label_name.is_some(), &[Source::Csv]),
            ("select_cols", self.select_cols.is_some(), &[Source::Csv]),
            (
                "column_defaults",
                self.column_defaults.is_some(),
                &[Source::Csv],
            ),
            ("field_delim", self.field_delim.is_some(), &[Source::Csv]),
            ("na_value", self.na_value.is_some(), &[Source::Csv]),
            (
                "image_size",
                self.image_size.is_some(),
                &[Source::ImageFolder],
            ),
            (
                "color_mode",
                self.color_mode.is_some(),
                &[Source::ImageFolder],
            ),
            (
                "class_names",
                self.class_names.is_some(),
                &[Source::ImageFolder, Source::TextFolder],
            ),
            (
                "label_mode",
                self.label_mode.is_some(),
                &[Source::TextFolder],
            ),
            (
                "max_length",
                self.max_length.is_some(),
                &[Source::TextFolder],
            ),
        ];
        for (name, given, sources) in only {
            if given && !sources.contains(&self.source) {
                let names: Vec<String> = sources
                    .iter()
                    .map(|s| format!("\"{}\"", s.name()))
                    .collect();
                return err(
                    name,
                    format!(
                        "applies to source = {} only, not \"{}\"",
                        names.join(" or "),
                        self.source.name()
                    ),
                );
            }
        }
        self.validate_timeseries(key, files.len())?;
        self.validate_batching(key)?;
        match self.source {
            Source::Idx | Source::Npy | Source::Timeseries => {
                let names = self.component_names();
                if names.len() != files.len() {
                    return err(
                        "components",
                        format!(
                            "{} names for {} files; give one component name per file",
                            names.len(),
                            files.len()
                        ),
                    );
                }
                if let Some((i, n)) = names
                    .iter()
                    .enumerate()
                    .find(|(i, n)| names[..*i].contains(n))
                {
                    return err(
                        &format!("components[{i}]"),
                        format!("\"{n}\" appears twice"),
                    );
                }
            }
            Source::Tfrecord => {
                let Some(features) = &self.features else {
                    return err(
                        "features",
                        "source = \"tfrecord\" needs a features table, e.g. features.image = \
                         { dtype = \"float32\", shape = [28, 28, 1] }"
                            .into(),
                    );
                };
                if features.is_empty() {
                    return err("features", "name at least one feature".into());
                }
                for (name, f) in features {
                    super::pipeline_values::feature_spec(f)
                        .map_err(|m| KilnError::config(format!("{key}.features.{name}"), m))?;
                }
            }
            Source::Csv => {
                if let Some(d) = &self.field_delim
                    && d.len() != 1
                {
                    return err(
                        "field_delim",
                        format!("\"{d}\" must be one ASCII character"),
                    );
                }
                self.validate_column_names(key)?;
                if let Some(defaults) = &self.column_defaults {
                    for (i, v) in defaults.iter().enumerate() {
                        super::pipeline_values::record_default(v).map_err(|m| {
                            KilnError::config(format!("{key}.column_defaults[{i}]"), m)
                        })?;
                    }
                }
            }
            Source::ImageFolder => {
                if files.len() != 1 {
                    return err(
                        "files",
                        "source = \"image_folder\" takes one directory".into(),
                    );
                }
                if let Some(size) = self.image_size
                    && size.contains(&0)
                {
                    return err("image_size", "height and width must be at least 1".into());
                }
                if let Some(mode) = &self.color_mode {
                    super::pipeline_values::color_mode(mode)
                        .map_err(|m| KilnError::config(format!("{key}.color_mode"), m))?;
                }
            }
            Source::Text => {}
            Source::TextFolder => {
                if files.len() != 1 {
                    return err(
                        "files",
                        "source = \"text_folder\" takes one directory".into(),
                    );
                }
                if let Some(mode) = &self.label_mode
                    && let Err(e) = mode.parse::<kiln_data::sources::LabelMode>()
                {
                    return err(
                        "label_mode",
                        e.to_string().replace("invalid argument: ", ""),
                    );
                }
            }
        }
        if let Some(c) = &self.compression_type {
            super::pipeline_values::compression(c)
                .map_err(|m| KilnError::config(format!("{key}.compression_type"), m))?;
        }
        if let Some(n) = self.repeat
            && n != -1
            && n < 1
        {
            return err(
                "repeat",
                format!("{n} is not a count; give at least 1, or -1 to repeat forever"),
            );
        }
        if let Some(s) = &self.shuffle
            && s.buffer_size == 0
        {
            return err("shuffle.buffer_size", "must be at least 1".into());
        }
        if self.batch_size == Some(0) {
            return err("batch_size", "must be at least 1".into());
        }
        if self.cache.as_deref() == Some("") {
            return err("cache", "give \"memory\" or a file prefix".into());
        }
        if self.x_name() == self.y_name() {
            return err(
                "y",
                format!(
                    "x and y are both \"{}\"; name two different components",
                    self.x_name()
                ),
            );
        }
        for (i, op) in self.map.iter().enumerate() {
            op.validate(&format!("{key}.map[{i}]"))?;
        }
        super::limits::check_pipeline(key, self)
    }

    /// csv: `column_names` is needed without a header, and holds distinct, non-empty names.
    fn validate_column_names(&self, key: &str) -> Result<()> {
        let err = |msg: String| Err(KilnError::config(format!("{key}.column_names"), msg));
        let Some(names) = &self.column_names else {
            if self.header == Some(false) {
                return err(
                    "header = false needs the column names: give column_names = [\"a\", \"b\", \
                     ...], one name per column of the file, in order"
                        .into(),
                );
            }
            return Ok(());
        };
        if names.is_empty() || names.iter().any(|n| n.is_empty()) {
            return err("give one non-empty name per column of the file".into());
        }
        if let Some((i, n)) = names
            .iter()
            .enumerate()
            .find(|(i, n)| names[..*i].contains(n))
        {
            return err(format!("\"{n}\" appears twice (at {i})"));
        }
        Ok(())
    }

    /// idx / npy: the component name of each file.
    pub fn component_names(&self) -> Vec<String> {
        match &self.components {
            Some(c) => c.clone(),
            None => {
                let default = [crate::batch::FEATURES, crate::batch::LABELS];
                default
                    .iter()
                    .take(self.files.to_vec().len().min(2))
                    .map(|s| s.to_string())
                    .collect()
            }
        }
    }
}
