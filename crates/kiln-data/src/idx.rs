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

use crate::bounded::{Input, with_guess};
use crate::element::{Array, Buffer, DType};
use crate::error::{DataError, Result};

/// Reads an IDX file, gzip-compressed or raw, from a local path, `file://` URL, `s3://` URL
/// ([`crate::storage::open_sized`]), or standard input for `-`.
///
/// The header is checked against the file's size before anything is allocated, and the
/// values are decoded as they are read, so reading needs about the array's size in memory.
///
/// # Errors
/// [`DataError::Io`] when the file cannot be read, or the array its header claims cannot be
/// allocated; [`DataError::Format`] for a corrupt or truncated gzip stream, or any problem
/// [`parse_idx`] reports.
pub fn read_idx(path: &Path) -> Result<Array> {
    let (reader, len) = crate::storage::open_sized(path)?;
    read_idx_from(reader, len, path)
}

/// Reads IDX data (gzip-compressed or raw) from `reader`, which holds `len` bytes when known
/// (`None` for a pipe); `path` names it in error messages.
///
/// # Errors
/// As [`read_idx`].
pub fn read_idx_from(reader: impl Read, len: Option<u64>, path: &Path) -> Result<Array> {
    let mut input = Input::sniffed(reader, len, path)?;
    read_from(&mut input)
}

/// Parses IDX bytes (raw, or gzip-compressed). `path` is used only in error messages.
///
/// # Errors
/// [`DataError::Format`] when the first two bytes are not zero ("not an IDX file", byte 0,
/// saying what the file looks like when its first bytes tell), the type code is unknown
/// (byte 2), the number of dimensions is 0 (byte 3), the header is cut short, the data is
/// shorter than the dimensions require ("truncated: expected N bytes of data, found M", at the
/// end of the bytes) or followed by extra bytes.
pub fn parse_idx(bytes: &[u8], path: &Path) -> Result<Array> {
    read_idx_from(bytes, Some(bytes.len() as u64), path)
}

/// `(dtype read into, bytes per stored value)` of an IDX type code.
fn type_code(code: u8) -> Option<(DType, usize)> {
    Some(match code {
        0x08 => (DType::U8, 1),
        0x09 => (DType::I32, 1),
        0x0B => (DType::I32, 2),
        0x0C => (DType::I32, 4),
        0x0D => (DType::F32, 4),
        0x0E => (DType::F64, 8),
        _ => return None,
    })
}

/// The 4-byte magic number: checks it, returns `(type code, dimensions)`.
fn read_magic(input: &mut Input<'_>) -> Result<(u8, usize)> {
    let mut magic = [0u8; 4];
    let got = input.fill(&mut magic)?;
    if got < 4 {
        return Err(input.error(
            got as u64,
            format!("truncated: an IDX header needs 4 bytes of magic number, found {got}"),
        ));
    }
    if magic[0] != 0 || magic[1] != 0 {
        let mut head = magic.to_vec();
        head.extend(input.peek_more(12));
        return Err(input.error(
            0,
            with_guess(
                format!(
                    "not an IDX file: magic number 0x{:02X}{:02X}{:02X}{:02X} (expected 0x0000 \
                     followed by a type code)",
                    magic[0], magic[1], magic[2], magic[3]
                ),
                &head,
            ),
        ));
    }
    let code = magic[2];
    if type_code(code).is_none() {
        return Err(input.error(
            2,
            format!(
                "unknown IDX type code 0x{code:02X} (expected 0x08 u8, 0x09 i8, 0x0B i16, \
                 0x0C i32, 0x0D f32 or 0x0E f64)"
            ),
        ));
    }
    if magic[3] == 0 {
        return Err(input.error(3, "IDX file declares 0 dimensions (expected at least 1)"));
    }
    Ok((code, magic[3] as usize))
}

