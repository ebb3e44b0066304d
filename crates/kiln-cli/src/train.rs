//! `kiln train`: load a run config, apply the command line's overrides, start MPI for
//! `multi_worker_mirrored`, resolve `batch_size = "auto"`, and train (kiln::run::train_with),
//! printing the summary, progress and results on the chief.

use std::path::PathBuf;

use clap::Args;
use kiln::run::{self, Overrides};
use kiln::{KilnError, RunConfig, device};

use crate::{DeviceArg, progress, stop_on_signals};

/// The flags of `kiln train`.
#[derive(Args)]
pub struct TrainArgs {
    /// A TOML run config (see examples/fashion-mnist/).
    pub config: PathBuf,
    /// Override fit.epochs.
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Override fit.batch_size: a number, or auto (the largest that fits the memory
    /// budget, from the estimate).
    #[arg(long)]
    pub batch_size: Option<String>,
    /// cpu, or gpu (the GPU backend compiled in).
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: DeviceArg,
    /// Where to save the run (default: runs/<name>).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Override the seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Override data.data_dir.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Time each stage of the training step and each layer; print the last epoch's table.
    #[arg(long)]
    pub profile: bool,
    /// Start over: ignore and remove the run directory's checkpoints instead of resuming.
    #[arg(long)]
    pub no_resume: bool,
    /// Resume even though the data or its pipeline changed since the checkpoint.
    #[arg(long)]
    pub allow_changed_data: bool,
    /// Override precision: float32, mixed_float16 or mixed_bfloat16 (also 32, 16-mixed,
    /// bf16-mixed).
    #[arg(long)]
    pub precision: Option<String>,
    /// Override distribute.strategy: one_device, mirrored (with [distribute] num_replicas
    /// or devices), multi_worker_mirrored (under `mpirun -np N`), pipeline (model
    /// parallelism: [distribute] stages, num_micro_batches); fit.batch_size is the global
    /// batch.
    #[arg(long)]
    pub strategy: Option<String>,
    /// Override distribute.num_replicas (implies --strategy mirrored over one_device; refused
    /// with multi_worker_mirrored, whose replicas are mpirun's processes).
    #[arg(long)]
    pub num_replicas: Option<usize>,
}

/// Runs `kiln train`.
///
/// # Errors
/// Configuration errors (exit 2) and training errors (exit 1), as kiln's.
pub fn run(args: TrainArgs) -> anyhow::Result<()> {
    let TrainArgs {
        config,
        epochs,
        batch_size,
        device,
        run_dir,
        seed,
        data_dir,
        profile,
        no_resume,
        allow_changed_data,
        precision,
        strategy,
        num_replicas,
    } = args;
    let mut cfg = RunConfig::load(&config)?;
    if let Some(s) = strategy {
        cfg.distribute.strategy = s.parse()?;
    }
    if let Some(n) = num_replicas {
        // Implies mirrored only over the default; with another strategy (from
        // --strategy or the config) the check below refuses the combination.
        if matches!(
            cfg.distribute.strategy,
            kiln::config::StrategyKind::OneDevice
        ) {
            cfg.distribute.strategy = kiln::config::StrategyKind::Mirrored;
        }
        cfg.distribute.num_replicas = Some(n);
        cfg.distribute.devices.clear();
    }
    // The [distribute] keys against the strategy the flags chose, and a pipeline's stages
    // against the model, before anything starts.
    cfg.distribute
        .validate()
        .and_then(|()| cfg.distribute.check_model(&cfg.model))
        .map_err(|e| e.in_file(&config))?;
    // multi_worker_mirrored: MPI starts here; only rank 0 prints and writes the run.
    let worker = match cfg.distribute.strategy {
        kiln::config::StrategyKind::MultiWorkerMirrored => Some(kiln::distribute::world::init()?),
        _ => None,
    };
    let chief = worker.is_none_or(|w| w.rank == 0);
    let precision = precision
        .map(|p| kiln::Precision::parse(&p, "--precision"))
        .transpose()?;
    let auto = batch_size.as_deref() == Some("auto");
    let batch_size = match batch_size.filter(|_| !auto) {
        Some(b) => Some(b.parse::<usize>().ok().ok_or_else(|| {
            KilnError::config(
                "--batch-size",
                format!("\"{b}\" is not a positive integer or auto"),
            )
        })?),
        None => None,
    };
    cfg.apply(&Overrides {
        epochs,
        batch_size,
        seed,
        data_dir,
        precision,
    })?;
    if auto {
        cfg.fit.batch_size = kiln::config::AUTO_BATCH_SIZE;
    }
    let run_dir = run_dir.unwrap_or_else(|| cfg.default_run_dir());
    // A resumed "auto" run keeps the batch size its first start chose.
    if cfg.fit.batch_size == kiln::config::AUTO_BATCH_SIZE
        && !no_resume
        && let Ok(saved) = RunConfig::load(&run_dir.join("config.toml"))
        && saved.fit.batch_size != kiln::config::AUTO_BATCH_SIZE
    {
        println!(
            "batch_size = \"auto\": resuming with the run's batch size {}",
            saved.fit.batch_size
        );
        cfg.apply(&Overrides {
            batch_size: Some(saved.fit.batch_size),
            ..Default::default()
        })?;
    }
    // batch_size = "auto" is chosen here; a CPU run that cannot fit is refused here.
    let run_precision = cfg.model.precision();
    if let Some(chosen) =
        kiln::estimate::resolve_batch_size(&mut cfg, device.into(), run_precision, None)?
        && chief
    {
        println!("{}", chosen.reason);
    }
    let dev = device::resolve(device.into())?;
    let mut progress = progress::Progress::new();
    // The config's [[callbacks]] run after the progress display, in their order.
    // Other workers run the same callbacks (EarlyStopping and the like decide alike on
    // every worker) with their files in a scratch directory.
    let callback_dir = match chief {
        true => run_dir.clone(),
        false => kiln::distribute::world::worker_scratch_dir(),
    };
    let mut from_config = cfg.build_callbacks(&callback_dir)?;
    let mut callbacks: Vec<&mut dyn kiln::Callback> = Vec::new();
    if chief {
        callbacks.push(&mut progress);
    }
    callbacks.extend(
        from_config
            .iter_mut()
            .map(|c| c.as_mut() as &mut dyn kiln::Callback),
    );
    let opts = run::TrainOptions {
        resume: !no_resume,
        allow_changed_data,
        interrupt: Some(stop_on_signals(
            worker.map(|w| (w, cfg.backup.dir_in(&run_dir))),
        )?),
        ..Default::default()
    };
    let report = run::train_with(&cfg, &run_dir, dev, &opts, &mut callbacks, |m| {
        if chief {
            print!("{}", m.summary());
        }
        m.set_profiling(profile);
    })
    .map_err(|e| e.in_file(&config))?;
    if !chief {
        return Ok(());
    }
    if let Some(p) = &report.history.profile {
        print!("{}", p.table());
    }
    // Only the epochs this process trained (a resumed run's history holds the earlier
    // ones too).
    let h = &report.history;
    let first = report.epochs_before.min(h.epoch.len());
    let epochs_run = h.epoch.len() - first;
    let total: f64 = h.epoch_time_s.iter().skip(first).sum();
    let sps = h.samples_per_second.iter().skip(first).sum::<f64>() / epochs_run.max(1) as f64;
    let plural = if epochs_run == 1 { "" } else { "s" };
    if epochs_run > 0 {
        println!(
            "Trained {epochs_run} epoch{plural} in {total:.1}s ({sps:.0} samples/s on \
             average)."
        );
    }
    if report.test.0.is_empty() {
        println!("Test: no [data.test] table, not evaluated");
    } else {
        println!("Test: {}", progress::format_logs(&report.test));
    }
    let acc = [
        "accuracy",
        "acc",
        "sparse_categorical_accuracy",
        "categorical_accuracy",
    ]
    .iter()
    .find_map(|k| report.test.get(k));
    if let Some(acc) = acc {
        println!("Test accuracy: {acc:.4}");
    }
    println!("Run saved to {}", report.run_dir.display());
    Ok(())
}
