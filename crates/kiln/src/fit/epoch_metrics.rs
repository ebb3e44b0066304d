//! The epoch's running loss and metric sums (example-weighted means, as Keras' `Mean`
//! metrics), and the logs made from them.

use super::Logs;
use crate::compile::{Compiled, MetricSpec, batch_sums};
use crate::step::{HostLabels, StepOutput};

/// Running sums for the loss and metrics over an epoch (example-weighted means, as Keras'
/// `Mean` metrics).
#[derive(Debug, Default)]
pub(super) struct Accumulator {
    pub(super) examples: f64,
    pub(super) loss: f64,
    pub(super) correct: Vec<f64>,
    /// A model with several outputs: each output's loss sum and metric sums.
    pub(super) per_output: Vec<(f64, Vec<f64>)>,
    /// Batches added.
    pub(super) batches: u64,
    /// A custom train step's logs other than `loss`: each name with its example-weighted sum.
    pub(super) custom: Vec<(String, f64)>,
}

/// A batch's host labels for the metrics: the one output's, or each output's (a model with
/// several, `labels` then unused).
pub(super) struct BatchLabels<'a> {
    pub(super) labels: &'a HostLabels,
    pub(super) outputs: &'a [HostLabels],
}

impl Accumulator {
    pub(super) fn add(
        &mut self,
        compiled: &Compiled,
        out: &StepOutput,
        labels: BatchLabels,
        size: usize,
        units: usize,
    ) {
        let width = widths(&compiled.metrics, units);
        if self.correct.len() != width {
            self.correct = vec![0.0; width];
        }
        self.examples += size as f64;
        self.batches += 1;
        self.loss += out.loss * size as f64;
        // Metrics count rows (output positions); per example, the mean over its positions.
        let rows = out.outputs.len() / units.max(1);
        let positions = (rows / size.max(1)).max(1) as f64;
        let (classes, targets) = (&labels.labels.classes, &labels.labels.targets);
        add_sums(&mut self.correct, &compiled.metrics, positions, |m| {
            batch_sums(m.kind, &out.outputs, units, classes, targets)
        });
        if compiled.outputs.is_empty() {
            return;
        }
        if self.per_output.is_empty() {
            self.per_output = compiled
                .outputs
                .iter()
                .map(|h| (0.0, vec![0.0; widths(&h.metrics, h.units)]))
                .collect();
        }
        let mut start = 0;
        for (k, head) in compiled.outputs.iter().enumerate() {
            let part = columns(&out.outputs, units, start, head.units);
            start += head.units;
            let (loss, sums) = &mut self.per_output[k];
            *loss += out.output_losses.get(k).copied().unwrap_or(f64::NAN) * size as f64;
            let Some(l) = labels.outputs.get(k) else {
                continue;
            };
            add_sums(sums, &head.metrics, positions, |m| {
                batch_sums(m.kind, &part, head.units, &l.classes, &l.targets)
            });
        }
    }

    /// An empty accumulator for the next epoch that keeps the custom logs' names, so that
    /// every epoch logs them (0 when no step was added, as the loss) and the history's lists
    /// stay aligned with its epochs.
    pub(super) fn next_epoch(&self) -> Accumulator {
        Accumulator {
            custom: self.custom.iter().map(|(n, _)| (n.clone(), 0.0)).collect(),
            ..Accumulator::default()
        }
    }

    /// Adds a custom step's logs (`loss` and the others) for a batch of `size` examples.
    pub(super) fn add_custom(&mut self, logs: &[(String, f64)], size: usize) {
        let size = size as f64;
        self.examples += size;
        self.batches += 1;
        for (name, value) in logs {
            if name == "loss" {
                self.loss += value * size;
                continue;
            }
            match self.custom.iter_mut().find(|(n, _)| n == name) {
                Some((_, sum)) => *sum += value * size,
                None => self.custom.push((name.clone(), value * size)),
            }
        }
    }

    /// Keras' logs: `loss` and the metrics; for a model with several outputs also
    /// `<output>_loss` and `<output>_<metric>` per output.
    pub(super) fn logs(&self, compiled: &Compiled, units: usize) -> Logs {
        let n = self.examples.max(1.0);
        let mut logs = Logs::default();
        logs.set("loss", self.loss / n);
        for (name, sum) in &self.custom {
            logs.set(name.clone(), sum / n);
        }
        set_metrics(&mut logs, "", (&compiled.metrics, units), &self.correct, n);
        for (head, (loss, sums)) in compiled.outputs.iter().zip(&self.per_output) {
            logs.set(format!("{}_loss", head.name), loss / n);
            let metrics = (&head.metrics[..], head.units);
            set_metrics(&mut logs, &format!("{}_", head.name), metrics, sums, n);
        }
        logs
    }
}

/// The sums `metrics` keep for outputs of `units` units, laid end to end.
pub(super) fn widths(metrics: &[MetricSpec], units: usize) -> usize {
    metrics.iter().map(|m| m.kind.width(units)).sum()
}

/// Adds each metric's batch sums (per example: divided by its `positions`) to its slots.
pub(super) fn add_sums(
    slots: &mut [f64],
    metrics: &[MetricSpec],
    positions: f64,
    batch: impl Fn(&MetricSpec) -> Vec<f64>,
) {
    let mut start = 0;
    for m in metrics {
        let sums = batch(m);
        for (slot, s) in slots[start..].iter_mut().zip(&sums) {
            *slot += s / positions;
        }
        start += sums.len();
    }
}

/// Logs each metric's value from its slots as `<prefix><name>`; a metric with one value per
/// class (`F1Score` without `average`) as `<prefix><name>_<class>`.
/// `metrics` read outputs of `units` units; nothing is logged before the first batch.
pub(super) fn set_metrics(
    logs: &mut Logs,
    prefix: &str,
    (metrics, units): (&[MetricSpec], usize),
    slots: &[f64],
    n: f64,
) {
    if slots.len() != widths(metrics, units) {
        return;
    }
    let mut start = 0;
    for m in metrics {
        let width = m.kind.width(units);
        let values = m.kind.values(&slots[start..start + width], n);
        start += width;
        for (i, v) in values.iter().enumerate() {
            let key = if values.len() == 1 {
                format!("{prefix}{}", m.name)
            } else {
                format!("{prefix}{}_{i}", m.name)
            };
            logs.set(key, *v);
        }
    }
}

/// Columns `start..start + width` of row-major `rows` of `units` values.
pub(super) fn columns(rows: &[f32], units: usize, start: usize, width: usize) -> Vec<f32> {
    rows.chunks_exact(units.max(1))
        .flat_map(|r| &r[start..start + width])
        .copied()
        .collect()
}

#[cfg(test)]
#[path = "metric_slots_tests.rs"]
mod metric_slots_tests;
