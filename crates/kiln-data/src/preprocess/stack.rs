//! [`stack`]: pack several numeric components into one `float32` feature array.

use crate::element::{Array, Buffer};
use crate::error::{DataError, Result};

/// `tf.stack([tf.cast(p, tf.float32) for p in parts], axis=-1)`: same-shaped numeric arrays
/// of shape `[...]` become one `float32 [..., k]` array (`k = parts.len()`), each part
/// converted to `float32`. The usual way to turn CSV columns (scalars) into a feature vector
/// (TensorFlow's CSV tutorial calls it `PackNumericFeatures`).
///
/// # Errors
/// [`DataError::InvalidArgument`] for no parts or a `string` part;
/// [`DataError::Shape`] when the parts' shapes differ (naming both).
pub fn stack(parts: &[&Array]) -> Result<Array> {
    let first = parts
        .first()
        .ok_or_else(|| DataError::InvalidArgument("stack needs at least one component".into()))?;
    let k = parts.len();
    let n = first.len();
    let mut out = vec![0.0f32; n * k];
    for (j, part) in parts.iter().enumerate() {
        if part.shape() != first.shape() {
            return Err(DataError::Shape(format!(
                "cannot stack part {j} of shape {:?} with part 0 of shape {:?}",
                part.shape(),
                first.shape()
            )));
        }
        let values = part.data().try_to_f32()?;
        for (i, v) in values.into_iter().enumerate() {
            out[i * k + j] = v;
        }
    }
    let mut shape = first.shape().to_vec();
    shape.push(k);
    Array::new(shape, Buffer::F32(out))
}
