//! [`Dataset::map`]: apply a function to every element, optionally on worker threads, keeping
//! the input order.
//!
//! The parallel version follows tf.data's deterministic `ParallelMapDataset`: the consuming
//! thread pulls input elements, numbers them and hands them to `N` workers through a shared
//! queue; results come back in any order and wait in a reorder buffer until every earlier
//! element has been emitted. Elements travel in *jobs* of `k` consecutive elements, `k`
//! chosen from the measured cost of the function so that a job holds about 200 µs of work
//! (at most 64 elements, and no more than the RAM budget allows; one until the first job has
//! been timed): handing a job to a thread and back costs a few microseconds, which would
//! dominate a cheap function on small elements if each element were a job of its own
//! (tf.data amortizes the same cost by fusing `map` and `batch`). At most `2 * N` jobs
//! (`2 * N * k` elements) are in flight (queued, running or waiting to be emitted), which
//! bounds memory.
//!
//! With [`Parallelism::Autotune`] `N` changes while the iteration runs (see
//! `autotune/mod.rs` for the rule): a new worker is spawned to grow; to shrink, the target
//! count drops and the first worker to notice it (before taking its next job) exits. Order is
//! unaffected: it is kept by sequence numbers, not by which worker runs what.

use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::autotune::{self, StageHandle, Step, Window};
use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node, Parallelism, panic_message};
use crate::element::Element;
use crate::error::{DataError, Result};

type MapFn = Arc<dyn Fn(Element) -> Result<Element> + Send + Sync>;

/// Consecutive input elements with their sequence numbers, handed to one worker.
type Job = Vec<(u64, Element)>;

/// A finished [`Job`]: each element's result, and the time the function took for all of them.
struct Done {
    results: Vec<(u64, Result<Element>)>,
    busy: Duration,
}

impl Dataset {
    /// `tf.data.Dataset.map(f, num_parallel_calls, deterministic=True)`: replaces every element
    /// `e` by `f(e)`.
    ///
    /// * [`Parallelism::Sequential`] calls `f` inline on the consuming thread.
    /// * [`Parallelism::Fixed`]`(n)` runs `f` on `n` worker threads.
    /// * [`Parallelism::Autotune`] starts with one worker (or the count the previous iteration
    ///   of this dataset ended with) and adds or removes workers as the consumer's waiting and
    ///   the workers' busy time dictate, within the iteration's CPU and RAM budgets
    ///   ([`Dataset::with_autotune`]; [`crate::dataset::autotune`]).
    ///
    /// The output order is always the input order. Workers take jobs of `k` consecutive
    /// elements, `k` adapted to the function's measured cost (about 200 µs of work per job,
    /// at most 64 elements; see the module docs); at most `2 * n` jobs are in flight for `n`
    /// workers.
    ///
    /// An `Err` returned by `f` is yielded unchanged at that element's position; a panic inside
    /// `f` becomes [`DataError::Map`]. Input errors pass through in order without calling `f`.
    /// `Fixed(0)` makes iteration yield a single [`DataError::InvalidArgument`].
    pub fn map<F>(self, f: F, num_parallel_calls: Parallelism) -> Dataset
    where
        F: Fn(Element) -> Result<Element> + Send + Sync + 'static,
    {
        self.map_with(f, num_parallel_calls, true)
    }

    /// `tf.data.Dataset.map(f, num_parallel_calls, deterministic)`: [`Dataset::map`] with
    /// tf.data's `deterministic` argument.
    ///
    /// `deterministic = true` is [`Dataset::map`]: the output order is the input order.
    /// `deterministic = false` lets a parallel map (`Fixed(n)` or `Autotune`) emit elements
    /// out of order for speed, as tf.data documents ("elements may be produced out of
    /// order"): each element is emitted as soon as it and no earlier *finished* element is
    /// waiting, so a slow element does not delay the ones after it. Every input element still
    /// comes out exactly once (the same multiset, errors included); cardinality is unchanged.
    /// With [`Parallelism::Sequential`] the flag has no effect (order is the input's).
    ///
    /// The [`fingerprint`](Dataset::fingerprint) of a parallel non-deterministic map differs
    /// from the deterministic one's (as for [`Dataset::interleave`]): a file cache written in
    /// one order is not taken for the other.
    pub fn map_with<F>(self, f: F, num_parallel_calls: Parallelism, deterministic: bool) -> Dataset
    where
        F: Fn(Element) -> Result<Element> + Send + Sync + 'static,
    {
        if num_parallel_calls == Parallelism::Fixed(0) {
            return Dataset::invalid(
                "map: num_parallel_calls must be at least 1 (or Sequential / AUTOTUNE)".into(),
            );
        }
        let max = crate::system::max_parallel_calls();
        if let Parallelism::Fixed(n) = num_parallel_calls
            && n > max
        {
            return Dataset::invalid(format!(
                "map: num_parallel_calls = {n} is more than the {max} worker threads kiln-data \
                 starts on this machine (8 per core, at least 64); use AUTOTUNE or at most {max}"
            ));
        }
        Dataset::from_node(MapNode {
            input: self.node,
            f: Arc::new(f),
            parallelism: num_parallel_calls,
            deterministic,
            last_tuned: Arc::new(AtomicUsize::new(0)),
        })
    }
}

