//! [`Dataset::concatenate`]: one dataset's elements after another's.

use std::sync::Arc;

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node};
use crate::element::{DType, Element};
use crate::error::{DataError, Result};

impl Dataset {
    /// `tf.data.Dataset.concatenate(other)`: this dataset's elements, then `other`'s.
    ///
    /// Both must have the same structure: the same component names with the same dtypes
    /// (shapes may differ, as tf.data relaxes them). kiln checks while iterating: every element
    /// of `other` is compared with the first element this iteration took from `self`, and a
    /// mismatch yields [`DataError::InvalidArgument`] in its place naming the component and
    /// both dtypes (or the missing / extra names). When `self` yields no element there is
    /// nothing to compare with and `other`'s elements pass unchecked. Errors from either input
    /// pass through in place.
    ///
    /// Cardinality: `Unknown` if either is unknown, else `Infinite` if either is infinite, else
    /// the sum (tf.data's rule).
    pub fn concatenate(self, other: Dataset) -> Dataset {
        Dataset::from_node(ConcatenateNode {
            first: self.node,
            second: other.node,
        })
    }
}

struct ConcatenateNode {
    first: Arc<dyn Node>,
    second: Arc<dyn Node>,
}

/// Component names and dtypes, sorted by name.
type Structure = Vec<(String, DType)>;

fn structure(element: &Element) -> Structure {
    let mut s: Structure = element
        .iter()
        .map(|(n, a)| (n.to_string(), a.dtype()))
        .collect();
    s.sort_by(|a, b| a.0.cmp(&b.0));
    s
}

/// Describes how `found` (an element of `other`) differs from `expected`.
fn check(expected: &Structure, element: Element, index: u64) -> Result<Element> {
    let found = structure(&element);
    if &found == expected {
        return Ok(element);
    }
    let lookup = |s: &Structure, name: &str| s.iter().find(|(n, _)| n == name).map(|(_, d)| *d);
    let mut problems = Vec::new();
    for (name, dtype) in expected {
        match lookup(&found, name) {
            None => problems.push(format!("component {name:?} is missing")),
            Some(d) if d != *dtype => problems.push(format!(
                "component {name:?} is {d} in the second dataset but {dtype} in the first"
            )),
            Some(_) => {}
        }
    }
    for (name, _) in &found {
        if lookup(expected, name).is_none() {
            problems.push(format!("component {name:?} is not in the first dataset"));
        }
    }
    Err(DataError::InvalidArgument(format!(
        "concatenate: element {index} of the second dataset does not match the first dataset's \
         structure: {}",
        problems.join("; ")
    )))
}

impl Node for ConcatenateNode {
    fn iter(&self) -> BoxIter {
        let mut first = Some(self.first.iter());
        let second_node = Arc::clone(&self.second);
        let mut second: Option<BoxIter> = None;
        let mut expected: Option<Structure> = None;
        let mut index = 0u64;
        Box::new(std::iter::from_fn(move || {
            if let Some(input) = &mut first {
                match input.next() {
                    Some(Ok(element)) => {
                        if expected.is_none() {
                            expected = Some(structure(&element));
                        }
                        return Some(Ok(element));
                    }
                    Some(Err(err)) => return Some(Err(err)),
                    None => {
                        first = None;
                        second = Some(second_node.iter());
                    }
                }
            }
            let item = second.as_mut()?.next()?;
            let i = index;
            index += 1;
            Some(item.and_then(|e| match &expected {
                Some(s) => check(s, e, i),
                None => Ok(e),
            }))
        }))
    }

    fn cardinality(&self) -> Cardinality {
        match (self.first.cardinality(), self.second.cardinality()) {
            (Cardinality::Unknown, _) | (_, Cardinality::Unknown) => Cardinality::Unknown,
            (Cardinality::Infinite, _) | (_, Cardinality::Infinite) => Cardinality::Infinite,
            (Cardinality::Finite(a), Cardinality::Finite(b)) => {
                Cardinality::Finite(a.saturating_add(b))
            }
        }
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("concatenate")
            .input(self.first.fingerprint())
            .input(self.second.fingerprint())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Parallelism;
    use crate::dataset::testutil::{collect, collect_results, range, values};
    use crate::element::{Array, Buffer};

    #[test]
    fn appends_the_second_dataset() {
        // tf.data docs: range(1, 4).concatenate(range(4, 8)) == [1, 2, 3, 4, 5, 6, 7].
        let ds = range(4).skip(1).concatenate(range(8).skip(4));
        assert_eq!(ds.cardinality(), Cardinality::Finite(7));
        assert_eq!(collect(&ds), vec![1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(collect(&ds), vec![1, 2, 3, 4, 5, 6, 7], "second epoch");
        assert_eq!(collect(&range(0).concatenate(range(2))), vec![0, 1]);
        assert_eq!(collect(&range(2).concatenate(range(0))), vec![0, 1]);
    }

    #[test]
    fn cardinality_follows_tf_data() {
        let inf = range(2).repeat(None);
        let unknown = range(2).filter(|_| Ok(true));
        assert_eq!(
            range(2).concatenate(inf.clone()).cardinality(),
            Cardinality::Infinite
        );
        assert_eq!(
            inf.clone().concatenate(unknown.clone()).cardinality(),
            Cardinality::Unknown
        );
        assert_eq!(
            unknown.concatenate(range(1)).cardinality(),
            Cardinality::Unknown
        );
        let first: Vec<i64> = inf
            .concatenate(range(3))
            .iter()
            .take(5)
            .map(|r| values(&r.unwrap())[0])
            .collect();
        assert_eq!(first, vec![0, 1, 0, 1, 0]);
    }

    #[test]
    fn structure_mismatch_names_the_difference() {
        let as_i32 = Dataset::from_elements(vec![
            Element::new().with("x", Array::scalar(Buffer::I32(vec![5])).unwrap()),
        ]);
        let results = collect_results(&range(2).concatenate(as_i32));
        assert_eq!(results.len(), 3);
        assert_eq!(results[1].as_ref().unwrap(), &vec![1]);
        let Err(DataError::InvalidArgument(message)) = &results[2] else {
            panic!("expected InvalidArgument, got {:?}", results[2]);
        };
        assert!(
            message
                .contains("component \"x\" is int32 in the second dataset but int64 in the first"),
            "{message}"
        );
        let renamed = Dataset::from_elements(vec![
            Element::new().with("y", Array::scalar(Buffer::I64(vec![5])).unwrap()),
        ]);
        let results = collect_results(&range(1).concatenate(renamed));
        let message = results[1].as_ref().unwrap_err().to_string();
        assert!(message.contains("component \"x\" is missing"), "{message}");
        assert!(
            message.contains("component \"y\" is not in the first dataset"),
            "{message}"
        );
        // Shapes may differ.
        let vector = Dataset::from_elements(vec![
            Element::new().with("x", Array::new(vec![2], Buffer::I64(vec![5, 6])).unwrap()),
        ]);
        assert_eq!(collect(&range(1).concatenate(vector)), vec![0, 5, 6]);
    }

    #[test]
    fn errors_pass_through() {
        let failing = range(2).map(
            |e| {
                if values(&e)[0] == 0 {
                    Err(DataError::Map("zero".into()))
                } else {
                    Ok(e)
                }
            },
            Parallelism::Sequential,
        );
        let results = collect_results(&failing.clone().concatenate(failing));
        assert_eq!(results.len(), 4);
        assert!(results[0].is_err() && results[2].is_err());
        assert_eq!(results[3].as_ref().unwrap(), &vec![1]);
    }
}
