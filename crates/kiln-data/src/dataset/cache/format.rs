//! The cache file format (`<prefix>.kcache`), kiln's own; all integers little-endian.
//!
//! ```text
//! header   (24 bytes)
//!   0   8   magic "KILNCACH"
//!   8   4   u32 format version (1)
//!   12  8   u64 fingerprint of the upstream pipeline (Dataset::fingerprint)
//!   20  4   u32 CRC-32C of bytes 0..20
//! records, one per element, in order
//!   0   8   u64 payload length L (never u64::MAX)
//!   8   L   payload
//!   8+L 4   u32 CRC-32C of the 8 length bytes followed by the payload
//! footer   (20 bytes), then end of file
//!   0   8   u64::MAX (end marker)
//!   8   8   u64 number of records
//!   16  4   u32 CRC-32C of bytes 0..16 of the footer
//!
//! payload
//!   u32 number of components, then per component, in the element's order:
//!     u32 name length N, N bytes UTF-8 name,
//!     u8 dtype code (1 uint8, 2 int32, 3 int64, 4 float32, 5 float64),
//!     u32 rank R, R × u64 dimensions,
//!     the values: product(dimensions) × dtype size bytes, row-major, little-endian.
//! ```
//!
//! CRC-32C is the Castagnoli CRC TFRecord uses (without TFRecord's masking). The footer makes
//! truncation detectable even though complete files only ever appear by rename.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::element::{Array, Buffer, DType, Element};
use crate::error::{DataError, Result, format_error};

const MAGIC: &[u8; 8] = b"KILNCACH";
const VERSION: u32 = 2;
/// Bytes in the header.
pub(super) const HEADER_LEN: usize = 24;
const END_MARK: u64 = u64::MAX;

/// The header for a cache of a pipeline with `fingerprint`.
pub(super) fn header(fingerprint: u64) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&VERSION.to_le_bytes());
    out[12..20].copy_from_slice(&fingerprint.to_le_bytes());
    let crc = crc32c::crc32c(&out[..20]);
    out[20..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The fingerprint stored in a header, after checking magic, version and checksum.
pub(super) fn parse_header(bytes: &[u8; HEADER_LEN], path: &Path) -> Result<u64> {
    if &bytes[..8] != MAGIC {
        return Err(format_error(
            path,
            0,
            "not a kiln-data cache file (bad magic; expected \"KILNCACH\")",
        ));
    }
    let crc = u32::from_le_bytes(bytes[20..24].try_into().unwrap_or_default());
    if crc32c::crc32c(&bytes[..20]) != crc {
        return Err(format_error(
            path,
            20,
            "corrupt cache header (checksum mismatch)",
        ));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or_default());
    if version != VERSION {
        return Err(format_error(
            path,
            8,
            format!(
                "cache format version {version} is not supported (this kiln reads version \
                 {VERSION}); delete the file to rebuild it"
            ),
        ));
    }
    Ok(u64::from_le_bytes(
        bytes[12..20].try_into().unwrap_or_default(),
    ))
}

/// The footer closing a cache of `count` records.
pub(super) fn footer(count: u64) -> [u8; 20] {
    let mut out = [0u8; 20];
    out[..8].copy_from_slice(&END_MARK.to_le_bytes());
    out[8..16].copy_from_slice(&count.to_le_bytes());
    let crc = crc32c::crc32c(&out[..16]);
    out[16..].copy_from_slice(&crc.to_le_bytes());
    out
}

fn dtype_code(dtype: DType) -> u8 {
    match dtype {
        DType::U8 => 1,
        DType::I32 => 2,
        DType::I64 => 3,
        DType::F32 => 4,
        DType::F64 => 5,
        DType::String => 6,
    }
}

fn dtype_from_code(code: u8) -> Option<DType> {
    Some(match code {
        1 => DType::U8,
        2 => DType::I32,
        3 => DType::I64,
        4 => DType::F32,
        5 => DType::F64,
        6 => DType::String,
        _ => return None,
    })
}

/// Appends one record (length, payload, checksum) for `element` to `out`.
pub(super) fn encode_record(element: &Element, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0u8; 8]); // length, filled in below
    out.extend_from_slice(&(element.len() as u32).to_le_bytes());
    for (name, array) in element.iter() {
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(dtype_code(array.dtype()));
        out.extend_from_slice(&(array.shape().len() as u32).to_le_bytes());
        for &d in array.shape() {
            out.extend_from_slice(&(d as u64).to_le_bytes());
        }
        // Strings vary in length: a u64 byte count of the block, then each value as a u32
        // length and its bytes. Numbers: their little-endian bytes.
        if let Buffer::String(v) = array.data() {
            let block: usize = v.iter().map(|b| 4 + b.len()).sum();
            out.extend_from_slice(&(block as u64).to_le_bytes());
            for b in v {
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
        } else {
            array.data().extend_le_bytes(out);
        }
    }
    let len = (out.len() - start - 8) as u64;
    out[start..start + 8].copy_from_slice(&len.to_le_bytes());
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Decodes `count` values of `dtype` from little-endian `bytes` (whose length fits).
fn decode_values(dtype: DType, bytes: &[u8]) -> Buffer {
    macro_rules! le {
        ($t:ty) => {
            bytes
                .chunks_exact(std::mem::size_of::<$t>())
                .map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or_default()))
                .collect()
        };
    }
    match dtype {
        DType::U8 => Buffer::U8(bytes.to_vec()),
        DType::I32 => Buffer::I32(le!(i32)),
        DType::I64 => Buffer::I64(le!(i64)),
        DType::F32 => Buffer::F32(le!(f32)),
        DType::F64 => Buffer::F64(le!(f64)),
        DType::String => {
            // The block's layout is checked by `decode_strings` before this is called.
            let mut values = Vec::new();
            let mut at = 0;
            while at + 4 <= bytes.len() {
                let n =
                    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default()) as usize;
                let end = (at + 4 + n).min(bytes.len());
                values.push(bytes[at + 4..end].to_vec());
                at = end;
            }
            Buffer::String(values)
        }
    }
}