struct MapNode {
    input: Arc<dyn Node>,
    f: MapFn,
    parallelism: Parallelism,
    /// tf.data's `deterministic`: keep the input order (see [`Dataset::map_with`]).
    deterministic: bool,
    /// Worker count the last autotuned iteration ended with (0: none yet); the next one
    /// starts there.
    last_tuned: Arc<AtomicUsize>,
}

impl Node for MapNode {
    fn iter(&self) -> BoxIter {
        let input = self.input.iter();
        let f = Arc::clone(&self.f);
        let pipeline = autotune::current();
        let autotuned = self.parallelism == Parallelism::Autotune && pipeline.autotune_enabled();
        let handle = pipeline.register("map", autotune::node_key(self), autotuned);
        if autotuned {
            let start = self
                .last_tuned
                .load(Ordering::Relaxed)
                .clamp(1, handle.pipeline().cpu_budget());
            handle.force_reserve_worker();
            let mut workers = 1;
            while workers < start && handle.try_reserve_worker() {
                workers += 1;
            }
            let tuning = Tuning {
                window: Window::new(&handle.stage),
                last_tuned: Arc::clone(&self.last_tuned),
            };
            return Box::new(ParallelMapIter::new(
                input,
                f,
                workers,
                handle,
                Some(tuning),
                self.deterministic,
            ));
        }
        match self.parallelism.workers() {
            0 => Box::new(SequentialMapIter { input, f, handle }),
            workers => Box::new(ParallelMapIter::new(
                input,
                f,
                workers,
                handle,
                None,
                self.deterministic,
            )),
        }
    }

    fn cardinality(&self) -> Cardinality {
        self.input.cardinality()
    }

    /// The function's code cannot be hashed: a map is identified by its position (see
    /// `fingerprint.rs`). Parallelism does not change the output, so it is left out; a
    /// parallel non-deterministic map may change the order, so it adds a marker (left out
    /// otherwise, so deterministic maps keep the fingerprints they always had).
    fn fingerprint(&self) -> u64 {
        let fp = Fingerprint::new("map");
        let fp = if !self.deterministic && self.parallelism != Parallelism::Sequential {
            fp.str("nondeterministic")
        } else {
            fp
        };
        fp.input(self.input.fingerprint()).finish()
    }
}

/// Calls `f`, turning a panic into [`DataError::Map`].
fn call(f: &MapFn, element: Element) -> Result<Element> {
    panic::catch_unwind(AssertUnwindSafe(|| f(element))).unwrap_or_else(|payload| {
        Err(DataError::Map(format!(
            "map function panicked: {}",
            panic_message(payload.as_ref())
        )))
    })
}

/// `f` on the consuming thread.
struct SequentialMapIter {
    input: BoxIter,
    f: MapFn,
    handle: StageHandle,
}

impl Iterator for SequentialMapIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        let item = self.input.next()?;
        let stage = &self.handle.stage;
        let result = item.and_then(|element| {
            let start = Instant::now();
            let result = call(&self.f, element);
            let spent = start.elapsed();
            stage.add_busy(spent);
            stage.add_waited(spent); // the consumer did the work itself
            result
        });
        if let Ok(element) = &result {
            stage.measure(element);
        }
        stage.add_element();
        Some(result)
    }
}

/// The worker pool's size: `live` threads running, `target` wanted.
struct WorkerCount {
    live: usize,
    target: usize,
}

