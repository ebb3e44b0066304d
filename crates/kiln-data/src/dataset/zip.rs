//! [`Dataset::zip`]: combine several datasets element by element.

use std::sync::Arc;

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node};
use crate::element::Element;
use crate::error::{DataError, Result};

impl Dataset {
    /// `tf.data.Dataset.zip(datasets)`: element `i` holds the components of element `i` of
    /// every dataset, in order (the first dataset's components first). Stops with the
    /// shortest dataset.
    ///
    /// kiln's elements are flat maps of named components, so zipping merges the names; a name
    /// present in two datasets is an error (not silently overwritten or renamed): rename one
    /// side with [`Dataset::map`] first. It yields [`DataError::InvalidArgument`] naming the
    /// component and both datasets, in place of that element.
    ///
    /// Errors: each step reads the datasets in order and stops at the first that has ended
    /// (later ones are not advanced) or yields an error (that error is yielded; the elements
    /// already read for this step are dropped), as tf.data's `ZipDataset`. An empty list
    /// yields one `InvalidArgument`.
    ///
    /// Cardinality: the smallest of the inputs' (`Infinite` only when all are); `Unknown` when
    /// any input's is unknown (tf.data's rule, even next to a `Finite(0)`).
    pub fn zip(datasets: Vec<Dataset>) -> Dataset {
        if datasets.is_empty() {
            return Dataset::invalid("zip: needs at least one dataset".into());
        }
        Dataset::from_node(ZipNode {
            inputs: datasets.into_iter().map(|d| d.node).collect(),
        })
    }
}

struct ZipNode {
    inputs: Vec<Arc<dyn Node>>,
}

impl Node for ZipNode {
    fn iter(&self) -> BoxIter {
        let mut inputs: Vec<BoxIter> = self.inputs.iter().map(|n| n.iter()).collect();
        let mut done = false;
        Box::new(std::iter::from_fn(move || {
            if done {
                return None;
            }
            let mut parts = Vec::with_capacity(inputs.len());
            for input in &mut inputs {
                match input.next() {
                    Some(Ok(element)) => parts.push(element),
                    Some(Err(err)) => return Some(Err(err)),
                    None => {
                        done = true;
                        return None;
                    }
                }
            }
            Some(merge(parts))
        }))
    }

    fn cardinality(&self) -> Cardinality {
        let mut result = Cardinality::Infinite;
        for input in &self.inputs {
            match (input.cardinality(), result) {
                (Cardinality::Unknown, _) => return Cardinality::Unknown,
                (Cardinality::Infinite, _) => {}
                (Cardinality::Finite(n), Cardinality::Finite(m)) => {
                    result = Cardinality::Finite(n.min(m))
                }
                (Cardinality::Finite(n), _) => result = Cardinality::Finite(n),
            }
        }
        result
    }

    fn fingerprint(&self) -> u64 {
        self.inputs
            .iter()
            .fold(
                Fingerprint::new("zip").u64(self.inputs.len() as u64),
                |fp, input| fp.input(input.fingerprint()),
            )
            .finish()
    }
}

