//! # kiln
//!
//! Keras' workflow in Rust on [Burn](https://burn.dev): a model spec with Keras' layers
//! ([`model`]), `compile` with Keras' optimizers, losses and metrics ([`compile`]), and
//! `fit` / `evaluate` / `predict` ([`fit`]) fed by tf.data-style pipelines from `kiln-data`.
//! A run is described by one TOML file ([`config`]) and saved to a run directory
//! ([`run_dir`]); [`run`] strings these together as the `kiln` command does. [`pipeline`]
//! builds the tf.data pipelines of a config's `[data.train]` / `[data.validation]` /
//! `[data.test]` tables. Keras' callbacks are in [`callbacks`], TensorBoard event files in
//! [`summary`], crash-safe training checkpoints (BackupAndRestore, resume) in [`checkpoint`],
//! ONNX export and the version directories `kiln serve` loads in [`export`].
//!
//! ## Cargo features
//! - `vulkan`: GPUs through Burn's wgpu backend with SPIR-V kernels (`--device gpu`).
//! - `cuda`: NVIDIA GPUs through Burn's CUDA backend (its build downloads LLVM: not in CI).
//!
//! The CPU backend is Burn's `flex`, always on, with its `simd` and `rayon` features.

#![warn(missing_docs)]

pub mod batch;
pub mod callbacks;
pub mod checkpoint;
pub mod compile;
pub mod config;
pub mod device;
pub mod distribute;
pub mod error;
pub mod estimate;
pub mod export;
pub mod fit;
pub mod guards;
pub mod input;
pub mod kernels;
pub mod model;
pub mod onnx;
pub mod ops;
pub mod pipeline;
pub mod precision;
pub mod run;
pub mod run_dir;
pub mod summary;

pub use compile::Compiled;
pub use config::RunConfig;
pub use device::DeviceKind;
pub use error::{KilnError, Result};
pub use fit::{Callback, History, Logs, Model};
pub use model::ModelSpec;
pub use precision::Precision;
