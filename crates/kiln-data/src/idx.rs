//! The IDX file format of MNIST and Fashion-MNIST.
//!
//! Format (from <http://yann.lecun.com/exdb/mnist/>, "FILE FORMATS FOR THE MNIST DATABASE"):
//!
//! | bytes | content |
//! |-------|---------|
//! | 0–1   | `0x00 0x00` |
//! | 2     | type code: `0x08` u8, `0x09` i8, `0x0B` i16, `0x0C` i32, `0x0D` f32, `0x0E` f64 |
//! | 3     | number of dimensions `d` (at least 1) |
//! | 4…    | `d` dimension sizes, big-endian `u32` |
//! | then  | the values, big-endian, row-major |
//!
//! The distributed files are gzip-compressed (`train-images-idx3-ubyte.gz`); [`read_idx`]
//! recognises gzip by its magic bytes `1f 8b`, whatever the file name. Signed `i8` and `i16`
//! data are widened to [`DType::I32`]. Corrupt and truncated files give
//! [`DataError::Format`] naming the file and the byte offset (an offset into the decompressed
//! data for gzip files, except for errors in the gzip stream itself).

use std::fs;
use std::io::Read;
use std::path::Path;

use flate2::read::MultiGzDecoder;

use crate::element::{Array, Buffer, DType};
use crate::error::{DataError, Result, check_payload, format_error};

/// Reads an IDX file, gzip-compressed or raw, from a local path, `file://` URL or `s3://` URL
/// ([`crate::storage::read`]).
///
/// # Errors
/// [`DataError::Io`] when the file cannot be read; [`DataError::Format`] for a corrupt or
/// truncated gzip stream, or any problem [`parse_idx`] reports.
pub fn read_idx(path: &Path) -> Result<Array> {
    let raw = crate::storage::read(path)?;
    if crate::compression::Compression::sniff(&raw) == Some(crate::compression::Compression::Gzip) {
        let bytes = gunzip(&raw, path)?;
        parse_idx(&bytes, path).map_err(|err| match err {
            DataError::Format {
                path,
                offset,
                message,
            } => DataError::Format {
                path,
                offset,
                message: format!("{message} (in the gzip-decompressed data)"),
            },
            other => other,
        })
    } else {
        parse_idx(&raw, path)
    }
}

/// Decompresses a whole gzip file; errors give the compressed offset reached.
pub(crate) fn gunzip(raw: &[u8], path: &Path) -> Result<Vec<u8>> {
    let mut decoder = MultiGzDecoder::new(raw);
    let mut out = Vec::new();
    match decoder.read_to_end(&mut out) {
        Ok(_) => Ok(out),
        Err(err) => {
            let consumed = raw.len() - decoder.get_ref().len();
            Err(DataError::Format {
                path: path.to_path_buf(),
                offset: consumed as u64,
                message: format!(
                    "corrupt or truncated gzip stream ({err}; {} bytes decompressed)",
                    out.len()
                ),
            })
        }
    }
}

