//! [`AUTOTUNE`](crate::AUTOTUNE): knobs that adapt at run time, and per-stage statistics.
//!
//! With [`Parallelism::Autotune`](crate::Parallelism::Autotune), the worker count of
//! [`Dataset::map`] and of [`Dataset::interleave`], and with `prefetch(AUTOTUNE)` the buffer
//! depth of [`Dataset::prefetch`], are set while the pipeline runs from measured rates, within
//! two budgets per iteration ([`AutotuneOptions`], tf.data's `tf.data.Options().autotune`):
//!
//! * **CPU budget** — worker threads all autotuned stages of one iteration may use together;
//!   default: the cores available to the process ([`std::thread::available_parallelism`]).
//!   Each autotuned stage keeps at least one worker even when the budget is spent.
//! * **RAM budget** — bytes all stages' buffers may hold together, each stage counted as its
//!   buffer capacity times its measured mean element size (fixed-size buffers count too, but
//!   only autotuned ones are limited); default: half of the available memory
//!   (`MemAvailable` in `/proc/meminfo`, lowered to a cgroup v2 limit's headroom; 2 GiB where
//!   that file does not exist). A stage's buffer always has room for one element.
//!
//! # The algorithm
//!
//! tf.data (`tensorflow/core/framework/model.cc`) models the whole pipeline as a tree of
//! nodes with measured processing times and hill-climbs on the modelled output latency. kiln
//! uses a simpler, local feedback rule per stage. Each autotuned stage measures, on its
//! consumer's thread, windows of 20 ms: the wall time, the time
//! its consumer was blocked waiting for it (*waited*), the time its threads spent producing
//! (*busy*, summed over threads) and, for prefetch, the time its producer was blocked on a full
//! buffer (*stalled*). At the end of each window:
//!
//! * **map / interleave parallelism** (`n` workers), starting at 1 (or the value the previous
//!   iteration of the same dataset ended with):
//!   - *grow* by one worker when `waited > 10 %` of the window **and** `busy ≥ 0.5 · n` windows
//!     (the consumer is starved while the workers are busy, so one more would produce more),
//!     if the CPU budget has a free slot and — for map, whose in-flight window is `2 · n`
//!     jobs of `k` elements (`k` set from the function's measured cost, see `map.rs`) — the
//!     RAM budget holds `2 · (n + 1) · k` elements; interleave also stops at
//!     `cycle_length` (more would have nothing to run);
//!   - *shrink* by one when `waited < 2 %` **and** `busy < 0.6 · (n − 1)` windows (the
//!     consumer is satisfied and the work fits in one fewer worker), or when growing element
//!     sizes push map's window over the RAM budget;
//!   - otherwise keep `n`.
//! * **prefetch buffer depth** (`b` elements), starting at 1 (as tf.data's
//!   `PrefetchAutotuner`, `tensorflow/core/kernels/data/prefetch_autotuner.cc`) or the previous
//!   iteration's value: *double* when `waited > 10 %` **and** the producer was stalled on a full
//!   buffer in the window — the producer keeps up on average but is bursty, which a deeper
//!   buffer absorbs; a producer that never fills the buffer is too slow for any depth to help,
//!   and a consumer that never waits needs no more. The depth is then clamped to what the RAM
//!   budget holds (which can shrink it when elements grow) and to 1024; it does not shrink
//!   otherwise (neither does tf.data's).
//!
//! Tuning changes only how many elements are produced ahead and by how many threads, never
//! which elements or their order: an autotuned map stays order preserving, and a deterministic
//! interleave keeps the sequential order.
//!
//! # Statistics
//!
//! Every `map`, `prefetch` and `interleave` stage counts what it does whether autotuned or
//! not; [`DatasetIter::stats`](crate::DatasetIter::stats) returns a [`PipelineStats`] with the
//! caller's view (elapsed, time spent waiting in `next`) and one [`StageStats`] per stage
//! (see each field for its exact meaning).

mod pipeline;
mod policy;
mod stats;
use crate::system;
#[cfg(test)]
mod tests;

pub(crate) use pipeline::{Pipeline, StageHandle, current, enter};
pub(crate) use policy::{Step, Window, buffer_size, elements_per_job, parallelism_step};
pub(crate) use stats::Stage;
pub use stats::{MAX_LISTED_SKIPS, PipelineStats, SkipStats, SkippedRecord, StageStats};

use std::sync::Arc;

use super::{BoxIter, Cardinality, Dataset, Node};

/// Budgets and switches of autotuning — tf.data's `tf.data.experimental.AutotuneOptions`
/// (`autotune.enabled`, `autotune.cpu_budget`, `autotune.ram_budget`), applied with
/// [`Dataset::with_autotune`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutotuneOptions {
    /// Whether [`crate::AUTOTUNE`] knobs adapt (default `true`). When `false` they take the
    /// static values of [`crate::Parallelism::workers`] (one worker per core) and
    /// [`crate::Parallelism::DEFAULT_PREFETCH`] (2 elements), kiln's behaviour before
    /// autotuning.
    pub enabled: bool,
    /// Worker threads all autotuned stages of an iteration may use together; `None`: the
    /// cores available. `Some(0)` acts as `Some(1)` (each autotuned stage keeps one worker).
    pub cpu_budget: Option<usize>,
    /// Bytes all stages' buffers of an iteration may hold together; `None`: half of the
    /// available memory (see the module docs).
    pub ram_budget: Option<u64>,
}

impl Default for AutotuneOptions {
    fn default() -> AutotuneOptions {
        AutotuneOptions {
            enabled: true,
            cpu_budget: None,
            ram_budget: None,
        }
    }
}

impl Dataset {
    /// Sets the autotuning budgets for every iteration of this dataset — tf.data's
    /// `dataset.with_options(options)` with `options.autotune` set. The options apply to the
    /// whole pipeline, upstream and downstream stages alike; when several `with_autotune`
    /// calls are in one pipeline, the outermost (last applied) wins. Elements are unchanged
    /// (same [`fingerprint`](Dataset::fingerprint) and cardinality).
    pub fn with_autotune(self, options: AutotuneOptions) -> Dataset {
        Dataset::from_node(OptionsNode {
            input: self.node,
            options,
        })
    }
}

struct OptionsNode {
    input: Arc<dyn Node>,
    options: AutotuneOptions,
}

impl Node for OptionsNode {
    fn iter(&self) -> BoxIter {
        current().offer_options(self.options);
        self.input.iter()
    }

    fn cardinality(&self) -> Cardinality {
        self.input.cardinality()
    }

    fn fingerprint(&self) -> u64 {
        self.input.fingerprint()
    }
}

/// The identity of a node for [`Pipeline::register`]: its address.
pub(crate) fn node_key<T>(node: &T) -> usize {
    node as *const T as usize
}
