//! `keras.layers.GlobalAveragePooling3D(keepdims=False)`: `(depth, height, width, channels)` to
//! `(channels,)`, the mean over positions.

super::global_pooling::global_pooling_layer!(
    /// `GlobalAveragePooling3D(keepdims)`.
    GlobalAveragePooling3D, max: false, spatial: 3, aliases: &["GlobalAvgPool3D"]
);
