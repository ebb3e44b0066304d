//! TFRecord record framing and the streaming reader.
//!
//! Format (`tensorflow/core/lib/io/record_writer.cc` and `record_reader.cc`; all integers
//! little-endian, records concatenated with no file header):
//!
//! | offset       | size     | field |
//! |--------------|----------|-------|
//! | 0            | 8        | `u64 length` of the data |
//! | 8            | 4        | `u32` masked CRC-32C of the 8 length bytes |
//! | 12           | `length` | data |
//! | 12 + length  | 4        | `u32` masked CRC-32C of the data |
//!
//! The CRC is CRC-32C (Castagnoli); the mask (`tensorflow/core/lib/hash/crc32c.h`, the same as
//! LevelDB's) is `((crc >> 15) | (crc << 17)) + 0xa282ead8`, wrapping.

use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use crate::compression::Compression;
use crate::error::{DataError, Result};

/// Bytes before a record's data: length (8) and its masked CRC (4) — TensorFlow's
/// `kHeaderSize`.
pub const HEADER_SIZE: usize = 12;
/// Bytes after a record's data: the data's masked CRC — TensorFlow's `kFooterSize`.
pub const FOOTER_SIZE: usize = 4;
/// Read buffer of [`TfRecordReader::open`]: 256 KiB, tf.data's default `buffer_size` for
/// `TFRecordDataset`.
pub const READ_BUFFER_SIZE: usize = 256 * 1024;

const MASK_DELTA: u32 = 0xa282_ead8;

/// TensorFlow's `crc32c::Mask`: rotates the CRC right by 15 bits and adds `0xa282ead8`
/// (wrapping), so that CRCs of data that itself holds CRCs stay well distributed.
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The inverse of [`mask_crc`] (`crc32c::Unmask`).
pub fn unmask_crc(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

/// The masked CRC-32C of `data`, as stored in TFRecord headers and footers.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c(data))
}

/// Writes one framed record (header, `data`, footer) to `out`.
///
/// # Errors
/// Any error `out` returns.
pub fn write_record<W: Write + ?Sized>(out: &mut W, data: &[u8]) -> io::Result<()> {
    let length = (data.len() as u64).to_le_bytes();
    out.write_all(&length)?;
    out.write_all(&masked_crc32c(&length).to_le_bytes())?;
    out.write_all(data)?;
    out.write_all(&masked_crc32c(data).to_le_bytes())
}

/// One record framed: `HEADER_SIZE + data.len() + FOOTER_SIZE` bytes.
pub fn encode_record(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_SIZE + data.len() + FOOTER_SIZE);
    write_record(&mut out, data).expect("writing to a Vec cannot fail");
    out
}

/// Reads the records of one TFRecord file, one at a time, without loading the whole file.
///
/// Iterating yields each record's data; the first error ends the iteration (a damaged
/// record leaves no way to find the next one).
///
/// # Errors
/// * [`DataError::TfRecord`] `"truncated record"` when the file ends inside a record (header,
///   data or footer) — a file that ends exactly after a record is complete;
/// * [`DataError::TfRecord`] `"corrupted record"` when the length's or the data's checksum does
///   not match;
/// * [`DataError::Format`] when the GZIP / ZLIB stream itself is damaged;
/// * [`DataError::Io`] when reading fails.
///
/// Offsets are in the decompressed stream for compressed files, and always name the start of
/// the damaged record (TensorFlow names the start of the data for a data checksum mismatch;
/// kiln's message gives both).
///
/// kiln differs from TensorFlow on purpose in one case: a file that ends inside a record's
/// 12-byte header. TensorFlow's reader takes the short header read for the end of the file
/// and stops without an error (checked with TensorFlow 2.21); kiln reports a truncated
/// record, since a complete file never ends there.
pub struct TfRecordReader {
    path: PathBuf,
    compression: Compression,
    input: Box<dyn Read + Send>,
    /// Offset (decompressed) of the next record's start.
    offset: u64,
    /// Index of the next record.
    index: u64,
    done: bool,
}

impl std::fmt::Debug for TfRecordReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TfRecordReader")
            .field("path", &self.path)
            .field("compression", &self.compression)
            .field("offset", &self.offset)
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// Where a record read stopped short.
enum Short {
    /// Reading returned fewer bytes than needed (end of file).
    Eof(usize),
    /// Reading failed.
    Err(io::Error),
}

impl TfRecordReader {
    /// Opens `path` — a local path, `file://` URL or `s3://` URL ([`crate::storage::open`])
    /// — for reading with a [`READ_BUFFER_SIZE`] buffer.
    ///
    /// # Errors
    /// [`DataError::Io`] when the file cannot be opened.
    pub fn open(path: &Path, compression: Compression) -> Result<TfRecordReader> {
        let file = crate::storage::open(path)?;
        let buffered = BufReader::with_capacity(READ_BUFFER_SIZE, file);
        Ok(TfRecordReader::new(buffered, path, compression))
    }

