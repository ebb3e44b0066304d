//! [`Dataset::repeat`]: iterate the input several times (or forever).

use std::sync::Arc;

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node};
use crate::element::Element;
use crate::error::Result;

impl Dataset {
    /// `tf.data.Dataset.repeat(count)`: the input's elements `count` times over, or forever
    /// with `None`. Each repetition starts a new iteration of the input, so an upstream
    /// `shuffle(.., reshuffle_each_iteration = true)` draws a new order per repetition.
    ///
    /// As in tf.data, repeating forever stops if a repetition yields no element at all (an
    /// empty input would otherwise loop forever). Cardinality: `Finite(0)` when `count` is 0 or
    /// the input is empty; `Infinite` for `None`; otherwise `count × n` (input `Infinite` /
    /// `Unknown` stays so).
    pub fn repeat(self, count: Option<u64>) -> Dataset {
        Dataset::from_node(RepeatNode {
            input: self.node,
            count,
        })
    }
}

struct RepeatNode {
    input: Arc<dyn Node>,
    count: Option<u64>,
}

impl Node for RepeatNode {
    fn iter(&self) -> BoxIter {
        Box::new(RepeatIter {
            input: Arc::clone(&self.input),
            current: None,
            started: 0,
            count: self.count,
            yielded_this_pass: false,
        })
    }

    fn cardinality(&self) -> Cardinality {
        let n = self.input.cardinality();
        match self.count {
            None if n == Cardinality::Finite(0) => n,
            None => Cardinality::Infinite,
            Some(0) => Cardinality::Finite(0),
            Some(c) => match n {
                Cardinality::Finite(n) => Cardinality::Finite(n.saturating_mul(c)),
                other => other,
            },
        }
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("repeat")
            .bool(self.count.is_some())
            .u64(self.count.unwrap_or(0))
            .input(self.input.fingerprint())
            .finish()
    }
}

struct RepeatIter {
    input: Arc<dyn Node>,
    current: Option<BoxIter>,
    /// Repetitions started.
    started: u64,
    count: Option<u64>,
    yielded_this_pass: bool,
}

impl Iterator for RepeatIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        loop {
            if let Some(current) = &mut self.current {
                if let Some(item) = current.next() {
                    self.yielded_this_pass = true;
                    return Some(item);
                }
                self.current = None;
                if !self.yielded_this_pass {
                    // An empty pass: every further pass would be empty too.
                    self.count = Some(self.started);
                }
            }
            if self.count.is_some_and(|c| self.started >= c) {
                return None;
            }
            self.started += 1;
            self.yielded_this_pass = false;
            self.current = Some(self.input.iter());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::testutil::{collect, range};

    #[test]
    fn repeats_count_times() {
        let ds = range(3).repeat(Some(3));
        assert_eq!(ds.cardinality(), Cardinality::Finite(9));
        assert_eq!(collect(&ds), vec![0, 1, 2, 0, 1, 2, 0, 1, 2]);
        let zero = range(3).repeat(Some(0));
        assert_eq!(zero.cardinality(), Cardinality::Finite(0));
        assert_eq!(collect(&zero), Vec::<i64>::new());
    }

    #[test]
    fn repeat_forever_is_infinite() {
        let ds = range(3).repeat(None);
        assert_eq!(ds.cardinality(), Cardinality::Infinite);
        let first: Vec<i64> = ds
            .iter()
            .take(10)
            .map(|e| crate::dataset::testutil::values(&e.unwrap())[0])
            .collect();
        assert_eq!(first, vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn repeat_forever_of_empty_terminates() {
        let ds = range(0).repeat(None);
        assert_eq!(ds.cardinality(), Cardinality::Finite(0));
        assert_eq!(ds.iter().count(), 0);
    }
}
