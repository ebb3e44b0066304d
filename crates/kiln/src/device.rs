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

/// How a device error ends: where to ask for the CPU instead.
const USE_CPU: &str = "or train on the CPU (--device cpu, or \"cpu\" in [distribute] devices)";

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
        None => {
            first_use_note();
            Ok(Device::cuda(0))
        }
    }
}

/// What a CUDA run found on this machine before creating the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaRuntime {
    /// The driver library `libcuda.so.1` and what it said.
    pub driver: Driver,
    /// An NVRTC library (`libnvrtc.so`, `.so.13` or `.so.12`) loaded and has `nvrtcVersion`.
    pub nvrtc: bool,
    /// The CUDA headers' folder (`$CUDA_PATH/include`, else `/usr/local/cuda/include`, ...)
    /// and the headers NVRTC includes that it lacks (`cuda_fp16.h`, `cuda_bf16.h`, `mma.h`).
    pub headers: Option<(std::path::PathBuf, Vec<&'static str>)>,
}

/// The NVIDIA driver as loading `libcuda.so.1` found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// The library did not load.
    Missing,
    /// It loaded but has no `cuInit` / `cuDeviceGetCount` (not the NVIDIA driver).
    NotTheDriver,
    /// `cuInit` or `cuDeviceGetCount` returned this CUDA error code.
    Failed(i32),
    /// It counts this many GPUs.
    Devices(i32),
}

/// The headers NVRTC includes when it compiles kiln's kernels.
pub const CUDA_HEADERS: [&str; 3] = ["cuda_fp16.h", "cuda_bf16.h", "mma.h"];

/// `None` when `found` has everything a CUDA run needs, else one message naming each missing
/// part and how to provide it (the requirements of `--features cuda`: docs/gpu.md).
pub fn cuda_missing(found: &CudaRuntime) -> Option<String> {
    let mut missing = Vec::new();
    match found.driver {
        Driver::Missing => missing.push("the NVIDIA driver (libcuda.so.1 did not load: install the driver, or add its folder to LD_LIBRARY_PATH)".to_string()),
        Driver::NotTheDriver => missing.push("the NVIDIA driver (the libcuda.so.1 found has no cuInit: it is not the NVIDIA driver; check LD_LIBRARY_PATH)".to_string()),
        Driver::Failed(code) => missing.push(format!("a working NVIDIA GPU (the driver failed to start: CUDA error {code})")),
        Driver::Devices(0) => missing.push("an NVIDIA GPU (the driver sees none)".to_string()),
        Driver::Devices(_) => {}
    }
    if !found.nvrtc {
        missing.push("NVRTC (none of libnvrtc.so, libnvrtc.so.13, libnvrtc.so.12 loaded with nvrtcVersion: install the CUDA runtime compiler, e.g. pip's nvidia-cuda-nvrtc, and add its lib folder to LD_LIBRARY_PATH)".to_string());
    }
    match &found.headers {
        None => missing.push("the CUDA headers (no CUDA_PATH, /usr/local/cuda or /opt/cuda: set CUDA_PATH to a CUDA toolkit folder with include/cuda_fp16.h)".to_string()),
        Some((dir, lacks)) if !lacks.is_empty() => missing.push(format!("the CUDA headers ({} has no {}: set CUDA_PATH to a CUDA toolkit folder)", dir.display(), lacks.join(", "))),
        Some(_) => {}
    }
    (!missing.is_empty()).then(|| {
        format!(
            "--device gpu (CUDA) cannot start; missing: {}; {USE_CPU}",
            missing.join("; ")
        )
    })
}

/// Looks for the CUDA run-time parts by loading them by name, as cudarc does.
#[cfg(feature = "cuda")]
mod cuda_probe {
    use super::{CudaRuntime, Driver};
    use std::ffi::{CStr, c_void};

    /// A shared library by name, `None` when it does not load (kept loaded: the CUDA backend
    /// loads it again and gets the same handle).
    fn open(name: &CStr) -> Option<*mut c_void> {
        // SAFETY: dlopen with a NUL-terminated name; a null result means it did not load.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        (!handle.is_null()).then_some(handle)
    }

    /// `sym` in the library `lib`, null when it has none.
    fn symbol(lib: *mut c_void, sym: &CStr) -> *mut c_void {
        // SAFETY: dlsym on a handle from dlopen with a NUL-terminated name.
        unsafe { libc::dlsym(lib, sym.as_ptr()) }
    }

