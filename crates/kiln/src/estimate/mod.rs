//! Memory estimate of a training run: per layer and in total, the parameters, weights,
//! gradients, optimizer state and activations kept for backward at a batch size and precision;
//! the largest batch that fits a memory size; which common GPUs fit; and on the CPU the
//! dataset and input pipeline too. Everything is counted from the [`ModelSpec`]: nothing is
//! allocated, so BERT-large is sized in microseconds.
//!
//! # Formulas (bytes)
//!
//! With `P` parameters (`P_t` trainable), batch `b`, `c` bytes per compute value (4 for
//! float32, 2 for the mixed policies on a GPU, 4 for them on the CPU, where kiln holds 16-bit
//! values in float32 tensors; see [`Precision`]):
//!
//! - weights: `4·P` float32 variables, plus `c·P_t` for the compute copy of a mixed policy;
//! - gradients: `c·P_t`;
//! - optimizer state: `4·k·P_t` with `k` = 2 for Adam/AdamW (first and second moments),
//!   1 for SGD with momentum, 0 for plain SGD. Adam in float32 is thus `4 + 4 + 8 = 16` bytes
//!   per parameter, and `2 + 2 + 4 + 8 = 16` in mixed precision, as in Rajbhandari et al. 2020
//!   ("ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", section 3.1);
//!   measured on kiln (counting allocator): 16.4 bytes per parameter at the peak of an Adam
//!   step, 8.0 for plain SGD;
//! - activations: `c·b·Σ kept values per example` over layers (see `activations.rs` for what
//!   each layer keeps and where the constants come from), plus the input batch (float32);
//! - backward workspace: `2·c·b·(largest tensor per example)`: the gradients in flight while
//!   the backward pass walks the graph (measured: 2× the largest layer output for
//!   convolutions, 2× the attention scores for attention);
//! - on the CPU, the host side of `kiln train` (see [`host::input_bytes`]).
//!
//! The sum is the peak of a training step: gradients and the optimizer's moments stay
//! allocated between steps, and the peak comes at the end of the forward pass.

mod activations;

pub mod host;
mod precision;
mod report;
mod resolve;
mod search;

pub use crate::config::bytes::{format_bytes, parse_bytes};
pub use activations::LayerActivations;
pub use host::{HostData, mem_available, vm_hwm, vm_rss};
pub use precision::Precision;
pub use report::{report, stage_report};
pub use resolve::{DEFAULT_BUDGET_FRACTION, resolve_batch_size};
pub use search::{AutoBatch, GPU_SIZES_GB, auto_batch_size, max_batch_size};

use crate::compile::OptimizerSpec;
use crate::device::DeviceKind;
use crate::model::ModelSpec;

/// One layer's share of the estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerEstimate {
    /// The layer's name.
    pub name: String,
    /// Its Keras class.
    pub class: &'static str,
    /// Trainable parameters.
    pub trainable: u64,
    /// Non-trainable parameters (BatchNormalization's moving statistics).
    pub non_trainable: u64,
    /// Bytes of weights (float32 variables and the compute copy).
    pub weight_bytes: u64,
    /// Bytes of gradients.
    pub gradient_bytes: u64,
    /// Bytes of optimizer state.
    pub optimizer_bytes: u64,
    /// Bytes of activations kept for backward at the batch size.
    pub activation_bytes: u64,
}

/// The memory a training step needs, per layer and in total.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Examples per step.
    pub batch_size: usize,
    /// The precision policy.
    pub precision: Precision,
    /// Optimizer slots per trainable parameter (2 Adam/AdamW, 1 SGD with momentum, 0 SGD).
    pub optimizer_slots: u64,
    /// Per layer, in the spec's order.
    pub layers: Vec<LayerEstimate>,
    /// Bytes of the input batch kept for backward (float32).
    pub input_bytes: u64,
    /// Bytes of the backward pass's gradients in flight.
    pub workspace_bytes: u64,
    /// Bytes of the dataset and input pipeline in host memory, when known (CPU runs with the
    /// `[data]` arrays form).
    pub host_bytes: Option<u64>,
}

/// `(slots, name)` of an optimizer's state.
pub fn optimizer_slots(optimizer: &OptimizerSpec) -> u64 {
    match optimizer {
        OptimizerSpec::Sgd { momentum, .. } => u64::from(*momentum != 0.0),
        OptimizerSpec::Adam { amsgrad, .. } | OptimizerSpec::AdamW { amsgrad, .. } => {
            2 + u64::from(*amsgrad)
        }
        OptimizerSpec::RmsProp {
            momentum, centered, ..
        } => 1 + u64::from(*momentum > 0.0) + u64::from(*centered),
        OptimizerSpec::Adagrad { .. } | OptimizerSpec::Lion { .. } => 1,
        OptimizerSpec::Adadelta { .. }
        | OptimizerSpec::Adamax { .. }
        | OptimizerSpec::Nadam { .. } => 2,
    }
}

