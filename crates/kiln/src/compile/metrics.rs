//! Metrics with Keras' names, computed on the host from each batch's outputs
//! (`keras/src/metrics/accuracy_metrics.py`). Values are means over all examples seen.

use serde::{Deserialize, Serialize};

use super::loss::{Family, LossKind};
use crate::error::{KilnError, Result};

mod streaming;
pub use streaming::Streaming;

/// A metric, named as the user wrote it (that name is the key in logs and `history.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricSpec {
    /// The key under which values are reported (`accuracy`, `top_k_categorical_accuracy`, or
    /// the table's `name`).
    pub name: String,
    /// The metric as written (`type`: `acc`, `top_k_categorical_accuracy`).
    pub given: String,
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
    /// `sqrt` of the epoch's mean squared error (Keras' `RootMeanSquaredError`).
    RootMeanSquaredError,
    /// `100 mean(|(target - output) / max(|target|, ε)|)` over the units (Keras'
    /// `MeanAbsolutePercentageError`).
    MeanAbsolutePercentageError,
    /// The cosine of the angle between a row's output and target (Keras' `CosineSimilarity`).
    CosineSimilarity,
    /// A count over every unit of the epoch: `output > threshold` against a nonzero target
    /// (Keras' `TruePositives`, `FalsePositives`, `TrueNegatives`, `FalseNegatives`).
    Confusion(Confusion, Threshold),
    /// A ratio of several sums kept over the epoch (Keras' `Precision`, `Recall`, `AUC`,
    /// `F1Score`, `FBetaScore`, `R2Score`).
    Streaming(Streaming),
    /// A metric registered with [`super::register_metric`].
    Custom(super::CustomMetric),
}

const NAMES: &str = "accuracy, sparse_categorical_accuracy, categorical_accuracy, binary_accuracy, top_k_categorical_accuracy, sparse_top_k_categorical_accuracy, mae (mean_absolute_error), mse (mean_squared_error), root_mean_squared_error (rmse), mean_absolute_percentage_error (mape), cosine_similarity, true_positives, false_positives, true_negatives, false_negatives, precision, recall, auc, f1_score, fbeta_score, r2_score, mean_io_u (MeanIoU)";

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
        Self::from_toml_at(&toml::Value::from(name), key, loss, units)
    }

    /// A metric given as a name or as a table `{ type = "<name>", name = "<log key>", k = 2 }`
    /// (`k`: the top-k accuracies' k, default 5, as Keras).
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `key` (or its field) for an unknown metric or argument,
    /// or a `k` below 1.
    pub fn from_toml_at(
        value: &toml::Value,
        key: &str,
        loss: LossKind,
        units: usize,
    ) -> Result<MetricSpec> {
        let (mut table, name) = super::named_table(value, key, NAMES)?;
        table.remove("type");
        let streaming = Streaming::parse(&name, &mut table, key, units).transpose()?;
        let logged = match table.remove("name") {
            None => streaming.map_or(name.clone(), |s| s.default_name().to_string()),
            Some(toml::Value::String(s)) if !s.is_empty() => s,
            Some(other) => {
                return Err(KilnError::config(
                    format!("{key}.name"),
                    format!("expected the metric's name in the logs, got {other}"),
                ));
            }
        };
        let mut kind = match streaming {
            Some(s) => MetricKind::Streaming(s),
            None => Self::kind(&name, key, loss, units)?,
        };
        if let MetricKind::TopK(k) = &mut kind
            && let Some(v) = table.remove("k")
        {
            *k = top_k(&v, key)?;
        }
        if let MetricKind::Confusion(_, t) = &mut kind
            && let Some(v) = table.remove("thresholds")
        {
            *t = threshold(&v, key, &name)?;
        }
        if let Some(extra) = table.keys().next() {
            return Err(KilnError::config(
                format!("{key}.{extra}"),
                format!("metric \"{name}\" has no argument \"{extra}\""),
            ));
        }
        Ok(MetricSpec {
            name: logged,
            given: name,
            kind,
        })
    }

    /// The metric as `compile.metrics` reads it back: its name, or a table when it has
    /// another name in the logs or a `k` other than Keras' 5.
    pub fn to_toml(&self) -> toml::Value {
        let mut t = toml::Table::new();
        let logged = match self.kind {
            MetricKind::Streaming(s) => s.default_name(),
            _ => &self.given,
        };
        if self.name != logged {
            t.insert("name".into(), self.name.clone().into());
        }
        if let MetricKind::Streaming(s) = self.kind {
            s.to_toml(&mut t);
        }
        if let MetricKind::TopK(k) = self.kind
            && k != 5
        {
            t.insert("k".into(), (k as i64).into());
        }
        if let MetricKind::Confusion(_, Threshold(at)) = self.kind
            && at != 0.5
        {
            // Through its shortest decimal, so that 0.3 reads back as 0.3.
            let at: f64 = at.to_string().parse().unwrap_or(at as f64);
            t.insert("thresholds".into(), at.into());
        }
        if t.is_empty() {
            return self.given.clone().into();
        }
        t.insert("type".into(), self.given.clone().into());
        toml::Value::Table(t)
    }

    fn kind(name: &str, key: &str, loss: LossKind, units: usize) -> Result<MetricKind> {
        let confusion = |c| MetricKind::Confusion(c, Threshold(0.5));
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
            "rmse" | "root_mean_squared_error" => MetricKind::RootMeanSquaredError,
            "mape" | "mean_absolute_percentage_error" => MetricKind::MeanAbsolutePercentageError,
            "cosine_similarity" => MetricKind::CosineSimilarity,
            "true_positives" => confusion(Confusion::TruePositives),
            "false_positives" => confusion(Confusion::FalsePositives),
            "true_negatives" => confusion(Confusion::TrueNegatives),
            "false_negatives" => confusion(Confusion::FalseNegatives),
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
        Ok(kind)
    }
}

