//! Keras' `MeanIoU` (`keras/src/metrics/iou_metrics.py`): a confusion matrix summed over the
//! epoch, the intersection over union of each class present, averaged.

use serde::{Deserialize, Serialize};

use super::{EPSILON, bad, count, flag_default};
use crate::error::Result;

/// `MeanIoU` arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeanIou {
    /// `num_classes`: the confusion matrix is `num_classes × num_classes`.
    pub num_classes: usize,
    /// `ignore_class`: targets of this class are not counted.
    pub ignore_class: Option<i64>,
    /// `sparse_y_true` (default true): targets are class ids (a one-hot row of sparse labels
    /// counts as its class id); false: the argmax of each target row.
    pub sparse_y_true: bool,
    /// `sparse_y_pred` (default true): each output is a class id (one output unit); false: the
    /// argmax of each output row.
    pub sparse_y_pred: bool,
}

/// The most classes a `MeanIoU` counts: its confusion matrix then holds 2^26 counts (512 MiB).
const MAX_CLASSES: usize = 8192;

impl MeanIou {
    /// Reads the arguments from `table` for outputs of `units` units.
    pub(super) fn parse(table: &mut toml::Table, key: &str, units: usize) -> Result<MeanIou> {
        let Some(num_classes) = count(table, key, "num_classes", 1)? else {
            return Err(bad(
                key,
                "num_classes",
                "MeanIoU needs num_classes, the number of classes".into(),
            ));
        };
        if num_classes > MAX_CLASSES {
            return Err(bad(
                key,
                "num_classes",
                format!(
                    "MeanIoU keeps a num_classes x num_classes confusion matrix; {num_classes} \
                     classes is more than kiln's limit of {MAX_CLASSES}"
                ),
            ));
        }
        let ignore_class = match table.remove("ignore_class") {
            None => None,
            Some(v) => Some(v.as_integer().ok_or_else(|| {
                bad(
                    key,
                    "ignore_class",
                    format!("ignore_class must be a class id, got {v}"),
                )
            })?),
        };
        let iou = MeanIou {
            num_classes,
            ignore_class,
            sparse_y_true: flag_default(table, key, "sparse_y_true", true)?,
            sparse_y_pred: flag_default(table, key, "sparse_y_pred", true)?,
        };
        if iou.sparse_y_pred && units > 1 {
            return Err(bad(
                key,
                "sparse_y_pred",
                format!(
                    "MeanIoU with sparse_y_pred = true (Keras' default) reads each output as a \
                     class id, but the output has {units} units; set sparse_y_pred = false to \
                     take the argmax of each row"
                ),
            ));
        }
        Ok(iou)
    }

    /// The arguments as [`MeanIou::parse`] reads them.
    pub(super) fn to_toml(self, put: &mut dyn FnMut(&str, toml::Value)) {
        put("num_classes", (self.num_classes as i64).into());
        if let Some(c) = self.ignore_class {
            put("ignore_class", c.into());
        }
        if !self.sparse_y_true {
            put("sparse_y_true", false.into());
        }
        if !self.sparse_y_pred {
            put("sparse_y_pred", false.into());
        }
    }

    /// The confusion matrix's cells, `[true class][predicted class]`.
    pub(super) fn width(self) -> usize {
        self.num_classes * self.num_classes
    }

    /// Adds a batch's rows to the confusion matrix; rows whose target or prediction falls
    /// outside `[0, num_classes)`, or whose target is `ignore_class`, are not counted.
    pub(super) fn update(self, outputs: &[f32], targets: &[f32], units: usize, sums: &mut [f64]) {
        let n = self.num_classes as i64;
        for (row, labels) in outputs.chunks_exact(units).zip(targets.chunks_exact(units)) {
            let truth = class(labels, self.sparse_y_true);
            let predicted = class(row, self.sparse_y_pred);
            if !(0..n).contains(&truth)
                || !(0..n).contains(&predicted)
                || self.ignore_class == Some(truth)
            {
                continue;
            }
            sums[(truth * n + predicted) as usize] += 1.0;
        }
    }

    /// `Σ_c IoU_c / classes present`, `IoU_c = tp / (tp + fp + fn)`, as Keras (with its
    /// epsilons).
    pub(super) fn result(self, sums: &[f64]) -> f64 {
        let n = self.num_classes;
        let (mut total, mut valid) = (0.0, 0.0);
        for c in 0..n {
            let predicted: f64 = (0..n).map(|t| sums[t * n + c]).sum();
            let actual: f64 = sums[c * n..(c + 1) * n].iter().sum();
            let tp = sums[c * n + c];
            let union = predicted + actual - tp;
            if union > 1e-9 {
                valid += 1.0;
                total += tp / (union + EPSILON);
            }
        }
        total / (valid + EPSILON)
    }
}

/// A row's class: its one value truncated (a class id), or its argmax (the first largest).
fn class(row: &[f32], sparse: bool) -> i64 {
    if sparse && row.len() == 1 {
        return row[0] as i64;
    }
    let mut best = 0;
    for (j, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = j;
        }
    }
    best as i64
}
