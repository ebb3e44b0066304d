//! `keras.layers.Minimum()`: the element-wise minimum of two or more inputs of one shape.

super::merge::merge_layer!(
    /// `Minimum()`: output the inputs' shape.
    Minimum
);
