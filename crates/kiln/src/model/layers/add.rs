//! `keras.layers.Add()`: the element-wise sum of two or more inputs of one shape.

super::merge::merge_layer!(
    /// `Add()`: inputs of one shape, any rank; output the same shape.
    Add
);
