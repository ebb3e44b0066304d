//! [`Dataset::prefetch`]: produce elements ahead of the consumer on a background thread.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;

use super::{BoxIter, Cardinality, Dataset, Node, panic_message};
use crate::element::Element;
use crate::error::{DataError, Result};

impl Dataset {
    /// `tf.data.Dataset.prefetch(buffer_size)`: a background thread iterates the input and
    /// keeps up to `buffer_size` elements ready in a bounded channel
    /// ([`std::sync::mpsc::sync_channel`]), so producing batch `k + 1` overlaps with training
    /// on batch `k`. Use `AUTOTUNE.prefetch_buffer()` for tf.data's `prefetch(AUTOTUNE)`
    /// ([`crate::Parallelism::DEFAULT_PREFETCH`] elements).
    ///
    /// Elements and errors arrive in input order. `buffer_size == 0` disables prefetching (the
    /// input is iterated inline). Dropping the iterator early stops the thread: it notices at
    /// its next send (at most one input element later) and is joined before `drop` returns.
    /// A panic while producing an element is yielded as [`DataError::Map`] and ends the
    /// iteration.
    pub fn prefetch(self, buffer_size: usize) -> Dataset {
        Dataset::from_node(PrefetchNode {
            input: self.node,
            buffer_size,
        })
    }
}

struct PrefetchNode {
    input: Arc<dyn Node>,
    buffer_size: usize,
}

impl Node for PrefetchNode {
    fn iter(&self) -> BoxIter {
        let input = self.input.iter();
        if self.buffer_size == 0 {
            return input;
        }
        let (tx, rx) = mpsc::sync_channel(self.buffer_size);
        let handle = std::thread::Builder::new()
            .name("kiln-data-prefetch".into())
            .spawn(move || {
                let mut input = input;
                loop {
                    let item = match panic::catch_unwind(AssertUnwindSafe(|| input.next())) {
                        Ok(Some(item)) => item,
                        Ok(None) => break,
                        Err(payload) => {
                            let _ = tx.send(Err(DataError::Map(format!(
                                "input pipeline panicked: {}",
                                panic_message(payload.as_ref())
                            ))));
                            break;
                        }
                    };
                    if tx.send(item).is_err() {
                        break; // the consumer dropped its iterator
                    }
                }
            })
            .expect("failed to spawn the kiln-data prefetch thread");
        Box::new(PrefetchIter {
            rx: Some(rx),
            handle: Some(handle),
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

struct PrefetchIter {
    rx: Option<Receiver<Result<Element>>>,
    handle: Option<JoinHandle<()>>,
}

impl Iterator for PrefetchIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        // `recv` fails once the producer has finished and the channel is drained.
        self.rx.as_ref()?.recv().ok()
    }
}

impl Drop for PrefetchIter {
    fn drop(&mut self) {
        // Dropping the receiver makes the producer's next `send` fail, so it exits.
        self.rx = None;
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
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
