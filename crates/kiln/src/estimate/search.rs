//! The largest batch that fits a memory size, and which common GPUs fit.

use super::{Estimate, Precision, format_bytes};
use crate::compile::OptimizerSpec;
use crate::model::ModelSpec;

/// Common GPU memory sizes in GB (8 GB consumer cards up to the 141 GB H200).
pub const GPU_SIZES_GB: [u64; 6] = [8, 16, 24, 40, 80, 141];

/// Fraction of a GPU's memory a run can use: the CUDA context, the kernels' code and the
/// allocator's rounding take the rest (PyTorch's and TensorFlow's allocators report about
/// 5% unusable on large cards).
pub const GPU_USABLE: f64 = 0.95;

/// Usable bytes of a GPU sold as `gb` GB (GiB, as the cards' memory is sized).
pub fn gpu_usable_bytes(gb: u64) -> u64 {
    ((gb << 30) as f64 * GPU_USABLE) as u64
}

/// The largest batch whose `bytes(batch)` is at most `budget`, or `None` when batch 1 does not
/// fit. As Lightning's `BatchSizeFinder` (`mode="power"` then `"binsearch"`): double from 1
/// until a batch does not fit, then bisect between the last that fits and the first that does
/// not. `bytes` must grow with the batch; the search stops at `max` (inclusive).
pub fn max_batch_size(budget: u64, max: usize, bytes: impl Fn(usize) -> u64) -> Option<usize> {
    if bytes(1) > budget {
        return None;
    }
    let mut fits = 1usize;
    let mut fails = loop {
        let next = fits.saturating_mul(2).min(max);
        if next == fits {
            return Some(fits);
        }
        if bytes(next) > budget {
            break next;
        }
        fits = next;
    };
    while fails - fits > 1 {
        let mid = fits + (fails - fits) / 2;
        if bytes(mid) <= budget {
            fits = mid;
        } else {
            fails = mid;
        }
    }
    Some(fits)
}

/// A batch size chosen from the estimate ([`auto_batch_size`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AutoBatch {
    /// The chosen batch.
    pub batch_size: usize,
    /// The estimate at that batch.
    pub estimate: Estimate,
    /// The budget it was chosen against, in bytes.
    pub budget: u64,
    /// One line saying what was chosen and why, for the user.
    pub reason: String,
}

/// Largest batch size (at most `max`, e.g. the training set size) whose estimated peak
/// ([`Estimate::total_bytes`] on `device`, with `host` data when given) fits `budget` bytes.
///
/// # Errors
/// [`crate::KilnError::Config`] (key `fit.batch_size`) when not even batch 1 fits, with the
/// numbers and the remedies.
pub fn auto_batch_size(
    device: crate::device::DeviceKind,
    spec: &ModelSpec,
    optimizer: &OptimizerSpec,
    precision: Precision,
    budget: u64,
    max: usize,
    host: Option<(&super::HostData, &crate::config::RunConfig)>,
) -> crate::error::Result<AutoBatch> {
    let at = |b: usize| {
        let e = super::estimate_on(device, spec, optimizer, b, precision);
        match host {
            Some((d, cfg)) => e.with_host(d, cfg),
            None => e,
        }
    };
    let Some(batch) = max_batch_size(budget, max.max(1), |b| at(b).total_bytes()) else {
        let one = at(1);
        return Err(crate::KilnError::config(
            "fit.batch_size",
            format!(
                "\"auto\" found no batch size that fits: batch 1 needs {} (weights {}, \
                 gradients {}, optimizer {}) but the budget is {}; use {}an optimizer with \
                 less state (SGD), a smaller model, or a larger fit.memory_budget",
                format_bytes(one.total_bytes()),
                format_bytes(one.weight_bytes()),
                format_bytes(one.gradient_bytes()),
                format_bytes(one.optimizer_bytes()),
                format_bytes(budget),
                match device {
                    // kiln's CPU policies hold 16-bit values in float32 tensors.
                    crate::device::DeviceKind::Cpu => "",
                    crate::device::DeviceKind::Gpu =>
                        "mixed precision (precision = \"mixed_bfloat16\"), ",
                },
            ),
        ));
    };
    let e = at(batch);
    let limit = if batch >= max {
        format!("the training set has {max} examples")
    } else {
        format!(
            "batch {} would need {}",
            batch + 1,
            format_bytes(at(batch + 1).total_bytes())
        )
    };
    let reason = format!(
        "batch_size = \"auto\": chose {batch}, the largest batch whose estimated peak ({}: \
         weights {}, gradients {}, optimizer {}, activations {}{}) fits the budget of {}; {limit}",
        format_bytes(e.total_bytes()),
        format_bytes(e.weight_bytes()),
        format_bytes(e.gradient_bytes()),
        format_bytes(e.optimizer_bytes()),
        format_bytes(e.activation_bytes().saturating_add(e.workspace_bytes)),
        e.host_bytes
            .map(|h| format!(", data and pipeline {}", format_bytes(h)))
            .unwrap_or_default(),
        format_bytes(budget)
    );
    Ok(AutoBatch {
        batch_size: batch,
        estimate: e,
        budget,
        reason,
    })
}
