//! `keras.layers.GlobalAveragePooling2D(keepdims=False)`: `(height, width, channels)` to
//! `(channels,)`, the mean over positions.

super::global_pooling::global_pooling_layer!(
    /// `GlobalAveragePooling2D(keepdims)`.
    GlobalAveragePooling2D, max: false, spatial: 2, aliases: &["GlobalAvgPool2D"]
);
