//! Where a training step's time goes (`kiln train --profile`).
//!
//! Burn's CPU backend executes each operation when it is called, so wall-clock time between
//! stages is the stages' cost. On a GPU, operations queue asynchronously and the stage times
//! mostly land where the step first reads a value back (the metrics).

use std::time::Duration;

use serde::Serialize;

/// Seconds spent per stage of the training step, summed over all profiled steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepProfile {
    /// Steps measured.
    pub steps: u64,
    /// Host reads of the steps' losses and outputs (each drains the device's queue on a GPU):
    /// one per step, or one per `steps_per_execution` steps.
    pub host_reads: u64,
    /// Waiting for the input pipeline to deliver the next batch.
    pub input_wait_s: f64,
    /// Converting the host batch into device tensors (layout change, copies).
    pub to_device_s: f64,
    /// The forward pass, all layers.
    pub forward_s: f64,
    /// The loss.
    pub loss_s: f64,
    /// Backpropagation.
    pub backward_s: f64,
    /// The optimizer update (and BatchNormalization's moving averages).
    pub optimizer_s: f64,
    /// Reading the loss and outputs back and computing the metrics.
    pub metrics_s: f64,
    /// A custom train step as a whole (its forward passes, losses, backward passes and
    /// updates; `crate::step::custom`).
    pub custom_step_s: f64,
    /// Forward time per layer, `(layer name, seconds)`, in model order.
    pub forward_per_layer_s: Vec<(String, f64)>,
}

impl StepProfile {
    /// Adds `d` to the per-layer forward time of layer `i` named `name`.
    pub fn add_layer(&mut self, i: usize, name: &str, d: Duration) {
        if self.forward_per_layer_s.len() <= i {
            self.forward_per_layer_s.resize(i + 1, (String::new(), 0.0));
        }
        let slot = &mut self.forward_per_layer_s[i];
        if slot.0.is_empty() {
            slot.0 = name.to_string();
        }
        slot.1 += d.as_secs_f64();
    }

    /// Total step time in seconds.
    pub fn total_s(&self) -> f64 {
        self.input_wait_s
            + self.to_device_s
            + self.forward_s
            + self.loss_s
            + self.backward_s
            + self.optimizer_s
            + self.metrics_s
            + self.custom_step_s
    }

    /// A table of milliseconds per step and shares of the step, per stage and per layer.
    pub fn table(&self) -> String {
        let n = self.steps.max(1) as f64;
        let total = self.total_s().max(1e-12);
        let mut out = format!(
            "Step profile over {} steps (ms per step, share of the step):\n",
            self.steps
        );
        let stages = [
            ("input wait", self.input_wait_s),
            ("host to device", self.to_device_s),
            ("forward", self.forward_s),
            ("loss", self.loss_s),
            ("backward", self.backward_s),
            ("optimizer", self.optimizer_s),
            ("metrics (reads)", self.metrics_s),
            ("custom train step", self.custom_step_s),
        ];
        for (name, s) in stages {
            if name == "custom train step" && s == 0.0 {
                continue;
            }
            out += &format!(
                "  {name:<22} {:>9.2} ms {:>5.1}%\n",
                1000.0 * s / n,
                100.0 * s / total
            );
        }
        out += &format!("  {:<22} {:>9.2} ms\n", "total", 1000.0 * total / n);
        out += &format!(
            "  host reads of the loss and outputs: {} over {} steps\n",
            self.host_reads, self.steps
        );
        out += "  forward by layer:\n";
        for (name, s) in &self.forward_per_layer_s {
            out += &format!("    {name:<20} {:>9.2} ms\n", 1000.0 * s / n);
        }
        out
    }
}