    /// Reads records from `input` (a file's bytes, compressed as `compression` says); `path`
    /// names the source in error messages.
    pub fn new(
        input: impl Read + Send + 'static,
        path: &Path,
        compression: Compression,
    ) -> TfRecordReader {
        TfRecordReader {
            path: path.to_path_buf(),
            compression,
            input: compression.decoder(input),
            offset: 0,
            index: 0,
            done: false,
        }
    }

    /// The file being read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Index of the next record (= records read so far).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Byte offset of the next record (in the decompressed stream).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads the next record's data; `Ok(None)` at a clean end of file.
    ///
    /// # Errors
    /// See [`TfRecordReader`]. After an error every later call returns `Ok(None)`.
    pub fn read_record(&mut self) -> Result<Option<Vec<u8>>> {
        if self.done {
            return Ok(None);
        }
        let result = self.read_one();
        match &result {
            Ok(Some(data)) => {
                self.offset += (HEADER_SIZE + data.len() + FOOTER_SIZE) as u64;
                self.index += 1;
            }
            _ => self.done = true,
        }
        result
    }

    fn read_one(&mut self) -> Result<Option<Vec<u8>>> {
        let mut header = [0u8; HEADER_SIZE];
        match read_full(&mut self.input, &mut header) {
            Ok(()) => {}
            Err(Short::Eof(0)) => return Ok(None),
            Err(Short::Eof(got)) => {
                return Err(self.truncated(format!(
                    "the file ends {got} bytes into the {HEADER_SIZE}-byte record header"
                )));
            }
            Err(Short::Err(err)) => return Err(self.io_error(err)),
        }
        let (length_bytes, crc_bytes) = header.split_at(8);
        let stored = u32::from_le_bytes(crc_bytes.try_into().expect("4 bytes"));
        let computed = masked_crc32c(length_bytes);
        if stored != computed {
            return Err(self.corrupted(format!(
                "the length field's checksum does not match (stored 0x{stored:08x}, computed \
                 0x{computed:08x}; header bytes {}..{})",
                self.offset,
                self.offset + HEADER_SIZE as u64
            )));
        }
        let length = u64::from_le_bytes(length_bytes.try_into().expect("8 bytes"));
        // Grows with the bytes actually read, so a huge length cannot exhaust memory.
        let mut data = Vec::new();
        match (&mut self.input).take(length).read_to_end(&mut data) {
            Ok(got) if (got as u64) < length => {
                return Err(self.truncated(format!(
                    "the header announces {length} bytes of data but the file ends after {got}"
                )));
            }
            Ok(_) => {}
            Err(err) => return Err(self.io_error(err)),
        }
        let mut footer = [0u8; FOOTER_SIZE];
        match read_full(&mut self.input, &mut footer) {
            Ok(()) => {}
            Err(Short::Eof(got)) => {
                return Err(self.truncated(format!(
                    "the file ends {got} bytes into the {FOOTER_SIZE}-byte footer after \
                     {length} bytes of data"
                )));
            }
            Err(Short::Err(err)) => return Err(self.io_error(err)),
        }
        let stored = u32::from_le_bytes(footer);
        let computed = masked_crc32c(&data);
        if stored != computed {
            let data_start = self.offset + HEADER_SIZE as u64;
            return Err(self.corrupted(format!(
                "the data's checksum does not match (stored 0x{stored:08x}, computed \
                 0x{computed:08x}; data bytes {data_start}..{}, footer at byte {})",
                data_start + length,
                data_start + length
            )));
        }
        Ok(Some(data))
    }

    fn truncated(&self, detail: String) -> DataError {
        self.record_error(
            "truncated record",
            format!(
                "{detail}; the file was cut short (an interrupted write or copy?): write it \
                 again{}",
                self.offset_note()
            ),
        )
    }

    fn corrupted(&self, detail: String) -> DataError {
        self.record_error(
            "corrupted record",
            format!(
                "{detail}; the file is damaged or is not a TFRecord file{}",
                self.compression_hint()
            ),
        )
    }

    fn offset_note(&self) -> String {
        match self.compression {
            Compression::None => String::new(),
            c => format!(" (offsets are in the {c}-decompressed stream)"),
        }
    }

    fn compression_hint(&self) -> String {
        match self.compression {
            Compression::None => {
                " (or it is compressed: pass compression_type GZIP or ZLIB)".to_string()
            }
            c => format!(" (offsets are in the {c}-decompressed stream)"),
        }
    }

    fn record_error(&self, message: &str, detail: String) -> DataError {
        DataError::TfRecord {
            path: self.path.clone(),
            index: self.index,
            offset: self.offset,
            message: message.to_string(),
            detail,
        }
    }

    /// Read failures: errors of the decompressor are format errors, the rest I/O errors.
    fn io_error(&self, err: io::Error) -> DataError {
        match (self.compression, err.kind()) {
            (
                Compression::Gzip | Compression::Zlib,
                io::ErrorKind::InvalidData
                | io::ErrorKind::InvalidInput
                | io::ErrorKind::UnexpectedEof,
            ) => DataError::Format {
                path: self.path.clone(),
                offset: self.offset,
                message: format!(
                    "damaged {} stream ({err}): check compression_type and that the file is \
                     complete; the damage is in record index {}, which starts in the \
                     decompressed stream",
                    self.compression, self.index
                ),
            },
            _ => DataError::Io {
                path: self.path.clone(),
                source: err,
            },
        }
    }
}

