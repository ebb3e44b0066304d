//! [`Dataset::ignore_errors`]: drop the elements whose computation failed, counting them —
//! tf.data's `ignore_errors()`. Also [`SkipCounter`], the running count the CSV and image
//! folder sources' `ignore_errors` options keep across iterations.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node, autotune};
use crate::error::DataError;

impl Dataset {
    /// `tf.data.Dataset.ignore_errors()`: the elements of this dataset without its errors.
    ///
    /// Every `Err` the input yields (a file that cannot be read, a damaged record, a record
    /// that does not parse, a failed map function) is dropped and counted in the iteration's
    /// statistics: [`crate::DatasetIter::skip_stats`] and [`crate::PipelineStats::skipped`]
    /// give the count and the first [`crate::MAX_LISTED_SKIPS`] dropped records with their
    /// errors. Sources go on after an error as they document (a TFRecord or text file ends at
    /// a damaged record, as in TensorFlow, and the next file is read), so what follows a
    /// damaged record of such a file is not read. Cardinality: [`Cardinality::Unknown`].
    ///
    /// ```
    /// use kiln_data::{Dataset, DataError};
    /// let ds = Dataset::range(0, 6, 1)
    ///     .map(
    ///         |e| match e.require("value")?.data().to_i64()[0] {
    ///             3 => Err(DataError::Map("three".into())),
    ///             _ => Ok(e),
    ///         },
    ///         kiln_data::Parallelism::Sequential,
    ///     )
    ///     .ignore_errors();
    /// let mut it = ds.iter();
    /// assert_eq!(it.by_ref().filter_map(Result::ok).count(), 5);
    /// let skipped = it.skip_stats().unwrap();
    /// assert_eq!((skipped.count, skipped.first[0].index), (1, 3));
    /// ```
    pub fn ignore_errors(self) -> Dataset {
        Dataset::from_node(IgnoreErrorsNode {
            input: self,
            counter: None,
        })
    }

    /// [`Dataset::ignore_errors`] that also counts the dropped errors in `counter`.
    pub(crate) fn ignore_errors_counted(self, counter: SkipCounter) -> Dataset {
        Dataset::from_node(IgnoreErrorsNode {
            input: self,
            counter: Some(counter),
        })
    }
}

struct IgnoreErrorsNode {
    input: Dataset,
    counter: Option<SkipCounter>,
}

impl Node for IgnoreErrorsNode {
    fn iter(&self) -> BoxIter {
        let pipeline = autotune::current();
        pipeline.track_skips();
        let counter = self.counter.clone();
        let mut input = self.input.iter_within();
        let mut index = 0u64;
        Box::new(std::iter::from_fn(move || {
            loop {
                let item = input.next()?;
                index += 1;
                match item {
                    Ok(element) => return Some(Ok(element)),
                    Err(err) => {
                        pipeline.record_skip(index - 1, &err);
                        if let Some(c) = &counter {
                            c.skip(&err);
                        }
                    }
                }
            }
        }))
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Unknown
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("ignore_errors")
            .input(self.input.fingerprint())
            .finish()
    }
}

/// Counts the records (CSV rows, image files) that a source skipped because of its
/// `ignore_errors` option, and keeps the last skipped error's message.
///
/// Clones share one count: put a clone in the source's options, keep another, and read
/// [`SkipCounter::count`] during or after iteration. The count accumulates over every
/// iteration (epoch) of every dataset the counter was given to; it is never reset. Per
/// iteration, [`crate::DatasetIter::skip_stats`] reports the same skips with the first
/// records' errors.
#[derive(Debug, Clone, Default)]
pub struct SkipCounter {
    inner: Arc<SkipInner>,
}

#[derive(Debug, Default)]
struct SkipInner {
    count: AtomicU64,
    last: Mutex<Option<String>>,
}

impl SkipCounter {
    /// A counter at zero.
    pub fn new() -> SkipCounter {
        SkipCounter::default()
    }

    /// Records skipped so far.
    pub fn count(&self) -> u64 {
        self.inner.count.load(Ordering::Relaxed)
    }

    /// The message of the most recently skipped error, if any.
    pub fn last_error(&self) -> Option<String> {
        self.inner
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Counts one skipped record that failed with `error`.
    pub(crate) fn skip(&self, error: &DataError) {
        self.inner.count.fetch_add(1, Ordering::Relaxed);
        *self.inner.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(error.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::testutil::{collect, range, scalar};
    use crate::{Parallelism, PipelineStats};

    /// `range(n)` whose elements `bad` fail with a map error naming the value.
    fn failing(n: i64, bad: &'static [i64]) -> Dataset {
        range(n).map(
            move |e| {
                let v = e.get("x").unwrap().data().to_i64()[0];
                if bad.contains(&v) {
                    Err(DataError::Map(format!("value {v} is bad")))
                } else {
                    Ok(e)
                }
            },
            Parallelism::Fixed(2),
        )
    }

    #[test]
    fn errors_are_dropped_counted_and_listed_per_iteration() {
        let ds = failing(10, &[1, 4, 5, 6, 7, 9]).ignore_errors();
        assert_eq!(ds.cardinality(), Cardinality::Unknown);
        for _ in 0..2 {
            // Each iteration counts its own skips.
            let mut it = ds.iter();
            let kept: Vec<i64> = it
                .by_ref()
                .map(|r| r.unwrap())
                .map(|e| e.get("x").unwrap().data().to_i64()[0])
                .collect();
            assert_eq!(kept, vec![0, 2, 3, 8]);
            let skipped = it.skip_stats().unwrap();
            assert_eq!(skipped.count, 6);
            let listed: Vec<(u64, &str)> = skipped
                .first
                .iter()
                .map(|r| (r.index, r.error.as_str()))
                .collect();
            assert_eq!(
                listed,
                vec![
                    (1, "map function failed: value 1 is bad"),
                    (4, "map function failed: value 4 is bad"),
                    (5, "map function failed: value 5 is bad"),
                    (6, "map function failed: value 6 is bad"),
                    (7, "map function failed: value 7 is bad"),
                ]
            );
            assert_eq!(it.stats().skipped, Some(skipped));
        }
    }

    #[test]
    fn strict_pipelines_report_no_skip_stage_and_clean_ones_report_zero() {
        let mut it = range(3).iter();
        assert_eq!(it.by_ref().count(), 3);
        assert_eq!(it.skip_stats(), None);
        let PipelineStats { skipped, .. } = it.stats();
        assert_eq!(skipped, None);

        let ds = range(3)
            .ignore_errors()
            .batch(2, false)
            .prefetch(crate::AUTOTUNE);
        let mut it = ds.iter();
        assert_eq!(it.by_ref().count(), 2);
        let skipped = it.skip_stats().unwrap();
        assert_eq!((skipped.count, skipped.first.len()), (0, 0));
    }

    #[test]
    fn counted_variant_accumulates_across_iterations_and_fingerprint_differs() {
        let counter = SkipCounter::new();
        let ds = failing(4, &[2]).ignore_errors_counted(counter.clone());
        assert_eq!(collect(&ds), vec![0, 1, 3]);
        assert_eq!(collect(&ds), vec![0, 1, 3]);
        assert_eq!(counter.count(), 2);
        assert_eq!(
            counter.last_error().as_deref(),
            Some("map function failed: value 2 is bad")
        );
        let plain = Dataset::from_elements(vec![scalar(1)]);
        assert_ne!(
            plain.fingerprint(),
            plain.clone().ignore_errors().fingerprint()
        );
    }
}
