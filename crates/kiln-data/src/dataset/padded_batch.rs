//! [`Dataset::padded_batch`]: batch elements of different shapes by padding them.

use std::sync::Arc;

use super::{BoxIter, Cardinality, Dataset, Fingerprint, Node};
use crate::element::{Array, Buffer, DType, Element};
use crate::error::{DataError, Result};

/// Per-component target shapes for [`Dataset::padded_batch`] — tf.data's `padded_shapes`.
///
/// Each dimension is `Some(n)` (pad to exactly `n`) or `None` (pad to the longest in the batch,
/// tf.data's `None` / `-1`). Components not listed are padded to the batch maximum in every
/// dimension.
///
/// ```
/// use kiln_data::PaddedShapes;
/// // "tokens" padded to 16 values; "mask" rows padded to the longest in each batch.
/// let shapes = PaddedShapes::new().with("tokens", [Some(16)]).with("mask", [None, Some(4)]);
/// assert_eq!(shapes.get("mask"), Some(&[None, Some(4)][..]));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PaddedShapes {
    shapes: Vec<(String, Vec<Option<usize>>)>,
}

impl PaddedShapes {
    /// No shapes: every component padded to the batch maximum.
    pub fn new() -> PaddedShapes {
        PaddedShapes::default()
    }

    /// Sets (or replaces) the target shape of component `name`; returns `self` for chaining.
    pub fn with(mut self, name: impl Into<String>, dims: impl Into<Vec<Option<usize>>>) -> Self {
        let (name, dims) = (name.into(), dims.into());
        match self.shapes.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = dims,
            None => self.shapes.push((name, dims)),
        }
        self
    }

    /// The target shape of component `name`, if set.
    pub fn get(&self, name: &str) -> Option<&[Option<usize>]> {
        self.shapes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.as_slice())
    }

    /// Component names with a target shape, in insertion order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.shapes.iter().map(|(n, _)| n.as_str())
    }
}

impl Dataset {
    /// `tf.data.Dataset.padded_batch(batch_size, padded_shapes, padding_values,
    /// drop_remainder)`: like [`Dataset::batch`], but the components of a batch may differ in
    /// shape (not in rank or dtype): each is padded at the end of every dimension to a common
    /// shape, then stacked into `[batch, d…]`.
    ///
    /// * The common shape of a component is, per dimension, the given `padded_shapes` size, or
    ///   (`None`, or no `padded_shapes` entry) the largest size in the batch.
    /// * Padding values come from `padding_values`: scalar arrays, by component name, of the
    ///   component's dtype; components not listed are padded with 0 (tf.data's default).
    ///
    /// Batching, `drop_remainder` and cardinality are as [`Dataset::batch`]; input errors are
    /// yielded in place of the batch being assembled.
    ///
    /// Errors, per batch: [`DataError::Shape`] when a component is larger than its padded shape
    /// (naming the element, dimension and sizes), when its rank differs from its padded shape
    /// or between elements, or its dtype differs between elements;
    /// [`DataError::MissingComponent`] when an element lacks a component of the batch's first;
    /// [`DataError::InvalidArgument`] when `padded_shapes` or `padding_values` name a component
    /// the elements do not have, or a padding value's dtype differs from its component's. At
    /// build time (yielded as one `InvalidArgument` when iterated): `batch_size == 0`, or a
    /// padding value that is not a scalar.
    pub fn padded_batch(
        self,
        batch_size: usize,
        padded_shapes: Option<PaddedShapes>,
        padding_values: Option<Element>,
        drop_remainder: bool,
    ) -> Dataset {
        if batch_size == 0 {
            return Dataset::invalid("padded_batch: batch_size must be at least 1".into());
        }
        let padding_values = padding_values.unwrap_or_default();
        for (name, value) in padding_values.iter() {
            if !value.shape().is_empty() {
                return Dataset::invalid(format!(
                    "padded_batch: the padding value for {name:?} must be a scalar (shape []), \
                     got shape {:?}",
                    value.shape()
                ));
            }
        }
        Dataset::from_node(PaddedBatchNode {
            input: self.node,
            batch_size,
            spec: Arc::new(Spec {
                shapes: padded_shapes.unwrap_or_default(),
                values: padding_values,
            }),
            drop_remainder,
        })
    }
}

struct Spec {
    shapes: PaddedShapes,
    values: Element,
}

struct PaddedBatchNode {
    input: Arc<dyn Node>,
    batch_size: usize,
    spec: Arc<Spec>,
    drop_remainder: bool,
}