/// What the consumer and the workers share.
struct Shared {
    jobs: Mutex<Receiver<Job>>,
    stop: AtomicBool,
    count: Mutex<WorkerCount>,
    f: MapFn,
    handle: StageHandle,
}

impl Shared {
    /// A worker calls this before each job: true (and the worker leaves) when there are more
    /// workers than wanted.
    fn retire(&self) -> bool {
        let mut count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        if count.live > count.target {
            count.live -= 1;
            true
        } else {
            false
        }
    }
}

/// Autotuning state of a parallel map.
struct Tuning {
    window: Window,
    last_tuned: Arc<AtomicUsize>,
}

struct ParallelMapIter {
    input: BoxIter,
    input_done: bool,
    /// `None` once dropping has begun.
    jobs: Option<Sender<Job>>,
    results: Receiver<Done>,
    /// Handed (cloned) to each new worker. The pool never shrinks below one worker and
    /// workers catch panics, so outstanding jobs always finish.
    result_tx: Sender<Done>,
    /// Elements per job (see the module docs).
    per_job: usize,
    /// Smoothed time the function takes per element; `None` before the first job returns.
    cost: Option<Duration>,
    /// Finished results (and input errors) waiting for their turn, keyed by sequence number.
    ready: HashMap<u64, Result<Element>>,
    /// Sequence number of the next input element.
    next_in: u64,
    /// Elements emitted so far; when deterministic, also the sequence number of the next
    /// element to emit.
    next_out: u64,
    /// tf.data's `deterministic`: `false` emits the lowest finished sequence number.
    deterministic: bool,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    /// `Some` when autotuned.
    tuning: Option<Tuning>,
}

