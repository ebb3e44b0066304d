//! [`Dataset::batch`]: stack consecutive elements.

use std::sync::Arc;

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node};
use crate::element::Element;
use crate::error::Result;

impl Dataset {
    /// `tf.data.Dataset.batch(batch_size, drop_remainder)`: stacks each run of `batch_size`
    /// consecutive elements with [`Element::stack`], so a component of shape `[d…]` becomes
    /// `[batch_size, d…]`. The last batch holds the remaining `n % batch_size` elements, or is
    /// dropped when `drop_remainder` is true. Cardinality: `ceil(n / batch_size)`, or
    /// `floor(n / batch_size)` with `drop_remainder`.
    ///
    /// Errors: an input error is yielded in place of the batch being assembled (whose elements
    /// are discarded); elements that cannot be stacked (different shapes, dtypes or component
    /// names) yield [`crate::DataError::Shape`]. `batch_size == 0` makes iteration yield a
    /// single [`crate::DataError::InvalidArgument`].
    pub fn batch(self, batch_size: usize, drop_remainder: bool) -> Dataset {
        if batch_size == 0 {
            return Dataset::invalid("batch: batch_size must be at least 1".into());
        }
        Dataset::from_node(BatchNode {
            input: self.node,
            batch_size,
            drop_remainder,
        })
    }
}

struct BatchNode {
    input: Arc<dyn Node>,
    batch_size: usize,
    drop_remainder: bool,
}

impl Node for BatchNode {
    fn iter(&self) -> BoxIter {
        Box::new(BatchIter {
            input: self.input.iter(),
            done: false,
            batch_size: self.batch_size,
            drop_remainder: self.drop_remainder,
        })
    }

    fn cardinality(&self) -> Cardinality {
        match self.input.cardinality() {
            Cardinality::Finite(n) => {
                let b = self.batch_size as u64;
                Cardinality::Finite(if self.drop_remainder {
                    n / b
                } else {
                    n.div_ceil(b)
                })
            }
            other => other,
        }
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("batch")
            .u64(self.batch_size as u64)
            .bool(self.drop_remainder)
            .input(self.input.fingerprint())
            .finish()
    }
}

struct BatchIter {
    input: BoxIter,
    done: bool,
    batch_size: usize,
    drop_remainder: bool,
}

impl Iterator for BatchIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        if self.done {
            return None;
        }
        let mut parts = Vec::with_capacity(self.batch_size.min(1 << 16));
        while parts.len() < self.batch_size {
            match self.input.next() {
                Some(Ok(element)) => parts.push(element),
                Some(Err(err)) => return Some(Err(err)),
                None => {
                    self.done = true;
                    break;
                }
            }
        }
        if parts.is_empty() || (self.drop_remainder && parts.len() < self.batch_size) {
            return None;
        }
        Some(Element::stack(&parts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::testutil::{collect, collect_results, range, values};
    use crate::element::{Array, Buffer};
    use crate::error::DataError;

    fn ten_rows() -> Dataset {
        let x = Array::new(
            vec![10, 2],
            Buffer::F32((0..20).map(|v| v as f32).collect()),
        )
        .unwrap();
        let y = Array::new(vec![10], Buffer::I64((0..10).collect())).unwrap();
        Dataset::from_tensor_slices(Element::new().with("x", x).with("y", y)).unwrap()
    }

    #[test]
    fn keeps_the_short_last_batch() {
        let ds = ten_rows().batch(3, false);
        assert_eq!(ds.cardinality(), Cardinality::Finite(4));
        let batches: Vec<Element> = ds.iter().map(|b| b.unwrap()).collect();
        let shapes: Vec<Vec<usize>> = batches
            .iter()
            .map(|b| b.get("x").unwrap().shape().to_vec())
            .collect();
        assert_eq!(shapes, vec![vec![3, 2], vec![3, 2], vec![3, 2], vec![1, 2]]);
        assert_eq!(batches[0].get("y").unwrap().shape(), &[3]);
        assert_eq!(batches[3].get("y").unwrap().shape(), &[1]);
        // Values stacked in order.
        assert_eq!(
            batches[1].get("x").unwrap().data(),
            &Buffer::F32(vec![6.0, 7.0, 8.0, 9.0, 10.0, 11.0])
        );
        assert_eq!(
            batches[1].get("y").unwrap().data(),
            &Buffer::I64(vec![3, 4, 5])
        );
        assert_eq!(
            batches[3].get("x").unwrap().data(),
            &Buffer::F32(vec![18.0, 19.0])
        );
        assert_eq!(batches[3].get("y").unwrap().data(), &Buffer::I64(vec![9]));
    }

    #[test]
    fn drop_remainder_drops_the_short_batch() {
        let ds = ten_rows().batch(3, true);
        assert_eq!(ds.cardinality(), Cardinality::Finite(3));
        let ys: Vec<Vec<i64>> = ds
            .iter()
            .map(|b| b.unwrap().get("y").unwrap().data().to_i64())
            .collect();
        assert_eq!(ys, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7, 8]]);
        // Exact multiples keep everything.
        assert_eq!(
            range(9).batch(3, true).cardinality(),
            Cardinality::Finite(3)
        );
        assert_eq!(collect(&range(9).batch(3, true)).len(), 9);
    }

    #[test]
    fn infinite_and_unknown_cardinality_pass_through() {
        assert_eq!(
            range(3).repeat(None).batch(2, false).cardinality(),
            Cardinality::Infinite
        );
        let unknown = range(3).batch(0, false).batch(2, false);
        assert_eq!(unknown.cardinality(), Cardinality::Unknown);
    }

    #[test]
    fn batch_size_zero_is_invalid() {
        let results = collect_results(&range(3).batch(0, false));
        assert_eq!(results.len(), 1);
        assert!(matches!(results[0], Err(DataError::InvalidArgument(_))));
    }

    #[test]
    fn mismatched_shapes_are_a_shape_error() {
        let a = Element::new().with("x", Array::new(vec![2], Buffer::I64(vec![1, 2])).unwrap());
        let b = Element::new().with(
            "x",
            Array::new(vec![3], Buffer::I64(vec![1, 2, 3])).unwrap(),
        );
        let results: Vec<_> = Dataset::from_elements(vec![a, b])
            .batch(2, false)
            .iter()
            .collect();
        assert_eq!(results.len(), 1);
        assert!(matches!(results[0], Err(DataError::Shape(_))));
    }

    #[test]
    fn batches_scalars_into_vectors() {
        let batches: Vec<Vec<i64>> = range(5)
            .batch(2, false)
            .iter()
            .map(|b| values(&b.unwrap()))
            .collect();
        assert_eq!(batches, vec![vec![0, 1], vec![2, 3], vec![4]]);
    }
}
