//! `keras.layers.GlobalMaxPooling1D(keepdims=False)`: `(steps, features)` to `(features,)`,
//! the maximum over steps.

super::global_pooling::global_pooling_layer!(
    /// `GlobalMaxPooling1D(keepdims)`.
    GlobalMaxPooling1D, max: true, spatial: 1, aliases: &["GlobalMaxPool1D"]
);
