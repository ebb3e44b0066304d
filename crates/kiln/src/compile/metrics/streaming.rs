//! Keras' streaming classification and regression metrics: ratios of sums kept over the whole
//! epoch (`keras/src/metrics/confusion_metrics.py`, `f_score_metrics.py`,
//! `regression_metrics.py`), not means of per-batch values. Each metric keeps
//! [`Streaming::width`] sums; [`Streaming::update`] adds a batch's, [`Streaming::result`] turns
//! the epoch's into the value (one per class for `F1Score(average=None)`).

use serde::{Deserialize, Serialize};

use super::Threshold;
use crate::error::{KilnError, Result};

mod iou;

pub use iou::MeanIou;

/// Keras' `backend.epsilon()`.
const EPSILON: f64 = 1e-7;
/// Keras' `NEG_INF`: the score `top_k` gives the outputs it drops.
const NEG_INF: f32 = -1e10;

/// A streaming metric and its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Streaming {
    /// `tp / (tp + fp)` (Keras' `Precision`).
    Precision(Confusions),
    /// `tp / (tp + fn)` (Keras' `Recall`).
    Recall(Confusions),
    /// Keras' `F1Score` (beta 1) and `FBetaScore`.
    FBeta(FBeta),
    /// Keras' `AUC`.
    Auc(Auc),
    /// Keras' `R2Score`.
    R2(R2),
    /// Keras' `MeanIoU`.
    MeanIou(MeanIou),
}

/// `Precision` / `Recall` arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confusions {
    /// `thresholds`; unset: 0.5, or every top-k output with `top_k` (as Keras).
    pub thresholds: Option<Threshold>,
    /// `top_k`: only the k largest outputs of a row may count as positive.
    pub top_k: Option<usize>,
    /// `class_id`: count only this unit.
    pub class_id: Option<usize>,
}

/// `F1Score` / `FBetaScore` arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FBeta {
    /// `average`: `None` (one value per class), `micro`, `macro`, `weighted`.
    pub average: Option<Average>,
    /// `threshold`; unset: a row's largest output is its prediction.
    pub threshold: Option<Threshold>,
    /// `beta` (1 for `F1Score`).
    pub beta: Threshold,
    /// Written as `FBetaScore` (logged `fbeta_score`) rather than `F1Score`.
    pub fbeta: bool,
}

/// `F1Score(average=)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Average {
    /// Counts summed over the classes first.
    Micro,
    /// The mean of the classes' scores.
    Macro,
    /// The classes' scores weighted by their positive targets.
    Weighted,
}

/// `AUC` arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Auc {
    /// `num_thresholds` (default 200), evenly spaced over [0, 1].
    pub num_thresholds: usize,
    /// `curve = "PR"` (else ROC).
    pub pr: bool,
    /// `summation_method`.
    pub summation: Summation,
    /// `multi_label`: one curve per unit, averaged.
    pub multi_label: bool,
    /// `from_logits`: outputs go through a sigmoid first.
    pub from_logits: bool,
}

/// `AUC(summation_method=)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Summation {
    /// Trapezoids (PR: Davis & Goadrich's interpolation).
    Interpolation,
    /// Left Riemann sums with the lower height.
    Minoring,
    /// With the higher height.
    Majoring,
}

/// `R2Score` arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct R2 {
    /// `class_aggregation = "variance_weighted_average"` (else `uniform_average`).
    pub variance_weighted: bool,
}

impl Streaming {
    /// The metric written `name` (Keras' snake-case alias or class name) for outputs of
    /// `units` units, its arguments taken from `table`; `None` when `name` is not one of these.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `key.<argument>` for an argument out of its range.
    pub fn parse(
        name: &str,
        table: &mut toml::Table,
        key: &str,
        units: usize,
    ) -> Option<Result<Streaming>> {
        let parsed = match name {
            "precision" | "Precision" => {
                confusions(table, key, name, units).map(Streaming::Precision)
            }
            "recall" | "Recall" => confusions(table, key, name, units).map(Streaming::Recall),
            "f1_score" | "F1Score" => fbeta(table, key, name, false),
            "f_beta_score" | "fbeta_score" | "FBetaScore" => fbeta(table, key, name, true),
            "auc" | "AUC" => auc(table, key),
            "r2_score" | "R2Score" => r2(table, key),
            "mean_io_u" | "mean_iou" | "MeanIoU" => {
                MeanIou::parse(table, key, units).map(Streaming::MeanIou)
            }
            _ => return None,
        };
        Some(parsed)
    }

