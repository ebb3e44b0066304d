//! Dataset elements: small ordered maps of named host arrays.
//!
//! tf.data's elements are nested structures of tensors; kiln keeps the common case flat: an
//! [`Element`] maps component names (`"image"`, `"label"`, …) to [`Array`]s, each with a
//! [`DType`], a shape and a contiguous row-major buffer. No Burn types appear here: batches
//! become device tensors in `kiln`, on the way into the training step.

use std::fmt;

use crate::error::{DataError, Result};

/// Element type of an [`Array`]. Names follow NumPy / TensorFlow (`uint8`, `int64`, `float32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// Unsigned 8-bit integers (IDX code `0x08`; raw image pixels).
    U8,
    /// Signed 32-bit integers (IDX code `0x0C`).
    I32,
    /// Signed 64-bit integers (class labels after casting; TensorFlow's default int).
    I64,
    /// 32-bit IEEE floats (IDX code `0x0D`).
    F32,
    /// 64-bit IEEE floats (IDX code `0x0E`).
    F64,
    /// Byte strings — TensorFlow's `tf.string`: each value is an arbitrary byte sequence,
    /// usually UTF-8 text (text lines, CSV fields, file names), possibly binary (encoded
    /// images). Stored as [`Buffer::String`]; not convertible to numbers
    /// ([`Buffer::try_to_f32`]).
    String,
}

impl DType {
    /// Size of one value in bytes. For [`DType::String`], whose values vary in length, the
    /// size of one value's handle (`size_of::<Vec<u8>>()`); the bytes themselves are extra.
    pub fn size(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
            DType::String => std::mem::size_of::<Vec<u8>>(),
        }
    }

    /// True for the integer dtypes (class labels, raw pixels).
    pub fn is_integer(self) -> bool {
        matches!(self, DType::U8 | DType::I32 | DType::I64)
    }

    /// The NumPy/TensorFlow name (`"uint8"`, `"int32"`, `"int64"`, `"float32"`, `"float64"`,
    /// `"string"`).
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "uint8",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::String => "string",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A typed, contiguous, row-major buffer.
#[derive(Debug, Clone, PartialEq)]
pub enum Buffer {
    /// `uint8` values.
    U8(Vec<u8>),
    /// `int32` values.
    I32(Vec<i32>),
    /// `int64` values.
    I64(Vec<i64>),
    /// `float32` values.
    F32(Vec<f32>),
    /// `float64` values.
    F64(Vec<f64>),
    /// `string` values: one byte vector per value ([`DType::String`]).
    String(Vec<Vec<u8>>),
}

