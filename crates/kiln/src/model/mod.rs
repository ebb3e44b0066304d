//! Models: Keras layer specs ([`ModelSpec`]), the Burn network they build ([`Network`]),
//! weights files and `summary()`.

mod act;
pub mod args;
pub mod constraints;
mod init;
pub mod initializers;
pub mod layer;
pub mod layers;
mod network;
mod options;
mod params;
pub mod registry;
mod regularize;
pub mod regularizers;
mod round;
mod shared;
mod spec;
mod states;
mod summary;
pub mod weights;

pub use act::ElementWise;
pub use layer::{
    Field, ForwardContext, Layer, LayerConfig, Storage, WeightInit, WeightSpec, Weights,
    config_table,
};
pub use network::{Act, Forward, LayerParams, Network, StateUpdate};
pub use options::{LayerOptions, layer_weights};
pub use registry::register as register_layer;
pub use spec::{
    Activation, LAYER_TYPES, LayerKind, LayerSpec, ModelSpec, NodeRef, Padding, Pads2, Pair,
    RawNode, SequentialBuilder, keras_shape, known_layer_types, positions_of,
};
pub use summary::{summary, thousands};

#[cfg(test)]
mod functional_tests;
#[cfg(test)]
mod half_tests;
#[cfg(test)]
mod keras_parity_tests;
#[cfg(test)]
mod options_tests;
#[cfg(test)]
mod shared_tests;
