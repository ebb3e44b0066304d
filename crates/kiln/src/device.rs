//! Device selection: `cpu` (Burn's flex backend, multi-threaded with SIMD) or `gpu` (the GPU
//! backend compiled in: `--features vulkan`, or `cuda` where the build can download LLVM).

use burn::prelude::Device;

use crate::error::{KilnError, Result};

/// Where to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceKind {
    /// Burn's flex CPU backend.
    #[default]
    Cpu,
    /// The first GPU of the GPU backend compiled in.
    Gpu,
}

impl std::str::FromStr for DeviceKind {
    type Err = KilnError;
    fn from_str(s: &str) -> Result<DeviceKind> {
        match s {
            "cpu" => Ok(DeviceKind::Cpu),
            "gpu" => Ok(DeviceKind::Gpu),
            other => Err(KilnError::config(
                "--device",
                format!("unknown device \"{other}\"; allowed: cpu, gpu"),
            )),
        }
    }
}

/// True when a GPU backend was compiled in.
pub const HAS_GPU_BACKEND: bool = cfg!(any(feature = "vulkan", feature = "cuda"));

/// `"cpu"` for Burn's flex CPU device, `"gpu"` for any other (the names of `--device` and
/// `[distribute] devices`).
pub fn name(device: &Device) -> &'static str {
    if *device == Device::flex() {
        "cpu"
    } else {
        "gpu"
    }
}

/// The Burn device for `kind`.
///
/// # Errors
/// [`KilnError::Device`] for `gpu` when no GPU backend was compiled in.
pub fn resolve(kind: DeviceKind) -> Result<Device> {
    match kind {
        DeviceKind::Cpu => Ok(Device::flex()),
        DeviceKind::Gpu => gpu(),
    }
}

#[cfg(feature = "cuda")]
fn gpu() -> Result<Device> {
    Ok(Device::cuda(0))
}

#[cfg(all(feature = "vulkan", not(feature = "cuda")))]
fn gpu() -> Result<Device> {
    Ok(Device::vulkan(burn::tensor::DeviceKind::DefaultDevice))
}

#[cfg(not(any(feature = "vulkan", feature = "cuda")))]
fn gpu() -> Result<Device> {
    Err(KilnError::Device(
        "this kiln was built without a GPU backend; rebuild with `cargo build --release --features vulkan` (or `cuda`), or use --device cpu".into(),
    ))
}
