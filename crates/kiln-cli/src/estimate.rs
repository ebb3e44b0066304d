//! `kiln estimate`: the memory a run needs (kiln::estimate; docs/estimate.md), or with
//! `--workers` / `--bandwidth` the data-parallel scaling on paper (see [`crate::scaling`]).

use std::path::PathBuf;

use clap::Args;
use kiln::run::Overrides;
use kiln::{KilnError, RunConfig};

use crate::scaling::{self, ScalingArgs};

/// The flags of `kiln estimate`.
#[derive(Args, Debug, Clone)]
pub struct EstimateArgs {
    /// A TOML run config (optional for the scaling projection, which then uses its presets).
    config: Option<PathBuf>,
    /// Batch size, 1 or more (default: fit.batch_size).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    batch_size: Option<usize>,
    /// float32, mixed_float16 or mixed_bfloat16 (Lightning's 32-true, 16-mixed, bf16-mixed
    /// accepted; default: the config's `precision`).
    #[arg(long)]
    precision: Option<String>,
    /// Memory to fit, e.g. 16GiB or 12GB: prints the largest batch that fits it.
    #[arg(long)]
    memory: Option<String>,
    /// Override data.data_dir (the dataset's size is added when its files are found).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    scaling: ScalingArgs,
}

/// Runs `kiln estimate` with `args`.
pub fn run(args: EstimateArgs) -> anyhow::Result<()> {
    if scaling::requested(&args.scaling) {
        return scaling::run(args.config.as_deref(), &args.scaling);
    }
    let Some(config) = args.config else {
        return Err(KilnError::config(
            "CONFIG",
            "the memory estimate needs a run config (kiln estimate CONFIG); for the scaling \
             projection of the presets pass --workers N or --bandwidth B",
        )
        .into());
    };
    let mut cfg = RunConfig::load(&config)?;
    cfg.apply(&Overrides {
        data_dir: args.data_dir,
        ..Default::default()
    })?;
    let precision = match args.precision {
        Some(p) => kiln::Precision::parse(&p, "--precision")?,
        None => cfg.model.precision(),
    };
    let memory = args
        .memory
        .map(|m| kiln::estimate::parse_bytes(&m, "--memory"))
        .transpose()?;
    let host = kiln::estimate::host::host_data(&cfg);
    let at = |b: usize| {
        let b = kiln::estimate::host::effective_batch(host.as_ref(), &cfg, b);
        let e = kiln::estimate::estimate(&cfg.model, &cfg.compile.optimizer, b, precision);
        match &host {
            Some(h) => e.with_host(h, &cfg),
            None => e,
        }
    };
    let batch = match args.batch_size {
        Some(b) => b,
        // "auto": the batch `kiln train` would choose on this machine's CPU.
        None if cfg.fit.batch_size == kiln::config::AUTO_BATCH_SIZE => {
            let mut resolved = cfg.clone();
            kiln::estimate::resolve_batch_size(
                &mut resolved,
                kiln::DeviceKind::Cpu,
                precision,
                None,
            )?;
            resolved.fit.batch_size
        }
        // The training pipeline's own batch_size, as `kiln train` batches it.
        None => cfg
            .data
            .train
            .as_ref()
            .and_then(|p| p.batch_size)
            .unwrap_or(cfg.fit.batch_size),
    };
    let e = at(batch);
    print!("{}", kiln::estimate::report(&e, memory, &at));
    if let Some(stages) = cfg
        .distribute
        .pipeline_plan(&cfg.model)
        .map_err(|e| e.in_file(&config))?
    {
        print!("{}", kiln::estimate::stage_report(&e, &stages));
    }
    Ok(())
}
