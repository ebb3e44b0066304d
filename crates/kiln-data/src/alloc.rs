//! Buffers sized by input (a file's header, a config value): checked against the memory this
//! process can get before they are allocated, and allocated with `try_reserve`, so that a size
//! that cannot fit is a [`DataError::Memory`] naming what asked for it, never an abort.

use crate::error::{DataError, Result};
use crate::system;

/// Checks that `count` values of `value_bytes` bytes each, for `what`, fit in the memory
/// available now (`MemAvailable`, lowered to a cgroup limit; unchecked where that is unknown).
///
/// # Errors
/// [`DataError::Memory`] when the size overflows or exceeds the available memory.
pub fn check(what: &str, count: usize, value_bytes: usize) -> Result<u64> {
    let bytes = (count as u64)
        .checked_mul(value_bytes as u64)
        .ok_or_else(|| too_big(what, None))?;
    match system::available_memory() {
        Some(available) if bytes > available => Err(too_big(what, Some((bytes, available)))),
        _ => Ok(bytes),
    }
}

/// A vector of `count` copies of `value`, after [`check`].
///
/// # Errors
/// [`DataError::Memory`] as [`check`], or when the allocator refuses.
pub fn filled<T: Clone>(what: &str, count: usize, value: T) -> Result<Vec<T>> {
    let mut v = with_capacity(what, count)?;
    v.resize(count, value);
    Ok(v)
}

/// An empty vector with room for `count` values, after [`check`].
///
/// # Errors
/// [`DataError::Memory`] as [`check`], or when the allocator refuses.
pub fn with_capacity<T>(what: &str, count: usize) -> Result<Vec<T>> {
    let bytes = check(what, count, size_of::<T>())?;
    let mut v = Vec::new();
    v.try_reserve_exact(count)
        .map_err(|_| DataError::Memory(format!("{what}: could not allocate {}", human(bytes))))?;
    Ok(v)
}

/// `count × a × b …` without overflow (for element counts of a shape).
///
/// # Errors
/// [`DataError::Memory`] naming `what` when the product does not fit in `usize`.
pub fn product(what: &str, dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| too_big(what, None))
}

fn too_big(what: &str, sizes: Option<(u64, u64)>) -> DataError {
    DataError::Memory(match sizes {
        Some((bytes, available)) => format!(
            "{what} needs {}, more than the {} of memory available; use smaller sizes",
            human(bytes),
            human(available)
        ),
        None => format!("{what} needs more bytes than this machine can address; use smaller sizes"),
    })
}

/// Bytes in binary units, 3 significant digits (`1.50 GiB`).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_past_memory_are_errors_not_aborts() {
        let e = filled::<f32>("one_hot of depth 1099511627776", 1 << 40, 0.0).unwrap_err();
        let m = e.to_string();
        assert!(
            m.starts_with("out of memory: one_hot of depth 1099511627776 needs 4.00 TiB"),
            "{m}"
        );
        let e = check("resize", usize::MAX, 4).unwrap_err().to_string();
        assert!(
            e.contains("more bytes than this machine can address"),
            "{e}"
        );
        assert!(product("x", &[1 << 40, 1 << 40]).is_err());
        assert_eq!(product("x", &[3, 4, 5]).unwrap(), 60);
        assert_eq!(filled("small", 3, 7u8).unwrap(), vec![7, 7, 7]);
        assert_eq!(human(1536), "1.50 KiB");
        assert_eq!(human(12), "12 B");
    }
}