/// Parses IDX bytes (already decompressed). `path` is used only in error messages.
///
/// # Errors
/// [`DataError::Format`] when the first two bytes are not zero ("not an IDX file", byte 0),
/// the type code is unknown (byte 2), the number of dimensions is 0 (byte 3), the header is
/// cut short, the data is shorter than the dimensions require ("truncated: expected N bytes of
/// data, found M", at the end of the bytes) or followed by extra bytes.
pub fn parse_idx(bytes: &[u8], path: &Path) -> Result<Array> {
    if bytes.len() < 4 {
        return Err(format_error(
            path,
            bytes.len(),
            format!(
                "truncated: an IDX header needs 4 bytes of magic number, found {}",
                bytes.len()
            ),
        ));
    }
    if bytes[0] != 0 || bytes[1] != 0 {
        return Err(format_error(
            path,
            0,
            format!(
                "not an IDX file: magic number 0x{:02X}{:02X}{:02X}{:02X} \
                 (expected 0x0000 followed by a type code)",
                bytes[0], bytes[1], bytes[2], bytes[3]
            ),
        ));
    }
    let code = bytes[2];
    // (dtype read, bytes per stored value)
    let (dtype, width) = match code {
        0x08 => (DType::U8, 1),
        0x09 => (DType::I32, 1),
        0x0B => (DType::I32, 2),
        0x0C => (DType::I32, 4),
        0x0D => (DType::F32, 4),
        0x0E => (DType::F64, 8),
        _ => {
            return Err(format_error(
                path,
                2,
                format!(
                    "unknown IDX type code 0x{code:02X} (expected 0x08 u8, 0x09 i8, 0x0B i16, \
                     0x0C i32, 0x0D f32 or 0x0E f64)"
                ),
            ));
        }
    };
    let ndims = bytes[3] as usize;
    if ndims == 0 {
        return Err(format_error(
            path,
            3,
            "IDX file declares 0 dimensions (expected at least 1)",
        ));
    }
    let header_len = 4 + 4 * ndims;
    if bytes.len() < header_len {
        return Err(format_error(
            path,
            bytes.len(),
            format!(
                "truncated: the header declares {ndims} dimensions ({header_len} header bytes), \
                 found {} bytes",
                bytes.len()
            ),
        ));
    }
    let shape: Vec<usize> = bytes[4..header_len]
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    let expected = shape
        .iter()
        .try_fold(width, |acc: usize, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            format_error(
                path,
                4,
                format!("dimensions {shape:?} are too large to address"),
            )
        })?;
    let data = &bytes[header_len..];
    check_payload(path, bytes.len(), header_len, expected, &shape)?;
    let buffer = match code {
        0x08 => Buffer::U8(data.to_vec()),
        0x09 => Buffer::I32(data.iter().map(|&b| i32::from(b as i8)).collect()),
        0x0B => Buffer::I32(
            data.chunks_exact(2)
                .map(|c| i32::from(i16::from_be_bytes([c[0], c[1]])))
                .collect(),
        ),
        0x0C => Buffer::I32(
            data.chunks_exact(4)
                .map(|c| i32::from_be_bytes(c.try_into().unwrap()))
                .collect(),
        ),
        0x0D => Buffer::F32(
            data.chunks_exact(4)
                .map(|c| f32::from_be_bytes(c.try_into().unwrap()))
                .collect(),
        ),
        _ => Buffer::F64(
            data.chunks_exact(8)
                .map(|c| f64::from_be_bytes(c.try_into().unwrap()))
                .collect(),
        ),
    };
    debug_assert_eq!(buffer.dtype(), dtype);
    Array::new(shape, buffer)
}

/// The IDX encoding of `array` (header and big-endian data).
///
/// # Errors
/// [`DataError::InvalidArgument`] for `int64` and `string` arrays (IDX has neither type), scalars
/// (IDX needs at least one dimension), more than 255 dimensions or a dimension above
/// `u32::MAX`.
pub fn encode_idx(array: &Array) -> Result<Vec<u8>> {
    let code = match array.dtype() {
        DType::U8 => 0x08,
        DType::I32 => 0x0C,
        DType::F32 => 0x0D,
        DType::F64 => 0x0E,
        DType::I64 => {
            return Err(DataError::InvalidArgument(
                "IDX has no int64 type; cast to int32 or float64 first".into(),
            ));
        }
        DType::String => {
            return Err(DataError::InvalidArgument(
                "IDX has no string type; write strings with npy (|S) or as text".into(),
            ));
        }
    };
    let shape = array.shape();
    if shape.is_empty() || shape.len() > 255 {
        return Err(DataError::InvalidArgument(format!(
            "IDX stores 1 to 255 dimensions, the array has shape {shape:?}"
        )));
    }
    let mut out = Vec::with_capacity(4 + 4 * shape.len() + array.len() * array.dtype().size());
    out.extend_from_slice(&[0, 0, code, shape.len() as u8]);
    for &d in shape {
        let d = u32::try_from(d).map_err(|_| {
            DataError::InvalidArgument(format!("IDX dimensions must fit in u32, got {d}"))
        })?;
        out.extend_from_slice(&d.to_be_bytes());
    }
    match array.data() {
        Buffer::U8(v) => out.extend_from_slice(v),
        Buffer::I32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_be_bytes())),
        Buffer::F32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_be_bytes())),
        Buffer::F64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_be_bytes())),
        Buffer::I64(_) | Buffer::String(_) => unreachable!("rejected above"),
    }
    Ok(out)
}

