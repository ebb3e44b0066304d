//! [`Dataset::prefetch`]: produce elements ahead of the consumer on a background thread.
//!
//! The producer thread iterates the input and pushes into a bounded queue (a `VecDeque` under
//! a mutex with two condition variables, so its capacity can change while it runs); the
//! consumer pops. With `prefetch(AUTOTUNE)` the capacity adapts (see `autotune/mod.rs`).

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::autotune::{self, Stage, StageHandle, Window};
use super::{BoxIter, Cardinality, Dataset, Node, Parallelism, panic_message};
use crate::element::Element;
use crate::error::{DataError, Result};

/// A prefetch buffer size: `prefetch(4)` or `prefetch(AUTOTUNE)`.
///
/// [`Dataset::prefetch`] takes `impl Into<BufferSize>`: a `usize` is [`BufferSize::Fixed`];
/// a [`Parallelism`] converts as [`Parallelism::prefetch_buffer`] reads it, except that
/// [`Parallelism::Autotune`] becomes [`BufferSize::Autotune`] (adaptive) rather than a fixed
/// [`Parallelism::DEFAULT_PREFETCH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferSize {
    /// Exactly this many elements (0 disables prefetching).
    Fixed(usize),
    /// tf.data's `prefetch(AUTOTUNE)`: starts at 1 element and grows while the consumer waits
    /// on a bursty producer, within the RAM budget ([`crate::dataset::autotune`]). With autotuning
    /// disabled ([`crate::AutotuneOptions::enabled`]), [`Parallelism::DEFAULT_PREFETCH`].
    Autotune,
}

impl From<usize> for BufferSize {
    fn from(n: usize) -> BufferSize {
        BufferSize::Fixed(n)
    }
}

impl From<Parallelism> for BufferSize {
    fn from(p: Parallelism) -> BufferSize {
        match p {
            Parallelism::Sequential => BufferSize::Fixed(0),
            Parallelism::Fixed(n) => BufferSize::Fixed(n),
            Parallelism::Autotune => BufferSize::Autotune,
        }
    }
}

impl Dataset {
    /// `tf.data.Dataset.prefetch(buffer_size)`: a background thread iterates the input and
    /// keeps up to `buffer_size` elements ready in a bounded queue, so producing batch `k + 1`
    /// overlaps with training on batch `k`.
    ///
    /// `buffer_size` is a `usize` or [`crate::AUTOTUNE`] (any `impl Into<`[`BufferSize`]`>`):
    /// `ds.prefetch(AUTOTUNE)` is tf.data's `prefetch(AUTOTUNE)`, a depth that adapts at run
    /// time; `ds.prefetch(AUTOTUNE.prefetch_buffer())` is a fixed
    /// [`crate::Parallelism::DEFAULT_PREFETCH`] (2) elements.
    ///
    /// Elements and errors arrive in input order. A size of 0 disables prefetching (the
    /// input is iterated inline). Dropping the iterator early stops the thread: it notices
    /// when its current input element is done and is joined before `drop` returns.
    /// A panic while producing an element is yielded as [`DataError::Map`] and ends the
    /// iteration.
    pub fn prefetch(self, buffer_size: impl Into<BufferSize>) -> Dataset {
        Dataset::from_node(PrefetchNode {
            input: self.node,
            size: buffer_size.into(),
            last_tuned: Arc::new(AtomicUsize::new(0)),
        })
    }
}

struct PrefetchNode {
    input: Arc<dyn Node>,
    size: BufferSize,
    /// Depth the last autotuned iteration ended with (0: none yet); the next starts there.
    last_tuned: Arc<AtomicUsize>,
}

