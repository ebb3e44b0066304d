//! [`Dataset::tfrecord`] (tf.data's `TFRecordDataset`) and [`Dataset::parse_example`]
//! (`map(tf.io.parse_single_example)`).

use std::path::PathBuf;
use std::sync::Arc;

use super::framing::TfRecordReader;
use super::spec::ExampleSpec;
use crate::compression::Compression;
use crate::dataset::{BoxIter, Cardinality, Dataset, Fingerprint, Node, Parallelism};
use crate::element::{Array, Buffer, Element};
use crate::error::{DataError, Result};

/// The component that [`Dataset::tfrecord`] elements hold their record in.
pub const RECORD: &str = "record";

/// Internal component carrying a record's position from [`Dataset::parse_example`]'s
/// numbering step to its (possibly parallel) parsing step.
const RECORD_INDEX: &str = "__kiln_record_index";

impl Dataset {
    /// `tf.data.TFRecordDataset(filenames, compression_type)`: one element per record, the
    /// files read one after another in order, each streamed through a 256 KiB buffer.
    ///
    /// Each element has one component, [`RECORD`] (`"record"`): the record's raw bytes as a
    /// 1-D [`crate::DType::U8`] array of shape `[n]` (kiln has no string dtype). Cardinality
    /// is [`Cardinality::Unknown`], as in tf.data.
    ///
    /// `files` may be local paths, `file://` URLs or `s3://bucket/key` URLs
    /// ([`crate::storage`]); objects stream through ranged GETs with read-ahead.
    ///
    /// Errors come in stream order: a file that cannot be opened yields one
    /// [`DataError::Io`]; a damaged record yields [`DataError::TfRecord`] (`"truncated record at
    /// byte N"` / `"corrupted record at byte N"`, naming the file and the record index) and
    /// ends that file; iteration then goes on with the next file.
    pub fn tfrecord(files: Vec<PathBuf>, compression_type: Compression) -> Dataset {
        Dataset::from_node(TfRecordNode {
            files: Arc::new(files),
            compression: compression_type,
        })
    }

    /// `map(lambda r: tf.io.parse_single_example(r, spec), num_parallel_calls)`: parses the
    /// [`RECORD`] component of every element (as [`Dataset::tfrecord`] makes) with
    /// [`ExampleSpec::parse`], replacing the element by the parsed features. The output keeps
    /// the input order whatever `num_parallel_calls` is.
    ///
    /// Errors: a spec that fails [`ExampleSpec::check`] makes iteration yield a single
    /// [`DataError::InvalidArgument`]; a record that does not parse yields
    /// [`DataError::Example`] naming the record's 0-based position in this dataset's input
    /// and the feature; an element without a 1-D `uint8` `"record"` component yields
    /// [`DataError::MissingComponent`] or [`DataError::InvalidArgument`].
    pub fn parse_example(self, spec: ExampleSpec, num_parallel_calls: Parallelism) -> Dataset {
        if let Err(err) = spec.check() {
            return Dataset::invalid(format!("parse_example: {err}"));
        }
        let spec = Arc::new(spec);
        Dataset::from_node(NumberNode { input: self }).map(
            move |mut element| {
                let index = element
                    .remove(RECORD_INDEX)
                    .map(|a| a.data().to_i64()[0] as u64)
                    .unwrap_or_default();
                let record = element.require(RECORD)?;
                let Buffer::U8(bytes) = record.data() else {
                    return Err(DataError::InvalidArgument(format!(
                        "parse_example: record {index}'s {RECORD:?} component is {} of shape \
                         {:?}; expected the uint8 bytes of a serialized tf.train.Example \
                         (as Dataset::tfrecord makes)",
                        record.dtype(),
                        record.shape()
                    )));
                };
                spec.parse_example(&super::Example::from_bytes(bytes, index)?, index)
            },
            num_parallel_calls,
        )
    }
}

struct TfRecordNode {
    files: Arc<Vec<PathBuf>>,
    compression: Compression,
}

impl Node for TfRecordNode {
    fn iter(&self) -> BoxIter {
        Box::new(TfRecordIter {
            files: Arc::clone(&self.files),
            compression: self.compression,
            next_file: 0,
            reader: None,
        })
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Unknown
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("tfrecord")
            .str(self.compression.tf_name())
            .files(&self.files)
            .finish()
    }
}

struct TfRecordIter {
    files: Arc<Vec<PathBuf>>,
    compression: Compression,
    next_file: usize,
    reader: Option<TfRecordReader>,
}

impl Iterator for TfRecordIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        loop {
            if let Some(reader) = &mut self.reader {
                match reader.read_record() {
                    Ok(Some(bytes)) => {
                        let n = bytes.len();
                        let array = Array::new(vec![n], Buffer::U8(bytes)).expect("[n] holds n");
                        return Some(Ok(Element::new().with(RECORD, array)));
                    }
                    Ok(None) => self.reader = None,
                    Err(err) => {
                        self.reader = None;
                        return Some(Err(err));
                    }
                }
            }
            let path = self.files.get(self.next_file)?;
            self.next_file += 1;
            match TfRecordReader::open(path, self.compression) {
                Ok(reader) => self.reader = Some(reader),
                Err(err) => return Some(Err(err)),
            }
        }
    }
}

/// Adds each input element's position as the scalar `int64` component [`RECORD_INDEX`].
struct NumberNode {
    input: Dataset,
}

impl Node for NumberNode {
    fn iter(&self) -> BoxIter {
        Box::new(self.input.iter_within().enumerate().map(|(i, r)| {
            r.map(|mut e| {
                let index = Array::scalar(Buffer::I64(vec![i as i64])).expect("scalar");
                e.insert(RECORD_INDEX, index);
                e
            })
        }))
    }

    fn cardinality(&self) -> Cardinality {
        self.input.cardinality()
    }
}
