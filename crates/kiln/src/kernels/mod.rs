//! kiln's own CPU kernels for the training hot path, on contiguous row-major `f32` slices in
//! Burn's NCHW layout (`[batch, channels, height, width]`).
//!
//! Convolutions with stride 1 on the AVX2 and AVX-512 paths are implicit GEMMs that read the
//! zero-padded image in place ([`conv_direct`]); other strides, and the portable path, are
//! im2col + GEMM per image (the `gemm` crate that Burn's flex backend also uses). Either way
//! images are spread over rayon's global pool, one single-threaded product per image:
//! batch-level parallelism keeps both cores busy on the small per-image matrices of a CNN, where
//! a multi-threaded GEMM per image would spend its time synchronizing. Pooling keeps no index
//! tensor: the backward pass finds each window's maximum again.

//! Each kernel runs the widest instruction set the CPU has ([`cpu`]: AVX-512, AVX2 + FMA, or
//! portable code), chosen once per process; `KILN_CPU_PATH` forces a lower one. Matrix products
//! whose operands are all bfloat16 values (`mixed_bfloat16`) use AVX512_BF16's dot product
//! where the CPU has it ([`bf16`]), and AMX tiles where it has those ([`amx`]).
//!
//! [`crate::ops`] wires these into Burn's autodiff as custom operations.

pub mod adam;
mod amx;
pub mod attention;
pub mod batch_norm;
mod bf16;
pub mod conv2d;
mod conv_direct;
pub mod cpu;
pub mod dense;
mod epilogue;
mod gemm;
mod lanes;
pub mod layer_norm;
pub mod lstm;
pub mod pool;
pub mod round;
mod scratch;

pub use conv2d::Conv2dGeometry;
pub use epilogue::Epilogue;
pub use pool::PoolGeometry;