    /// `cuInit(0)`, then `cuDeviceGetCount`, through the driver library `lib`.
    fn driver(lib: *mut c_void) -> Driver {
        type Init = unsafe extern "C" fn(u32) -> i32;
        type Count = unsafe extern "C" fn(*mut i32) -> i32;
        let (init, count) = (symbol(lib, c"cuInit"), symbol(lib, c"cuDeviceGetCount"));
        if init.is_null() || count.is_null() {
            return Driver::NotTheDriver;
        }
        // SAFETY: both symbols have these C signatures in every CUDA driver (cuda.h).
        let (init, count): (Init, Count) =
            unsafe { (std::mem::transmute(init), std::mem::transmute(count)) };
        // SAFETY: plain C calls with a valid out-pointer.
        let code = unsafe { init(0) };
        if code != 0 {
            return Driver::Failed(code);
        }
        let mut n = 0;
        match unsafe { count(&mut n) } {
            0 => Driver::Devices(n),
            code => Driver::Failed(code),
        }
    }

    pub fn probe() -> CudaRuntime {
        let driver = open(c"libcuda.so.1").map_or(Driver::Missing, driver);
        let nvrtc = [c"libnvrtc.so", c"libnvrtc.so.13", c"libnvrtc.so.12"]
            .into_iter()
            .filter_map(open)
            .any(|lib| !symbol(lib, c"nvrtcVersion").is_null());
        let headers = cubecl_cuda::install::cuda_path().map(|root| {
            let include = root.join("include");
            let lacks = super::CUDA_HEADERS
                .into_iter()
                .filter(|h| !include.join(h).is_file())
                .collect();
            (include, lacks)
        });
        CudaRuntime {
            driver,
            nvrtc,
            headers,
        }
    }
}

#[cfg(all(feature = "vulkan", not(feature = "cuda")))]
fn gpu() -> Result<Device> {
    first_use_note();
    Ok(Device::vulkan(burn::tensor::DeviceKind::DefaultDevice))
}

/// What a first GPU run on a machine spends before its first step, printed once per process
/// when a GPU device is made.
pub const FIRST_USE_NOTE: &str = "note: the GPU backend compiles and tunes each kernel the first time this machine runs it (minutes for a new model: 150 s for the benchmark CNN on an H200); later runs reuse cubecl's cache (target/environment of the enclosing Cargo workspace, else ~/.cache/cubecl; docs/gpu.md)";

#[cfg(any(feature = "vulkan", feature = "cuda"))]
fn first_use_note() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| eprintln!("{FIRST_USE_NOTE}"));
}

#[cfg(not(any(feature = "vulkan", feature = "cuda")))]
fn gpu() -> Result<Device> {
    Err(KilnError::Device(format!(
        "this kiln was built without a GPU backend; rebuild with `cargo build --release --features vulkan` (or `cuda`), {USE_CPU}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_complete_cuda_runtime_passes_and_each_missing_part_is_named() {
        let all = CudaRuntime {
            driver: Driver::Devices(1),
            nvrtc: true,
            headers: Some(("/usr/local/cuda/include".into(), vec![])),
        };
        assert_eq!(cuda_missing(&all), None);
        let nothing = CudaRuntime {
            driver: Driver::Missing,
            nvrtc: false,
            headers: None,
        };
        let m = cuda_missing(&nothing).unwrap();
        assert!(
            m.starts_with(
                "--device gpu (CUDA) cannot start; missing: the NVIDIA driver (libcuda.so.1 did not load"
            ),
            "{m}"
        );
        assert!(
            m.contains("NVRTC (none of libnvrtc.so, libnvrtc.so.13, libnvrtc.so.12"),
            "{m}"
        );
        assert!(m.contains("the CUDA headers (no CUDA_PATH"), "{m}");
        assert!(
            m.ends_with("; or train on the CPU (--device cpu, or \"cpu\" in [distribute] devices)")
                && !m.contains('\n'),
            "{m}"
        );
        let with = |driver| {
            cuda_missing(&CudaRuntime {
                driver,
                ..all.clone()
            })
            .unwrap()
        };
        assert!(with(Driver::Devices(0)).contains("an NVIDIA GPU (the driver sees none)"));
        assert!(with(Driver::Failed(100)).contains("the driver failed to start: CUDA error 100"));
        assert!(with(Driver::NotTheDriver).contains("has no cuInit: it is not the NVIDIA driver"));
        let headers = CudaRuntime {
            headers: Some(("/opt/x/include".into(), vec!["cuda_bf16.h", "mma.h"])),
            ..all
        };
        assert!(
            cuda_missing(&headers)
                .unwrap()
                .contains("/opt/x/include has no cuda_bf16.h, mma.h")
        );
    }
}
