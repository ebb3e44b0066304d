//! [`Dataset::map`]: apply a function to every element, optionally on worker threads, keeping
//! the input order.
//!
//! The parallel version follows tf.data's deterministic `ParallelMapDataset`: the consuming
//! thread pulls input elements, numbers them and hands them to `N` workers through a shared
//! queue; results come back in any order and wait in a reorder buffer until every earlier
//! element has been emitted. At most `2 * N` elements are in flight (queued, running or
//! waiting to be emitted), which bounds memory.

use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node, Parallelism, panic_message};
use crate::element::Element;
use crate::error::{DataError, Result};

type MapFn = Arc<dyn Fn(Element) -> Result<Element> + Send + Sync>;

impl Dataset {
    /// `tf.data.Dataset.map(f, num_parallel_calls, deterministic=True)`: replaces every element
    /// `e` by `f(e)`.
    ///
    /// * [`Parallelism::Sequential`] calls `f` inline on the consuming thread.
    /// * [`Parallelism::Fixed`]`(n)` runs `f` on `n` worker threads;
    ///   [`Parallelism::Autotune`] on one per available core. The output order is always the
    ///   input order; at most `2 * n` elements are in flight.
    ///
    /// An `Err` returned by `f` is yielded unchanged at that element's position; a panic inside
    /// `f` becomes [`DataError::Map`]. Input errors pass through in order without calling `f`.
    /// `Fixed(0)` makes iteration yield a single [`DataError::InvalidArgument`].
    pub fn map<F>(self, f: F, num_parallel_calls: Parallelism) -> Dataset
    where
        F: Fn(Element) -> Result<Element> + Send + Sync + 'static,
    {
        if num_parallel_calls == Parallelism::Fixed(0) {
            return Dataset::invalid(
                "map: num_parallel_calls must be at least 1 (or Sequential / AUTOTUNE)".into(),
            );
        }
        Dataset::from_node(MapNode {
            input: self.node,
            f: Arc::new(f),
            workers: num_parallel_calls.workers(),
        })
    }
}

struct MapNode {
    input: Arc<dyn Node>,
    f: MapFn,
    /// 0 = inline.
    workers: usize,
}

impl Node for MapNode {
    fn iter(&self) -> BoxIter {
        let input = self.input.iter();
        let f = Arc::clone(&self.f);
        if self.workers == 0 {
            Box::new(input.map(move |r| r.and_then(|e| call(&f, e))))
        } else {
            Box::new(ParallelMapIter::new(input, f, self.workers))
        }
    }

    fn cardinality(&self) -> Cardinality {
        self.input.cardinality()
    }

    /// The function's code cannot be hashed: a map is identified by its position (see
    /// `fingerprint.rs`). Parallelism does not change the output, so it is left out.
    fn fingerprint(&self) -> u64 {
        Fingerprint::new("map")
            .input(self.input.fingerprint())
            .finish()
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

struct ParallelMapIter {
    input: BoxIter,
    input_done: bool,
    /// `None` once dropping has begun.
    jobs: Option<Sender<(u64, Element)>>,
    results: Receiver<(u64, Result<Element>)>,
    /// Finished results (and input errors) waiting for their turn, keyed by sequence number.
    ready: HashMap<u64, Result<Element>>,
    /// Sequence number of the next input element.
    next_in: u64,
    /// Sequence number of the next element to emit.
    next_out: u64,
    max_in_flight: u64,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl ParallelMapIter {
    fn new(input: BoxIter, f: MapFn, workers: usize) -> ParallelMapIter {
        let (job_tx, job_rx) = mpsc::channel::<(u64, Element)>();
        let (result_tx, result_rx) = mpsc::channel();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..workers)
            .map(|i| {
                let job_rx = Arc::clone(&job_rx);
                let result_tx = result_tx.clone();
                let stop = Arc::clone(&stop);
                let f = Arc::clone(&f);
                std::thread::Builder::new()
                    .name(format!("kiln-data-map-{i}"))
                    .spawn(move || worker(&job_rx, &result_tx, &stop, &f))
                    .expect("failed to spawn a kiln-data map worker thread")
            })
            .collect();
        ParallelMapIter {
            input,
            input_done: false,
            jobs: Some(job_tx),
            results: result_rx,
            ready: HashMap::new(),
            next_in: 0,
            next_out: 0,
            max_in_flight: 2 * workers as u64,
            stop,
            threads,
        }
    }

    /// Pulls input elements and queues them until the in-flight window is full.
    fn fill(&mut self) {
        while !self.input_done && self.next_in - self.next_out < self.max_in_flight {
            match self.input.next() {
                None => self.input_done = true,
                Some(Ok(element)) => {
                    let sent = self
                        .jobs
                        .as_ref()
                        .is_some_and(|jobs| jobs.send((self.next_in, element)).is_ok());
                    if !sent {
                        // Cannot happen while workers are alive (they catch panics); report it
                        // rather than wait forever.
                        self.ready.insert(
                            self.next_in,
                            Err(DataError::Map("map worker threads stopped".into())),
                        );
                    }
                    self.next_in += 1;
                }
                Some(Err(err)) => {
                    self.ready.insert(self.next_in, Err(err));
                    self.next_in += 1;
                }
            }
        }
    }
}

fn worker(
    jobs: &Mutex<Receiver<(u64, Element)>>,
    results: &Sender<(u64, Result<Element>)>,
    stop: &AtomicBool,
    f: &MapFn,
) {
    loop {
        let job = jobs.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok((seq, element)) = job else { break };
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if results.send((seq, call(f, element))).is_err() {
            break;
        }
    }
}

impl Iterator for ParallelMapIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        loop {
            self.fill();
            if let Some(result) = self.ready.remove(&self.next_out) {
                self.next_out += 1;
                return Some(result);
            }
            if self.next_out == self.next_in {
                return None; // input exhausted and everything emitted
            }
            match self.results.recv() {
                Ok((seq, result)) => {
                    self.ready.insert(seq, result);
                }
                Err(_) => {
                    // All workers gone with work outstanding: give up on this iteration.
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
        self.stop.store(true, Ordering::Relaxed);
        self.jobs = None; // disconnects the queue: idle workers wake up and exit
        for handle in self.threads.drain(..) {
            let _ = handle.join();
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
    fn fixed_zero_is_invalid() {
        let ds = range(3).map(add_one, Parallelism::Fixed(0));
        let results = collect_results(&ds);
        assert_eq!(results.len(), 1);
        assert!(matches!(results[0], Err(DataError::InvalidArgument(_))));
    }

    #[test]
    fn dropping_a_parallel_map_early_does_not_hang() {
        let ds = range(1_000_000).map(add_one, Parallelism::Fixed(4));
        let mut it = ds.iter();
        assert_eq!(values(&it.next().unwrap().unwrap()), vec![1]);
        drop(it);
    }
}
