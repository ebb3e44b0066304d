//! [`Dataset`]: a lazy, re-iterable pipeline of [`Element`]s with tf.data's semantics.
//!
//! A dataset is an immutable graph of nodes (`Arc`-shared, so cloning is cheap). Nothing runs
//! until [`Dataset::iter`] is called; each call starts a fresh iteration — a new epoch — with its
//! own worker threads, buffers and (with `reshuffle_each_iteration`) its own shuffle order.
//!
//! Transformations (one file each): [`Dataset::map`] (`map.rs`), [`Dataset::shuffle`]
//! (`shuffle.rs`), [`Dataset::batch`] (`batch.rs`), [`Dataset::repeat`] (`repeat.rs`),
//! [`Dataset::take`] / [`Dataset::skip`] (`take_skip.rs`), [`Dataset::prefetch`]
//! (`prefetch.rs`), [`Dataset::filter`] (`filter.rs`), [`Dataset::shard`] (`shard.rs`),
//! [`Dataset::unbatch`] (`unbatch.rs`), [`Dataset::padded_batch`] (`padded_batch.rs`),
//! [`Dataset::zip`] (`zip.rs`), [`Dataset::concatenate`] (`concatenate.rs`),
//! [`Dataset::enumerate`] (`enumerate.rs`), [`Dataset::interleave`] (`interleave.rs`),
//! [`Dataset::cache`] (`cache/`), [`Dataset::ignore_errors`] (`ignore_errors.rs`); sources are
//! in `slices.rs`. `autotune/` adapts
//! [`AUTOTUNE`] knobs at run time and keeps per-stage statistics ([`DatasetIter::stats`]). [`Dataset::fingerprint`]
//! (`fingerprint.rs`) hashes a pipeline's structure for the file cache.
//!
//! Errors travel through the pipeline as `Err` items in stream order; iteration may continue
//! after an error (the consumer decides whether to stop). Arguments that tf.data rejects when the
//! pipeline is built (`batch_size` 0, shuffle `buffer_size` 0, `Parallelism::Fixed(0)`) make the
//! transformed dataset yield a single [`DataError::InvalidArgument`] when iterated, since the
//! builder methods return `Dataset` rather than `Result`.

pub mod autotune;
mod batch;
mod cache;
mod concatenate;
mod enumerate;
mod filter;
mod fingerprint;
mod ignore_errors;
mod interleave;
mod map;
mod padded_batch;
mod prefetch;
mod repeat;
mod shard;
mod shuffle;
mod slices;
mod take_skip;
mod unbatch;
mod warning;
mod zip;

pub use autotune::{
    AutotuneOptions, MAX_LISTED_SKIPS, PipelineStats, SkipStats, SkippedRecord, StageStats,
};
pub use cache::CacheTarget;
pub(crate) use fingerprint::Fingerprint;
pub use ignore_errors::SkipCounter;
pub use padded_batch::PaddedShapes;
pub use prefetch::BufferSize;
pub(crate) use warning::warn;
pub use warning::{WarningHook, set_warning_hook};

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::element::Element;
use crate::error::{DataError, Result};

/// The iterator type nodes hand out.
pub(crate) type BoxIter = Box<dyn Iterator<Item = Result<Element>> + Send>;

/// One step of a pipeline. `iter` starts a new, independent pass over the node's elements.
pub(crate) trait Node: Send + Sync {
    /// Starts a new iteration.
    fn iter(&self) -> BoxIter;
    /// The number of elements one iteration yields, when known statically.
    fn cardinality(&self) -> Cardinality;
    /// A stable hash of what this node yields: its kind, output-relevant arguments and inputs'
    /// fingerprints (see [`Dataset::fingerprint`] and `fingerprint.rs`). Build it with
    /// [`Fingerprint`]; sources hash their data or, for files, [`Fingerprint::file`].
    ///
    /// The default covers the node's type only (not its arguments or inputs), so two such
    /// nodes with different data look alike to the file cache: every node should override it.
    fn fingerprint(&self) -> u64 {
        Fingerprint::new(std::any::type_name::<Self>())
            .str("undescribed")
            .finish()
    }
    /// The node as [`std::any::Any`], for the few transformations that specialise on their
    /// input's kind (see [`Dataset::node_as`]); `None` by default.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// How many elements a dataset yields — `tf.data.Dataset.cardinality()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cardinality {
    /// Exactly this many elements.
    Finite(u64),
    /// Never ends (`repeat(None)` of a non-empty dataset): `tf.data.INFINITE_CARDINALITY`.
    Infinite,
    /// Not known without iterating: `tf.data.UNKNOWN_CARDINALITY`.
    Unknown,
}

