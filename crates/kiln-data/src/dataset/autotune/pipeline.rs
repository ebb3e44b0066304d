//! The state one iteration shares between its stages: budgets, options and the stage registry.
//!
//! [`crate::Dataset::iter`] creates a [`Pipeline`] and makes it the thread's *current*
//! pipeline while the node tree builds its iterators (and again around every `next`, and on
//! the background threads stages start), so a stage finds the pipeline it belongs to with
//! [`current`] without every node passing it along.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use super::AutotuneOptions;
use super::stats::{SkipStats, Stage, StageStats};
use super::system;
use crate::error::DataError;

/// At most this many stages are listed in one iteration's statistics; further ones (inner
/// datasets of an `interleave`, say) still work and tune but are not listed.
pub(crate) const MAX_LISTED_STAGES: usize = 64;

/// One iteration's shared state.
pub(crate) struct Pipeline {
    pub(crate) started: Instant,
    /// The first options a `with_autotune` node set (the outermost one).
    options: Mutex<Option<AutotuneOptions>>,
    stages: Mutex<Vec<Arc<Stage>>>,
    /// Worker slots in use by autotuned stages.
    cpu_used: Mutex<usize>,
    cores: OnceLock<usize>,
    ram: OnceLock<u64>,
    /// What `ignore_errors` stages dropped; `None` until one starts.
    skips: Mutex<Option<SkipStats>>,
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Pipeline>>> = const { RefCell::new(None) };
}

/// The calling thread's current pipeline, or a new, unlisted one (default options) when the
/// thread has none.
pub(crate) fn current() -> Arc<Pipeline> {
    CURRENT
        .with(|c| c.borrow().clone())
        .unwrap_or_else(Pipeline::new)
}

/// Makes `pipeline` the thread's current one until the guard drops (which restores the
/// previous one).
pub(crate) fn enter(pipeline: &Arc<Pipeline>) -> Entered {
    let previous = CURRENT.with(|c| c.borrow_mut().replace(Arc::clone(pipeline)));
    Entered { previous }
}

