//! `keras.layers.Subtract()`: the difference of exactly two inputs of one shape, the first minus the second.

super::merge::merge_layer!(
    /// `Subtract()`: output the inputs' shape.
    Subtract
);
