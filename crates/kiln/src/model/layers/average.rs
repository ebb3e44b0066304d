//! `keras.layers.Average()`: the element-wise mean of two or more inputs of one shape.

super::merge::merge_layer!(
    /// `Average()`: output the inputs' shape.
    Average
);
