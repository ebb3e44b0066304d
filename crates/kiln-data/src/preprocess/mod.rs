//! Preprocessing operations — Keras' preprocessing layers as map functions on one named
//! component of a dataset element.
//!
//! | op | Keras / TensorFlow | input | output |
//! |---|---|---|---|
//! | [`rescale`] | `keras.layers.Rescaling(scale, offset)` | numeric, any shape | `float32`, same shape |
//! | [`Normalization`] | `keras.layers.Normalization(axis, mean, variance)` + `adapt` | numeric | `float32`, same shape |
//! | [`one_hot`] | `tf.one_hot(indices, depth)` / `CategoryEncoding(output_mode="one_hot")` | integer `[...]` | `float32 [..., depth]` |
//! | [`cast`] | `tf.cast(x, dtype)` | numeric | `dtype` |
//! | [`decode_raw`] | `tf.io.decode_raw(x, out_type, little_endian)` | `string` `[...]` | `out_type [..., n]` |
//! | [`reshape`] | `tf.reshape(x, shape)` (one `-1` allowed) | any | same dtype |
//! | [`flip`] (random) | `keras.layers.RandomFlip(mode)` | image | same dtype |
//! | [`crop`] (random) | `keras.layers.RandomCrop(height, width)` | image | same dtype |
//! | [`resize_bilinear`] | `keras.layers.Resizing(h, w)` / `tf.image.resize(bilinear)` | image | `float32 [h, w, c]` |
//! | [`pad_sequences`] | `keras.utils.pad_sequences([x], maxlen, padding, truncating, value)` | `[length, ...]` | `[maxlen, ...]`, same dtype |
//! | [`stack`] | `tf.stack([tf.cast(c, float32) for c in cols], axis=-1)` | same-shaped numerics | `float32 [..., k]` |
//! | [`category_encoding`] | `keras.layers.CategoryEncoding(num_tokens, output_mode)` | integer | `float32 [..., num_tokens]` |
//! | [`Hashing`] | `keras.layers.Hashing(num_bins, mask_value, salt, output_mode)` | string or integer | `int64` bins or `float32` encoding |
//! | [`Discretization`] | `keras.layers.Discretization(bin_boundaries, output_mode)` + `adapt` | numeric | `int64` bins or `float32` encoding |
//! | [`Lookup`] | `keras.layers.StringLookup` / `IntegerLookup` + `adapt` | string / integer | `int64` indices, `float32` encoding, or tokens (`invert`) |
//! | [`TextVectorization`] | `keras.layers.TextVectorization` + `adapt` | `string` `[]` | `int64 [output_sequence_length]` or `float32 [tokens]` |
//!
//! The string ops run here, on the host, before the model: Burn tensors hold numbers, so
//! Keras' lookup and text layers become pipeline ops — what keras.io recommends for
//! `TextVectorization` anyway (`dataset.map(vectorize_layer)`).
//!
//! An *image* is `[height, width, channels]` (Keras' channels-last) or `[height, width]` (one
//! channel, as IDX files hold MNIST), of any numeric dtype.
//!
//! [`Preprocess`] describes one op applied to a named component; [`Dataset::preprocess`] runs a
//! list of them as one (parallel, order-preserving) map. The random ops draw from a generator
//! seeded per element by [`Dataset::map_with_rng`]: the same seed gives the same augmentations,
//! every epoch different ones, whatever the number of threads. Outside training ([`Preprocess::
//! apply`] without a generator) the random ops are inactive, as Keras' layers at inference:
//! [`RandomFlip`](Preprocess::RandomFlip) returns the image unchanged and
//! [`RandomCrop`](Preprocess::RandomCrop) takes the central window.
//!
//! Ops apply to one example (before `batch`): axes are those of the example, and
//! [`Normalization`]'s `axis` counts the batch axis as Keras does (`axis = 1` is the example's
//! first axis, `-1` its last).

mod cast;
mod categorical;
mod decode_raw;
mod hashing;
mod image;
mod lookup;
mod mix;
mod normalize;
mod one_hot;
mod pad_sequences;
mod random_map;
mod rescale;
mod reshape;
mod stack;
mod text;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod text_tests;

pub use cast::cast;
pub use decode_raw::decode_raw;
pub use image::{FlipMode, crop, flip, resize_bilinear};
pub use mix::{CutBox, MixOptions, cut_mix, mix_up, sample_beta};
pub use normalize::Normalization;
pub use one_hot::one_hot;
pub use pad_sequences::{Side, pad_sequences};
pub use rescale::rescale;
pub use reshape::reshape;
pub use stack::stack;

