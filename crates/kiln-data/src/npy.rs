//! NumPy `.npy` files, versions 1.0, 2.0 and 3.0.
//!
//! Format (from <https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html>):
//!
//! | bytes | content |
//! |-------|---------|
//! | 0–5   | magic `\x93NUMPY` |
//! | 6, 7  | format version, major and minor (`1 0`, `2 0` or `3 0`) |
//! | 8…    | header length: `u16` little-endian (v1.0) or `u32` little-endian (v2.0, v3.0) |
//! | then  | header: a Python dict literal `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }`, padded with spaces and a final `\n` (latin-1 for v1/v2, UTF-8 for v3) |
//! | then  | the values in the order and byte order `descr` says |
//!
//! Supported `descr` values: `|u1` → [`DType::U8`], `<i4` → [`DType::I32`], `<i8` →
//! [`DType::I64`], `<f4` → [`DType::F32`], `<f8` → [`DType::F64`], the same with big-endian
//! `>` (or native `=`), and, widened: `|b1` (bool) → `U8`, `|i1`, `<i2`, `<u2` → `I32`, `<u4` →
//! `I64`, and byte strings `|S<n>` → [`DType::String`] (NumPy's fixed-width `bytes_`: each
//! value is padded to `n` bytes with NULs, which reading strips, as NumPy does). Anything else
//! (`<u8`, `<f2`, complex, unicode `<U`, structured dtypes) and `fortran_order: True` are
//! rejected with [`DataError::Format`].

use std::fs;
use std::io::Read;
use std::path::Path;

use crate::bounded::{Input, with_guess};
use crate::element::{Array, Buffer, DType};
use crate::error::{DataError, Result, format_error};

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// The longest header read (NumPy writes a few hundred bytes; its own reader refuses more than
/// 10000 unless told otherwise).
const MAX_HEADER: usize = 1 << 20;

/// Reads a `.npy` file from a local path, `file://` URL, `s3://` URL
/// ([`crate::storage::open_sized`]) or standard input for `-`. The header is checked against
/// the file's size before the data is allocated, and the values are decoded as they are read.
///
/// # Errors
/// [`DataError::Io`] when the file cannot be read, or the array its header claims cannot be
/// allocated; [`DataError::Format`] (with the byte offset) for a bad magic string (saying what
/// the file looks like instead) or version, a malformed header, an unsupported `descr`,
/// `fortran_order: True`, or data shorter or longer than the shape requires.
pub fn read_npy(path: &Path) -> Result<Array> {
    let (reader, len) = crate::storage::open_sized(path)?;
    read_npy_from(reader, len, path)
}

/// Reads `.npy` data from `reader`, which holds `len` bytes when known (`None` for a pipe);
/// `path` names it in error messages.
///
/// # Errors
/// As [`read_npy`].
pub fn read_npy_from(reader: impl Read, len: Option<u64>, path: &Path) -> Result<Array> {
    read_from(&mut Input::plain(reader, len, path))
}

/// Parses `.npy` bytes; `path` is used only in error messages.
///
/// # Errors
/// As [`read_npy`], less the I/O errors.
pub fn parse_npy(bytes: &[u8], path: &Path) -> Result<Array> {
    read_npy_from(bytes, Some(bytes.len() as u64), path)
}

/// Magic string, version and header length: returns `(header length, header is UTF-8)`.
fn read_preamble(input: &mut Input<'_>) -> Result<(usize, bool)> {
    let mut pre = [0u8; 8];
    let got = input.fill(&mut pre)?;
    if got < 8 || &pre[..6] != MAGIC {
        let mut head = pre[..got].to_vec();
        head.extend(input.peek_more(8));
        return Err(input.error(
            0,
            with_guess(
                "not a .npy file: expected the magic string \\x93NUMPY".to_string(),
                &head,
            ),
        ));
    }
    let (major, minor) = (pre[6], pre[7]);
    let (len_size, utf8) = match (major, minor) {
        (1, 0) => (2, false),
        (2, 0) => (4, false),
        (3, 0) => (4, true),
        _ => {
            return Err(input.error(
                6,
                format!(
                    "unsupported .npy format version {major}.{minor} (NumPy reads 1.0, 2.0 and \
                     3.0 only)"
                ),
            ));
        }
    };
    let mut len = [0u8; 4];
    if input.fill(&mut len[..len_size])? < len_size {
        return Err(input.error(input.pos(), "truncated: the header length is cut short"));
    }
    Ok((u32::from_le_bytes(len) as usize, utf8))
}

