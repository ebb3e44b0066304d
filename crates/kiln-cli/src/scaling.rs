//! `kiln estimate --workers N --bandwidth 100Gbit`: data-parallel scaling on paper
//! (kiln::distribute::cost_model; docs/distribute.md).

use std::path::Path;

use clap::Args;
use kiln::distribute::cost_model::{self, Workload};
use kiln::{KilnError, RunConfig};

/// The scaling flags of `kiln estimate`.
#[derive(Args, Debug, Clone)]
pub struct ScalingArgs {
    /// Project data parallelism up to N workers (powers of two up to N, and N; default 64).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Link bandwidth per worker, e.g. 100Gbit, 25Gb/s, 12.5GB/s (default: 25, 100 and 400 Gbit).
    #[arg(long)]
    pub bandwidth: Option<String>,
    /// Latency of one all-reduce message, microseconds.
    #[arg(long, default_value_t = 10.0)]
    pub latency_us: f64,
    /// Without CONFIG: a preset workload (fashion-cnn, resnet50, bert-large; default all).
    #[arg(long)]
    pub model: Option<String>,
    /// One worker's training throughput, examples/s (needed with CONFIG; overrides a preset's).
    #[arg(long)]
    pub samples_per_second: Option<f64>,
    /// Examples per worker per step (default: CONFIG's fit.batch_size, or the preset's).
    #[arg(long)]
    pub batch_per_worker: Option<usize>,
}

fn bad(flag: &str, message: impl Into<String>) -> anyhow::Error {
    KilnError::config(flag, message).into()
}

/// Whether the scaling projection was asked for (`--workers` or `--bandwidth`).
pub fn requested(args: &ScalingArgs) -> bool {
    args.workers.is_some() || args.bandwidth.is_some()
}

/// Prints the projection tables for `config` (its model's trainable parameters and
/// `fit.batch_size`) or the presets.
pub fn run(config: Option<&Path>, args: &ScalingArgs) -> anyhow::Result<()> {
    let workers = args.workers.unwrap_or(64);
    if workers == 0 {
        return Err(bad("--workers", "must be at least 1"));
    }
    if !(args.latency_us.is_finite() && args.latency_us >= 0.0) {
        return Err(bad("--latency-us", "must be a number >= 0"));
    }
    let bandwidths = match &args.bandwidth {
        Some(b) => vec![cost_model::parse_bandwidth(b, "--bandwidth")?],
        None => vec![25e9, 100e9, 400e9],
    };
    let mut workloads = match config {
        Some(path) => {
            let cfg = RunConfig::load(path)?;
            let Some(sps) = args.samples_per_second else {
                return Err(bad(
                    "--samples-per-second",
                    "is needed with a config: one worker's training throughput (`kiln train` \
                     prints it; history.json has samples_per_second)",
                ));
            };
            vec![Workload {
                name: cfg.name.clone(),
                parameters: cfg.model.param_count().0 as u64,
                bytes_per_parameter: 4.0,
                batch_per_worker: cfg.fit.batch_size,
                samples_per_second: sps,
                sync_batch_norm_channels: if cfg.distribute.sync_batch_norm == Some(true) {
                    cfg.model.batch_norm_channels()
                } else {
                    Vec::new()
                },
            }]
        }
        None => {
            let all = cost_model::presets();
            match &args.model {
                None => all,
                Some(name) => {
                    let names: Vec<String> = all.iter().map(|w| w.name.clone()).collect();
                    let found: Vec<Workload> =
                        all.into_iter().filter(|w| &w.name == name).collect();
                    if found.is_empty() {
                        return Err(bad(
                            "--model",
                            format!("unknown preset \"{name}\"; allowed: {}", names.join(", ")),
                        ));
                    }
                    found
                }
            }
        }
    };
    for w in &mut workloads {
        if let Some(sps) = args.samples_per_second {
            w.samples_per_second = sps;
        }
        if let Some(b) = args.batch_per_worker {
            w.batch_per_worker = b;
        }
        if !(w.samples_per_second.is_finite() && w.samples_per_second > 0.0) {
            return Err(bad("--samples-per-second", "must be a number > 0"));
        }
        if w.batch_per_worker == 0 {
            return Err(bad("--batch-per-worker", "must be at least 1"));
        }
    }
    println!(
        "Ring all-reduce, no overlap with compute: step = compute + 2(N-1)·{}µs + 2(N-1)/N × \
         gradient bytes / bandwidth (docs/distribute.md)",
        args.latency_us
    );
    let counts = cost_model::worker_counts(workers);
    for w in &workloads {
        if !w.sync_batch_norm_channels.is_empty() {
            println!(
                "sync_batch_norm: + 2 all-reduces per step for each of the {} \
                 BatchNormalization layers ((2 × channels + 1) floats; recursive doubling, \
                 ⌈log2 N⌉ messages each)",
                w.sync_batch_norm_channels.len()
            );
        }
        println!();
        print!(
            "{}",
            cost_model::table(w, &counts, &bandwidths, args.latency_us * 1e-6)
        );
    }
    Ok(())
}
