//! Per-stage statistics: the live counters stages update ([`Stage`]) and the snapshots users
//! read ([`StageStats`], [`PipelineStats`]).

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::element::Element;
use crate::error::DataError;

/// How many skipped records [`SkipStats::first`] lists.
pub const MAX_LISTED_SKIPS: usize = 5;

/// One record that an `ignore_errors` stage dropped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRecord {
    /// 0-based position of the failed element in the skipping stage's input: for a source
    /// (a CSV file's rows, an image folder's files, [`crate::Dataset::ignore_errors`] right
    /// after a file source), the record's position in the files' order, failed ones included.
    pub index: u64,
    /// The file the record came from, when the error names one.
    pub path: Option<PathBuf>,
    /// The error's message: the file and the line, record index or byte offset where the
    /// source knows them, and what is wrong.
    pub error: String,
}

impl SkippedRecord {
    pub(crate) fn new(index: u64, error: &DataError) -> SkippedRecord {
        SkippedRecord {
            index,
            path: error.path().map(PathBuf::from),
            error: error.to_string(),
        }
    }
}

/// What the `ignore_errors` stages of one iteration skipped
/// ([`PipelineStats::skipped`], [`crate::DatasetIter::skip_stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkipStats {
    /// Records dropped so far in the iteration.
    pub count: u64,
    /// The first [`MAX_LISTED_SKIPS`] of them, in the order they were dropped (entry `i` is
    /// the iteration's `i + 1`-th skip).
    pub first: Vec<SkippedRecord>,
}

impl SkipStats {
    /// Counts one dropped record that failed with `error` at `index`.
    pub(crate) fn add(&mut self, index: u64, error: &DataError) {
        self.count += 1;
        if self.first.len() < MAX_LISTED_SKIPS {
            self.first.push(SkippedRecord::new(index, error));
        }
    }
}

/// A snapshot of one pipeline stage's counters, from [`crate::DatasetIter::stats`].
///
/// Stages are the transformations that run work off the consumer's thread or run a user
/// function: [`map`](crate::Dataset::map), [`prefetch`](crate::Dataset::prefetch) and
/// [`interleave`](crate::Dataset::interleave). Counts cover the whole iteration so far,
/// including every repetition of a stage under [`repeat`](crate::Dataset::repeat).
///
/// How to read them: a stage whose `waited` is a large share of the iteration's elapsed time
/// is the one its consumer is stuck behind; `busy / elapsed` is the number of threads it kept
/// busy on average.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageStats {
    /// The transformation: `"map"`, `"prefetch"` or `"interleave"`.
    pub name: &'static str,
    /// Whether its knob is autotuned ([`crate::AUTOTUNE`] with autotuning enabled).
    pub autotuned: bool,
    /// Elements the stage handed to its consumer, errors included.
    pub elements: u64,
    /// Time spent producing those elements, summed over the stage's threads (so it can exceed
    /// wall time when parallel): for `map`, time inside the map function; for `prefetch`, time
    /// its background thread spent in the input's `next` (that is, running the upstream
    /// pipeline); for `interleave`, time spent in the inner datasets' `next`.
    pub busy: Duration,
    /// Wall time the stage's consumer spent blocked waiting for the stage's next element to be
    /// ready. Time the consumer spends running upstream stages itself (a parallel map pulls
    /// its input on the consumer's thread) is not included. For stages that run inline
    /// (sequential `map` or `interleave`) it is the time the consumer spent doing the stage's
    /// work, which then equals `busy`.
    pub waited: Duration,
    /// Threads producing elements now (or when the stage finished): worker threads of a
    /// parallel `map`, concurrently running inner datasets of a parallel `interleave`, 1 for
    /// `prefetch` (its background thread), 0 for stages running on the consumer's thread.
    pub parallelism: usize,
    /// The largest `parallelism` the stage has had.
    pub peak_parallelism: usize,
    /// Elements the stage may hold now (or when the stage finished): the in-flight window of
    /// a parallel `map` (`2 × parallelism × elements per job`), the buffer capacity of `prefetch`,
    /// `cycle_length × block_length` for a parallel `interleave`, 0 when inline.
    pub buffer: usize,
    /// The largest `buffer` the stage has had.
    pub peak_buffer: usize,
    /// Mean size in bytes of the elements the stage produced (sum of the arrays' value bytes;
    /// string values count their byte lengths), 0 before the first element.
    pub bytes_per_element: u64,
}

