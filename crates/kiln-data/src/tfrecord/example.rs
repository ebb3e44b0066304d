//! `tf.train.Example` protocol buffers: the messages of TensorFlow's
//! `tensorflow/core/example/example.proto` and `feature.proto` (proto3, package `tensorflow`),
//! written out by hand for `prost` (no `protoc`, no build script):
//!
//! ```text
//! message Example   { Features features = 1; }
//! message Features  { map<string, Feature> feature = 1; }
//! message Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//!                                  Int64List int64_list = 3; } }
//! message BytesList { repeated bytes value = 1; }
//! message FloatList { repeated float value = 1 [packed = true]; }
//! message Int64List { repeated int64 value = 1 [packed = true]; }
//! ```
//!
//! Encoding writes repeated floats and int64s packed, as TensorFlow does; decoding accepts
//! packed and unpacked encodings alike (the protobuf rule for repeated scalars). The feature
//! map is a `BTreeMap`, so encoding is deterministic: entries in byte order of their names,
//! each with both key and value, exactly as protobuf's `SerializeToString(deterministic=True)`
//! (checked against TensorFlow by `tests/interop/tfrecord_interop.py`).

use std::collections::BTreeMap;

use prost::bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::{DecodeError, Message};

use crate::error::{DataError, Result};

/// `tensorflow.Example`: a set of named features — one record of a typical TFRecord file.
#[derive(Clone, PartialEq, Message)]
pub struct Example {
    /// Field 1; absent and empty are the same to readers.
    #[prost(message, optional, tag = "1")]
    pub features: Option<Features>,
}

/// `tensorflow.Features`: feature name to value list.
///
/// Its [`Message`] implementation is written by hand rather than derived: prost leaves out a
/// map entry's key or value when it equals the default (`""`, an empty `Feature`), while the
/// protobuf runtimes TensorFlow uses (C++, Python upb) always write both. Writing both keeps
/// kiln's bytes identical to TensorFlow's; decoding accepts either form.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Features {
    /// Field 1, `map<string, Feature>`.
    pub feature: BTreeMap<String, Feature>,
}

/// Bytes of one map entry's body: key (field 1) and value (field 2).
fn entry_len(name: &String, feature: &Feature) -> usize {
    encoding::string::encoded_len(1, name) + encoding::message::encoded_len(2, feature)
}

impl Message for Features {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        for (name, feature) in &self.feature {
            encoding::encode_key(1, WireType::LengthDelimited, buf);
            encoding::encode_varint(entry_len(name, feature) as u64, buf);
            encoding::string::encode(1, name, buf);
            encoding::message::encode(2, feature, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> std::result::Result<(), DecodeError> {
        if tag == 1 {
            encoding::check_wire_type(WireType::LengthDelimited, wire_type)?;
            encoding::btree_map::merge(
                encoding::string::merge,
                encoding::message::merge,
                &mut self.feature,
                buf,
                ctx,
            )
            .map_err(|mut err| {
                err.push("Features", "feature");
                err
            })
        } else {
            encoding::skip_field(wire_type, tag, buf, ctx)
        }
    }

    fn encoded_len(&self) -> usize {
        self.feature
            .iter()
            .map(|(name, feature)| {
                let body = entry_len(name, feature);
                encoding::key_len(1) + encoding::encoded_len_varint(body as u64) + body
            })
            .sum()
    }

    fn clear(&mut self) {
        self.feature.clear();
    }
}

/// `tensorflow.Feature`: one list of bytes strings, float32s or int64s.
#[derive(Clone, PartialEq, Message)]
pub struct Feature {
    /// The `kind` oneof; `None` when no list is set (readers treat it as missing).
    #[prost(oneof = "FeatureKind", tags = "1, 2, 3")]
    pub kind: Option<FeatureKind>,
}

/// The `kind` oneof of `tensorflow.Feature`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum FeatureKind {
    /// Field 1: byte strings (`tf.string`).
    #[prost(message, tag = "1")]
    BytesList(BytesList),
    /// Field 2: 32-bit floats (`tf.float32`).
    #[prost(message, tag = "2")]
    FloatList(FloatList),
    /// Field 3: 64-bit integers (`tf.int64`).
    #[prost(message, tag = "3")]
    Int64List(Int64List),
}

/// `tensorflow.BytesList`.
#[derive(Clone, PartialEq, Message)]
pub struct BytesList {
    /// Field 1, `repeated bytes`.
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub value: Vec<Vec<u8>>,
}

/// `tensorflow.FloatList`.
#[derive(Clone, PartialEq, Message)]
pub struct FloatList {
    /// Field 1, `repeated float` (packed when written; either form read).
    #[prost(float, repeated, tag = "1")]
    pub value: Vec<f32>,
}

/// `tensorflow.Int64List`.
#[derive(Clone, PartialEq, Message)]
pub struct Int64List {
    /// Field 1, `repeated int64` (packed when written; either form read).
    #[prost(int64, repeated, tag = "1")]
    pub value: Vec<i64>,
}

impl Feature {
    /// A `bytes_list` feature (`tf.train.Feature(bytes_list=tf.train.BytesList(value=…))`).
    pub fn bytes<B: Into<Vec<u8>>>(values: impl IntoIterator<Item = B>) -> Feature {
        Feature {
            kind: Some(FeatureKind::BytesList(BytesList {
                value: values.into_iter().map(Into::into).collect(),
            })),
        }
    }

