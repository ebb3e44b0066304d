//! TFRecord files and `tf.train.Example` records — TensorFlow's standard on-disk format.
//!
//! * [`framing`]: the record framing of `tensorflow/core/lib/io/record_writer.cc` (length,
//!   masked CRC-32C, data, masked CRC-32C) and the streaming [`TfRecordReader`].
//! * [`TfRecordWriter`]: `tf.io.TFRecordWriter`, writing to a temporary name until
//!   [`finish`](TfRecordWriter::finish) renames it, so a partial file never looks complete.
//! * [`Dataset::tfrecord`](crate::Dataset::tfrecord): `tf.data.TFRecordDataset`, elements with
//!   one `"record"` component of raw bytes (1-D `uint8`).
//! * [`example`]: the `tf.train.Example` protobuf messages, encoded and decoded with `prost`.
//! * [`spec`]: `tf.io.parse_single_example` with `FixedLenFeature` / `VarLenFeature`, and
//!   [`Dataset::parse_example`](crate::Dataset::parse_example) to apply it to a dataset.
//!
//! All three of TensorFlow's `compression_type`s are supported ([`Compression`]); the
//! compression wraps the whole file.
//!
//! ```
//! use kiln_data::tfrecord::{
//!     Example, ExampleSpec, Feature, FeatureDType, FeatureSpec, TfRecordWriter,
//! };
//! use kiln_data::{Buffer, Compression, Dataset, Parallelism};
//!
//! let path = std::env::temp_dir().join(format!("kiln-doc-{}.tfrecord", std::process::id()));
//! let mut writer = TfRecordWriter::create(&path, Compression::Gzip).unwrap();
//! for i in 0..3 {
//!     let example = Example::new()
//!         .with("x", Feature::float32(vec![i as f32, 0.5]))
//!         .with("label", Feature::int64(vec![i]));
//!     writer.write(&example.to_bytes()).unwrap();
//! }
//! writer.finish().unwrap();
//!
//! let spec = ExampleSpec::new()
//!     .with("x", FeatureSpec::fixed_len(vec![2], FeatureDType::Float32))
//!     .with("label", FeatureSpec::fixed_len(vec![], FeatureDType::Int64));
//! let ds = Dataset::tfrecord(vec![path.clone()], Compression::Gzip)
//!     .parse_example(spec, Parallelism::Sequential)
//!     .batch(3, false);
//! let batch = ds.iter().next().unwrap().unwrap();
//! assert_eq!(batch.get("x").unwrap().shape(), &[3, 2]);
//! assert_eq!(batch.get("label").unwrap().data(), &Buffer::I64(vec![0, 1, 2]));
//! std::fs::remove_file(path).unwrap();
//! ```

mod dataset;
pub mod example;
pub mod framing;
pub mod spec;
mod writer;

pub use crate::compression::Compression;
pub use dataset::RECORD;
pub use example::{BytesList, Example, Feature, FeatureKind, Features, FloatList, Int64List};
pub use framing::{TfRecordReader, encode_record, masked_crc32c, write_record};
pub use spec::{ExampleSpec, FeatureDType, FeatureSpec, FeatureValues};
pub use writer::TfRecordWriter;

#[cfg(test)]
mod tests;
