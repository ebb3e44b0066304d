//! [`Dataset::filter`]: keep the elements a predicate accepts.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node, panic_message};
use crate::element::Element;
use crate::error::{DataError, Result};

type Predicate = Arc<dyn Fn(&Element) -> Result<bool> + Send + Sync>;

impl Dataset {
    /// `tf.data.Dataset.filter(predicate)`: the elements for which `predicate` returns
    /// `Ok(true)`, in order.
    ///
    /// Errors: input errors pass through in place without calling the predicate; an `Err`
    /// returned by the predicate is yielded in place of its element; a panic inside it becomes
    /// [`DataError::Map`]. Cardinality: [`Cardinality::Unknown`], as tf.data (even for an
    /// infinite input: the predicate may reject everything).
    pub fn filter<P>(self, predicate: P) -> Dataset
    where
        P: Fn(&Element) -> Result<bool> + Send + Sync + 'static,
    {
        Dataset::from_node(FilterNode {
            input: self.node,
            predicate: Arc::new(predicate),
        })
    }
}

struct FilterNode {
    input: Arc<dyn Node>,
    predicate: Predicate,
}

impl Node for FilterNode {
    fn iter(&self) -> BoxIter {
        let predicate = Arc::clone(&self.predicate);
        let mut input = self.input.iter();
        Box::new(std::iter::from_fn(move || {
            loop {
                let element = match input.next()? {
                    Ok(element) => element,
                    Err(err) => return Some(Err(err)),
                };
                match call(&predicate, &element) {
                    Ok(true) => return Some(Ok(element)),
                    Ok(false) => {}
                    Err(err) => return Some(Err(err)),
                }
            }
        }))
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Unknown
    }

    /// Identified by position: the predicate's code cannot be hashed.
    fn fingerprint(&self) -> u64 {
        Fingerprint::new("filter")
            .input(self.input.fingerprint())
            .finish()
    }
}

/// Calls the predicate, turning a panic into [`DataError::Map`].
fn call(predicate: &Predicate, element: &Element) -> Result<bool> {
    panic::catch_unwind(AssertUnwindSafe(|| predicate(element))).unwrap_or_else(|payload| {
        Err(DataError::Map(format!(
            "filter predicate panicked: {}",
            panic_message(payload.as_ref())
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Parallelism;
    use crate::dataset::testutil::{collect, collect_results, range, values};

    #[test]
    fn keeps_accepted_elements_in_order() {
        // tf.data docs: range(1, 6).filter(lambda x: x < 3) == [1, 2].
        let ds = range(6).skip(1).filter(|e| Ok(values(e)[0] < 3));
        assert_eq!(ds.cardinality(), Cardinality::Unknown);
        assert_eq!(collect(&ds), vec![1, 2]);
        let even = range(10).filter(|e| Ok(values(e)[0] % 2 == 0));
        assert_eq!(collect(&even), vec![0, 2, 4, 6, 8]);
        assert_eq!(collect(&even), vec![0, 2, 4, 6, 8], "second epoch");
        assert_eq!(
            range(3).repeat(None).filter(|_| Ok(true)).cardinality(),
            Cardinality::Unknown
        );
    }

    #[test]
    fn errors_pass_through_in_place() {
        let ds = range(6)
            .map(
                |e| {
                    if values(&e)[0] == 1 {
                        Err(DataError::Map("input one".into()))
                    } else {
                        Ok(e)
                    }
                },
                Parallelism::Sequential,
            )
            .filter(|e| {
                let v = values(e)[0];
                if v == 4 {
                    Err(DataError::InvalidArgument("predicate four".into()))
                } else {
                    Ok(v != 2)
                }
            });
        let results = collect_results(&ds);
        assert_eq!(results.len(), 5);
        assert_eq!(results[0].as_ref().unwrap(), &vec![0]);
        assert!(matches!(&results[1], Err(DataError::Map(m)) if m == "input one"));
        assert_eq!(results[2].as_ref().unwrap(), &vec![3]);
        assert!(matches!(&results[3], Err(DataError::InvalidArgument(m)) if m == "predicate four"));
        assert_eq!(results[4].as_ref().unwrap(), &vec![5]);
    }

    #[test]
    fn a_panicking_predicate_is_an_error() {
        let ds = range(3).filter(|e| {
            if values(e)[0] == 1 {
                panic!("bad predicate");
            }
            Ok(true)
        });
        let results = collect_results(&ds);
        assert_eq!(results.len(), 3);
        assert!(matches!(&results[1], Err(DataError::Map(m)) if m.contains("bad predicate")));
        assert_eq!(results[2].as_ref().unwrap(), &vec![2]);
    }
}
