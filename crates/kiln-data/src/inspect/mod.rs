//! Inspecting data files: what `kiln data inspect FILE` prints.
//!
//! [`inspect`] recognises the file's format ([`FileFormat::detect`]: by extension, then by
//! content), writes a readable summary of its first records and counts all of them:
//!
//! * **TFRecord** (`tfrecord.rs`): every record's framing is read and both CRC-32C checksums
//!   verified; the first records are decoded as `tf.train.Example`s (feature names, list types,
//!   value counts, first values). A damaged record stops the scan with
//!   [`DataError::TfRecord`], naming the record index and byte offset.
//! * **CSV** (`csv.rs`): the header (detected), each column's type inferred as
//!   `make_csv_dataset` does, the first rows, and the row count.
//! * **IDX** and **NPY** (`arrays.rs`): dtype, shape and the first values of the first records
//!   (along the first axis).

mod arrays;
mod csv;
mod tfrecord;

use std::fmt::{self, Display};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::compression::Compression;
use crate::error::{DataError, Result};
use crate::tfrecord::masked_crc32c;

/// The file formats [`inspect`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// TFRecord, compressed as given.
    TfRecord(Compression),
    /// Comma-separated values (RFC 4180), compressed as given (tf.data's
    /// `compression_type`).
    Csv(Compression),
    /// MNIST's IDX (gzip or raw).
    Idx,
    /// NumPy `.npy`.
    Npy,
}

impl Display for FileFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileFormat::TfRecord(Compression::None) => f.write_str("TFRecord"),
            FileFormat::TfRecord(c) => write!(f, "TFRecord ({} compressed)", c.tf_name()),
            FileFormat::Csv(Compression::None) => f.write_str("CSV"),
            FileFormat::Csv(c) => write!(f, "CSV ({} compressed)", c.tf_name()),
            FileFormat::Idx => f.write_str("IDX"),
            FileFormat::Npy => f.write_str("NPY"),
        }
    }
}

impl FromStr for FileFormat {
    type Err = DataError;

    /// `tfrecord` (uncompressed), `tfrecord-gzip`, `tfrecord-zlib`, `csv`, `idx` or `npy`.
    fn from_str(s: &str) -> Result<FileFormat> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "tfrecord" => FileFormat::TfRecord(Compression::None),
            "tfrecord-gzip" => FileFormat::TfRecord(Compression::Gzip),
            "tfrecord-zlib" => FileFormat::TfRecord(Compression::Zlib),
            "csv" => FileFormat::Csv(Compression::None),
            "csv-gzip" => FileFormat::Csv(Compression::Gzip),
            "csv-zlib" => FileFormat::Csv(Compression::Zlib),
            "idx" => FileFormat::Idx,
            "npy" => FileFormat::Npy,
            other => {
                return Err(DataError::InvalidArgument(format!(
                    "unknown file format {other:?}; allowed: tfrecord, tfrecord-gzip, \
                     tfrecord-zlib, csv, csv-gzip, csv-zlib, idx, npy"
                )));
            }
        })
    }
}

/// Raw bytes read ahead to recognise a format (enough gzip or zlib data for [`HEAD`]
/// decompressed bytes).
const PEEK: usize = 64 << 10;

/// Decompressed bytes looked at to recognise a format.
const HEAD: usize = 64;

/// A source opened once, with its first bytes read ahead (pipes cannot be read twice).
struct Source {
    head: Vec<u8>,
    rest: crate::storage::SourceReader,
    len: Option<u64>,
}

impl Source {
    fn open(path: &Path) -> Result<Source> {
        let (mut rest, len) = crate::storage::open_sized(path)?;
        let mut head = Vec::new();
        (&mut rest)
            .take(PEEK as u64)
            .read_to_end(&mut head)
            .map_err(|e| io_error(path, e))?;
        Ok(Source { head, rest, len })
    }

