//! [`one_hot`]: `tf.one_hot` for class labels.

use crate::element::{Array, Buffer};
use crate::error::{DataError, Result};

/// `tf.one_hot(indices, depth)` with TensorFlow's defaults (`on_value = 1.0`,
/// `off_value = 0.0`, `dtype = float32`, `axis = -1`): integer indices of shape `[...]`
/// become `float32 [..., depth]`, with 1 at each index. A scalar label becomes a vector of
/// length `depth` — what `categorical_crossentropy` expects.
///
/// Unlike `tf.one_hot`, which silently gives a row of zeros, an index outside `[0, depth)` is
/// an error, as in Keras' `CategoryEncoding(output_mode="one_hot")`.
///
/// # Errors
/// [`DataError::InvalidArgument`] for `depth == 0`, non-integer input (cast floats to
/// `int64` first) or an index out of range (naming the index, its position and `depth`).
pub fn one_hot(x: &Array, depth: usize) -> Result<Array> {
    if depth == 0 {
        return Err(DataError::InvalidArgument(
            "depth must be at least 1 (the number of classes)".into(),
        ));
    }
    if !x.dtype().is_integer() {
        return Err(DataError::InvalidArgument(format!(
            "one_hot needs integer class indices, got {}; cast them to int64 first",
            x.dtype()
        )));
    }
    let indices = x.data().try_to_i64()?;
    let count = crate::alloc::product("one_hot's output", &[indices.len(), depth])?;
    let mut out = crate::alloc::filled(&format!("one_hot of depth {depth}"), count, 0.0f32)?;
    for (i, &c) in indices.iter().enumerate() {
        if c < 0 || c as u64 >= depth as u64 {
            return Err(DataError::InvalidArgument(format!(
                "class index {c} at position {i} is outside [0, {depth}); set depth to the \
                 number of classes"
            )));
        }
        out[i * depth + c as usize] = 1.0;
    }
    let mut shape = x.shape().to_vec();
    shape.push(depth);
    Array::new(shape, Buffer::F32(out))
}
