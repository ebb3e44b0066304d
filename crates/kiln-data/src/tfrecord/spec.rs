//! Parsing specs: `tf.io.parse_single_example(serialized, features)` with
//! `tf.io.FixedLenFeature` and `tf.io.VarLenFeature`.
//!
//! An [`ExampleSpec`] names the features to extract; [`ExampleSpec::parse`] turns one
//! serialized `tf.train.Example` into an [`Element`] with one [`Array`] per feature, in the
//! spec's order:
//!
//! | spec | TensorFlow gives | kiln gives |
//! |---|---|---|
//! | `FixedLen(shape, Float32)` | `float32`, `shape` | [`DType::F32`], `shape` |
//! | `FixedLen(shape, Int64)` | `int64`, `shape` | [`DType::I64`], `shape` |
//! | `FixedLen([], Bytes)` | scalar `tf.string` | [`DType::U8`], `[n]`: the string's bytes |
//! | `VarLen(Float32 / Int64)` | `SparseTensor`, dense shape `[k]` | dense 1-D, `[k]` (`k` ≥ 0) |
//!
//! kiln has no string dtype, so a byte string becomes a 1-D `uint8` array of its bytes (an
//! encoded image, raw pixels, UTF-8 text). Only scalar fixed-length byte features are
//! supported; fixed-length byte features of other shapes and variable-length byte features
//! are rejected when the spec is checked. Byte strings and variable-length features whose
//! lengths differ between records cannot be stacked by [`crate::Dataset::batch`]; batch them
//! after a map that decodes or pads them.
//!
//! As in TensorFlow (`tensorflow/core/util/example_proto_fast_parsing.cc`), a value list of
//! the wrong type or (fixed-length) the wrong number of values is an error, and so is a missing
//! fixed-length feature without a default. A feature whose `kind` oneof is unset counts as
//! missing. Features of the example that the spec does not name are ignored.

use crate::element::{Array, Buffer, DType, Element};
use crate::error::{DataError, Result};

use super::example::{Example, Feature, FeatureKind};

/// The value type of a feature: `tf.string`, `tf.float32` or `tf.int64`, the three types a
/// `tf.train.Feature` can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FeatureDType {
    /// `tf.string`: a `bytes_list`.
    Bytes,
    /// `tf.float32`: a `float_list`.
    Float32,
    /// `tf.int64`: an `int64_list`.
    Int64,
}

impl FeatureDType {
    /// The TensorFlow dtype name: `"string"`, `"float32"`, `"int64"`.
    pub fn name(self) -> &'static str {
        match self {
            FeatureDType::Bytes => "string",
            FeatureDType::Float32 => "float32",
            FeatureDType::Int64 => "int64",
        }
    }

    /// The `tf.train.Feature` list that holds this type: `"bytes_list"`, `"float_list"`,
    /// `"int64_list"`.
    pub fn list_name(self) -> &'static str {
        match self {
            FeatureDType::Bytes => "bytes_list",
            FeatureDType::Float32 => "float_list",
            FeatureDType::Int64 => "int64_list",
        }
    }

    /// The [`DType`] of the arrays parsed from this type ([`DType::U8`] for bytes).
    pub fn array_dtype(self) -> DType {
        match self {
            FeatureDType::Bytes => DType::U8,
            FeatureDType::Float32 => DType::F32,
            FeatureDType::Int64 => DType::I64,
        }
    }
}

/// A list of feature values of one type: a fixed-length feature's `default_value`.
#[derive(Debug, Clone, PartialEq)]
pub enum FeatureValues {
    /// Byte strings.
    Bytes(Vec<Vec<u8>>),
    /// 32-bit floats.
    Float32(Vec<f32>),
    /// 64-bit integers.
    Int64(Vec<i64>),
}