pub use categorical::{Discretization, OutputMode, category_encoding, encode};
pub use hashing::{HashValue, Hashing, fingerprint64, siphash24};
pub use lookup::{Lookup, LookupOptions, TokenKind};
pub use text::{SplitMode, Standardize, TextVectorization, Tokenizer};

use rand::Rng;
use rand::rngs::StdRng;

use crate::dataset::{Dataset, Parallelism};
use crate::element::{DType, Element};
use crate::error::{DataError, Result};

/// One preprocessing op on a named component of an element (Keras' preprocessing layers).
///
/// Every variant replaces `component` by its transformed value, except
/// [`Stack`](Preprocess::Stack), which adds `output`. Errors name the op and the component
/// ([`DataError::Preprocess`]); an element without the component is
/// [`DataError::MissingComponent`].
#[derive(Debug, Clone, PartialEq)]
pub enum Preprocess {
    /// [`rescale`]: `x * scale + offset`, as `float32`.
    Rescale {
        /// Component to transform.
        component: String,
        /// Multiplier (`1/255` maps pixels to `[0, 1]`).
        scale: f64,
        /// Added after scaling.
        offset: f64,
    },
    /// [`Normalization::apply`]: `(x - mean) / std`, as `float32`.
    Normalize {
        /// Component to transform.
        component: String,
        /// The statistics (given, or computed by [`Normalization::adapt`]).
        normalization: Normalization,
    },
    /// [`one_hot`]: integer class indices to `float32` one-hot vectors of length `depth`.
    OneHot {
        /// Component to transform.
        component: String,
        /// Number of classes.
        depth: usize,
    },
    /// [`cast`] to `dtype`.
    Cast {
        /// Component to transform.
        component: String,
        /// Target dtype.
        dtype: DType,
    },
    /// [`decode_raw`]: the bytes of each `string` value as `out_type` values.
    DecodeRaw {
        /// Component to transform (`string` values of one length).
        component: String,
        /// The numeric dtype the bytes hold.
        out_type: DType,
        /// Byte order of multi-byte values (TensorFlow's default `true`).
        little_endian: bool,
    },
    /// [`reshape`] to `shape` (one entry may be `-1`).
    Reshape {
        /// Component to transform.
        component: String,
        /// Target shape of one example.
        shape: Vec<i64>,
    },
    /// [`flip`] with probability 1/2 along each axis `mode` names (random).
    RandomFlip {
        /// Component to transform (an image).
        component: String,
        /// Which axes may flip.
        mode: FlipMode,
    },
    /// [`crop`] a `height × width` window at a uniformly random position (random).
    RandomCrop {
        /// Component to transform (an image).
        component: String,
        /// Output height in pixels.
        height: usize,
        /// Output width in pixels.
        width: usize,
    },
    /// [`resize_bilinear`] to `height × width`.
    Resize {
        /// Component to transform (an image).
        component: String,
        /// Output height in pixels.
        height: usize,
        /// Output width in pixels.
        width: usize,
    },
    /// [`stack`] the `components` (same shape, numeric) into a new `float32` component
    /// `output` with a new last axis — packing CSV columns into one feature vector.
    Stack {
        /// Components to stack, in order (they stay in the element).
        components: Vec<String>,
        /// Name of the stacked component (replaced if present).
        output: String,
    },
    /// [`category_encoding`]: integer indices to `one_hot` / `multi_hot` / `count` vectors.
    CategoryEncoding {
        /// Component to transform.
        component: String,
        /// Number of classes.
        num_tokens: usize,
        /// `one_hot`, `multi_hot` or `count`.
        output_mode: OutputMode,
    },
    /// [`Hashing::apply`]: values to hash bins.
    Hashing {
        /// Component to transform.
        component: String,
        /// The layer.
        hashing: Hashing,
    },
    /// [`Discretization::apply`]: numbers to bins.
    Discretization {
        /// Component to transform.
        component: String,
        /// The layer (boundaries given or adapted).
        discretization: Discretization,
    },
    /// [`Lookup::apply`]: `string_lookup` / `integer_lookup`.
    Lookup {
        /// Component to transform.
        component: String,
        /// The layer (vocabulary given or adapted).
        lookup: Lookup,
    },
    /// [`TextVectorization::apply`].
    TextVectorization {
        /// Component to transform (a string per example).
        component: String,
        /// The layer (vocabulary given or adapted).
        text: TextVectorization,
    },
    /// [`pad_sequences`] to `maxlen` steps.
    PadSequences {
        /// Component to transform (a sequence `[length, ...]`).
        component: String,
        /// Steps of the result.
        maxlen: usize,
        /// Where short sequences are padded.
        padding: Side,
        /// Where long sequences are cut.
        truncating: Side,
        /// The padding value.
        value: f64,
    },
}

