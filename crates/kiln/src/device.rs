//! Device selection: `cpu` (Burn's flex backend, multi-threaded with SIMD) or `gpu` (the GPU
//! backend compiled in: `--features vulkan`, or `--features cuda`, which builds offline and
//! needs the NVIDIA driver, NVRTC and the CUDA headers at run time, checked before the device
//! is first used: [`cuda_missing`]).

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
    let found = cuda_probe::probe();
    match cuda_missing(&found) {
        Some(message) => Err(KilnError::Device(message)),
        None => Ok(Device::cuda(0)),
    }
}

/// What a CUDA run found on this machine before creating the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaRuntime {
    /// The driver library `libcuda.so.1` loaded.
    pub driver: bool,
    /// GPUs the driver counts (`cuDeviceGetCount`), or the driver's error code when it failed
    /// to start (`cuInit`).
    pub devices: std::result::Result<i32, i32>,
    /// The NVRTC library loaded (the first of `libnvrtc.so`, `.so.13`, `.so.12`).
    pub nvrtc: bool,
    /// The CUDA headers' folder (`$CUDA_PATH/include`, else `/usr/local/cuda/include`, ...)
    /// and whether it holds `cuda_fp16.h`.
    pub headers: Option<(std::path::PathBuf, bool)>,
}

/// `None` when `found` has everything a CUDA run needs, else one message naming each missing
/// part and how to provide it (the requirements of `--features cuda`: docs/gpu.md).
pub fn cuda_missing(found: &CudaRuntime) -> Option<String> {
    let mut missing = Vec::new();
    if !found.driver {
        missing.push("the NVIDIA driver (libcuda.so.1 did not load: install the driver, or add its folder to LD_LIBRARY_PATH)".to_string());
    } else {
        match found.devices {
            Err(code) => missing.push(format!(
                "a working NVIDIA GPU (the driver failed to start: cuInit error {code})"
            )),
            Ok(0) => missing.push("an NVIDIA GPU (the driver sees none)".to_string()),
            Ok(_) => {}
        }
    }
    if !found.nvrtc {
        missing.push("NVRTC (libnvrtc.so did not load: install the CUDA runtime compiler, e.g. pip's nvidia-cuda-nvrtc, and add its lib folder to LD_LIBRARY_PATH)".to_string());
    }
    match &found.headers {
        None => missing.push("the CUDA headers (no CUDA_PATH, /usr/local/cuda or /opt/cuda: set CUDA_PATH to a CUDA toolkit folder with include/cuda_fp16.h)".to_string()),
        Some((dir, false)) => missing.push(format!("the CUDA headers ({} has no cuda_fp16.h: set CUDA_PATH to a CUDA toolkit folder)", dir.display())),
        Some((_, true)) => {}
    }
    (!missing.is_empty()).then(|| {
        format!(
            "--device gpu (CUDA) cannot start; missing: {}; or use --device cpu",
            missing.join("; ")
        )
    })
}

/// Looks for the CUDA run-time parts by loading them by name, as cudarc does.
#[cfg(feature = "cuda")]
mod cuda_probe {
    use super::CudaRuntime;
    use std::ffi::{CStr, c_void};

    /// A shared library by name, `None` when it does not load (kept loaded: the CUDA backend
    /// loads it again and gets the same handle).
    fn open(name: &CStr) -> Option<*mut c_void> {
        // SAFETY: dlopen with a NUL-terminated name; a null result means it did not load.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        (!handle.is_null()).then_some(handle)
    }

    /// `cuInit(0)`, then `cuDeviceGetCount`, through the driver library `lib`.
    fn device_count(lib: *mut c_void) -> Result<i32, i32> {
        type Init = unsafe extern "C" fn(u32) -> i32;
        type Count = unsafe extern "C" fn(*mut i32) -> i32;
        // SAFETY: both symbols have these C signatures in every CUDA driver (cuda.h).
        unsafe {
            let init = libc::dlsym(lib, c"cuInit".as_ptr());
            let count = libc::dlsym(lib, c"cuDeviceGetCount".as_ptr());
            if init.is_null() || count.is_null() {
                return Err(-1);
            }
            let init: Init = std::mem::transmute(init);
            let count: Count = std::mem::transmute(count);
            match init(0) {
                0 => {}
                code => return Err(code),
            }
            let mut n = 0;
            match count(&mut n) {
                0 => Ok(n),
                code => Err(code),
            }
        }
    }

    pub fn probe() -> CudaRuntime {
        let driver = open(c"libcuda.so.1");
        let nvrtc = [c"libnvrtc.so", c"libnvrtc.so.13", c"libnvrtc.so.12"]
            .into_iter()
            .any(|name| open(name).is_some());
        let headers = cubecl_cuda::install::cuda_path().map(|root| {
            let include = root.join("include");
            let has = include.join("cuda_fp16.h").is_file();
            (include, has)
        });
        CudaRuntime {
            driver: driver.is_some(),
            devices: driver.map_or(Ok(0), device_count),
            nvrtc,
            headers,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_complete_cuda_runtime_passes_and_each_missing_part_is_named() {
        let all = CudaRuntime {
            driver: true,
            devices: Ok(1),
            nvrtc: true,
            headers: Some(("/usr/local/cuda/include".into(), true)),
        };
        assert_eq!(cuda_missing(&all), None);
        let nothing = CudaRuntime {
            driver: false,
            devices: Ok(0),
            nvrtc: false,
            headers: None,
        };
        let m = cuda_missing(&nothing).unwrap();
        assert!(
            m.starts_with(
                "--device gpu (CUDA) cannot start; missing: the NVIDIA driver (libcuda.so.1"
            ),
            "{m}"
        );
        assert!(
            m.contains("NVRTC (libnvrtc.so did not load")
                && m.contains("the CUDA headers (no CUDA_PATH"),
            "{m}"
        );
        assert!(
            m.ends_with("; or use --device cpu") && !m.contains('\n'),
            "{m}"
        );
        let no_gpu = CudaRuntime {
            devices: Ok(0),
            ..all.clone()
        };
        assert!(
            cuda_missing(&no_gpu)
                .unwrap()
                .contains("an NVIDIA GPU (the driver sees none)")
        );
        let broken = CudaRuntime {
            devices: Err(100),
            ..all.clone()
        };
        assert!(cuda_missing(&broken).unwrap().contains("cuInit error 100"));
        let headers = CudaRuntime {
            headers: Some(("/opt/x/include".into(), false)),
            ..all
        };
        assert!(
            cuda_missing(&headers)
                .unwrap()
                .contains("/opt/x/include has no cuda_fp16.h")
        );
    }
}
