//! [`cast`]: `tf.cast`.

use crate::element::{Array, Buffer, DType};
use crate::error::{DataError, Result};

/// `tf.cast(x, dtype)` between the numeric dtypes (`uint8`, `int32`, `int64`, `float32`,
/// `float64`); same shape.
///
/// Conversions follow Rust's `as`, which matches `tf.cast` wherever TensorFlow defines the
/// result: floats to integers truncate toward zero (`-2.7 -> -2`); integers to narrower
/// integers keep the low bits (`300 -> uint8 44`, as C's `static_cast` that TensorFlow uses).
/// Where TensorFlow leaves the result undefined — a float out of the integer type's range, or
/// NaN — kiln saturates (`1e10 -> int32 2147483647`, `-1.0 -> uint8 0`, NaN -> 0).
/// Casting a `string` array to `string` returns it unchanged.
///
/// # Errors
/// [`DataError::InvalidArgument`] for a cast between `string` and a number (parse or format
/// the text explicitly).
pub fn cast(x: &Array, dtype: DType) -> Result<Array> {
    if x.dtype() == dtype {
        return Ok(x.clone());
    }
    if x.dtype() == DType::String || dtype == DType::String {
        return Err(DataError::InvalidArgument(format!(
            "cannot cast {} to {dtype}: only numeric dtypes convert (uint8, int32, int64, \
             float32, float64)",
            x.dtype()
        )));
    }
    macro_rules! convert {
        ($v:expr) => {
            match dtype {
                DType::U8 => Buffer::U8($v.iter().map(|&a| a as u8).collect()),
                DType::I32 => Buffer::I32($v.iter().map(|&a| a as i32).collect()),
                DType::I64 => Buffer::I64($v.iter().map(|&a| a as i64).collect()),
                DType::F32 => Buffer::F32($v.iter().map(|&a| a as f32).collect()),
                DType::F64 => Buffer::F64($v.iter().map(|&a| a as f64).collect()),
                DType::String => unreachable!("checked above"),
            }
        };
    }
    let data = match x.data() {
        Buffer::U8(v) => convert!(v),
        Buffer::I32(v) => convert!(v),
        Buffer::I64(v) => convert!(v),
        Buffer::F32(v) => convert!(v),
        Buffer::F64(v) => convert!(v),
        Buffer::String(_) => unreachable!("checked above"),
    };
    Array::new(x.shape().to_vec(), data)
}