impl Iterator for TfRecordReader {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Result<Vec<u8>>> {
        self.read_record().transpose()
    }
}

/// Fills `buf` completely, or says how many bytes were read before the end of the input.
fn read_full(input: &mut dyn Read, buf: &mut [u8]) -> std::result::Result<(), Short> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => return Err(Short::Eof(got)),
            Ok(n) => got += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(Short::Err(err)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit-at-a-time CRC-32C (reflected polynomial 0x82F63B78), independent of the crate.
    fn reference_crc32c(data: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &byte in data {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn crc32c_check_values() {
        // The CRC-32C check value, and the RFC 3720 (iSCSI) appendix B.4 vectors.
        let ascending: Vec<u8> = (0..32).collect();
        let cases: [(&[u8], u32); 4] = [
            (b"123456789", 0xE306_9283),
            (&[0u8; 32], 0x8A91_36AA),
            (&[0xFFu8; 32], 0x62A8_AB43),
            (&ascending, 0x46DD_794E),
        ];
        for (data, crc) in cases {
            assert_eq!(crc32c::crc32c(data), crc);
            assert_eq!(reference_crc32c(data), crc);
        }
    }

    #[test]
    fn mask_by_hand() {
        // rotr(0xE3069283, 15): 0xE3069283 >> 15 = 0x1C60D; its low 15 bits 0x1283 << 17 =
        // 0x25060000; together 0x2507C60D; + 0xA282EAD8 = 0xC78AB0E5.
        assert_eq!(0xE306_9283u32 >> 15, 0x1_C60D);
        assert_eq!((0xE306_9283u32 & 0x7FFF) << 17, 0x2506_0000);
        assert_eq!(mask_crc(0xE306_9283), 0xC78A_B0E5);
        assert_eq!(masked_crc32c(b"123456789"), 0xC78A_B0E5);
        assert_eq!(unmask_crc(0xC78A_B0E5), 0xE306_9283);
        assert_eq!(mask_crc(0), 0xA282_EAD8);
        for crc in [0u32, 1, 0xFFFF_FFFF, 0x8000_0000, 0x1234_5678] {
            assert_eq!(unmask_crc(mask_crc(crc)), crc);
        }
    }

    #[test]
    fn known_answer_record_for_123456789() {
        // Header: length 9 as u64 LE; crc32c of those 8 bytes is 0x872FCB77 (reference CRC
        // above), masked: rotr 15 = 0x96EF0E5F, + 0xA282EAD8 = 0x3971F937.
        assert_eq!(reference_crc32c(&[9, 0, 0, 0, 0, 0, 0, 0]), 0x872F_CB77);
        assert_eq!(mask_crc(0x872F_CB77), 0x3971_F937);
        let mut expected = vec![9u8, 0, 0, 0, 0, 0, 0, 0, 0x37, 0xF9, 0x71, 0x39];
        expected.extend_from_slice(b"123456789");
        // Footer: masked CRC of the data, 0xC78AB0E5, little-endian.
        expected.extend_from_slice(&[0xE5, 0xB0, 0x8A, 0xC7]);
        assert_eq!(encode_record(b"123456789"), expected);
    }

    #[test]
    fn known_answer_empty_record() {
        // crc32c of eight zero bytes is 0x8C28B28A, masked 0x07980329; the empty data's CRC
        // is 0, masked 0xA282EAD8.
        assert_eq!(reference_crc32c(&[0u8; 8]), 0x8C28_B28A);
        let mut expected = vec![0u8; 8];
        expected.extend_from_slice(&[0x29, 0x03, 0x98, 0x07]);
        expected.extend_from_slice(&[0xD8, 0xEA, 0x82, 0xA2]);
        assert_eq!(encode_record(b""), expected);
    }

    fn read_all(bytes: Vec<u8>) -> Vec<Result<Vec<u8>>> {
        TfRecordReader::new(
            io::Cursor::new(bytes),
            Path::new("t.tfrecord"),
            Compression::None,
        )
        .collect()
    }

    #[test]
    fn reads_back_records_and_counts_positions() {
        let records: Vec<Vec<u8>> = vec![b"a".to_vec(), vec![], vec![7; 300]];
        let mut bytes = Vec::new();
        for r in &records {
            write_record(&mut bytes, r).unwrap();
        }
        let mut reader =
            TfRecordReader::new(io::Cursor::new(bytes), Path::new("t"), Compression::None);
        let mut got = Vec::new();
        while let Some(r) = reader.read_record().unwrap() {
            got.push(r);
        }
        assert_eq!(got, records);
        assert_eq!(reader.index(), 3);
        assert_eq!(reader.offset(), (3 * 16 + 1 + 300) as u64);
        assert!(read_all(Vec::new()).is_empty());
    }
}