impl FeatureValues {
    /// The values' type.
    pub fn dtype(&self) -> FeatureDType {
        match self {
            FeatureValues::Bytes(_) => FeatureDType::Bytes,
            FeatureValues::Float32(_) => FeatureDType::Float32,
            FeatureValues::Int64(_) => FeatureDType::Int64,
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            FeatureValues::Bytes(v) => v.len(),
            FeatureValues::Float32(v) => v.len(),
            FeatureValues::Int64(v) => v.len(),
        }
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How to parse one feature: `tf.io.FixedLenFeature` or `tf.io.VarLenFeature`.
#[derive(Debug, Clone, PartialEq)]
pub enum FeatureSpec {
    /// `tf.io.FixedLenFeature(shape, dtype, default_value)`: exactly `shape.product()` values
    /// (one byte string for `Bytes`, whose `shape` must be `[]`), or `default_value` when the
    /// feature is missing. `default_value` must hold `shape.product()` values of `dtype`
    /// (TensorFlow reshapes it to `shape`; it does not broadcast).
    FixedLen {
        /// Shape of the parsed array (`[]` for a scalar).
        shape: Vec<usize>,
        /// Value type.
        dtype: FeatureDType,
        /// Used when the feature is missing; `None` makes it required.
        default_value: Option<FeatureValues>,
    },
    /// `tf.io.VarLenFeature(dtype)`: any number of values (`Float32` or `Int64`), parsed to a
    /// 1-D array; a missing feature gives an empty array.
    VarLen {
        /// Value type.
        dtype: FeatureDType,
    },
}

impl FeatureSpec {
    /// A required fixed-length feature (no default).
    pub fn fixed_len(shape: Vec<usize>, dtype: FeatureDType) -> FeatureSpec {
        FeatureSpec::FixedLen {
            shape,
            dtype,
            default_value: None,
        }
    }

    /// A fixed-length feature with a default; its type is the default's.
    pub fn fixed_len_with_default(shape: Vec<usize>, default_value: FeatureValues) -> FeatureSpec {
        FeatureSpec::FixedLen {
            shape,
            dtype: default_value.dtype(),
            default_value: Some(default_value),
        }
    }

    /// A variable-length feature.
    pub fn var_len(dtype: FeatureDType) -> FeatureSpec {
        FeatureSpec::VarLen { dtype }
    }

    /// The feature's value type.
    pub fn dtype(&self) -> FeatureDType {
        match self {
            FeatureSpec::FixedLen { dtype, .. } | FeatureSpec::VarLen { dtype } => *dtype,
        }
    }
}

/// The `features` argument of `tf.io.parse_single_example`: feature names and how to parse
/// them, in the order the parsed element's components take.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExampleSpec {
    features: Vec<(String, FeatureSpec)>,
}

impl ExampleSpec {
    /// An empty spec.
    pub fn new() -> ExampleSpec {
        ExampleSpec::default()
    }

    /// Adds (or replaces) feature `name`; returns `self` for chaining.
    pub fn with(mut self, name: impl Into<String>, spec: FeatureSpec) -> ExampleSpec {
        let name = name.into();
        match self.features.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = spec,
            None => self.features.push((name, spec)),
        }
        self
    }

