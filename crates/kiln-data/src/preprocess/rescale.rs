//! [`rescale`]: Keras' `Rescaling` layer.

use crate::element::{Array, Buffer};
use crate::error::{DataError, Result};

/// `keras.layers.Rescaling(scale, offset)`: every value `x` becomes `x * scale + offset`, as
/// `float32` (Keras computes in the layer's dtype, `float32`). `Rescaling(1/255)` maps `uint8`
/// pixels to `[0, 1]`; `Rescaling(1/127.5, offset=-1)` to `[-1, 1]`. The product is computed
/// in `float64` and rounded once to `float32`.
///
/// # Errors
/// [`DataError::InvalidArgument`] for a `string` array.
pub fn rescale(x: &Array, scale: f64, offset: f64) -> Result<Array> {
    let values: Vec<f32> = match x.data() {
        Buffer::U8(v) => v
            .iter()
            .map(|&a| (f64::from(a) * scale + offset) as f32)
            .collect(),
        Buffer::I32(v) => v
            .iter()
            .map(|&a| (f64::from(a) * scale + offset) as f32)
            .collect(),
        Buffer::I64(v) => v
            .iter()
            .map(|&a| (a as f64 * scale + offset) as f32)
            .collect(),
        Buffer::F32(v) => v
            .iter()
            .map(|&a| (f64::from(a) * scale + offset) as f32)
            .collect(),
        Buffer::F64(v) => v.iter().map(|&a| (a * scale + offset) as f32).collect(),
        Buffer::String(_) => {
            return Err(DataError::InvalidArgument(
                "cannot rescale string values; parse them to numbers first".into(),
            ));
        }
    };
    Array::new(x.shape().to_vec(), Buffer::F32(values))
}