    /// Keras' default name in the logs.
    pub fn default_name(self) -> &'static str {
        match self {
            Streaming::Precision(_) => "precision",
            Streaming::Recall(_) => "recall",
            Streaming::FBeta(f) if f.fbeta => "fbeta_score",
            Streaming::FBeta(_) => "f1_score",
            Streaming::Auc(_) => "auc",
            Streaming::R2(_) => "r2_score",
            Streaming::MeanIou(_) => "mean_io_u",
        }
    }

    /// The arguments that differ from Keras' defaults, as [`Streaming::parse`] reads them.
    pub fn to_toml(self, t: &mut toml::Table) {
        let mut put = |k: &str, v: toml::Value| {
            t.insert(k.into(), v);
        };
        match self {
            Streaming::Precision(c) | Streaming::Recall(c) => {
                if let Some(at) = c.thresholds {
                    put("thresholds", decimal(at));
                }
                if let Some(k) = c.top_k {
                    put("top_k", (k as i64).into());
                }
                if let Some(id) = c.class_id {
                    put("class_id", (id as i64).into());
                }
            }
            Streaming::FBeta(f) => {
                if let Some(a) = f.average {
                    put("average", format!("{a:?}").to_lowercase().into());
                }
                if let Some(at) = f.threshold {
                    put("threshold", decimal(at));
                }
                if f.beta.0 != 1.0 {
                    put("beta", decimal(f.beta));
                }
            }
            Streaming::Auc(a) => {
                if a.num_thresholds != 200 {
                    put("num_thresholds", (a.num_thresholds as i64).into());
                }
                if a.pr {
                    put("curve", "PR".into());
                }
                if a.summation != Summation::Interpolation {
                    put(
                        "summation_method",
                        format!("{:?}", a.summation).to_lowercase().into(),
                    );
                }
                if a.multi_label {
                    put("multi_label", true.into());
                }
                if a.from_logits {
                    put("from_logits", true.into());
                }
            }
            Streaming::R2(r) => {
                if r.variance_weighted {
                    put("class_aggregation", "variance_weighted_average".into());
                }
            }
            Streaming::MeanIou(m) => m.to_toml(&mut put),
        }
    }

    /// How many sums the metric keeps for outputs of `units` units.
    pub fn width(self, units: usize) -> usize {
        let units = units.max(1);
        match self {
            Streaming::Precision(_) | Streaming::Recall(_) => 3,
            Streaming::FBeta(_) => 4 * units,
            Streaming::Auc(a) => 2 * a.num_thresholds * if a.multi_label { units } else { 1 },
            Streaming::R2(_) => 3 * units + 1,
            Streaming::MeanIou(m) => m.width(),
        }
    }

    /// Adds a batch to `sums` ([`Streaming::width`] long): `outputs` and `targets` are
    /// `[rows, units]` row-major.
    pub fn update(self, outputs: &[f32], targets: &[f32], units: usize, sums: &mut [f64]) {
        let units = units.max(1);
        match self {
            Streaming::Precision(c) | Streaming::Recall(c) => {
                c.update(outputs, targets, units, sums)
            }
            Streaming::FBeta(f) => f.update(outputs, targets, units, sums),
            Streaming::Auc(a) => a.update(outputs, targets, units, sums),
            Streaming::R2(_) => r2_update(outputs, targets, units, sums),
            Streaming::MeanIou(m) => m.update(outputs, targets, units, sums),
        }
    }

    /// The epoch's value(s) from its `sums`.
    pub fn result(self, sums: &[f64]) -> Vec<f64> {
        match self {
            Streaming::Precision(_) => vec![no_nan(sums[0], sums[0] + sums[1])],
            Streaming::Recall(_) => vec![no_nan(sums[0], sums[0] + sums[2])],
            Streaming::FBeta(f) => f.result(sums),
            Streaming::Auc(a) => vec![a.result(sums)],
            Streaming::R2(r) => vec![r.result(sums)],
            Streaming::MeanIou(m) => vec![m.result(sums)],
        }
    }
}

/// `a / b`, 0 where `b` is 0 (Keras' `divide_no_nan`).
fn no_nan(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { a / b }
}

/// A threshold through its shortest decimal, so that 0.3 reads back as 0.3.
fn decimal(Threshold(at): Threshold) -> toml::Value {
    at.to_string().parse().unwrap_or(at as f64).into()
}