impl Buffer {
    /// The buffer's dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Buffer::U8(_) => DType::U8,
            Buffer::I32(_) => DType::I32,
            Buffer::I64(_) => DType::I64,
            Buffer::F32(_) => DType::F32,
            Buffer::F64(_) => DType::F64,
            Buffer::String(_) => DType::String,
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Buffer::U8(v) => v.len(),
            Buffer::I32(v) => v.len(),
            Buffer::I64(v) => v.len(),
            Buffer::F32(v) => v.len(),
            Buffer::F64(v) => v.len(),
            Buffer::String(v) => v.len(),
        }
    }

    /// True when the buffer holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An empty buffer of `dtype` with room for `capacity` values.
    pub fn with_capacity(dtype: DType, capacity: usize) -> Buffer {
        match dtype {
            DType::U8 => Buffer::U8(Vec::with_capacity(capacity)),
            DType::I32 => Buffer::I32(Vec::with_capacity(capacity)),
            DType::I64 => Buffer::I64(Vec::with_capacity(capacity)),
            DType::F32 => Buffer::F32(Vec::with_capacity(capacity)),
            DType::F64 => Buffer::F64(Vec::with_capacity(capacity)),
            DType::String => Buffer::String(Vec::with_capacity(capacity)),
        }
    }

    /// Values `[start, end)` as a new buffer of the same dtype.
    pub fn slice(&self, start: usize, end: usize) -> Buffer {
        match self {
            Buffer::U8(v) => Buffer::U8(v[start..end].to_vec()),
            Buffer::I32(v) => Buffer::I32(v[start..end].to_vec()),
            Buffer::I64(v) => Buffer::I64(v[start..end].to_vec()),
            Buffer::F32(v) => Buffer::F32(v[start..end].to_vec()),
            Buffer::F64(v) => Buffer::F64(v[start..end].to_vec()),
            Buffer::String(v) => Buffer::String(v[start..end].to_vec()),
        }
    }

    /// Appends `other`, which must have the same dtype (checked by the caller).
    pub(crate) fn extend_from(&mut self, other: &Buffer) -> bool {
        match (self, other) {
            (Buffer::U8(a), Buffer::U8(b)) => a.extend_from_slice(b),
            (Buffer::I32(a), Buffer::I32(b)) => a.extend_from_slice(b),
            (Buffer::I64(a), Buffer::I64(b)) => a.extend_from_slice(b),
            (Buffer::F32(a), Buffer::F32(b)) => a.extend_from_slice(b),
            (Buffer::F64(a), Buffer::F64(b)) => a.extend_from_slice(b),
            (Buffer::String(a), Buffer::String(b)) => a.extend_from_slice(b),
            _ => return false,
        }
        true
    }

    /// Every value converted to `f32` (integers exactly up to 2^24).
    ///
    /// # Panics
    /// For a [`Buffer::String`] (strings have no numeric value); use [`Buffer::try_to_f32`]
    /// where the dtype comes from user data.
    pub fn to_f32(&self) -> Vec<f32> {
        self.try_to_f32().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every value converted to `i64` (floats truncated toward zero).
    ///
    /// # Panics
    /// For a [`Buffer::String`]; use [`Buffer::try_to_i64`] where the dtype comes from user
    /// data.
    pub fn to_i64(&self) -> Vec<i64> {
        self.try_to_i64().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every value converted to `f32`, as [`Buffer::to_f32`].
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] for a [`Buffer::String`].
    #[allow(clippy::unnecessary_cast)] // the f32 arm casts f32 to itself
    pub fn try_to_f32(&self) -> Result<Vec<f32>> {
        Ok(match self {
            Buffer::U8(v) => v.iter().map(|&x| x as f32).collect(),
            Buffer::I32(v) => v.iter().map(|&x| x as f32).collect(),
            Buffer::I64(v) => v.iter().map(|&x| x as f32).collect(),
            Buffer::F32(v) => v.clone(),
            Buffer::F64(v) => v.iter().map(|&x| x as f32).collect(),
            Buffer::String(_) => return Err(not_numeric(DType::F32)),
        })
    }

    /// Every value converted to `i64`, as [`Buffer::to_i64`].
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] for a [`Buffer::String`].
    pub fn try_to_i64(&self) -> Result<Vec<i64>> {
        Ok(match self {
            Buffer::U8(v) => v.iter().map(|&x| i64::from(x)).collect(),
            Buffer::I32(v) => v.iter().map(|&x| i64::from(x)).collect(),
            Buffer::I64(v) => v.clone(),
            Buffer::F32(v) => v.iter().map(|&x| x as i64).collect(),
            Buffer::F64(v) => v.iter().map(|&x| x as i64).collect(),
            Buffer::String(_) => return Err(not_numeric(DType::I64)),
        })
    }

    /// Appends the values' little-endian bytes to `out` (the layout of `.npy` payloads and of
    /// kiln-data's cache records). Appends nothing for a [`Buffer::String`], whose encoding is
    /// each format's own.
    pub(crate) fn extend_le_bytes(&self, out: &mut Vec<u8>) {
        macro_rules! le {
            ($v:expr) => {
                $v.iter()
                    .for_each(|x| out.extend_from_slice(&x.to_le_bytes()))
            };
        }
        match self {
            Buffer::U8(v) => out.extend_from_slice(v),
            Buffer::I32(v) => le!(v),
            Buffer::I64(v) => le!(v),
            Buffer::F32(v) => le!(v),
            Buffer::F64(v) => le!(v),
            Buffer::String(_) => {}
        }
    }

    /// The values of a [`Buffer::String`], `None` for numeric buffers.
    pub fn as_strings(&self) -> Option<&[Vec<u8>]> {
        match self {
            Buffer::String(v) => Some(v),
            _ => None,
        }
    }
}

/// The error for converting string values to a number type.
fn not_numeric(to: DType) -> DataError {
    DataError::InvalidArgument(format!(
        "cannot convert string values to {to}: parse them first (a map that parses the text, \
         or a numeric record default for a CSV column)"
    ))
}

/// A host array: dtype, shape and a row-major buffer with `shape.iter().product()` values.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    shape: Vec<usize>,
    data: Buffer,
}