impl ParallelMapIter {
    fn new(
        input: BoxIter,
        f: MapFn,
        workers: usize,
        handle: StageHandle,
        tuning: Option<Tuning>,
        deterministic: bool,
    ) -> ParallelMapIter {
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let (result_tx, result_rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            jobs: Mutex::new(job_rx),
            stop: AtomicBool::new(false),
            count: Mutex::new(WorkerCount {
                live: 0,
                target: workers,
            }),
            f,
            handle,
        });
        let mut it = ParallelMapIter {
            input,
            input_done: false,
            jobs: Some(job_tx),
            results: result_rx,
            result_tx,
            per_job: 1,
            cost: None,
            ready: HashMap::new(),
            next_in: 0,
            next_out: 0,
            deterministic,
            shared,
            threads: Vec::new(),
            tuning,
        };
        // A failed spawn lowers the target to the live count, which ends the loop.
        while it.live() < it.target() {
            it.spawn_worker();
        }
        it.publish();
        it
    }

    /// The worker counts (a poisoned lock still holds valid counts).
    fn workers(&self) -> std::sync::MutexGuard<'_, WorkerCount> {
        self.shared.count.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn live(&self) -> usize {
        self.workers().live
    }

    fn target(&self) -> usize {
        self.workers().target
    }

    /// Starts one more worker thread if fewer are live than wanted. A failure to spawn lowers
    /// the target instead (with no worker at all, `next` reports it).
    fn spawn_worker(&mut self) {
        let mut count = self.shared.count.lock().unwrap_or_else(|p| p.into_inner());
        if count.live >= count.target {
            return;
        }
        self.threads.retain(|t| !t.is_finished()); // retired workers
        let shared = Arc::clone(&self.shared);
        let results = self.result_tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("kiln-data-map-{}", count.live))
            .spawn(move || worker(&shared, &results));
        match spawned {
            Ok(handle) => {
                self.threads.push(handle);
                count.live += 1;
            }
            Err(_) => count.target = count.live,
        }
    }

    /// Publishes the pool size and in-flight window to the statistics.
    fn publish(&self) {
        let target = self.target();
        let stage = &self.shared.handle.stage;
        stage.set_parallelism(target);
        stage.set_buffer(2 * target * self.per_job);
    }

    /// Takes in a finished job: its results wait for their turn; its timing updates the
    /// per-element cost and with it the job size.
    fn receive(&mut self, done: Done) {
        let n = done.results.len().max(1) as u32;
        let sample = done.busy / n;
        let cost = match self.cost {
            None => sample,
            Some(old) => old.mul_f64(0.75) + sample.mul_f64(0.25),
        };
        self.cost = Some(cost);
        let ram_limit = self.shared.handle.ram_capacity() / (2 * self.target().max(1));
        let per_job = autotune::elements_per_job(Some(cost), ram_limit);
        if per_job != self.per_job {
            self.per_job = per_job;
            self.publish();
        }
        self.ready.extend(done.results);
    }

    /// End of a tuning window: grow, shrink or keep the pool (see `autotune/mod.rs`).
    fn tune(&mut self) {
        let Some(tuning) = &mut self.tuning else {
            return;
        };
        let handle = &self.shared.handle;
        let Some(sample) = tuning.window.sample_if_due(&handle.stage) else {
            return;
        };
        let n = self.target();
        let ram_capacity = handle.ram_capacity();
        let k = self.per_job;
        let step = match autotune::parallelism_step(&sample, n) {
            Step::Grow if ram_capacity / k >= 2 * (n + 1) && handle.try_reserve_worker() => {
                Step::Grow
            }
            Step::Grow | Step::Keep if n > 1 && 2 * n > ram_capacity / k => Step::Shrink,
            Step::Shrink => Step::Shrink,
            _ => Step::Keep,
        };
        match step {
            Step::Grow => {
                self.workers().target = n + 1;
                self.spawn_worker();
                if self.target() == n {
                    self.shared.handle.release_worker(); // the spawn failed
                }
            }
            Step::Shrink => {
                self.workers().target = n - 1;
                self.shared.handle.release_worker();
            }
            Step::Keep => return,
        }
        self.publish();
    }

    /// Pulls input elements and queues them, a job at a time, while the in-flight window has
    /// room for a whole job. Every pulled element is sent before returning (the last job of
    /// the input may be short), so results for everything in flight always come back.
    fn fill(&mut self) {
        let window = (2 * self.target() * self.per_job) as u64;
        while !self.input_done && self.next_in - self.next_out + self.per_job as u64 <= window {
            let mut job = Vec::with_capacity(self.per_job);
            while job.len() < self.per_job {
                match self.input.next() {
                    None => {
                        self.input_done = true;
                        break;
                    }
                    Some(Ok(element)) => job.push((self.next_in, element)),
                    Some(Err(err)) => {
                        self.ready.insert(self.next_in, Err(err));
                    }
                }
                self.next_in += 1;
            }
            if job.is_empty() {
                continue;
            }
            let seqs: Vec<u64> = job.iter().map(|(seq, _)| *seq).collect();
            let sent = self
                .jobs
                .as_ref()
                .is_some_and(|jobs| jobs.send(job).is_ok());
            if !sent {
                // Cannot happen while workers are alive (they catch panics); report it
                // rather than wait forever.
                for seq in seqs {
                    self.ready.insert(
                        seq,
                        Err(DataError::Map("map worker threads stopped".into())),
                    );
                }
            }
        }
    }

    fn emit(&mut self, result: Result<Element>) -> Option<Result<Element>> {
        self.next_out += 1;
        let stage = &self.shared.handle.stage;
        if let Ok(element) = &result {
            stage.measure(element);
        }
        stage.add_element();
        self.tune();
        Some(result)
    }
}

fn worker(shared: &Shared, results: &Sender<Done>) {
    while !shared.retire() {
        let job = shared.jobs.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok(job) = job else { break };
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let start = Instant::now();
        let done: Vec<(u64, Result<Element>)> = job
            .into_iter()
            .map(|(seq, element)| (seq, call(&shared.f, element)))
            .collect();
        let busy = start.elapsed();
        shared.handle.stage.add_busy(busy);
        if results
            .send(Done {
                results: done,
                busy,
            })
            .is_err()
        {
            break;
        }
    }
}

impl Iterator for ParallelMapIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        if self.target() == 0 && !self.input_done {
            // Not even one worker thread could be started.
            self.input_done = true;
            return Some(Err(DataError::Map(
                "map: cannot start a worker thread (the system refused to spawn one)".into(),
            )));
        }
        loop {
            self.fill();
            let turn = if self.deterministic {
                Some(self.next_out)
            } else {
                self.ready.keys().min().copied()
            };
            if let Some(result) = turn.and_then(|seq| self.ready.remove(&seq)) {
                return self.emit(result);
            }
            if self.next_out == self.next_in {
                return None; // input exhausted and everything emitted
            }
            let start = Instant::now();
            let received = self.results.recv();
            self.shared.handle.stage.add_waited(start.elapsed());
            match received {
                Ok(done) => self.receive(done),
                Err(_) => {
                    // Cannot happen (this iterator holds a sender); give up rather than spin.
                    self.next_out = self.next_in;
                    self.input_done = true;
                    return Some(Err(DataError::Map("map worker threads stopped".into())));
                }
            }
        }
    }
}

