//! [`Dataset::interleave`]: map each element to a dataset and interleave their elements.
//!
//! The order is tf.data's `InterleaveDataset` (`interleave_dataset_op.cc`): a cycle of
//! `cycle_length` slots is visited round-robin; at its turn a slot yields up to `block_length`
//! elements of its inner dataset, then the cycle moves on. A slot whose inner dataset has ended
//! is emptied and the cycle moves on; when the cycle reaches an empty slot it opens the next
//! input element's dataset in it (or skips it once the input has ended). Iteration ends when
//! the input has ended and every slot is empty. An error (from the input, from `f` or from an
//! inner dataset) is yielded at the point the sequential algorithm meets it and does not
//! advance the cycle — as tf.data, where the failing `GetNext` returns before the position
//! moves.
//!
//! Parallel, deterministic (`num_parallel_calls` > sequential, `deterministic = true`): the
//! same state machine runs on the consuming thread, but each open slot's inner dataset is
//! iterated ahead by a producer thread into a bounded channel (`block_length` elements), and
//! empty slots are opened ahead of the cycle. Opening ahead is safe because the sequential
//! algorithm hands input elements to empty slots in cyclic order starting at the current
//! position — an order that later events only extend (a slot empties only at the current
//! position, which then becomes the last in that order). The one exception is a failure (input
//! error or `f` error) in a slot: the sequential algorithm gives that slot the *next* input
//! element too, so opening ahead stops at a failed slot until the cycle has yielded its error.
//! `f` runs on the consuming thread (it only builds a lazy [`Dataset`]); at most
//! `num_parallel_calls` producers run their inner dataset's `next` at a time.
//!
//! Parallel, non-deterministic (`deterministic = false`): producers for up to `cycle_length`
//! inner datasets send into one shared channel and elements are yielded as they arrive
//! (`block_length` only sizes the channel); a slot whose dataset ends takes the next input
//! element.
//!
//! With [`Parallelism::Autotune`] the number of producers allowed to run at once (the
//! semaphore's limit) adapts between 1 and `cycle_length`, within the CPU budget (see
//! `autotune/mod.rs`); the order rules above do not depend on it.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use super::autotune::{self, Pipeline, Stage, StageHandle, Step, Window};
use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node, Parallelism, panic_message};
use crate::element::Element;
use crate::error::{DataError, Result};

type InterleaveFn = Arc<dyn Fn(Element) -> Result<Dataset> + Send + Sync>;

