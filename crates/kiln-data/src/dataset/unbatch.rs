//! [`Dataset::unbatch`]: split each element along its first dimension.

use std::sync::Arc;

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node};
use crate::element::Element;
use crate::error::{DataError, Result};

impl Dataset {
    /// `tf.data.Dataset.unbatch()`: each input element whose components have shape
    /// `[B, d…]` becomes `B` elements with shapes `[d…]` (row `i` of every component, copied),
    /// the inverse of [`Dataset::batch`]. An element with `B == 0` yields nothing.
    ///
    /// Errors: input errors pass through in place. An element with no components, a scalar
    /// component (nothing to split) or components of different first dimensions yields one
    /// [`DataError::Shape`] naming every component's shape, in place of its rows.
    ///
    /// Cardinality: as tf.data without static batch sizes — `Finite(0)`, `Infinite` and
    /// `Unknown` stay so; any other finite count becomes `Unknown` (the batch sizes are not
    /// known before iterating).
    pub fn unbatch(self) -> Dataset {
        Dataset::from_node(UnbatchNode { input: self.node })
    }
}

struct UnbatchNode {
    input: Arc<dyn Node>,
}

impl Node for UnbatchNode {
    fn iter(&self) -> BoxIter {
        Box::new(UnbatchIter {
            input: self.input.iter(),
            current: None,
            next_row: 0,
            rows: 0,
        })
    }

    fn cardinality(&self) -> Cardinality {
        match self.input.cardinality() {
            Cardinality::Finite(0) => Cardinality::Finite(0),
            Cardinality::Finite(_) => Cardinality::Unknown,
            other => other,
        }
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("unbatch")
            .input(self.input.fingerprint())
            .finish()
    }
}

struct UnbatchIter {
    input: BoxIter,
    /// The batch being split.
    current: Option<Element>,
    next_row: usize,
    rows: usize,
}

/// The shared first dimension of `element`'s components.
fn batch_size(element: &Element) -> Result<usize> {
    let describe = || {
        element
            .iter()
            .map(|(name, a)| format!("{name:?}: {:?}", a.shape()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut size = None;
    for (_, array) in element.iter() {
        match (array.shape().first(), size) {
            (None, _) => {
                return Err(DataError::Shape(format!(
                    "unbatch: every component needs a first dimension to split, but one is a \
                     scalar (components: {})",
                    describe()
                )));
            }
            (Some(&n), None) => size = Some(n),
            (Some(&n), Some(s)) if n != s => {
                return Err(DataError::Shape(format!(
                    "unbatch: all components must have the same first dimension (components: \
                     {})",
                    describe()
                )));
            }
            _ => {}
        }
    }
    size.ok_or_else(|| DataError::Shape("unbatch: element has no components to split".into()))
}

impl Iterator for UnbatchIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        loop {
            if let Some(batch) = &self.current {
                if self.next_row < self.rows {
                    let i = self.next_row;
                    self.next_row += 1;
                    let mut row = Element::new();
                    for (name, array) in batch.iter() {
                        row.insert(name, array.row(i));
                    }
                    return Some(Ok(row));
                }
                self.current = None;
            }
            let batch = match self.input.next()? {
                Ok(batch) => batch,
                Err(err) => return Some(Err(err)),
            };
            match batch_size(&batch) {
                Ok(rows) => {
                    self.rows = rows;
                    self.next_row = 0;
                    self.current = Some(batch);
                }
                Err(err) => return Some(Err(err)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::testutil::{collect, collect_results, range, values};
    use crate::element::{Array, Buffer};

    #[test]
    fn inverts_batch() {
        let ds = range(7).batch(3, false).unbatch();
        assert_eq!(ds.cardinality(), Cardinality::Unknown);
        assert_eq!(collect(&ds), (0..7).collect::<Vec<_>>());
        assert_eq!(range(0).unbatch().cardinality(), Cardinality::Finite(0));
        assert_eq!(
            range(2)
                .batch(1, false)
                .repeat(None)
                .unbatch()
                .cardinality(),
            Cardinality::Infinite
        );
    }

    #[test]
    fn splits_every_component_along_axis_zero() {
        // tf.data docs: elements ([1, 2, 3], [4, 5]) style, here as one [2, 3] x and [2] y.
        let x = Array::new(vec![2, 3], Buffer::F32(vec![1., 2., 3., 4., 5., 6.])).unwrap();
        let y = Array::new(vec![2], Buffer::I64(vec![7, 8])).unwrap();
        let ds = Dataset::from_elements(vec![Element::new().with("x", x).with("y", y)]).unbatch();
        let rows: Vec<Element> = ds.iter().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].get("x").unwrap().shape(), &[3]);
        assert_eq!(
            rows[1].get("x").unwrap().data(),
            &Buffer::F32(vec![4., 5., 6.])
        );
        assert_eq!(rows[0].get("y").unwrap().shape(), &[] as &[usize]);
        assert_eq!(
            values(&Element::new().with("x", rows[1].get("y").unwrap().clone())),
            vec![8]
        );
        assert_eq!(rows[0].names().collect::<Vec<_>>(), vec!["x", "y"]);
    }

    #[test]
    fn mismatched_or_scalar_components_are_errors() {
        let a = Array::new(vec![2], Buffer::I64(vec![1, 2])).unwrap();
        let b = Array::new(vec![3], Buffer::I64(vec![1, 2, 3])).unwrap();
        let s = Array::scalar(Buffer::I64(vec![1])).unwrap();
        let ds = Dataset::from_elements(vec![
            Element::new().with("a", a.clone()).with("b", b),
            Element::new().with("x", a.clone()),
            Element::new().with("a", a).with("s", s),
            Element::new(),
        ])
        .unbatch();
        let results = collect_results(&ds);
        assert_eq!(results.len(), 5);
        let message = results[0].as_ref().unwrap_err().to_string();
        assert!(message.contains("\"a\": [2], \"b\": [3]"), "{message}");
        assert_eq!(results[1].as_ref().unwrap(), &vec![1]);
        assert_eq!(results[2].as_ref().unwrap(), &vec![2]);
        assert!(matches!(&results[3], Err(DataError::Shape(m)) if m.contains("scalar")));
        assert!(matches!(&results[4], Err(DataError::Shape(m)) if m.contains("no components")));
    }

    #[test]
    fn empty_batches_yield_nothing() {
        let empty = Array::new(vec![0, 2], Buffer::F32(vec![])).unwrap();
        let one = Array::new(vec![1, 2], Buffer::F32(vec![1., 2.])).unwrap();
        let ds = Dataset::from_elements(vec![
            Element::new().with("x", empty),
            Element::new().with("x", one),
        ])
        .unbatch();
        let rows: Vec<Element> = ds.iter().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].get("x").unwrap().data(), &Buffer::F32(vec![1., 2.]));
    }
}