/// Which cell of the confusion matrix a count metric counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Confusion {
    /// Predicted positive, positive target.
    TruePositives,
    /// Predicted positive, negative target.
    FalsePositives,
    /// Predicted negative, negative target.
    TrueNegatives,
    /// Predicted negative, positive target.
    FalseNegatives,
}

impl Confusion {
    /// True when a unit with `positive` prediction and `target` falls in this cell.
    fn counts(self, predicted: bool, target: bool) -> bool {
        match self {
            Confusion::TruePositives => predicted && target,
            Confusion::FalsePositives => predicted && !target,
            Confusion::TrueNegatives => !predicted && !target,
            Confusion::FalseNegatives => !predicted && target,
        }
    }
}

/// A decision threshold in `[0, 1]` (Keras' `thresholds`, default 0.5); equal by value.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Threshold(pub f32);

impl PartialEq for Threshold {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}
impl Eq for Threshold {}

/// `thresholds`: one number in `[0, 1]`.
fn threshold(v: &toml::Value, key: &str, name: &str) -> Result<Threshold> {
    let t = v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
    match t {
        Some(t) if (0.0..=1.0).contains(&t) => Ok(Threshold(t as f32)),
        _ => Err(KilnError::config(
            format!("{key}.thresholds"),
            format!("{name} needs thresholds as one number in [0, 1], got {v}"),
        )),
    }
}

/// The top-k accuracies' `k`: an integer >= 1.
fn top_k(v: &toml::Value, key: &str) -> Result<usize> {
    match v.as_integer() {
        Some(k) if k >= 1 => Ok(k as usize),
        _ => Err(KilnError::config(
            format!("{key}.k"),
            format!("k counts the top outputs: an integer >= 1, got {v}"),
        )),
    }
}

impl MetricKind {
    /// The epoch's value from the sum of what [`correct`] returned over its `examples`: the
    /// count itself for the confusion counts, the square root of the mean for the root mean
    /// squared error, the mean over examples otherwise.
    pub fn result(self, sum: f64, examples: f64) -> f64 {
        match self {
            MetricKind::Confusion(..) => sum,
            MetricKind::RootMeanSquaredError => (sum / examples).sqrt(),
            _ => sum / examples,
        }
    }

    /// How many sums the metric keeps over an epoch for outputs of `units` units: several
    /// for a [`Streaming`] metric, one otherwise.
    pub fn width(self, units: usize) -> usize {
        match self {
            MetricKind::Streaming(s) => s.width(units),
            _ => 1,
        }
    }

    /// The epoch's value(s) from its [`MetricKind::width`] `sums` over `examples`: one, or
    /// one per class for `F1Score` without `average`.
    pub fn values(self, sums: &[f64], examples: f64) -> Vec<f64> {
        match self {
            MetricKind::Streaming(s) => s.result(sums),
            _ => vec![self.result(sums[0], examples)],
        }
    }
}

