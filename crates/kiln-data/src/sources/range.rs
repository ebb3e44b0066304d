//! [`Dataset::range`]: `tf.data.Dataset.range`.

use crate::dataset::{BoxIter, Cardinality, Dataset, Node};
use crate::element::{Array, Buffer, Element};

/// Component name of [`Dataset::range`]'s elements.
pub const RANGE_COMPONENT: &str = "value";

impl Dataset {
    /// `tf.data.Dataset.range(start, stop, step)`: the `int64` scalars `start, start + step, …`
    /// up to but excluding `stop`, as Python's `range` — so `range(0, 5, 1)` is `0..=4`,
    /// `range(1, 5, 2)` is `[1, 3]`, `range(5, 1, -2)` is `[5, 3]`, and a range that points
    /// away from `stop` (`range(5, 1, 1)`) is empty. tf.data's one-argument form
    /// `range(stop)` is `range(0, stop, 1)`.
    ///
    /// Elements are `{"value": int64 []}` ([`RANGE_COMPONENT`]). Cardinality is exact:
    /// `max(0, ceil((stop - start) / step))`.
    ///
    /// `step == 0` makes iteration yield a single [`crate::DataError::InvalidArgument`], as
    /// tf.data raises `InvalidArgumentError` for it.
    pub fn range(start: i64, stop: i64, step: i64) -> Dataset {
        if step == 0 {
            return Dataset::invalid("range: step must be a non-zero integer".into());
        }
        Dataset::from_node(RangeNode { start, stop, step })
    }
}

struct RangeNode {
    start: i64,
    stop: i64,
    step: i64,
}

impl RangeNode {
    /// Number of elements; `i128` arithmetic, so extreme bounds cannot overflow.
    fn len(&self) -> u64 {
        let (start, stop, step) = (
            i128::from(self.start),
            i128::from(self.stop),
            i128::from(self.step),
        );
        let span = if step > 0 { stop - start } else { start - stop };
        if span <= 0 {
            return 0;
        }
        let step = step.abs();
        // At most 2^64 - 1 (i64::MIN..i64::MAX with step 1), which fits u64.
        ((span + step - 1) / step) as u64
    }
}

impl Node for RangeNode {
    fn iter(&self) -> BoxIter {
        let (start, step) = (i128::from(self.start), i128::from(self.step));
        Box::new((0..self.len()).map(move |i| {
            // In range by construction: every value lies between start and stop.
            let value = (start + i128::from(i) * step) as i64;
            Ok(Element::new().with(RANGE_COMPONENT, Array::scalar(Buffer::I64(vec![value]))?))
        }))
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Finite(self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::DataError;

    fn values(ds: &Dataset) -> Vec<i64> {
        ds.iter()
            .map(|e| e.unwrap().get(RANGE_COMPONENT).unwrap().data().to_i64())
            .collect::<Vec<_>>()
            .concat()
    }

    #[test]
    fn matches_the_tf_data_documentation_examples() {
        // From the tf.data.Dataset.range docstring.
        assert_eq!(values(&Dataset::range(0, 5, 1)), vec![0, 1, 2, 3, 4]);
        assert_eq!(values(&Dataset::range(2, 5, 1)), vec![2, 3, 4]);
        assert_eq!(values(&Dataset::range(1, 5, 2)), vec![1, 3]);
        assert_eq!(values(&Dataset::range(1, 5, -2)), Vec::<i64>::new());
        assert_eq!(values(&Dataset::range(5, 1, 1)), Vec::<i64>::new());
        assert_eq!(values(&Dataset::range(5, 1, -2)), vec![5, 3]);
    }

    #[test]
    fn cardinality_is_exact_and_elements_are_int64_scalars() {
        let cases = [
            (0, 5, 1, 5),
            (1, 5, 2, 2),
            (1, 6, 2, 3),
            (5, 1, -2, 2),
            (5, 0, -2, 3),
            (3, 3, 1, 0),
            (-3, 3, 3, 2),
        ];
        for (start, stop, step, n) in cases {
            let ds = Dataset::range(start, stop, step);
            assert_eq!(
                ds.cardinality(),
                Cardinality::Finite(n),
                "{start},{stop},{step}"
            );
            assert_eq!(values(&ds).len() as u64, n);
        }
        let e = Dataset::range(7, 8, 1).iter().next().unwrap().unwrap();
        let a = e.get("value").unwrap();
        assert_eq!(a.shape(), &[] as &[usize]);
        assert_eq!(a.data(), &Buffer::I64(vec![7]));
        // Re-iterable: each iteration starts again.
        let ds = Dataset::range(0, 3, 1);
        assert_eq!(values(&ds), values(&ds));
    }

    #[test]
    fn extreme_bounds_do_not_overflow() {
        let ds = Dataset::range(i64::MAX - 2, i64::MAX, 1);
        assert_eq!(values(&ds), vec![i64::MAX - 2, i64::MAX - 1]);
        let ds = Dataset::range(i64::MIN + 1, i64::MIN, -1);
        assert_eq!(values(&ds), vec![i64::MIN + 1]);
        let ds = Dataset::range(i64::MIN, i64::MAX, i64::MAX);
        assert_eq!(values(&ds), vec![i64::MIN, -1, i64::MAX - 1]);
        assert_eq!(
            Dataset::range(i64::MIN, i64::MAX, 1).cardinality(),
            Cardinality::Finite(u64::MAX)
        );
    }

    #[test]
    fn zero_step_is_invalid() {
        let results: Vec<_> = Dataset::range(0, 5, 0).iter().collect();
        assert_eq!(results.len(), 1);
        assert!(matches!(&results[0], Err(DataError::InvalidArgument(m)) if m.contains("step")));
    }
}
