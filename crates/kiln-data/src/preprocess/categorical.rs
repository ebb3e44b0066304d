//! Categorical encodings shared by the lookup, hashing and discretization ops: Keras'
//! `output_mode` (`numerical_utils.encode_categorical_inputs`), [`category_encoding`] and
//! [`Discretization`].

use std::fmt;
use std::str::FromStr;

use crate::dataset::Dataset;
use crate::element::{Array, Buffer};
use crate::error::{DataError, Result};

/// Keras' `output_mode` of the categorical layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputMode {
    /// The indices themselves, `int64`, same shape.
    #[default]
    Int,
    /// A `float32` one-hot vector per index (a last axis of size 1 is replaced).
    OneHot,
    /// A `float32` vector with 1 at every index present (the last axis is replaced).
    MultiHot,
    /// As multi-hot, with the number of occurrences.
    Count,
    /// Counts times inverse document frequencies (lookups only).
    TfIdf,
}

impl OutputMode {
    /// The name as Keras spells it.
    pub fn name(self) -> &'static str {
        match self {
            OutputMode::Int => "int",
            OutputMode::OneHot => "one_hot",
            OutputMode::MultiHot => "multi_hot",
            OutputMode::Count => "count",
            OutputMode::TfIdf => "tf_idf",
        }
    }
}

impl fmt::Display for OutputMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OutputMode {
    type Err = DataError;

    fn from_str(s: &str) -> Result<OutputMode> {
        Ok(match s {
            "int" => OutputMode::Int,
            "one_hot" => OutputMode::OneHot,
            "multi_hot" | "binary" => OutputMode::MultiHot,
            "count" => OutputMode::Count,
            "tf_idf" | "tf-idf" => OutputMode::TfIdf,
            other => {
                return Err(DataError::InvalidArgument(format!(
                    "unknown output_mode \"{other}\"; allowed: \"int\", \"one_hot\", \
                     \"multi_hot\", \"count\", \"tf_idf\""
                )));
            }
        })
    }
}

/// Encodes integer `indices` of one example of `shape` as `mode` with `depth` classes, as
/// Keras encodes each row of a batch: `int` keeps them (`int64`); `one_hot` adds an axis of
/// `depth` (replacing a last axis of size 1); `multi_hot`, `count` and `tf_idf` replace the
/// last axis (a scalar counts as one index) by `depth` — `tf_idf` multiplies each count by
/// `weights[index]`. Indices outside `[0, depth)` (a lookup's mask) count nowhere, as
/// TensorFlow's `bincount` drops them.
///
/// # Errors
/// Allocation failures for huge outputs.
pub fn encode(
    indices: &[i64],
    shape: &[usize],
    mode: OutputMode,
    depth: usize,
    weights: Option<&[f32]>,
) -> Result<Array> {
    let in_range = |i: i64| (i >= 0 && (i as u64) < depth as u64).then_some(i as usize);
    let (rows, out_shape) = match mode {
        OutputMode::Int => return Array::new(shape.to_vec(), Buffer::I64(indices.to_vec())),
        OutputMode::OneHot => {
            let mut s = shape.to_vec();
            if s.last() == Some(&1) {
                s.pop();
            }
            let rows = indices.len();
            s.push(depth);
            (rows, s)
        }
        _ => {
            let mut s = shape.to_vec();
            s.pop();
            let rows = s.iter().product::<usize>();
            s.push(depth);
            (rows, s)
        }
    };
    let count = crate::alloc::product("the encoded output", &[rows, depth])?;
    let mut out = crate::alloc::filled(&format!("{mode} output of depth {depth}"), count, 0.0f32)?;
    let per_row = indices.len().checked_div(rows).unwrap_or(0).max(1);
    for (k, &i) in indices.iter().enumerate() {
        let Some(i) = in_range(i) else { continue };
        let row = if mode == OutputMode::OneHot {
            k
        } else {
            k / per_row
        };
        let slot = &mut out[row * depth + i];
        match mode {
            OutputMode::OneHot | OutputMode::MultiHot => *slot = 1.0,
            _ => *slot += 1.0,
        }
    }
    if let (OutputMode::TfIdf, Some(w)) = (mode, weights) {
        for row in out.chunks_exact_mut(depth) {
            for (v, w) in row.iter_mut().zip(w) {
                *v *= w;
            }
        }
    }
    Array::new(out_shape, Buffer::F32(out))
}

