//! [`Dataset::text_line_dataset`]: `tf.data.TextLineDataset`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::Arc;

use super::open;
use crate::dataset::{BoxIter, Cardinality, Dataset, Fingerprint, Node};
use crate::element::{Array, Element};
use crate::error::{DataError, Result};
use crate::storage::SourceReader;

/// Component name of [`Dataset::text_line_dataset`]'s elements.
pub const TEXT_LINE_COMPONENT: &str = "line";

/// Read buffer per open file: 256 KiB, TextLineDataset's default `buffer_size`.
const BUFFER_SIZE: usize = 256 * 1024;

impl Dataset {
    /// `tf.data.TextLineDataset(filenames)`: one element per line of each file, files in the
    /// order given, each read front to back as iteration reaches it (streaming; only the
    /// current file is open).
    ///
    /// Elements are `{"line": string []}` ([`TEXT_LINE_COMPONENT`]) holding the line's raw
    /// bytes (not checked for UTF-8, as TensorFlow's `tf.string`). Line splitting follows
    /// TensorFlow's `InputBuffer::ReadLine` (`tensorflow/core/lib/io/inputbuffer.cc`):
    /// lines end at `"\n"`, which is removed together with one `"\r"` before it (so `"\r\n"`
    /// files read like `"\n"` files); a final line without a newline is still an element
    /// (after removing a trailing `"\r"`) unless it is empty, so a file ending in `"\n"` has
    /// no extra empty element. Empty lines in the middle are empty elements. No byte-order
    /// mark is removed. Cardinality is [`Cardinality::Unknown`]. Files may be local paths,
    /// `file://` URLs or `s3://bucket/key` URLs ([`crate::storage`]).
    ///
    /// # Errors (yielded during iteration)
    /// [`DataError::Io`] naming the file when it cannot be opened or a read fails; iteration
    /// then goes on with the next file.
    pub fn text_line_dataset<P: Into<PathBuf>>(files: impl IntoIterator<Item = P>) -> Dataset {
        Dataset::from_node(TextLineNode {
            files: Arc::new(files.into_iter().map(Into::into).collect()),
        })
    }
}

struct TextLineNode {
    files: Arc<Vec<PathBuf>>,
}

impl Node for TextLineNode {
    fn iter(&self) -> BoxIter {
        Box::new(TextLineIter {
            files: Arc::clone(&self.files),
            next_file: 0,
            reader: None,
            buf: Vec::new(),
        })
    }

    fn cardinality(&self) -> Cardinality {
        if self.files.is_empty() {
            Cardinality::Finite(0)
        } else {
            Cardinality::Unknown
        }
    }

    fn fingerprint(&self) -> u64 {
        Fingerprint::new("text_line").files(&self.files).finish()
    }
}

struct TextLineIter {
    files: Arc<Vec<PathBuf>>,
    next_file: usize,
    /// The open file and its index in `files`.
    reader: Option<(BufReader<SourceReader>, usize)>,
    buf: Vec<u8>,
}

impl TextLineIter {
    /// The next line of the open file: `Ok(None)` at its end.
    fn read_line(&mut self) -> Result<Option<Vec<u8>>> {
        let Some((reader, index)) = self.reader.as_mut() else {
            return Ok(None);
        };
        loop {
            self.buf.clear();
            let n = reader
                .read_until(b'\n', &mut self.buf)
                .map_err(|source| DataError::Io {
                    path: self.files[*index].clone(),
                    source,
                })?;
            if n == 0 {
                return Ok(None);
            }
            let complete = self.buf.last() == Some(&b'\n');
            if complete {
                self.buf.pop();
            }
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
            if complete || !self.buf.is_empty() {
                return Ok(Some(std::mem::take(&mut self.buf)));
            }
            // A lone "\r" at the end of the file: no element, as in TensorFlow.
        }
    }
}

impl Iterator for TextLineIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        loop {
            if self.reader.is_none() {
                let index = self.next_file;
                let path = self.files.get(index)?;
                self.next_file += 1;
                match open(path) {
                    Ok(file) => {
                        self.reader = Some((BufReader::with_capacity(BUFFER_SIZE, file), index))
                    }
                    Err(err) => return Some(Err(err)),
                }
            }
            match self.read_line() {
                Ok(Some(line)) => {
                    return Some(Ok(
                        Element::new().with(TEXT_LINE_COMPONENT, Array::string_scalar(line))
                    ));
                }
                Ok(None) => self.reader = None,
                Err(err) => {
                    self.reader = None;
                    return Some(Err(err));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::testutil::{strings, write};

    #[test]
    fn lines_of_several_files_in_order_with_crlf_and_no_final_newline() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(
            dir.path(),
            "a.txt",
            b"first\nsecond\r\n\nlast without newline",
        );
        let b = write(dir.path(), "b.txt", b"b1\r\nb2\r\n");
        let c = write(dir.path(), "c.txt", b"");
        let d = write(dir.path(), "d.txt", b"cr\r in the middle\nends in cr\r");
        let ds = Dataset::text_line_dataset([&a, &c, &b, &d]);
        assert_eq!(ds.cardinality(), Cardinality::Unknown);
        assert_eq!(
            strings(&ds, TEXT_LINE_COMPONENT),
            vec![
                "first",
                "second",
                "",
                "last without newline",
                "b1",
                "b2",
                "cr\r in the middle",
                "ends in cr",
            ]
        );
        // Every iteration reads the files again.
        assert_eq!(strings(&ds, "line").len(), 8);
    }

    #[test]
    fn trailing_newline_and_lone_cr_add_no_element_and_bytes_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a.txt", b"x\n\n");
        let b = write(dir.path(), "b.txt", b"y\r");
        let c = write(dir.path(), "c.txt", b"\xef\xbb\xbfbom\n\xff\xfe\n");
        let ds = Dataset::text_line_dataset([a, b]);
        assert_eq!(strings(&ds, "line"), vec!["x", "", "y"]);
        let raw: Vec<Vec<u8>> = Dataset::text_line_dataset([c])
            .iter()
            .map(|e| e.unwrap().get("line").unwrap().data().as_strings().unwrap()[0].clone())
            .collect();
        assert_eq!(raw, vec![b"\xef\xbb\xbfbom".to_vec(), vec![0xff, 0xfe]]);
    }

    #[test]
    fn lines_longer_than_the_read_buffer_are_whole() {
        let dir = tempfile::tempdir().unwrap();
        let long = "z".repeat(BUFFER_SIZE * 2 + 7);
        let a = write(
            dir.path(),
            "long.txt",
            format!("{long}\r\nshort").as_bytes(),
        );
        let lines = strings(&Dataset::text_line_dataset([a]), "line");
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], long);
        assert_eq!(lines[1], "short");
    }

    #[test]
    fn a_missing_file_is_an_io_error_naming_it_then_the_next_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.txt");
        let b = write(dir.path(), "b.txt", b"after\n");
        let results: Vec<_> = Dataset::text_line_dataset([missing.clone(), b])
            .iter()
            .collect();
        assert_eq!(results.len(), 2);
        match &results[0] {
            Err(DataError::Io { path, .. }) => assert_eq!(path, &missing),
            other => panic!("expected an Io error, got {other:?}"),
        }
        assert!(
            results[0]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("missing.txt")
        );
        let line = results[1].as_ref().unwrap().get("line").unwrap();
        assert_eq!(line.data().as_strings().unwrap(), &[b"after".to_vec()]);
        let none: Vec<PathBuf> = Vec::new();
        assert_eq!(
            Dataset::text_line_dataset(none).cardinality(),
            Cardinality::Finite(0)
        );
    }
}
