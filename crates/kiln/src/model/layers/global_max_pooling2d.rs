//! `keras.layers.GlobalMaxPooling2D(keepdims=False)`: `(height, width, channels)` to
//! `(channels,)`, the maximum over positions.

super::global_pooling::global_pooling_layer!(
    /// `GlobalMaxPooling2D(keepdims)`.
    GlobalMaxPooling2D, max: true, spatial: 2, aliases: &["GlobalMaxPool2D"]
);