impl Node for PaddedBatchNode {
    fn iter(&self) -> BoxIter {
        let mut input = self.input.iter();
        let (batch_size, drop_remainder) = (self.batch_size, self.drop_remainder);
        let spec = Arc::clone(&self.spec);
        let mut done = false;
        Box::new(std::iter::from_fn(move || {
            if done {
                return None;
            }
            let mut parts = Vec::with_capacity(batch_size.min(1 << 16));
            while parts.len() < batch_size {
                match input.next() {
                    Some(Ok(element)) => parts.push(element),
                    Some(Err(err)) => return Some(Err(err)),
                    None => {
                        done = true;
                        break;
                    }
                }
            }
            if parts.is_empty() || (drop_remainder && parts.len() < batch_size) {
                return None;
            }
            Some(pad_and_stack(&parts, &spec))
        }))
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
        let mut fp = Fingerprint::new("padded_batch")
            .u64(self.batch_size as u64)
            .bool(self.drop_remainder);
        for (name, dims) in &self.spec.shapes.shapes {
            fp = fp.str(name).u64(dims.len() as u64);
            for d in dims {
                fp = fp.u64(d.map_or(u64::MAX, |n| n as u64));
            }
        }
        fp.element(&self.spec.values)
            .input(self.input.fingerprint())
            .finish()
    }
}

/// `[None, 5]`, as tf.data prints partially known shapes.
fn format_dims(dims: &[Option<usize>]) -> String {
    let parts: Vec<String> = dims
        .iter()
        .map(|d| d.map_or("None".to_string(), |n| n.to_string()))
        .collect();
    format!("[{}]", parts.join(", "))
}

/// Pads every component of `parts` to its common shape and stacks them.
fn pad_and_stack(parts: &[Element], spec: &Spec) -> Result<Element> {
    let first = &parts[0];
    let present = || first.names().map(str::to_string).collect::<Vec<_>>();
    for name in spec.shapes.names().chain(spec.values.names()) {
        if first.get(name).is_none() {
            return Err(DataError::InvalidArgument(format!(
                "padded_batch: padded_shapes / padding_values name component {name:?}, which \
                 the elements do not have (components: {:?})",
                present()
            )));
        }
    }
    let mut out = Element::new();
    for (name, head) in first.iter() {
        let arrays = parts
            .iter()
            .map(|e| e.require(name))
            .collect::<Result<Vec<&Array>>>()?;
        let given = spec.shapes.get(name);
        let target = target_shape(name, &arrays, given)?;
        let pad = spec.values.get(name);
        if let Some(pad) = pad
            && pad.dtype() != head.dtype()
        {
            return Err(DataError::InvalidArgument(format!(
                "padded_batch: the padding value for {name:?} is {} but the component is {}",
                pad.dtype(),
                head.dtype()
            )));
        }
        out.insert(name, pad_component(name, &arrays, &target, pad)?);
    }
    Ok(out)
}

/// The common shape of one component across a batch.
fn target_shape(
    name: &str,
    arrays: &[&Array],
    given: Option<&[Option<usize>]>,
) -> Result<Vec<usize>> {
    let head = arrays[0];
    let rank = head.shape().len();
    for (i, a) in arrays.iter().enumerate() {
        if a.shape().len() != rank || a.dtype() != head.dtype() {
            return Err(DataError::Shape(format!(
                "padded_batch: component {name:?} is {} of shape {:?} in element {i} of the batch \
                 but {} of shape {:?} in element 0; padding needs the same rank and dtype",
                a.dtype(),
                a.shape(),
                head.dtype(),
                head.shape()
            )));
        }
    }
    if let Some(given) = given
        && given.len() != rank
    {
        return Err(DataError::Shape(format!(
            "padded_batch: padded shape {} for {name:?} has {} dimensions but the component has \
             {rank} (shape {:?})",
            format_dims(given),
            given.len(),
            head.shape()
        )));
    }
    (0..rank)
        .map(|d| {
            let (index, largest) = arrays
                .iter()
                .map(|a| a.shape()[d])
                .enumerate()
                .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)))
                .unwrap_or((0, 0));
            match given.and_then(|g| g[d]) {
                Some(n) if largest > n => Err(DataError::Shape(format!(
                    "padded_batch: component {name:?} of element {index} in the batch has size \
                     {largest} in dimension {d}, larger than its padded shape {} allows ({n}); \
                     raise that size or use None to pad to the longest",
                    format_dims(given.unwrap_or_default())
                ))),
                Some(n) => Ok(n),
                None => Ok(largest),
            }
        })
        .collect()
}