    /// The first [`HEAD`] bytes, decompressed with `compression` (a damaged stream gives a
    /// shorter or empty head).
    fn head(&self, compression: Compression) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD);
        let _ = compression
            .decoder(&self.head[..])
            .take(HEAD as u64)
            .read_to_end(&mut out);
        out
    }

    /// The whole source again, from its first byte.
    fn reader(self) -> crate::storage::SourceReader {
        Box::new(std::io::Cursor::new(self.head).chain(self.rest))
    }
}

fn io_error(path: &Path, source: std::io::Error) -> DataError {
    DataError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// True when `bytes` start like a TFRecord: a length whose masked CRC-32C follows it.
fn tfrecord_header(bytes: &[u8]) -> bool {
    bytes.len() >= 12
        && masked_crc32c(&bytes[..8])
            == u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]])
}

/// True when `bytes` start like an IDX file: `00 00`, a known type code, 1 to 4 dimensions.
fn idx_header(bytes: &[u8]) -> bool {
    bytes.len() >= 4
        && bytes[0] == 0
        && bytes[1] == 0
        && matches!(bytes[2], 0x08 | 0x09 | 0x0B | 0x0C | 0x0D | 0x0E)
        && (1..=4).contains(&bytes[3])
}

impl FileFormat {
    /// Recognises `path`'s format: the extension first (`.tfrecord`, `.tfrecords`, `.tfrec`,
    /// optionally followed by `.gz` / `.zz`; `.csv`; `.npy`; `.idx`), then the content:
    /// NPY's magic `\x93NUMPY`, an IDX header, a TFRecord header whose length checksum matches
    /// (plain, gzip or zlib), or UTF-8 text with commas for CSV.
    ///
    /// # Errors
    /// [`DataError::Io`] when the file cannot be read; [`DataError::InvalidArgument`] when the
    /// format cannot be told (the message lists the extensions and `--format`).
    pub fn detect(path: &Path) -> Result<FileFormat> {
        let source = Source::open(path)?;
        FileFormat::detect_in(path, &source).ok_or_else(|| unknown_format(path))
    }

    /// [`FileFormat::detect`] on an opened source; `None` when the format cannot be told.
    fn detect_in(path: &Path, source: &Source) -> Option<FileFormat> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let (stem, compression) = if let Some(s) = name.strip_suffix(".gz") {
            (s, Compression::Gzip)
        } else if let Some(s) = name.strip_suffix(".zz") {
            (s, Compression::Zlib)
        } else {
            (name.as_str(), Compression::None)
        };
        let raw = &source.head[..source.head.len().min(HEAD)];
        let ext = stem.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
        match ext {
            "tfrecord" | "tfrecords" | "tfrec" => return Some(FileFormat::TfRecord(compression)),
            // A `.csv` name on gzip bytes: the content tells.
            "csv" if compression == Compression::None => {
                let gzip = Compression::sniff(raw) == Some(Compression::Gzip);
                return Some(FileFormat::Csv(if gzip {
                    Compression::Gzip
                } else {
                    Compression::None
                }));
            }
            "csv" => return Some(FileFormat::Csv(compression)),
            "npy" if compression == Compression::None => return Some(FileFormat::Npy),
            "idx" => return Some(FileFormat::Idx),
            _ => {}
        }
        if raw.starts_with(b"\x93NUMPY") {
            return Some(FileFormat::Npy);
        }
        let compression = Compression::sniff(raw).unwrap_or(Compression::None);
        let bytes = source.head(compression);
        if idx_header(&bytes) && compression != Compression::Zlib {
            return Some(FileFormat::Idx);
        }
        if tfrecord_header(&bytes) {
            return Some(FileFormat::TfRecord(compression));
        }
        // A 64-byte head may end inside a multi-byte character: UTF-8 up to that point.
        let text = match std::str::from_utf8(&bytes) {
            Ok(_) => true,
            Err(e) => e.error_len().is_none(),
        };
        if text && bytes.contains(&b',') {
            return Some(FileFormat::Csv(compression));
        }
        None
    }
}

