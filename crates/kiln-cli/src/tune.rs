//! `kiln tune`: the arguments and the output; the study itself is kiln-tune's.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use kiln_tune::runner::Runner;
use kiln_tune::{StudyOptions, TuneConfig, TuneError};

/// `kiln tune CONFIG [--max-trials N] [--study-dir DIR] [--storage URL] [--summary]`.
#[derive(clap::Args)]
pub struct TuneArgs {
    /// A tune config: base run config, [tuner], [overrides], [[hyperparameters]]
    /// (docs/tuning.md, examples/fashion-mnist/tune-mlp.toml).
    config: PathBuf,
    /// Override [tuner] max_trials (a finished study continues up to the new number).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_trials: Option<u64>,
    /// The study directory: trial run directories, TensorBoard logs, best.toml and the SQLite
    /// database (default runs/tune/<config file stem>).
    #[arg(long)]
    study_dir: Option<PathBuf>,
    /// The study database: postgresql://user:password@host/db (several workers share it), or
    /// an SQLite file (default: $KILN_TUNE_STORAGE if set, else <study-dir>/study.db).
    #[arg(long)]
    storage: Option<String>,
    /// Print the study's best trials and exit, without running trials.
    #[arg(long)]
    summary: bool,
    /// How many trials --summary lists.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    top: u64,
    /// Arguments for each trial's `kiln train` (e.g. --train-arg=--device --train-arg=gpu).
    #[arg(long = "train-arg", allow_hyphen_values = true)]
    train_args: Vec<String>,
}

/// Runs (or resumes) the study, or prints its summary.
pub fn run(args: TuneArgs) -> anyhow::Result<()> {
    let cfg = TuneConfig::load(&args.config)?;
    let study_dir = args
        .study_dir
        .unwrap_or_else(|| kiln_tune::study::default_study_dir(&args.config));
    let kiln = std::env::current_exe()
        .map_err(|e| TuneError::Study(format!("cannot find the kiln binary for trials: {e}")))?;
    let stop = Arc::new(AtomicI32::new(0));
    let asked = Arc::new(AtomicBool::new(false));
    let install =
        |e: std::io::Error| TuneError::Study(format!("cannot install signal handlers: {e}"));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // The first signal stops the study cleanly (the running trial checkpoints and is put
        // back for the resume); a second one ends the process at once.
        signal_hook::flag::register_conditional_shutdown(signal, 128 + signal, asked.clone())
            .map_err(install)?;
        signal_hook::flag::register(signal, asked.clone()).map_err(install)?;
        let stop = stop.clone();
        // SAFETY: the action is one atomic store, which is async-signal-safe.
        unsafe {
            signal_hook::low_level::register(signal, move || stop.store(signal, Ordering::SeqCst))
        }
        .map_err(install)?;
    }
    let mut runner = Runner::new(kiln);
    runner.train_args = args.train_args;
    let opts = StudyOptions {
        study_dir,
        // From the environment, a password stays out of the process list.
        storage: args.storage.or_else(|| {
            std::env::var("KILN_TUNE_STORAGE")
                .ok()
                .filter(|s| !s.is_empty())
        }),
        max_trials: args.max_trials,
        runner,
        check_config: Some(Box::new(|text: &str| {
            kiln::RunConfig::from_toml_str(text)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })),
        stop: Some(stop),
    };
    // The fixed part of every trial's config is checked before anything runs.
    let fixed = cfg.fixed_text()?;
    // Each override and each hyperparameter key at its default, naming the culprit.
    cfg.check_up_front(&|text: &str| {
        kiln::RunConfig::from_toml_str(text)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })?;
    kiln::RunConfig::from_toml_str(&fixed).map_err(|e| {
        TuneError::Config(format!(
            "{}: the base config with [overrides] is not a valid run config: {e}",
            args.config.display()
        ))
    })?;
    if args.summary {
        if opts.storage.is_none() && !opts.study_dir.join("study.db").is_file() {
            println!(
                "No study in {} yet: run kiln tune {} to start it",
                opts.study_dir.display(),
                args.config.display()
            );
            return Ok(());
        }
        let mut storage = kiln_tune::study::open_storage(&cfg, &opts)?;
        let trials = storage.trials()?;
        print!(
            "{}",
            kiln_tune::report::summary(&trials, &cfg, args.top as usize, storage.location())
        );
        let best = opts.study_dir.join("best.toml");
        if best.is_file() {
            println!("Best configuration: {}", best.display());
        }
        return Ok(());
    }
    let report = kiln_tune::study::run(&cfg, &opts, &mut |line| println!("{line}"))?;
    let complete = report
        .trials
        .iter()
        .filter(|t| t.record.state == kiln_tune::TrialState::Complete)
        .count();
    match report
        .best
        .and_then(|n| report.trials.iter().find(|t| t.record.number == n))
    {
        Some(best) => println!(
            "Study done: {} trial{} ({complete} complete). Best: trial {}, {} = {:.4} ({}). Its \
             config: {}",
            report.trials.len(),
            if report.trials.len() == 1 { "" } else { "s" },
            best.record.number,
            cfg.objective.name,
            best.record.value.unwrap_or(f64::NAN),
            kiln_tune::report::format_params(&best.record.plan.params),
            opts.study_dir.join("best.toml").display()
        ),
        None => {
            let n = report.trials.len();
            return Err(TuneError::Study(format!(
                "Study done: {n} trial{}, none complete. Each trial's error is in its \
                 train.log under {}",
                if n == 1 { "" } else { "s" },
                opts.study_dir.join("trials").display()
            ))
            .into());
        }
    }
    Ok(())
}
