//! `kiln`: train, evaluate and predict with Keras-style configs.
//!
//! The whole command is this library's [`main`], so that a program can register its own
//! layers, losses and metrics and then run the same command (its own `kiln` binary):
//!
//! ```no_run
//! # use std::process::ExitCode;
//! fn main() -> ExitCode {
//!     // kiln::model::register_layer::<MyLayer>().expect("one registration per name");
//!     kiln_cli::main()
//! }
//! ```
//!
//! Exit codes: 0 success, 2 usage or configuration error (also: a run directory another process
//! is writing, checkpoints none of which can resume), 1 runtime error, 128 + N after signal N.

mod deploy;
mod estimate;
mod progress;
mod scaling;
mod train;
mod tune;
mod workers;

// Training allocates and frees tensors of many megabytes every step; glibc's allocator hands
// them back to the OS and faults them in again, mimalloc keeps them (measured in bench/README.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use kiln::pipeline::Split;
use kiln::run::{self, Overrides};
use kiln::{DeviceKind, KilnError, RunConfig, device};

#[derive(Parser)]
#[command(
    name = "kiln",
    version,
    about = "Keras-style deep learning in one Rust binary"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum DeviceArg {
    Cpu,
    Gpu,
}

impl From<DeviceArg> for DeviceKind {
    fn from(d: DeviceArg) -> DeviceKind {
        match d {
            DeviceArg::Cpu => DeviceKind::Cpu,
            DeviceArg::Gpu => DeviceKind::Gpu,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Json,
    Csv,
}

#[derive(Subcommand)]
enum Command {
    /// Train the model described by CONFIG and save the run directory.
    Train(train::TrainArgs),
    /// Evaluate a trained run on its test split.
    Evaluate {
        /// A run directory written by `kiln train`.
        run_dir: PathBuf,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// Write the predicted class of every test example to this CSV file.
        #[arg(long)]
        save_predictions: Option<PathBuf>,
        /// Override data.data_dir.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// cpu or gpu.
        #[arg(long, value_enum, default_value = "cpu")]
        device: DeviceArg,
    },
    /// Class probabilities for the examples in INPUT (IDX or NPY).
    Predict {
        /// A run directory written by `kiln train`.
        run_dir: PathBuf,
        /// An IDX (gzip or raw) or NPY file of examples, told apart by their first bytes; `-`
        /// (or a pipe such as `<(zcat x.idx.gz)`) reads standard input.
        input: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value = "json")]
        format: Format,
        /// Write to this file instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// cpu or gpu.
        #[arg(long, value_enum, default_value = "cpu")]
        device: DeviceArg,
    },
    /// Estimate the memory of training CONFIG (per layer and in total, the largest batch for
    /// --memory, which common GPU sizes fit), or with --workers/--bandwidth the data-parallel
    /// scaling on paper (docs/estimate.md, docs/distribute.md).
    Estimate(estimate::EstimateArgs),
    /// Look into data files and input pipelines.
    #[command(subcommand)]
    Data(DataCommand),
    /// Export a trained run as a numbered version directory (ONNX, weights, signature).
    Export(deploy::ExportArgs),
    /// Import a Keras model file (.keras) as a run directory: config.toml and weights, ready
    /// for evaluate, predict, export, serve, and train to fine-tune (docs/keras-files.md).
    Import(deploy::ImportArgs),
    /// Serve exported models over TF Serving's REST API (until SIGTERM).
    Serve(deploy::ServeArgs),
    /// Tune hyperparameters: run (or resume) the study of a tune config, each trial a
    /// `kiln train` child process (docs/tuning.md).
    Tune(tune::TuneArgs),
}