impl Dataset {
    /// `tf.data.Dataset.interleave(f, cycle_length, block_length, num_parallel_calls,
    /// deterministic)`: maps every input element to a dataset with `f` and interleaves their
    /// elements — `cycle_length` inner datasets open at once, visited round-robin,
    /// `block_length` consecutive elements from each (see the module docs for the exact
    /// algorithm). `cycle_length = 1` is `flat_map` (inner datasets one after another).
    ///
    /// tf.data example: `range(1, 6).interleave(x -> from_tensors(x).repeat(6), cycle_length
    /// 2, block_length 4)` yields `1 1 1 1 2 2 2 2 1 1 2 2 3 3 3 3 4 4 4 4 3 3 4 4 5 5 5 5 5 5`.
    ///
    /// * [`Parallelism::Sequential`]: inner datasets are iterated on the consuming thread.
    /// * [`Parallelism::Fixed`]`(n)` / [`Parallelism::Autotune`]: every open inner dataset is
    ///   iterated ahead on its own producer thread (at most `n` of them running at a time; up
    ///   to `cycle_length × (block_length + 1)` elements buffered). Autotuned, `n` starts at 1
    ///   and adapts between 1 and `cycle_length` within the CPU budget ([`crate::dataset::autotune`]). With
    ///   `deterministic` the output is exactly the sequential order; without, elements come in
    ///   whatever order the producers deliver them (a slow inner dataset does not hold the
    ///   others back). `deterministic` has no effect when sequential.
    ///
    /// tf.data's defaults for `cycle_length` (AUTOTUNE: the number of cores) and
    /// `block_length` (1) must be passed explicitly.
    ///
    /// Errors: input errors and `Err`s from `f` are yielded in place (a panic in `f` or in an
    /// inner dataset becomes [`DataError::Map`]); inner datasets' errors pass through.
    /// `cycle_length == 0`, `block_length == 0` or `Fixed(0)` make iteration yield a single
    /// [`DataError::InvalidArgument`]. Cardinality: [`Cardinality::Unknown`], as tf.data.
    pub fn interleave<F>(
        self,
        f: F,
        cycle_length: usize,
        block_length: usize,
        num_parallel_calls: Parallelism,
        deterministic: bool,
    ) -> Dataset
    where
        F: Fn(Element) -> Result<Dataset> + Send + Sync + 'static,
    {
        let problem = if cycle_length == 0 {
            Some("cycle_length must be at least 1")
        } else if block_length == 0 {
            Some("block_length must be at least 1")
        } else if num_parallel_calls == Parallelism::Fixed(0) {
            Some("num_parallel_calls must be at least 1 (or Sequential / AUTOTUNE)")
        } else {
            None
        };
        if let Some(problem) = problem {
            return Dataset::invalid(format!("interleave: {problem}"));
        }
        Dataset::from_node(InterleaveNode {
            input: self.node,
            f: Arc::new(f),
            cycle_length,
            block_length,
            parallelism: num_parallel_calls,
            deterministic,
            last_tuned: Arc::new(AtomicUsize::new(0)),
        })
    }
}

struct InterleaveNode {
    input: Arc<dyn Node>,
    f: InterleaveFn,
    cycle_length: usize,
    block_length: usize,
    parallelism: Parallelism,
    deterministic: bool,
    /// Producer limit the last autotuned iteration ended with (0: none yet).
    last_tuned: Arc<AtomicUsize>,
}

impl Node for InterleaveNode {
    fn iter(&self) -> BoxIter {
        let input = self.input.iter();
        let f = Arc::clone(&self.f);
        let pipeline = autotune::current();
        let autotuned = self.parallelism == Parallelism::Autotune && pipeline.autotune_enabled();
        let handle = pipeline.register("interleave", autotune::node_key(self), autotuned);
        let workers = if autotuned {
            let start = self
                .last_tuned
                .load(Ordering::Relaxed)
                .clamp(1, handle.pipeline().cpu_budget().min(self.cycle_length));
            handle.force_reserve_worker();
            let mut workers = 1;
            while workers < start && handle.try_reserve_worker() {
                workers += 1;
            }
            workers
        } else {
            self.parallelism.workers()
        };
        let ctx = (workers > 0).then(|| Ctx {
            permits: Permits::new(workers),
            stage: Arc::clone(&handle.stage),
            pipeline: autotune::current(),
        });
        handle.stage.set_parallelism(workers);
        handle.stage.set_buffer(if workers > 0 {
            self.cycle_length.saturating_mul(self.block_length)
        } else {
            0
        });
        let permits = ctx.as_ref().map(|c| Arc::clone(&c.permits));
        let tuning = autotuned.then(|| (Window::new(&handle.stage), Arc::clone(&self.last_tuned)));
        let inner: BoxIter = match ctx {
            Some(ctx) if !self.deterministic => Box::new(SloppyIter::new(
                input,
                f,
                self.cycle_length,
                self.block_length,
                ctx,
            )),
            ctx => Box::new(CycleIter {
                input,
                input_done: false,
                f,
                slots: (0..self.cycle_length).map(|_| Slot::Empty).collect(),
                cycle_index: 0,
                block_index: 0,
                block_length: self.block_length,
                num_open: 0,
                prefetch: ctx.map(|ctx| Prefetch {
                    ctx,
                    buffer: self.block_length,
                }),
                stage: Arc::clone(&handle.stage),
            }),
        };
        Box::new(Counted {
            inner,
            handle,
            permits,
            tuning,
            max_workers: self.cycle_length,
        })
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Unknown
    }

