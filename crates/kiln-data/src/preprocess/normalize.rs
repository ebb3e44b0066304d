//! [`Normalization`]: Keras' `Normalization` layer, with `adapt`.

use crate::dataset::Dataset;
use crate::element::{Array, Buffer};
use crate::error::{DataError, Result};

/// Smallest standard deviation divided by: Keras' `backend.epsilon()`.
const EPSILON: f64 = 1e-7;

/// `keras.layers.Normalization(axis, mean, variance)`: `(x - mean) / sqrt(variance)`, as
/// `float32`, with one mean and variance per index of the kept `axis`es.
///
/// `axis` uses Keras' numbering, which counts the batch axis: for examples of shape
/// `[28, 28, 1]`, `axis = [-1]` (Keras' default) or `[3]` keeps one statistic per channel,
/// `[1, 2]` one per pixel, and `[]` (Keras' `axis=None`) a single mean and variance. `0` (the
/// batch axis) is not allowed.
///
/// **Zero variance.** Keras divides by `max(sqrt(variance), 1e-7)`; kiln does the same except
/// for a variance of exactly 0 (a constant feature), where it divides by 1 — scikit-learn's
/// `StandardScaler` rule — so that a value never seen while adapting is shifted, not blown up
/// by 10^7. On the adapted data both give 0.
///
/// `mean` and `variance` hold one value (broadcast to every index) or one per index of the
/// kept axes, row-major; they are checked against each example when applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalization {
    axis: Vec<i64>,
    mean: Vec<f64>,
    variance: Vec<f64>,
}

/// The example axes (0-based) that Keras' `axis` keeps, for examples of rank `rank`.
fn kept_axes(axis: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut kept = Vec::with_capacity(axis.len());
    for &a in axis {
        let resolved = match a {
            0 => {
                return Err(DataError::InvalidArgument(
                    "axis 0 is the batch axis, which Normalization cannot keep; use 1 for the \
                     example's first axis, -1 for its last, or [] for a single mean"
                        .into(),
                ));
            }
            a if a > 0 => (a - 1) as usize,
            a => match (rank as i64).checked_add(a) {
                Some(r) if r >= 0 => r as usize,
                _ => usize::MAX,
            },
        };
        if resolved >= rank {
            return Err(DataError::InvalidArgument(format!(
                "axis {a} is out of range for examples of rank {rank}; use [] for a single \
                 mean and variance"
            )));
        }
        kept.push(resolved);
    }
    kept.sort_unstable();
    kept.dedup();
    Ok(kept)
}

/// For each value of an array of `shape`, the index of its statistic: the row-major position
/// of its coordinates along the `kept` axes. Returns `(indices, number of statistics)`.
fn stat_indices(shape: &[usize], kept: &[usize]) -> (Vec<usize>, usize) {
    let n: usize = shape.iter().product();
    let stats: usize = kept.iter().map(|&k| shape[k]).product();
    if kept.is_empty() {
        return (vec![0; n], 1);
    }
    // Row-major strides of the array and of the statistics.
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let mut stat_strides = vec![0usize; shape.len()];
    let mut s = 1;
    for &k in kept.iter().rev() {
        stat_strides[k] = s;
        s *= shape[k];
    }
    let indices = (0..n)
        .map(|i| {
            kept.iter()
                .map(|&k| (i / strides[k]) % shape[k] * stat_strides[k])
                .sum()
        })
        .collect();
    (indices, stats)
}

/// Every value as `f64` (exact for all numeric dtypes but large `int64`s).
fn to_f64(data: &Buffer) -> Result<Vec<f64>> {
    Ok(match data {
        Buffer::U8(v) => v.iter().map(|&a| f64::from(a)).collect(),
        Buffer::I32(v) => v.iter().map(|&a| f64::from(a)).collect(),
        Buffer::I64(v) => v.iter().map(|&a| a as f64).collect(),
        Buffer::F32(v) => v.iter().map(|&a| f64::from(a)).collect(),
        Buffer::F64(v) => v.clone(),
        Buffer::String(_) => {
            return Err(DataError::InvalidArgument(
                "cannot normalize string values; parse them to numbers first".into(),
            ));
        }
    })
}

