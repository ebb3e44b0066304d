//! `keras.layers.Maximum()`: the element-wise maximum of two or more inputs of one shape.

super::merge::merge_layer!(
    /// `Maximum()`: output the inputs' shape.
    Maximum
);