impl Drop for ParallelMapIter {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.jobs = None; // disconnects the queue: idle workers wake up and exit
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
        if let Some(tuning) = &self.tuning {
            tuning.last_tuned.store(self.target(), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::dataset::testutil::{collect, collect_results, range, scalar, values};

    fn add_one(e: Element) -> Result<Element> {
        Ok(scalar(values(&e)[0] + 1))
    }

    #[test]
    fn sequential_map_applies_f() {
        let ds = range(5).map(add_one, Parallelism::Sequential);
        assert_eq!(ds.cardinality(), Cardinality::Finite(5));
        assert_eq!(collect(&ds), vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn parallel_map_preserves_order_with_variable_latency() {
        let ds = range(1000).map(
            |e| {
                let v = values(&e)[0];
                // Pseudo-random 0..=150 µs, so later elements often finish first.
                let micros = (v as u64).wrapping_mul(2_654_435_761) % 151;
                std::thread::sleep(Duration::from_micros(micros));
                Ok(scalar(v * 10))
            },
            Parallelism::Fixed(4),
        );
        assert_eq!(ds.cardinality(), Cardinality::Finite(1000));
        let expected: Vec<i64> = (0..1000).map(|v| v * 10).collect();
        assert_eq!(collect(&ds), expected);
        // A second epoch works the same.
        assert_eq!(collect(&ds), expected);
    }

    #[test]
    fn autotune_map_matches_sequential() {
        let ds = range(200).map(add_one, crate::AUTOTUNE);
        assert_eq!(collect(&ds), (1..=200).collect::<Vec<_>>());
    }

    #[test]
    fn map_errors_propagate_in_position() {
        for p in [Parallelism::Sequential, Parallelism::Fixed(3)] {
            let ds = range(6).map(
                |e| {
                    let v = values(&e)[0];
                    if v == 3 {
                        Err(DataError::Map(format!("bad value {v}")))
                    } else {
                        Ok(e)
                    }
                },
                p,
            );
            let results = collect_results(&ds);
            assert_eq!(results.len(), 6);
            assert_eq!(results[2].as_ref().unwrap(), &vec![2]);
            match &results[3] {
                Err(DataError::Map(m)) => assert_eq!(m, "bad value 3"),
                other => panic!("expected the map error, got {other:?}"),
            }
            assert_eq!(results[4].as_ref().unwrap(), &vec![4]);
        }
    }

    #[test]
    fn panics_become_map_errors() {
        let ds = range(4).map(
            |e| {
                if values(&e)[0] == 1 {
                    panic!("boom");
                }
                Ok(e)
            },
            Parallelism::Fixed(2),
        );
        let results = collect_results(&ds);
        assert_eq!(results.len(), 4);
        assert!(
            matches!(&results[1], Err(DataError::Map(m)) if m.contains("boom")),
            "{:?}",
            results[1]
        );
        assert_eq!(results[3].as_ref().unwrap(), &vec![3]);
    }

    #[test]
    fn cheap_functions_run_in_jobs_of_many_elements_in_order() {
        // Input errors every 7th element land between the elements of a job; the output keeps
        // every item in its place.
        let ds = range(2000)
            .map(
                |e| {
                    let v = values(&e)[0];
                    if v % 7 == 3 {
                        Err(DataError::Map(format!("input error {v}")))
                    } else {
                        Ok(e)
                    }
                },
                Parallelism::Sequential,
            )
            .map(add_one, Parallelism::Fixed(2));
        let mut it = ds.iter();
        for (i, r) in it.by_ref().enumerate() {
            let i = i as i64;
            match r {
                Ok(e) => assert_eq!(values(&e), vec![i + 1]),
                Err(DataError::Map(m)) => {
                    assert_eq!(i % 7, 3);
                    assert_eq!(m, format!("input error {i}"));
                }
                Err(other) => panic!("{other:?}"),
            }
        }
        let stats = it.stats();
        let map = stats.stages.iter().find(|s| s.parallelism == 2).unwrap();
        assert_eq!(map.elements, 2000);
        // add_one takes well under 100 µs per element: jobs grew past one element, so the
        // in-flight window (2 workers x 2 jobs x elements per job) grew past 4.
        assert!(map.peak_buffer > 4, "{stats}");
    }

    #[test]
    fn fixed_zero_is_invalid() {
        let ds = range(3).map(add_one, Parallelism::Fixed(0));
        let results = collect_results(&ds);
        assert_eq!(results.len(), 1);
        assert!(matches!(results[0], Err(DataError::InvalidArgument(_))));
    }

    /// `map(deterministic=False)`: element 0 blocks until the consumer has received another
    /// element, which only a non-deterministic map can deliver (tf.data: "elements may be
    /// produced out of order"). A deterministic map would wait for element 0 first; the
    /// 10 s escape makes that a failed assertion rather than a hang. (It needs a second
    /// worker: an autotuned map starts with one.)
    #[test]
    fn non_deterministic_map_does_not_wait_for_a_slow_element() {
        use std::sync::atomic::AtomicBool;
        for p in [Parallelism::Fixed(2), Parallelism::Fixed(4)] {
            let released = Arc::new(AtomicBool::new(false));
            let flag = Arc::clone(&released);
            let ds = range(50).map_with(
                move |e| {
                    if values(&e)[0] == 0 {
                        let start = Instant::now();
                        while !flag.load(Ordering::SeqCst)
                            && start.elapsed() < Duration::from_secs(10)
                        {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                    add_one(e)
                },
                p,
                false,
            );
            let mut it = ds.iter();
            let first = values(&it.next().unwrap().unwrap())[0];
            released.store(true, Ordering::SeqCst);
            assert_ne!(first, 1, "{p:?}: the blocked element 0 (-> 1) came first");
            let mut all: Vec<i64> = std::iter::once(first)
                .chain(it.map(|r| values(&r.unwrap())[0]))
                .collect();
            all.sort_unstable();
            // The same multiset as the deterministic map: 1..=50, each once.
            assert_eq!(all, (1..=50).collect::<Vec<_>>(), "{p:?}");
        }
    }

    #[test]
    fn non_deterministic_map_keeps_every_element_and_error_and_the_cardinality() {
        for p in [Parallelism::Fixed(3), crate::AUTOTUNE] {
            let ds = range(300).map_with(
                |e| {
                    let v = values(&e)[0];
                    let micros = (v as u64).wrapping_mul(2_654_435_761) % 101;
                    std::thread::sleep(Duration::from_micros(micros));
                    if v % 50 == 7 {
                        Err(DataError::Map(format!("bad {v}")))
                    } else {
                        Ok(scalar(v * 10))
                    }
                },
                p,
                false,
            );
            assert_eq!(ds.cardinality(), Cardinality::Finite(300));
            let (mut ok, mut errors) = (Vec::new(), Vec::new());
            for r in ds.iter() {
                match r {
                    Ok(e) => ok.push(values(&e)[0]),
                    Err(DataError::Map(m)) => errors.push(m),
                    Err(other) => panic!("{other:?}"),
                }
            }
            ok.sort_unstable();
            errors.sort();
            let expected: Vec<i64> = (0..300).filter(|v| v % 50 != 7).map(|v| v * 10).collect();
            assert_eq!(ok, expected);
            let mut expected_errors: Vec<String> = (0..300)
                .filter(|v| v % 50 == 7)
                .map(|v| format!("bad {v}"))
                .collect();
            expected_errors.sort();
            assert_eq!(errors, expected_errors);
        }
    }

    #[test]
    fn deterministic_flag_is_ignored_when_sequential_and_marks_the_fingerprint_when_parallel() {
        let seq = range(20).map_with(add_one, Parallelism::Sequential, false);
        assert_eq!(collect(&seq), (1..=20).collect::<Vec<_>>());
        let det = range(20).map(add_one, Parallelism::Fixed(2)).fingerprint();
        assert_eq!(
            range(20)
                .map_with(add_one, Parallelism::Fixed(2), true)
                .fingerprint(),
            det
        );
        assert_eq!(seq.fingerprint(), det);
        assert_ne!(
            range(20)
                .map_with(add_one, Parallelism::Fixed(2), false)
                .fingerprint(),
            det
        );
    }

    #[test]
    fn dropping_a_parallel_map_early_does_not_hang() {
        let ds = range(1_000_000).map(add_one, Parallelism::Fixed(4));
        let mut it = ds.iter();
        assert_eq!(values(&it.next().unwrap().unwrap()), vec![1]);
        drop(it);
    }
}
