//! [`Dataset::text_line_dataset`]: `tf.data.TextLineDataset`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::Arc;

use super::open;
use crate::compression::Compression;
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
        Dataset::text_line_dataset_with(files, Compression::None)
    }

    /// `tf.data.TextLineDataset(filenames, compression_type)`: [`Dataset::text_line_dataset`]
    /// over files compressed as a whole with GZIP or ZLIB ([`Compression`]; a `.gz` name is
    /// not enough, as in TensorFlow: say `Compression::Gzip`). Lines are split after
    /// decompression, by the same rules.
    ///
    /// # Errors (yielded during iteration)
    /// As [`Dataset::text_line_dataset`]; a damaged or truncated compressed stream is a
    /// [`DataError::Record`] naming the file, the line being read (1-based) and its
    /// uncompressed byte offset, after the lines before it have been yielded (TensorFlow
    /// raises `DataLossError` there).
    pub fn text_line_dataset_with<P: Into<PathBuf>>(
        files: impl IntoIterator<Item = P>,
        compression_type: Compression,
    ) -> Dataset {
        Dataset::from_node(TextLineNode {
            files: Arc::new(files.into_iter().map(Into::into).collect()),
            compression: compression_type,
        })
    }
}

struct TextLineNode {
    files: Arc<Vec<PathBuf>>,
    compression: Compression,
}

impl Node for TextLineNode {
    fn iter(&self) -> BoxIter {
        Box::new(TextLineIter {
            files: Arc::clone(&self.files),
            compression: self.compression,
            next_file: 0,
            reader: None,
            buf: Vec::new(),
            lines: 0,
            offset: 0,
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
        let fp = Fingerprint::new("text_line");
        // Uncompressed files keep the fingerprint they had before compression was supported.
        let fp = match self.compression {
            Compression::None => fp,
            c => fp.str(c.tf_name()),
        };
        fp.files(&self.files).finish()
    }
}

struct TextLineIter {
    files: Arc<Vec<PathBuf>>,
    compression: Compression,
    next_file: usize,
    /// The open file (decompressing) and its index in `files`.
    reader: Option<(BufReader<SourceReader>, usize)>,
    buf: Vec<u8>,
    /// Lines read from the open file so far.
    lines: u64,
    /// Uncompressed bytes read from the open file so far.
    offset: u64,
}

impl TextLineIter {
    /// The next line of the open file: `Ok(None)` at its end.
    fn read_line(&mut self) -> Result<Option<Vec<u8>>> {
        let Some((reader, index)) = self.reader.as_mut() else {
            return Ok(None);
        };
        loop {
            self.buf.clear();
            let path = &self.files[*index];
            let n = match reader.read_until(b'\n', &mut self.buf) {
                Ok(n) => n,
                Err(source) if self.compression != Compression::None => {
                    return Err(DataError::Record {
                        path: path.clone(),
                        line: self.lines + 1,
                        message: format!(
                            "cannot decompress the {} stream at uncompressed byte {}: {source} \
                             (a truncated or damaged file, or not {0}-compressed)",
                            self.compression.tf_name(),
                            self.offset + self.buf.len() as u64,
                        ),
                    });
                }
                Err(source) => {
                    return Err(DataError::Io {
                        path: path.clone(),
                        source,
                    });
                }
            };
            if n == 0 {
                return Ok(None);
            }
            self.offset += n as u64;
            self.lines += 1;
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
                match open(path).and_then(|f| self.compression.text_decoder(path, f)) {
                    Ok(file) => {
                        self.reader = Some((BufReader::with_capacity(BUFFER_SIZE, file), index));
                        self.lines = 0;
                        self.offset = 0;
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

    /// `TextLineDataset(path, compression_type="GZIP" | "ZLIB")` yields the plain file's lines
    /// (TensorFlow 2.21: `[b'first', b'second', b'', b'last without newline']` for all three;
    /// tests/reference/compressed_text_csv_reference.py).
    #[test]
    fn gzip_and_zlib_files_read_like_the_plain_file() {
        let dir = tempfile::tempdir().unwrap();
        let text = b"first\nsecond\r\n\nlast without newline";
        let expected = vec!["first", "second", "", "last without newline"];
        for c in [Compression::None, Compression::Gzip, Compression::Zlib] {
            let mut enc = c.encoder(Vec::new());
            std::io::Write::write_all(&mut enc, text).unwrap();
            let path = write(
                dir.path(),
                &format!("a-{}.txt", c.tf_name()),
                &enc.finish().unwrap(),
            );
            let ds = Dataset::text_line_dataset_with([&path], c);
            assert_eq!(strings(&ds, TEXT_LINE_COMPONENT), expected, "{c}");
            // Read without decompression, a compressed file is refused, naming the setting
            // (TensorFlow would return its compressed bytes as lines).
            if c != Compression::None {
                let raw = Dataset::text_line_dataset([&path]).iter().next().unwrap();
                let err = raw.unwrap_err().to_string();
                let setting = format!("compression_type = \"{}\"", c.tf_name());
                assert!(err.contains(&setting), "{err}");
            }
        }
    }

    /// A GZIP file cut in half: the complete lines before the cut, then a `Record` error with
    /// the next line's number and the uncompressed byte where decompression stopped.
    /// (TensorFlow 2.21 ends quietly on a cut line instead; see the reference script.)
    #[test]
    fn a_truncated_gzip_file_is_an_error_naming_the_line_and_byte() {
        let dir = tempfile::tempdir().unwrap();
        let text: Vec<u8> = (0..5000)
            .flat_map(|i| format!("line {i:05}\n").into_bytes())
            .collect();
        let mut enc = Compression::Gzip.encoder(Vec::new());
        std::io::Write::write_all(&mut enc, &text).unwrap();
        let full = enc.finish().unwrap();
        let path = write(dir.path(), "cut.txt.gz", &full[..full.len() / 2]);
        let results: Vec<_> = Dataset::text_line_dataset_with([&path], Compression::Gzip)
            .iter()
            .collect();
        let (last, lines) = results.split_last().unwrap();
        assert!(lines.len() > 100 && lines.len() < 5000, "{}", lines.len());
        for (i, r) in lines.iter().enumerate() {
            let e = r.as_ref().unwrap();
            let line = &e.get("line").unwrap().data().as_strings().unwrap()[0];
            assert_eq!(line, format!("line {i:05}").as_bytes());
        }
        match last {
            Err(DataError::Record {
                path: p,
                line,
                message,
            }) => {
                assert_eq!(p, &path);
                assert_eq!(*line, lines.len() as u64 + 1);
                let offset: u64 = message
                    .split("uncompressed byte ")
                    .nth(1)
                    .and_then(|m| m.split(':').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("{message}"));
                // Each line is 11 bytes; the cut falls inside line `lines.len()`.
                let start = 11 * lines.len() as u64;
                assert!((start..start + 11).contains(&offset), "{offset} {message}");
                assert!(message.contains("GZIP"), "{message}");
            }
            other => panic!("expected a Record error, got {other:?}"),
        }
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