    /// `f` is identified by position; the parallelism does not change a deterministic order.
    fn fingerprint(&self) -> u64 {
        Fingerprint::new("interleave")
            .u64(self.cycle_length as u64)
            .u64(self.block_length as u64)
            .bool(self.deterministic || self.parallelism == Parallelism::Sequential)
            .input(self.input.fingerprint())
            .finish()
    }
}

/// Calls `f`, turning a panic into [`DataError::Map`].
fn call(f: &InterleaveFn, element: Element) -> Result<Dataset> {
    panic::catch_unwind(AssertUnwindSafe(|| f(element))).unwrap_or_else(|payload| {
        Err(DataError::Map(format!(
            "interleave function panicked: {}",
            panic_message(payload.as_ref())
        )))
    })
}

/// Permits in use and the limit.
struct PermitCount {
    in_use: usize,
    limit: usize,
}

/// A counting semaphore with an adjustable limit: at most `limit` producers inside their
/// inner dataset's `next` at once.
struct Permits {
    count: Mutex<PermitCount>,
    freed: Condvar,
}

impl Permits {
    fn new(n: usize) -> Arc<Permits> {
        Arc::new(Permits {
            count: Mutex::new(PermitCount {
                in_use: 0,
                limit: n,
            }),
            freed: Condvar::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PermitCount> {
        self.count.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn acquire(&self) -> Permit<'_> {
        let mut count = self.lock();
        while count.in_use >= count.limit {
            count = self.freed.wait(count).unwrap_or_else(|p| p.into_inner());
        }
        count.in_use += 1;
        Permit(self)
    }

    fn limit(&self) -> usize {
        self.lock().limit
    }

    /// Changes the limit; producers above a lowered limit finish their current `next` first.
    fn set_limit(&self, limit: usize) {
        self.lock().limit = limit;
        self.freed.notify_all();
    }
}

struct Permit<'a>(&'a Permits);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.0.lock().in_use -= 1;
        self.0.freed.notify_one();
    }
}

/// What producer threads share: the semaphore, the stage's counters and the pipeline (made
/// current on each producer thread, so stages inside inner datasets join it).
#[derive(Clone)]
struct Ctx {
    permits: Arc<Permits>,
    stage: Arc<Stage>,
    pipeline: Arc<Pipeline>,
}