    /// `(name, spec)` pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &FeatureSpec)> {
        self.features.iter().map(|(n, s)| (n.as_str(), s))
    }

    /// Checks the spec itself, before any data is read.
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] naming the feature when: a default's type differs from
    /// the feature's or its length from `shape.product()`; a fixed-length bytes feature has a
    /// shape other than `[]`; a variable-length feature is of bytes.
    pub fn check(&self) -> Result<()> {
        for (name, spec) in &self.features {
            let invalid = |what: String| {
                Err(DataError::InvalidArgument(format!(
                    "parse spec, feature {name:?}: {what}"
                )))
            };
            match spec {
                FeatureSpec::FixedLen {
                    shape,
                    dtype,
                    default_value,
                } => {
                    if *dtype == FeatureDType::Bytes && !shape.is_empty() {
                        return invalid(format!(
                            "a FixedLenFeature of bytes must have shape [] (found {shape:?}): \
                             kiln has no string dtype and stores one byte string per feature \
                             as a 1-D uint8 array"
                        ));
                    }
                    if let Some(default) = default_value {
                        let expected: usize = shape.iter().product();
                        if default.dtype() != *dtype {
                            return invalid(format!(
                                "default_value is {} but the feature's dtype is {}",
                                default.dtype().name(),
                                dtype.name()
                            ));
                        }
                        if default.len() != expected {
                            return invalid(format!(
                                "default_value has {} values but shape {shape:?} needs \
                                 {expected} (defaults are reshaped, not broadcast)",
                                default.len()
                            ));
                        }
                    }
                }
                FeatureSpec::VarLen { dtype } => {
                    if *dtype == FeatureDType::Bytes {
                        return invalid(
                            "a VarLenFeature of bytes is not supported: kiln has no string \
                             dtype; use FixedLenFeature([], bytes) for one byte string per \
                             record"
                                .into(),
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// `tf.io.parse_single_example`: parses one serialized `tf.train.Example` into an
    /// element with one array per spec feature (see the module docs for shapes and dtypes).
    /// `record` is the example's position in its input, used in error messages.
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] when [`check`](ExampleSpec::check) fails;
    /// [`DataError::Example`] (naming the record, and the feature where there is one) when the
    /// bytes are not an Example, a required feature is missing, or a feature has the wrong
    /// type or number of values (expected vs found).
    pub fn parse(&self, serialized: &[u8], record: u64) -> Result<Element> {
        self.check()?;
        let example = Example::from_bytes(serialized, record)?;
        self.parse_example(&example, record)
    }

    /// Like [`parse`](ExampleSpec::parse), from a decoded [`Example`] (the spec is assumed
    /// checked).
    ///
    /// # Errors
    /// As [`parse`](ExampleSpec::parse), less the decoding error.
    pub fn parse_example(&self, example: &Example, record: u64) -> Result<Element> {
        let mut element = Element::new();
        for (name, spec) in &self.features {
            let error = |message: String| DataError::Example {
                path: None,
                offset: None,
                record,
                feature: Some(name.clone()),
                message,
            };
            let present = example.feature(name).filter(|f| f.kind.is_some());
            let array = match (spec, present) {
                (
                    FeatureSpec::FixedLen {
                        shape,
                        dtype,
                        default_value,
                    },
                    None,
                ) => match default_value {
                    Some(default) => fixed_array(shape, default_to_feature(default)),
                    None => Err(error(format!(
                        "required feature ({} of shape {shape:?}) is missing and the \
                         FixedLenFeature has no default_value: add the feature to every \
                         record or give it a default_value",
                        dtype.name()
                    ))),
                },
                (FeatureSpec::FixedLen { shape, dtype, .. }, Some(feature)) => {
                    check_type(feature, *dtype).map_err(error)?;
                    let expected: usize = shape.iter().product();
                    if feature.len() != expected {
                        return Err(error(format!(
                            "expected {expected} {} value{} for shape {shape:?}, found {}",
                            dtype.name(),
                            if expected == 1 { "" } else { "s" },
                            feature.len()
                        )));
                    }
                    fixed_array(shape, feature.clone())
                }
                (FeatureSpec::VarLen { dtype }, None) => Ok(Array::new(
                    vec![0],
                    Buffer::with_capacity(dtype.array_dtype(), 0),
                )?),
                (FeatureSpec::VarLen { dtype }, Some(feature)) => {
                    check_type(feature, *dtype).map_err(error)?;
                    let n = feature.len();
                    fixed_array(&[n], feature.clone())
                }
            }?;
            element.insert(name.clone(), array);
        }
        Ok(element)
    }
}

/// "expected float32 (float_list), found int64_list with 3 values".
fn check_type(feature: &Feature, dtype: FeatureDType) -> std::result::Result<(), String> {
    let matches = matches!(
        (&feature.kind, dtype),
        (Some(FeatureKind::BytesList(_)), FeatureDType::Bytes)
            | (Some(FeatureKind::FloatList(_)), FeatureDType::Float32)
            | (Some(FeatureKind::Int64List(_)), FeatureDType::Int64)
    );
    if matches {
        Ok(())
    } else {
        Err(format!(
            "expected {} ({}), found {} with {} value{}: fix the spec's dtype or the data",
            dtype.name(),
            dtype.list_name(),
            feature.kind_name(),
            feature.len(),
            if feature.len() == 1 { "" } else { "s" }
        ))
    }
}

fn default_to_feature(values: &FeatureValues) -> Feature {
    match values {
        FeatureValues::Bytes(v) => Feature::bytes(v.iter().cloned()),
        FeatureValues::Float32(v) => Feature::float32(v.clone()),
        FeatureValues::Int64(v) => Feature::int64(v.clone()),
    }
}

/// The array of a feature whose type and count are checked: numbers get `shape`; a single
/// byte string becomes a `[n]` uint8 array.
fn fixed_array(shape: &[usize], feature: Feature) -> Result<Array> {
    match feature.kind {
        Some(FeatureKind::FloatList(l)) => Array::new(shape.to_vec(), Buffer::F32(l.value)),
        Some(FeatureKind::Int64List(l)) => Array::new(shape.to_vec(), Buffer::I64(l.value)),
        Some(FeatureKind::BytesList(mut l)) if l.value.len() == 1 => {
            let bytes = l.value.pop().expect("one value");
            Array::new(vec![bytes.len()], Buffer::U8(bytes))
        }
        other => Err(DataError::Shape(format!(
            "internal: cannot make an array of shape {shape:?} from {}",
            Feature { kind: other }.kind_name()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> Example {
        Example::new()
            .with("image", Feature::bytes([vec![1u8, 2, 3]]))
            .with("xy", Feature::float32(vec![0.5, 1.5, 2.5, 3.5]))
            .with("label", Feature::int64(vec![7]))
            .with("tags", Feature::int64(vec![4, 5, 6]))
            .with("weights", Feature::float32(vec![]))
    }

    #[test]
    fn fixed_and_var_len_features_in_spec_order() {
        let spec = ExampleSpec::new()
            .with("label", FeatureSpec::fixed_len(vec![], FeatureDType::Int64))
            .with(
                "xy",
                FeatureSpec::fixed_len(vec![2, 2], FeatureDType::Float32),
            )
            .with("image", FeatureSpec::fixed_len(vec![], FeatureDType::Bytes))
            .with("tags", FeatureSpec::var_len(FeatureDType::Int64))
            .with("weights", FeatureSpec::var_len(FeatureDType::Float32))
            .with("missing", FeatureSpec::var_len(FeatureDType::Float32));
        let e = spec.parse(&example().to_bytes(), 0).unwrap();
        let names: Vec<&str> = e.names().collect();
        assert_eq!(
            names,
            ["label", "xy", "image", "tags", "weights", "missing"]
        );
        let label = e.get("label").unwrap();
        assert_eq!(
            (label.shape(), label.data()),
            (&[][..], &Buffer::I64(vec![7]))
        );
        let xy = e.get("xy").unwrap();
        assert_eq!(xy.shape(), &[2, 2]);
        assert_eq!(xy.data(), &Buffer::F32(vec![0.5, 1.5, 2.5, 3.5]));
        let image = e.get("image").unwrap();
        assert_eq!(
            (image.shape(), image.data()),
            (&[3][..], &Buffer::U8(vec![1, 2, 3]))
        );
        let tags = e.get("tags").unwrap();
        assert_eq!(
            (tags.shape(), tags.data()),
            (&[3][..], &Buffer::I64(vec![4, 5, 6]))
        );
        for name in ["weights", "missing"] {
            let a = e.get(name).unwrap();
            assert_eq!(
                (a.shape(), a.data()),
                (&[0][..], &Buffer::F32(vec![])),
                "{name}"
            );
        }
    }

    #[test]
    fn defaults_fill_missing_and_unset_features() {
        let spec = ExampleSpec::new()
            .with(
                "score",
                FeatureSpec::fixed_len_with_default(
                    vec![2],
                    FeatureValues::Float32(vec![-1.0, 0.25]),
                ),
            )
            .with(
                "name",
                FeatureSpec::fixed_len_with_default(
                    vec![],
                    FeatureValues::Bytes(vec![b"none".to_vec()]),
                ),
            )
            .with(
                "label",
                FeatureSpec::fixed_len_with_default(vec![], FeatureValues::Int64(vec![-1])),
            );
        // "name" present but with no list set: treated as missing.
        let ex = Example::new().with("name", Feature { kind: None });
        let e = spec.parse(&ex.to_bytes(), 0).unwrap();
        assert_eq!(
            e.get("score").unwrap().data(),
            &Buffer::F32(vec![-1.0, 0.25])
        );
        assert_eq!(e.get("score").unwrap().shape(), &[2]);
        assert_eq!(e.get("name").unwrap().data(), &Buffer::U8(b"none".to_vec()));
        assert_eq!(e.get("label").unwrap().data(), &Buffer::I64(vec![-1]));
        assert_eq!(e.get("label").unwrap().shape(), &[] as &[usize]);
        // A present feature wins over the default.
        let e = spec.parse(&example().to_bytes(), 0).unwrap();
        assert_eq!(e.get("label").unwrap().data(), &Buffer::I64(vec![7]));
    }

    fn example_error(err: DataError) -> (u64, Option<String>, String) {
        match err {
            DataError::Example {
                record,
                feature,
                message,
                ..
            } => (record, feature, message),
            other => panic!("expected an Example error, got {other:?}"),
        }
    }

    #[test]
    fn missing_required_feature_names_feature_and_record() {
        let spec = ExampleSpec::new().with(
            "bbox",
            FeatureSpec::fixed_len(vec![4], FeatureDType::Float32),
        );
        let err = spec.parse(&example().to_bytes(), 12).unwrap_err();
        let text = err.to_string();
        let (record, feature, message) = example_error(err);
        assert_eq!((record, feature.as_deref()), (12, Some("bbox")));
        assert!(message.contains("missing"), "{message}");
        assert!(
            text.starts_with("tf.train.Example record 12, feature \"bbox\": required"),
            "{text}"
        );
    }

    #[test]
    fn wrong_type_says_expected_and_found() {
        let spec = ExampleSpec::new().with(
            "label",
            FeatureSpec::fixed_len(vec![], FeatureDType::Float32),
        );
        let (record, feature, message) =
            example_error(spec.parse(&example().to_bytes(), 3).unwrap_err());
        assert_eq!((record, feature.as_deref()), (3, Some("label")));
        assert!(
            message.starts_with("expected float32 (float_list), found int64_list with 1 value:"),
            "{message}"
        );
        let spec = ExampleSpec::new().with("image", FeatureSpec::var_len(FeatureDType::Int64));
        let (_, feature, message) =
            example_error(spec.parse(&example().to_bytes(), 0).unwrap_err());
        assert_eq!(feature.as_deref(), Some("image"));
        assert!(message.contains("found bytes_list"), "{message}");
    }

    #[test]
    fn wrong_length_says_expected_and_found() {
        let spec =
            ExampleSpec::new().with("xy", FeatureSpec::fixed_len(vec![3], FeatureDType::Float32));
        let (record, feature, message) =
            example_error(spec.parse(&example().to_bytes(), 5).unwrap_err());
        assert_eq!((record, feature.as_deref()), (5, Some("xy")));
        assert_eq!(message, "expected 3 float32 values for shape [3], found 4");
        // Zero values for a scalar: TensorFlow rejects this too (it does not use the default).
        let ex = Example::new().with("label", Feature::int64(vec![]));
        let spec = ExampleSpec::new().with(
            "label",
            FeatureSpec::fixed_len_with_default(vec![], FeatureValues::Int64(vec![0])),
        );
        let (_, _, message) = example_error(spec.parse(&ex.to_bytes(), 0).unwrap_err());
        assert_eq!(message, "expected 1 int64 value for shape [], found 0");
    }

    #[test]
    fn bad_specs_are_rejected_before_parsing() {
        let cases = [
            (
                FeatureSpec::FixedLen {
                    shape: vec![2],
                    dtype: FeatureDType::Int64,
                    default_value: Some(FeatureValues::Float32(vec![0.0, 1.0])),
                },
                "default_value is float32 but the feature's dtype is int64",
            ),
            (
                FeatureSpec::fixed_len_with_default(vec![2, 2], FeatureValues::Int64(vec![0])),
                "default_value has 1 values but shape [2, 2] needs 4",
            ),
            (
                FeatureSpec::fixed_len(vec![2], FeatureDType::Bytes),
                "must have shape []",
            ),
            (
                FeatureSpec::var_len(FeatureDType::Bytes),
                "VarLenFeature of bytes is not supported",
            ),
        ];
        for (feature_spec, expected) in cases {
            let spec = ExampleSpec::new().with("f", feature_spec);
            let err = spec.parse(&example().to_bytes(), 0).unwrap_err();
            let DataError::InvalidArgument(message) = &err else {
                panic!("expected InvalidArgument, got {err:?}");
            };
            assert!(
                message.starts_with("parse spec, feature \"f\": "),
                "{message}"
            );
            assert!(message.contains(expected), "{message}");
        }
    }
}
