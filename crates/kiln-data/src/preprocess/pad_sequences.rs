//! [`pad_sequences`]: Keras' `keras.utils.pad_sequences` for one sequence.

use std::str::FromStr;

use crate::element::{Array, Buffer};
use crate::error::{DataError, Result};

/// Which end of a sequence `pad_sequences` pads or truncates (Keras' `"pre"` / `"post"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Side {
    /// At the start (Keras' default for both `padding` and `truncating`).
    #[default]
    Pre,
    /// At the end.
    Post,
}

impl Side {
    /// `"pre"` or `"post"`.
    pub fn name(self) -> &'static str {
        match self {
            Side::Pre => "pre",
            Side::Post => "post",
        }
    }
}

impl FromStr for Side {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Side> {
        match s {
            "pre" => Ok(Side::Pre),
            "post" => Ok(Side::Post),
            other => Err(DataError::InvalidArgument(format!(
                "\"{other}\" is not a side; allowed: \"pre\", \"post\""
            ))),
        }
    }
}

/// `keras.utils.pad_sequences([x], maxlen, padding, truncating, value)[0]` for one sequence
/// `x` of shape `[length, …]`: a sequence longer than `maxlen` loses its first (`truncating =
/// Pre`) or last (`Post`) steps; a shorter one gets steps filled with `value` before (`padding
/// = Pre`) or after (`Post`) it. The result is `[maxlen, …]` in `x`'s dtype (`value` cast to it
/// as NumPy does: integers truncate toward zero; `string` sequences are padded with `""`).
///
/// # Errors
/// [`DataError::InvalidArgument`] for `maxlen == 0` or a scalar `x`.
pub fn pad_sequences(
    x: &Array,
    maxlen: usize,
    padding: Side,
    truncating: Side,
    value: f64,
) -> Result<Array> {
    if maxlen == 0 {
        return Err(DataError::InvalidArgument(
            "maxlen must be at least 1".into(),
        ));
    }
    let Some(&length) = x.shape().first() else {
        return Err(DataError::InvalidArgument(
            "pad_sequences needs a sequence [length, ...], not a scalar".into(),
        ));
    };
    let kept = length.min(maxlen);
    let first = match truncating {
        Side::Pre => length - kept,
        Side::Post => 0,
    };
    let row: usize = x.shape()[1..].iter().product();
    let pad = filled(x.data(), (maxlen - kept) * row, value);
    let body = x.data().slice(first * row, (first + kept) * row);
    let (mut data, tail) = match padding {
        Side::Pre => (pad, body),
        Side::Post => (body, pad),
    };
    // Both are of x's dtype (`filled` gives it).
    data.extend_from(&tail);
    let mut shape = x.shape().to_vec();
    shape[0] = maxlen;
    Array::new(shape, data)
}

/// `n` copies of `value` in the dtype of `like`.
fn filled(like: &Buffer, n: usize, value: f64) -> Buffer {
    match like {
        Buffer::U8(_) => Buffer::U8(vec![value as u8; n]),
        Buffer::I32(_) => Buffer::I32(vec![value as i32; n]),
        Buffer::I64(_) => Buffer::I64(vec![value as i64; n]),
        Buffer::F32(_) => Buffer::F32(vec![value as f32; n]),
        Buffer::F64(_) => Buffer::F64(vec![value; n]),
        Buffer::String(_) => Buffer::String(vec![Vec::new(); n]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(v: &[i64]) -> Array {
        Array::new(vec![v.len()], Buffer::I64(v.to_vec())).unwrap()
    }

    fn padded(padding: Side, truncating: Side, value: f64) -> Vec<Vec<i64>> {
        let seqs: [&[i64]; 4] = [&[1, 2, 3], &[4, 5], &[6, 7, 8, 9, 10], &[11]];
        seqs.iter()
            .map(|s| {
                pad_sequences(&seq(s), 4, padding, truncating, value)
                    .unwrap()
                    .data()
                    .to_i64()
            })
            .collect()
    }

    // keras.utils.pad_sequences, Keras 3.15 (tests/reference/timeseries_reference.py).
    #[test]
    fn pads_and_truncates_as_keras() {
        let (pre, post) = (Side::Pre, Side::Post);
        assert_eq!(
            padded(pre, pre, 0.0),
            [[0, 1, 2, 3], [0, 0, 4, 5], [7, 8, 9, 10], [0, 0, 0, 11]]
        );
        assert_eq!(
            padded(post, pre, 0.0),
            [[1, 2, 3, 0], [4, 5, 0, 0], [7, 8, 9, 10], [11, 0, 0, 0]]
        );
        assert_eq!(
            padded(pre, post, 0.0),
            [[0, 1, 2, 3], [0, 0, 4, 5], [6, 7, 8, 9], [0, 0, 0, 11]]
        );
        assert_eq!(
            padded(post, post, -1.0),
            [
                [1, 2, 3, -1],
                [4, 5, -1, -1],
                [6, 7, 8, 9],
                [11, -1, -1, -1]
            ]
        );
        let x = Array::new(vec![2], Buffer::F32(vec![0.5, 1.5])).unwrap();
        let out = pad_sequences(&x, 3, pre, pre, 2.5).unwrap();
        assert_eq!(out.data(), &Buffer::F32(vec![2.5, 0.5, 1.5]));
    }

    #[test]
    fn pads_whole_steps_of_a_sequence_of_vectors() {
        let x = Array::new(vec![2, 2], Buffer::I32(vec![1, 2, 3, 4])).unwrap();
        let out = pad_sequences(&x, 3, Side::Post, Side::Pre, 9.0).unwrap();
        assert_eq!(out.shape(), &[3, 2]);
        assert_eq!(out.data(), &Buffer::I32(vec![1, 2, 3, 4, 9, 9]));
        let e = pad_sequences(&x, 0, Side::Pre, Side::Pre, 0.0).unwrap_err();
        assert!(e.to_string().contains("maxlen must be at least 1"), "{e}");
        assert!("middle".parse::<Side>().is_err());
    }
}