impl Confusions {
    /// Sums `[tp, fp, fn]` over the counted units.
    fn update(self, outputs: &[f32], targets: &[f32], units: usize, sums: &mut [f64]) {
        let at = self
            .thresholds
            .map_or(if self.top_k.is_some() { NEG_INF } else { 0.5 }, |t| t.0);
        for (row, labels) in outputs.chunks_exact(units).zip(targets.chunks_exact(units)) {
            let kept = self.top_k.map(|k| top_k_mask(row, k));
            for j in self.class_id.map_or(0..units, |c| c..(c + 1).min(units)) {
                let score = match &kept {
                    Some(mask) if !mask[j] => NEG_INF,
                    _ => row[j],
                };
                let (predicted, positive) = (score > at, labels[j] != 0.0);
                let cell = match (predicted, positive) {
                    (true, true) => 0,
                    (true, false) => 1,
                    (false, true) => 2,
                    (false, false) => continue,
                };
                sums[cell] += 1.0;
            }
        }
    }
}

/// Which units of `row` are among its `k` largest (the first ones on ties, as `top_k`).
fn top_k_mask(row: &[f32], k: usize) -> Vec<bool> {
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
    let mut mask = vec![false; row.len()];
    for &i in order.iter().take(k) {
        mask[i] = true;
    }
    mask
}

impl FBeta {
    /// Per class: sums `[tp; units]`, `[fp; units]`, `[fn; units]`, `[positives; units]`.
    fn update(self, outputs: &[f32], targets: &[f32], units: usize, sums: &mut [f64]) {
        for (row, labels) in outputs.chunks_exact(units).zip(targets.chunks_exact(units)) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for (j, (&p, &t)) in row.iter().zip(labels).enumerate() {
                let predicted = match self.threshold {
                    Some(Threshold(at)) => p > at,
                    None => p >= max && p.abs() > 1e-9,
                };
                let (pred, t) = (f64::from(u8::from(predicted)), f64::from(t));
                sums[j] += pred * t;
                sums[units + j] += pred * (1.0 - t);
                sums[2 * units + j] += (1.0 - pred) * t;
                sums[3 * units + j] += t;
            }
        }
    }

    fn result(self, sums: &[f64]) -> Vec<f64> {
        let units = sums.len() / 4;
        let (tp, rest) = sums.split_at(units);
        let (fp, rest) = rest.split_at(units);
        let (fneg, weights) = rest.split_at(units);
        let b2 = f64::from(self.beta.0).powi(2);
        let score = |tp: f64, fp: f64, fneg: f64| {
            let precision = tp / (tp + fp + EPSILON);
            let recall = tp / (tp + fneg + EPSILON);
            (1.0 + b2) * precision * recall / (b2 * precision + recall + EPSILON)
        };
        if self.average == Some(Average::Micro) {
            let total = |v: &[f64]| v.iter().sum::<f64>();
            return vec![score(total(tp), total(fp), total(fneg))];
        }
        let per_class: Vec<f64> = (0..units).map(|j| score(tp[j], fp[j], fneg[j])).collect();
        match self.average {
            None => per_class,
            Some(Average::Weighted) => {
                let total = weights.iter().sum::<f64>() + EPSILON;
                vec![
                    per_class
                        .iter()
                        .zip(weights)
                        .map(|(f, w)| f * w / total)
                        .sum(),
                ]
            }
            Some(_) => vec![per_class.iter().sum::<f64>() / units as f64],
        }
    }
}

impl Auc {
    /// Per label (one without `multi_label`): positives and negatives per threshold bucket,
    /// `[tp_bucket; T]` then `[fp_bucket; T]`, bucketed as Keras' evenly spaced thresholds.
    fn update(self, outputs: &[f32], targets: &[f32], units: usize, sums: &mut [f64]) {
        let n = self.num_thresholds;
        for (i, (&p, &t)) in outputs.iter().zip(targets).enumerate() {
            let p = if self.from_logits {
                1.0 / (1.0 + (-p).exp())
            } else {
                p
            };
            // Keras: bucket = ceil(p (T - 1)) - 1, clipped to [0, T - 1], in float32.
            let bucket = ((p.clamp(0.0, 1.0) * (n - 1) as f32).ceil() - 1.0).max(0.0) as usize;
            let label = if self.multi_label { i % units } else { 0 };
            let base = label * 2 * n + if t != 0.0 { 0 } else { n };
            sums[base + bucket.min(n - 1)] += 1.0;
        }
    }

    fn result(self, sums: &[f64]) -> f64 {
        let n = self.num_thresholds;
        let curves: Vec<f64> = sums.chunks_exact(2 * n).map(|s| self.area(s)).collect();
        curves.iter().sum::<f64>() / curves.len().max(1) as f64
    }

