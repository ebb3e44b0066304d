//! Reading array files (IDX, NPY) without trusting their headers.
//!
//! A header claims a shape; the bytes that follow may be fewer (a truncated or hostile file),
//! and the source may be a pipe whose size nobody knows. [`Input`] reads a file's header,
//! checks the claimed payload against what the source can hold *before* allocating
//! ([`Input::check_claim`]), allocates with `try_reserve` (an impossible size is an error
//! naming the file, never an abort) and decodes the payload chunk by chunk straight into the
//! output vector, so that reading needs about the decoded array's size, not two or three times
//! it. Where the size is not known (pipes, gzip streams) the output grows with the bytes that
//! actually arrive, so a header that lies allocates nothing it has no data for.

use std::io::{self, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;

use crate::compression::Compression;
use crate::error::{DataError, Result, format_error};

/// DEFLATE's best ratio is 1032:1 (258-byte matches in 2-bit codes): a gzip file of `n` bytes
/// decompresses to at most `1032 n` bytes, whatever it claims.
const GZIP_MAX_RATIO: u64 = 1032;

/// Bytes read (and decoded) per step.
const CHUNK: usize = 1 << 20;

/// Trailing bytes counted before giving up (the error says "at least").
const TRAILING_COUNTED: u64 = 1 << 20;

/// How many bytes a source holds from its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Room {
    /// Exactly this many: a regular file, an object, a byte slice.
    Exact(u64),
    /// At most this many: gzip data of a known compressed size.
    AtMost(u64),
    /// Unknown: a pipe, or gzip data read from one.
    Unknown,
}

/// A byte source being read as an array file: position, size knowledge, error context.
pub(crate) struct Input<'a> {
    reader: Box<dyn Read + 'a>,
    path: &'a Path,
    /// Bytes consumed (in the decompressed stream for gzip).
    pos: u64,
    room: Room,
    gzip: bool,
}