/// Estimates the memory of training `spec` with `optimizer` at `batch_size` examples per step
/// in `precision` on a GPU (model side only; see [`Estimate::with_host`] for the CPU's data
/// side): Burn's operations throughout. [`estimate_on`] for the CPU, where some layers keep
/// less.
pub fn estimate(
    spec: &ModelSpec,
    optimizer: &OptimizerSpec,
    batch_size: usize,
    precision: Precision,
) -> Estimate {
    estimate_on(DeviceKind::Gpu, spec, optimizer, batch_size, precision)
}

/// [`estimate`] on `device`: on the CPU, kiln's fused attention and LayerNormalization keep
/// less for backward than Burn's operations do on a GPU.
pub fn estimate_on(
    device: DeviceKind,
    spec: &ModelSpec,
    optimizer: &OptimizerSpec,
    batch_size: usize,
    precision: Precision,
) -> Estimate {
    let b = batch_size as f64;
    let c = precision.compute_bytes(device);
    let slots = optimizer_slots(optimizer);
    let (acts, input_values) = activations::per_layer(spec, device);
    let mut largest: f64 = spec
        .inputs()
        .iter()
        .map(|(_, s)| s.iter().product::<usize>() as f64)
        .fold(0.0, f64::max);
    let layers = spec
        .layers()
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let (t, n) = spec.layer_params(i);
            let (t, n) = (t as u64, n as u64);
            largest = largest.max(acts[i].largest);
            LayerEstimate {
                name: l.name.clone(),
                class: l.kind.class_name(),
                trainable: t,
                non_trainable: n,
                weight_bytes: 4 * (t + n) + precision.weight_copy_bytes(device) * t,
                gradient_bytes: c * t,
                optimizer_bytes: 4 * slots * t,
                activation_bytes: (acts[i].kept * b * c as f64).round() as u64,
            }
        })
        .collect();
    Estimate {
        batch_size,
        precision,
        optimizer_slots: slots,
        layers,
        input_bytes: (input_values * b * 4.0) as u64,
        workspace_bytes: (2.0 * largest * b * c as f64) as u64,
        host_bytes: None,
    }
}

impl Estimate {
    /// Adds the CPU's host side: the dataset and pipeline buffers of `cfg` with `data`.
    pub fn with_host(mut self, data: &HostData, cfg: &crate::config::RunConfig) -> Estimate {
        self.host_bytes = Some(host::input_bytes(data, cfg, self.batch_size));
        self
    }

    /// All parameters.
    pub fn params(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| l.trainable + l.non_trainable)
            .sum()
    }

    /// Bytes of weights.
    pub fn weight_bytes(&self) -> u64 {
        saturating_sum(self.layers.iter().map(|l| l.weight_bytes))
    }

    /// Bytes of gradients.
    pub fn gradient_bytes(&self) -> u64 {
        saturating_sum(self.layers.iter().map(|l| l.gradient_bytes))
    }

    /// Bytes of optimizer state.
    pub fn optimizer_bytes(&self) -> u64 {
        saturating_sum(self.layers.iter().map(|l| l.optimizer_bytes))
    }

    /// Bytes of activations kept for backward (layers and input batch).
    pub fn activation_bytes(&self) -> u64 {
        saturating_sum(self.layers.iter().map(|l| l.activation_bytes))
            .saturating_add(self.input_bytes)
    }

    /// What the device holds at the peak of a step: weights, gradients, optimizer state,
    /// activations and the backward workspace. Sums saturate at `u64::MAX` (an absurd layer,
    /// such as a pooling window of 2^31 that pads its input, must read as too large, never
    /// wrap around to a small number).
    pub fn device_bytes(&self) -> u64 {
        saturating_sum([
            self.weight_bytes(),
            self.gradient_bytes(),
            self.optimizer_bytes(),
            self.activation_bytes(),
            self.workspace_bytes,
        ])
    }

    /// [`Estimate::device_bytes`] plus the host side when known: the peak of a CPU run.
    pub fn total_bytes(&self) -> u64 {
        self.device_bytes()
            .saturating_add(self.host_bytes.unwrap_or(0))
    }
}

/// `Σ values`, saturating at `u64::MAX`.
fn saturating_sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}

#[cfg(test)]
mod preprocessing_tests;
#[cfg(test)]
mod tests;