/// Starts a thread that iterates `dataset`, handing each item to `send` (which returns false
/// once nobody listens), then `send(None)` at the end. Panics become one [`DataError::Map`].
fn spawn_producer(
    dataset: Dataset,
    ctx: Ctx,
    mut send: impl FnMut(Option<Result<Element>>) -> bool + Send + 'static,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("kiln-data-interleave".into())
        .spawn(move || {
            let _entered = autotune::enter(&ctx.pipeline);
            let mut inner: Option<BoxIter> = None;
            loop {
                let step = {
                    let _permit = ctx.permits.acquire();
                    let start = Instant::now();
                    let step = panic::catch_unwind(AssertUnwindSafe(|| {
                        inner.get_or_insert_with(|| dataset.node.iter()).next()
                    }));
                    ctx.stage.add_busy(start.elapsed());
                    step
                };
                match step {
                    Ok(Some(item)) => {
                        if !send(Some(item)) {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(payload) => {
                        let message = format!(
                            "interleave: inner dataset panicked: {}",
                            panic_message(payload.as_ref())
                        );
                        if !send(Some(Err(DataError::Map(message)))) {
                            return;
                        }
                        break;
                    }
                }
            }
            send(None);
        })
        .map_err(|e| DataError::Map(format!("interleave: cannot start a worker thread: {e}")))
}

/// Prefetching settings of the deterministic parallel mode.
struct Prefetch {
    ctx: Ctx,
    /// Channel capacity per slot.
    buffer: usize,
}

/// An inner dataset iterated ahead on a producer thread.
struct Producer {
    /// `None` once dropping has begun.
    rx: Option<Receiver<Result<Element>>>,
    handle: Option<JoinHandle<()>>,
}

impl Producer {
    fn start(dataset: Dataset, prefetch: &Prefetch) -> Result<Producer> {
        let (tx, rx) = mpsc::sync_channel(prefetch.buffer);
        let handle = spawn_producer(dataset, prefetch.ctx.clone(), move |item| {
            // End of input: returning drops `tx`, which the consumer sees as disconnection.
            item.is_none_or(|item| tx.send(item).is_ok())
        })?;
        Ok(Producer {
            rx: Some(rx),
            handle: Some(handle),
        })
    }

    fn next(&mut self) -> Option<Result<Element>> {
        self.rx.as_ref()?.recv().ok()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.rx = None; // the producer's next send fails, so it stops
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// One place in the cycle.
enum Slot {
    Empty,
    /// An input or `f` error, to yield when the cycle reaches this slot.
    Failed(DataError),
    Inline(BoxIter),
    Ahead(Producer),
}

/// Sequential and deterministic parallel interleave (see the module docs).
struct CycleIter {
    input: BoxIter,
    input_done: bool,
    f: InterleaveFn,
    slots: Vec<Slot>,
    cycle_index: usize,
    /// Elements taken from the current slot in this turn.
    block_index: usize,
    block_length: usize,
    /// Slots that are not `Empty`.
    num_open: usize,
    /// `None`: iterate inner datasets inline.
    prefetch: Option<Prefetch>,
    stage: Arc<Stage>,
}

impl CycleIter {
    /// Opens the dataset of input element `element` (a `Failed` slot when `f` fails).
    fn open(&self, element: Element) -> Slot {
        let dataset = match call(&self.f, element) {
            Ok(dataset) => dataset,
            Err(err) => return Slot::Failed(err),
        };
        match &self.prefetch {
            None => Slot::Inline(dataset.node.iter()),
            Some(prefetch) => match Producer::start(dataset, prefetch) {
                Ok(producer) => Slot::Ahead(producer),
                Err(err) => Slot::Failed(err),
            },
        }
    }

    /// Parallel mode: gives input elements to empty slots in cyclic order from the current
    /// one, stopping at a failed slot (see the module docs for why this keeps the order).
    fn fill_ahead(&mut self) {
        let n = self.slots.len();
        for k in 0..n {
            if self.input_done {
                return;
            }
            let j = (self.cycle_index + k) % n;
            match self.slots[j] {
                Slot::Failed(_) => return,
                Slot::Empty => {}
                Slot::Inline(_) | Slot::Ahead(_) => continue,
            }
            let slot = match self.input.next() {
                None => {
                    self.input_done = true;
                    return;
                }
                Some(Err(err)) => Slot::Failed(err),
                Some(Ok(element)) => self.open(element),
            };
            let failed = matches!(slot, Slot::Failed(_));
            self.slots[j] = slot;
            self.num_open += 1;
            if failed {
                return;
            }
        }
    }

    fn next_in_cycle(&mut self) {
        self.block_index = 0;
        self.cycle_index = (self.cycle_index + 1) % self.slots.len();
    }
}

impl Iterator for CycleIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        loop {
            if self.prefetch.is_some() {
                self.fill_ahead();
            }
            if self.input_done && self.num_open == 0 {
                return None;
            }
            let j = self.cycle_index;
            match std::mem::replace(&mut self.slots[j], Slot::Empty) {
                Slot::Empty if self.input_done => self.next_in_cycle(),
                Slot::Empty => match self.input.next() {
                    None => self.input_done = true,
                    Some(Err(err)) => return Some(Err(err)),
                    Some(Ok(element)) => match self.open(element) {
                        Slot::Failed(err) => return Some(Err(err)),
                        slot => {
                            self.slots[j] = slot;
                            self.num_open += 1;
                        }
                    },
                },
                Slot::Failed(err) => {
                    self.num_open -= 1;
                    return Some(Err(err));
                }
                mut slot => {
                    let start = Instant::now();
                    let item = match &mut slot {
                        Slot::Inline(inner) => {
                            let item = inner.next();
                            self.stage.add_busy(start.elapsed());
                            item
                        }
                        Slot::Ahead(producer) => producer.next(),
                        Slot::Empty | Slot::Failed(_) => None,
                    };
                    self.stage.add_waited(start.elapsed());
                    match item {
                        Some(Ok(element)) => {
                            self.slots[j] = slot;
                            self.block_index += 1;
                            if self.block_index == self.block_length {
                                self.next_in_cycle();
                            }
                            return Some(Ok(element));
                        }
                        Some(Err(err)) => {
                            self.slots[j] = slot;
                            return Some(Err(err));
                        }
                        None => {
                            drop(slot); // joins a producer thread
                            self.num_open -= 1;
                            self.next_in_cycle();
                        }
                    }
                }
            }
        }
    }
}

/// Message of the non-deterministic mode: (slot, item, or `None` when the slot's dataset ended).
type SlotMessage = (usize, Option<Result<Element>>);

/// Non-deterministic parallel interleave: elements in arrival order.
struct SloppyIter {
    input: BoxIter,
    input_done: bool,
    f: InterleaveFn,
    /// Producer thread of each slot (`None`: empty).
    slots: Vec<Option<JoinHandle<()>>>,
    num_open: usize,
    /// `None` once dropping has begun.
    rx: Option<Receiver<SlotMessage>>,
    tx: Option<SyncSender<SlotMessage>>,
    ctx: Ctx,
}

impl SloppyIter {
    fn new(
        input: BoxIter,
        f: InterleaveFn,
        cycle_length: usize,
        block_length: usize,
        ctx: Ctx,
    ) -> SloppyIter {
        let (tx, rx) = mpsc::sync_channel(cycle_length.saturating_mul(block_length));
        SloppyIter {
            input,
            input_done: false,
            f,
            slots: (0..cycle_length).map(|_| None).collect(),
            num_open: 0,
            rx: Some(rx),
            tx: Some(tx),
            ctx,
        }
    }

    /// Opens input elements into empty slots; returns an input or `f` error to yield.
    fn fill(&mut self) -> Option<DataError> {
        while !self.input_done {
            let j = self.slots.iter().position(Option::is_none)?;
            let element = match self.input.next() {
                None => {
                    self.input_done = true;
                    return None;
                }
                Some(Err(err)) => return Some(err),
                Some(Ok(element)) => element,
            };
            let dataset = match call(&self.f, element) {
                Ok(dataset) => dataset,
                Err(err) => return Some(err),
            };
            let tx = self.tx.clone()?;
            let send = move |item| tx.send((j, item)).is_ok();
            match spawn_producer(dataset, self.ctx.clone(), send) {
                Ok(handle) => {
                    self.slots[j] = Some(handle);
                    self.num_open += 1;
                }
                Err(err) => return Some(err),
            }
        }
        None
    }
}

impl Iterator for SloppyIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        loop {
            if let Some(err) = self.fill() {
                return Some(Err(err));
            }
            if self.num_open == 0 {
                return None;
            }
            // Cannot disconnect: `self.tx` is alive.
            let start = Instant::now();
            let message = self.rx.as_ref()?.recv().ok();
            self.ctx.stage.add_waited(start.elapsed());
            match message? {
                (_, Some(item)) => return Some(item),
                (j, None) => {
                    if let Some(handle) = self.slots[j].take() {
                        let _ = handle.join();
                    }
                    self.num_open -= 1;
                }
            }
        }
    }
}

