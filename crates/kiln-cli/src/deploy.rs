//! `kiln export`, `kiln import` and `kiln serve`: thin wrappers over `kiln::export`,
//! `kiln::import` and `kiln_serve`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use kiln::KilnError;
use kiln::export::{ExportFormat, ExportOptions};
use kiln_serve::{BatchingConfig, ModelConfig, ServeConfig, ServeError};

/// Arguments of `kiln export`.
#[derive(Args)]
pub struct ExportArgs {
    /// A run directory written by `kiln train`.
    pub run_dir: PathBuf,
    /// onnx (model.onnx plus what `kiln serve` reads), keras (model.keras, for Keras'
    /// load_model), tflite (model.tflite, TensorFlow Lite float32) or safetensors (only what
    /// `kiln serve` reads).
    #[arg(long, default_value = "onnx")]
    pub format: String,
    /// Version number (default: one more than the largest already exported).
    #[arg(long)]
    pub version: Option<u64>,
    /// Base directory: the version lands in OUT/<name>/<version>/ (default: RUN_DIR/export).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Model name (default: the run's `name`).
    #[arg(long)]
    pub name: Option<String>,
    /// With --format tflite: none (float32), dynamic_range (int8 Dense and Conv2D kernels,
    /// float32 activations) or full_integer (every tensor int8, calibrated on the run's first
    /// 500 training examples; float32 in and out).
    #[arg(long, default_value = "none")]
    pub quantization: String,
}

