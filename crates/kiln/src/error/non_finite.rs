//! The records that errors about input carry: which split, epoch, batch and row an example
//! comes from ([`BatchOrigin`]), and a non-finite value found in one ([`NonFiniteInput`]).
//! The checks themselves are in [`crate::guards`].

use std::fmt;

use serde::Serialize;

use crate::logs::SKIPPED_KEY;
use crate::names::LABELS;

/// Which data a batch belongs to, for messages (Keras' train / validation / test, and
/// predict).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataSplit {
    /// `fit`'s training data.
    Train,
    /// `fit`'s validation data.
    Validation,
    /// `evaluate`'s data (Keras' "test" step).
    Test,
    /// `predict`'s data.
    Predict,
}

impl DataSplit {
    /// `"train"`, `"validation"`, `"test"` or `"predict"`.
    pub fn name(self) -> &'static str {
        match self {
            DataSplit::Train => "train",
            DataSplit::Validation => "validation",
            DataSplit::Test => "test",
            DataSplit::Predict => "predict",
        }
    }
}

impl fmt::Display for DataSplit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the rows of a batch come from, so that errors about a row can name the example.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BatchOrigin {
    /// The split, `None` for a batch converted on its own (then rows are named by their place
    /// in the batch only).
    pub split: Option<DataSplit>,
    /// The epoch (0-based), for training batches.
    pub epoch: Option<usize>,
    /// The batch's number in the pass (0-based).
    pub batch: u64,
    /// Index, within the pass, of the batch's first example.
    pub first: u64,
    /// The original row of each row kept after dropping examples; empty when none was dropped.
    pub kept: Vec<usize>,
}

impl BatchOrigin {
    /// The row of the batch as it came from the pipeline, for `row` of the (maybe thinned)
    /// batch.
    pub fn original_row(&self, row: usize) -> usize {
        self.kept.get(row).copied().unwrap_or(row)
    }

    /// Index within the pass (the epoch, for training) of `row` of the batch.
    pub fn index(&self, row: usize) -> u64 {
        self.first + self.original_row(row) as u64
    }

    /// `example 37 of the train split in epoch 2 (batch 1, row 5)`, or `example 5 of the batch`
    /// for a batch on its own. Epochs are shown 1-based, as the progress display does.
    pub fn describe(&self, row: usize) -> String {
        let r = self.original_row(row);
        match self.split {
            None => format!("example {r} of the batch"),
            Some(split) => format!(
                "example {} of the {split} split{} (batch {}, row {r})",
                self.index(row),
                self.epoch
                    .map(|e| format!(" in epoch {}", e + 1))
                    .unwrap_or_default(),
                self.batch
            ),
        }
    }
}

/// A NaN or ±Inf found by `check_numerics = "raise"`: which example, where inside it, what.
#[derive(Debug, Clone, PartialEq)]
pub struct NonFiniteInput {
    /// Where the batch came from; [`NonFiniteInput::row`] is a row of it.
    pub origin: BatchOrigin,
    /// Row of the batch (as the pipeline yielded it).
    pub row: usize,
    /// The batch component (`x` for features, `y` for labels).
    pub component: String,
    /// Shape of one example of the component (the batch axis removed).
    pub example_shape: Vec<usize>,
    /// Row-major index of the value inside the example.
    pub flat_index: usize,
    /// The value as stored (float64 values beyond float32's range are finite here).
    pub value: f64,
    /// Non-finite values in the whole batch (all checked components).
    pub values_in_batch: usize,
    /// Examples of the batch holding at least one.
    pub examples_in_batch: usize,
    /// The file the examples were read from, when one file holds them all in order (`kiln
    /// predict`'s input): the example's index is then its record in that file.
    pub file: Option<std::path::PathBuf>,
}

impl NonFiniteInput {
    /// Index of the example within the pass (the epoch, for training).
    pub fn index(&self) -> u64 {
        self.origin.index(self.row)
    }

    /// The value's position inside the example: `pixel [row 3, col 5, channel 0]` for a
    /// rank-3 (Keras `(height, width, channels)`) example, `feature 17` for a vector, `position
    /// [2, 7]` otherwise; ranks 2 and up add the row-major flat index.
    pub fn position(&self) -> String {
        describe_position(&self.example_shape, self.flat_index)
    }
}

impl fmt::Display for NonFiniteInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = if self.component == LABELS {
            "labels"
        } else {
            "features"
        };
        let value = if self.value.is_finite() {
            format!(
                "{} (beyond float32's range: infinite for the model)",
                self.value
            )
        } else {
            format!("{}", self.value)
        };
        let example = match &self.file {
            Some(file) => format!("record {} of {}", self.index(), file.display()),
            None => self.origin.describe(self.row),
        };
        write!(
            f,
            "check_numerics: {example} has {value} at {} of its {role} (batch component \"{}\")",
            self.position(),
            self.component
        )?;
        if self.values_in_batch > 1 {
            write!(
                f,
                "; the batch holds {} non-finite values in {} examples",
                self.values_in_batch, self.examples_in_batch
            )?;
        }
        write!(
            f,
            ". Clean the data (fix the source, or replace such values in a map op), or set \
             `check_numerics = \"skip\"` in [fit] to drop such examples (counted in the \
             `{SKIPPED_KEY}` log)"
        )
    }
}

/// `pixel [row r, col c, channel k] (flat index i)`, `feature i`, `position [..] (flat index i)`.
pub fn describe_position(shape: &[usize], flat: usize) -> String {
    let mut idx = vec![0; shape.len()];
    let mut rest = flat;
    for (slot, &dim) in idx.iter_mut().zip(shape).rev() {
        let d = dim.max(1);
        *slot = rest % d;
        rest /= d;
    }
    match idx.as_slice() {
        [] => "its only value".to_string(),
        [i] => format!("feature {i}"),
        [r, c, k] => format!("pixel [row {r}, col {c}, channel {k}] (flat index {flat})"),
        other => format!("position {other:?} (flat index {flat})"),
    }
}