impl fmt::Display for Cardinality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cardinality::Finite(n) => write!(f, "{n}"),
            Cardinality::Infinite => f.write_str("infinite"),
            Cardinality::Unknown => f.write_str("unknown"),
        }
    }
}

/// How many threads a transformation may use (`num_parallel_calls` in tf.data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parallelism {
    /// Run inline on the consuming thread.
    Sequential,
    /// Use exactly this many worker threads (must be at least 1).
    Fixed(usize),
    /// Let kiln choose, at run time: [`Dataset::map`] and [`Dataset::interleave`] adapt their
    /// worker count to measured rates within the iteration's CPU and RAM budgets
    /// ([`AutotuneOptions`], [`crate::dataset::autotune`]); `prefetch(AUTOTUNE)` adapts its buffer depth
    /// ([`BufferSize::Autotune`]). [`Parallelism::workers`] and
    /// [`Parallelism::prefetch_buffer`] give the static values used when autotuning is
    /// disabled.
    Autotune,
}

/// `tf.data.AUTOTUNE`: [`Parallelism::Autotune`].
pub const AUTOTUNE: Parallelism = Parallelism::Autotune;

impl Parallelism {
    /// Prefetch buffer size that [`Parallelism::Autotune`] stands for (2 elements: one being
    /// consumed while the next is produced, plus one of slack).
    pub const DEFAULT_PREFETCH: usize = 2;

    /// Worker threads a parallel map uses: 0 for `Sequential` (inline), `n` for `Fixed(n)`,
    /// the number of available cores for `Autotune` — the static count, used when autotuning
    /// is disabled ([`AutotuneOptions::enabled`]); an autotuned map adapts its count instead.
    pub fn workers(self) -> usize {
        match self {
            Parallelism::Sequential => 0,
            Parallelism::Fixed(n) => n,
            Parallelism::Autotune => std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
        }
    }

    /// A fixed buffer size for [`Dataset::prefetch`]: 0 (no prefetching) for `Sequential`,
    /// `n` for `Fixed(n)`, [`Parallelism::DEFAULT_PREFETCH`] for `Autotune`. For tf.data's
    /// adaptive `prefetch(AUTOTUNE)`, pass [`AUTOTUNE`] itself: `ds.prefetch(AUTOTUNE)`.
    pub fn prefetch_buffer(self) -> usize {
        match self {
            Parallelism::Sequential => 0,
            Parallelism::Fixed(n) => n,
            Parallelism::Autotune => Parallelism::DEFAULT_PREFETCH,
        }
    }
}

/// A lazy, re-iterable input pipeline — kiln's `tf.data.Dataset`.
///
/// Cheap to clone (the pipeline is shared). `Send + Sync`: build it on one thread, iterate on
/// another.
#[derive(Clone)]
pub struct Dataset {
    node: Arc<dyn Node>,
}

impl fmt::Debug for Dataset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dataset")
            .field("cardinality", &self.cardinality())
            .finish_non_exhaustive()
    }
}

impl Dataset {
    pub(crate) fn from_node(node: impl Node + 'static) -> Dataset {
        Dataset {
            node: Arc::new(node),
        }
    }

    /// The dataset's last node as a `T`, when it is one that offers itself
    /// ([`Node::as_any`]): `parse_example` of a TFRecord source reads the files itself, to
    /// name them in its errors.
    pub(crate) fn node_as<T: 'static>(&self) -> Option<&T> {
        self.node.as_any()?.downcast_ref::<T>()
    }

    /// A dataset whose iteration yields exactly one `Err(DataError::InvalidArgument(message))`.
    pub(crate) fn invalid(message: String) -> Dataset {
        Dataset::from_node(InvalidNode { message })
    }

    /// The number of elements one iteration yields, computed without iterating (tf.data's
    /// `cardinality()`): sources are finite; `map`, `shuffle` and `prefetch` keep it; `batch`
    /// divides it (rounding up, or down with `drop_remainder`); `repeat`, `take` and `skip`
    /// follow tf.data's rules. Invalid arguments give [`Cardinality::Unknown`].
    pub fn cardinality(&self) -> Cardinality {
        self.node.cardinality()
    }

    /// Starts a new iteration (a new epoch) over the dataset. Each call is independent: it
    /// spawns its own worker threads (for parallel `map` and `prefetch`), which stop when the
    /// iterator is dropped or exhausted, and has its own autotuning budgets and statistics
    /// ([`DatasetIter::stats`]).
    pub fn iter(&self) -> DatasetIter {
        let pipeline = autotune::Pipeline::new();
        let inner = {
            let _entered = autotune::enter(&pipeline);
            self.node.iter()
        };
        DatasetIter {
            inner,
            pipeline,
            elements: 0,
            waited: Duration::ZERO,
        }
    }
}

