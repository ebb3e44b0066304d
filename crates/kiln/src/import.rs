//! `kiln import`: a `.keras` file ([`crate::keras_file`]) as a kiln run directory
//! (`config.toml`, `model.safetensors` and `imported.safetensors`), ready for `kiln evaluate`,
//! `predict`, `export` and `serve`, and for `kiln train` to fine-tune (its `[model] weights`
//! names `imported.safetensors`, which training never overwrites).

use std::path::{Path, PathBuf};

use burn::prelude::Device;

use crate::config::RunConfig;
use crate::error::{KilnError, Result};
use crate::model::weights;

/// The file of the imported weights in the run directory (training starts from it and never
/// writes it).
pub const IMPORTED_WEIGHTS: &str = "imported.safetensors";

/// Options of [`import`].
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// The run directory to write (default `runs/<name>`); it must not hold a run yet.
    pub run_dir: Option<PathBuf>,
    /// The run's name (default: the model's name in the file).
    pub name: Option<String>,
    /// A kiln config whose `[data]`, `[fit]`, `[[callbacks]]` … the run takes; its `[compile]`
    /// wins over the file's. Its `[model]` is replaced.
    pub config: Option<PathBuf>,
}

/// What [`import`] wrote.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The run directory.
    pub run_dir: PathBuf,
    /// The run's name.
    pub name: String,
    /// Layers and parameters (trainable, non-trainable) of the model.
    pub layers: usize,
    /// Trainable and non-trainable parameters.
    pub params: (usize, usize),
    /// Where `[compile]` came from.
    pub compile_from: CompileFrom,
    /// Whether `[data]` is kiln's default (no `--config`): Fashion-MNIST IDX files with
    /// `rescale = 1`, not the model's own input pipeline.
    pub default_data: bool,
}

/// Where an imported run's `[compile]` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileFrom {
    /// The file's `compile_config`.
    File,
    /// The `--config` given.
    Config,
    /// Neither (the model was saved uncompiled): `optimizer = "rmsprop"` (Keras' default) and
    /// `loss = "mean_squared_error"`, to be replaced before training.
    Default,
}

/// The base config's table (empty without one).
fn base_table(config: Option<&Path>) -> Result<toml::Table> {
    let Some(path) = config else {
        return Ok(toml::Table::new());
    };
    let text = std::fs::read_to_string(path).map_err(|e| KilnError::io(path, e))?;
    toml::from_str(&text)
        .map_err(|e| KilnError::config("config", crate::error::humanize(e.message())).in_file(path))
}

/// Imports the `.keras` file `path` as a run directory (see the module docs). Nothing is
/// written unless the whole model, its weights and the resulting config are valid.
///
/// # Errors
/// [`KilnError::KerasFile`] for a file kiln cannot import (see [`crate::keras_file::read`]);
/// [`KilnError::Config`] for a bad name, a run directory that already holds a run, or a base
/// config that does not fit the model; [`KilnError::Io`] when the directory cannot be written.
pub fn import(path: &Path, opts: &ImportOptions) -> Result<Imported> {
    let file = crate::keras_file::read(path)?;
    let name = opts.name.clone().unwrap_or_else(|| file.name.clone());
    crate::config::paths::check_run_name(
        if opts.name.is_some() {
            "--name"
        } else {
            "name"
        },
        &name,
    )?;
    let run_dir = opts
        .run_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("runs").join(&name));
    let cfg_path = run_dir.join("config.toml");
    if cfg_path.exists() {
        return Err(KilnError::config(
            "--run-dir",
            format!(
                "{} already holds a run; import into another directory (--run-dir)",
                run_dir.display()
            ),
        ));
    }
    // The imported weights in a file of their own, which `[model] weights` names and training
    // never overwrites; `model.safetensors` (what predict, export and serve read) is a copy.
    let weights_path = std::path::absolute(run_dir.join(IMPORTED_WEIGHTS))
        .map_err(|e| KilnError::io(&run_dir, e))?;
    let mut t = base_table(opts.config.as_deref())?;
    t.insert("name".into(), name.clone().into());
    let mut model = file.model.clone();
    model.insert("weights".into(), weights_path.display().to_string().into());
    t.insert("model".into(), toml::Value::Table(model));
    let default_data = !t.contains_key("data");
    t.entry("data").or_insert_with(|| toml::Table::new().into());
    let compile_from = match (t.contains_key("compile"), &file.compile) {
        (true, _) => CompileFrom::Config,
        (false, Some(c)) => {
            t.insert("compile".into(), toml::Value::Table(c.clone()));
            CompileFrom::File
        }
        (false, None) => {
            // Saved uncompiled: Keras' default optimizer and a placeholder loss.
            let mut default = toml::Table::new();
            default.insert("optimizer".into(), "rmsprop".into());
            default.insert("loss".into(), "mean_squared_error".into());
            t.insert("compile".into(), toml::Value::Table(default));
            CompileFrom::Default
        }
    };
    let text = toml::to_string(&t).expect("tables serialize");
    // Checked as `kiln train` will read it, before anything is written.
    let cfg = RunConfig::from_toml_str(&text).map_err(|e| match opts.config.as_deref() {
        Some(base) => e.in_file(base),
        None => KilnError::KerasFile {
            path: path.to_path_buf(),
            entry: crate::keras_file::CONFIG_ENTRY.into(),
            message: e.to_string(),
        },
    })?;
    let net = file.network(&Device::flex())?;
    std::fs::create_dir_all(&run_dir).map_err(|e| KilnError::io(&run_dir, e))?;
    weights::save(&cfg.model, &net, &weights_path)?;
    weights::save(&cfg.model, &net, &run_dir.join("model.safetensors"))?;
    let header = format!(
        "# Imported by kiln {} from {}.\n# `[model] weights` is where training starts (a resume \
         continues from its checkpoint).\n",
        env!("CARGO_PKG_VERSION"),
        path.display()
    );
    crate::files::write_atomic(&cfg_path, format!("{header}{}", cfg.to_toml()).as_bytes())?;
    Ok(Imported {
        run_dir,
        name,
        layers: cfg.model.layers().len(),
        params: cfg.model.param_count(),
        compile_from,
        default_data,
    })
}