    /// One label's area from its bucket counts.
    fn area(self, buckets: &[f64]) -> f64 {
        let n = self.num_thresholds;
        // Counts above each threshold: reverse cumulative sums of the buckets.
        let above = |b: &[f64]| {
            let mut acc = 0.0;
            let mut v: Vec<f64> = b
                .iter()
                .rev()
                .map(|x| {
                    acc += x;
                    acc
                })
                .collect();
            v.reverse();
            v
        };
        let (tp, fp) = (above(&buckets[..n]), above(&buckets[n..]));
        let (pos, neg) = (tp[0], fp[0]);
        if self.pr && self.summation == Summation::Interpolation {
            return interpolate_pr(&tp, &fp, pos);
        }
        let recall: Vec<f64> = tp.iter().map(|&t| no_nan(t, pos)).collect();
        let (x, y): (Vec<f64>, Vec<f64>) = if self.pr {
            let precision = tp
                .iter()
                .zip(&fp)
                .map(|(&t, &f)| no_nan(t, t + f))
                .collect();
            (recall, precision)
        } else {
            (fp.iter().map(|&f| no_nan(f, neg)).collect(), recall)
        };
        (0..n - 1)
            .map(|i| {
                let height = match self.summation {
                    Summation::Interpolation => (y[i] + y[i + 1]) / 2.0,
                    Summation::Minoring => y[i].min(y[i + 1]),
                    Summation::Majoring => y[i].max(y[i + 1]),
                };
                (x[i] - x[i + 1]) * height
            })
            .sum()
    }
}

/// Keras' `interpolate_pr_auc` (Davis & Goadrich) over counts above each threshold.
fn interpolate_pr(tp: &[f64], fp: &[f64], positives: f64) -> f64 {
    (0..tp.len() - 1)
        .map(|i| {
            let (p0, p1) = (tp[i] + fp[i], tp[i + 1] + fp[i + 1]);
            let dtp = tp[i] - tp[i + 1];
            let slope = no_nan(dtp, (p0 - p1).max(0.0));
            let intercept = tp[i + 1] - slope * p1;
            let ratio = if p0 > 0.0 && p1 > 0.0 { p0 / p1 } else { 1.0 };
            // fn at i + 1 is positives - tp[i + 1], so tp + fn = positives.
            no_nan(slope * (dtp + intercept * ratio.ln()), positives.max(0.0))
        })
        .sum()
}

/// Sums `[rows, Σy; units, Σy²; units, Σ(y - p)²; units]`.
fn r2_update(outputs: &[f32], targets: &[f32], units: usize, sums: &mut [f64]) {
    for (row, labels) in outputs.chunks_exact(units).zip(targets.chunks_exact(units)) {
        sums[0] += 1.0;
        for (j, (&p, &y)) in row.iter().zip(labels).enumerate() {
            let (p, y) = (f64::from(p), f64::from(y));
            sums[1 + j] += y;
            sums[1 + units + j] += y * y;
            sums[1 + 2 * units + j] += (y - p) * (y - p);
        }
    }
}

impl R2 {
    fn result(self, sums: &[f64]) -> f64 {
        let units = (sums.len() - 1) / 3;
        let count = sums[0];
        let total = |j: usize| sums[1 + units + j] - sums[1 + j] * sums[1 + j] / count;
        let raw = |j: usize| {
            let r = 1.0 - sums[1 + 2 * units + j] / total(j);
            if r.is_infinite() { 0.0 } else { r }
        };
        if self.variance_weighted {
            let weighted: f64 = (0..units).map(|j| total(j) * raw(j)).sum();
            weighted / (0..units).map(total).sum::<f64>()
        } else {
            (0..units).map(raw).sum::<f64>() / units as f64
        }
    }
}

/// A config error for `key.arg`.
fn bad(key: &str, arg: &str, message: String) -> KilnError {
    KilnError::config(format!("{key}.{arg}"), message)
}

/// A number in `[low, high]` (`open_low`: excluding `low`), or an error naming `key.arg`.
fn number(
    table: &mut toml::Table,
    key: &str,
    arg: &str,
    (low, high, open_low): (f64, f64, bool),
    what: &str,
) -> Result<Option<Threshold>> {
    let Some(v) = table.remove(arg) else {
        return Ok(None);
    };
    let x = v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
    match x {
        Some(x) if x <= high && (x > low || (!open_low && x == low)) => {
            Ok(Some(Threshold(x as f32)))
        }
        _ => Err(bad(key, arg, format!("{what}, got {v}"))),
    }
}