/// Stacks `arrays` into `[batch, target…]`, each copied into the leading corner and the rest
/// filled with `pad` (0 when `None`). Dtypes were checked by the caller.
fn pad_component(
    name: &str,
    arrays: &[&Array],
    target: &[usize],
    pad: Option<&Array>,
) -> Result<Array> {
    let mismatch = || DataError::Shape(format!("padded_batch: component {name:?} mixes dtypes"));
    macro_rules! pad_as {
        ($variant:ident, $zero:expr) => {{
            let sources = arrays
                .iter()
                .map(|a| match a.data() {
                    Buffer::$variant(v) => Ok((v.as_slice(), a.shape())),
                    _ => Err(mismatch()),
                })
                .collect::<Result<Vec<_>>>()?;
            let fill = match pad.map(Array::data) {
                Some(Buffer::$variant(v)) => v[0].clone(),
                Some(_) => return Err(mismatch()),
                None => $zero,
            };
            Buffer::$variant(pad_values(&sources, target, fill))
        }};
    }
    // One arm per dtype: a new dtype needs its zero value here (e.g. `Vec::new()` for strings).
    let data = match arrays[0].dtype() {
        DType::U8 => pad_as!(U8, 0),
        DType::I32 => pad_as!(I32, 0),
        DType::I64 => pad_as!(I64, 0),
        DType::F32 => pad_as!(F32, 0.0),
        DType::F64 => pad_as!(F64, 0.0),
        // tf.data pads strings with the empty string.
        DType::String => pad_as!(String, Vec::new()),
    };
    let mut shape = Vec::with_capacity(target.len() + 1);
    shape.push(arrays.len());
    shape.extend_from_slice(target);
    Array::new(shape, data)
}