/// Statistics of one iteration ([`crate::DatasetIter::stats`]): the caller's view plus each
/// stage's [`StageStats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineStats {
    /// Wall time since the iteration started ([`crate::Dataset::iter`]).
    pub elapsed: Duration,
    /// Items the iteration has yielded, errors included.
    pub elements: u64,
    /// Wall time the caller spent inside [`crate::DatasetIter`]'s `next`: the time it waited
    /// for input. `waited / elapsed` near 1 means the caller is input-bound.
    pub waited: Duration,
    /// The stages, in the order they started: input side first for a linear pipeline; stages
    /// under a [`repeat`](crate::Dataset::repeat) or inside `interleave`'s inner datasets
    /// start when first pulled, after the stages downstream of them. At most 64 are listed.
    pub stages: Vec<StageStats>,
    /// Records dropped by `ignore_errors` ([`crate::Dataset::ignore_errors`], and the CSV and
    /// image folder sources' `ignore_errors` option); `None` when no such stage has started
    /// in this iteration (strict pipelines, or a cache replaying what an earlier one kept).
    pub skipped: Option<SkipStats>,
}

impl PipelineStats {
    /// `waited / elapsed`: the share of the iteration's wall time the caller spent waiting for
    /// input (0 when nothing has elapsed).
    pub fn input_bound_fraction(&self) -> f64 {
        let elapsed = self.elapsed.as_secs_f64();
        if elapsed > 0.0 {
            (self.waited.as_secs_f64() / elapsed).min(1.0)
        } else {
            0.0
        }
    }
}

impl fmt::Display for PipelineStats {
    /// One line for the iteration and one per stage, e.g.
    /// `input waited 1.20 s of 4.00 s (30%), 100 elements` then
    /// `  map: 100 elements, busy 3.10 s, waited 1.10 s, parallelism 4 (peak 4), buffer 8 (peak 8), 4096 B/element`;
    /// with `ignore_errors`, `  ignore_errors: 2 skipped` and one line per listed record
    /// (`    record 7: <error>`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "input waited {:.2} s of {:.2} s ({:.0}%), {} elements",
            self.waited.as_secs_f64(),
            self.elapsed.as_secs_f64(),
            100.0 * self.input_bound_fraction(),
            self.elements
        )?;
        for s in &self.stages {
            write!(
                f,
                "\n  {}{}: {} elements, busy {:.2} s, waited {:.2} s, parallelism {} (peak {}), \
                 buffer {} (peak {}), {} B/element",
                s.name,
                if s.autotuned { " (autotuned)" } else { "" },
                s.elements,
                s.busy.as_secs_f64(),
                s.waited.as_secs_f64(),
                s.parallelism,
                s.peak_parallelism,
                s.buffer,
                s.peak_buffer,
                s.bytes_per_element
            )?;
        }
        if let Some(skipped) = &self.skipped {
            write!(f, "\n  ignore_errors: {} skipped", skipped.count)?;
            for r in &skipped.first {
                write!(f, "\n    record {}: {}", r.index, r.error)?;
            }
        }
        Ok(())
    }
}

