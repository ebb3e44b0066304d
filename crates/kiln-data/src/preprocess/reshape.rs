//! [`reshape`]: `tf.reshape`.

use crate::element::Array;
use crate::error::{DataError, Result};

/// `tf.reshape(x, shape)`: the same values in row-major order with a new shape. At most one
/// entry may be `-1`; it takes whatever size makes the element counts match (`[-1]`
/// flattens). `[]` makes a scalar of a one-value array.
///
/// # Errors
/// [`DataError::InvalidArgument`] for an entry below `-1`, two `-1`s, or a shape whose element
/// count differs from `x`'s (naming both).
pub fn reshape(x: &Array, shape: &[i64]) -> Result<Array> {
    x.clone().reshape(reshaped(x, shape)?)
}

/// [`reshape`] of an owned array: no copy of the values.
pub(crate) fn reshape_owned(x: Array, shape: &[i64]) -> Result<Array> {
    let out = reshaped(&x, shape)?;
    x.reshape(out)
}

/// The shape [`reshape`] gives `x`.
fn reshaped(x: &Array, shape: &[i64]) -> Result<Vec<usize>> {
    let n = x.len();
    let mut unknown = None;
    let mut known: usize = 1;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if unknown.is_some() => {
                return Err(DataError::InvalidArgument(format!(
                    "shape {shape:?} has more than one -1; at most one size can be inferred"
                )));
            }
            -1 => unknown = Some(i),
            d if d < 0 => {
                return Err(DataError::InvalidArgument(format!(
                    "shape {shape:?} has the size {d}; sizes are non-negative, or -1 to infer one"
                )));
            }
            d => known = known.saturating_mul(d as usize),
        }
    }
    let mut out: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(i) = unknown {
        if known == 0 || !n.is_multiple_of(known) {
            return Err(DataError::InvalidArgument(format!(
                "cannot reshape {n} values of shape {:?} to {shape:?}: {n} is not a multiple \
                 of {known}",
                x.shape()
            )));
        }
        out[i] = n / known;
    } else if known != n {
        return Err(DataError::InvalidArgument(format!(
            "cannot reshape {n} values of shape {:?} to {shape:?}, which holds {known}",
            x.shape()
        )));
    }
    Ok(out)
}