/// One element from the parts' components, refusing duplicate names.
fn merge(parts: Vec<Element>) -> Result<Element> {
    let mut out = Element::new();
    let mut owner: Vec<(String, usize)> = Vec::new();
    for (k, part) in parts.into_iter().enumerate() {
        for (name, array) in part.iter() {
            if let Some((_, first)) = owner.iter().find(|(n, _)| n == name) {
                return Err(DataError::InvalidArgument(format!(
                    "zip: component {name:?} appears in dataset {first} and dataset {k}; rename \
                     one of them with map before zipping"
                )));
            }
            owner.push((name.to_string(), k));
            out.insert(name, array.clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Parallelism;
    use crate::dataset::testutil::{collect_results, range, values};
    use crate::element::{Array, Buffer};

    fn renamed(ds: Dataset, name: &'static str) -> Dataset {
        ds.map(
            move |e| {
                let x = e.get("x").unwrap().clone();
                Ok(Element::new().with(name, x))
            },
            Parallelism::Sequential,
        )
    }

    fn pairs(ds: &Dataset) -> Vec<(i64, i64)> {
        ds.iter()
            .map(|r| {
                let e = r.unwrap();
                (
                    e.get("a").unwrap().data().to_i64()[0],
                    e.get("b").unwrap().data().to_i64()[0],
                )
            })
            .collect()
    }

    #[test]
    fn zips_elementwise_and_stops_at_the_shortest() {
        // tf.data docs: zip(range(1, 4), range(4, 7)) == [(1, 4), (2, 5), (3, 6)].
        let a = renamed(range(4).skip(1), "a");
        let b = renamed(range(7).skip(4), "b");
        let ds = Dataset::zip(vec![a.clone(), b]);
        assert_eq!(ds.cardinality(), Cardinality::Finite(3));
        assert_eq!(pairs(&ds), vec![(1, 4), (2, 5), (3, 6)]);
        // Stops at the shortest: range(1, 4) with range(4, 9) still gives 3 elements.
        let long = renamed(range(9).skip(4), "b");
        let ds = Dataset::zip(vec![a, long]);
        assert_eq!(ds.cardinality(), Cardinality::Finite(3));
        assert_eq!(pairs(&ds), vec![(1, 4), (2, 5), (3, 6)]);
        let first = ds.iter().next().unwrap().unwrap();
        assert_eq!(first.names().collect::<Vec<_>>(), vec!["a", "b"]);
    }

    #[test]
    fn cardinality_follows_tf_data() {
        let inf = renamed(range(2).repeat(None), "a");
        let five = renamed(range(5), "b");
        assert_eq!(
            Dataset::zip(vec![inf.clone(), five.clone()]).cardinality(),
            Cardinality::Finite(5)
        );
        assert_eq!(
            Dataset::zip(vec![inf.clone(), renamed(range(3), "c").repeat(None)]).cardinality(),
            Cardinality::Infinite
        );
        let unknown = renamed(range(5).filter(|_| Ok(true)), "c");
        assert_eq!(
            Dataset::zip(vec![renamed(range(0), "z"), unknown]).cardinality(),
            Cardinality::Unknown
        );
        // An infinite input zipped with a finite one ends.
        assert_eq!(Dataset::zip(vec![inf, five]).iter().count(), 5);
    }

    #[test]
    fn duplicate_names_are_an_error() {
        let ds = Dataset::zip(vec![range(2), range(2)]);
        let results = collect_results(&ds);
        assert_eq!(results.len(), 2);
        let Err(DataError::InvalidArgument(message)) = &results[0] else {
            panic!("expected InvalidArgument, got {:?}", results[0]);
        };
        assert!(message.contains("\"x\""), "{message}");
        assert!(message.contains("dataset 0 and dataset 1"), "{message}");
    }

    #[test]
    fn errors_and_empty_list() {
        let failing = range(3).map(
            |e| {
                if values(&e)[0] == 1 {
                    Err(DataError::Map("one".into()))
                } else {
                    Ok(e)
                }
            },
            Parallelism::Sequential,
        );
        let ds = Dataset::zip(vec![renamed(range(3), "a"), failing]);
        let results: Vec<_> = ds.iter().collect();
        assert_eq!(results.len(), 3);
        assert!(results[0].is_ok());
        assert!(matches!(&results[1], Err(DataError::Map(m)) if m == "one"));
        let third = results[2].as_ref().unwrap();
        assert_eq!(third.get("a").unwrap().data(), &Buffer::I64(vec![2]));
        assert_eq!(third.get("x").unwrap().data(), &Buffer::I64(vec![2]));
        let empty = collect_results(&Dataset::zip(vec![]));
        assert!(matches!(&empty[0], Err(DataError::InvalidArgument(_))));
        // One dataset: zip is the identity.
        let one = Dataset::zip(vec![range(2)]);
        let got: Vec<Array> = one
            .iter()
            .map(|r| r.unwrap().get("x").unwrap().clone())
            .collect();
        assert_eq!(got.len(), 2);
    }
}