/// Checks a string block (u32 length + bytes per value) holds exactly `count` values.
fn check_strings(bytes: &[u8], count: usize) -> std::result::Result<(), String> {
    let (mut at, mut seen) = (0usize, 0usize);
    while at < bytes.len() {
        if at + 4 > bytes.len() {
            return Err("a string length is cut short".into());
        }
        let n = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default()) as usize;
        at += 4;
        if n > bytes.len() - at {
            return Err(format!("a string of {n} bytes runs past its block"));
        }
        at += n;
        seen += 1;
    }
    if seen != count {
        return Err(format!("{seen} strings where the shape needs {count}"));
    }
    Ok(())
}

/// Streams the records of a cache file after its header, checking every checksum.
pub(super) struct RecordReader<R> {
    reader: R,
    path: PathBuf,
    /// Byte offset of the next read.
    offset: u64,
    /// Total file size (bounds record lengths).
    file_len: u64,
    records: u64,
    done: bool,
}

impl<R: Read> RecordReader<R> {
    /// A reader positioned just after the header of a `file_len`-byte file.
    pub(super) fn new(reader: R, path: PathBuf, file_len: u64) -> RecordReader<R> {
        RecordReader {
            reader,
            path,
            offset: HEADER_LEN as u64,
            file_len,
            records: 0,
            done: false,
        }
    }

    fn err(&self, offset: u64, message: impl Into<String>) -> DataError {
        DataError::Format {
            path: self.path.clone(),
            offset,
            message: message.into(),
        }
    }

