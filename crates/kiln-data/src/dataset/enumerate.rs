//! [`Dataset::enumerate`]: number the elements.

use std::sync::Arc;

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node};
use crate::element::{Array, Buffer, Element};
use crate::error::DataError;

impl Dataset {
    /// Name of the component [`Dataset::enumerate`] adds: `"index"`.
    ///
    /// tf.data's `enumerate` yields `(index, element)` tuples; kiln's elements are flat maps of
    /// named components, so the index becomes a component, placed first like the tuple's.
    pub const ENUMERATE_INDEX: &'static str = "index";

    /// `tf.data.Dataset.enumerate(start)`: adds to each element an `int64` scalar component
    /// [`"index"`](Dataset::ENUMERATE_INDEX) counting from `start` (`range(3).enumerate(5)`
    /// gives indices 5, 6, 7), placed first.
    ///
    /// Errors: input errors pass through in place and use up an index, as tf.data (whose
    /// `enumerate` zips a counter with the dataset, advancing the counter before reading the
    /// input). An element that already has an `"index"` component yields
    /// [`DataError::InvalidArgument`] (rename it with [`Dataset::map`] first); so does an
    /// index past `i64::MAX`. Cardinality: the input's.
    pub fn enumerate(self, start: i64) -> Dataset {
        Dataset::from_node(EnumerateNode {
            input: self.node,
            start,
        })
    }
}

struct EnumerateNode {
    input: Arc<dyn Node>,
    start: i64,
}

impl Node for EnumerateNode {
    fn iter(&self) -> BoxIter {
        let mut input = self.input.iter();
        let mut next = Some(self.start);
        Box::new(std::iter::from_fn(move || {
            let item = input.next()?;
            let index = next;
            next = index.and_then(|i| i.checked_add(1));
            Some(item.and_then(|element| {
                let index = index.ok_or_else(|| {
                    DataError::InvalidArgument("enumerate: index overflowed int64".into())
                })?;
                if element.get(Dataset::ENUMERATE_INDEX).is_some() {
                    return Err(DataError::InvalidArgument(format!(
                        "enumerate: the element already has a component {:?}; rename it with \
                         map before enumerating",
                        Dataset::ENUMERATE_INDEX
                    )));
                }
                let mut out = Element::new().with(
                    Dataset::ENUMERATE_INDEX,
                    Array::scalar(Buffer::I64(vec![index]))?,
                );
                for (name, array) in element.iter() {
                    out.insert(name, array.clone());
                }
                Ok(out)
            }))
        }))
    }

    fn cardinality(&self) -> Cardinality {
        self.input.cardinality()
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("enumerate")
            .u64(self.start as u64)
            .input(self.input.fingerprint())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Parallelism;
    use crate::dataset::testutil::{collect_results, range, values};
    use crate::element::DType;

    fn indexed(ds: &Dataset) -> Vec<(i64, i64)> {
        ds.iter()
            .map(|r| {
                let e = r.unwrap();
                (e.get("index").unwrap().data().to_i64()[0], values(&e)[0])
            })
            .collect()
    }

    #[test]
    fn numbers_from_start() {
        // tf.data docs: from_tensor_slices([1, 2, 3]).enumerate(start=5) == [(5, 1), (6, 2), (7, 3)].
        let ds = range(4).skip(1).enumerate(5);
        assert_eq!(ds.cardinality(), Cardinality::Finite(3));
        assert_eq!(indexed(&ds), vec![(5, 1), (6, 2), (7, 3)]);
        assert_eq!(
            indexed(&ds),
            vec![(5, 1), (6, 2), (7, 3)],
            "restarts each epoch"
        );
        let first = ds.iter().next().unwrap().unwrap();
        assert_eq!(first.names().collect::<Vec<_>>(), vec!["index", "x"]);
        let index = first.get("index").unwrap();
        assert_eq!(
            (index.dtype(), index.shape()),
            (DType::I64, &[] as &[usize])
        );
        assert_eq!(indexed(&range(2).enumerate(-1)), vec![(-1, 0), (0, 1)]);
    }

    #[test]
    fn errors_use_an_index_and_collisions_are_refused() {
        let ds = range(3)
            .map(
                |e| {
                    if values(&e)[0] == 1 {
                        Err(DataError::Map("one".into()))
                    } else {
                        Ok(e)
                    }
                },
                Parallelism::Sequential,
            )
            .enumerate(0);
        let results: Vec<_> = ds.iter().collect();
        assert!(matches!(&results[1], Err(DataError::Map(_))));
        let last = results[2].as_ref().unwrap();
        assert_eq!(last.get("index").unwrap().data(), &Buffer::I64(vec![2]));
        let twice = range(1).enumerate(0).enumerate(0);
        assert!(
            matches!(&collect_results(&twice)[0], Err(DataError::InvalidArgument(m)) if m.contains("\"index\""))
        );
        let overflow: Vec<_> = range(2).enumerate(i64::MAX).iter().collect();
        assert!(overflow[0].is_ok());
        assert!(
            matches!(&overflow[1], Err(DataError::InvalidArgument(m)) if m.contains("overflow"))
        );
    }
}
