//! `keras.layers.GlobalMaxPooling3D(keepdims=False)`: `(depth, height, width, channels)` to
//! `(channels,)`, the maximum over positions.

super::global_pooling::global_pooling_layer!(
    /// `GlobalMaxPooling3D(keepdims)`.
    GlobalMaxPooling3D, max: true, spatial: 3, aliases: &["GlobalMaxPool3D"]
);
