//! One array from an IDX or NPY file, whichever it is: what `kiln predict` reads.

use std::io::{Cursor, Read};
use std::path::Path;

use crate::element::Array;
use crate::error::{DataError, Result};

/// Reads the array in `path` — a file, `file://` or `s3://` URL, a pipe (`<(…)`), or standard
/// input for `-` and `/dev/stdin` — by its first bytes: NumPy's magic `\x93NUMPY` is NPY, gzip's
/// `1f 8b` or IDX's `00 00` is IDX. Anything else is reported by the parser its name claims
/// (`.npy` → NPY, otherwise IDX), saying what the bytes look like instead. The source is read
/// once, front to back, so pipes work.
///
/// # Errors
/// [`DataError::Io`] when it cannot be read; [`DataError::Format`] as
/// [`crate::npy::read_npy`] and [`crate::idx::read_idx`].
pub fn read_array(path: &Path) -> Result<Array> {
    let (mut reader, len) = crate::storage::open_sized(path)?;
    let mut head = [0u8; 6];
    let got = crate::bounded::fill(&mut reader, &mut head).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let head = &head[..got];
    let whole = Cursor::new(head.to_vec()).chain(reader);
    let npy_name = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("npy"));
    let idx_like = head.starts_with(&[0, 0]) || head.starts_with(&[0x1f, 0x8b]);
    if head.starts_with(b"\x93NUMPY") || (npy_name && !idx_like) {
        crate::npy::read_npy_from(whole, len, path)
    } else {
        crate::idx::read_idx_from(whole, len, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::Buffer;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("kiln-array-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn the_content_decides_and_the_name_names_the_claimed_format() {
        let a = Array::new(vec![2], Buffer::U8(vec![3, 4])).unwrap();
        // NPY bytes under an IDX-ish name, IDX bytes under a .npy name: both read.
        let p = scratch("really-npy.idx");
        std::fs::write(&p, crate::npy::encode_npy(&a)).unwrap();
        assert_eq!(read_array(&p).unwrap(), a);
        let p = scratch("really-idx.npy");
        std::fs::write(&p, crate::idx::encode_idx(&a).unwrap()).unwrap();
        assert_eq!(read_array(&p).unwrap(), a);
        // CSV text named .npy: an NPY error that says what the file is.
        let p = scratch("text.npy");
        std::fs::write(&p, "a,b\n1,2\n").unwrap();
        let err = read_array(&p).unwrap_err().to_string();
        assert!(
            err.contains("text.npy: not a .npy file") && err.contains("looks like text (CSV?)"),
            "{err}"
        );
        assert!(!err.contains("IDX"), "{err}");
        // A PNG named .idx: the IDX error names the PNG.
        let p = scratch("image.idx");
        std::fs::write(&p, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
        let err = read_array(&p).unwrap_err().to_string();
        assert!(
            err.contains("not an IDX file") && err.contains("a PNG image"),
            "{err}"
        );
    }
}