    /// A `float_list` feature.
    pub fn float32(values: impl Into<Vec<f32>>) -> Feature {
        Feature {
            kind: Some(FeatureKind::FloatList(FloatList {
                value: values.into(),
            })),
        }
    }

    /// An `int64_list` feature.
    pub fn int64(values: impl Into<Vec<i64>>) -> Feature {
        Feature {
            kind: Some(FeatureKind::Int64List(Int64List {
                value: values.into(),
            })),
        }
    }

    /// The list's proto name: `"bytes_list"`, `"float_list"`, `"int64_list"`, or `"no list"`
    /// when the oneof is unset.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            Some(FeatureKind::BytesList(_)) => "bytes_list",
            Some(FeatureKind::FloatList(_)) => "float_list",
            Some(FeatureKind::Int64List(_)) => "int64_list",
            None => "no list",
        }
    }

    /// Number of values in the list (0 when unset).
    pub fn len(&self) -> usize {
        match &self.kind {
            Some(FeatureKind::BytesList(l)) => l.value.len(),
            Some(FeatureKind::FloatList(l)) => l.value.len(),
            Some(FeatureKind::Int64List(l)) => l.value.len(),
            None => 0,
        }
    }

    /// True when the feature holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Example {
    /// An example with an empty feature map, like Python's
    /// `tf.train.Example(features=tf.train.Features(feature={}))`: its `features` field is set,
    /// so it serializes to the same 2 bytes (`0a 00`). ([`Example::default`] leaves `features`
    /// unset: 0 bytes; readers see no difference.)
    pub fn new() -> Example {
        Example {
            features: Some(Features::default()),
        }
    }

    /// Adds (or replaces) feature `name`; returns `self` for chaining.
    pub fn with(mut self, name: impl Into<String>, feature: Feature) -> Example {
        self.features
            .get_or_insert_with(Features::default)
            .feature
            .insert(name.into(), feature);
        self
    }

    /// Feature `name`, if present.
    pub fn feature(&self, name: &str) -> Option<&Feature> {
        self.features.as_ref()?.feature.get(name)
    }

    /// The serialized protobuf (`example.SerializeToString(deterministic=True)`).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.encode_to_vec()
    }

    /// Parses a serialized `tf.train.Example`; `record` (its position in the input) names
    /// it in errors.
    ///
    /// # Errors
    /// [`DataError::Example`] when the bytes are not a valid `tf.train.Example`.
    pub fn from_bytes(bytes: &[u8], record: u64) -> Result<Example> {
        Example::decode(bytes).map_err(|err| DataError::Example {
            path: None,
            offset: None,
            record,
            feature: None,
            message: format!(
                "cannot decode {} bytes as a tf.train.Example protobuf ({err}); is the file \
                 made of tf.train.Example records, with the right compression_type?",
                bytes.len()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_encoding_of_a_small_example() {
        let example = Example::new()
            .with("b", Feature::bytes([b"hi".to_vec()]))
            .with("a", Feature::int64(vec![1, -1]));
        // Hand-encoded, features sorted by name: "a" then "b".
        //   int64 -1 as a varint: ten bytes ff ff ff ff ff ff ff ff ff 01.
        // Int64List { value: packed, 11 bytes }
        let int64_list = [[0x0a, 11, 0x01].as_slice(), &[0xff; 9], &[0x01]].concat();
        let feature_a = [&[0x1a, int64_list.len() as u8][..], &int64_list].concat();
        let entry_a = [
            &[0x0a, 1, b'a', 0x12, feature_a.len() as u8][..],
            &feature_a,
        ]
        .concat();
        let feature_b = [0x0a, 4, 0x0a, 2, b'h', b'i']; // Feature { BytesList { "hi" } }
        let entry_b = [
            &[0x0a, 1, b'b', 0x12, feature_b.len() as u8][..],
            &feature_b,
        ]
        .concat();
        let features = [
            &[0x0a, entry_a.len() as u8][..],
            &entry_a,
            &[0x0a, entry_b.len() as u8],
            &entry_b,
        ]
        .concat();
        let expected = [&[0x0a, features.len() as u8][..], &features].concat();
        assert_eq!(example.to_bytes(), expected);
        assert_eq!(Example::from_bytes(&expected, 0).unwrap(), example);
        // Map entries always carry key and value, even "" and an unset Feature (as protobuf's
        // C++ and Python runtimes write them): entry = 0a 00 (key "") 12 00 (empty Feature).
        let unset = Example::new().with("", Feature { kind: None });
        assert_eq!(unset.to_bytes(), vec![0x0a, 6, 0x0a, 4, 0x0a, 0, 0x12, 0]);
        assert_eq!(Example::from_bytes(&unset.to_bytes(), 0).unwrap(), unset);
        // Entries without key or value (as prost's derived maps write them) decode the same.
        assert_eq!(Example::from_bytes(&[0x0a, 2, 0x0a, 0], 0).unwrap(), unset);
        // Empty: features set (Python's idiom) vs unset.
        assert_eq!(Example::new().to_bytes(), vec![0x0a, 0x00]);
        assert_eq!(Example::default().to_bytes(), Vec::<u8>::new());
        assert_eq!(Example::from_bytes(&[], 0).unwrap(), Example::default());
    }

    #[test]
    fn round_trip_with_edge_values() {
        let example = Example::new()
            .with("image", Feature::bytes([vec![0u8, 255, 10, 13], vec![]]))
            .with(
                "x",
                Feature::float32(vec![0.0, -0.0, 1.5, f32::MIN_POSITIVE / 2.0, f32::INFINITY]),
            )
            .with("id", Feature::int64(vec![i64::MIN, i64::MAX, 0]))
            .with("empty", Feature::float32(vec![]))
            .with("unset", Feature { kind: None });
        let back = Example::from_bytes(&example.to_bytes(), 3).unwrap();
        assert_eq!(back, example);
        let Some(FeatureKind::FloatList(list)) = &back.feature("x").unwrap().kind else {
            panic!("x lost its float_list");
        };
        assert!(list.value[1].is_sign_negative());
        assert_eq!(back.feature("unset").unwrap().kind_name(), "no list");
        assert_eq!(back.feature("image").unwrap().len(), 2);
    }

    #[test]
    fn packed_and_unpacked_repeated_scalars_decode_alike() {
        // FloatList [1.0, 2.0]: packed is field 1, wire type 2 (0x0a), 8 bytes; unpacked is
        // field 1, wire type 5 (0x0d) per value.
        let packed_floats = [0x0a, 8, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40];
        let unpacked_floats = [0x0d, 0, 0, 0x80, 0x3f, 0x0d, 0, 0, 0, 0x40];
        for bytes in [&packed_floats[..], &unpacked_floats[..]] {
            assert_eq!(FloatList::decode(bytes).unwrap().value, vec![1.0, 2.0]);
        }
        // Int64List [3, 300]: packed 0x0a len 3, [03, ac 02]; unpacked 0x08 per value.
        let packed_ints = [0x0a, 3, 0x03, 0xac, 0x02];
        let unpacked_ints = [0x08, 0x03, 0x08, 0xac, 0x02];
        for bytes in [&packed_ints[..], &unpacked_ints[..]] {
            assert_eq!(Int64List::decode(bytes).unwrap().value, vec![3, 300]);
        }
        // Mixed within one message: both parts append.
        let mixed = [0x08, 0x03, 0x0a, 2, 0xac, 0x02];
        assert_eq!(Int64List::decode(&mixed[..]).unwrap().value, vec![3, 300]);
        // A whole Example with an unpacked float list.
        let feature = [&[0x12, unpacked_floats.len() as u8][..], &unpacked_floats].concat();
        let entry = [&[0x0a, 1, b'f', 0x12, feature.len() as u8][..], &feature].concat();
        let features = [&[0x0a, entry.len() as u8][..], &entry].concat();
        let bytes = [&[0x0a, features.len() as u8][..], &features].concat();
        let example = Example::from_bytes(&bytes, 0).unwrap();
        assert_eq!(
            example,
            Example::new().with("f", Feature::float32(vec![1.0, 2.0]))
        );
    }

    #[test]
    fn garbage_is_an_example_error_naming_the_record() {
        let err = Example::from_bytes(&[0x0a, 0x05, 0x01], 17).unwrap_err();
        assert!(
            matches!(err, DataError::Example { record: 17, .. }),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.starts_with("tf.train.Example record 17: cannot decode 3 bytes"),
            "{text}"
        );
    }
}