fn read_from(input: &mut Input<'_>) -> Result<Array> {
    let (header_len, utf8) = read_preamble(input)?;
    let header_start = input.pos() as usize;
    if header_len > MAX_HEADER {
        return Err(input.error(
            header_start as u64 - 4,
            format!(
                "the header length {header_len} is more than kiln reads ({MAX_HEADER} bytes; \
                 NumPy writes a few hundred): the file is corrupt"
            ),
        ));
    }
    let mut header_bytes = vec![0u8; header_len];
    let got = input.fill(&mut header_bytes)?;
    if got < header_len {
        return Err(input.error(
            input.pos(),
            format!("truncated: expected a {header_len}-byte header, found {got}"),
        ));
    }
    let header: String = if utf8 {
        std::str::from_utf8(&header_bytes)
            .map_err(|e| {
                input.error(
                    (header_start + e.valid_up_to()) as u64,
                    "header is not valid UTF-8",
                )
            })?
            .to_string()
    } else {
        header_bytes.iter().map(|&b| b as char).collect() // latin-1
    };
    let path = input.path();
    let header = parse_header(&header, path, header_start)?;

    let (dtype, width, big_endian) = parse_descr(&header.descr).ok_or_else(|| {
        format_error(
            path,
            header_start + header.descr_offset,
            unsupported_dtype(&header.descr),
        )
    })?;
    if header.fortran_order {
        return Err(format_error(
            path,
            header_start + header.fortran_offset,
            "fortran_order=True (column-major) arrays are not supported; save a C-ordered \
             array (np.ascontiguousarray) instead",
        ));
    }
    let shape = header.shape;
    let count = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|n| n.checked_mul(width).is_some())
        .ok_or_else(|| {
            format_error(
                path,
                header_start + header.shape_offset,
                format!("shape {shape:?} is too large to address"),
            )
        })?;
    let expected = count * width;
    input.check_claim(expected as u64, &shape)?;
    let buffer = decode(
        input,
        count,
        (dtype, width, big_endian),
        &header.descr,
        &shape,
    )?;
    input.finish(expected as u64, &shape)?;
    Array::new(shape, buffer)
}

/// Why `descr` cannot be read, and what to save instead: NumPy's unicode strings (`<U`) as
/// UTF-8 byte strings, which `kiln predict` runs through the run's text ops.
fn unsupported_dtype(descr: &str) -> String {
    if descr
        .trim_start_matches(['<', '>', '=', '|'])
        .starts_with('U')
    {
        return format!(
            "unicode strings ({descr:?}) are not read; save UTF-8 byte strings instead, \
             np.save(path, np.char.encode(texts, \"utf-8\")): kiln predict runs them through \
             the run's text ops (text_vectorization, string_lookup); kiln serve and ONNX take \
             the ops' output (token indices), not strings"
        );
    }
    format!(
        "unsupported dtype {descr:?} (kiln reads |u1, <i4, <i8, <f4, <f8, their big-endian forms, \
         and |b1, |i1, <i2, <u2, <u4 widened, and |S byte strings)"
    )
}

