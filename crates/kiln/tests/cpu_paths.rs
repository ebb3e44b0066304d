//! Every CPU kernel path this machine runs (`kiln::kernels::cpu`: AVX-512, AVX2 + FMA,
//! portable), forced one after another in this process, against Burn's reference operations:
//! Dense, Conv2D, MaxPooling2D, attention and layer normalization forward and gradients on the grid of shapes of
//! `src/ops/tests.rs` (norm-wise relative error below 1e-5 in float32), and the paths against
//! each other: the element-wise kernels (the Adam update) bit for bit, the GEMM to float32
//! rounding.
//!
//! The paths above the CPU's are not run here; the test says which ran. On an AVX-512 machine
//! all three are checked.

use kiln::kernels::adam::{AdamStep, update};
use kiln::kernels::cpu::{self, CpuPath};

// `src/ops/tests.rs` calls the operations as `super::…`: these are kiln's.
#[allow(unused_imports)]
use kiln::ops::{
    Epilogue, attention, attention_context, attention_weights, batch_norm_train, conv2d, dense,
    fast_path, layer_norm, max_pool2d, round_half,
};

#[path = "../src/ops/tests.rs"]
#[allow(dead_code)]
mod ops_checks;

/// The paths this CPU runs, narrowest first.
fn runnable() -> Vec<CpuPath> {
    let detected = CpuPath::detected();
    CpuPath::ALL
        .into_iter()
        .filter(|p| *p <= detected)
        .collect()
}

/// An Adam update of `n` weights on `path`.
fn adam_on(path: CpuPath, n: usize) -> Vec<f32> {
    cpu::set_path(path).unwrap();
    let mut w: Vec<f32> = (0..n)
        .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
        .collect();
    let (mut m, mut v) = (vec![0.0; n], vec![0.0; n]);
    for step in 1..=3 {
        let g: Vec<f32> = (0..n)
            .map(|i| (((i + step) * 53) % 97) as f32 / 40.0 - 1.2)
            .collect();
        let s = AdamStep {
            learning_rate: 0.01,
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-7,
            weight_decay: 0.004,
            step: step as u64,
        };
        update(&mut w, &mut m, &mut v, &g, &s);
    }
    w
}

/// One test, so that no other test runs while the path changes.
#[test]
fn every_kernel_path_matches_burn_and_the_others() {
    let paths = runnable();
    eprintln!(
        "cpu paths checked: {:?} (detected {})",
        paths.iter().map(|p| p.name()).collect::<Vec<_>>(),
        CpuPath::detected()
    );
    #[cfg(target_arch = "x86_64")]
    assert!(
        paths.contains(&CpuPath::Avx2),
        "every x86-64 machine kiln runs on here has AVX2: the AVX2 path must be checked"
    );
    for &path in &paths {
        cpu::set_path(path).unwrap();
        assert_eq!(cpu::path(), path);
        ops_checks::dense_matches_burn_forward_and_gradients();
        ops_checks::conv2d_matches_burn_forward_and_gradients();
        ops_checks::max_pool2d_matches_burn_forward_and_gradients();
        ops_checks::attention_matches_burn_forward_and_gradients();
        ops_checks::layer_norm_matches_burn_forward_and_gradients();
    }
    // Element-wise loops: the same operations in the same order on every path.
    let n = 70_001;
    let portable = adam_on(CpuPath::Portable, n);
    for &path in &paths {
        assert!(
            adam_on(path, n) == portable,
            "Adam on {path} differs from portable"
        );
    }
    cpu::set_path(CpuPath::detected()).unwrap();
}

#[test]
fn kiln_cpu_path_names_the_paths() {
    for p in CpuPath::ALL {
        assert_eq!(CpuPath::parse(p.name()), Some(p));
        assert_eq!(p.to_string(), p.name());
    }
    assert_eq!(CpuPath::parse("avx-512"), None);
    assert_eq!(cpu::PATH_VARIABLE, "KILN_CPU_PATH");
}