/// Arguments of `kiln import`.
#[derive(Args)]
pub struct ImportArgs {
    /// A Keras model file: `.keras` (Keras 3's `model.save("model.keras")`) or a legacy HDF5
    /// `.h5` (`model.save("model.h5")`).
    pub file: PathBuf,
    /// The run directory to write (default: runs/<name>); it must not hold a run yet.
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// The run's name (default: the model's name in the file).
    #[arg(long)]
    pub name: Option<String>,
    /// A kiln config whose [data], [fit] and [[callbacks]] (and [compile], over the file's)
    /// the run takes; its [model] is replaced by the file's.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// Runs `kiln import`, printing what was written and what to do next.
pub fn import(args: ImportArgs) -> anyhow::Result<()> {
    let opts = kiln::import::ImportOptions {
        run_dir: args.run_dir,
        name: args.name,
        config: args.config,
    };
    let i = kiln::import::import(&args.file, &opts)?;
    let (trainable, frozen) = i.params;
    println!(
        "Imported {} ({} layers, {} trainable and {} non-trainable parameters) into {}",
        i.name,
        i.layers,
        kiln::model::thousands(trainable),
        kiln::model::thousands(frozen),
        i.run_dir.display()
    );
    match i.compile_from {
        kiln::import::CompileFrom::File => println!("  [compile] from the file"),
        kiln::import::CompileFrom::Config => println!("  [compile] from --config"),
        kiln::import::CompileFrom::Default => println!(
            "  the file was saved uncompiled: [compile] is optimizer \"rmsprop\" and loss \
             \"mean_squared_error\"; set yours (or pass --config) before training"
        ),
    }
    if i.default_data {
        println!(
            "  [data] is kiln's default (Fashion-MNIST IDX files, rescale 1): pass --config with \
             your input pipeline before training, evaluating or a full_integer export"
        );
    }
    let dir = i.run_dir.display();
    println!("Predict:   kiln predict {dir} INPUT.npy");
    println!("Export:    kiln export {dir} --format onnx|keras|tflite|safetensors");
    println!("Fine-tune: kiln train {dir}/config.toml --run-dir {dir}");
    Ok(())
}

/// Arguments of `kiln serve` (TF Serving's flag names, with dashes).
#[derive(Args)]
pub struct ServeArgs {
    /// Directory holding the model's numbered version directories (OUT/<name> of `kiln export`).
    #[arg(long)]
    pub model_base_path: Option<PathBuf>,
    /// The name clients use: /v1/models/<name>.
    #[arg(long)]
    pub model_name: Option<String>,
    /// A TOML file listing several models ([[models]] name, base_path, model_version_policy,
    /// version_labels), instead of --model-name / --model-base-path.
    #[arg(long)]
    pub model_config_file: Option<PathBuf>,
    /// REST API port.
    #[arg(long, default_value_t = 8501)]
    pub rest_api_port: u16,
    /// Address to bind; 0.0.0.0 serves other machines too.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// A file holding a bearer token that every /v1 and /monitoring request must send.
    #[arg(long)]
    pub auth_token_file: Option<PathBuf>,
    /// Merge concurrent requests into batches (defaults below, or --batching-parameters-file).
    #[arg(long)]
    pub enable_batching: bool,
    /// TF Serving's batching parameters file (max_batch_size { value: 64 } ...); implies
    /// --enable-batching.
    #[arg(long)]
    pub batching_parameters_file: Option<PathBuf>,
    /// Largest request body in bytes (larger: 413).
    #[arg(long, default_value_t = 32 << 20)]
    pub max_body_bytes: usize,
    /// Seconds between scans of the base paths for new versions.
    #[arg(long, default_value_t = 1.0)]
    pub file_system_poll_wait_seconds: f64,
    /// Threads running requests when batching is off (default: CPUs, at most 8).
    #[arg(long)]
    pub num_request_threads: Option<usize>,
    /// Requests waiting for a thread when batching is off before new ones get 429.
    #[arg(long, default_value_t = 1000)]
    pub max_enqueued_requests: usize,
    /// cpu or gpu (the GPU backend compiled in).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Seconds a client may take to send a request's headers (and an idle keep-alive
    /// connection stays open); then the connection is closed.
    #[arg(long, default_value_t = 30.0)]
    pub header_read_timeout_seconds: f64,
    /// Seconds a request body may stall (no new bytes); then 408 and the connection is closed.
    #[arg(long, default_value_t = 60.0)]
    pub body_read_timeout_seconds: f64,
}

/// `seconds` of the flag `key` as a duration, between 1 ms and a day.
fn seconds(key: &str, seconds: f64) -> anyhow::Result<std::time::Duration> {
    if !(0.001..=86_400.0).contains(&seconds) {
        return Err(KilnError::config(key, "must be between 0.001 and 86400 seconds").into());
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

/// Runs `kiln export`, printing where the version went.
pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let format: ExportFormat = args.format.parse()?;
    let quantization = match args.quantization.as_str() {
        "none" => kiln::tflite::Quantization::None,
        "dynamic_range" => kiln::tflite::Quantization::DynamicRange,
        "full_integer" => kiln::tflite::Quantization::FullInteger,
        other => {
            return Err(KilnError::config(
                "--quantization",
                format!(
                    "unknown quantization \"{other}\"; allowed: none, dynamic_range, full_integer"
                ),
            )
            .into());
        }
    };
    // TFLite's converter calibrates on a representative dataset: the run's first 500
    // training examples.
    let full_integer = quantization == kiln::tflite::Quantization::FullInteger;
    let representative: Option<kiln::export::Representative> =
        full_integer.then_some(|dir| kiln::run::representative_set(dir, 500));
    let e = kiln::export::export(
        &args.run_dir,
        &ExportOptions {
            format,
            version: args.version,
            out: args.out,
            name: args.name,
            quantization,
            representative,
        },
    )?;
    println!(
        "Exported {} version {} to {}",
        e.name,
        e.version,
        e.dir.display()
    );
    for f in &e.files {
        println!("  {}", f.display());
    }
    if full_integer {
        println!(
            "  int8 ranges calibrated on the run's first 500 training examples, preprocessed by \
             its [data] as training does: they must be what the model expects"
        );
    }
    println!(
        "Serve it with: kiln serve --model-name {} --model-base-path {}",
        e.name,
        e.base_path.display()
    );
    Ok(())
}

/// Maps a server error to kiln's: configuration errors exit with 2.
fn usage(e: ServeError) -> anyhow::Error {
    match e {
        ServeError::Config { key, message } => KilnError::config(key, message).into(),
        ServeError::Kiln(k) => k.into(),
        other => other.into(),
    }
}

/// Runs `kiln serve` until SIGTERM / SIGINT.
pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut cfg = ServeConfig {
        host: args.host,
        port: args.rest_api_port,
        max_body_bytes: args.max_body_bytes,
        max_enqueued_requests: args.max_enqueued_requests,
        device: args.device.parse()?,
        ..Default::default()
    };
    if let Some(n) = args.num_request_threads {
        cfg.num_request_threads = n;
    }
    cfg.poll_interval = seconds(
        "--file-system-poll-wait-seconds",
        args.file_system_poll_wait_seconds,
    )?;
    cfg.header_read_timeout = seconds(
        "--header-read-timeout-seconds",
        args.header_read_timeout_seconds,
    )?;
    cfg.body_read_timeout = seconds(
        "--body-read-timeout-seconds",
        args.body_read_timeout_seconds,
    )?;
    match (
        args.model_config_file,
        args.model_name,
        args.model_base_path,
    ) {
        (Some(file), None, None) => {
            cfg.models = ServeConfig::models_from_toml(&file).map_err(usage)?
        }
        (None, Some(name), Some(base)) => cfg.models = vec![ModelConfig::new(name, base)],
        _ => {
            return Err(KilnError::config(
                "--model-name",
                "pass --model-name NAME and --model-base-path DIR, or --model-config-file FILE",
            )
            .into());
        }
    }
    if let Some(file) = &args.batching_parameters_file {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        cfg.batching = Some(BatchingConfig::from_text_proto(&text, file).map_err(usage)?);
    } else if args.enable_batching {
        cfg.batching = Some(BatchingConfig::default());
    }
    if let Some(file) = &args.auth_token_file {
        let token = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the token file {}", file.display()))?;
        let token = token.trim().to_string();
        if token.is_empty() {
            return Err(KilnError::config("--auth-token-file", "the token file is empty").into());
        }
        cfg.auth_token = Some(token);
    }
    let names: Vec<String> = cfg.models.iter().map(|m| m.name.clone()).collect();
    let batching = cfg.batching;
    kiln_serve::serve_until_signal(
        cfg,
        |addr| {
            println!(
                "kiln serve: REST API on http://{addr}/v1/models/{} (batching {})",
                names.join(", /v1/models/"),
                match batching {
                    Some(b) => format!(
                        "on: max_batch_size {}, batch_timeout_micros {}",
                        b.max_batch_size, b.batch_timeout_micros
                    ),
                    None => "off".into(),
                }
            );
        },
        |m| eprintln!("{m}"),
    )
    .map_err(usage)
}