impl Normalization {
    /// Normalization with given statistics (`Normalization(mean=..., variance=...)`).
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] when `mean` and `variance` are empty or differ in
    /// length (unless one has a single value), or a variance is negative or not finite.
    pub fn new(axis: Vec<i64>, mean: Vec<f64>, variance: Vec<f64>) -> Result<Normalization> {
        if mean.is_empty() || variance.is_empty() {
            return Err(DataError::InvalidArgument(
                "mean and variance need at least one value each".into(),
            ));
        }
        if mean.len() != variance.len() && mean.len() != 1 && variance.len() != 1 {
            return Err(DataError::InvalidArgument(format!(
                "mean has {} values but variance has {}; give as many of each (or one)",
                mean.len(),
                variance.len()
            )));
        }
        if let Some(v) = variance.iter().find(|v| !(v.is_finite() && **v >= 0.0)) {
            return Err(DataError::InvalidArgument(format!(
                "variance {v} is not a finite non-negative number"
            )));
        }
        if let Some(m) = mean.iter().find(|m| !m.is_finite()) {
            return Err(DataError::InvalidArgument(format!(
                "mean {m} is not a finite number"
            )));
        }
        Ok(Normalization {
            axis,
            mean,
            variance,
        })
    }

    /// Normalization from a mean and a standard deviation (`variance = std²`).
    ///
    /// # Errors
    /// As [`Normalization::new`].
    pub fn from_std(axis: Vec<i64>, mean: Vec<f64>, std: Vec<f64>) -> Result<Normalization> {
        if let Some(s) = std.iter().find(|s| !(s.is_finite() && **s >= 0.0)) {
            return Err(DataError::InvalidArgument(format!(
                "std {s} is not a finite non-negative number"
            )));
        }
        Normalization::new(axis, mean, std.iter().map(|s| s * s).collect())
    }

    /// `Normalization(axis).adapt(data)`: the mean and (population) variance of component
    /// `component` over every element of one iteration of `dataset`, per index of the kept
    /// axes — what Keras computes, here in `float64` with Welford's update.
    ///
    /// # Errors
    /// The dataset's first error; [`DataError::MissingComponent`]; [`DataError::InvalidArgument`]
    /// for a `string` component, an `axis` out of range, examples whose kept axes change size,
    /// or an empty dataset.
    pub fn adapt(dataset: &Dataset, component: &str, axis: Vec<i64>) -> Result<Normalization> {
        let mut counts: Vec<u64> = Vec::new();
        let mut mean: Vec<f64> = Vec::new();
        let mut m2: Vec<f64> = Vec::new();
        // The last example shape seen, its kept axes and its statistic index per value.
        let mut layout: Option<(Vec<usize>, Vec<usize>, Vec<usize>)> = None;
        for (record, element) in dataset.iter().enumerate() {
            let element = element?;
            let x = element.require(component)?;
            let values = to_f64(x.data())?;
            if layout.as_ref().is_none_or(|(s, _, _)| s != x.shape()) {
                let kept = kept_axes(&axis, x.shape().len())?;
                let (indices, stats) = stat_indices(x.shape(), &kept);
                match &layout {
                    Some((prev, prev_kept, _)) => {
                        let sizes = |s: &[usize], k: &[usize]| -> Vec<usize> {
                            k.iter().map(|&a| s[a]).collect()
                        };
                        if *prev_kept != kept || sizes(prev, prev_kept) != sizes(x.shape(), &kept) {
                            return Err(DataError::InvalidArgument(format!(
                                "element {record} has shape {:?} but earlier ones have \
                                 {prev:?}; the kept axes {axis:?} must have the same sizes in \
                                 every example",
                                x.shape()
                            )));
                        }
                    }
                    None => {
                        counts = vec![0; stats];
                        mean = vec![0.0; stats];
                        m2 = vec![0.0; stats];
                    }
                }
                layout = Some((x.shape().to_vec(), kept, indices));
            }
            let (_, _, indices) = layout.as_ref().expect("set above");
            // Welford's running mean and sum of squared deviations, per statistic.
            for (&v, &s) in values.iter().zip(indices) {
                counts[s] += 1;
                let d = v - mean[s];
                mean[s] += d / counts[s] as f64;
                m2[s] += d * (v - mean[s]);
            }
        }
        if counts.is_empty() || counts.contains(&0) {
            return Err(DataError::InvalidArgument(format!(
                "cannot adapt Normalization on component {component:?}: the dataset has no \
                 values"
            )));
        }
        let variance = m2
            .iter()
            .zip(&counts)
            .map(|(m, &n)| (m / n as f64).max(0.0))
            .collect();
        Normalization::new(axis, mean, variance)
    }

    /// Keras' `axis` (see the type's docs).
    pub fn axis(&self) -> &[i64] {
        &self.axis
    }

    /// The means, row-major over the kept axes.
    pub fn mean(&self) -> &[f64] {
        &self.mean
    }

    /// The variances, row-major over the kept axes.
    pub fn variance(&self) -> &[f64] {
        &self.variance
    }

    /// `(x - mean) / std` as `float32`, with `std = max(sqrt(variance), 1e-7)`, or 1 where the
    /// variance is 0 (see the type's docs).
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] for a `string` array, an `axis` out of range for `x`'s
    /// rank, or statistics whose count differs from the kept axes' size (naming both).
    pub fn apply(&self, x: &Array) -> Result<Array> {
        let kept = kept_axes(&self.axis, x.shape().len())?;
        let (indices, stats) = stat_indices(x.shape(), &kept);
        for (what, v) in [("mean", &self.mean), ("variance", &self.variance)] {
            if v.len() != 1 && v.len() != stats {
                return Err(DataError::InvalidArgument(format!(
                    "{what} has {} values but examples of shape {:?} with axis {:?} need {stats} \
                     (or one)",
                    v.len(),
                    x.shape(),
                    self.axis
                )));
            }
        }
        let at = |v: &[f64], s: usize| if v.len() == 1 { v[0] } else { v[s] };
        let std: Vec<f64> = (0..stats)
            .map(|s| match at(&self.variance, s) {
                0.0 => 1.0,
                var => var.sqrt().max(EPSILON),
            })
            .collect();
        let values = to_f64(x.data())?;
        let out = values
            .iter()
            .zip(&indices)
            .map(|(v, &s)| ((v - at(&self.mean, s)) / std[s]) as f32)
            .collect();
        Array::new(x.shape().to_vec(), Buffer::F32(out))
    }
}