impl Array {
    /// Wraps `data` with `shape`.
    ///
    /// # Errors
    /// [`DataError::Shape`] when the shape's product differs from the buffer length.
    pub fn new(shape: Vec<usize>, data: Buffer) -> Result<Array> {
        let expected: usize = shape.iter().product();
        if expected != data.len() {
            return Err(DataError::Shape(format!(
                "shape {shape:?} needs {expected} values but the buffer has {}",
                data.len()
            )));
        }
        Ok(Array { shape, data })
    }

    /// A scalar (shape `[]`).
    pub fn scalar(data: Buffer) -> Result<Array> {
        Array::new(vec![], data)
    }

    /// A `string` scalar (shape `[]`, [`DType::String`]) holding `bytes`.
    pub fn string_scalar(bytes: impl Into<Vec<u8>>) -> Array {
        Array {
            shape: vec![],
            data: Buffer::String(vec![bytes.into()]),
        }
    }

    /// The array's shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The array's dtype.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// The underlying buffer.
    pub fn data(&self) -> &Buffer {
        &self.data
    }

    /// Consumes the array, returning its buffer.
    pub fn into_data(self) -> Buffer {
        self.data
    }

    /// Number of values (product of the shape).
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// True when the array holds no values.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The buffer, mutably (the shape stays; callers keep the length).
    pub(crate) fn data_mut(&mut self) -> &mut Buffer {
        &mut self.data
    }

    /// Same values, new shape.
    ///
    /// # Errors
    /// [`DataError::Shape`] when the element counts differ.
    pub fn reshape(self, shape: Vec<usize>) -> Result<Array> {
        Array::new(shape, self.data)
    }

    /// The array converted to `float32`, each value multiplied by `scale` (e.g. `1/255`).
    ///
    /// # Panics
    /// For a [`DType::String`] array (see [`Buffer::to_f32`]).
    pub fn to_f32_scaled(&self, scale: f32) -> Array {
        let values = self.data.to_f32().into_iter().map(|x| x * scale).collect();
        Array {
            shape: self.shape.clone(),
            data: Buffer::F32(values),
        }
    }

    /// Rows `[start, end)` along the first axis.
    ///
    /// # Panics
    /// When the array is a scalar or the range is out of bounds (callers check cardinality).
    pub fn rows(&self, start: usize, end: usize) -> Array {
        let row: usize = self.shape[1..].iter().product();
        let mut shape = self.shape.clone();
        shape[0] = end - start;
        Array {
            shape,
            data: self.data.slice(start * row, end * row),
        }
    }

    /// Row `index` along the first axis, with that axis removed.
    pub fn row(&self, index: usize) -> Array {
        let row: usize = self.shape[1..].iter().product();
        Array {
            shape: self.shape[1..].to_vec(),
            data: self.data.slice(index * row, (index + 1) * row),
        }
    }

    /// Stacks same-shaped, same-dtype arrays along a new first axis (`tf.stack(axis=0)`).
    ///
    /// # Errors
    /// [`DataError::Shape`] when the parts differ in shape or dtype, or `parts` is empty.
    pub fn stack(parts: &[Array]) -> Result<Array> {
        Array::stack_refs(&parts.iter().collect::<Vec<_>>())
    }

    /// [`Array::stack`] of borrowed arrays: each part's values are copied once, into the
    /// result ([`Element::stack`] batches without cloning the elements first).
    fn stack_refs(parts: &[&Array]) -> Result<Array> {
        let first = *parts
            .first()
            .ok_or_else(|| DataError::Shape("cannot stack zero arrays".into()))?;
        let mut data = Buffer::with_capacity(first.dtype(), first.len() * parts.len());
        for (i, part) in parts.iter().enumerate() {
            if part.shape != first.shape || !data.extend_from(&part.data) {
                return Err(DataError::Shape(format!(
                    "cannot batch element {i} of shape {:?} ({}) with element 0 of shape {:?} ({})",
                    part.shape,
                    part.dtype(),
                    first.shape,
                    first.dtype()
                )));
            }
        }
        let mut shape = Vec::with_capacity(first.shape.len() + 1);
        shape.push(parts.len());
        shape.extend_from_slice(&first.shape);
        Ok(Array { shape, data })
    }
}

/// One dataset element: named components in insertion order (like a Python dict).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Element {
    components: Vec<(String, Array)>,
}

impl Element {
    /// An element with no components.
    pub fn new() -> Element {
        Element::default()
    }

    /// Adds (or replaces) component `name`; returns `self` for chaining.
    pub fn with(mut self, name: impl Into<String>, array: Array) -> Element {
        self.insert(name, array);
        self
    }