#[derive(Subcommand)]
enum DataCommand {
    /// Print the first records of a TFRecord, CSV, IDX or NPY file and count them all
    /// (every TFRecord checksum is verified; a damaged record exits with code 1).
    Inspect {
        /// The file (`-` or a pipe reads standard input).
        file: PathBuf,
        /// Records to print.
        #[arg(short = 'n', long = "records", default_value_t = 5)]
        n: usize,
        /// tfrecord, tfrecord-gzip, tfrecord-zlib, csv, csv-gzip, csv-zlib, idx or npy
        /// (default: recognised from the name and contents).
        #[arg(long)]
        format: Option<String>,
    },
    /// Run a config's input pipeline alone (no model) and report its throughput.
    Bench {
        /// A TOML run config with [data.train] / [data.validation] / [data.test] tables.
        config: PathBuf,
        /// train, validation or test.
        #[arg(long, default_value = "train")]
        split: String,
        /// Batches to read per epoch (default: the whole epoch).
        #[arg(long)]
        steps: Option<u64>,
        /// Epochs to run, each a fresh iteration (the first includes warm-up).
        #[arg(long, default_value_t = 1)]
        epochs: usize,
        /// Override data.data_dir.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Print one JSON object per epoch (throughput and per-stage statistics) instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// mimalloc's `mi_option_purge_delay` (option 15 in mimalloc.h): milliseconds before freed
/// memory is handed back to the operating system.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps freed memory committed for the process's life (purge delay -1), as TensorFlow's and
/// PyTorch's caching allocators do: with mimalloc's default (1 s) a CNN training run on 2 cores
/// took 28,373 page faults in 60 steps, each zeroing a fresh (often 2 MiB) page, against 597
/// with this setting (bench/README.md). `kiln serve` keeps the default so an idle server gives
/// memory back.
fn retain_freed_memory() {
    // SAFETY: sets an integer option; mimalloc reads it at each purge decision.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}

/// Runs the `kiln` command with the process's arguments and returns its exit code (see the
/// module docs for the codes). Layers registered before the call
/// ([`kiln::model::register_layer`]) are known to every config it reads, in trials of
/// `kiln tune` too (they run this same binary).
pub fn main() -> ExitCode {
    // A closed stdout (`kiln tune ... | head`) ends the process quietly, as for other Unix
    // tools, instead of a panic in `println!`: Rust starts programs with SIGPIPE ignored.
    // A killed `kiln train` resumes from its last checkpoint; a killed `kiln tune` from its
    // study database.
    // SAFETY: restores the default disposition of one signal before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    // A bug must still end in one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        if kiln::fit::is_out_of_memory(info.payload()) {
            return; // the training step catches it, retries and says so (kiln::fit::oom)
        }
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("kiln: internal error{at}: {msg} (please report this bug)");
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // One line, like every other kiln error: clap's first line, and where to look.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            let first = kiln::error::escape_for_terminal(first);
            // The binary's own name: a custom-step binary built on kiln-cli is not `kiln`.
            let bin = std::env::args_os()
                .next()
                .and_then(|a| {
                    let p = std::path::PathBuf::from(a);
                    p.file_name().map(|f| f.to_string_lossy().into_owned())
                })
                .unwrap_or_else(|| "kiln".into());
            let bin = kiln::error::escape_for_terminal(&bin);
            eprintln!("kiln: error: {first} (see {bin} --help)");
            return ExitCode::from(2);
        }
    };
    if !matches!(cli.command, Command::Serve(_)) {
        retain_freed_memory();
    }
    // An out-of-memory panic the training step did not catch (evaluation, the optimizer
    // update) ends in one line too; the hook above stays quiet for those.
    let result = match std::panic::catch_unwind(|| run_command(cli.command)) {
        Ok(r) => r,
        Err(p) if kiln::fit::is_out_of_memory(&*p) => {
            let what = p
                .downcast_ref::<String>()
                .and_then(|s| s.lines().next().map(str::to_string))
                .unwrap_or_else(|| "allocation failure".into());
            eprintln!(
                "kiln: error: out of memory ({what}); lower fit.batch_size or use precision = \"mixed_float16\""
            );
            return ExitCode::from(1);
        }
        Err(p) => std::panic::resume_unwind(p),
    };
    // multi_worker_mirrored: MPI is finalized (or, after a failure on this worker alone, the
    // job aborted); workers other than rank 0 print only their own errors.
    let worker = workers::finish(&result);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let config = e
                .downcast_ref::<KilnError>()
                .is_some_and(KilnError::is_usage)
                || e.downcast_ref::<kiln_tune::TuneError>()
                    .is_some_and(kiln_tune::TuneError::is_usage);
            // kiln's errors already carry their cause in their message; context added here
            // (anyhow) is joined with the cause.
            let message = match e.downcast_ref::<KilnError>() {
                Some(k) => k.to_string(),
                None => e
                    .chain()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(": "),
            };
            // Messages echo user input (paths, keys, values): no terminal control through them.
            let message = kiln::error::escape_for_terminal(&message);
            let tune_signal = match e.downcast_ref::<kiln_tune::TuneError>() {
                Some(kiln_tune::TuneError::Interrupted(signal)) => Some(*signal),
                _ => None,
            };
            let code = match e.downcast_ref::<KilnError>() {
                // The shell's convention for a process ended by a signal: 128 + its number.
                Some(
                    KilnError::Interrupted { signal, .. }
                    | KilnError::InterruptedAfterTraining { signal, .. },
                ) => 128 + *signal as u8,
                _ if tune_signal.is_some() => 128 + tune_signal.unwrap_or(0) as u8,
                _ if config => 2,
                _ => 1,
            };
            if let Some(w) = worker.filter(|w| w.rank > 0) {
                // Rank 0 reports a stop that every worker shared.
                if !workers::shared(&e) {
                    // One write, so that the workers' lines do not interleave.
                    let line = format!(
                        "kiln (worker {} of {}): error: {}\n",
                        w.rank,
                        w.size,
                        message.replace('\n', " ")
                    );
                    let _ = std::io::stderr().write_all(line.as_bytes());
                }
                workers::abort_unless_finalized(code);
                return ExitCode::from(code);
            }
            let line = match e.downcast_ref::<KilnError>() {
                // Reports that are laid out in lines.
                Some(
                    KilnError::Changed(_)
                    | KilnError::NanLoss(_)
                    | KilnError::UnusableCheckpoints(_),
                ) => {
                    format!("kiln: error: {message}\n")
                }
                _ => format!("kiln: error: {}\n", message.replace('\n', " ")),
            };
            // One write (under mpirun the workers share the terminal).
            let _ = std::io::stderr().write_all(line.as_bytes());
            workers::abort_unless_finalized(code);
            ExitCode::from(code)
        }
    }
}

