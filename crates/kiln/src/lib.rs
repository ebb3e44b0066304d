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
//! ## Layers
//! The modules stand in numbered layers, 1 at the bottom; a module uses only modules of
//! lower-numbered layers (never one of its own layer or a higher one), so no import circle can
//! form. The test
//! `tests/module_layers.rs` reads this list and checks every `crate::` path of the crate's
//! non-test code against it.
//!
//! 1. `names`, `logs`: batch component names; Keras' logs, `History`, log keys, step profiles.
//! 2. `error`: [`KilnError`] and the records its variants carry.
//! 3. `files`, `device`, `kernels`, `replica`, `summary`: atomic writes, devices, CPU kernels,
//!    the current replica group of a synchronized step, TensorBoard event files.
//! 4. `ops`: kiln's custom autodiff operations.
//! 5. `precision`, `onnx`, `tflite`: 16-bit rounding and loss scaling; the ONNX protobuf
//!    writer; the TensorFlow Lite graph and flatbuffer writer.
//! 6. `model`: layers, specs and networks.
//! 7. `compile`, `keras_file`: optimizers, losses, metrics, schedules; Keras' `.keras` files.
//! 8. `guards`, `run_dir`: input checks; run directories and their locks.
//! 9. `batch`, `checkpoint`: host batches into device tensors; training checkpoints.
//! 10. `step`: one training or evaluation step.
//! 11. `distribute`: strategies, which run the step on replicas.
//! 12. `fit`: the training loop.
//! 13. `callbacks`: Keras' callbacks.
//! 14. `config`: the TOML config, checked and resolved.
//! 15. `pipeline`: tf.data pipelines from a config.
//! 16. `input`, `estimate`, `export`, `import`: prediction input, memory estimates, exports,
//!     `.keras` files as run directories.
//! 17. `run`: a whole run, as the `kiln` command does it.
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
pub mod files;
pub mod fit;
pub mod guards;
pub mod import;
pub mod input;
pub mod keras_file;
pub mod kernels;
pub mod logs;
pub mod model;
pub mod names;
pub mod onnx;
pub mod ops;
pub mod pipeline;
pub mod precision;
pub mod replica;
pub mod run;
pub mod run_dir;
pub mod step;
pub mod summary;
pub mod tflite;

pub use compile::Compiled;
pub use config::RunConfig;
pub use device::DeviceKind;
pub use error::{KilnError, Result};
pub use fit::{Callback, History, Logs, Model};
pub use model::ModelSpec;
pub use precision::Precision;