impl Preprocess {
    /// The op's name as configs spell it: `rescale`, `normalize`, `one_hot`, `cast`,
    /// `decode_raw`, `reshape`, `random_flip`, `random_crop`, `resize`, `stack`.
    pub fn name(&self) -> &'static str {
        match self {
            Preprocess::Rescale { .. } => "rescale",
            Preprocess::Normalize { .. } => "normalize",
            Preprocess::OneHot { .. } => "one_hot",
            Preprocess::Cast { .. } => "cast",
            Preprocess::DecodeRaw { .. } => "decode_raw",
            Preprocess::Reshape { .. } => "reshape",
            Preprocess::RandomFlip { .. } => "random_flip",
            Preprocess::RandomCrop { .. } => "random_crop",
            Preprocess::Resize { .. } => "resize",
            Preprocess::Stack { .. } => "stack",
            Preprocess::CategoryEncoding { .. } => "category_encoding",
            Preprocess::Hashing { .. } => "hashing",
            Preprocess::Discretization { .. } => "discretization",
            Preprocess::Lookup { lookup, .. } => match lookup.options().kind {
                TokenKind::String => "string_lookup",
                TokenKind::Integer => "integer_lookup",
            },
            Preprocess::TextVectorization { .. } => "text_vectorization",
            Preprocess::PadSequences { .. } => "pad_sequences",
        }
    }

    /// The component the op writes (`output` for [`Stack`](Preprocess::Stack)).
    pub fn component(&self) -> &str {
        match self {
            Preprocess::Rescale { component, .. }
            | Preprocess::Normalize { component, .. }
            | Preprocess::OneHot { component, .. }
            | Preprocess::Cast { component, .. }
            | Preprocess::DecodeRaw { component, .. }
            | Preprocess::Reshape { component, .. }
            | Preprocess::RandomFlip { component, .. }
            | Preprocess::RandomCrop { component, .. }
            | Preprocess::Resize { component, .. }
            | Preprocess::CategoryEncoding { component, .. }
            | Preprocess::Hashing { component, .. }
            | Preprocess::Discretization { component, .. }
            | Preprocess::Lookup { component, .. }
            | Preprocess::TextVectorization { component, .. } => component,
            Preprocess::PadSequences { component, .. } => component,
            Preprocess::Stack { output, .. } => output,
        }
    }

    /// The components the op reads.
    pub fn inputs(&self) -> Vec<&str> {
        match self {
            Preprocess::Stack { components, .. } => components.iter().map(String::as_str).collect(),
            other => vec![other.component()],
        }
    }

    /// True for the ops that draw random numbers in training (`random_flip`, `random_crop`).
    pub fn is_random(&self) -> bool {
        matches!(
            self,
            Preprocess::RandomFlip { .. } | Preprocess::RandomCrop { .. }
        )
    }

    /// Applies the op to `element`. With `rng` (training) the random ops draw from it; with
    /// `None` (inference) they are inactive: no flip, a central crop.
    ///
    /// # Errors
    /// [`DataError::MissingComponent`] when the element lacks an input component;
    /// [`DataError::Preprocess`] naming the op and component when the values do not fit the op
    /// (strings where numbers are needed, wrong rank, an image smaller than the crop, a class
    /// index outside `[0, depth)`, …).
    pub fn apply(&self, mut element: Element, rng: Option<&mut StdRng>) -> Result<Element> {
        if let Preprocess::Stack { components, output } = self {
            let parts = components
                .iter()
                .map(|c| element.require(c))
                .collect::<Result<Vec<_>>>()?;
            let stacked = stack(&parts).map_err(|e| self.error(e))?;
            element.insert(output.as_str(), stacked);
            return Ok(element);
        }
        let name = self.component();
        // The component is taken out and its result put back in its place: ops that only
        // relabel or rearrange values (reshape, decode_raw of bytes, a cast to the same dtype,
        // flip) reuse its buffer instead of copying it.
        let x = element.take(name)?;
        let out = match self {
            Preprocess::Rescale { scale, offset, .. } => rescale(&x, *scale, *offset),
            Preprocess::Normalize { normalization, .. } => normalization.apply(&x),
            Preprocess::OneHot { depth, .. } => one_hot(&x, *depth),
            Preprocess::Cast { dtype, .. } if x.dtype() == *dtype => Ok(x),
            Preprocess::Cast { dtype, .. } => cast(&x, *dtype),
            Preprocess::DecodeRaw {
                out_type,
                little_endian,
                ..
            } => decode_raw::decode_raw_owned(x, *out_type, *little_endian),
            Preprocess::Reshape { shape, .. } => reshape::reshape_owned(x, shape),
            Preprocess::RandomFlip { mode, .. } => match rng {
                Some(rng) => {
                    let horizontal = mode.horizontal() && rng.random_bool(0.5);
                    let vertical = mode.vertical() && rng.random_bool(0.5);
                    image::flip_owned(x, horizontal, vertical)
                }
                None => image::check_image(&x).map(|_| x),
            },
            Preprocess::RandomCrop { height, width, .. } => {
                image::check_image(&x).and_then(|(h, w, _)| {
                    if *height > h || *width > w {
                        return Err(DataError::InvalidArgument(format!(
                            "the image is {h}x{w} (height x width), smaller than the \
                             {height}x{width} crop; resize it first or crop less"
                        )));
                    }
                    let (top, left) = match rng {
                        Some(rng) => (
                            rng.random_range(0..=h - *height),
                            rng.random_range(0..=w - *width),
                        ),
                        None => ((h - *height) / 2, (w - *width) / 2),
                    };
                    crop(&x, top, left, *height, *width)
                })
            }
            Preprocess::Resize { height, width, .. } => resize_bilinear(&x, *height, *width),
            Preprocess::CategoryEncoding {
                num_tokens,
                output_mode,
                ..
            } => category_encoding(&x, *num_tokens, *output_mode),
            Preprocess::Hashing { hashing, .. } => hashing.apply(&x),
            Preprocess::Discretization { discretization, .. } => discretization.apply(&x),
            Preprocess::Lookup { lookup, .. } => lookup.apply(&x),
            Preprocess::TextVectorization { text, .. } => text.apply(&x),
            Preprocess::PadSequences {
                maxlen,
                padding,
                truncating,
                value,
                ..
            } => pad_sequences(&x, *maxlen, *padding, *truncating, *value),
            Preprocess::Stack { .. } => unreachable!("handled above"),
        }
        .map_err(|e| self.error(e))?;
        element.insert(name, out);
        Ok(element)
    }

    /// Wraps an op's error with the op and component names.
    fn error(&self, err: DataError) -> DataError {
        let message = match err {
            DataError::InvalidArgument(m) | DataError::Shape(m) => m,
            other => other.to_string(),
        };
        DataError::Preprocess {
            op: self.name().to_string(),
            component: self.component().to_string(),
            message,
        }
    }
}