/// `keras.layers.CategoryEncoding(num_tokens, output_mode)` on one example: integer indices in
/// `[0, num_tokens)` to `one_hot`, `multi_hot` (Keras' default) or `count` vectors.
///
/// # Errors
/// [`DataError::InvalidArgument`] for non-integer input, an index outside
/// `[0, num_tokens)` (naming it), or another `output_mode`.
pub fn category_encoding(x: &Array, num_tokens: usize, mode: OutputMode) -> Result<Array> {
    if !matches!(
        mode,
        OutputMode::OneHot | OutputMode::MultiHot | OutputMode::Count
    ) {
        return Err(DataError::InvalidArgument(format!(
            "CategoryEncoding's output_mode is \"one_hot\", \"multi_hot\" or \"count\", not \
             \"{mode}\""
        )));
    }
    let indices = integer_values(x, "category_encoding")?;
    if let Some((k, i)) = indices
        .iter()
        .enumerate()
        .find(|(_, i)| !(0..num_tokens as i64).contains(i))
    {
        return Err(DataError::InvalidArgument(format!(
            "index {i} at position {k} is outside [0, {num_tokens}); set num_tokens above the \
             largest index"
        )));
    }
    encode(&indices, x.shape(), mode, num_tokens, None)
}

/// The values of an integer array.
///
/// # Errors
/// [`DataError::InvalidArgument`] naming `op` for strings or floats.
pub(crate) fn integer_values(x: &Array, op: &str) -> Result<Vec<i64>> {
    if !x.dtype().is_integer() {
        return Err(DataError::InvalidArgument(format!(
            "{op} needs integer values, got {}{}",
            x.dtype(),
            if x.dtype() == crate::DType::String {
                "; use string_lookup or hashing for strings"
            } else {
                "; cast them to int64 first"
            }
        )));
    }
    x.data().try_to_i64()
}

/// The values of a numeric array as `f64`.
///
/// # Errors
/// [`DataError::InvalidArgument`] naming `op` for strings.
pub(crate) fn numeric_values(x: &Array, op: &str) -> Result<Vec<f64>> {
    match x.data() {
        Buffer::String(_) => Err(DataError::InvalidArgument(format!(
            "{op} needs numbers, got strings; use string_lookup, hashing or text_vectorization \
             for text"
        ))),
        Buffer::F64(v) => Ok(v.clone()),
        Buffer::F32(v) => Ok(v.iter().map(|&a| f64::from(a)).collect()),
        other => Ok(other.try_to_i64()?.into_iter().map(|a| a as f64).collect()),
    }
}

/// `keras.layers.Discretization(bin_boundaries, output_mode)`: each value to the index of its
/// bin — the number of boundaries `<=` it (`np.digitize`) — encoded by `output_mode` with
/// `len(bin_boundaries) + 1` classes. [`Discretization::adapt`] computes the boundaries as
/// Keras' `adapt(data)` does on an array.
#[derive(Debug, Clone, PartialEq)]
pub struct Discretization {
    /// Sorted bin boundaries.
    pub bin_boundaries: Vec<f64>,
    /// `int` (default), `one_hot`, `multi_hot` or `count`.
    pub output_mode: OutputMode,
}