/// SIGINT and SIGTERM ask training to stop after the current batch (it then writes a
/// checkpoint); a second signal ends the process at once. `mpi`: this worker's place in a
/// `multi_worker_mirrored` job and the checkpoint directory, for the message.
pub(crate) fn stop_on_signals(
    mpi: Option<(kiln::distribute::world::World, PathBuf)>,
) -> anyhow::Result<kiln::fit::Interrupt> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let interrupt = kiln::fit::Interrupt::new();
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("cannot install the SIGINT/SIGTERM handlers")?;
    let flag = interrupt.clone();
    std::thread::Builder::new()
        .name("kiln-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if flag.requested().is_some() {
                    eprintln!("kiln: second signal {signal}: stopping now, without a checkpoint");
                    std::process::exit(128 + signal);
                }
                match &mpi {
                    Some((w, dir)) => eprintln!("{}", workers::signal_message(*w, signal, dir)),
                    None => eprintln!(
                        "kiln: signal {signal}: finishing the current batch and writing a \
                         checkpoint (send it again to stop at once)"
                    ),
                }
                flag.request(signal);
            }
        })
        .context("cannot start the signal thread")?;
    Ok(interrupt)
}

fn run_command(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Data(data) => run_data(data),
        Command::Estimate(args) => estimate::run(args),
        Command::Export(args) => deploy::export(args),
        Command::Import(args) => deploy::import(args),
        Command::Serve(args) => deploy::serve(args),
        Command::Tune(args) => tune::run(args),
        Command::Train(args) => train::run(args),
        Command::Evaluate {
            run_dir,
            json,
            save_predictions,
            data_dir,
            device,
        } => {
            let dev = device::resolve(device.into())?;
            let eval = run::evaluate(
                &run_dir,
                &Overrides {
                    data_dir,
                    ..Default::default()
                },
                dev,
            )?;
            if json {
                println!("{}", eval.logs.to_json());
            } else {
                println!("{:<32} {:>10}", "metric", "value");
                for (name, value) in &eval.logs.0 {
                    println!("{name:<32} {value:>10.4}");
                }
            }
            if let Some(path) = save_predictions {
                let mut out = String::from("index,predicted\n");
                for (i, p) in eval.predicted.iter().enumerate() {
                    out += &format!("{i},{p}\n");
                }
                std::fs::write(&path, out)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            Ok(())
        }
        Command::Predict {
            run_dir,
            input,
            format,
            output,
            device,
        } => {
            let dev = device::resolve(device.into())?;
            let run::Predictions {
                values: probs,
                units,
                columns,
            } = run::predict(&run_dir, &input, dev)?;
            let text = match format {
                Format::Json => {
                    let rows: Vec<&[f32]> = probs.chunks_exact(units).collect();
                    serde_json::json!({ "predictions": rows }).to_string() + "\n"
                }
                Format::Csv => {
                    let mut s = columns.join(",") + "\n";
                    for row in probs.chunks_exact(units) {
                        s += &row
                            .iter()
                            .map(|v| v.to_string())
                            .collect::<Vec<_>>()
                            .join(",");
                        s.push('\n');
                    }
                    s
                }
            };
            match output {
                Some(path) => std::fs::write(&path, text)
                    .with_context(|| format!("cannot write {}", path.display()))?,
                None => std::io::stdout().write_all(text.as_bytes())?,
            }
            Ok(())
        }
    }
}

