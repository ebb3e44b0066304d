//! IDX and NPY files: one array whose first axis indexes the records.

use super::{Out, abbreviate, show_bytes};
use crate::element::{Array, Buffer};
use crate::error::Result;

/// Describes `array` (dtype, shape) and its first `n` records; returns the record count (the
/// first dimension, or 1 for a scalar).
pub(super) fn inspect(array: &Array, n: usize, w: &mut Out<'_>) -> Result<u64> {
    let shape = array.shape();
    w.line(format_args!("dtype {}, shape {shape:?}", array.dtype()))?;
    let records = shape.first().copied().unwrap_or(1);
    if shape.is_empty() {
        w.line(format_args!("value: {}", values(array.data())))?;
    } else {
        for i in 0..records.min(n) {
            let row = array.row(i);
            w.line(format_args!(
                "record {i}: shape {:?} {}",
                row.shape(),
                values(row.data())
            ))?;
        }
    }
    w.line(format_args!(
        "{records} record{} (the first axis)",
        if records == 1 { "" } else { "s" }
    ))?;
    Ok(records as u64)
}

/// The first values of a buffer, abbreviated.
fn values(data: &Buffer) -> String {
    match data {
        Buffer::U8(v) => abbreviate(v),
        Buffer::I32(v) => abbreviate(v),
        Buffer::I64(v) => abbreviate(v),
        Buffer::F32(v) => abbreviate(v),
        Buffer::F64(v) => abbreviate(v),
        Buffer::String(v) => abbreviate(&v.iter().map(|b| show_bytes(b)).collect::<Vec<_>>()),
    }
}