/// A batch's [`MetricKind::width`] sums (see [`correct`] for the arguments). Streaming metrics
/// read dense targets; for sparse labels they are the one-hot rows of `classes`.
pub fn batch_sums(
    kind: MetricKind,
    outputs: &[f32],
    units: usize,
    classes: &[i64],
    targets: &[f32],
) -> Vec<f64> {
    let MetricKind::Streaming(s) = kind else {
        return vec![correct(kind, outputs, units, classes, targets)];
    };
    let mut sums = vec![0.0; s.width(units)];
    if targets.len() == outputs.len() {
        s.update(outputs, targets, units, &mut sums);
    } else {
        let mut dense = vec![0.0; outputs.len()];
        for (row, &c) in dense.chunks_exact_mut(units.max(1)).zip(classes) {
            if let Some(v) = row.get_mut(c as usize) {
                *v = 1.0;
            }
        }
        s.update(outputs, &dense, units, &mut sums);
    }
    sums
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
        MetricKind::MeanAbsoluteError => unit_mean(outputs, targets, units, |p, t| (p - t).abs()),
        MetricKind::MeanSquaredError | MetricKind::RootMeanSquaredError => {
            unit_mean(outputs, targets, units, |p, t| (p - t) * (p - t))
        }
        MetricKind::MeanAbsolutePercentageError => unit_mean(outputs, targets, units, |p, t| {
            100.0 * ((t - p) / t.abs().max(super::EPSILON)).abs()
        }),
        MetricKind::CosineSimilarity => outputs
            .chunks_exact(units.max(1))
            .zip(targets.chunks_exact(units.max(1)))
            .map(|(p, t)| cosine(p, t))
            .sum(),
        MetricKind::Confusion(cell, Threshold(at)) => outputs
            .iter()
            .zip(targets)
            .filter(|&(&p, &t)| cell.counts(p > at, t != 0.0))
            .count() as f64,
        // Several sums per batch: see `batch_sums`.
        MetricKind::Streaming(_) => 0.0,
        MetricKind::Custom(m) => m.update(&super::MetricBatch {
            outputs,
            units,
            classes,
            targets,
        }),
    }
}

/// `Σ_rows mean_units f(output, target)`, in f64.
fn unit_mean(outputs: &[f32], targets: &[f32], units: usize, f: fn(f64, f64) -> f64) -> f64 {
    let sum: f64 = outputs
        .iter()
        .zip(targets)
        .map(|(&p, &t)| f(p as f64, t as f64))
        .sum();
    sum / units.max(1) as f64
}