/// The padded, stacked values: `sources[b]` (values, shape) copied into block `b` of a
/// `[sources.len(), target…]` row-major buffer filled with `fill`.
fn pad_values<T: Clone>(sources: &[(&[T], &[usize])], target: &[usize], fill: T) -> Vec<T> {
    let block: usize = target.iter().product();
    let mut out = vec![fill; block * sources.len()];
    // Row-major strides of the target shape.
    let mut strides = vec![1usize; target.len()];
    for d in (0..target.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * target[d + 1];
    }
    for (b, (values, shape)) in sources.iter().enumerate() {
        let base = b * block;
        let Some((&inner, outer)) = shape.split_last() else {
            out[base] = values[0].clone(); // scalar
            continue;
        };
        let rows: usize = outer.iter().product();
        for r in 0..rows {
            // Offset of row r's first value in the target block.
            let (mut rest, mut offset) = (r, 0);
            for d in (0..outer.len()).rev() {
                offset += (rest % outer[d]) * strides[d];
                rest /= outer[d];
            }
            let src = &values[r * inner..(r + 1) * inner];
            out[base + offset..base + offset + inner].clone_from_slice(src);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Parallelism;
    use crate::dataset::testutil::{collect_results, range, values};

    /// Elements `{"x": [n] int64 filled with n}` for n in `lengths`.
    fn ragged(lengths: &[usize]) -> Dataset {
        Dataset::from_elements(
            lengths
                .iter()
                .map(|&n| {
                    let x = Array::new(vec![n], Buffer::I64(vec![n as i64; n])).unwrap();
                    Element::new().with("x", x)
                })
                .collect(),
        )
    }

    fn batches(ds: &Dataset) -> Vec<(Vec<usize>, Vec<i64>)> {
        ds.iter()
            .map(|b| {
                let b = b.unwrap();
                let x = b.get("x").unwrap();
                (x.shape().to_vec(), x.data().to_i64())
            })
            .collect()
    }

    #[test]
    fn pads_to_the_longest_in_each_batch() {
        // tf.data docs: range(1, 5).map(lambda x: fill([x], x)).padded_batch(2) gives
        // [[1, 0], [2, 2]] and [[3, 3, 3, 0], [4, 4, 4, 4]].
        let ds = ragged(&[1, 2, 3, 4]).padded_batch(2, None, None, false);
        assert_eq!(ds.cardinality(), Cardinality::Finite(2));
        assert_eq!(
            batches(&ds),
            vec![
                (vec![2, 2], vec![1, 0, 2, 2]),
                (vec![2, 4], vec![3, 3, 3, 0, 4, 4, 4, 4])
            ]
        );
    }

    #[test]
    fn given_shapes_and_padding_values() {
        // tf.data docs: padded_shapes=5 pads every batch to length 5; padding_values=-1.
        let shapes = PaddedShapes::new().with("x", [Some(5)]);
        let pad = Element::new().with("x", Array::scalar(Buffer::I64(vec![-1])).unwrap());
        let ds = ragged(&[1, 2, 3]).padded_batch(2, Some(shapes), Some(pad), false);
        assert_eq!(
            batches(&ds),
            vec![
                (vec![2, 5], vec![1, -1, -1, -1, -1, 2, 2, -1, -1, -1]),
                (vec![1, 5], vec![3, 3, 3, -1, -1])
            ]
        );
        let dropped = ragged(&[1, 2, 3]).padded_batch(2, None, None, true);
        assert_eq!(dropped.cardinality(), Cardinality::Finite(1));
        assert_eq!(batches(&dropped).len(), 1);
    }

    #[test]
    fn pads_two_dimensions_and_keeps_other_components() {
        let a = Array::new(vec![1, 2], Buffer::F32(vec![1., 2.])).unwrap();
        let b = Array::new(vec![2, 1], Buffer::F32(vec![3., 4.])).unwrap();
        let label = |v| Array::scalar(Buffer::I32(vec![v])).unwrap();
        let ds = Dataset::from_elements(vec![
            Element::new().with("m", a).with("label", label(7)),
            Element::new().with("m", b).with("label", label(8)),
        ])
        .padded_batch(
            2,
            Some(PaddedShapes::new().with("m", [None, Some(3)])),
            None,
            false,
        );
        let batch = ds.iter().next().unwrap().unwrap();
        let m = batch.get("m").unwrap();
        assert_eq!(m.shape(), &[2, 2, 3]);
        assert_eq!(
            m.data(),
            &Buffer::F32(vec![1., 2., 0., 0., 0., 0., 3., 0., 0., 4., 0., 0.])
        );
        assert_eq!(batch.get("label").unwrap().data(), &Buffer::I32(vec![7, 8]));
        assert_eq!(batch.get("label").unwrap().shape(), &[2]);
    }

    #[test]
    fn same_shapes_match_batch() {
        let padded = range(5).padded_batch(2, None, None, false);
        let plain = range(5).batch(2, false);
        let a: Vec<Element> = padded.iter().map(|r| r.unwrap()).collect();
        let b: Vec<Element> = plain.iter().map(|r| r.unwrap()).collect();
        assert_eq!(a, b);
        assert_eq!(values(&a[2]), vec![4]);
    }

    #[test]
    fn too_large_for_the_padded_shape_is_an_error() {
        let ds = ragged(&[2, 4]).padded_batch(
            2,
            Some(PaddedShapes::new().with("x", [Some(3)])),
            None,
            false,
        );
        let results: Vec<_> = ds.iter().collect();
        assert_eq!(results.len(), 1);
        let Err(DataError::Shape(message)) = &results[0] else {
            panic!("expected a shape error, got {:?}", results[0]);
        };
        assert!(message.contains("element 1"), "{message}");
        assert!(message.contains("size 4 in dimension 0"), "{message}");
        assert!(message.contains("[3]"), "{message}");
    }

    #[test]
    fn invalid_arguments_and_mismatches() {
        let bad_rank = ragged(&[1]).padded_batch(
            1,
            Some(PaddedShapes::new().with("x", [None, None])),
            None,
            false,
        );
        assert!(
            matches!(&collect_results(&bad_rank)[0], Err(DataError::Shape(m)) if m.contains("2 dimensions"))
        );
        let unknown =
            ragged(&[1]).padded_batch(1, Some(PaddedShapes::new().with("y", [None])), None, false);
        assert!(
            matches!(&collect_results(&unknown)[0], Err(DataError::InvalidArgument(m)) if m.contains("\"y\""))
        );
        let wrong_dtype = Element::new().with("x", Array::scalar(Buffer::F32(vec![1.0])).unwrap());
        let ds = ragged(&[1]).padded_batch(1, None, Some(wrong_dtype), false);
        assert!(
            matches!(&collect_results(&ds)[0], Err(DataError::InvalidArgument(m)) if m.contains("float32"))
        );
        let not_scalar =
            Element::new().with("x", Array::new(vec![1], Buffer::I64(vec![1])).unwrap());
        let ds = ragged(&[1]).padded_batch(1, None, Some(not_scalar), false);
        let results = collect_results(&ds);
        assert_eq!(results.len(), 1);
        assert!(matches!(&results[0], Err(DataError::InvalidArgument(m)) if m.contains("scalar")));
        assert!(matches!(
            &collect_results(&range(3).padded_batch(0, None, None, false))[0],
            Err(DataError::InvalidArgument(_))
        ));
        // Rank differs between elements.
        let mixed = Dataset::from_elements(vec![
            Element::new().with("x", Array::new(vec![1], Buffer::I64(vec![1])).unwrap()),
            Element::new().with("x", Array::new(vec![1, 1], Buffer::I64(vec![1])).unwrap()),
        ]);
        let results = collect_results(&mixed.padded_batch(2, None, None, false));
        assert!(matches!(&results[0], Err(DataError::Shape(m)) if m.contains("element 1")));
    }

    #[test]
    fn input_errors_replace_the_batch() {
        let ds = range(5)
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
            .padded_batch(2, None, None, false);
        let results = collect_results(&ds);
        assert!(matches!(&results[0], Err(DataError::Map(m)) if m == "one"));
        assert_eq!(results[1].as_ref().unwrap(), &vec![2, 3]);
        assert_eq!(results[2].as_ref().unwrap(), &vec![4]);
    }
}