/// A whole number >= `low`, or an error naming `key.arg`.
fn count(table: &mut toml::Table, key: &str, arg: &str, low: i64) -> Result<Option<usize>> {
    let Some(v) = table.remove(arg) else {
        return Ok(None);
    };
    match v.as_integer() {
        Some(n) if n >= low => Ok(Some(n as usize)),
        _ => Err(bad(
            key,
            arg,
            format!("{arg} must be an integer >= {low}, got {v}"),
        )),
    }
}

/// A boolean, or an error naming `key.arg`.
fn flag(table: &mut toml::Table, key: &str, arg: &str) -> Result<bool> {
    match table.remove(arg) {
        None => Ok(false),
        Some(toml::Value::Boolean(b)) => Ok(b),
        Some(v) => Err(bad(
            key,
            arg,
            format!("{arg} must be true or false, got {v}"),
        )),
    }
}

/// A boolean (`default` when absent), or an error naming `key.arg`.
fn flag_default(table: &mut toml::Table, key: &str, arg: &str, default: bool) -> Result<bool> {
    if !table.contains_key(arg) {
        return Ok(default);
    }
    flag(table, key, arg)
}

/// One of `allowed` (its index), or an error naming `key.arg`.
fn choice(
    table: &mut toml::Table,
    key: &str,
    arg: &str,
    allowed: &[&str],
) -> Result<Option<usize>> {
    let Some(v) = table.remove(arg) else {
        return Ok(None);
    };
    match v
        .as_str()
        .and_then(|s| allowed.iter().position(|a| a.eq_ignore_ascii_case(s)))
    {
        Some(i) => Ok(Some(i)),
        None => Err(bad(
            key,
            arg,
            format!("{arg} must be one of {}, got {v}", allowed.join(", ")),
        )),
    }
}

fn confusions(table: &mut toml::Table, key: &str, name: &str, units: usize) -> Result<Confusions> {
    let what = format!("{name} needs thresholds as one number in [0, 1]");
    let thresholds = number(table, key, "thresholds", (0.0, 1.0, false), &what)?;
    let top_k = count(table, key, "top_k", 1)?;
    let class_id = count(table, key, "class_id", 0)?;
    if let Some(id) = class_id.filter(|&id| id >= units.max(1)) {
        return Err(bad(
            key,
            "class_id",
            format!("class_id {id} is not a unit of the output's {units}"),
        ));
    }
    Ok(Confusions {
        thresholds,
        top_k,
        class_id,
    })
}

fn fbeta(table: &mut toml::Table, key: &str, name: &str, is_fbeta: bool) -> Result<Streaming> {
    let average = choice(table, key, "average", &["micro", "macro", "weighted"])?
        .map(|i| [Average::Micro, Average::Macro, Average::Weighted][i]);
    let what = format!("{name} needs threshold as one number in (0, 1] (as Keras)");
    let threshold = number(table, key, "threshold", (0.0, 1.0, true), &what)?;
    let beta = if is_fbeta {
        let what = format!("{name} needs beta as a number > 0");
        number(table, key, "beta", (0.0, f64::MAX, true), &what)?
    } else {
        None
    };
    Ok(Streaming::FBeta(FBeta {
        average,
        threshold,
        beta: beta.unwrap_or(Threshold(1.0)),
        fbeta: is_fbeta,
    }))
}

fn auc(table: &mut toml::Table, key: &str) -> Result<Streaming> {
    let summation = choice(
        table,
        key,
        "summation_method",
        &["interpolation", "minoring", "majoring"],
    )?
    .map_or(Summation::Interpolation, |i| {
        [
            Summation::Interpolation,
            Summation::Minoring,
            Summation::Majoring,
        ][i]
    });
    Ok(Streaming::Auc(Auc {
        num_thresholds: count(table, key, "num_thresholds", 2)?.unwrap_or(200),
        pr: choice(table, key, "curve", &["ROC", "PR"])? == Some(1),
        summation,
        multi_label: flag(table, key, "multi_label")?,
        from_logits: flag(table, key, "from_logits")?,
    }))
}

fn r2(table: &mut toml::Table, key: &str) -> Result<Streaming> {
    let allowed = ["uniform_average", "variance_weighted_average"];
    Ok(Streaming::R2(R2 {
        variance_weighted: choice(table, key, "class_aggregation", &allowed)? == Some(1),
    }))
}

#[cfg(test)]
mod tests;
