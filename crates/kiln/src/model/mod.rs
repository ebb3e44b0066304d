//! Models: Keras layer specs ([`ModelSpec`]), the Burn network they build ([`Network`]),
//! weights files and `summary()`.

mod init;
mod network;
mod spec;
mod summary;
pub mod weights;

pub use network::{Act, Forward, LayerParams, Network};
pub use spec::{
    Activation, LAYER_TYPES, LayerKind, LayerSpec, ModelSpec, Padding, Pair, SequentialBuilder,
    keras_shape,
};
pub use summary::{summary, thousands};

#[cfg(test)]
mod keras_parity_tests;