/// Applies `ops` in order to `element` (inference mode when `rng` is `None`).
///
/// # Errors
/// The first op's error, as [`Preprocess::apply`].
pub fn apply_all(
    ops: &[Preprocess],
    element: Element,
    mut rng: Option<&mut StdRng>,
) -> Result<Element> {
    ops.iter()
        .try_fold(element, |e, op| op.apply(e, rng.as_deref_mut()))
}

impl Dataset {
    /// Applies the preprocessing `ops` in order to every element, as one
    /// [`map`](Dataset::map) with `num_parallel_calls` (order preserved).
    ///
    /// When an op is random ([`Preprocess::is_random`]) the map runs through
    /// [`Dataset::map_with_rng`] with `seed`: reproducible for a given seed, different every
    /// epoch. Errors are yielded in place of the element, as [`Preprocess::apply`] returns them.
    pub fn preprocess(
        self,
        ops: Vec<Preprocess>,
        seed: u64,
        num_parallel_calls: Parallelism,
    ) -> Dataset {
        self.preprocess_with(ops, seed, num_parallel_calls, true)
    }

    /// [`Dataset::preprocess`] with tf.data's `deterministic` argument of `map`
    /// ([`Dataset::map_with`]): with `false` a parallel map may emit elements out of order;
    /// random ops still draw from each element's own seeded generator, so every element gets
    /// the values it would get in order.
    pub fn preprocess_with(
        self,
        ops: Vec<Preprocess>,
        seed: u64,
        num_parallel_calls: Parallelism,
        deterministic: bool,
    ) -> Dataset {
        if ops.is_empty() {
            return self;
        }
        if ops.iter().any(Preprocess::is_random) {
            self.map_with_rng_deterministic(
                seed,
                move |e, rng| apply_all(&ops, e, Some(rng)),
                num_parallel_calls,
                deterministic,
            )
        } else {
            self.map_with(
                move |e| apply_all(&ops, e, None),
                num_parallel_calls,
                deterministic,
            )
        }
    }
}