impl Node for PrefetchNode {
    fn iter(&self) -> BoxIter {
        let input = self.input.iter();
        let pipeline = autotune::current();
        let (capacity, autotuned) = match self.size {
            BufferSize::Fixed(0) => return input,
            BufferSize::Fixed(n) => (n, false),
            BufferSize::Autotune if pipeline.autotune_enabled() => {
                (self.last_tuned.load(Ordering::Relaxed).max(1), true)
            }
            BufferSize::Autotune => (Parallelism::DEFAULT_PREFETCH, false),
        };
        let handle = pipeline.register("prefetch", autotune::node_key(self), autotuned);
        handle.stage.set_parallelism(1);
        handle.stage.set_buffer(capacity);
        let queue = Arc::new(Queue::new(capacity));
        let producer_queue = Arc::clone(&queue);
        let stage = Arc::clone(&handle.stage);
        let spawned = std::thread::Builder::new()
            .name("kiln-data-prefetch".into())
            .spawn(move || {
                let _entered = autotune::enter(&pipeline);
                produce(input, &producer_queue, &stage);
            });
        let thread = match spawned {
            Ok(thread) => thread,
            Err(e) => {
                return Box::new(std::iter::once(Err(DataError::Map(format!(
                    "prefetch: cannot start the background thread: {e}"
                )))));
            }
        };
        let window = Window::new(&handle.stage);
        Box::new(PrefetchIter {
            queue,
            thread: Some(thread),
            tuning: autotuned.then(|| (window, Arc::clone(&self.last_tuned))),
            stalled_before: false,
            handle,
        })
    }

    fn cardinality(&self) -> Cardinality {
        self.input.cardinality()
    }

    /// Prefetching does not change the elements: the input's fingerprint.
    fn fingerprint(&self) -> u64 {
        self.input.fingerprint()
    }
}

/// The producer thread's loop: input elements into the queue until the input ends, it panics
/// or the consumer goes away.
fn produce(mut input: BoxIter, queue: &Queue, stage: &Stage) {
    loop {
        let start = Instant::now();
        let step = panic::catch_unwind(AssertUnwindSafe(|| input.next()));
        stage.add_busy(start.elapsed());
        let item = match step {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(payload) => {
                queue.push(
                    Err(DataError::Map(format!(
                        "input pipeline panicked: {}",
                        panic_message(payload.as_ref())
                    ))),
                    stage,
                );
                break;
            }
        };
        if let Ok(element) = &item {
            stage.measure(element);
        }
        if !queue.push(item, stage) {
            return; // the consumer dropped its iterator
        }
    }
    queue.finish();
}

struct QueueState {
    items: VecDeque<Result<Element>>,
    capacity: usize,
    /// The producer has finished.
    done: bool,
    /// The consumer has gone.
    closed: bool,
}

/// A bounded FIFO whose capacity can change.
struct Queue {
    state: Mutex<QueueState>,
    not_empty: Condvar,
    not_full: Condvar,
}