fn read_from(input: &mut Input<'_>) -> Result<Array> {
    let (code, ndims) = read_magic(input)?;
    let (dtype, width) = type_code(code).expect("the type code is checked with the magic number");
    let header_len = 4 + 4 * ndims;
    let mut dims = vec![0u8; 4 * ndims];
    let got = input.fill(&mut dims)?;
    if got < dims.len() {
        return Err(input.error(
            input.pos(),
            format!(
                "truncated: the header declares {ndims} dimensions ({header_len} header bytes), \
                 found {} bytes",
                input.pos()
            ),
        ));
    }
    let shape: Vec<usize> = dims
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    let count = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|n| n.checked_mul(width).is_some())
        .ok_or_else(|| input.error(4, format!("dimensions {shape:?} are too large to address")))?;
    let expected = count * width;
    input.check_claim(expected as u64, &shape)?;
    let buffer = match code {
        0x08 => Buffer::U8(input.bytes(expected, &shape)?),
        0x09 => Buffer::I32(input.values(count, 1, &shape, |c| i32::from(c[0] as i8))?),
        0x0B => Buffer::I32(input.values(count, 2, &shape, |c| {
            i32::from(i16::from_be_bytes([c[0], c[1]]))
        })?),
        0x0C => Buffer::I32(input.values(count, 4, &shape, |c| {
            i32::from_be_bytes([c[0], c[1], c[2], c[3]])
        })?),
        0x0D => Buffer::F32(input.values(count, 4, &shape, |c| {
            f32::from_be_bytes([c[0], c[1], c[2], c[3]])
        })?),
        _ => Buffer::F64(input.values(count, 8, &shape, |c| {
            f64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
        })?),
    };
    input.finish(expected as u64, &shape)?;
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

    /// A sparse file far larger than memory: reading it whole would abort.
    fn sparse(dir: &Path, name: &str, head: &[u8], len: u64) -> PathBuf {
        let p = dir.join(name);
        let mut f = fs::File::create(&p).unwrap();
        f.write_all(head).unwrap();
        f.set_len(len).unwrap();
        p
    }

    #[test]
    fn a_huge_file_with_a_bad_header_is_refused_without_reading_it() {
        let dir = temp_dir("huge_bad_header");
        let p = sparse(&dir, "zeros.idx", &[], 64 << 30);
        let (path, offset, message) = format_parts(read_idx(&p).unwrap_err());
        assert_eq!((path, offset), (p, 2));
        assert!(message.contains("unknown IDX type code 0x00"), "{message}");
        // A header whose claim the file cannot hold is refused before allocating it.
        let p = sparse(
            &dir,
            "claims.idx",
            &[0, 0, 0x0D, 2, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 16],
            1 << 20,
        );
        let (_, offset, message) = format_parts(read_idx(&p).unwrap_err());
        assert_eq!(offset, 1 << 20);
        assert!(
            message.contains("truncated: expected 274877906880 bytes of data for shape [4294967295, 16], found 1048564"),
            "{message}"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    /// Counts the bytes read through it.
    struct Counted<'a>(&'a [u8], std::rc::Rc<std::cell::Cell<usize>>);

    impl std::io::Read for Counted<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.read(buf)?;
            self.1.set(self.1.get() + n);
            Ok(n)
        }
    }

    #[test]
    fn a_gzip_bomb_stops_at_its_bad_header_or_its_claim() {
        let zeros = vec![0u8; 256 << 20];
        let bomb = gzip(&zeros);
        let read = std::rc::Rc::new(std::cell::Cell::new(0));
        let err = read_idx_from(
            Counted(&bomb, read.clone()),
            Some(bomb.len() as u64),
            Path::new("bomb.idx.gz"),
        )
        .unwrap_err();
        let (_, offset, message) = format_parts(err);
        assert_eq!(offset, 2);
        assert!(
            message.contains("unknown IDX type code 0x00 (expected"),
            "{message}"
        );
        assert!(
            message.ends_with("(in the gzip-decompressed data)"),
            "{message}"
        );
        assert!(
            read.get() < bomb.len() / 4,
            "read {} of {} bytes",
            read.get(),
            bomb.len()
        );
        // A valid header claiming more than the compressed size can hold.
        let mut claim = vec![0, 0, 0x08, 1, 0xFF, 0xFF, 0xFF, 0xFF];
        claim.extend_from_slice(&[0; 100]);
        let gz = gzip(&claim);
        let (_, offset, message) = format_parts(parse_idx(&gz, Path::new("c.gz")).unwrap_err());
        assert_eq!(offset, 8);
        assert!(
            message.contains("more than this gzip file can decompress to"),
            "{message}"
        );
        // Trailing data inside the gzip stream is refused without inflating it all.
        let mut long = encode_idx(&images()).unwrap();
        long.extend_from_slice(&zeros);
        let (_, offset, message) =
            format_parts(parse_idx(&gzip(&long), Path::new("t.gz")).unwrap_err());
        assert_eq!(offset, 28);
        assert!(
            message.starts_with("at least 1048576 unexpected trailing bytes"),
            "{message}"
        );
    }

    #[test]
    fn a_pipe_is_read_front_to_back() {
        let bytes = encode_idx(&images()).unwrap();
        assert_eq!(
            read_idx_from(&bytes[..], None, Path::new("-")).unwrap(),
            images()
        );
        let (_, offset, message) =
            format_parts(read_idx_from(&bytes[..20], None, Path::new("-")).unwrap_err());
        assert_eq!(offset, 20);
        assert!(
            message.contains("truncated: expected 12 bytes of data for shape [3, 2, 2], found 4"),
            "{message}"
        );
        let gz = gzip(&bytes);
        assert_eq!(
            read_idx_from(&gz[..], None, Path::new("-")).unwrap(),
            images()
        );
    }

    #[test]
    fn an_npy_file_is_named_as_such() {
        let npy = crate::npy::encode_npy(&images());
        let (_, offset, message) = format_parts(parse_idx(&npy, Path::new("x.idx")).unwrap_err());
        assert_eq!(offset, 0);
        assert!(
            message.ends_with("; it looks like a NumPy .npy file"),
            "{message}"
        );
    }

    #[test]
    fn fuzz_idx() {
        let f = Array::new(
            vec![2, 3],
            Buffer::F32(vec![0.5, -1.25, 3.0, 1e-7, 42.0, -0.0]),
        )
        .unwrap();
        let seeds = vec![
            encode_idx(&images()).unwrap(),
            encode_idx(&f).unwrap(),
            vec![0, 0, 0x09, 1, 0, 0, 0, 3, 0xFF, 0x7F, 0x80],
            vec![0, 0, 0x0B, 1, 0, 0, 0, 2, 0xFF, 0xFE, 0x01, 0x00],
            gzip(&encode_idx(&images()).unwrap()),
        ];
        let report = kiln_fuzz::fuzz("idx", seeds, kiln_fuzz::Limits::new(20_000), |bytes| {
            parse_idx(bytes, Path::new("fuzz.idx"))
        });
        assert!(report.accepted > 0 && report.refused > 0, "{report:?}");
    }
}
