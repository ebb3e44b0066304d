//! `keras.layers.GlobalAveragePooling1D(keepdims=False)`: `(steps, features)` to
//! `(features,)`, the mean over steps.

super::global_pooling::global_pooling_layer!(
    /// `GlobalAveragePooling1D(keepdims)`.
    GlobalAveragePooling1D, max: false, spatial: 1, aliases: &["GlobalAvgPool1D"]
);