/// `Σ unit(p) · unit(t)`, each scaled by `min(1 / ‖x‖, 1 / ε)` as Keras' `normalize`.
fn cosine(p: &[f32], t: &[f32]) -> f64 {
    let inv = |x: &[f32]| {
        let norm = x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
        (1.0 / norm).min(1.0 / super::EPSILON)
    };
    let dot: f64 = p.iter().zip(t).map(|(&a, &b)| a as f64 * b as f64).sum();
    dot * inv(p) * inv(t)
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

/// Metrics streamed over two batches as `fit` accumulates them, against Keras 3.15's
/// `update_state` / `result` (`tests/reference/losses_reference.py`).
#[cfg(test)]
mod keras_tests {
    use super::*;

    const REG_Y: [f32; 12] = [
        1.0, -0.5, 2.0, 0.3, 0.05, -1.2, 2.5, 1.0, 0.4, -0.7, 0.9, 1.5,
    ];
    const REG_P: [f32; 12] = [
        0.8, 0.1, 2.6, 0.2, 0.5, -3.0, 0.5, 1.1, 0.7, -0.2, 2.4, 1.45,
    ];
    const SCORES: [f32; 12] = [
        0.3, -0.8, 1.7, -0.4, 0.6, 0.2, 2.0, 0.45, -1.1, -0.3, 0.9, 0.15,
    ];
    const CLASSES: [i64; 4] = [1, 0, 2, 1];
    const PROBS: [f32; 12] = [0.2, 0.7, 0.1, 0.5, 0.3, 0.2, 0.05, 0.15, 0.8, 0.4, 0.4, 0.2];
    const BINARY: [f32; 12] = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0];

    fn metric(text: &str) -> MetricSpec {
        let v: toml::Table = toml::from_str(&format!("m = {text}")).unwrap();
        MetricSpec::from_toml_at(&v["m"], "compile.metrics[0]", LossKind::MeanSquaredError, 3)
            .unwrap()
    }

    /// The metric's value after the first two rows and after all four, as `fit` reports it.
    fn streamed(m: &MetricSpec, outputs: &[f32; 12], targets: &[f32; 12]) -> [f64; 2] {
        let mut sum = 0.0;
        [0, 1].map(|batch| {
            let rows = batch * 2..batch * 2 + 2;
            let (o, t) = (
                &outputs[rows.start * 3..rows.end * 3],
                &targets[rows.start * 3..rows.end * 3],
            );
            sum += correct(m.kind, o, 3, &CLASSES[rows], t);
            m.kind.result(sum, (2 * (batch + 1)) as f64)
        })
    }

    #[test]
    #[allow(clippy::excessive_precision)]
    fn streamed_metrics_equal_keras() {
        let cases = [
            (
                "\"root_mean_squared_error\"",
                [0.8379040956497192, 0.949341893196106],
            ),
            ("\"rmse\"", [0.8379040956497192, 0.949341893196106]),
            ("\"mape\"", [208.8888702392578, 138.3134765625]),
            (
                "\"cosine_similarity\"",
                [0.9652920961380005, 0.8668362498283386],
            ),
        ];
        for (text, keras) in cases {
            let got = streamed(&metric(text), &REG_P, &REG_Y);
            for (g, k) in got.iter().zip(keras) {
                assert!(
                    (g - k).abs() <= 1e-5 * k.abs().max(1.0),
                    "{text}: {got:?} vs Keras {keras:?}"
                );
            }
        }
        for text in [
            "{ type = \"top_k_categorical_accuracy\", k = 2 }",
            "{ type = \"sparse_top_k_categorical_accuracy\", k = 2 }",
        ] {
            assert_eq!(
                streamed(&metric(text), &SCORES, &[0.0; 12]),
                [0.0, 0.25],
                "{text}"
            );
        }
        // Counts over every unit: PROBS against BINARY at 0.5, and at 0.3.
        let cases = [
            ("\"true_positives\"", [0.0, 0.0]),
            ("\"false_positives\"", [1.0, 2.0]),
            ("\"true_negatives\"", [2.0, 4.0]),
            ("\"false_negatives\"", [3.0, 6.0]),
        ];
        for (text, keras) in cases {
            assert_eq!(streamed(&metric(text), &PROBS, &BINARY), keras, "{text}");
        }
        let t = metric("{ type = \"true_positives\", thresholds = 0.3 }");
        assert_eq!(streamed(&t, &PROBS, &BINARY), [0.0, 1.0]);
    }

    #[test]
    fn tables_name_the_metric_and_read_back() {
        let m = metric("{ type = \"top_k_categorical_accuracy\", k = 2, name = \"top2\" }");
        assert_eq!((m.name.as_str(), m.kind), ("top2", MetricKind::TopK(2)));
        let v: toml::Table = toml::from_str(&format!("m = {}", m.to_toml())).unwrap();
        let back = MetricSpec::from_toml_at(&v["m"], "k", LossKind::MeanSquaredError, 3).unwrap();
        assert_eq!(back, m);
        assert_eq!(metric("\"mae\"").to_toml(), toml::Value::from("mae"));
        let err = |text: &str| {
            let v: toml::Table = toml::from_str(&format!("m = {text}")).unwrap();
            MetricSpec::from_toml_at(&v["m"], "compile.metrics[1]", LossKind::MeanSquaredError, 3)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("{ type = \"top_k_categorical_accuracy\", k = 0 }"),
            "compile.metrics[1].k: k counts the top outputs: an integer >= 1, got 0"
        );
        assert_eq!(
            err("{ type = \"rmse\", k = 2 }"),
            "compile.metrics[1].k: metric \"rmse\" has no argument \"k\""
        );
        assert!(err("{ type = \"r3\" }").starts_with("compile.metrics[1]: unknown metric \"r3\""));
        assert_eq!(
            err("{ type = \"false_negatives\", thresholds = 1.5 }"),
            "compile.metrics[1].thresholds: false_negatives needs thresholds as one number in \
             [0, 1], got 1.5"
        );
        let t = metric("{ type = \"true_negatives\", thresholds = 0.3 }");
        assert_eq!(t.to_toml()["thresholds"].as_float(), Some(0.3));
        assert_eq!(metric(&t.to_toml().to_string()), t);
    }
}