/// `(dtype read into, stored width in bytes, big-endian)` for a supported `descr`.
fn parse_descr(descr: &str) -> Option<(DType, usize, bool)> {
    let (order, kind) = match descr.chars().next()? {
        c @ ('<' | '>' | '=' | '|') => (c, &descr[1..]),
        _ => ('=', descr),
    };
    let big = match order {
        '>' => true,
        '=' => cfg!(target_endian = "big"),
        _ => false,
    };
    let (dtype, width) = match kind {
        "u1" | "b1" => (DType::U8, 1),
        "i1" => (DType::I32, 1),
        "i2" | "u2" => (DType::I32, 2),
        "i4" => (DType::I32, 4),
        "u4" | "i8" => (DType::I64, if kind == "u4" { 4 } else { 8 }),
        "f4" => (DType::F32, 4),
        "f8" => (DType::F64, 8),
        _ => match kind.strip_prefix('S')?.parse::<usize>() {
            Ok(n) if n > 0 => (DType::String, n),
            _ => return None,
        },
    };
    Some((dtype, width, big))
}

/// Reads `count` values of the parsed `descr` (`(dtype, width, big-endian)`).
fn decode(
    input: &mut Input<'_>,
    count: usize,
    (dtype, width, big): (DType, usize, bool),
    descr: &str,
    shape: &[usize],
) -> Result<Buffer> {
    macro_rules! read {
        ($t:ty, $n:expr) => {
            input.values(count, $n, shape, |c| {
                let a: [u8; $n] = c.try_into().expect("chunks of the width");
                if big {
                    <$t>::from_be_bytes(a)
                } else {
                    <$t>::from_le_bytes(a)
                }
            })
        };
    }
    let unsigned = descr.contains('u');
    Ok(match (dtype, width) {
        (DType::U8, _) => Buffer::U8(input.bytes(count, shape)?),
        (DType::I32, 1) => Buffer::I32(input.values(count, 1, shape, |c| i32::from(c[0] as i8))?),
        (DType::I32, 2) if unsigned => Buffer::I32(widen(read!(u16, 2)?)),
        (DType::I32, 2) => Buffer::I32(widen(read!(i16, 2)?)),
        (DType::I32, _) => Buffer::I32(read!(i32, 4)?),
        (DType::I64, 4) => Buffer::I64(widen(read!(u32, 4)?)),
        (DType::I64, _) => Buffer::I64(read!(i64, 8)?),
        (DType::F32, _) => Buffer::F32(read!(f32, 4)?),
        (DType::F64, _) => Buffer::F64(read!(f64, 8)?),
        (DType::String, _) => Buffer::String(input.strings(count, width, shape)?),
    })
}

/// Narrow integers widened to the dtype kiln holds them in.
fn widen<A, B: From<A>>(values: Vec<A>) -> Vec<B> {
    values.into_iter().map(B::from).collect()
}

/// The three header keys, with the offsets (within the header) of their values.
struct Header {
    descr: String,
    descr_offset: usize,
    fortran_order: bool,
    fortran_offset: usize,
    shape: Vec<usize>,
    shape_offset: usize,
}

enum Value {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
}

/// A parser for the restricted Python literal NumPy writes.
struct HeaderParser<'a> {
    chars: Vec<char>,
    pos: usize,
    path: &'a Path,
    base: usize,
}

