//! `keras.layers.Multiply()`: the element-wise product of two or more inputs of one shape.

super::merge::merge_layer!(
    /// `Multiply()`: output the inputs' shape.
    Multiply
);