impl Discretization {
    /// The bins of `x`, encoded.
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] for strings or `tf_idf`.
    pub fn apply(&self, x: &Array) -> Result<Array> {
        if self.output_mode == OutputMode::TfIdf {
            return Err(DataError::InvalidArgument(
                "Discretization's output_mode is \"int\", \"one_hot\", \"multi_hot\" or \"count\""
                    .into(),
            ));
        }
        let values = numeric_values(x, "discretization")?;
        let indices: Vec<i64> = values
            .iter()
            .map(|v| self.bin_boundaries.partition_point(|b| b <= v) as i64)
            .collect();
        encode(
            &indices,
            x.shape(),
            self.output_mode,
            self.bin_boundaries.len() + 1,
            None,
        )
    }

    /// `Discretization(num_bins, epsilon).adapt(values)`: Keras' approximate quantiles
    /// (`summarize`, `compress_summary`, `get_bin_boundaries` in float32) over every value of
    /// `component` in one iteration of `dataset`, taken as one array.
    ///
    /// # Errors
    /// The dataset's errors; [`DataError::InvalidArgument`] for strings or no values.
    pub fn adapt(
        dataset: &Dataset,
        component: &str,
        num_bins: usize,
        epsilon: f64,
    ) -> Result<Vec<f64>> {
        let mut values: Vec<f32> = Vec::new();
        for element in dataset.iter() {
            let element = element?;
            let x = element.require(component)?;
            values.extend(
                numeric_values(x, "discretization")?
                    .into_iter()
                    .map(|v| v as f32),
            );
        }
        if values.is_empty() {
            return Err(DataError::InvalidArgument(format!(
                "cannot adapt discretization on component {component:?}: the dataset has no \
                 values"
            )));
        }
        Ok(quantile_boundaries(values, num_bins, epsilon))
    }
}

/// Keras' `summarize` + `merge_summaries` with an empty summary + `get_bin_boundaries`,
/// with NumPy's float32 / float64 steps.
pub(crate) fn quantile_boundaries(mut values: Vec<f32>, num_bins: usize, epsilon: f64) -> Vec<f64> {
    values.sort_by(f32::total_cmp);
    let step = (values.len() as f64 / (1.0 / epsilon)).max(1.0);
    let summary: Vec<f32> = values
        .iter()
        .skip(step as usize - 1)
        .step_by(step as usize)
        .copied()
        .collect();
    let weights = vec![step as f32; summary.len()];
    let (summary, weights) = compress(summary, weights, epsilon);
    let (bins, _) = compress(summary, weights, 1.0 / num_bins as f64);
    bins[..bins.len().saturating_sub(1)]
        .iter()
        .map(|&b| f64::from(b))
        .collect()
}

/// Keras' `compress_summary`: cumulative weights in float32, interpolation in float64,
/// float32 results.
fn compress(values: Vec<f32>, weights: Vec<f32>, epsilon: f64) -> (Vec<f32>, Vec<f32>) {
    if values.len() as f64 * epsilon < 1.0 {
        return (values, weights);
    }
    let percents: Vec<f64> = (0..(1.0 / epsilon).ceil() as usize)
        .map(|i| epsilon + i as f64 * epsilon)
        .collect();
    let cum: Vec<f32> = weights
        .iter()
        .scan(0.0f32, |t, w| {
            *t += w;
            Some(*t)
        })
        .collect();
    let total = cum[cum.len() - 1];
    let cum_pct: Vec<f64> = cum.iter().map(|c| f64::from(c / total)).collect();
    let as64 = |v: &[f32]| v.iter().map(|&a| f64::from(a)).collect::<Vec<f64>>();
    let (values, cum) = (as64(&values), as64(&cum));
    let new_bins = percents
        .iter()
        .map(|&q| interp(q, &cum_pct, &values) as f32)
        .collect();
    let new_cum: Vec<f64> = percents
        .iter()
        .map(|&q| interp(q, &cum_pct, &cum))
        .collect();
    let new_weights = new_cum
        .iter()
        .enumerate()
        .map(|(i, c)| (c - if i == 0 { 0.0 } else { new_cum[i - 1] }) as f32)
        .collect();
    (new_bins, new_weights)
}

/// `np.interp(x, xp, fp)`.
fn interp(x: f64, xp: &[f64], fp: &[f64]) -> f64 {
    if x <= xp[0] {
        return fp[0];
    }
    if x >= xp[xp.len() - 1] {
        return fp[fp.len() - 1];
    }
    let j = xp.partition_point(|&p| p <= x);
    let (x0, x1, y0, y1) = (xp[j - 1], xp[j], fp[j - 1], fp[j]);
    if x1 == x0 {
        return y1;
    }
    y0 + (x - x0) * (y1 - y0) / (x1 - x0)
}