/// Guard of [`enter`].
pub(crate) struct Entered {
    previous: Option<Arc<Pipeline>>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pipeline {
    pub(crate) fn new() -> Arc<Pipeline> {
        Arc::new(Pipeline {
            started: Instant::now(),
            options: Mutex::new(None),
            stages: Mutex::new(Vec::new()),
            cpu_used: Mutex::new(0),
            cores: OnceLock::new(),
            ram: OnceLock::new(),
            skips: Mutex::new(None),
        })
    }

    /// Sets the pipeline's options unless an (outer) `with_autotune` already did.
    pub(crate) fn offer_options(&self, options: AutotuneOptions) {
        lock(&self.options).get_or_insert(options);
    }

    /// Whether `AUTOTUNE` knobs adapt (tf.data's `autotune.enabled`, default true).
    pub(crate) fn autotune_enabled(&self) -> bool {
        lock(&self.options).is_none_or(|o| o.enabled)
    }

    /// Worker threads all autotuned stages together may use: the option, or the cores
    /// available. At least 1.
    pub(crate) fn cpu_budget(&self) -> usize {
        let option = lock(&self.options).and_then(|o| o.cpu_budget);
        option
            .unwrap_or_else(|| *self.cores.get_or_init(system::cores))
            .max(1)
    }

    /// Bytes all stages' buffers together may hold: the option, or half the available memory.
    pub(crate) fn ram_budget(&self) -> u64 {
        let option = lock(&self.options).and_then(|o| o.ram_budget);
        option.unwrap_or_else(|| *self.ram.get_or_init(system::default_ram_budget))
    }

    /// Registers a stage started by the node at address `key`. A finished stage of the same
    /// node (the previous repetition under `repeat`) is revived, so its counts continue.
    pub(crate) fn register(
        self: &Arc<Pipeline>,
        name: &'static str,
        key: usize,
        autotuned: bool,
    ) -> StageHandle {
        let mut stages = lock(&self.stages);
        let revived = stages
            .iter()
            .find(|s| s.key == key && s.name == name && !s.live.load(Ordering::Relaxed))
            .cloned();
        let stage = match revived {
            Some(stage) => {
                stage.live.store(true, Ordering::Relaxed);
                stage
            }
            None => {
                let stage = Arc::new(Stage::new(name, key, autotuned));
                if stages.len() < MAX_LISTED_STAGES {
                    stages.push(Arc::clone(&stage));
                }
                stage
            }
        };
        StageHandle {
            pipeline: Arc::clone(self),
            stage,
        }
    }

    /// Notes that an `ignore_errors` stage runs in this iteration, so that its statistics
    /// report skips (zero until one happens).
    pub(crate) fn track_skips(&self) {
        lock(&self.skips).get_or_insert_with(SkipStats::default);
    }

    /// Counts a record that an `ignore_errors` stage dropped: element `index` of its input,
    /// which failed with `error`.
    pub(crate) fn record_skip(&self, index: u64, error: &DataError) {
        lock(&self.skips)
            .get_or_insert_with(SkipStats::default)
            .add(index, error);
    }

    /// The skips so far; `None` when no `ignore_errors` stage has started.
    pub(crate) fn skip_stats(&self) -> Option<SkipStats> {
        lock(&self.skips).clone()
    }

    pub(crate) fn stage_stats(&self) -> Vec<StageStats> {
        lock(&self.stages).iter().map(|s| s.snapshot()).collect()
    }

    /// Bytes the buffers of live stages other than `me` may hold.
    fn ram_used_by_others(&self, me: &Stage) -> u64 {
        lock(&self.stages)
            .iter()
            .filter(|s| !std::ptr::eq(s.as_ref(), me) && s.live.load(Ordering::Relaxed))
            .map(|s| s.reserved_bytes())
            .sum()
    }
}

/// A stage's membership in its pipeline; dropping it (with the stage's iterator) gives back
/// the stage's worker slots and takes its buffer out of the RAM budget.
pub(crate) struct StageHandle {
    pipeline: Arc<Pipeline>,
    pub(crate) stage: Arc<Stage>,
}

impl StageHandle {
    pub(crate) fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Takes one worker slot of the CPU budget if one is free.
    pub(crate) fn try_reserve_worker(&self) -> bool {
        let mut used = lock(&self.pipeline.cpu_used);
        if *used < self.pipeline.cpu_budget() {
            *used += 1;
            self.stage.cpu_reserved.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Takes a worker slot even when the budget is spent: every autotuned stage keeps one
    /// worker, or it could not make progress.
    pub(crate) fn force_reserve_worker(&self) {
        *lock(&self.pipeline.cpu_used) += 1;
        self.stage.cpu_reserved.fetch_add(1, Ordering::Relaxed);
    }

    /// Gives one worker slot back.
    pub(crate) fn release_worker(&self) {
        let mut used = lock(&self.pipeline.cpu_used);
        let held = &self.stage.cpu_reserved;
        if held.load(Ordering::Relaxed) > 0 {
            held.fetch_sub(1, Ordering::Relaxed);
            *used = used.saturating_sub(1);
        }
    }

    /// The most elements this stage's buffer may hold under the RAM budget, given the other
    /// live stages' buffers and this stage's mean element size; `usize::MAX` before any
    /// element has been measured, and never less than 1.
    pub(crate) fn ram_capacity(&self) -> usize {
        let mean = self.stage.mean_bytes();
        if mean == 0 {
            return usize::MAX;
        }
        let room = self
            .pipeline
            .ram_budget()
            .saturating_sub(self.pipeline.ram_used_by_others(&self.stage));
        usize::try_from(room / mean).unwrap_or(usize::MAX).max(1)
    }
}

impl Drop for StageHandle {
    fn drop(&mut self) {
        let held = self.stage.cpu_reserved.swap(0, Ordering::Relaxed);
        let mut used = lock(&self.pipeline.cpu_used);
        *used = used.saturating_sub(held);
        self.stage.live.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::{Array, Buffer, Element};

    fn options(cpu: usize, ram: u64) -> AutotuneOptions {
        AutotuneOptions {
            cpu_budget: Some(cpu),
            ram_budget: Some(ram),
            ..AutotuneOptions::default()
        }
    }

    #[test]
    fn cpu_budget_is_shared_between_stages() {
        let p = Pipeline::new();
        p.offer_options(options(3, 1000));
        p.offer_options(options(8, 1)); // inner options lose
        assert_eq!((p.cpu_budget(), p.ram_budget()), (3, 1000));
        let a = p.register("map", 1, true);
        let b = p.register("map", 2, true);
        a.force_reserve_worker();
        b.force_reserve_worker();
        assert!(a.try_reserve_worker());
        assert!(!b.try_reserve_worker(), "3 of 3 slots taken");
        a.release_worker();
        assert!(b.try_reserve_worker());
        drop(b); // gives back its 2 slots
        assert!(a.try_reserve_worker());
        assert!(a.try_reserve_worker());
        assert!(!a.try_reserve_worker());
    }

    #[test]
    fn ram_capacity_counts_other_live_stages() {
        let p = Pipeline::new();
        p.offer_options(options(1, 1000));
        let a = p.register("prefetch", 1, true);
        let b = p.register("prefetch", 2, true);
        assert_eq!(a.ram_capacity(), usize::MAX, "nothing measured yet");
        let e = Element::new().with(
            "x",
            Array::new(vec![100], Buffer::U8(vec![0; 100])).unwrap(),
        );
        a.stage.measure(&e);
        b.stage.measure(&e);
        b.stage.set_buffer(4); // 400 bytes
        assert_eq!(a.ram_capacity(), 6);
        b.stage.set_buffer(20); // more than the budget: a still gets one element
        assert_eq!(a.ram_capacity(), 1);
        drop(b);
        assert_eq!(a.ram_capacity(), 10);
    }

    #[test]
    fn repetitions_of_a_node_share_one_entry() {
        let p = Pipeline::new();
        let first = p.register("map", 7, false);
        first.stage.add_element();
        let concurrent = p.register("map", 7, false); // same node, still live: its own entry
        drop(first);
        let again = p.register("map", 7, false);
        again.stage.add_element();
        let stats = p.stage_stats();
        assert_eq!(stats.len(), 2);
        assert_eq!(stats[0].elements, 2);
        assert_eq!(stats[1].elements, 0);
        drop(concurrent);
    }

    #[test]
    fn enter_nests_and_restores() {
        let outer = Pipeline::new();
        let inner = Pipeline::new();
        {
            let _a = enter(&outer);
            assert!(Arc::ptr_eq(&current(), &outer));
            {
                let _b = enter(&inner);
                assert!(Arc::ptr_eq(&current(), &inner));
            }
            assert!(Arc::ptr_eq(&current(), &outer));
        }
        assert!(!Arc::ptr_eq(&current(), &outer));
    }
}