impl Drop for SloppyIter {
    fn drop(&mut self) {
        self.rx = None; // producers' next send fails, so they stop
        self.tx = None;
        for handle in self.slots.iter_mut().filter_map(Option::take) {
            let _ = handle.join();
        }
    }
}

/// Counts, measures and (when autotuned) tunes around either iterator.
struct Counted {
    inner: BoxIter,
    handle: StageHandle,
    /// The producers' semaphore in parallel modes.
    permits: Option<Arc<Permits>>,
    /// The tuning window and where to leave the final limit, when autotuned.
    tuning: Option<(Window, Arc<AtomicUsize>)>,
    /// `cycle_length`: more producers than slots would have nothing to run.
    max_workers: usize,
}

impl Counted {
    /// End of a tuning window: raise or lower the producer limit (see `autotune/mod.rs`).
    fn tune(&mut self) {
        let (Some((window, _)), Some(permits)) = (&mut self.tuning, &self.permits) else {
            return;
        };
        let Some(sample) = window.sample_if_due(&self.handle.stage) else {
            return;
        };
        let n = permits.limit();
        let new = match autotune::parallelism_step(&sample, n) {
            Step::Grow if n < self.max_workers && self.handle.try_reserve_worker() => n + 1,
            Step::Shrink => {
                self.handle.release_worker();
                n - 1
            }
            _ => return,
        };
        permits.set_limit(new);
        self.handle.stage.set_parallelism(new);
    }
}

