//! Layers declared through [`super::layer::Layer`], one file each: the file holds the layer's
//! Keras arguments and defaults, shapes, weights, forward pass and estimate figures. Adding a
//! layer is one file here, one `pub use` below and one line in `layer::builtin`.

mod add;
mod concatenate;
mod cropping1d;
mod embedding;
mod global_average_pooling2d;
mod position_embedding;
mod zero_padding2d;

pub use add::Add;
pub use concatenate::Concatenate;
pub use cropping1d::Cropping1D;
pub use embedding::Embedding;
pub use global_average_pooling2d::GlobalAveragePooling2D;
pub use position_embedding::PositionEmbedding;
pub use zero_padding2d::ZeroPadding2D;

use super::args::keras_shape;

/// `[steps, features]` of a rank-2 Keras input, or the message naming `class` and the shape.
fn steps_features(input: &[usize], class: &str) -> Result<[usize; 2], String> {
    match input {
        [s, f] => Ok([*s, *f]),
        _ => Err(format!(
            "{class} expects a 2-D input (steps, features), got shape {}",
            keras_shape(input)
        )),
    }
}

/// `[height, width, channels]` of a rank-3 Keras input, or the message naming `class`.
fn image_shape(input: &[usize], class: &str) -> Result<[usize; 3], String> {
    match input {
        [h, w, c] => Ok([*h, *w, *c]),
        _ => Err(format!(
            "{class} expects a 3-D input (height, width, channels), got shape {}",
            keras_shape(input)
        )),
    }
}

/// A positive size argument.
fn positive(name: &str, v: usize) -> Result<(), String> {
    if v == 0 {
        Err(format!("`{name}` must be positive, got 0"))
    } else {
        Ok(())
    }
}