fn run_data(command: DataCommand) -> anyhow::Result<()> {
    match command {
        DataCommand::Inspect { file, n, format } => {
            // An unknown --format and a format that cannot be told are both usage errors
            // (exit 2): the fix is the same, naming the format.
            let usage = |e: kiln_data::DataError| match e {
                kiln_data::DataError::InvalidArgument(m) => KilnError::config("--format", m),
                other => KilnError::Data(other),
            };
            let format = format
                .map(|f| f.parse::<kiln_data::inspect::FileFormat>())
                .transpose()
                .map_err(usage)?;
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            kiln_data::inspect::inspect(&file, n, format, &mut out).map_err(usage)?;
            Ok(())
        }
        DataCommand::Bench {
            config,
            split,
            steps,
            epochs,
            data_dir,
            json,
        } => {
            let split: Split = split.parse()?;
            let mut cfg = RunConfig::load(&config)?;
            cfg.apply(&Overrides {
                data_dir,
                ..Default::default()
            })?;
            if !cfg.data.uses_pipelines() {
                return Err(KilnError::config(
                    "data",
                    "kiln data bench runs [data.train] / [data.validation] / [data.test] \
                     pipeline tables; this config uses the [data] arrays keys",
                )
                .into());
            }
            let reports = kiln::pipeline::bench_epochs(&cfg, split, steps, epochs)?;
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            for r in &reports {
                if json {
                    writeln!(out, "{}", bench_json(r))?;
                } else {
                    print_bench(&mut out, r, reports.len())?;
                }
            }
            Ok(())
        }
    }
}

/// One epoch of `kiln data bench` as text: throughput, batch shapes (first epoch), stages.
fn print_bench(
    out: &mut impl Write,
    r: &kiln::pipeline::BenchReport,
    epochs: usize,
) -> std::io::Result<()> {
    let epoch = if epochs > 1 {
        format!(" epoch {}/{epochs}", r.epoch + 1)
    } else {
        String::new()
    };
    writeln!(
        out,
        "{}{epoch}: {} batches, {} examples in {:.3}s",
        r.split.key(),
        r.batches,
        r.elements,
        r.seconds
    )?;
    writeln!(
        out,
        "{:.0} examples/s, {:.1} batches/s",
        r.elements_per_second(),
        r.batches as f64 / r.seconds.max(1e-9)
    )?;
    writeln!(out, "first batch after {:.3}s", r.first_batch_seconds)?;
    if r.adapt_seconds > 0.001 {
        writeln!(
            out,
            "adapt (before the pipeline) took {:.3}s",
            r.adapt_seconds
        )?;
    }
    if r.epoch == 0 {
        for (name, dtype, shape) in &r.batch_shapes {
            writeln!(out, "  {name}: {dtype} {shape:?}")?;
        }
    }
    writeln!(out, "stages: {}", r.stats)
}

/// One epoch of `kiln data bench` as a JSON object (`--json`).
fn bench_json(r: &kiln::pipeline::BenchReport) -> serde_json::Value {
    let stages: Vec<serde_json::Value> = r
        .stats
        .stages
        .iter()
        .map(|s| {
            serde_json::json!({
                "name": s.name,
                "autotuned": s.autotuned,
                "elements": s.elements,
                "busy_seconds": s.busy.as_secs_f64(),
                "waited_seconds": s.waited.as_secs_f64(),
                "parallelism": s.parallelism,
                "peak_parallelism": s.peak_parallelism,
                "buffer": s.buffer,
                "peak_buffer": s.peak_buffer,
                "bytes_per_element": s.bytes_per_element,
            })
        })
        .collect();
    serde_json::json!({
        "split": r.split.key(),
        "epoch": r.epoch,
        "batches": r.batches,
        "examples": r.elements,
        "seconds": r.seconds,
        "examples_per_second": r.elements_per_second(),
        "first_batch_seconds": r.first_batch_seconds,
        "adapt_seconds": r.adapt_seconds,
        "batch_shapes": r.batch_shapes.iter().map(|(n, d, s)| {
            serde_json::json!({ "name": n, "dtype": d.name(), "shape": s })
        }).collect::<Vec<_>>(),
        "waited_seconds": r.stats.waited.as_secs_f64(),
        "input_bound_fraction": r.stats.input_bound_fraction(),
        "stages": stages,
    })
}