    /// Reads exactly `buf.len()` bytes; a short read is "truncated" at `record_start`.
    fn read_exact(&mut self, buf: &mut [u8], record_start: u64, what: &str) -> Result<()> {
        match self.reader.read_exact(buf) {
            Ok(()) => {
                self.offset += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(self.err(
                record_start,
                format!(
                    "truncated cache file: {what} (record {}) is cut short; delete the file to \
                     rebuild the cache",
                    self.records
                ),
            )),
            Err(source) => Err(DataError::Io {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// The next element, `None` after the footer.
    fn read_next(&mut self) -> Result<Option<Element>> {
        let start = self.offset;
        let mut len_bytes = [0u8; 8];
        self.read_exact(&mut len_bytes, start, "the end-of-cache marker or a record")?;
        let len = u64::from_le_bytes(len_bytes);
        if len == END_MARK {
            let mut rest = [0u8; 12];
            self.read_exact(&mut rest, start, "the footer")?;
            let mut footer = [0u8; 16];
            footer[..8].copy_from_slice(&len_bytes);
            footer[8..].copy_from_slice(&rest[..8]);
            let crc = u32::from_le_bytes(rest[8..].try_into().unwrap_or_default());
            if crc32c::crc32c(&footer) != crc {
                return Err(self.err(start, "corrupt cache footer (checksum mismatch)"));
            }
            let count = u64::from_le_bytes(rest[..8].try_into().unwrap_or_default());
            if count != self.records {
                return Err(self.err(
                    start,
                    format!(
                        "cache footer counts {count} records but the file holds {}",
                        self.records
                    ),
                ));
            }
            if self.offset != self.file_len {
                return Err(self.err(
                    self.offset,
                    format!(
                        "{} unexpected bytes after the end of the cache",
                        self.file_len - self.offset
                    ),
                ));
            }
            return Ok(None);
        }
        let remaining = self.file_len.saturating_sub(start + 8 + 4);
        if len > remaining {
            return Err(self.err(
                start,
                format!(
                    "record {} claims {len} bytes but only {remaining} remain (truncated or \
                     corrupt cache); delete the file to rebuild the cache",
                    self.records
                ),
            ));
        }
        let mut record = Vec::with_capacity(8 + len as usize);
        record.extend_from_slice(&len_bytes);
        record.resize(8 + len as usize, 0);
        self.read_exact(&mut record[8..], start, "a record's payload")?;
        let mut crc = [0u8; 4];
        self.read_exact(&mut crc, start, "a record's checksum")?;
        if crc32c::crc32c(&record) != u32::from_le_bytes(crc) {
            return Err(self.err(
                start,
                format!(
                    "corrupt record {} (checksum mismatch); delete the file to rebuild the cache",
                    self.records
                ),
            ));
        }
        let element = decode_payload(&record[8..])
            .map_err(|(at, message)| self.err(start + 8 + at as u64, message))?;
        self.records += 1;
        Ok(Some(element))
    }
}

impl<R: Read> Iterator for RecordReader<R> {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        if self.done {
            return None;
        }
        let result = self.read_next();
        if !matches!(result, Ok(Some(_))) {
            self.done = true; // after the footer or an error
        }
        result.transpose()
    }
}

/// Decodes a record payload; errors carry the offset within the payload.
fn decode_payload(payload: &[u8]) -> std::result::Result<Element, (usize, String)> {
    let mut at = 0usize;
    let mut take = |n: usize, what: &str| -> std::result::Result<(usize, &[u8]), (usize, String)> {
        let start = at;
        let bytes = payload
            .get(at..at.saturating_add(n))
            .ok_or((at, format!("record payload ends inside {what}")))?;
        at += n;
        Ok((start, bytes))
    };
    let u32_at = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize;
    let (_, n) = take(4, "the component count")?;
    let components = u32_at(n);
    let mut element = Element::new();
    for _ in 0..components {
        let (_, len) = take(4, "a component name length")?;
        let (name_at, name) = take(u32_at(len), "a component name")?;
        let name = std::str::from_utf8(name)
            .map_err(|_| (name_at, "component name is not UTF-8".to_string()))?
            .to_string();
        let (code_at, code) = take(1, "a dtype code")?;
        let dtype = dtype_from_code(code[0]).ok_or((
            code_at,
            format!("unknown dtype code {} for {name:?}", code[0]),
        ))?;
        let (_, rank) = take(4, "a rank")?;
        let rank = u32_at(rank);
        let mut shape = Vec::with_capacity(rank.min(64));
        for _ in 0..rank {
            let (dim_at, d) = take(8, "a dimension")?;
            let d = u64::from_le_bytes(d.try_into().unwrap_or_default());
            shape.push(
                usize::try_from(d).map_err(|_| (dim_at, format!("dimension {d} too large")))?,
            );
        }
        let (data_at, _) = take(0, "")?;
        let bytes = if dtype == DType::String {
            let (_, block) = take(8, "a string block length")?;
            usize::try_from(u64::from_le_bytes(block.try_into().unwrap_or_default()))
                .map_err(|_| (data_at, format!("string block of {name:?} is too large")))?
        } else {
            shape
                .iter()
                .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
                .ok_or((data_at, format!("shape {shape:?} of {name:?} is too large")))?
        };
        let (_, data) = take(bytes, "a component's values")?;
        if dtype == DType::String {
            let count = shape.iter().product();
            check_strings(data, count).map_err(|m| (data_at, format!("{name:?}: {m}")))?;
        }
        let array =
            Array::new(shape, decode_values(dtype, data)).map_err(|e| (data_at, e.to_string()))?;
        element.insert(name, array);
    }
    if at != payload.len() {
        return Err((
            at,
            format!(
                "{} unexpected bytes after the last component",
                payload.len() - at
            ),
        ));
    }
    Ok(element)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Element {
        Element::new()
            .with(
                "image",
                Array::new(vec![2, 2], Buffer::U8(vec![1, 2, 3, 250])).unwrap(),
            )
            .with("label", Array::scalar(Buffer::I64(vec![-7])).unwrap())
            .with(
                "w",
                Array::new(vec![3], Buffer::F32(vec![0.5, -1.25, 3.0])).unwrap(),
            )
            .with("d", Array::new(vec![1], Buffer::F64(vec![1e300])).unwrap())
            .with("i", Array::new(vec![0, 2], Buffer::I32(vec![])).unwrap())
    }

    fn file(elements: &[Element], fingerprint: u64) -> Vec<u8> {
        let mut out = header(fingerprint).to_vec();
        for e in elements {
            encode_record(e, &mut out);
        }
        out.extend_from_slice(&footer(elements.len() as u64));
        out
    }

    fn read(bytes: &[u8]) -> Result<Vec<Element>> {
        let head: [u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().unwrap();
        parse_header(&head, Path::new("c.kcache"))?;
        RecordReader::new(&bytes[HEADER_LEN..], "c.kcache".into(), bytes.len() as u64).collect()
    }

    #[test]
    fn round_trip_every_dtype() {
        let elements = vec![sample(), Element::new(), sample()];
        let bytes = file(&elements, 0xDEAD_BEEF);
        let head: [u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().unwrap();
        assert_eq!(parse_header(&head, Path::new("c")).unwrap(), 0xDEAD_BEEF);
        assert_eq!(read(&bytes).unwrap(), elements);
    }

    #[test]
    fn strings_round_trip_and_bad_blocks_are_errors() {
        let words = vec![b"".to_vec(), b"kiln".to_vec(), vec![0xff, 0x00]];
        let e = Element::new().with("s", Array::new(vec![3], Buffer::String(words)).unwrap());
        let bytes = file(std::slice::from_ref(&e), 7);
        assert_eq!(read(&bytes).unwrap(), vec![e]);
        // A block that holds two strings where the shape needs three.
        assert!(
            check_strings(&[0, 0, 0, 0, 1, 0, 0, 0, b'a'], 3)
                .unwrap_err()
                .contains("2 strings")
        );
        assert!(
            check_strings(&[9, 0, 0, 0, b'a'], 1)
                .unwrap_err()
                .contains("runs past")
        );
    }

    #[test]
    fn known_layout() {
        let e = Element::new().with("x", Array::scalar(Buffer::I32(vec![258])).unwrap());
        let mut record = Vec::new();
        encode_record(&e, &mut record);
        // Payload: count 1, name length 1, "x", dtype 2, rank 0, value 258 as int32.
        let payload = [1, 0, 0, 0, 1, 0, 0, 0, b'x', 2, 0, 0, 0, 0, 2, 1, 0, 0];
        assert_eq!(&record[..8], &(payload.len() as u64).to_le_bytes());
        assert_eq!(&record[8..8 + payload.len()], &payload);
        let crc = crc32c::crc32c(&record[..8 + payload.len()]);
        assert_eq!(&record[8 + payload.len()..], &crc.to_le_bytes());
        assert_eq!(&header(1)[..12], b"KILNCACH\x02\x00\x00\x00");
        // CRC-32C check value from the spec (RFC 3720): crc32c("123456789") = 0xE3069283.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
    }

    fn format_error_parts(err: DataError) -> (u64, String) {
        match err {
            DataError::Format {
                offset, message, ..
            } => (offset, message),
            other => panic!("expected a Format error, got {other:?}"),
        }
    }

    #[test]
    fn corruption_is_reported_with_the_record_offset() {
        let elements = vec![sample(), sample()];
        let bytes = file(&elements, 1);
        let mut one = Vec::new();
        encode_record(&sample(), &mut one);
        let second = (HEADER_LEN + one.len()) as u64;
        // Flip a byte inside the second record's payload.
        let mut bad = bytes.clone();
        bad[second as usize + 20] ^= 0x40;
        let (offset, message) = format_error_parts(read(&bad).unwrap_err());
        assert_eq!(offset, second);
        assert!(message.contains("corrupt record 1"), "{message}");
        // Truncated inside the second record, and missing the footer.
        let (offset, message) =
            format_error_parts(read(&bytes[..second as usize + 30]).unwrap_err());
        assert_eq!(offset, second);
        assert!(message.contains("record 1"), "{message}");
        let (offset, message) = format_error_parts(read(&bytes[..bytes.len() - 20]).unwrap_err());
        assert_eq!(offset, bytes.len() as u64 - 20);
        assert!(message.contains("truncated"), "{message}");
        // Trailing bytes after the footer.
        let mut long = bytes.clone();
        long.push(0);
        let (offset, _) = format_error_parts(read(&long).unwrap_err());
        assert_eq!(offset, bytes.len() as u64);
        // Header damage.
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(
            format_error_parts(read(&bad).unwrap_err())
                .1
                .contains("magic")
        );
        let mut bad = bytes;
        bad[13] ^= 1;
        assert_eq!(format_error_parts(read(&bad).unwrap_err()).0, 20);
    }
}