impl HeaderParser<'_> {
    fn err(&self, message: impl Into<String>) -> DataError {
        // Offsets are in bytes; headers are ASCII in practice, so char index == byte index.
        format_error(
            self.path,
            self.base + self.pos,
            format!("malformed .npy header: {}", message.into()),
        )
    }

    fn skip_ws(&mut self) {
        while self.pos < self.chars.len() && self.chars[self.pos].is_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_ws();
        self.chars.get(self.pos).copied()
    }

    fn expect(&mut self, c: char) -> Result<()> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(format!("expected {c:?}")))
        }
    }

    fn string(&mut self) -> Result<String> {
        let quote = match self.peek() {
            Some(q @ ('\'' | '"')) => q,
            _ => return Err(self.err("expected a quoted string")),
        };
        self.pos += 1;
        let start = self.pos;
        while self.pos < self.chars.len() && self.chars[self.pos] != quote {
            self.pos += 1;
        }
        if self.pos >= self.chars.len() {
            return Err(self.err("unterminated string"));
        }
        let s: String = self.chars[start..self.pos].iter().collect();
        self.pos += 1;
        Ok(s)
    }

    fn integer(&mut self) -> Result<usize> {
        self.skip_ws();
        let start = self.pos;
        while self.pos < self.chars.len() && self.chars[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.err("expected a non-negative integer in the shape"));
        }
        let digits: String = self.chars[start..self.pos].iter().collect();
        if self.chars.get(self.pos) == Some(&'L') {
            self.pos += 1; // Python 2 long suffix
        }
        digits
            .parse()
            .map_err(|_| self.err(format!("dimension {digits} is too large")))
    }

    fn value(&mut self) -> Result<Value> {
        match self.peek() {
            Some('\'' | '"') => Ok(Value::Str(self.string()?)),
            Some('(') => {
                self.pos += 1;
                let mut dims = Vec::new();
                loop {
                    if self.peek() == Some(')') {
                        self.pos += 1;
                        break;
                    }
                    dims.push(self.integer()?);
                    match self.peek() {
                        Some(',') => self.pos += 1,
                        Some(')') => {}
                        _ => return Err(self.err("expected ',' or ')' in the shape")),
                    }
                }
                Ok(Value::Tuple(dims))
            }
            Some('[') => Err(self.err("structured dtypes (a list descr) are not supported")),
            _ => {
                for (word, b) in [("True", true), ("False", false)] {
                    let end = self.pos + word.len();
                    if end <= self.chars.len()
                        && self.chars[self.pos..end].iter().copied().eq(word.chars())
                    {
                        self.pos = end;
                        return Ok(Value::Bool(b));
                    }
                }
                Err(self.err("expected a string, True/False or a tuple"))
            }
        }
    }
}

fn parse_header(text: &str, path: &Path, base: usize) -> Result<Header> {
    let mut p = HeaderParser {
        chars: text.chars().collect(),
        pos: 0,
        path,
        base,
    };
    let mut descr = None;
    let mut fortran = None;
    let mut shape = None;
    p.expect('{')?;
    loop {
        if p.peek() == Some('}') {
            p.pos += 1;
            break;
        }
        let key = p.string()?;
        p.expect(':')?;
        let offset = {
            p.skip_ws();
            p.pos
        };
        let value = p.value()?;
        match (key.as_str(), value) {
            ("descr", Value::Str(s)) => descr = Some((s, offset)),
            ("fortran_order", Value::Bool(b)) => fortran = Some((b, offset)),
            ("shape", Value::Tuple(t)) => shape = Some((t, offset)),
            ("descr" | "fortran_order" | "shape", _) => {
                p.pos = offset;
                return Err(p.err(format!("wrong value type for {key:?}")));
            }
            _ => {
                p.pos = offset;
                return Err(p.err(format!(
                    "unexpected key {key:?} (a .npy header has exactly 'descr', \
                     'fortran_order' and 'shape'; NumPy refuses any other)"
                )));
            }
        }
        match p.peek() {
            Some(',') => p.pos += 1,
            Some('}') => {}
            _ => return Err(p.err("expected ',' or '}'")),
        }
    }
    // NumPy pads the dict with spaces and ends it with '\n'; it refuses anything else there.
    if p.peek().is_some() {
        return Err(p.err(
            "unexpected text after the header's closing '}' (only spaces and a final newline \
             may follow it)",
        ));
    }
    let missing = |key: &str| p.err(format!("missing key {key:?}"));
    let (descr, descr_offset) = descr.ok_or_else(|| missing("descr"))?;
    let (fortran_order, fortran_offset) = fortran.ok_or_else(|| missing("fortran_order"))?;
    let (shape, shape_offset) = shape.ok_or_else(|| missing("shape"))?;
    Ok(Header {
        descr,
        descr_offset,
        fortran_order,
        fortran_offset,
        shape,
        shape_offset,
    })
}

