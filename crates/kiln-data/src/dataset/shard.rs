//! [`Dataset::shard`]: keep every `num_shards`-th element, for one of several workers.

use std::sync::Arc;

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node};

impl Dataset {
    /// `tf.data.Dataset.shard(num_shards, index)`: keeps element `i` (0-based) when
    /// `i % num_shards == index`, so `num_shards` workers with indices `0..num_shards` together
    /// see every element exactly once (`range(10).shard(3, 1)` is `[1, 4, 7]`). Shard early —
    /// before `shuffle`, ideally on file names — so each worker reads only its part.
    ///
    /// Input errors are yielded by every shard, in place, and do not count as elements (as in
    /// tf.data, where a failed read does not advance the shard position). Cardinality:
    /// `n / num_shards`, plus one when `index < n % num_shards`; `Infinite` and `Unknown` stay
    /// so.
    ///
    /// `num_shards == 0` or `index >= num_shards` makes iteration yield a single
    /// [`crate::DataError::InvalidArgument`].
    pub fn shard(self, num_shards: u64, index: u64) -> Dataset {
        if num_shards == 0 {
            return Dataset::invalid("shard: num_shards must be at least 1".into());
        }
        if index >= num_shards {
            return Dataset::invalid(format!(
                "shard: index {index} must be less than num_shards {num_shards} \
                 (shard indices run from 0 to {})",
                num_shards - 1
            ));
        }
        Dataset::from_node(ShardNode {
            input: self.node,
            num_shards,
            index,
        })
    }
}

struct ShardNode {
    input: Arc<dyn Node>,
    num_shards: u64,
    index: u64,
}

impl Node for ShardNode {
    fn iter(&self) -> BoxIter {
        let mut input = self.input.iter();
        let (num_shards, index) = (self.num_shards, self.index);
        // Position of the next input element.
        let mut position = 0u64;
        Box::new(std::iter::from_fn(move || {
            loop {
                match input.next()? {
                    Ok(element) => {
                        let keep = position % num_shards == index;
                        position += 1;
                        if keep {
                            return Some(Ok(element));
                        }
                    }
                    Err(err) => return Some(Err(err)),
                }
            }
        }))
    }

    fn cardinality(&self) -> Cardinality {
        match self.input.cardinality() {
            Cardinality::Finite(n) => Cardinality::Finite(
                n / self.num_shards + u64::from(self.index < n % self.num_shards),
            ),
            other => other,
        }
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("shard")
            .u64(self.num_shards)
            .u64(self.index)
            .input(self.input.fingerprint())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Parallelism;
    use crate::dataset::testutil::{collect, collect_results, range, values};
    use crate::error::DataError;

    #[test]
    fn keeps_every_nth_element() {
        // tf.data docs: range(10).shard(num_shards=3, index=1) == [1, 4, 7].
        let ds = range(10).shard(3, 1);
        assert_eq!(ds.cardinality(), Cardinality::Finite(3));
        assert_eq!(collect(&ds), vec![1, 4, 7]);
        assert_eq!(collect(&range(10).shard(3, 0)), vec![0, 3, 6, 9]);
        assert_eq!(range(10).shard(3, 0).cardinality(), Cardinality::Finite(4));
        assert_eq!(collect(&range(10).shard(3, 2)), vec![2, 5, 8]);
        assert_eq!(collect(&range(4).shard(1, 0)), vec![0, 1, 2, 3]);
        assert_eq!(range(2).shard(5, 4).cardinality(), Cardinality::Finite(0));
        assert_eq!(collect(&range(2).shard(5, 4)), Vec::<i64>::new());
    }

    #[test]
    fn shards_partition_the_input_and_cardinality_matches() {
        for n in 0..12 {
            for num in 1..5 {
                let mut all = Vec::new();
                for index in 0..num {
                    let ds = range(n).shard(num, index);
                    let got = collect(&ds);
                    assert_eq!(ds.cardinality(), Cardinality::Finite(got.len() as u64));
                    all.extend(got);
                }
                all.sort();
                assert_eq!(all, (0..n).collect::<Vec<_>>(), "n {n}, num_shards {num}");
            }
        }
        assert_eq!(
            range(3).repeat(None).shard(2, 1).cardinality(),
            Cardinality::Infinite
        );
    }

    #[test]
    fn invalid_arguments() {
        for ds in [
            range(5).shard(0, 0),
            range(5).shard(3, 3),
            range(5).shard(3, 7),
        ] {
            let results = collect_results(&ds);
            assert_eq!(results.len(), 1);
            assert!(matches!(&results[0], Err(DataError::InvalidArgument(_))));
            assert_eq!(ds.cardinality(), Cardinality::Unknown);
        }
        let err = collect_results(&range(5).shard(3, 3))
            .remove(0)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("index 3 must be less than num_shards 3")
        );
    }

    #[test]
    fn errors_pass_through_without_taking_a_position() {
        let ds = range(6)
            .map(
                |e| {
                    if values(&e)[0] == 2 {
                        Err(DataError::Map("two".into()))
                    } else {
                        Ok(e)
                    }
                },
                Parallelism::Sequential,
            )
            .filter(|_| Ok(true))
            .shard(2, 0);
        // Elements 0, 1, 3, 4, 5 (the error at input 2 takes no position): keep 0, 3, 5.
        let results = collect_results(&ds);
        assert_eq!(results.len(), 4);
        assert_eq!(results[0].as_ref().unwrap(), &vec![0]);
        assert!(matches!(&results[1], Err(DataError::Map(m)) if m == "two"));
        assert_eq!(results[2].as_ref().unwrap(), &vec![3]);
        assert_eq!(results[3].as_ref().unwrap(), &vec![5]);
    }
}
