//! Source datasets: [`Dataset::from_tensor_slices`] and [`Dataset::from_elements`].

use std::sync::{Arc, OnceLock};

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node};
use crate::element::Element;
use crate::error::{DataError, Result};

impl Dataset {
    /// `tf.data.Dataset.from_tensor_slices`: element `i` holds row `i` (along axis 0) of every
    /// component, with that axis removed — e.g. `{"image": [60000, 28, 28], "label": [60000]}`
    /// gives 60000 elements `{"image": [28, 28], "label": []}`.
    ///
    /// The arrays are shared, not copied; rows are sliced lazily during iteration.
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] when `components` is empty, a component is a scalar
    /// (nothing to slice), or the components' first dimensions differ (the message lists every
    /// component with its size).
    pub fn from_tensor_slices(components: Element) -> Result<Dataset> {
        if components.is_empty() {
            return Err(DataError::InvalidArgument(
                "from_tensor_slices needs at least one component".into(),
            ));
        }
        let mut sizes = Vec::with_capacity(components.len());
        for (name, array) in components.iter() {
            match array.shape().first() {
                Some(&n) => sizes.push((name.to_string(), n)),
                None => {
                    return Err(DataError::InvalidArgument(format!(
                        "from_tensor_slices: component {name:?} is a scalar (shape []), \
                         it has no first dimension to slice"
                    )));
                }
            }
        }
        let len = sizes[0].1;
        if sizes.iter().any(|(_, n)| *n != len) {
            let listed: Vec<String> = sizes.iter().map(|(n, s)| format!("{n:?}: {s}")).collect();
            return Err(DataError::InvalidArgument(format!(
                "from_tensor_slices: all components must have the same size in dimension 0, \
                 got {}",
                listed.join(", ")
            )));
        }
        Ok(Dataset::from_node(SlicesNode {
            components: Arc::new(components),
            len,
            fingerprint: OnceLock::new(),
        }))
    }

    /// A dataset yielding clones of `elements`, in order (handy for tests and small inputs).
    pub fn from_elements(elements: Vec<Element>) -> Dataset {
        Dataset::from_node(ElementsNode {
            elements: Arc::new(elements),
            fingerprint: OnceLock::new(),
        })
    }
}

struct SlicesNode {
    components: Arc<Element>,
    len: usize,
    /// Content hash, computed on first use.
    fingerprint: OnceLock<u64>,
}

impl Node for SlicesNode {
    fn iter(&self) -> BoxIter {
        let components = Arc::clone(&self.components);
        Box::new((0..self.len).map(move |i| {
            let mut element = Element::new();
            for (name, array) in components.iter() {
                element.insert(name, array.row(i));
            }
            Ok(element)
        }))
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Finite(self.len as u64)
    }

    fn fingerprint(&self) -> u64 {
        *self.fingerprint.get_or_init(|| {
            Fingerprint::new("from_tensor_slices")
                .element(&self.components)
                .finish()
        })
    }
}

struct ElementsNode {
    elements: Arc<Vec<Element>>,
    /// Content hash, computed on first use.
    fingerprint: OnceLock<u64>,
}

impl Node for ElementsNode {
    fn iter(&self) -> BoxIter {
        let elements = Arc::clone(&self.elements);
        Box::new((0..elements.len()).map(move |i| Ok(elements[i].clone())))
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Finite(self.elements.len() as u64)
    }

    fn fingerprint(&self) -> u64 {
        *self.fingerprint.get_or_init(|| {
            self.elements
                .iter()
                .fold(
                    Fingerprint::new("from_elements").u64(self.elements.len() as u64),
                    Fingerprint::element,
                )
                .finish()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::testutil::collect;
    use crate::element::{Array, Buffer};

    #[test]
    fn element_i_is_row_i() {
        let image = Array::new(vec![3, 2, 2], Buffer::U8((0..12).collect())).unwrap();
        let label = Array::new(vec![3], Buffer::I64(vec![7, 8, 9])).unwrap();
        let ds = Dataset::from_tensor_slices(
            Element::new()
                .with("image", image.clone())
                .with("label", label.clone()),
        )
        .unwrap();
        assert_eq!(ds.cardinality(), Cardinality::Finite(3));
        let elements: Vec<Element> = ds.iter().map(|e| e.unwrap()).collect();
        assert_eq!(elements.len(), 3);
        for (i, e) in elements.iter().enumerate() {
            assert_eq!(e.names().collect::<Vec<_>>(), vec!["image", "label"]);
            assert_eq!(e.get("image").unwrap(), &image.row(i));
            assert_eq!(e.get("image").unwrap().shape(), &[2, 2]);
            let start = 4 * i as u8;
            assert_eq!(
                e.get("image").unwrap().data(),
                &Buffer::U8((start..start + 4).collect())
            );
            assert_eq!(e.get("label").unwrap().shape(), &[] as &[usize]);
            assert_eq!(
                e.get("label").unwrap().data(),
                &Buffer::I64(vec![7 + i as i64])
            );
        }
        // A second iteration starts over.
        assert_eq!(ds.iter().count(), 3);
    }

    #[test]
    fn mismatched_first_dims_are_rejected() {
        let a = Array::new(vec![3, 2], Buffer::F32(vec![0.0; 6])).unwrap();
        let b = Array::new(vec![4], Buffer::I64(vec![0; 4])).unwrap();
        let err = Dataset::from_tensor_slices(Element::new().with("features", a).with("labels", b))
            .unwrap_err();
        let DataError::InvalidArgument(message) = &err else {
            panic!("expected InvalidArgument, got {err:?}");
        };
        assert!(message.contains("\"features\": 3"), "{message}");
        assert!(message.contains("\"labels\": 4"), "{message}");
    }

    #[test]
    fn scalars_and_empty_elements_are_rejected() {
        let s = Array::scalar(Buffer::I64(vec![1])).unwrap();
        assert!(matches!(
            Dataset::from_tensor_slices(Element::new().with("s", s)),
            Err(DataError::InvalidArgument(_))
        ));
        assert!(matches!(
            Dataset::from_tensor_slices(Element::new()),
            Err(DataError::InvalidArgument(_))
        ));
    }

    #[test]
    fn from_elements_yields_clones_in_order() {
        let ds = crate::dataset::testutil::range(5);
        assert_eq!(ds.cardinality(), Cardinality::Finite(5));
        assert_eq!(collect(&ds), vec![0, 1, 2, 3, 4]);
        assert_eq!(collect(&ds), vec![0, 1, 2, 3, 4]);
    }
}
