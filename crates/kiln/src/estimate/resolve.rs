//! Before a run: `batch_size = "auto"` resolved from the estimate, and CPU runs whose
//! estimate exceeds the available memory refused up front.

use super::{
    AutoBatch, Precision, auto_batch_size, estimate_on, format_bytes, host, max_batch_size,
    parse_bytes,
};
use crate::config::Overrides;
use crate::config::{AUTO_BATCH_SIZE, RunConfig};
use crate::device::DeviceKind;
use crate::error::{KilnError, Result};

/// Share of the available memory `batch_size = "auto"` uses when `fit.memory_budget` is not
/// given (Lightning's `BatchSizeFinder` leaves the rest to chance; kiln keeps 10% for the
/// allocator's slack and the rest of the machine).
pub const DEFAULT_BUDGET_FRACTION: f64 = 0.9;

/// Resolves `fit.batch_size = "auto"` and checks CPU runs against the available memory.
///
/// - With `"auto"`: chooses the largest batch whose estimate fits the budget
///   (`fit.memory_budget`, or 90% of `available`), sets it in `cfg` (pipelines too) and
///   returns the decision with its reason.
/// - Otherwise, on the CPU: refuses a run whose estimate exceeds `available`.
///
/// `available` is the free memory in bytes (`None`: `MemAvailable` from `/proc/meminfo` on
/// the CPU; unknown on a GPU, where `"auto"` needs `fit.memory_budget`).
///
/// # Errors
/// [`KilnError::InsufficientMemory`] with the numbers and remedies (a batch that fits, mixed
/// precision) when a CPU run would not fit; [`KilnError::Config`] when `"auto"` has no budget
/// to work with or no batch fits.
pub fn resolve_batch_size(
    cfg: &mut RunConfig,
    device: DeviceKind,
    precision: Precision,
    available: Option<u64>,
) -> Result<Option<AutoBatch>> {
    let available = match (available, device) {
        (Some(a), _) => Some(a),
        (None, DeviceKind::Cpu) => host::mem_available(),
        (None, DeviceKind::Gpu) => None,
    };
    // The host data counts on the CPU only (on a GPU it is not in device memory).
    let data = match device {
        DeviceKind::Cpu => host::host_data(cfg),
        DeviceKind::Gpu => None,
    };
    let at = |cfg: &RunConfig, b: usize| {
        let b = host::effective_batch(data.as_ref(), cfg, b);
        let e = estimate_on(device, &cfg.model, &cfg.compile.optimizer, b, precision);
        match &data {
            Some(d) => e.with_host(d, cfg),
            None => e,
        }
    };
    if cfg.fit.batch_size == AUTO_BATCH_SIZE {
        let budget = match (&cfg.fit.memory_budget, available) {
            (Some(m), _) => parse_bytes(m, "fit.memory_budget")?,
            (None, Some(a)) => (a as f64 * DEFAULT_BUDGET_FRACTION) as u64,
            (None, None) => {
                return Err(KilnError::config(
                    "fit.batch_size",
                    "\"auto\" needs a memory budget: kiln cannot read the free memory of this \
                     device; set fit.memory_budget (e.g. \"16GiB\")",
                ));
            }
        };
        let max = data
            .map(|d| {
                ((d.train_examples as f64) * (1.0 - cfg.fit.validation_split)).max(1.0) as usize
            })
            .unwrap_or(1 << 20);
        let host = data.as_ref().map(|d| (d, &*cfg));
        let auto = auto_batch_size(
            device,
            &cfg.model,
            &cfg.compile.optimizer,
            precision,
            budget,
            max,
            host,
        )?;
        cfg.apply(&Overrides {
            batch_size: Some(auto.batch_size),
            ..Default::default()
        })?;
        return Ok(Some(auto));
    }
    if device == DeviceKind::Cpu
        && let Some(available) = available
    {
        let e = at(cfg, cfg.fit.batch_size);
        if e.total_bytes() > available {
            let fits = max_batch_size(available, cfg.fit.batch_size, |b| at(cfg, b).total_bytes());
            let batch = host::effective_batch(data.as_ref(), cfg, cfg.fit.batch_size);
            return Err(KilnError::InsufficientMemory(format!(
                "training at batch size {} needs about {} (weights {}, gradients {}, optimizer \
                 {}, activations {}{}) but {} is available (MemAvailable); {}use \
                 batch_size = \"auto\", an optimizer with less state (SGD) or a smaller model \
                 (kiln estimate {{config}} shows the breakdown; on the CPU a mixed precision \
                 policy saves no memory, docs/precision.md)",
                batch,
                format_bytes(e.total_bytes()),
                format_bytes(e.weight_bytes()),
                format_bytes(e.gradient_bytes()),
                format_bytes(e.optimizer_bytes()),
                format_bytes(e.activation_bytes().saturating_add(e.workspace_bytes)),
                e.host_bytes
                    .map(|h| format!(", data and pipeline {}", format_bytes(h)))
                    .unwrap_or_default(),
                format_bytes(available),
                match fits {
                    Some(b) => format!("use a smaller batch (--batch-size {b} fits), "),
                    None => "even batch 1 does not fit; ".into(),
                },
            )));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mlp(batch: &str, budget: Option<&str>) -> RunConfig {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../examples/fashion-mnist/mlp.toml"),
        )
        .unwrap()
        .replace("batch_size = 128", &format!("batch_size = {batch}"))
        .replace(
            "[fit]",
            &format!(
                "[fit]\n{}",
                budget.map_or(String::new(), |b| format!("memory_budget = \"{b}\""))
            ),
        );
        // No data files: the model side only, so the answer does not depend on the machine.
        let text = text.replace("/usr/share/datasets/fashion-mnist", "/nonexistent");
        RunConfig::from_toml_str(&text).unwrap()
    }

    #[test]
    fn auto_chooses_the_largest_batch_for_the_budget() {
        let mut cfg = mlp("\"auto\"", Some("64MiB"));
        assert_eq!(cfg.fit.batch_size, AUTO_BATCH_SIZE);
        assert!(cfg.to_toml().contains("batch_size = \"auto\""));
        let auto = resolve_batch_size(&mut cfg, DeviceKind::Cpu, Precision::Float32, Some(1 << 40))
            .unwrap()
            .unwrap();
        // MLP 784-512-512-10 with AdamW: 669,706 params x 16 B = 10,715,296 B; per example
        // 784 (flattened input, kept by Dense) + 512 + 512 (fused ReLUs) + 3 x 10 (softmax)
        // kept values and a 2 x 784 workspace = 3,406 values x 4 B = 13,624 B:
        // (67,108,864 - 10,715,296) / 13,624 = 4,139.3.
        assert_eq!(auto.batch_size, 4139);
        assert_eq!(cfg.fit.batch_size, 4139);
        assert!(auto.reason.contains("chose 4139"), "{}", auto.reason);
        let e = estimate_on(
            DeviceKind::Cpu,
            &cfg.model,
            &cfg.compile.optimizer,
            4139,
            Precision::Float32,
        );
        assert!(e.total_bytes() <= 64 << 20);
        let e = estimate_on(
            DeviceKind::Cpu,
            &cfg.model,
            &cfg.compile.optimizer,
            4140,
            Precision::Float32,
        );
        assert!(e.total_bytes() > 64 << 20);
        // Without a memory_budget: 90% of what is available.
        let mut cfg = mlp("\"auto\"", None);
        let auto = resolve_batch_size(
            &mut cfg,
            DeviceKind::Cpu,
            Precision::Float32,
            Some(80 << 20),
        )
        .unwrap()
        .unwrap();
        assert_eq!(auto.budget, (80u64 << 20) * 9 / 10);
        // On a GPU, kiln cannot read the free memory: a budget is required.
        let mut cfg = mlp("\"auto\"", None);
        let e = resolve_batch_size(&mut cfg, DeviceKind::Gpu, Precision::Float32, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("fit.memory_budget"), "{e}");
    }

    #[test]
    fn a_cpu_run_that_does_not_fit_is_refused_with_remedies() {
        let mut cfg = mlp("4096", None);
        let e = resolve_batch_size(
            &mut cfg,
            DeviceKind::Cpu,
            Precision::Float32,
            Some(40 << 20),
        )
        .unwrap_err();
        assert!(matches!(e, KilnError::InsufficientMemory(_)));
        let e = e.to_string();
        // (41,943,040 - 10,715,296) / 13,624 = 2,292.1 (see above).
        assert!(e.contains("--batch-size 2292 fits"), "{e}");
        assert!(
            e.contains("saves no memory") && e.contains("40.00 MiB is available"),
            "{e}"
        );
        // The same run with enough memory passes, and a number stays a number.
        assert!(
            resolve_batch_size(&mut cfg, DeviceKind::Cpu, Precision::Float32, Some(1 << 30))
                .unwrap()
                .is_none()
        );
        assert_eq!(cfg.fit.batch_size, 4096);
        let bad = RunConfig::from_toml_str(
            &std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../examples/fashion-mnist/mlp.toml"),
            )
            .unwrap()
            .replace("batch_size = 128", "batch_size = 0"),
        )
        .unwrap_err()
        .to_string();
        assert!(bad.contains("fit.batch_size: must be at least 1"), "{bad}");
        let bad = RunConfig::from_toml_str(
            &std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../examples/fashion-mnist/mlp.toml"),
            )
            .unwrap()
            .replace("batch_size = 128", "batch_size = \"big\""),
        )
        .unwrap_err()
        .to_string();
        assert!(bad.contains("a positive integer or \"auto\""), "{bad}");
    }
}
