//! Metrics with Keras' names, computed on the host from each batch's outputs
//! (`keras/src/metrics/accuracy_metrics.py`). Values are means over all examples seen.

use serde::{Deserialize, Serialize};

use super::loss::{Family, LossKind};
use crate::error::{KilnError, Result};

/// A metric, named as the user wrote it (that name is the key in logs and `history.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricSpec {
    /// The key under which values are reported (`accuracy`, `top_k_categorical_accuracy`).
    pub name: String,
    /// What is computed.
    pub kind: MetricKind,
}

/// What a metric computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetricKind {
    /// `argmax(output) == label`.
    CategoricalAccuracy,
    /// `(output > 0.5) == label`, averaged over units.
    BinaryAccuracy,
    /// The label is among the `k` largest outputs (Keras' default `k = 5`).
    TopK(usize),
    /// `mean(|output - target|)` over the units (Keras' `mae`, `mean_absolute_error`).
    MeanAbsoluteError,
    /// `mean((output - target)^2)` over the units (Keras' `mse`, `mean_squared_error`).
    MeanSquaredError,
    /// A metric registered with [`super::register_metric`].
    Custom(super::CustomMetric),
}

const NAMES: &str = "accuracy, sparse_categorical_accuracy, categorical_accuracy, binary_accuracy, top_k_categorical_accuracy, sparse_top_k_categorical_accuracy, mae (mean_absolute_error), mse (mean_squared_error)";

impl MetricSpec {
    /// Resolves a Keras metric name. `accuracy` becomes the accuracy that fits the loss, as in
    /// Keras: binary for `binary_crossentropy` or one output unit, categorical otherwise.
    ///
    /// # Errors
    /// [`KilnError::Config`] for an unknown name, listing the allowed ones.
    pub fn parse(name: &str, index: usize, loss: LossKind, units: usize) -> Result<MetricSpec> {
        Self::parse_at(name, &format!("compile.metrics[{index}]"), loss, units)
    }

    /// [`MetricSpec::parse`], naming `key` (e.g. `compile.metrics.value[0]`) in errors.
    ///
    /// # Errors
    /// As [`MetricSpec::parse`].
    pub fn parse_at(name: &str, key: &str, loss: LossKind, units: usize) -> Result<MetricSpec> {
        let kind = match name {
            "accuracy" | "acc" => {
                if loss.family() == Family::Sigmoid || units == 1 {
                    MetricKind::BinaryAccuracy
                } else {
                    MetricKind::CategoricalAccuracy
                }
            }
            "sparse_categorical_accuracy" | "categorical_accuracy" => {
                MetricKind::CategoricalAccuracy
            }
            "binary_accuracy" => MetricKind::BinaryAccuracy,
            "top_k_categorical_accuracy" | "sparse_top_k_categorical_accuracy" => {
                MetricKind::TopK(5)
            }
            "mae" | "mean_absolute_error" => MetricKind::MeanAbsoluteError,
            "mse" | "mean_squared_error" => MetricKind::MeanSquaredError,
            other => match super::custom::metric(other) {
                Some(Ok(custom)) => MetricKind::Custom(custom),
                Some(Err(e)) => {
                    return Err(KilnError::config(format!("{key} ({other})"), e));
                }
                None => {
                    return Err(KilnError::config(
                        key,
                        format!(
                            "unknown metric \"{other}\"; allowed: {NAMES}{}",
                            super::custom::registered_metrics()
                        ),
                    ));
                }
            },
        };
        Ok(MetricSpec {
            name: name.to_string(),
            kind,
        })
    }
}

/// A metric's sum over the rows of a batch (divide by the row count for its mean): correct
/// predictions for the accuracies (binary accuracy: the fraction of a row's units), the mean
/// over a row's units for the regression metrics.
///
/// `outputs` is `[batch, units]` row-major, `classes` the class index of each example (used by
/// categorical metrics), `targets` the dense targets `[batch, units]` (used by binary accuracy).
pub fn correct(
    kind: MetricKind,
    outputs: &[f32],
    units: usize,
    classes: &[i64],
    targets: &[f32],
) -> f64 {
    match kind {
        MetricKind::CategoricalAccuracy => outputs
            .chunks_exact(units)
            .zip(classes)
            .filter(|&(row, &c)| argmax(row) as i64 == c)
            .count() as f64,
        MetricKind::BinaryAccuracy => {
            let hits = outputs
                .iter()
                .zip(targets)
                .filter(|&(&p, &t)| (p > 0.5) == (t > 0.5))
                .count();
            hits as f64 / units as f64
        }
        MetricKind::TopK(k) => outputs
            .chunks_exact(units)
            .zip(classes)
            .filter(|&(row, &c)| {
                let Some(&target) = row.get(c as usize) else {
                    return false;
                };
                // Keras' in_top_k: the label counts as top-k when fewer than k outputs beat it.
                row.iter().filter(|&&v| v > target).count() < k
            })
            .count() as f64,
        MetricKind::MeanAbsoluteError => unit_mean(outputs, targets, units, |d| d.abs()),
        MetricKind::MeanSquaredError => unit_mean(outputs, targets, units, |d| d * d),
        MetricKind::Custom(m) => m.update(&super::MetricBatch {
            outputs,
            units,
            classes,
            targets,
        }),
    }
}

/// `Σ_rows mean_units f(output - target)`, in f64.
fn unit_mean(outputs: &[f32], targets: &[f32], units: usize, f: fn(f64) -> f64) -> f64 {
    let sum: f64 = outputs
        .iter()
        .zip(targets)
        .map(|(&p, &t)| f(p as f64 - t as f64))
        .sum();
    sum / units.max(1) as f64
}

/// Index of the largest value (the first one on ties, as `numpy.argmax`).
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accuracy_resolves_like_keras() {
        let m =
            MetricSpec::parse("accuracy", 0, LossKind::SparseCategoricalCrossentropy, 10).unwrap();
        assert_eq!(m.kind, MetricKind::CategoricalAccuracy);
        let m = MetricSpec::parse("accuracy", 0, LossKind::BinaryCrossentropy, 1).unwrap();
        assert_eq!(m.kind, MetricKind::BinaryAccuracy);
        let e = MetricSpec::parse("f1", 2, LossKind::MeanSquaredError, 1).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("compile.metrics[2]: unknown metric \"f1\""),
            "{e}"
        );
    }

    #[test]
    fn counts_correct_predictions() {
        let out = [0.1, 0.7, 0.2, 0.5, 0.3, 0.2];
        assert_eq!(
            correct(MetricKind::CategoricalAccuracy, &out, 3, &[1, 1], &[]),
            1.0
        );
        // top-2: row 0 label 2 (0.2 is 2nd largest) in; row 1 label 2 (0.2 smallest) out.
        assert_eq!(correct(MetricKind::TopK(2), &out, 3, &[2, 2], &[]), 1.0);
        // mae / mse: Σ over rows of the row's mean; rows [0.5, -1] and [2, 0] against zeros.
        let reg = [0.5, -1.0, 2.0, 0.0];
        assert_eq!(
            correct(MetricKind::MeanAbsoluteError, &reg, 2, &[], &[0.0; 4]),
            0.75 + 1.0
        );
        assert_eq!(
            correct(MetricKind::MeanSquaredError, &reg, 2, &[], &[0.0; 4]),
            0.625 + 2.0
        );
        let bin = [0.9, 0.2, 0.6, 0.4];
        assert_eq!(
            correct(
                MetricKind::BinaryAccuracy,
                &bin,
                2,
                &[],
                &[1.0, 0.0, 0.0, 0.0]
            ),
            1.5
        );
    }
}
