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
use crate::sources::{path_bytes, path_from_bytes};

/// The component that [`Dataset::tfrecord`] elements hold their record in.
pub const RECORD: &str = "record";

/// Internal component carrying a record's position from [`Dataset::parse_example`]'s
/// numbering step to its (possibly parallel) parsing step: in the dataset, or in its file
/// when [`RECORD_FILE`] is there too.
const RECORD_INDEX: &str = "__kiln_record_index";

/// Internal component naming a record's file, when [`Dataset::parse_example`] reads a
/// [`Dataset::tfrecord`] source itself.
const RECORD_FILE: &str = "__kiln_record_file";

/// Internal component holding a record's byte offset in its file, next to [`RECORD_FILE`].
const RECORD_OFFSET: &str = "__kiln_record_offset";

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
            annotate: false,
        })
    }

    /// `map(lambda r: tf.io.parse_single_example(r, spec), num_parallel_calls)`: parses the
    /// [`RECORD`] component of every element (as [`Dataset::tfrecord`] makes) with
    /// [`ExampleSpec::parse`], replacing the element by the parsed features. The output keeps
    /// the input order whatever `num_parallel_calls` is.
    ///
    /// Errors: a spec that fails [`ExampleSpec::check`] makes iteration yield a single
    /// [`DataError::InvalidArgument`]; a record that does not parse yields
    /// [`DataError::Example`] naming the feature and the record: its file, 0-based index in
    /// the file and byte offset when this dataset is a [`Dataset::tfrecord`] source, else its
    /// 0-based position in this dataset; an element without a 1-D `uint8` `"record"` component yields
    /// [`DataError::MissingComponent`] or [`DataError::InvalidArgument`].
    pub fn parse_example(self, spec: ExampleSpec, num_parallel_calls: Parallelism) -> Dataset {
        if let Err(err) = spec.check() {
            return Dataset::invalid(format!("parse_example: {err}"));
        }
        let spec = Arc::new(spec);
        let numbered = match self.node_as::<TfRecordNode>() {
            Some(source) => Dataset::from_node(TfRecordNode {
                annotate: true,
                files: Arc::clone(&source.files),
                compression: source.compression,
            }),
            None => Dataset::from_node(NumberNode { input: self }),
        };
        numbered.map(
            move |mut element| {
                let index = element
                    .remove(RECORD_INDEX)
                    .map(|a| a.data().to_i64()[0] as u64)
                    .unwrap_or_default();
                let file = element
                    .remove(RECORD_FILE)
                    .and_then(|a| a.data().as_strings().map(|s| path_from_bytes(&s[0])));
                let offset = element
                    .remove(RECORD_OFFSET)
                    .map(|a| a.data().to_i64()[0] as u64);
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
                super::Example::from_bytes(bytes, index)
                    .and_then(|example| spec.parse_example(&example, index))
                    .map_err(|err| match (err, file) {
                        (
                            DataError::Example {
                                path: None,
                                record,
                                feature,
                                message,
                                ..
                            },
                            Some(path),
                        ) => DataError::Example {
                            path: Some(path),
                            offset,
                            record,
                            feature,
                            message,
                        },
                        (err, _) => err,
                    })
            },
            num_parallel_calls,
        )
    }
}

struct TfRecordNode {
    files: Arc<Vec<PathBuf>>,
    compression: Compression,
    /// Add each record's file and index in it ([`RECORD_FILE`], [`RECORD_INDEX`]), for
    /// `parse_example`'s errors.
    annotate: bool,
}

impl Node for TfRecordNode {
    fn iter(&self) -> BoxIter {
        Box::new(TfRecordIter {
            files: Arc::clone(&self.files),
            compression: self.compression,
            annotate: self.annotate,
            next_file: 0,
            reader: None,
        })
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Unknown
    }

    /// The annotations change no parsed element, so they are not part of it.
    fn fingerprint(&self) -> u64 {
        Fingerprint::new("tfrecord")
            .str(self.compression.tf_name())
            .files(&self.files)
            .finish()
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

struct TfRecordIter {
    files: Arc<Vec<PathBuf>>,
    compression: Compression,
    annotate: bool,
    next_file: usize,
    reader: Option<TfRecordReader>,
}

impl Iterator for TfRecordIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        loop {
            if let Some(reader) = &mut self.reader {
                let (index, offset) = (reader.index(), reader.offset());
                match reader.read_record() {
                    Ok(Some(bytes)) => {
                        let n = bytes.len();
                        let array = Array::new(vec![n], Buffer::U8(bytes)).expect("[n] holds n");
                        let mut element = Element::new().with(RECORD, array);
                        if self.annotate {
                            let file = Array::string_scalar(path_bytes(reader.path()));
                            element.insert(RECORD_FILE, file);
                            let index = Array::scalar(Buffer::I64(vec![index as i64]));
                            element.insert(RECORD_INDEX, index.expect("scalar"));
                            let offset = Array::scalar(Buffer::I64(vec![offset as i64]));
                            element.insert(RECORD_OFFSET, offset.expect("scalar"));
                        }
                        return Some(Ok(element));
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

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("parse_example_numbering")
            .input(self.input.fingerprint())
            .finish()
    }
}