impl Dataset {
    /// Starts an iteration of this dataset as part of the iteration being built — the calling
    /// thread's current pipeline — for nodes that wrap a whole `Dataset` (`map_with_rng`'s
    /// numbering, TFRecord parsing, the image folder's error skipping). Unlike
    /// [`Dataset::iter`], which starts a separate iteration with its own budgets and
    /// statistics, the stages inside join the outer iteration: they share its CPU and RAM
    /// budgets and appear in its [`DatasetIter::stats`].
    pub(crate) fn iter_within(&self) -> BoxIter {
        self.node.iter()
    }
}

impl IntoIterator for &Dataset {
    type Item = Result<Element>;
    type IntoIter = DatasetIter;

    fn into_iter(self) -> DatasetIter {
        self.iter()
    }
}

/// One iteration over a [`Dataset`]; yields `Result<Element>` in pipeline order.
///
/// Dropping it early stops (and joins) any background threads the pipeline started.
pub struct DatasetIter {
    inner: BoxIter,
    pipeline: Arc<autotune::Pipeline>,
    /// Items yielded.
    elements: u64,
    /// Time spent in `next`.
    waited: Duration,
}

impl DatasetIter {
    /// Statistics of this iteration so far: elapsed time, items yielded, time the caller
    /// spent waiting in `next`, and each `map` / `prefetch` / `interleave` stage's counters
    /// (see [`PipelineStats`] and [`StageStats`] for what each number means). Cheap (a few
    /// atomic loads per stage); callable at any time, also after the iteration has ended.
    pub fn stats(&self) -> PipelineStats {
        PipelineStats {
            elapsed: self.pipeline.started.elapsed(),
            elements: self.elements,
            waited: self.waited,
            stages: self.pipeline.stage_stats(),
            skipped: self.pipeline.skip_stats(),
        }
    }

    /// What this iteration's `ignore_errors` stages have dropped so far (the
    /// [`PipelineStats::skipped`] part of [`DatasetIter::stats`], without the stage
    /// snapshots); `None` when the pipeline has no such stage running. Call it before the
    /// iterator is dropped.
    pub fn skip_stats(&self) -> Option<SkipStats> {
        self.pipeline.skip_stats()
    }
}

impl fmt::Debug for DatasetIter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatasetIter").finish_non_exhaustive()
    }
}

impl Iterator for DatasetIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        // Stages started lazily (each repetition under `repeat`) join this iteration.
        let _entered = autotune::enter(&self.pipeline);
        let start = Instant::now();
        let item = self.inner.next();
        self.waited += start.elapsed();
        if item.is_some() {
            self.elements += 1;
        }
        item
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

/// The node behind arguments rejected at build time.
struct InvalidNode {
    message: String,
}

impl Node for InvalidNode {
    fn iter(&self) -> BoxIter {
        Box::new(std::iter::once(Err(DataError::InvalidArgument(
            self.message.clone(),
        ))))
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Unknown
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("invalid").str(&self.message).finish()
    }
}

/// The text of a caught panic payload (`&str` or `String`), for error messages.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Shared test helpers: scalar `i64` elements and reading them back.
#[cfg(test)]
pub(crate) mod testutil {
    use crate::element::{Array, Buffer, Element};
    use crate::error::Result;

    use super::{Dataset, DatasetIter};

    /// An element `{"x": scalar i64 v}`.
    pub fn scalar(v: i64) -> Element {
        Element::new().with("x", Array::scalar(Buffer::I64(vec![v])).unwrap())
    }

    /// `from_elements` of scalars `0..n`.
    pub fn range(n: i64) -> Dataset {
        Dataset::from_elements((0..n).map(scalar).collect())
    }

    /// The `"x"` values of a scalar element (or all values of a batched one).
    pub fn values(e: &Element) -> Vec<i64> {
        e.get("x").unwrap().data().to_i64()
    }

    /// All `"x"` values of one iteration, flattened; panics on errors.
    pub fn collect(ds: &Dataset) -> Vec<i64> {
        ds.iter()
            .map(|r| values(&r.unwrap()))
            .collect::<Vec<_>>()
            .concat()
    }

    /// One iteration's results, errors kept.
    pub fn collect_results(ds: &Dataset) -> Vec<Result<Vec<i64>>> {
        ds.iter().map(|r| r.map(|e| values(&e))).collect()
    }

    #[test]
    fn dataset_and_iterator_are_thread_safe() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Dataset>();
        send::<DatasetIter>();
        // Build on one thread, iterate on another.
        let ds = range(4).batch(2, false);
        let out = std::thread::spawn(move || collect(&ds)).join().unwrap();
        assert_eq!(out, vec![0, 1, 2, 3]);
    }
}