impl Iterator for Counted {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        let item = self.inner.next()?;
        let stage = &self.handle.stage;
        if let Ok(element) = &item {
            stage.measure(element);
        }
        stage.add_element();
        self.tune();
        Some(item)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let (Some((_, last_tuned)), Some(permits)) = (&self.tuning, &self.permits) {
            last_tuned.store(permits.limit(), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::dataset::testutil::{collect, collect_results, range, scalar, values};

    /// `from_tensors(x).repeat(times)`.
    fn repeated(x: i64, times: usize) -> Dataset {
        Dataset::from_elements(vec![scalar(x); times])
    }

    const MODES: [(Parallelism, bool); 4] = [
        (Parallelism::Sequential, true),
        (Parallelism::Fixed(1), true),
        (Parallelism::Fixed(2), true),
        (Parallelism::Autotune, true),
    ];

    #[test]
    fn tf_docs_example_cycle_2_block_4() {
        // tf.data docs (Dataset.interleave): range(1, 6), from_tensors(x).repeat(6),
        // cycle_length=2, block_length=4.
        let expected = vec![
            1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5,
            5,
        ];
        for (p, det) in MODES {
            let ds = range(6)
                .skip(1)
                .interleave(|e| Ok(repeated(values(&e)[0], 6)), 2, 4, p, det);
            assert_eq!(ds.cardinality(), Cardinality::Unknown);
            assert_eq!(collect(&ds), expected, "{p:?}");
            assert_eq!(collect(&ds), expected, "{p:?}, second epoch");
        }
    }

    #[test]
    fn three_inputs_repeated_three_times_cycle_2_block_1() {
        // [1, 2, 3], x -> x repeated 3 times, cycle_length 2, block_length 1.
        for (p, det) in MODES {
            let ds = range(4)
                .skip(1)
                .interleave(|e| Ok(repeated(values(&e)[0], 3)), 2, 1, p, det);
            assert_eq!(collect(&ds), vec![1, 2, 1, 2, 1, 2, 3, 3, 3], "{p:?}");
        }
    }

    #[test]
    fn cycle_length_one_is_flat_map() {
        for (p, det) in MODES {
            let ds = range(4).interleave(|e| Ok(range(values(&e)[0])), 1, 2, p, det);
            assert_eq!(collect(&ds), vec![0, 0, 1, 0, 1, 2], "{p:?}");
        }
    }

    #[test]
    fn ragged_inner_lengths_and_empty_inner_datasets() {
        // Inner dataset of x: x copies of x (0 gives an empty dataset).
        // cycle 3, block 2 over [3, 0, 1, 4, 2]:
        // slot0 opens 3: 3 3 | slot1 opens 0, which ends | slot2 opens 1: 1, ends | slot0: 3,
        // ends | slot1 opens 4: 4 4 | slot2 opens 2: 2 2 | slot0 empty, input done |
        // slot1: 4 4 | slot2 ends | slot0 | slot1 ends.
        let expected = vec![3, 3, 1, 3, 4, 4, 2, 2, 4, 4];
        let input = Dataset::from_elements([3, 0, 1, 4, 2].map(scalar).to_vec());
        for (p, det) in MODES {
            let ds = input.clone().interleave(
                |e| Ok(repeated(values(&e)[0], values(&e)[0] as usize)),
                3,
                2,
                p,
                det,
            );
            assert_eq!(collect(&ds), expected, "{p:?}");
        }
    }

    /// Results with errors rendered as text, for comparing modes.
    fn rendered(ds: &Dataset) -> Vec<String> {
        ds.iter()
            .map(|r| match r {
                Ok(e) => values(&e)[0].to_string(),
                Err(err) => format!("error: {err}"),
            })
            .collect()
    }

    /// Input 0..12 with an input error at 5, `f` failing at 7, an inner error inside 2's dataset,
    /// variable-latency inner datasets of different lengths.
    fn erroneous(p: Parallelism, cycle: usize, block: usize) -> Dataset {
        range(12)
            .map(
                |e| {
                    if values(&e)[0] == 5 {
                        Err(DataError::Map("input five".into()))
                    } else {
                        Ok(e)
                    }
                },
                Parallelism::Sequential,
            )
            .interleave(
                |e| {
                    let x = values(&e)[0];
                    if x == 7 {
                        return Err(DataError::InvalidArgument("f seven".into()));
                    }
                    let len = (x * 7 % 5) as usize;
                    Ok(Dataset::from_elements(
                        (0..len).map(|i| scalar(x * 100 + i as i64)).collect(),
                    )
                    .map(
                        move |e| {
                            let v = values(&e)[0];
                            let micros = (v as u64).wrapping_mul(2_654_435_761) % 200;
                            std::thread::sleep(Duration::from_micros(micros));
                            if v == 201 {
                                Err(DataError::Map("inner 201".into()))
                            } else {
                                Ok(e)
                            }
                        },
                        Parallelism::Sequential,
                    ))
                },
                cycle,
                block,
                p,
                true,
            )
    }

    #[test]
    fn parallel_deterministic_matches_sequential_with_errors() {
        for (cycle, block) in [(1, 1), (2, 1), (3, 2), (4, 3), (16, 1)] {
            let expected = rendered(&erroneous(Parallelism::Sequential, cycle, block));
            assert!(expected.iter().any(|s| s.contains("input five")));
            assert!(expected.iter().any(|s| s.contains("f seven")));
            assert!(expected.iter().any(|s| s.contains("inner 201")));
            for p in [
                Parallelism::Fixed(1),
                Parallelism::Fixed(3),
                Parallelism::Autotune,
            ] {
                assert_eq!(
                    rendered(&erroneous(p, cycle, block)),
                    expected,
                    "cycle {cycle}, block {block}, {p:?}"
                );
            }
        }
        // Spot-check the sequential order itself for cycle 2, block 1: inner lengths are
        // x*7%5 -> 0:0 1:2 2:4 3:1 4:3 6:2 8:1 9:3 10:0 11:2. Slot 0 opens 0 (empty, closes),
        // slot 1 opens 1, slot 0 opens 2; the error at 201 does not advance the cycle.
        let seq = rendered(&erroneous(Parallelism::Sequential, 2, 1));
        assert_eq!(
            &seq[..7],
            [
                "100",
                "200",
                "101",
                "error: map function failed: inner 201",
                "202",
                "203",
                "300"
            ]
        );
    }

    #[test]
    fn non_deterministic_yields_the_same_multiset() {
        let ds = range(20).interleave(
            |e| {
                let x = values(&e)[0];
                Ok(repeated(x, (x % 4) as usize).map(
                    move |e| {
                        std::thread::sleep(Duration::from_micros((x as u64 * 37) % 300));
                        Ok(e)
                    },
                    Parallelism::Sequential,
                ))
            },
            4,
            2,
            Parallelism::Fixed(4),
            false,
        );
        let mut got = collect(&ds);
        got.sort();
        let mut expected: Vec<i64> = (0..20).flat_map(|x| vec![x; (x % 4) as usize]).collect();
        expected.sort();
        assert_eq!(got, expected);
        // Errors still arrive.
        let failing = range(3).interleave(
            |e| {
                if values(&e)[0] == 1 {
                    Err(DataError::Map("no".into()))
                } else {
                    Ok(repeated(7, 2))
                }
            },
            2,
            1,
            Parallelism::Fixed(2),
            false,
        );
        let results = collect_results(&failing);
        assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1);
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 4);
    }