impl<'a> Input<'a> {
    /// `reader`, holding `len` bytes when known, read as it is.
    pub(crate) fn plain(reader: impl Read + 'a, len: Option<u64>, path: &'a Path) -> Input<'a> {
        Input {
            reader: Box::new(reader),
            path,
            pos: 0,
            room: len.map_or(Room::Unknown, Room::Exact),
            gzip: false,
        }
    }

    /// `reader`, holding `len` bytes when known, gunzipped when it starts with gzip's magic
    /// bytes `1f 8b`.
    ///
    /// # Errors
    /// [`DataError::Io`] when the first bytes cannot be read.
    pub(crate) fn sniffed(
        mut reader: impl Read + 'a,
        len: Option<u64>,
        path: &'a Path,
    ) -> Result<Input<'a>> {
        let mut head = [0u8; 2];
        let got = fill(&mut reader, &mut head).map_err(|e| io_error(path, e))?;
        let chained = io::Cursor::new(head[..got].to_vec()).chain(reader);
        if Compression::sniff(&head[..got]) != Some(Compression::Gzip) {
            return Ok(Input::plain(chained, len, path));
        }
        Ok(Input {
            reader: Box::new(MultiGzDecoder::new(chained)),
            path,
            pos: 0,
            room: len.map_or(Room::Unknown, |n| {
                Room::AtMost(n.saturating_mul(GZIP_MAX_RATIO))
            }),
            gzip: true,
        })
    }

    /// Bytes consumed so far.
    pub(crate) fn pos(&self) -> u64 {
        self.pos
    }

    /// The file, for error messages.
    pub(crate) fn path(&self) -> &'a Path {
        self.path
    }

    /// A [`DataError::Format`] at byte `offset`, saying when offsets are decompressed ones.
    pub(crate) fn error(&self, offset: u64, message: impl Into<String>) -> DataError {
        let mut message = message.into();
        if self.gzip {
            message.push_str(" (in the gzip-decompressed data)");
        }
        format_error(self.path, offset as usize, message)
    }

    /// Reads into `buf` until it is full or the source ends; returns the bytes read.
    ///
    /// # Errors
    /// [`DataError::Io`] for a failed read; [`DataError::Format`] for a corrupt gzip stream.
    pub(crate) fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let got = fill(&mut self.reader, buf).map_err(|e| self.read_error(e))?;
        self.pos += got as u64;
        Ok(got)
    }

    /// Reads up to `n` more bytes (fewer at the end), for describing what a file really is.
    pub(crate) fn peek_more(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0; n];
        let got = self.fill(&mut buf).unwrap_or(0);
        buf.truncate(got);
        buf
    }

    fn read_error(&self, err: io::Error) -> DataError {
        if self.gzip {
            self.error(
                self.pos,
                format!("corrupt or truncated gzip stream ({err})"),
            )
        } else {
            io_error(self.path, err)
        }
    }

    /// The bytes the source still holds, when known.
    fn left(&self) -> Option<u64> {
        match self.room {
            Room::Exact(n) => Some(n.saturating_sub(self.pos)),
            _ => None,
        }
    }

    /// Checks that a payload of `expected` bytes (for `shape`) can follow, before anything is
    /// allocated for it: a known-size source must hold exactly that many ("truncated" /
    /// "trailing bytes"), a gzip file must be able to decompress to that many.
    ///
    /// # Errors
    /// [`DataError::Format`] as above.
    pub(crate) fn check_claim(&self, expected: u64, shape: &[usize]) -> Result<()> {
        match self.room {
            Room::Exact(total) => {
                let found = total.saturating_sub(self.pos);
                if found < expected {
                    return Err(self.truncated(total, expected, found, shape));
                }
                if found > expected {
                    return Err(self.trailing(
                        self.pos + expected,
                        found - expected,
                        expected,
                        shape,
                    ));
                }
            }
            Room::AtMost(max) if expected > max.saturating_sub(self.pos) => {
                return Err(self.error(
                    self.pos,
                    format!(
                        "the header claims {expected} bytes of data for shape {shape:?}, more \
                         than this gzip file can decompress to (at most {max} bytes): the \
                         header is corrupt or the file is cut short"
                    ),
                ));
            }
            _ => {}
        }
        Ok(())
    }

    fn truncated(&self, at: u64, expected: u64, found: u64, shape: &[usize]) -> DataError {
        self.error(
            at,
            format!(
                "truncated: expected {expected} bytes of data for shape {shape:?}, found {found}"
            ),
        )
    }

    fn trailing(&self, at: u64, extra: u64, expected: u64, shape: &[usize]) -> DataError {
        let count = if extra >= TRAILING_COUNTED {
            format!("at least {extra}")
        } else {
            extra.to_string()
        };
        self.error(
            at,
            format!(
                "{count} unexpected trailing bytes after the {expected} bytes of data for shape \
                 {shape:?}"
            ),
        )
    }

    /// Reserves room for `n` more values of `out`, or says the claim cannot be allocated.
    fn reserve<T>(&self, out: &mut Vec<T>, n: usize, shape: &[usize]) -> Result<()> {
        // Before asking the allocator: an overcommitting kernel grants more than there is, and
        // the array then dies to the OOM killer while it is filled.
        let what = format!(
            "{}: the array of shape {shape:?} its header claims",
            self.path.display()
        );
        crate::alloc::check(
            &what,
            out.len().saturating_add(n),
            std::mem::size_of::<T>().max(1),
        )?;
        out.try_reserve(n).map_err(|_| {
            let bytes = (n as u128) * (std::mem::size_of::<T>().max(1) as u128);
            io_error(
                self.path,
                io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    format!(
                        "cannot allocate {bytes} bytes for the array of shape {shape:?} its \
                         header claims: not enough memory"
                    ),
                ),
            )
        })
    }

    /// Reads `n` payload bytes of `shape` into `out` (whose length counts the payload read so
    /// far: `done` bytes before this call), reserving them up front when the source's size
    /// proved the claim, else as they arrive.
    fn read_into(&mut self, out: &mut Vec<u8>, n: u64, shape: &[usize]) -> Result<()> {
        let start = out.len();
        let mut left = n;
        while left > 0 {
            let step = left.min(CHUNK as u64) as usize;
            self.reserve(out, step, shape)?;
            let read = (&mut self.reader).take(step as u64).read_to_end(out);
            let got = read.map_err(|e| self.read_error(e))?;
            self.pos += got as u64;
            left -= got as u64;
            if got < step {
                let found = (out.len() - start) as u64;
                return Err(self.truncated(self.pos, n, found, shape));
            }
        }
        Ok(())
    }

    /// The `n` payload bytes of an array of `shape`, as they are.
    ///
    /// # Errors
    /// "truncated" when the source ends first; [`DataError::Io`] when `n` bytes cannot be
    /// allocated; read errors as [`Input::fill`].
    pub(crate) fn bytes(&mut self, n: usize, shape: &[usize]) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        if self.left().is_some() {
            self.reserve(&mut out, n, shape)?;
        }
        self.read_into(&mut out, n as u64, shape)?;
        Ok(out)
    }

    /// `count` values of `width` bytes (at most 8), each decoded by `convert`.
    ///
    /// # Errors
    /// As [`Input::bytes`].
    pub(crate) fn values<T>(
        &mut self,
        count: usize,
        width: usize,
        shape: &[usize],
        mut convert: impl FnMut(&[u8]) -> T,
    ) -> Result<Vec<T>> {
        debug_assert!((1..=8).contains(&width));
        let expected = (count * width) as u64;
        let mut out = Vec::new();
        if self.left().is_some() {
            self.reserve(&mut out, count, shape)?;
        }
        let per_step = CHUNK / width;
        let mut buf = vec![0u8; per_step.min(count) * width];
        while out.len() < count {
            let n = per_step.min(count - out.len());
            let got = self.fill(&mut buf[..n * width])?;
            if got < n * width {
                let found = (out.len() * width + got) as u64;
                return Err(self.truncated(self.pos, expected, found, shape));
            }
            self.reserve(&mut out, n, shape)?;
            out.extend(buf[..n * width].chunks_exact(width).map(&mut convert));
        }
        Ok(out)
    }

    /// `count` byte strings of `width` bytes each, trailing NULs stripped (NumPy's `|S<n>`).
    ///
    /// # Errors
    /// As [`Input::bytes`].
    pub(crate) fn strings(
        &mut self,
        count: usize,
        width: usize,
        shape: &[usize],
    ) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        if self.left().is_some() {
            self.reserve(&mut out, count, shape)?;
        }
        let expected = (count as u64) * (width as u64);
        for i in 0..count {
            let mut value = Vec::new();
            self.read_into(&mut value, width as u64, shape)
                .map_err(|err| match err {
                    DataError::Format { message, .. } if message.starts_with("truncated") => self
                        .truncated(
                            self.pos,
                            expected,
                            (i as u64) * (width as u64) + value.len() as u64,
                            shape,
                        ),
                    other => other,
                })?;
            let end = value.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            value.truncate(end);
            self.reserve(&mut out, 1, shape)?;
            out.push(value);
        }
        Ok(out)
    }

    /// Checks that nothing follows the `expected` payload bytes of `shape` (counting at most
    /// about a megabyte of them, so a gzip bomb's tail is not inflated).
    ///
    /// # Errors
    /// "unexpected trailing bytes" at the payload's end.
    pub(crate) fn finish(&mut self, expected: u64, shape: &[usize]) -> Result<()> {
        let end = self.pos;
        let mut scratch = vec![0u8; 64 << 10];
        let mut extra = 0u64;
        while extra < TRAILING_COUNTED {
            let got = self.fill(&mut scratch)?;
            if got == 0 {
                break;
            }
            extra += got as u64;
        }
        if extra > 0 {
            return Err(self.trailing(end, extra, expected, shape));
        }
        Ok(())
    }
}

