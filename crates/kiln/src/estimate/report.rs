//! The estimate as the table `kiln estimate` prints.

use super::search::{GPU_SIZES_GB, gpu_usable_bytes, max_batch_size};
use super::{Estimate, format_bytes};
use crate::model::thousands;

/// Formats `e` as a per-layer table, the totals, the largest batch for `memory` bytes (when
/// given; computed with `at(batch)`, the estimate at another batch size) and the verdict per
/// common GPU size (device memory: weights, gradients, optimizer, activations, workspace).
pub fn report(e: &Estimate, memory: Option<u64>, at: &dyn Fn(usize) -> Estimate) -> String {
    let mut out = format!(
        "Memory estimate: batch size {}, precision {}, optimizer state {} per parameter\n",
        e.batch_size,
        e.precision.name(),
        e.optimizer_slots
    );
    let header = [
        "Layer (type)",
        "Params",
        "Weights",
        "Gradients",
        "Optimizer",
        "Activations",
    ];
    let mut rows: Vec<[String; 6]> = e
        .layers
        .iter()
        .map(|l| {
            [
                format!("{} ({})", l.name, l.class),
                thousands((l.trainable + l.non_trainable) as usize),
                format_bytes(l.weight_bytes),
                format_bytes(l.gradient_bytes),
                format_bytes(l.optimizer_bytes),
                format_bytes(l.activation_bytes),
            ]
        })
        .collect();
    rows.push([
        "Total".into(),
        thousands(e.params() as usize),
        format_bytes(e.weight_bytes()),
        format_bytes(e.gradient_bytes()),
        format_bytes(e.optimizer_bytes()),
        format_bytes(e.activation_bytes()),
    ]);
    let mut w = header.map(str::len);
    for r in &rows {
        for (k, cell) in r.iter().enumerate() {
            w[k] = w[k].max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 6]| {
        let mut s = format!("{:<a$}", cells[0], a = w[0]);
        for k in 1..6 {
            s += &format!("  {:>a$}", cells[k], a = w[k]);
        }
        s + "\n"
    };
    out += &line(header);
    let total = rows.len() - 1;
    for (i, r) in rows.iter().enumerate() {
        if i == total {
            out += &"-".repeat(w.iter().sum::<usize>() + 10);
            out.push('\n');
        }
        out += &line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]);
    }
    out += &format!(
        "Input batch kept for backward: {}; backward workspace: {}\n",
        format_bytes(e.input_bytes),
        format_bytes(e.workspace_bytes)
    );
    out += &format!(
        "Training step peak (device): {}\n",
        format_bytes(e.device_bytes())
    );
    if let Some(h) = e.host_bytes {
        out += &format!(
            "Dataset and input pipeline in host memory: {}; CPU run total: {}\n",
            format_bytes(h),
            format_bytes(e.total_bytes())
        );
    }
    if let Some(m) = memory {
        let host = e.host_bytes.is_some();
        match max_batch_size(m, 1 << 24, |b| at(b).total_bytes()) {
            Some(b) => {
                out += &format!(
                    "Largest batch in {}{}: {b}\n",
                    format_bytes(m),
                    if host { " (with the host data)" } else { "" }
                )
            }
            None => {
                out += &format!(
                    "Largest batch in {}: none, batch 1 needs {}\n",
                    format_bytes(m),
                    format_bytes(at(1).total_bytes())
                )
            }
        }
    }
    out += &format!(
        "GPUs (usable memory {:.0}% of each): ",
        super::search::GPU_USABLE * 100.0
    );
    let verdicts: Vec<String> = GPU_SIZES_GB
        .iter()
        .map(|&gb| {
            let usable = gpu_usable_bytes(gb);
            let fits = e.device_bytes() <= usable;
            let best = max_batch_size(usable, 1 << 24, |b| at(b).device_bytes());
            format!(
                "{gb} GB {} (max batch {})",
                if fits { "fits" } else { "does not fit" },
                best.map_or("none".into(), |b| b.to_string())
            )
        })
        .collect();
    out += &verdicts.join("; ");
    out.push('\n');
    out
}

/// Per pipeline stage (`[distribute] strategy = "pipeline"`, stages as layer ranges of
/// `e.layers`): what each stage's device holds — its layers' weights, gradients, optimizer
/// state and kept activations (GPipe keeps every micro-batch's activations for the backward
/// pass, so a stage keeps its layers' activations of the whole batch), the input batch on the
/// first stage — plus the whole model's backward workspace as an upper bound of the stage's.
pub fn stage_report(e: &Estimate, stages: &[std::ops::Range<usize>]) -> String {
    let mut out = String::from("Pipeline stages (device memory per stage):\n");
    for (s, r) in stages.iter().enumerate() {
        let layers = &e.layers[r.clone()];
        let params: u64 = layers.iter().map(|l| l.trainable + l.non_trainable).sum();
        let state: u64 = layers
            .iter()
            .map(|l| l.weight_bytes + l.gradient_bytes + l.optimizer_bytes)
            .sum();
        let input = if s == 0 { e.input_bytes } else { 0 };
        let acts: u64 = layers.iter().map(|l| l.activation_bytes).sum::<u64>() + input;
        out.push_str(&format!(
            "  stage {s}: {} … {} ({} layer{}), {} parameters: weights, gradients and optimizer \
             {}, activations {}; peak at most {}\n",
            layers[0].name,
            layers[layers.len() - 1].name,
            layers.len(),
            if layers.len() == 1 { "" } else { "s" },
            thousands(params as usize),
            format_bytes(state),
            format_bytes(acts),
            format_bytes(state.saturating_add(acts).saturating_add(e.workspace_bytes)),
        ));
    }
    out
}