    #[test]
    fn at_most_num_parallel_calls_producers_run() {
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (r, pk) = (Arc::clone(&running), Arc::clone(&peak));
        let ds = range(8).interleave(
            move |e| {
                let (r, pk) = (Arc::clone(&r), Arc::clone(&pk));
                Ok(repeated(values(&e)[0], 5).map(
                    move |e| {
                        let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                        pk.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_micros(300));
                        r.fetch_sub(1, Ordering::SeqCst);
                        Ok(e)
                    },
                    Parallelism::Sequential,
                ))
            },
            6,
            1,
            Parallelism::Fixed(2),
            true,
        );
        assert_eq!(collect(&ds).len(), 40);
        let peak = peak.load(Ordering::SeqCst);
        assert!((1..=2).contains(&peak), "peak concurrency {peak}");
    }

    #[test]
    fn invalid_arguments() {
        let f = |_: Element| Ok(range(1));
        for ds in [
            range(3).interleave(f, 0, 1, Parallelism::Sequential, true),
            range(3).interleave(f, 1, 0, Parallelism::Sequential, true),
            range(3).interleave(f, 1, 1, Parallelism::Fixed(0), true),
        ] {
            let results = collect_results(&ds);
            assert_eq!(results.len(), 1);
            assert!(matches!(&results[0], Err(DataError::InvalidArgument(_))));
        }
    }

    #[test]
    fn panics_become_errors() {
        for (p, det) in [
            (Parallelism::Sequential, true),
            (Parallelism::Fixed(2), true),
            (Parallelism::Fixed(2), false),
        ] {
            let ds = range(2).interleave(
                |e| {
                    if values(&e)[0] == 0 {
                        panic!("f exploded");
                    }
                    Ok(repeated(1, 1))
                },
                2,
                1,
                p,
                det,
            );
            let results = collect_results(&ds);
            assert_eq!(results.len(), 2, "{p:?}");
            assert!(
                results
                    .iter()
                    .any(|r| matches!(r, Err(DataError::Map(m)) if m.contains("f exploded")))
            );
        }
    }

    #[test]
    fn dropping_early_does_not_hang() {
        for det in [true, false] {
            let ds = range(100).interleave(
                |e| Ok(repeated(values(&e)[0], 1).repeat(None)),
                4,
                2,
                Parallelism::Fixed(2),
                det,
            );
            let mut it = ds.iter();
            for _ in 0..10 {
                assert!(it.next().unwrap().is_ok());
            }
            drop(it);
        }
        // Infinite inner datasets in sequential mode: the first slot never ends.
        let ds = range(3).interleave(
            |e| Ok(repeated(values(&e)[0], 1).repeat(None)),
            2,
            1,
            Parallelism::Sequential,
            true,
        );
        let first: Vec<i64> = ds.iter().take(5).map(|r| values(&r.unwrap())[0]).collect();
        assert_eq!(first, vec![0, 1, 0, 1, 0]);
    }
}