/// Bytes an element's values occupy: `len × dtype size` per array, string arrays count the
/// bytes of their values. This is the size the RAM budget compares against.
pub(crate) fn element_bytes(element: &Element) -> u64 {
    element
        .iter()
        .map(|(_, array)| match array.data().as_strings() {
            Some(values) => values.iter().map(|v| v.len() as u64).sum(),
            None => (array.len() * array.dtype().size()) as u64,
        })
        .sum()
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The live counters of one stage, shared by its threads and the pipeline's registry.
pub(crate) struct Stage {
    pub(crate) name: &'static str,
    /// Identity of the node that started the stage (its address), to merge repetitions.
    pub(crate) key: usize,
    pub(crate) autotuned: bool,
    /// False once the stage's iterator has been dropped.
    pub(crate) live: AtomicBool,
    /// Worker slots this stage holds in the pipeline's CPU budget.
    pub(crate) cpu_reserved: AtomicUsize,
    elements: AtomicU64,
    busy_ns: AtomicU64,
    waited_ns: AtomicU64,
    /// Time a producer spent blocked because the stage's buffer was full (prefetch only).
    stalled_ns: AtomicU64,
    parallelism: AtomicUsize,
    peak_parallelism: AtomicUsize,
    buffer: AtomicUsize,
    peak_buffer: AtomicUsize,
    bytes: AtomicU64,
    measured: AtomicU64,
}

impl Stage {
    pub(crate) fn new(name: &'static str, key: usize, autotuned: bool) -> Stage {
        Stage {
            name,
            key,
            autotuned,
            live: AtomicBool::new(true),
            cpu_reserved: AtomicUsize::new(0),
            elements: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            waited_ns: AtomicU64::new(0),
            stalled_ns: AtomicU64::new(0),
            parallelism: AtomicUsize::new(0),
            peak_parallelism: AtomicUsize::new(0),
            buffer: AtomicUsize::new(0),
            peak_buffer: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
            measured: AtomicU64::new(0),
        }
    }

    /// Counts one element handed to the consumer.
    pub(crate) fn add_element(&self) {
        self.elements.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_busy(&self, d: Duration) {
        self.busy_ns.fetch_add(nanos(d), Ordering::Relaxed);
    }

    pub(crate) fn add_waited(&self, d: Duration) {
        self.waited_ns.fetch_add(nanos(d), Ordering::Relaxed);
    }

    pub(crate) fn add_stalled(&self, d: Duration) {
        self.stalled_ns.fetch_add(nanos(d), Ordering::Relaxed);
    }

    /// Records the size of one produced element.
    pub(crate) fn measure(&self, element: &Element) {
        self.bytes
            .fetch_add(element_bytes(element), Ordering::Relaxed);
        self.measured.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_parallelism(&self, n: usize) {
        self.parallelism.store(n, Ordering::Relaxed);
        self.peak_parallelism.fetch_max(n, Ordering::Relaxed);
    }

    pub(crate) fn set_buffer(&self, n: usize) {
        self.buffer.store(n, Ordering::Relaxed);
        self.peak_buffer.fetch_max(n, Ordering::Relaxed);
    }

    pub(crate) fn buffer(&self) -> usize {
        self.buffer.load(Ordering::Relaxed)
    }

    /// Mean measured element size in bytes (0 before the first).
    pub(crate) fn mean_bytes(&self) -> u64 {
        let n = self.measured.load(Ordering::Relaxed);
        self.bytes
            .load(Ordering::Relaxed)
            .checked_div(n)
            .unwrap_or(0)
    }

    /// What the stage's buffer may hold: `buffer × mean element size`, counted against the RAM
    /// budget while the stage is live.
    pub(crate) fn reserved_bytes(&self) -> u64 {
        (self.buffer() as u64).saturating_mul(self.mean_bytes())
    }

    /// Cumulative (busy, waited, stalled) in nanoseconds, for tuning windows.
    pub(crate) fn times(&self) -> (u64, u64, u64) {
        (
            self.busy_ns.load(Ordering::Relaxed),
            self.waited_ns.load(Ordering::Relaxed),
            self.stalled_ns.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn snapshot(&self) -> StageStats {
        StageStats {
            name: self.name,
            autotuned: self.autotuned,
            elements: self.elements.load(Ordering::Relaxed),
            busy: Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed)),
            waited: Duration::from_nanos(self.waited_ns.load(Ordering::Relaxed)),
            parallelism: self.parallelism.load(Ordering::Relaxed),
            peak_parallelism: self.peak_parallelism.load(Ordering::Relaxed),
            buffer: self.buffer(),
            peak_buffer: self.peak_buffer.load(Ordering::Relaxed),
            bytes_per_element: self.mean_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::{Array, Buffer};

    #[test]
    fn element_bytes_counts_values() {
        let e = Element::new()
            .with(
                "x",
                Array::new(vec![2, 3], Buffer::F32(vec![0.0; 6])).unwrap(),
            )
            .with("y", Array::scalar(Buffer::I64(vec![1])).unwrap())
            .with("s", Array::string_scalar("hello"));
        assert_eq!(element_bytes(&e), 6 * 4 + 8 + 5);
    }

    #[test]
    fn stage_counters_and_peaks() {
        let s = Stage::new("map", 1, true);
        s.set_parallelism(3);
        s.set_parallelism(1);
        s.set_buffer(6);
        s.set_buffer(2);
        s.add_element();
        s.add_element();
        s.add_busy(Duration::from_millis(5));
        s.add_waited(Duration::from_millis(2));
        let e = Element::new().with("x", Array::new(vec![4], Buffer::U8(vec![0; 4])).unwrap());
        s.measure(&e);
        let e = Element::new().with("x", Array::new(vec![8], Buffer::U8(vec![0; 8])).unwrap());
        s.measure(&e);
        assert_eq!(s.reserved_bytes(), 2 * 6);
        let snap = s.snapshot();
        assert_eq!(
            snap,
            StageStats {
                name: "map",
                autotuned: true,
                elements: 2,
                busy: Duration::from_millis(5),
                waited: Duration::from_millis(2),
                parallelism: 1,
                peak_parallelism: 3,
                buffer: 2,
                peak_buffer: 6,
                bytes_per_element: 6,
            }
        );
    }

    #[test]
    fn display_and_input_bound_fraction() {
        let stats = PipelineStats {
            elapsed: Duration::from_secs(4),
            elements: 100,
            waited: Duration::from_secs(1),
            stages: vec![StageStats {
                name: "prefetch",
                autotuned: false,
                elements: 100,
                busy: Duration::from_millis(500),
                waited: Duration::from_millis(250),
                parallelism: 1,
                peak_parallelism: 1,
                buffer: 2,
                peak_buffer: 2,
                bytes_per_element: 16,
            }],
            skipped: None,
        };
        assert_eq!(stats.input_bound_fraction(), 0.25);
        assert_eq!(
            stats.to_string(),
            "input waited 1.00 s of 4.00 s (25%), 100 elements\n  prefetch: 100 elements, \
             busy 0.50 s, waited 0.25 s, parallelism 1 (peak 1), buffer 2 (peak 2), 16 B/element"
        );
    }

    #[test]
    fn skip_stats_list_the_first_records_and_count_all() {
        let mut skipped = SkipStats::default();
        for i in 0..7u64 {
            let error = DataError::Decode {
                path: PathBuf::from(format!("d/{i}.jpg")),
                message: "bad".into(),
            };
            skipped.add(10 + i, &error);
        }
        assert_eq!(skipped.count, 7);
        assert_eq!(skipped.first.len(), MAX_LISTED_SKIPS);
        assert_eq!(skipped.first[4].index, 14);
        assert_eq!(skipped.first[4].path, Some(PathBuf::from("d/4.jpg")));
        let stats = PipelineStats {
            elapsed: Duration::from_secs(1),
            elements: 3,
            waited: Duration::ZERO,
            stages: Vec::new(),
            skipped: Some(SkipStats {
                count: 2,
                first: skipped.first[..1].to_vec(),
            }),
        };
        let text = stats.to_string();
        assert!(
            text.ends_with(
                "\n  ignore_errors: 2 skipped\n    record 10: cannot decode d/0.jpg: bad"
            ),
            "{text}"
        );
    }
}