    /// Adds (or replaces) component `name`.
    pub fn insert(&mut self, name: impl Into<String>, array: Array) {
        let name = name.into();
        match self.components.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = array,
            None => self.components.push((name, array)),
        }
    }

    /// Component `name`, if present.
    pub fn get(&self, name: &str) -> Option<&Array> {
        self.components
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a)
    }

    /// Removes and returns component `name`.
    pub fn remove(&mut self, name: &str) -> Option<Array> {
        let pos = self.components.iter().position(|(n, _)| n == name)?;
        Some(self.components.remove(pos).1)
    }

    /// Takes component `name` out of the element, leaving an empty placeholder in its place
    /// (so a later [`insert`](Element::insert) of the same name keeps the component order);
    /// [`DataError::MissingComponent`] when absent. For ops that transform a component in
    /// place.
    pub(crate) fn take(&mut self, name: &str) -> Result<Array> {
        let present = self.components.iter().position(|(n, _)| n == name);
        let Some(i) = present else {
            return Err(self.require(name).expect_err("absent"));
        };
        let empty = Array {
            shape: vec![0],
            data: Buffer::U8(Vec::new()),
        };
        Ok(std::mem::replace(&mut self.components[i].1, empty))
    }

    /// Component `name`, or [`DataError::MissingComponent`] listing the components present.
    pub fn require(&self, name: &str) -> Result<&Array> {
        self.get(name).ok_or_else(|| DataError::MissingComponent {
            name: name.to_string(),
            present: self.names().map(str::to_string).collect(),
        })
    }

    /// Component names in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.components.iter().map(|(n, _)| n.as_str())
    }

    /// `(name, array)` pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Array)> {
        self.components.iter().map(|(n, a)| (n.as_str(), a))
    }

    /// Number of components.
    pub fn len(&self) -> usize {
        self.components.len()
    }

    /// True when the element has no components.
    pub fn is_empty(&self) -> bool {
        self.components.is_empty()
    }

    /// Stacks elements with the same components along a new first axis (what `batch` does).
    ///
    /// # Errors
    /// [`DataError::Shape`] when the elements' structures, shapes or dtypes differ.
    pub fn stack(elements: &[Element]) -> Result<Element> {
        let first = elements
            .first()
            .ok_or_else(|| DataError::Shape("cannot batch zero elements".into()))?;
        let mut out = Element::new();
        for (name, _) in first.iter() {
            let parts = elements
                .iter()
                .map(|e| e.require(name))
                .collect::<Result<Vec<_>>>()?;
            out.insert(name, Array::stack_refs(&parts)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_dtypes_are_the_label_and_pixel_types() {
        let ints: Vec<bool> = [
            DType::U8,
            DType::I32,
            DType::I64,
            DType::F32,
            DType::F64,
            DType::String,
        ]
        .iter()
        .map(|d| d.is_integer())
        .collect();
        assert_eq!(ints, [true, true, true, false, false, false]);
    }

    #[test]
    fn strings_slice_stack_and_refuse_numeric_conversion() {
        let a = Array::string_scalar("héllo");
        let b = Array::string_scalar(vec![0xff, 0x00]); // not UTF-8: still a valid tf.string
        assert_eq!(a.dtype(), DType::String);
        assert_eq!(a.dtype().name(), "string");
        let stacked = Array::stack(&[a, b]).unwrap();
        assert_eq!(stacked.shape(), &[2]);
        assert_eq!(
            stacked.data().as_strings().unwrap(),
            &[b"h\xc3\xa9llo".to_vec(), vec![0xff, 0x00]]
        );
        assert_eq!(
            stacked.row(1).data(),
            &Buffer::String(vec![vec![0xff, 0x00]])
        );
        assert!(Buffer::I32(vec![1]).as_strings().is_none());
        // Mixing strings and numbers cannot be batched.
        let mixed = Array::stack(&[
            Array::string_scalar("1"),
            Array::scalar(Buffer::I64(vec![1])).unwrap(),
        ]);
        assert!(matches!(mixed, Err(DataError::Shape(_))));
        let err = stacked.data().try_to_f32().unwrap_err();
        assert!(
            err.to_string()
                .contains("cannot convert string values to float32")
        );
        assert!(stacked.data().try_to_i64().is_err());
        assert_eq!(Buffer::I32(vec![-3, 7]).try_to_i64().unwrap(), vec![-3, 7]);
        assert_eq!(Buffer::F64(vec![-2.5]).try_to_f32().unwrap(), vec![-2.5]);
    }
}
