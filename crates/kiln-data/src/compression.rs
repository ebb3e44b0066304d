//! Whole-stream compression of data files: tf.data's `compression_type` argument.
//!
//! TensorFlow's `TFRecordDataset`, `TextLineDataset` and `CsvDataset` accept
//! `compression_type` `""` (none), `"GZIP"` or `"ZLIB"`; the compression wraps the whole file,
//! not each record (`tensorflow/core/lib/io/zlib_compression_options.h`: `GZIP` is a gzip
//! member, RFC 1952; `ZLIB` a zlib stream, RFC 1950).

use std::fmt;
use std::io::{self, BufRead, Read, Write};
use std::str::FromStr;

use flate2::read::{MultiGzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};

use crate::error::DataError;

/// How a data file is compressed, as tf.data's `compression_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// `""` (or `None` in Python): plain bytes.
    #[default]
    None,
    /// `"GZIP"`: one or more gzip members (RFC 1952).
    Gzip,
    /// `"ZLIB"`: a zlib stream (RFC 1950).
    Zlib,
}

impl Compression {
    /// The TensorFlow name: `""`, `"GZIP"` or `"ZLIB"`.
    pub fn tf_name(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => "GZIP",
            Compression::Zlib => "ZLIB",
        }
    }

    /// Wraps `inner` so that reading it yields the decompressed bytes.
    pub fn decoder<'a, R: Read + Send + 'a>(self, inner: R) -> Box<dyn Read + Send + 'a> {
        match self {
            Compression::None => Box::new(inner),
            Compression::Gzip => Box::new(MultiGzDecoder::new(inner)),
            Compression::Zlib => Box::new(ZlibDecoder::new(inner)),
        }
    }

    /// The compression the first bytes of a file show for certain: gzip's magic bytes `1f 8b`
    /// (RFC 1952), or a zlib header with a 32 KiB window and no preset dictionary, `78 01`,
    /// `78 5e`, `78 9c` or `78 da` (RFC 1950: what zlib, TensorFlow and flate2 write at every
    /// level). `None` for anything else, which may still be a rarer zlib header
    /// ([`zlib_header`]).
    pub fn sniff(head: &[u8]) -> Option<Compression> {
        match head {
            [0x1f, 0x8b, ..] => Some(Compression::Gzip),
            [0x78, 0x01 | 0x5e | 0x9c | 0xda, ..] => Some(Compression::Zlib),
            _ => None,
        }
    }

    /// The bytes of text file `path` (lines or CSV) as [`Compression::decoder`] gives them,
    /// after checking the file's first bytes against the setting, so that a wrong or missing
    /// `compression_type` is named as such instead of surfacing as a decoding error: a file
    /// that starts with gzip's magic bytes `1f 8b` (never valid UTF-8 text) without `"GZIP"`,
    /// or with one of the zlib headers of [`Compression::sniff`] other than `x^` without
    /// `"ZLIB"`,
    /// a `"GZIP"` file without them, a `"ZLIB"` file without a zlib header (RFC 1950: `CM` 8
    /// and `(CMF × 256 + FLG) mod 31 = 0`). Empty files pass.
    ///
    /// # Errors
    /// [`DataError::Decode`] naming the file, its first bytes and the setting to use;
    /// [`DataError::Io`] when the file cannot be read.
    pub fn text_decoder(
        self,
        path: &std::path::Path,
        file: crate::storage::SourceReader,
    ) -> Result<crate::storage::SourceReader, DataError> {
        // Peeked, not consumed: the first read of the result returns the whole buffer, so
        // readers that look at the start (the CSV reader's byte-order mark) see it whole.
        let mut file = io::BufReader::with_capacity(64 * 1024, file);
        let head = match file.fill_buf() {
            Ok(b) => b[..b.len().min(2)].to_vec(),
            Err(source) => {
                return Err(DataError::Io {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        let sniffed = Compression::sniff(&head);
        let gzip = sniffed == Some(Compression::Gzip);
        let first = head
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ");
        let wrong = |message: String| {
            Err(DataError::Decode {
                path: path.to_path_buf(),
                message,
            })
        };
        match self {
            _ if head.is_empty() => {}
            Compression::None if gzip => {
                return wrong(
                    "the file starts with gzip's magic bytes 1f 8b: it is GZIP-compressed; set \
                     compression_type = \"GZIP\" for it"
                        .into(),
                );
            }
            // Of the zlib headers `sniff` knows, only "x^" (78 5e) is also plain text.
            Compression::None if sniffed == Some(Compression::Zlib) && head[1] != b'^' => {
                return wrong(format!(
                    "the file starts with a zlib header ({first}): it is ZLIB-compressed; set \
                     compression_type = \"ZLIB\" for it"
                ));
            }
            Compression::Gzip if !gzip => {
                let fix = if zlib_header(&head) {
                    "it has a zlib header: set compression_type = \"ZLIB\""
                } else {
                    "remove compression_type if the file is plain text"
                };
                return wrong(format!(
                    "compression_type = \"GZIP\", but the file does not start with gzip's \
                     magic bytes 1f 8b (it starts with {first}); {fix}"
                ));
            }
            Compression::Zlib if !zlib_header(&head) => {
                let fix = if gzip {
                    "it is GZIP-compressed: set compression_type = \"GZIP\""
                } else {
                    "remove compression_type if the file is plain text"
                };
                return wrong(format!(
                    "compression_type = \"ZLIB\", but the file does not start with a zlib \
                     header (it starts with {first}); {fix}"
                ));
            }
            _ => {}
        }
        Ok(self.decoder(file))
    }

    /// Wraps `inner` so that bytes written are compressed (flate2's default level, 6, which
    /// is also zlib's `Z_DEFAULT_COMPRESSION` that TensorFlow uses).
    pub fn encoder<W: Write + Send>(self, inner: W) -> Encoder<W> {
        let level = flate2::Compression::default();
        match self {
            Compression::None => Encoder::Plain(inner),
            Compression::Gzip => Encoder::Gzip(GzEncoder::new(inner, level)),
            Compression::Zlib => Encoder::Zlib(ZlibEncoder::new(inner, level)),
        }
    }
}

/// True when `head` starts with a valid zlib header (RFC 1950: compression method 8, a window
/// of at most 32 KiB, `(CMF × 256 + FLG) mod 31 = 0`): what a `"ZLIB"` setting is checked
/// against, so that no valid stream is refused.
fn zlib_header(head: &[u8]) -> bool {
    match head {
        [cmf, flg, ..] => {
            cmf & 0x0f == 8 && cmf >> 4 <= 7 && (u16::from(*cmf) * 256 + u16::from(*flg)) % 31 == 0
        }
        _ => false,
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compression::None => f.write_str("\"\" (none)"),
            other => f.write_str(other.tf_name()),
        }
    }
}

impl FromStr for Compression {
    type Err = DataError;

    /// Parses a tf.data `compression_type`: `""`, `"GZIP"` or `"ZLIB"` (exactly these, as
    /// TensorFlow; `"NONE"` is also accepted for none).
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] for any other string.
    fn from_str(s: &str) -> Result<Compression, DataError> {
        match s {
            "" | "NONE" => Ok(Compression::None),
            "GZIP" => Ok(Compression::Gzip),
            "ZLIB" => Ok(Compression::Zlib),
            other => Err(DataError::InvalidArgument(format!(
                "compression_type {other:?} is not one of \"\" (or \"NONE\"), \"GZIP\", \
                 \"ZLIB\" (TensorFlow's names, upper case)"
            ))),
        }
    }
}

/// A writer that compresses (or not) into `W`; made by [`Compression::encoder`].
pub enum Encoder<W: Write> {
    /// No compression.
    Plain(W),
    /// gzip.
    Gzip(GzEncoder<W>),
    /// zlib.
    Zlib(ZlibEncoder<W>),
}

impl<W: Write> Encoder<W> {
    /// Writes the compressed stream's trailer and returns the inner writer (not flushed).
    ///
    /// # Errors
    /// Any error writing the trailer.
    pub fn finish(self) -> io::Result<W> {
        match self {
            Encoder::Plain(w) => Ok(w),
            Encoder::Gzip(e) => e.finish(),
            Encoder::Zlib(e) => e.finish(),
        }
    }
}

impl<W: Write> Write for Encoder<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Encoder::Plain(w) => w.write(buf),
            Encoder::Gzip(e) => e.write(buf),
            Encoder::Zlib(e) => e.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Encoder::Plain(w) => w.flush(),
            Encoder::Gzip(e) => e.flush(),
            Encoder::Zlib(e) => e.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tensorflow_names_only() {
        assert_eq!("".parse::<Compression>().unwrap(), Compression::None);
        assert_eq!("GZIP".parse::<Compression>().unwrap(), Compression::Gzip);
        assert_eq!("ZLIB".parse::<Compression>().unwrap(), Compression::Zlib);
        let err = "gzip".parse::<Compression>().unwrap_err();
        assert!(err.to_string().contains("\"gzip\""), "{err}");
        for c in [Compression::None, Compression::Gzip, Compression::Zlib] {
            assert_eq!(c.tf_name().parse::<Compression>().unwrap(), c);
        }
    }

    fn compressed(c: Compression, text: &[u8]) -> Vec<u8> {
        let mut enc = c.encoder(Vec::new());
        enc.write_all(text).unwrap();
        enc.finish().unwrap()
    }

    /// What [`Compression::text_decoder`] reads from `bytes` under setting `c`, or its error.
    fn read_text(c: Compression, bytes: Vec<u8>) -> Result<Vec<u8>, String> {
        let path = std::path::Path::new("data/rows.csv");
        let mut out = Vec::new();
        c.text_decoder(path, Box::new(io::Cursor::new(bytes)))
            .map_err(|e| e.to_string())?
            .read_to_end(&mut out)
            .unwrap();
        Ok(out)
    }

    #[test]
    fn a_text_file_is_checked_against_its_compression_setting() {
        let text = b"a,b\n1,2\n".to_vec();
        for c in [Compression::None, Compression::Gzip, Compression::Zlib] {
            assert_eq!(read_text(c, compressed(c, &text)).unwrap(), text, "{c}");
        }
        // Short plain files are read whole (the peeked bytes are not consumed).
        assert_eq!(read_text(Compression::None, Vec::new()).unwrap(), b"");
        assert_eq!(read_text(Compression::None, b"x".to_vec()).unwrap(), b"x");
        let missing = read_text(Compression::None, compressed(Compression::Gzip, &text));
        let missing = missing.unwrap_err();
        assert!(
            missing.contains("data/rows.csv")
                && missing.contains("1f 8b")
                && missing.contains("compression_type = \"GZIP\""),
            "{missing}"
        );
        let plain = read_text(Compression::Gzip, text.clone()).unwrap_err();
        assert!(
            plain.contains("starts with 61 2c") && plain.contains("remove compression_type"),
            "{plain}"
        );
        let zlib = read_text(Compression::Gzip, compressed(Compression::Zlib, &text));
        assert!(
            zlib.unwrap_err()
                .contains("set compression_type = \"ZLIB\"")
        );
        let gzip = read_text(Compression::Zlib, compressed(Compression::Gzip, &text));
        assert!(
            gzip.unwrap_err()
                .contains("set compression_type = \"GZIP\"")
        );
        let zlib = read_text(Compression::None, compressed(Compression::Zlib, &text));
        let zlib = zlib.unwrap_err();
        assert!(
            zlib.contains("78 9c") && zlib.contains("\"ZLIB\""),
            "{zlib}"
        );
        // Plain text that fits RFC 1950's header arithmetic is read as text: "80" (38 30) and
        // "(4" (28 34) are zlib headers with small windows, "x^" the level-1 one.
        for text in [&b"80,1\n"[..], b"(4,2\n"] {
            assert_eq!(read_text(Compression::None, text.to_vec()).unwrap(), text);
        }
        let caret = b"x^2,1\n".to_vec();
        assert_eq!(read_text(Compression::None, caret.clone()).unwrap(), caret);
    }

    #[test]
    fn encoder_and_decoder_round_trip_with_the_right_magic() {
        let data: Vec<u8> = (0..1000u32).map(|v| (v * 31 % 256) as u8).collect();
        for (c, magic) in [
            (Compression::None, &data[..2]),
            (Compression::Gzip, &[0x1f, 0x8b][..]),
            (Compression::Zlib, &[0x78, 0x9c][..]),
        ] {
            let mut enc = c.encoder(Vec::new());
            enc.write_all(&data).unwrap();
            let bytes = enc.finish().unwrap();
            assert_eq!(&bytes[..2], magic, "{c}");
            let mut out = Vec::new();
            c.decoder(&bytes[..]).read_to_end(&mut out).unwrap();
            assert_eq!(out, data, "{c}");
        }
    }
}
