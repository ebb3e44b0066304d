//! Which instruction set kiln's CPU kernels use, chosen once per process from the CPU's
//! features: one binary runs everywhere and uses the widest vectors the CPU has.
//!
//! | path | needs (x86-64) | GEMM micro-kernels | element-wise loops |
//! |---|---|---|---|
//! | `avx512` | AVX-512 F/BW/CD/DQ/VL, AVX2, FMA | 16-wide (the `gemm` crate's `avx512f`) | compiled for AVX-512 |
//! | `avx2` | AVX2, FMA | 8-wide (`fma`) | compiled for AVX2 + FMA |
//! | `portable` | — | scalar | baseline x86-64 (SSE2) |
//!
//! By default kiln takes the widest path, except on AMD Zen 4 (family 19h), whose AVX-512
//! executes 512-bit operations as two 256-bit halves: there the `avx512` path measured 0.71x-0.81x
//! (MLP) and 0.89x-1.03x (CNN) the `avx2` path's samples/s (bench/README.md), so `avx2` is
//! the default. The environment variable `KILN_CPU_PATH` (`avx512`, `avx2` or `portable`) picks
//! any path the CPU runs, so the tests and benchmarks cover every path on any machine;
//! asking for a path the CPU lacks keeps the default, with a warning on stderr. The
//! paths compute the same sums in the same order except inside the GEMM micro-kernels, whose
//! vector width changes how a dot product is split (results agree to float32 rounding; see
//! `tests/cpu_paths.rs`). On other architectures there is one path, `portable` for kiln's
//! loops, and the `gemm` crate picks its own kernels (NEON on aarch64).
//!
//! Matrix products of bfloat16 values (under `mixed_bfloat16`) take AVX512_BF16's dot product
//! where the CPU has it, whatever the float32 path ([`bf16_dot`]; `KILN_CPU_PATH=avx2` or
//! `portable` turns it off too), and AMX tiles where the CPU has those too ([`amx`]; Intel
//! Sapphire Rapids and later; any `KILN_CPU_PATH`, `avx512` included, turns them off).
//!
//! Burn's own CPU operations (the ops kiln has no kernel for) choose their kernels themselves
//! and do not follow `KILN_CPU_PATH`.

use std::sync::atomic::{AtomicU8, Ordering};

/// A kernel path, ordered from the narrowest to the widest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CpuPath {
    /// Scalar GEMM, baseline loops.
    Portable,
    /// AVX2 with FMA.
    Avx2,
    /// AVX-512 (x86-64-v4).
    Avx512,
}

/// The environment variable that picks a path.
pub const PATH_VARIABLE: &str = "KILN_CPU_PATH";

impl CpuPath {
    /// Every path, narrowest first.
    pub const ALL: [CpuPath; 3] = [CpuPath::Portable, CpuPath::Avx2, CpuPath::Avx512];

    /// The name `KILN_CPU_PATH` takes.
    pub fn name(self) -> &'static str {
        match self {
            CpuPath::Portable => "portable",
            CpuPath::Avx2 => "avx2",
            CpuPath::Avx512 => "avx512",
        }
    }

    /// The path named `name` (as [`CpuPath::name`]).
    pub fn parse(name: &str) -> Option<CpuPath> {
        CpuPath::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The widest path this CPU runs.
    pub fn detected() -> CpuPath {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let v3 = has!("avx2") && has!("fma");
            let v4 = v3
                && has!("avx512f")
                && has!("avx512bw")
                && has!("avx512cd")
                && has!("avx512dq")
                && has!("avx512vl");
            match (v4, v3) {
                (true, _) => CpuPath::Avx512,
                (false, true) => CpuPath::Avx2,
                _ => CpuPath::Portable,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            CpuPath::Portable
        }
    }

    /// The path kiln uses unless `KILN_CPU_PATH` says otherwise (see the module
    /// documentation): the widest, but `avx2` on AMD Zen 4.
    pub fn preferred() -> CpuPath {
        preferred_on(CpuPath::detected(), amd_family())
    }
}