impl Queue {
    fn new(capacity: usize) -> Queue {
        Queue {
            state: Mutex::new(QueueState {
                items: VecDeque::new(),
                capacity,
                done: false,
                closed: false,
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for room, then appends; false when the consumer has gone. Time spent waiting for
    /// room is the stage's *stalled* time.
    fn push(&self, item: Result<Element>, stage: &Stage) -> bool {
        let mut state = self.lock();
        if state.items.len() >= state.capacity && !state.closed {
            let start = Instant::now();
            while state.items.len() >= state.capacity && !state.closed {
                state = self.not_full.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            stage.add_stalled(start.elapsed());
        }
        if state.closed {
            return false;
        }
        state.items.push_back(item);
        self.not_empty.notify_one();
        true
    }

    fn finish(&self) {
        self.lock().done = true;
        self.not_empty.notify_one();
    }

    /// Waits for an item (`None` once the producer has finished and the queue is drained).
    /// Time spent waiting is the stage's *waited* time.
    fn pop(&self, stage: &Stage) -> Option<Result<Element>> {
        let mut state = self.lock();
        if state.items.is_empty() && !state.done {
            let start = Instant::now();
            while state.items.is_empty() && !state.done {
                state = self
                    .not_empty
                    .wait(state)
                    .unwrap_or_else(|p| p.into_inner());
            }
            stage.add_waited(start.elapsed());
        }
        let item = state.items.pop_front();
        self.not_full.notify_one();
        item
    }

    fn set_capacity(&self, capacity: usize) {
        self.lock().capacity = capacity;
        self.not_full.notify_one();
    }

    fn close(&self) {
        self.lock().closed = true;
        self.not_full.notify_one();
    }
}

struct PrefetchIter {
    queue: Arc<Queue>,
    thread: Option<JoinHandle<()>>,
    /// The tuning window and where to leave the final depth, when autotuned.
    tuning: Option<(Window, Arc<AtomicUsize>)>,
    /// Whether the producer stalled on a full buffer in the previous tuning window.
    stalled_before: bool,
    handle: StageHandle,
}

impl PrefetchIter {
    /// End of a tuning window: maybe change the depth (see `autotune/mod.rs`).
    fn tune(&mut self) {
        let Some((window, _)) = &mut self.tuning else {
            return;
        };
        let Some(sample) = window.sample_if_due(&self.handle.stage) else {
            return;
        };
        let stalled = sample.stalled > Duration::ZERO;
        let filled = stalled || std::mem::replace(&mut self.stalled_before, stalled);
        let capacity = self.handle.stage.buffer();
        let new = autotune::buffer_size(&sample, filled, capacity, self.handle.ram_capacity());
        if new != capacity {
            self.queue.set_capacity(new);
            self.handle.stage.set_buffer(new);
        }
    }
}

impl Iterator for PrefetchIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        let item = self.queue.pop(&self.handle.stage)?;
        self.handle.stage.add_element();
        self.tune();
        Some(item)
    }
}

impl Drop for PrefetchIter {
    fn drop(&mut self) {
        // The producer's next push fails, so it exits.
        self.queue.close();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if let Some((_, last_tuned)) = &self.tuning {
            last_tuned.store(self.handle.stage.buffer(), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::Parallelism;
    use crate::dataset::testutil::{collect, collect_results, range, scalar, values};

    #[test]
    fn same_sequence_as_without() {
        let base = range(100).shuffle(100, Some(3), false).batch(7, false);
        let expected = collect(&base);
        for size in [0, 1, 2, 16, 1000] {
            let ds = base.clone().prefetch(size);
            assert_eq!(ds.cardinality(), Cardinality::Finite(15));
            assert_eq!(collect(&ds), expected, "buffer {size}");
        }
    }

    #[test]
    fn errors_pass_through_in_order() {
        let ds = range(5)
            .map(
                |e| {
                    if values(&e)[0] % 2 == 1 {
                        Err(DataError::Map(format!("odd {}", values(&e)[0])))
                    } else {
                        Ok(e)
                    }
                },
                Parallelism::Sequential,
            )
            .prefetch(2);
        let results = collect_results(&ds);
        assert_eq!(results.len(), 5);
        assert_eq!(results[0].as_ref().unwrap(), &vec![0]);
        assert!(matches!(&results[1], Err(DataError::Map(m)) if m == "odd 1"));
        assert_eq!(results[2].as_ref().unwrap(), &vec![2]);
        assert!(matches!(&results[3], Err(DataError::Map(m)) if m == "odd 3"));
        assert_eq!(results[4].as_ref().unwrap(), &vec![4]);
    }

    #[test]
    fn dropping_early_stops_the_thread() {
        let ds = range(10)
            .repeat(None)
            .map(Ok, Parallelism::Fixed(2))
            .prefetch(4);
        let start = Instant::now();
        let mut it = ds.iter();
        assert_eq!(values(&it.next().unwrap().unwrap()), vec![0]);
        assert_eq!(values(&it.next().unwrap().unwrap()), vec![1]);
        drop(it); // joins the prefetch thread (and, through it, the map workers)
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn nested_prefetch_and_multiple_epochs() {
        let ds = range(50)
            .prefetch(3)
            .map(Ok, Parallelism::Fixed(2))
            .prefetch(2);
        let expected: Vec<i64> = (0..50).collect();
        assert_eq!(collect(&ds), expected);
        assert_eq!(collect(&ds), expected);
    }

    #[test]
    fn autotune_buffer_is_documented_default() {
        assert_eq!(
            crate::AUTOTUNE.prefetch_buffer(),
            Parallelism::DEFAULT_PREFETCH
        );
        assert_eq!(Parallelism::DEFAULT_PREFETCH, 2);
        let ds =
            Dataset::from_elements(vec![scalar(4)]).prefetch(crate::AUTOTUNE.prefetch_buffer());
        assert_eq!(collect(&ds), vec![4]);
    }
}
