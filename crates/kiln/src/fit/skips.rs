//! Records the input pipelines dropped in an epoch (tf.data's `ignore_errors`, the pipeline
//! key `ignore_errors = true`): counted in the epoch logs and listed for callbacks.

use kiln_data::SkipStats;

use crate::error::{KilnError, Result};
use crate::logs::Logs;

/// Epoch and evaluation logs key: records the input pipeline's `ignore_errors` stages dropped
/// (`val_skipped_records` for the validation pass). Present once a pipeline skips errors;
/// TensorBoard shows it as `epoch_skipped_records`.
pub const SKIPPED_RECORDS: &str = "skipped_records";

/// What the input pipelines' `ignore_errors` stages dropped in one epoch of `fit`
/// ([`super::FitContext::skipped_input`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkippedInput {
    /// The training input's skips in the epoch; `None` when no `ignore_errors` stage ran.
    pub train: Option<SkipStats>,
    /// The validation pass's skips, when it ran with an `ignore_errors` stage.
    pub validation: Option<SkipStats>,
}

/// Adds [`SKIPPED_RECORDS`] to epoch logs, and keeps adding it (0) in the epochs where no
/// skipping stage ran (a cache replaying the data), so that every epoch after the first one
/// that skipped has the key (CSVLogger fixes its columns at the first epoch).
#[derive(Debug, Default)]
pub(crate) struct SkipReport {
    train: bool,
    validation: bool,
}

impl SkipReport {
    /// Sets `skipped_records` / `val_skipped_records` in `logs` for `input`.
    pub(crate) fn add_to(&mut self, logs: &mut Logs, input: &SkippedInput, validated: bool) {
        self.train |= input.train.is_some();
        if self.train {
            logs.set(SKIPPED_RECORDS, count(input.train.as_ref()));
        }
        self.validation |= input.validation.is_some();
        if self.validation && validated {
            logs.set(
                format!("val_{SKIPPED_RECORDS}"),
                count(input.validation.as_ref()),
            );
        }
    }
}

fn count(skips: Option<&SkipStats>) -> f64 {
    skips.map_or(0.0, |s| s.count as f64)
}

/// An epoch whose training input yielded no example because `ignore_errors` dropped every
/// record is an error, not an epoch trained on nothing.
///
/// # Errors
/// [`KilnError::MissingData`] naming the count and the first records' errors.
pub(crate) fn check_not_all_skipped(
    skips: Option<&SkipStats>,
    batches: u64,
    epoch: usize,
) -> Result<()> {
    match skips {
        Some(s) if s.count > 0 && batches == 0 => {
            let reasons: Vec<String> = s.first.iter().map(|r| format!("\n  {}", r.error)).collect();
            Err(KilnError::MissingData(format!(
                "epoch {}: the training input yielded no example: ignore_errors dropped all {} \
                 records it read; the first errors:{}",
                epoch + 1,
                s.count,
                reasons.concat()
            )))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_data::SkippedRecord;

    fn stats(count: u64) -> SkipStats {
        SkipStats {
            count,
            first: vec![SkippedRecord {
                index: 2,
                path: None,
                error: "a.csv:3: bad".into(),
            }],
        }
    }

    #[test]
    fn counts_are_logged_and_stay_once_seen() {
        let mut report = SkipReport::default();
        let mut logs = Logs::default();
        report.add_to(&mut logs, &SkippedInput::default(), true);
        assert_eq!(
            logs.get(SKIPPED_RECORDS),
            None,
            "strict pipelines add nothing"
        );
        let input = SkippedInput {
            train: Some(stats(3)),
            validation: Some(stats(1)),
        };
        report.add_to(&mut logs, &input, true);
        assert_eq!(logs.get(SKIPPED_RECORDS), Some(3.0));
        assert_eq!(logs.get("val_skipped_records"), Some(1.0));
        // A later epoch replayed from a cache: no stage ran, the keys stay, at 0; an epoch
        // without validation has no val_ key.
        let mut later = Logs::default();
        report.add_to(&mut later, &SkippedInput::default(), false);
        assert_eq!(later.get(SKIPPED_RECORDS), Some(0.0));
        assert_eq!(later.get("val_skipped_records"), None);
    }

    #[test]
    fn an_epoch_of_skipped_records_only_is_an_error() {
        assert!(check_not_all_skipped(None, 0, 0).is_ok());
        assert!(check_not_all_skipped(Some(&stats(0)), 0, 0).is_ok());
        assert!(check_not_all_skipped(Some(&stats(3)), 1, 0).is_ok());
        let err = check_not_all_skipped(Some(&stats(3)), 0, 1)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "epoch 2: the training input yielded no example: ignore_errors dropped all 3 \
             records it read; the first errors:\n  a.csv:3: bad"
        );
    }
}