/// The `.npy` encoding of `array`: version 1.0 (2.0 if the header exceeds 65535 bytes),
/// little-endian, C order, header padded so the data starts at a multiple of 64 bytes.
/// `string` arrays are written as `|S<n>`, `n` the longest value (at least 1), shorter values
/// padded with NULs — so values ending in NUL bytes lose them, as in NumPy.
pub fn encode_npy(array: &Array) -> Vec<u8> {
    let width = array
        .data()
        .as_strings()
        .map_or(0, |v| v.iter().map(Vec::len).max().unwrap_or(0).max(1));
    let descr = match array.dtype() {
        DType::U8 => "|u1".to_string(),
        DType::I32 => "<i4".to_string(),
        DType::I64 => "<i8".to_string(),
        DType::F32 => "<f4".to_string(),
        DType::F64 => "<f8".to_string(),
        DType::String => format!("|S{width}"),
    };
    let shape = match array.shape() {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let (version, len_size) = if dict.len() + 11 + 64 <= u16::MAX as usize {
        (1u8, 2)
    } else {
        (2u8, 4)
    };
    let unpadded = MAGIC.len() + 2 + len_size + dict.len() + 1; // + '\n'
    let header_len = dict.len() + 1 + (64 - unpadded % 64) % 64;
    let value_bytes = if width > 0 {
        width
    } else {
        array.dtype().size()
    };
    let mut out = Vec::with_capacity(unpadded + 64 + array.len() * value_bytes);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[version, 0]);
    if len_size == 2 {
        out.extend_from_slice(&(header_len as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header_len as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(MAGIC.len() + 2 + len_size + header_len - 1, b' ');
    out.push(b'\n');
    if let Buffer::String(v) = array.data() {
        v.iter().for_each(|x| {
            out.extend_from_slice(x);
            out.resize(out.len() + width - x.len(), 0);
        });
    } else {
        array.data().extend_le_bytes(&mut out);
    }
    out
}

/// Writes `array` as a `.npy` file (see [`encode_npy`]).
///
/// # Errors
/// [`DataError::Io`] when the file cannot be written.
pub fn write_npy(path: &Path, array: &Array) -> Result<()> {
    fs::write(path, encode_npy(array)).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn temp_dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kiln-data-npy-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A v1.0 file with `header` (unpadded) followed by `data`.
    fn v1(header: &str, data: &[u8]) -> Vec<u8> {
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn format_parts(err: DataError) -> (u64, String) {
        match err {
            DataError::Format {
                offset, message, ..
            } => (offset, message),
            other => panic!("expected a Format error, got {other:?}"),
        }
    }

    #[test]
    fn strings_are_fixed_width_nul_padded_bytes() {
        // np.save(f, np.array([b"ab", b"c"])) writes descr '|S2' and the data b"abc\0".
        let a = Array::new(vec![2], Buffer::String(vec![b"ab".to_vec(), b"c".to_vec()])).unwrap();
        let bytes = encode_npy(&a);
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
        assert!(header.starts_with("{'descr': '|S2', 'fortran_order': False, 'shape': (2,), }"));
        assert_eq!(&bytes[10 + header_len..], b"abc\0");
        let back = parse_npy(&bytes, Path::new("s.npy")).unwrap();
        assert_eq!(back, a);
        // Empty strings still get width 1, as NumPy's dtype('S1').
        let empty = Array::new(vec![1], Buffer::String(vec![vec![]])).unwrap();
        let bytes = encode_npy(&empty);
        assert_eq!(bytes[bytes.len() - 1], 0);
        assert_eq!(parse_npy(&bytes, Path::new("e.npy")).unwrap(), empty);
        // |S0 is not a readable width.
        let bad = v1(
            "{'descr': '|S0', 'fortran_order': False, 'shape': (1,), }",
            b"",
        );
        assert!(parse_npy(&bad, Path::new("z.npy")).is_err());
    }

    #[test]
    fn round_trip_u8_i64_f32() {
        let dir = temp_dir("round_trip");
        let arrays = [
            Array::new(vec![2, 3], Buffer::U8(vec![0, 1, 2, 253, 254, 255])).unwrap(),
            Array::new(vec![4], Buffer::I64(vec![i64::MIN, -1, 0, i64::MAX])).unwrap(),
            Array::new(
                vec![2, 1, 2],
                Buffer::F32(vec![0.25, -3.5, 1e30, f32::MIN_POSITIVE]),
            )
            .unwrap(),
            Array::new(vec![], Buffer::F64(vec![2.5])).unwrap(),
            Array::new(vec![0, 5], Buffer::I32(vec![])).unwrap(),
        ];
        for (i, a) in arrays.iter().enumerate() {
            let p = dir.join(format!("a{i}.npy"));
            write_npy(&p, a).unwrap();
            let bytes = fs::read(&p).unwrap();
            assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
            let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            assert_eq!((10 + header_len) % 64, 0, "data is 64-byte aligned");
            assert_eq!(bytes[10 + header_len - 1], b'\n');
            assert_eq!(&read_npy(&p).unwrap(), a);
        }
        let header = String::from_utf8_lossy(&encode_npy(&arrays[1])[10..128]).into_owned();
        assert!(header.starts_with("{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }"));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn hand_written_v1_header() {
        // As NumPy 1.x wrote it, with `\n` padding and little-endian f8.
        let mut data = Vec::new();
        for v in [1.5f64, -2.0, 0.0, 8.25, 3.0, 4.0] {
            data.extend_from_slice(&v.to_le_bytes());
        }
        let bytes = v1(
            "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }          \n",
            &data,
        );
        let a = parse_npy(&bytes, Path::new("x.npy")).unwrap();
        assert_eq!(a.shape(), &[2, 3]);
        assert_eq!(a.data(), &Buffer::F64(vec![1.5, -2.0, 0.0, 8.25, 3.0, 4.0]));

        // Double quotes, key order, Python 2 longs, big-endian i4.
        let bytes = v1(
            "{\"shape\": (2L,), \"fortran_order\": False, \"descr\": \">i4\"}\n",
            &[0, 0, 1, 0, 0xFF, 0xFF, 0xFF, 0xFE],
        );
        let a = parse_npy(&bytes, Path::new("x.npy")).unwrap();
        assert_eq!(a.data(), &Buffer::I32(vec![256, -2]));

        // Widened types.
        let bytes = v1(
            "{'descr': '<u2', 'fortran_order': False, 'shape': (2,)}",
            &[0xFF, 0xFF, 1, 0],
        );
        assert_eq!(
            parse_npy(&bytes, Path::new("x")).unwrap().data(),
            &Buffer::I32(vec![65535, 1])
        );
        let bytes = v1(
            "{'descr': '|b1', 'fortran_order': False, 'shape': (3,)}",
            &[1, 0, 1],
        );
        assert_eq!(
            parse_npy(&bytes, Path::new("x")).unwrap().data(),
            &Buffer::U8(vec![1, 0, 1])
        );
    }

    #[test]
    fn version_2_and_3_headers() {
        for version in [2u8, 3] {
            let header = "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }\n";
            let mut bytes = vec![0x93, b'N', b'U', b'M', b'P', b'Y', version, 0];
            bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
            bytes.extend_from_slice(header.as_bytes());
            bytes.extend_from_slice(&7i32.to_le_bytes());
            let a = parse_npy(&bytes, Path::new("x")).unwrap();
            assert_eq!(a.data(), &Buffer::I32(vec![7]));
        }
    }

    #[test]
    fn fortran_order_is_rejected() {
        let header = "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }";
        let bytes = v1(header, &[0; 16]);
        let err = parse_npy(&bytes, Path::new("col.npy")).unwrap_err();
        assert!(err.to_string().contains("col.npy"), "{err}");
        let (offset, message) = format_parts(err);
        assert!(message.contains("fortran_order=True"), "{message}");
        assert_eq!(offset as usize, 10 + header.find("True").unwrap());
    }

    #[test]
    fn truncated_and_trailing_data_are_rejected() {
        let dir = temp_dir("truncated");
        let a = Array::new(vec![3, 2], Buffer::F32(vec![1.0; 6])).unwrap();
        let bytes = encode_npy(&a);
        let p = dir.join("short.npy");
        fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        let err = read_npy(&p).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("short.npy") && text.contains("byte"),
            "{text}"
        );
        let (offset, message) = format_parts(err);
        assert_eq!(offset as usize, bytes.len() - 3);
        assert!(
            message.contains("truncated: expected 24 bytes of data"),
            "{message}"
        );
        assert!(message.contains("found 21"), "{message}");

        // Cut in the header.
        let (offset, message) = format_parts(parse_npy(&bytes[..30], Path::new("x")).unwrap_err());
        assert_eq!(offset, 30);
        assert!(message.contains("truncated"), "{message}");

        let mut long = bytes.clone();
        long.push(0);
        let (offset, _) = format_parts(parse_npy(&long, Path::new("x")).unwrap_err());
        assert_eq!(offset as usize, bytes.len());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn bad_magic_version_descr_and_header() {
        let (offset, message) =
            format_parts(parse_npy(b"PK\x03\x04zipfile", Path::new("x")).unwrap_err());
        assert_eq!(offset, 0);
        assert!(message.contains("magic"), "{message}");

        let mut bytes = encode_npy(&Array::new(vec![1], Buffer::U8(vec![1])).unwrap());
        bytes[6] = 9;
        let (offset, message) = format_parts(parse_npy(&bytes, Path::new("x")).unwrap_err());
        assert_eq!(offset, 6);
        assert!(message.contains("version 9.0"), "{message}");

        let header = "{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }";
        let (offset, message) =
            format_parts(parse_npy(&v1(header, &[0; 16]), Path::new("x")).unwrap_err());
        assert!(message.contains("unsupported dtype \"<c16\""), "{message}");
        assert_eq!(offset as usize, 10 + header.find("'<c16'").unwrap());

        // NumPy's unicode strings: the fix is UTF-8 byte strings, through the text ops.
        let header = "{'descr': '<U2', 'fortran_order': False, 'shape': (1,), }";
        let (_, message) =
            format_parts(parse_npy(&v1(header, &[0; 8]), Path::new("x")).unwrap_err());
        assert!(
            message.starts_with("unicode strings (\"<U2\") are not read"),
            "{message}"
        );
        assert!(
            message.contains("np.char.encode(texts, \"utf-8\")"),
            "{message}"
        );
        assert!(message.contains("text_vectorization"), "{message}");

        let header = "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }";
        let (_, message) =
            format_parts(parse_npy(&v1(header, &[0; 4]), Path::new("x")).unwrap_err());
        assert!(message.contains("structured"), "{message}");

        let header = "{'descr': '<f4', 'shape': (1,), }";
        let (_, message) =
            format_parts(parse_npy(&v1(header, &[0; 4]), Path::new("x")).unwrap_err());
        assert!(
            message.contains("missing key \"fortran_order\""),
            "{message}"
        );
    }

    #[test]
    fn versions_and_headers_numpy_refuses_are_refused() {
        let header = "{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }\n";
        let mut bytes = v1(header, &[5]);
        bytes[7] = 1; // version 1.1
        let (offset, message) = format_parts(parse_npy(&bytes, Path::new("x")).unwrap_err());
        assert_eq!(offset, 6);
        assert!(
            message.contains("unsupported .npy format version 1.1"),
            "{message}"
        );

        let junk = "{'descr': '|u1', 'fortran_order': False, 'shape': (1,)} junk\n";
        let (offset, message) =
            format_parts(parse_npy(&v1(junk, &[5]), Path::new("x")).unwrap_err());
        assert_eq!(offset as usize, 10 + junk.find("junk").unwrap());
        assert!(
            message.contains("unexpected text after the header's closing '}'"),
            "{message}"
        );

        let extra = "{'descr': '|u1', 'fortran_order': False, 'shape': (1,), 'x': 'y'}\n";
        let (_, message) = format_parts(parse_npy(&v1(extra, &[5]), Path::new("x")).unwrap_err());
        assert!(message.contains("unexpected key \"x\""), "{message}");

        // What NumPy accepts: spaces, tabs or newlines as padding, no final newline.
        for ok in [
            "{'descr': '|u1', 'fortran_order': False, 'shape': (1,)}",
            "{'descr': '|u1', 'fortran_order': False, 'shape': (1,)}\t  \n\n",
        ] {
            let a = parse_npy(&v1(ok, &[5]), Path::new("x")).unwrap();
            assert_eq!(a.data(), &Buffer::U8(vec![5]));
        }
    }

    #[test]
    fn a_huge_non_npy_file_is_refused_without_reading_it() {
        let dir = temp_dir("huge");
        let p = dir.join("zeros.npy");
        let f = fs::File::create(&p).unwrap();
        f.set_len(64 << 30).unwrap();
        let (offset, message) = format_parts(read_npy(&p).unwrap_err());
        assert_eq!(offset, 0);
        assert!(message.contains("not a .npy file"), "{message}");
        // A header claim beyond the file is refused before the data is allocated.
        let header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }\n";
        fs::write(&p, v1(header, &[0; 64])).unwrap();
        let (_, message) = format_parts(read_npy(&p).unwrap_err());
        assert!(
            message.contains("truncated: expected 8000000000000 bytes of data for shape [1000000000000], found 64"),
            "{message}"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_pipe_and_text_named_npy() {
        let a = Array::new(vec![3], Buffer::F32(vec![1.0, 2.5, -3.0])).unwrap();
        let bytes = encode_npy(&a);
        assert_eq!(read_npy_from(&bytes[..], None, Path::new("-")).unwrap(), a);
        let (_, message) = format_parts(parse_npy(b"x,y\n1,2\n", Path::new("t.npy")).unwrap_err());
        assert!(
            message.ends_with("; it looks like text (CSV?)"),
            "{message}"
        );
        let idx = crate::idx::encode_idx(&a).unwrap();
        let (_, message) = format_parts(parse_npy(&idx, Path::new("i.npy")).unwrap_err());
        assert!(
            message.ends_with("; it looks like an IDX file"),
            "{message}"
        );
    }

    #[test]
    fn fuzz_npy() {
        let strings = Array::new(vec![2], Buffer::String(vec![b"ab".to_vec(), b"c".to_vec()]));
        let mut seeds: Vec<Vec<u8>> = [
            Array::new(vec![2, 3], Buffer::U8(vec![0, 1, 2, 253, 254, 255])).unwrap(),
            Array::new(vec![4], Buffer::I64(vec![i64::MIN, -1, 0, i64::MAX])).unwrap(),
            Array::new(vec![], Buffer::F64(vec![2.5])).unwrap(),
            strings.unwrap(),
        ]
        .iter()
        .map(encode_npy)
        .collect();
        seeds.push(v1(
            "{\"shape\": (2L,), \"fortran_order\": False, \"descr\": \">i4\"}\n",
            &[0, 0, 1, 0, 0xFF, 0xFF, 0xFF, 0xFE],
        ));
        seeds.push(v1(
            "{'descr': '<u2', 'fortran_order': False, 'shape': (2,)}",
            &[0xFF, 0xFF, 1, 0],
        ));
        let report = kiln_fuzz::fuzz("npy", seeds, kiln_fuzz::Limits::new(20_000), |bytes| {
            parse_npy(bytes, Path::new("fuzz.npy"))
        });
        assert!(report.accepted > 0 && report.refused > 0, "{report:?}");
    }
}