/// The usage error for a file whose format cannot be told.
fn unknown_format(path: &Path) -> DataError {
    DataError::InvalidArgument(format!(
        "cannot tell the format of {}: name it *.tfrecord, *.csv, *.npy or *.idx, or pass \
         --format (tfrecord, tfrecord-gzip, tfrecord-zlib, csv, csv-gzip, csv-zlib, idx, npy)",
        path.display()
    ))
}

/// What [`inspect`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InspectSummary {
    /// The file.
    pub path: PathBuf,
    /// Its format.
    pub format: FileFormat,
    /// Records counted: TFRecord records (all checksums verified), CSV rows after the header,
    /// or the first dimension of an IDX / NPY array.
    pub records: u64,
}

/// Writes a summary of `path` to `out`: its format, the first `n` records and the record
/// count (see the module docs). `format` overrides [`FileFormat::detect`].
///
/// # Errors
/// [`DataError::Io`] when the file cannot be read (or `out` written, reported as `<output>`);
/// [`DataError::TfRecord`] for a damaged TFRecord record (after the records before it were
/// summarised); [`DataError::Format`] / [`DataError::Record`] for corrupt IDX, NPY or CSV
/// files; [`DataError::InvalidArgument`] when the format cannot be recognised.
pub fn inspect(
    path: &Path,
    n: usize,
    format: Option<FileFormat>,
    out: &mut dyn Write,
) -> Result<InspectSummary> {
    let source = Source::open(path)?;
    let format = match format {
        Some(f) => f,
        None => FileFormat::detect_in(path, &source).ok_or_else(|| unknown_format(path))?,
    };
    let mut w = Out { out };
    w.line(format_args!("{}: {format}", path.display()))?;
    let len = source.len;
    let reader = source.reader();
    let records = match format {
        FileFormat::TfRecord(c) => tfrecord::inspect(path, reader, c, n, &mut w)?,
        FileFormat::Csv(c) => csv::inspect(path, reader, c, n, &mut w)?,
        FileFormat::Idx => {
            arrays::inspect(&crate::idx::read_idx_from(reader, len, path)?, n, &mut w)?
        }
        FileFormat::Npy => {
            arrays::inspect(&crate::npy::read_npy_from(reader, len, path)?, n, &mut w)?
        }
    };
    Ok(InspectSummary {
        path: path.to_path_buf(),
        format,
        records,
    })
}

/// The output, with write errors mapped to [`DataError::Io`] on `<output>`.
struct Out<'a> {
    out: &'a mut dyn Write,
}

impl Out<'_> {
    fn line(&mut self, text: fmt::Arguments<'_>) -> Result<()> {
        writeln!(self.out, "{text}").map_err(|e| io_error(Path::new("<output>"), e))
    }
}

/// How many values [`abbreviate`] shows.
const SHOWN: usize = 8;

/// `[a, b, c]`, or the first [`SHOWN`] values and `…` when there are more.
fn abbreviate<T: Display>(values: &[T]) -> String {
    let shown: Vec<String> = values.iter().take(SHOWN).map(|v| v.to_string()).collect();
    let more = if values.len() > SHOWN { ", …" } else { "" };
    format!("[{}{more}]", shown.join(", "))
}

/// A byte string for display: quoted text when it is printable UTF-8 (cut at 40 characters),
/// otherwise its length and first bytes in hex.
fn show_bytes(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) if !s.chars().any(char::is_control) => {
            let cut: String = s.chars().take(40).collect();
            if cut.len() < s.len() {
                format!("{cut:?}…")
            } else {
                format!("{s:?}")
            }
        }
        _ => {
            let hex: Vec<String> = b.iter().take(8).map(|x| format!("{x:02x}")).collect();
            let more = if b.len() > 8 { " …" } else { "" };
            format!("<{} bytes: {}{more}>", b.len(), hex.join(" "))
        }
    }
}

#[cfg(test)]
mod tests;
