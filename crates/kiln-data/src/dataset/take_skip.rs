//! [`Dataset::take`] and [`Dataset::skip`].

use std::sync::Arc;

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node};

impl Dataset {
    /// `tf.data.Dataset.take(count)`: at most the first `count` elements. The input is never
    /// asked for more than `count` elements, so `take` ends infinite datasets. Cardinality:
    /// `min(n, count)`; `Finite(count)` for an infinite input; `Unknown` stays unknown (unless
    /// `count` is 0).
    pub fn take(self, count: u64) -> Dataset {
        Dataset::from_node(TakeNode {
            input: self.node,
            count,
        })
    }

    /// `tf.data.Dataset.skip(count)`: all but the first `count` elements (which are read and
    /// discarded; errors among them are still yielded). Cardinality: `n - count` (at least 0);
    /// `Infinite` and `Unknown` stay so.
    pub fn skip(self, count: u64) -> Dataset {
        Dataset::from_node(SkipNode {
            input: self.node,
            count,
        })
    }
}

struct TakeNode {
    input: Arc<dyn Node>,
    count: u64,
}

impl Node for TakeNode {
    fn iter(&self) -> BoxIter {
        if self.count == 0 {
            return Box::new(std::iter::empty());
        }
        // `usize::MAX` elements is more than any iteration can reach on 64-bit targets.
        let count = usize::try_from(self.count).unwrap_or(usize::MAX);
        Box::new(self.input.iter().take(count))
    }

    fn cardinality(&self) -> Cardinality {
        match self.input.cardinality() {
            _ if self.count == 0 => Cardinality::Finite(0),
            Cardinality::Finite(n) => Cardinality::Finite(n.min(self.count)),
            Cardinality::Infinite => Cardinality::Finite(self.count),
            Cardinality::Unknown => Cardinality::Unknown,
        }
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("take")
            .u64(self.count)
            .input(self.input.fingerprint())
            .finish()
    }
}

struct SkipNode {
    input: Arc<dyn Node>,
    count: u64,
}

impl Node for SkipNode {
    fn iter(&self) -> BoxIter {
        let mut input = self.input.iter();
        let mut remaining = self.count;
        Box::new(std::iter::from_fn(move || {
            while remaining > 0 {
                remaining -= 1;
                match input.next()? {
                    Ok(_) => {}
                    Err(err) => return Some(Err(err)),
                }
            }
            input.next()
        }))
    }

    fn cardinality(&self) -> Cardinality {
        match self.input.cardinality() {
            Cardinality::Finite(n) => Cardinality::Finite(n.saturating_sub(self.count)),
            other => other,
        }
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("skip")
            .u64(self.count)
            .input(self.input.fingerprint())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::testutil::{collect, collect_results, range};
    use crate::error::DataError;

    #[test]
    fn take_values_and_cardinality() {
        let ds = range(10).take(3);
        assert_eq!(ds.cardinality(), Cardinality::Finite(3));
        assert_eq!(collect(&ds), vec![0, 1, 2]);
        let more = range(4).take(10);
        assert_eq!(more.cardinality(), Cardinality::Finite(4));
        assert_eq!(collect(&more), vec![0, 1, 2, 3]);
        assert_eq!(range(4).take(0).cardinality(), Cardinality::Finite(0));
        assert_eq!(collect(&range(4).take(0)), Vec::<i64>::new());
    }

    #[test]
    fn take_ends_an_infinite_dataset() {
        let ds = range(3).repeat(None).take(7);
        assert_eq!(ds.cardinality(), Cardinality::Finite(7));
        assert_eq!(collect(&ds), vec![0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn skip_values_and_cardinality() {
        let ds = range(10).skip(7);
        assert_eq!(ds.cardinality(), Cardinality::Finite(3));
        assert_eq!(collect(&ds), vec![7, 8, 9]);
        let all = range(3).skip(5);
        assert_eq!(all.cardinality(), Cardinality::Finite(0));
        assert_eq!(collect(&all), Vec::<i64>::new());
        let inf = range(3).repeat(None).skip(4);
        assert_eq!(inf.cardinality(), Cardinality::Infinite);
        assert_eq!(
            collect(&inf.take(4)),
            vec![1, 2, 0, 1],
            "skip then take on an infinite dataset"
        );
    }

    #[test]
    fn skip_and_take_compose_like_a_split() {
        let ds = range(10);
        let train = collect(&ds.clone().take(8));
        let val = collect(&ds.skip(8));
        assert_eq!(train, (0..8).collect::<Vec<_>>());
        assert_eq!(val, vec![8, 9]);
    }

    #[test]
    fn skip_yields_errors_among_skipped_elements() {
        let ds = range(4)
            .map(
                |e| {
                    if crate::dataset::testutil::values(&e)[0] == 1 {
                        Err(DataError::Map("one".into()))
                    } else {
                        Ok(e)
                    }
                },
                crate::Parallelism::Sequential,
            )
            .skip(2);
        let results = collect_results(&ds);
        assert!(matches!(results[0], Err(DataError::Map(_))));
        assert_eq!(
            results[1..]
                .iter()
                .map(|r| r.as_ref().unwrap()[0])
                .collect::<Vec<_>>(),
            vec![2, 3]
        );
    }
}
