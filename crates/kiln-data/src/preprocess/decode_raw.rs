//! [`decode_raw`]: `tf.io.decode_raw`.

use crate::element::{Array, Buffer, DType};
use crate::error::{DataError, Result};

/// `tf.io.decode_raw(x, out_type, little_endian)`: reinterprets the bytes of each `string`
/// value of `x` as values of `out_type` (`uint8`, `int32`, `int64`, `float32`, `float64`),
/// in `little_endian` byte order (TensorFlow's default `true`) — how raw pixel buffers stored
/// as a `bytes` feature of a `tf.train.Example` become numbers
/// (`tensorflow/core/kernels/decode_raw_op.cc`).
///
/// Shapes: a `string` array of shape `S` whose values all have `L` bytes becomes an array of
/// shape `S + [L / size]` (`size` = bytes per value of `out_type`); a scalar string gives a
/// vector `[L / size]`. Reshape afterwards for images (`reshape [32, 32, 3]`).
///
/// kiln's TFRecord parsing ([`crate::tfrecord::ExampleSpec`]) yields a scalar bytes feature
/// as its bytes, `uint8 [L]`; such a rank-1 `uint8` array counts as one value (output
/// `[L / size]`), so `decode_raw` follows the parse as in TensorFlow.
///
/// # Errors
/// [`DataError::InvalidArgument`] when `x` is not `string` or `out_type` is `string`;
/// [`DataError::Shape`] when a value's length is not a multiple of `size` or the values differ
/// in length (TensorFlow's messages: "Input to DecodeRaw has length ... that is not a multiple
/// of ...", "DecodeRaw requires input strings to all be the same size").
pub fn decode_raw(x: &Array, out_type: DType, little_endian: bool) -> Result<Array> {
    if let (Buffer::U8(bytes), [_]) = (x.data(), x.shape()) {
        // One value's bytes (how kiln's TFRecord parsing yields a bytes feature).
        return decode_values(std::slice::from_ref(bytes), &[], out_type, little_endian);
    }
    let Some(values) = x.data().as_strings() else {
        return Err(DataError::InvalidArgument(format!(
            "decode_raw reads string (bytes) values or one value's bytes as uint8 [n], got {} \
             of shape {:?}; it applies to a bytes feature such as a TFRecord \
             `dtype = \"string\"` feature",
            x.dtype(),
            x.shape()
        )));
    };
    decode_values(values, x.shape(), out_type, little_endian)
}

/// [`decode_raw`] of an owned array: one value's bytes (`uint8 [n]`) decoded to `uint8` are
/// returned as they are, without a copy.
pub(crate) fn decode_raw_owned(x: Array, out_type: DType, little_endian: bool) -> Result<Array> {
    if out_type == DType::U8 && x.dtype() == DType::U8 && x.shape().len() == 1 {
        return Ok(x);
    }
    decode_raw(&x, out_type, little_endian)
}

/// [`decode_raw`] of `values` (byte strings) laid out as `shape`.
fn decode_values(
    values: &[Vec<u8>],
    shape: &[usize],
    out_type: DType,
    little_endian: bool,
) -> Result<Array> {
    if out_type == DType::String {
        return Err(DataError::InvalidArgument(
            "decode_raw's out_type must be numeric (uint8, int32, int64, float32, float64)".into(),
        ));
    }
    let size = out_type.size();
    let len = values.first().map_or(0, Vec::len);
    for (i, v) in values.iter().enumerate() {
        if v.len() % size != 0 {
            return Err(DataError::Shape(format!(
                "value {i} has {} bytes, not a multiple of {size} (the size of {out_type})",
                v.len()
            )));
        }
        if v.len() != len {
            return Err(DataError::Shape(format!(
                "value {i} has {} bytes but value 0 has {len}; decode_raw needs values of one \
                 length",
                v.len()
            )));
        }
    }
    let mut shape = shape.to_vec();
    shape.push(len / size);
    macro_rules! decode {
        ($t:ty, $wrap:path) => {{
            let mut out: Vec<$t> = Vec::with_capacity(values.len() * len / size);
            for v in values {
                out.extend(v.chunks_exact(size).map(|c| {
                    let bytes = c.try_into().expect("chunks of the value's size");
                    if little_endian {
                        <$t>::from_le_bytes(bytes)
                    } else {
                        <$t>::from_be_bytes(bytes)
                    }
                }));
            }
            $wrap(out)
        }};
    }
    let data = match out_type {
        DType::U8 => Buffer::U8(values.concat()),
        DType::I32 => decode!(i32, Buffer::I32),
        DType::I64 => decode!(i64, Buffer::I64),
        DType::F32 => decode!(f32, Buffer::F32),
        DType::F64 => decode!(f64, Buffer::F64),
        DType::String => unreachable!("refused above"),
    };
    Array::new(shape, data)
}