/// Reads into `buf` until it is full or `reader` ends; returns the bytes read.
pub(crate) fn fill(reader: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn io_error(path: &Path, source: io::Error) -> DataError {
    DataError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What the first bytes of a file show it to be, when they show a known format: for errors
/// that say "not an IDX file: it looks like a NumPy .npy file".
pub(crate) fn looks_like(head: &[u8]) -> Option<&'static str> {
    let text = !head.is_empty()
        && match std::str::from_utf8(head) {
            Ok(s) => !s.chars().any(|c| c.is_control() && !c.is_whitespace()),
            Err(e) => e.error_len().is_none() && e.valid_up_to() > 0,
        };
    Some(match head {
        [0x93, b'N', b'U', b'M', b'P', b'Y', ..] => "a NumPy .npy file",
        [b'P', b'K', 3, 4, ..] => "a ZIP archive (a NumPy .npz file?)",
        [0x1f, 0x8b, ..] => "gzip-compressed data",
        [0x89, b'P', b'N', b'G', ..] => "a PNG image",
        [0xff, 0xd8, 0xff, ..] => "a JPEG image",
        [b'G', b'I', b'F', b'8', ..] => "a GIF image",
        [b'B', b'M', ..] if head.len() >= 14 && !text => "a BMP image",
        [0, 0, 0x08 | 0x09 | 0x0b | 0x0c | 0x0d | 0x0e, 1..=16, ..] => "an IDX file",
        _ if head.len() >= 12
            && crate::tfrecord::masked_crc32c(&head[..8])
                == u32::from_le_bytes([head[8], head[9], head[10], head[11]]) =>
        {
            "a TFRecord file"
        }
        _ if text && head.contains(&b',') => "text (CSV?)",
        _ if text => "text",
        _ => return None,
    })
}

/// `message` followed by "; it looks like X" when `head` shows a known format.
pub(crate) fn with_guess(message: String, head: &[u8]) -> String {
    match looks_like(head) {
        Some(kind) => format!("{message}; it looks like {kind}"),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guesses_common_formats_from_their_first_bytes() {
        assert_eq!(looks_like(b"\x93NUMPY\x01\x00"), Some("a NumPy .npy file"));
        assert_eq!(looks_like(b"a,b\n1,2\n"), Some("text (CSV?)"));
        assert_eq!(looks_like(b"\x89PNG\r\n\x1a\n"), Some("a PNG image"));
        assert_eq!(looks_like(&[0, 0, 8, 3, 0, 0]), Some("an IDX file"));
        let record = crate::tfrecord::encode_record(b"x");
        assert_eq!(looks_like(&record), Some("a TFRecord file"));
        assert_eq!(looks_like(&[0xde, 0xad, 0xbe, 0xef, 0x00]), None);
    }

    #[test]
    fn a_claim_beyond_a_known_size_is_refused_before_allocating() {
        let path = Path::new("big.idx");
        let input = Input::plain(&[0u8; 10][..], Some(10), path);
        let err = input.check_claim(1 << 40, &[1 << 20, 1 << 20]).unwrap_err();
        assert!(
            err.to_string()
                .contains("truncated: expected 1099511627776 bytes of data"),
            "{err}"
        );
        // A pipe: the claim is refused when the data runs out, having allocated only chunks.
        let mut input = Input::plain(&[7u8; 10][..], None, path);
        let err = input.bytes(1 << 40, &[1 << 40]).unwrap_err();
        assert!(err.to_string().contains("found 10 at byte 10"), "{err}");
    }

    #[test]
    fn impossible_allocations_are_errors() {
        let path = Path::new("huge.npy");
        let mut input = Input::plain(&[0u8; 8][..], Some(u64::MAX), path);
        let err = input
            .values(usize::MAX / 2, 8, &[usize::MAX / 2], |c| c[0])
            .unwrap_err();
        // Refused before the allocator is asked (an overcommitting kernel would grant it).
        let m = err.to_string();
        assert!(matches!(&err, DataError::Memory(_)), "{err:?}");
        assert!(
            m.starts_with("out of memory: huge.npy: the array of shape"),
            "{m}"
        );
        assert!(m.contains("needs 8.00 EiB, more than the"), "{m}");
    }
}