/// The default path on a CPU whose widest is `widest` and whose AMD family is `family`
/// (`None`: not AMD).
fn preferred_on(widest: CpuPath, family: Option<u32>) -> CpuPath {
    match (widest, family) {
        // Zen 4: AVX-512 on 256-bit units, slower than AVX2 here (bench/README.md).
        (CpuPath::Avx512, Some(0x19)) => CpuPath::Avx2,
        _ => widest,
    }
}

/// The CPU's family when it is an AMD one (CPUID leaf 1: the base family, plus the
/// extended family when the base is 0xF).
#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)]
fn amd_family() -> Option<u32> {
    use std::arch::x86_64::__cpuid;
    // SAFETY: every x86-64 CPU has CPUID, leaves 0 and 1 included.
    let vendor = unsafe { __cpuid(0) };
    let name: Vec<u8> = [vendor.ebx, vendor.edx, vendor.ecx]
        .iter()
        .flat_map(|r| r.to_le_bytes())
        .collect();
    if name != b"AuthenticAMD" {
        return None;
    }
    // SAFETY: as above.
    let eax = unsafe { __cpuid(1) }.eax;
    let base = (eax >> 8) & 0xF;
    Some(match base {
        0xF => base + ((eax >> 20) & 0xFF),
        _ => base,
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn amd_family() -> Option<u32> {
    None
}

impl std::fmt::Display for CpuPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// 0: not chosen yet; otherwise 1 + the path's index in [`CpuPath::ALL`].
static CHOSEN: AtomicU8 = AtomicU8::new(0);

/// The path the kernels use: [`CpuPath::preferred`], or `KILN_CPU_PATH`'s when the CPU runs
/// it (read once, at the first call).
pub fn path() -> CpuPath {
    match CHOSEN.load(Ordering::Relaxed) {
        0 => {
            let chosen = from_environment(
                std::env::var(PATH_VARIABLE).ok(),
                CpuPath::detected(),
                CpuPath::preferred(),
            );
            store(chosen);
            chosen
        }
        n => CpuPath::ALL[usize::from(n - 1)],
    }
}

/// Switches every kernel to `path` for the rest of the process (tests and benchmarks that
/// compare paths in one process; not while kernels run on other threads).
///
/// # Errors
/// The message names the path and the detected one when the CPU cannot run `path`.
pub fn set_path(path: CpuPath) -> Result<(), String> {
    runs(path, CpuPath::detected())?;
    store(path);
    Ok(())
}

/// `Ok` when a CPU whose widest path is `detected` runs `path`.
fn runs(path: CpuPath, detected: CpuPath) -> Result<(), String> {
    match path <= detected {
        true => Ok(()),
        false => Err(format!(
            "this CPU cannot run the {path} kernels (the widest it runs: {detected})"
        )),
    }
}

fn store(path: CpuPath) {
    let index = CpuPath::ALL.iter().position(|p| *p == path).unwrap_or(0);
    CHOSEN.store(index as u8 + 1, Ordering::Relaxed);
}

/// The path for a `KILN_CPU_PATH` value (`None`: unset, the `preferred` path) on a CPU
/// whose widest is `detected`, warning on stderr about a value that names no path or one the
/// CPU cannot run (both keep `preferred`).
fn from_environment(value: Option<String>, detected: CpuPath, preferred: CpuPath) -> CpuPath {
    let Some(value) = value.filter(|v| !v.trim().is_empty()) else {
        return preferred;
    };
    match CpuPath::parse(value.trim()) {
        Some(p) if p <= detected => p,
        Some(p) => {
            eprintln!(
                "kiln: {PATH_VARIABLE}={p} asks for kernels this CPU cannot run (the widest \
                 it has: {detected}); using {preferred}"
            );
            preferred
        }
        None => {
            eprintln!(
                "kiln: {PATH_VARIABLE}={value:?} is not a kernel path (avx512, avx2 or \
                 portable); using {preferred} (any value keeps AMX off where the CPU has \
                 it: unset {PATH_VARIABLE} to use AMX)"
            );
            preferred
        }
    }
}

/// Whether the CPU has AVX512_BF16's dot product (`vdpbf16ps`) besides the `avx512` path's
/// features.
pub fn has_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        CpuPath::detected() == CpuPath::Avx512 && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU has AMX-TILE and AMX-BF16 besides AVX512_BF16 ([`has_bf16`]), and Linux
/// lets this process use the tile registers (asked once, at the first call).
pub fn has_amx() -> bool {
    use std::sync::OnceLock;
    static GRANTED: OnceLock<bool> = OnceLock::new();
    *GRANTED.get_or_init(|| has_bf16() && amx_instructions() && request_tiles())
}

/// CPUID leaf 7, sub-leaf 0, EDX: bit 22 AMX-BF16, bit 24 AMX-TILE.
#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)]
fn amx_instructions() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // SAFETY: every x86-64 CPU has CPUID; leaf 7 is read only when leaf 0 says it exists.
    let max = unsafe { __cpuid(0) }.eax;
    if max < 7 {
        return false;
    }
    // SAFETY: as above.
    let edx = unsafe { __cpuid_count(7, 0) }.edx;
    edx & (1 << 22) != 0 && edx & (1 << 24) != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn amx_instructions() -> bool {
    false
}

/// Asks Linux (5.16 and later) for AMX's 8 KiB of tile registers
/// (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, for the whole process); `true`
/// when granted.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_tiles() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: a plain system call with integer arguments; it changes only what this process
    // may use.
    let r = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    r == 0
}

/// Other systems: kiln does not ask for the tiles there.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn request_tiles() -> bool {
    false
}

/// 0: not chosen yet; 1: off; 2: on.
static AMX: AtomicU8 = AtomicU8::new(0);

/// Whether matrix products of bfloat16 values use AMX tiles ([`super::amx`]) rather than
/// `vdpbf16ps`: when [`bf16_dot`] holds, the CPU has AMX ([`has_amx`]) and `KILN_CPU_PATH`
/// is unset (naming any path, `avx512` included, keeps the products on that path's vector
/// instructions). Chosen once, at the first call.
pub fn amx() -> bool {
    match AMX.load(Ordering::Relaxed) {
        0 => {
            let unset = std::env::var(PATH_VARIABLE).map_or(true, |v| v.trim().is_empty());
            let on = bf16_dot() && unset && has_amx();
            AMX.store(1 + u8::from(on), Ordering::Relaxed);
            on
        }
        n => n == 2,
    }
}

/// Turns AMX on or off for the rest of the process, as [`set_bf16`].
///
/// # Errors
/// Turning it on on a CPU without AMX, or while the bfloat16 products are off.
pub fn set_amx(on: bool) -> Result<(), String> {
    if on && !(has_amx() && bf16_dot()) {
        return Err("this CPU has no AMX-BF16 (or the bfloat16 products are off)".to_string());
    }
    AMX.store(1 + u8::from(on), Ordering::Relaxed);
    Ok(())
}

/// 0: not chosen yet; 1: off; 2: on.
static BF16: AtomicU8 = AtomicU8::new(0);

/// Whether matrix products of bfloat16 values use bfloat16 dot products
/// ([`super::bf16`]): when the CPU has them and `KILN_CPU_PATH` names no path below `avx512`
/// (forcing `avx2` or `portable` also forces the float32 kernels). Chosen once, at the first call.
pub fn bf16_dot() -> bool {
    match BF16.load(Ordering::Relaxed) {
        0 => {
            let on = has_bf16() && bf16_allowed(std::env::var(PATH_VARIABLE).ok().as_deref());
            BF16.store(1 + u8::from(on), Ordering::Relaxed);
            on
        }
        n => n == 2,
    }
}

/// Turns the bfloat16 dot products on or off for the rest of the process (tests and
/// benchmarks that compare both in one process; not while kernels run on other threads).
///
/// # Errors
/// Turning them on on a CPU without AVX512_BF16.
pub fn set_bf16(on: bool) -> Result<(), String> {
    if on && !has_bf16() {
        return Err("this CPU has no AVX512_BF16 dot product".to_string());
    }
    BF16.store(1 + u8::from(on), Ordering::Relaxed);
    Ok(())
}

/// `false` when a `KILN_CPU_PATH` value names a path below `avx512`.
fn bf16_allowed(value: Option<&str>) -> bool {
    !matches!(
        value.and_then(|v| CpuPath::parse(v.trim())),
        Some(CpuPath::Avx2 | CpuPath::Portable)
    )
}

/// Defines `fn $name(path: CpuPath, args...)` that runs `$body` compiled for `path`'s
/// instruction set: the body is inlined into one function per path with that path's target
/// features, so the compiler vectorizes the same loop 16, 8 or 4 floats wide. Element-wise
/// loops give bit-identical results on every path (Rust never fuses a multiply and an add on
/// its own).
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        $vis fn $name(path: $crate::kernels::cpu::CpuPath, $($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512cd,avx512dq,avx512vl,avx2,fma")]
            fn v4($($arg: $ty),*) {
                body($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            fn v3($($arg: $ty),*) {
                body($($arg),*)
            }
            match path {
                // SAFETY: `cpu::path` and `cpu::set_path` only give paths the CPU runs.
                #[cfg(target_arch = "x86_64")]
                $crate::kernels::cpu::CpuPath::Avx512 => unsafe { v4($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                $crate::kernels::cpu::CpuPath::Avx2 => unsafe { v3($($arg),*) },
                _ => body($($arg),*),
            }
        }
    };
}
pub(crate) use multiversion;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_picks_any_path_the_cpu_runs() {
        let env = |v: &str| from_environment(Some(v.to_string()), CpuPath::Avx2, CpuPath::Avx2);
        assert_eq!(env("portable"), CpuPath::Portable);
        assert_eq!(env("avx2"), CpuPath::Avx2);
        assert_eq!(env("avx512"), CpuPath::Avx2, "not above the detected path");
        assert_eq!(
            env("sse9"),
            CpuPath::Avx2,
            "an unknown name keeps the detected path"
        );
        assert_eq!(env(" "), CpuPath::Avx2);
        assert_eq!(
            from_environment(None, CpuPath::Avx512, CpuPath::Avx512),
            CpuPath::Avx512
        );
        // Zen 4: AVX2 by default, AVX-512 on request.
        let zen4 = |v: Option<&str>| {
            from_environment(v.map(str::to_string), CpuPath::Avx512, CpuPath::Avx2)
        };
        assert_eq!(zen4(None), CpuPath::Avx2);
        assert_eq!(zen4(Some("avx512")), CpuPath::Avx512);
        assert_eq!(zen4(Some("portable")), CpuPath::Portable);
        assert_eq!(zen4(Some("avx1024")), CpuPath::Avx2);
        assert_eq!(CpuPath::parse("avx512"), Some(CpuPath::Avx512));
        assert!(CpuPath::Portable < CpuPath::Avx2 && CpuPath::Avx2 < CpuPath::Avx512);
    }

    #[test]
    fn zen_4_prefers_avx2_and_other_cpus_their_widest_path() {
        assert_eq!(preferred_on(CpuPath::Avx512, Some(0x19)), CpuPath::Avx2);
        assert_eq!(
            preferred_on(CpuPath::Avx512, Some(0x1A)),
            CpuPath::Avx512,
            "Zen 5"
        );
        assert_eq!(
            preferred_on(CpuPath::Avx512, None),
            CpuPath::Avx512,
            "Intel"
        );
        assert_eq!(
            preferred_on(CpuPath::Avx2, Some(0x19)),
            CpuPath::Avx2,
            "Zen 3"
        );
        assert_eq!(preferred_on(CpuPath::Portable, None), CpuPath::Portable);
        assert!(CpuPath::preferred() <= CpuPath::detected());
    }

    #[test]
    fn only_a_path_below_avx512_turns_the_bf16_dot_products_off() {
        assert!(bf16_allowed(None));
        assert!(bf16_allowed(Some("avx512")));
        assert!(
            bf16_allowed(Some("sse9")),
            "an unknown name keeps the default"
        );
        assert!(!bf16_allowed(Some("avx2")));
        assert!(!bf16_allowed(Some(" portable ")));
        assert!(!has_bf16() || CpuPath::detected() == CpuPath::Avx512);
    }

    #[test]
    fn a_path_above_the_cpu_is_refused() {
        let e = runs(CpuPath::Avx512, CpuPath::Avx2).unwrap_err();
        assert_eq!(
            e,
            "this CPU cannot run the avx512 kernels (the widest it runs: avx2)"
        );
        assert_eq!(runs(CpuPath::Avx2, CpuPath::Avx2), Ok(()));
        assert_eq!(runs(CpuPath::Portable, CpuPath::Avx512), Ok(()));
    }
}