/// Writes `array` as an uncompressed IDX file.
///
/// # Errors
/// Those of [`encode_idx`]; [`DataError::Io`] when the file cannot be written.
pub fn write_idx(path: &Path, array: &Array) -> Result<()> {
    let bytes = encode_idx(array)?;
    fs::write(path, bytes).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::PathBuf;

    use flate2::Compression;
    use flate2::write::GzEncoder;

    use super::*;

    /// A fresh temporary directory for one test.
    fn temp_dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kiln-data-idx-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    fn images() -> Array {
        Array::new(vec![3, 2, 2], Buffer::U8((0..12).map(|v| v * 20).collect())).unwrap()
    }

    fn format_parts(err: DataError) -> (PathBuf, u64, String) {
        match err {
            DataError::Format {
                path,
                offset,
                message,
            } => (path, offset, message),
            other => panic!("expected a Format error, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_u8_and_f32() {
        let dir = temp_dir("round_trip");
        let a = images();
        let p = dir.join("images-idx3-ubyte");
        write_idx(&p, &a).unwrap();
        let bytes = fs::read(&p).unwrap();
        assert_eq!(&bytes[..4], &[0, 0, 0x08, 3]);
        assert_eq!(&bytes[4..8], &[0, 0, 0, 3]);
        assert_eq!(bytes.len(), 4 + 12 + 12);
        assert_eq!(read_idx(&p).unwrap(), a);

        let f = Array::new(
            vec![2, 3],
            Buffer::F32(vec![0.5, -1.25, 3.0, 1e-7, 42.0, -0.0]),
        )
        .unwrap();
        let p = dir.join("floats.idx");
        write_idx(&p, &f).unwrap();
        let back = read_idx(&p).unwrap();
        assert_eq!(back.dtype(), DType::F32);
        assert_eq!(back.shape(), &[2, 3]);
        assert_eq!(back, f);
        // Big-endian on disk: 0.5f32 = 0x3F000000.
        assert_eq!(&fs::read(&p).unwrap()[12..16], &[0x3F, 0, 0, 0]);

        for a in [
            Array::new(vec![2], Buffer::I32(vec![-7, 1 << 20])).unwrap(),
            Array::new(vec![1, 1, 2], Buffer::F64(vec![std::f64::consts::PI, -2.0])).unwrap(),
        ] {
            let p = dir.join("other.idx");
            write_idx(&p, &a).unwrap();
            assert_eq!(read_idx(&p).unwrap(), a);
        }
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn reads_gzip_by_magic_not_name() {
        let dir = temp_dir("gzip");
        let a = images();
        let gz = gzip(&encode_idx(&a).unwrap());
        for name in ["labels-idx1-ubyte.gz", "no-extension"] {
            let p = dir.join(name);
            fs::write(&p, &gz).unwrap();
            assert_eq!(read_idx(&p).unwrap(), a);
        }
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn truncated_file_is_a_format_error_naming_file_and_byte() {
        let dir = temp_dir("truncated");
        let p = dir.join("cut-idx3-ubyte");
        let bytes = encode_idx(&images()).unwrap();
        fs::write(&p, &bytes[..bytes.len() - 5]).unwrap();
        let err = read_idx(&p).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("cut-idx3-ubyte"), "{text}");
        assert!(text.contains("byte"), "{text}");
        assert!(
            text.contains("truncated: expected 12 bytes of data"),
            "{text}"
        );
        assert!(text.contains("found 7"), "{text}");
        let (path, offset, _) = format_parts(err);
        assert_eq!(path, p);
        assert_eq!(offset, 23);

        // Cut inside the header.
        fs::write(&p, &bytes[..6]).unwrap();
        let (_, offset, message) = format_parts(read_idx(&p).unwrap_err());
        assert_eq!(offset, 6);
        assert!(message.contains("truncated"), "{message}");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn trailing_bytes_are_an_error() {
        let mut bytes = encode_idx(&images()).unwrap();
        bytes.extend_from_slice(&[1, 2, 3]);
        let (_, offset, message) = format_parts(parse_idx(&bytes, Path::new("x")).unwrap_err());
        assert_eq!(offset, 28);
        assert!(message.contains("3 unexpected trailing bytes"), "{message}");
    }

    #[test]
    fn wrong_magic_number() {
        let mut bytes = encode_idx(&images()).unwrap();
        bytes[0] = 0x08;
        bytes[1] = 0x03;
        let err = parse_idx(&bytes, Path::new("data/wrong.bin")).unwrap_err();
        assert!(err.to_string().starts_with("data/wrong.bin: "), "{err}");
        let (_, offset, message) = format_parts(err);
        assert_eq!(offset, 0);
        assert!(
            message.contains("not an IDX file: magic number 0x0803"),
            "{message}"
        );
    }

    #[test]
    fn unknown_dtype_code_and_zero_dims() {
        let mut bytes = encode_idx(&images()).unwrap();
        bytes[2] = 0x0A;
        let (_, offset, message) = format_parts(parse_idx(&bytes, Path::new("x")).unwrap_err());
        assert_eq!(offset, 2);
        assert!(message.contains("unknown IDX type code 0x0A"), "{message}");

        let (_, offset, _) = format_parts(parse_idx(&[0, 0, 0x08, 0], Path::new("x")).unwrap_err());
        assert_eq!(offset, 3);
    }

    #[test]
    fn signed_narrow_types_widen_to_i32() {
        let i8_file = [0, 0, 0x09, 1, 0, 0, 0, 3, 0xFF, 0x7F, 0x80];
        let a = parse_idx(&i8_file, Path::new("x")).unwrap();
        assert_eq!(a.data(), &Buffer::I32(vec![-1, 127, -128]));
        let i16_file = [0, 0, 0x0B, 1, 0, 0, 0, 2, 0xFF, 0xFE, 0x01, 0x00];
        let a = parse_idx(&i16_file, Path::new("x")).unwrap();
        assert_eq!(a.data(), &Buffer::I32(vec![-2, 256]));
    }

    #[test]
    fn truncated_gzip_is_an_error_not_a_panic() {
        let dir = temp_dir("truncated_gzip");
        let big = Array::new(
            vec![64, 64],
            Buffer::U8((0..4096).map(|v| (v * 7 % 251) as u8).collect()),
        )
        .unwrap();
        let gz = gzip(&encode_idx(&big).unwrap());
        let p = dir.join("broken-idx2-ubyte.gz");
        for cut in [gz.len() / 2, gz.len() - 4, 12] {
            fs::write(&p, &gz[..cut]).unwrap();
            let err = read_idx(&p).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("broken-idx2-ubyte.gz"), "{text}");
            assert!(matches!(err, DataError::Format { .. }), "{err:?}");
        }
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let err = read_idx(Path::new("/nonexistent/kiln/train-images-idx3-ubyte.gz")).unwrap_err();
        assert!(matches!(err, DataError::Io { .. }));
        assert!(
            err.to_string()
                .starts_with("cannot read /nonexistent/kiln/"),
            "{err}"
        );
    }

    #[test]
    fn int64_and_scalars_cannot_be_written() {
        let a = Array::new(vec![1], Buffer::I64(vec![1])).unwrap();
        assert!(matches!(encode_idx(&a), Err(DataError::InvalidArgument(_))));
        let s = Array::scalar(Buffer::U8(vec![1])).unwrap();
        assert!(matches!(encode_idx(&s), Err(DataError::InvalidArgument(_))));
    }

    #[test]
    fn real_fashion_mnist_test_labels() {
        let p = Path::new("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
        assert!(
            p.is_file(),
            "Fashion-MNIST is missing ({} not found): run scripts/setup.sh (it installs Debian's \
             dataset-fashion-mnist)",
            p.display()
        );
        let labels = read_idx(p).unwrap();
        assert_eq!(labels.shape(), &[10000]);
        assert_eq!(labels.dtype(), DType::U8);
        let Buffer::U8(v) = labels.data() else {
            unreachable!()
        };
        assert_eq!(&v[..5], &[9, 2, 1, 1, 6]);
        assert!(v.iter().all(|&l| l < 10));
    }
}
