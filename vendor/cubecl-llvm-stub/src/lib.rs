//! Offline stand-in for `cubecl-llvm` 0.12.0-pre.1 (see `Cargo.toml`): the items `cubecl-cuda`
//! names, with the real crate's paths and shapes, and no LLVM. `cubecl-cuda` built with its
//! `cpp` feature runs its CUDA C++ (NVRTC) compiler and never this one; if anything selects
//! the LLVM backend anyway, compiling a kernel fails with an error that says so.

use core::fmt;

use cubecl_core::Compiler;
use cubecl_core::prelude::KernelDefinition;
use cubecl_environment::backtrace::BackTrace;
use cubecl_runtime::compiler::CompilationError;
use cubecl_runtime::kernel::BufferIOAttr;

/// What the stand-in says when asked to compile.
const NO_LLVM: &str = "kiln is built without cubecl's LLVM backend (vendor/cubecl-llvm-stub): \
                       CUDA kernels compile through NVRTC only (cubecl-cuda's `cpp` feature)";

/// The real crate's NVPTX module tree, reduced to the PTX version type.
pub mod nvptx {
    /// PTX ISA versions.
    pub mod ptx_version {
        use core::fmt;

        /// A PTX ISA version, as `ptx<number>`. The stand-in maps no driver to a version: only
        /// the LLVM backend, which it does not have, emits PTX itself.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct PtxVersion(u32);

        impl PtxVersion {
            /// The newest version the driver `driver` (as `cuDriverGetVersion` reports it)
            /// loads; always `None` here (NVRTC picks its own).
            pub fn for_driver(_driver: i32) -> Option<Self> {
                None
            }

            /// The version's number (`90` for PTX ISA 9.0).
            pub const fn number(self) -> u32 {
                self.0
            }
        }

        impl fmt::Display for PtxVersion {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "ptx{}", self.0)
            }
        }
    }
}

/// The real crate's shared lowering tree, reduced to device-feature narrowing.
pub mod shared {
    pub use super::{NvptxModule, PlironArtifact, PlironCompiler, PlironOptions};

    /// Narrowing a device's advertised features to what the LLVM backend lowers.
    pub mod lowered_features {
        use cubecl_core::ir::DeviceProperties;
        use cubecl_core::ir::nvidia::SmArch;

        /// The GPU target features are narrowed for.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum GpuTarget {
            /// An NVIDIA part of architecture `arch`.
            Nvptx {
                /// The part's architecture.
                arch: SmArch,
            },
        }

        /// Leaves `props` as the C++ backend built them: there is no LLVM backend to narrow
        /// them for.
        pub fn restrict_features(_props: &mut DeviceProperties, _target: GpuTarget) {}
    }
}

/// The targets the real crate lowers to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LlvmTarget {
    /// The host CPU.
    #[default]
    Cpu,
    /// NVIDIA PTX.
    Nvptx,
}

/// The LLVM backend's compiler; [`Compiler::compile`] always fails here.
#[derive(Clone, Debug, Default)]
pub struct PlironCompiler {
    /// What to compile for.
    pub target: LlvmTarget,
}

/// The LLVM backend's options, the fields `cubecl-cuda` sets.
#[derive(Clone, Debug, Default)]
pub struct PlironOptions {
    /// AMD architecture (unused: `cubecl-cuda` sets `None`).
    pub arch: Option<cubecl_core::ir::amd::GfxArch>,
    /// NVIDIA architecture.
    pub sm_arch: Option<cubecl_core::ir::nvidia::SmArch>,
    /// PTX version to emit.
    pub ptx_version: Option<nvptx::ptx_version::PtxVersion>,
    /// Scalars in the kernel parameter block.
    pub grid_constants: bool,
}

/// A compiled PTX module (never produced by the stand-in).
#[derive(Clone, Debug)]
pub struct NvptxModule {
    /// NUL-terminated PTX.
    pub ptx: Vec<core::ffi::c_char>,
    /// Kernel entry point.
    pub entrypoint: String,
    /// IR, for logs and cache keys.
    pub ir: String,
    /// Shared memory per launch, in bytes.
    pub shared_memory_size: usize,
    /// Buffer access modes in binding order.
    pub io: Vec<BufferIOAttr>,
}

/// The LLVM backend's output.
#[derive(Clone, Debug)]
pub enum PlironArtifact {
    /// PTX for the CUDA driver.
    NvptxCode(NvptxModule),
}

impl fmt::Display for PlironArtifact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlironArtifact::NvptxCode(module) => f.write_str(&module.ir),
        }
    }
}

impl Compiler for PlironCompiler {
    type Representation = PlironArtifact;
    type CompilationOptions = PlironOptions;

    fn compile(
        &mut self,
        _kernel: KernelDefinition,
        _options: &Self::CompilationOptions,
    ) -> Result<Self::Representation, CompilationError> {
        Err(CompilationError::Generic {
            reason: NO_LLVM.to_string(),
            backtrace: BackTrace::capture(),
        })
    }

    fn extension(&self) -> &'static str {
        "ll"
    }

    fn lang_tag(&self) -> &'static str {
        "llvm"
    }
}
