//! Run configuration: one TOML file with Keras' names (`[data]`, `[model]`, `[compile]`,
//! `[fit]`), the same settings a Rust program passes to the builders.
//!
//! ```toml
//! name = "fashion-mnist-cnn"
//! seed = 42
//! [data]
//! data_dir = "/usr/share/datasets/fashion-mnist"
//! [model]
//! layers = [{ type = "Input", shape = [28, 28, 1] }, { type = "Flatten" }, { type = "Dense", units = 10 }]
//! [compile]
//! optimizer = "adamw"
//! loss = { type = "sparse_categorical_crossentropy", from_logits = true }
//! metrics = ["accuracy"]
//! [fit]
//! epochs = 5
//! batch_size = 128
//! validation_split = 0.1
//! [[callbacks]]
//! type = "EarlyStopping"
//! patience = 2
//! ```

mod backup;
pub mod bytes;
mod callbacks;
mod data;
mod data_utils;
mod distribute;
mod fit;
pub mod limits;
mod overrides;
mod parts;
pub mod paths;
mod pipeline;
pub(crate) mod pipeline_values;
mod text_ops;
pub(crate) use text_ops::read_vocabulary;

pub use backup::BackupSpec;
pub use callbacks::{
    CALLBACK_TYPES, CSVLoggerSpec, CallbackSpec, EarlyStoppingSpec, LearningRateSchedulerSpec,
    ModelCheckpointSpec, ReduceLROnPlateauSpec, TensorBoardSpec, TerminateOnNaNSpec,
};
pub use data::{ARRAY_FORM_KEYS, DataConfig, PIPELINE_KEYS};
pub use data_utils::{MixConfig, PaddedBatchConfig, PaddedBatchOptions};
pub use distribute::{AutoShardPolicy, DEFAULT_PIPELINE_STAGES, DistributeConfig, StrategyKind};
pub use fit::{AUTO_BATCH_SIZE, FitConfig, OnNanConfig};
pub use overrides::Overrides;
pub use pipeline::{
    AxisConfig, ColumnRef, FeatureConfig, LookupConfig, OneOrMany, OpConfig, PipelineConfig,
    ShuffleConfig, Source, TextVectorizationConfig,
};

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::compile::{Compiled, GradientOptions, LossSpec, OptimizerSpec};
use crate::error::{KilnError, Result};
use crate::model::ModelSpec;

/// A whole run: what to read, what to build, how to train.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The run's name: the model's name and the default run directory `runs/<name>`.
    pub name: String,
    /// Seed for weight initialization, shuffling and dropout.
    pub seed: u64,
    /// Input data.
    pub data: DataConfig,
    /// The model.
    pub model: ModelSpec,
    /// Optimizer, loss, metrics.
    pub compile: Compiled,
    /// Training settings.
    pub fit: FitConfig,
    /// BackupAndRestore settings (from a `BackupAndRestore` entry of `[[callbacks]]`, or the
    /// defaults: `kiln train` always checkpoints).
    pub backup: BackupSpec,
    /// `[[callbacks]]`, in order, without `BackupAndRestore` (see `backup`).
    pub callbacks: Vec<CallbackSpec>,
    /// `[distribute]`: the distribution strategy (default one device).
    pub distribute: DistributeConfig,
    /// `compile.train_step`: the registered custom train step the model trains with
    /// ([`crate::step::custom`]); `None`: the compiled step.
    pub train_step: Option<String>,
    /// `[parts.<name>]`: the extra networks of a custom train step, by name.
    pub parts: Vec<crate::step::custom::PartSpec>,
    /// `[model] weights`: the weights training starts from instead of fresh ones (Keras'
    /// `model.load_weights` before `fit`; a resume starts from its checkpoint instead).
    pub initial_weights: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    name: String,
    #[serde(default = "default_seed")]
    seed: u64,
    #[serde(default)]
    precision: Option<String>,
    data: DataConfig,
    model: toml::Table,
    compile: RawCompile,
    #[serde(default)]
    fit: FitConfig,
    #[serde(default)]
    callbacks: Vec<toml::Value>,
    #[serde(default)]
    distribute: DistributeConfig,
    #[serde(default)]
    parts: toml::Table,
}

fn default_seed() -> u64 {
    1337
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCompile {
    optimizer: toml::Value,
    /// Optional with a custom train step (which computes its own losses).
    #[serde(default)]
    loss: Option<toml::Value>,
    /// A list of names, or per output (a dict keyed by output name, a list of lists).
    #[serde(default)]
    metrics: Option<toml::Value>,
    /// Per output: a dict keyed by output name or a list in `outputs` order.
    #[serde(default)]
    loss_weights: Option<toml::Value>,
    #[serde(default)]
    loss_scale: Option<crate::precision::LossScaleOptions>,
    #[serde(default = "default_steps_per_execution")]
    steps_per_execution: u64,
    #[serde(default)]
    train_step: Option<String>,
}

fn default_steps_per_execution() -> u64 {
    1
}

/// `compile` for `model`: one loss and a list of metrics for a model with one output,
/// Keras' per-output forms for a model with several.
///
/// # Errors
/// [`KilnError::Config`] naming the `compile.*` key.
fn compiled(model: &ModelSpec, optimizer: OptimizerSpec, raw: &RawCompile) -> Result<Compiled> {
    let default_loss = toml::Value::from("mse");
    let loss = match (&raw.loss, &raw.train_step) {
        (Some(loss), _) => loss,
        // Keras: `compile()` without a loss, for a model whose `train_step` computes its own.
        (None, Some(_)) => &default_loss,
        (None, None) => {
            return Err(KilnError::config(
                "compile.loss",
                "missing: give the loss to minimize, e.g. loss = \"sparse_categorical_crossentropy\"",
            ));
        }
    };
    if model.has_several_outputs() {
        let per_output = crate::compile::RawOutputs {
            loss,
            loss_weights: raw.loss_weights.as_ref(),
            metrics: raw.metrics.as_ref(),
        };
        return Compiled::for_outputs(model, optimizer, &per_output);
    }
    if raw.loss_weights.is_some() {
        return Err(KilnError::config(
            "compile.loss_weights",
            "the model has one output: `loss_weights` weighs the losses of several outputs \
             (list them in `[model] outputs`); remove it",
        ));
    }
    if crate::compile::is_per_output(loss) {
        return Err(KilnError::config(
            "compile.loss",
            "a table of losses keyed by output name is for a model with several outputs; this \
             model has one: give one loss, e.g. `loss = \"mse\"` or `loss = { type = \"...\" }`",
        ));
    }
    let loss = LossSpec::from_toml(loss)?;
    let metrics = match &raw.metrics {
        None => Vec::new(),
        Some(v) => metric_names(v)?,
    };
    Compiled::with_metric_values(model, optimizer, loss, &metrics)
}

/// `loss` and `metrics` of `compile` (per output, with `loss_weights`, for a model with
/// several) into the `[compile]` table `c`, as [`compiled`] reads them back.
fn write_losses(compile: &Compiled, c: &mut toml::Table) {
    let names = |metrics: &[crate::compile::MetricSpec]| -> toml::Value {
        toml::Value::Array(
            metrics
                .iter()
                .map(crate::compile::MetricSpec::to_toml)
                .collect(),
        )
    };
    if compile.outputs.is_empty() {
        c.insert("loss".into(), compile.loss.to_toml());
        c.insert("metrics".into(), names(&compile.metrics));
        return;
    }
    let (mut loss, mut weights, mut metrics) = Default::default();
    for h in &compile.outputs {
        let (l, w, m): (&mut toml::Table, &mut toml::Table, &mut toml::Table) =
            (&mut loss, &mut weights, &mut metrics);
        l.insert(h.name.clone(), h.loss.to_toml());
        w.insert(h.name.clone(), toml::Value::Float(h.weight));
        m.insert(h.name.clone(), names(&h.metrics));
    }
    c.insert("loss".into(), toml::Value::Table(loss));
    c.insert("loss_weights".into(), toml::Value::Table(weights));
    c.insert("metrics".into(), toml::Value::Table(metrics));
}

/// `compile.metrics` of a model with one output: a list of names or tables.
fn metric_names(v: &toml::Value) -> Result<Vec<toml::Value>> {
    let toml::Value::Array(a) = v else {
        return Err(KilnError::config(
            "compile.metrics",
            format!("expected a list of metric names, e.g. [\"accuracy\"], got {v}"),
        ));
    };
    Ok(a.clone())
}

/// An optimizer with its clipping keys, as `compile.optimizer` reads them.
fn optimizer_toml(optimizer: &OptimizerSpec, gradients: GradientOptions) -> toml::Value {
    let mut value = toml::Value::try_from(optimizer).expect("optimizer serializes");
    if let (Some(o), toml::Value::Table(g)) = (
        value.as_table_mut(),
        toml::Value::try_from(gradients).expect("gradient options serialize"),
    ) {
        o.extend(g);
    }
    value
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Takes `weights` out of the `[model]` table: the file training starts from (relative paths
/// from the current directory, as `data_dir`).
fn take_initial_weights(model: &mut toml::Table) -> Result<Option<PathBuf>> {
    match model.remove("weights") {
        None => Ok(None),
        Some(toml::Value::String(s)) if !s.is_empty() => Ok(Some(PathBuf::from(s))),
        Some(other) => Err(KilnError::config(
            "model.weights",
            format!(
                "must be the path of a weights file (a run's model.safetensors, or a .keras \
                 file), got {other}"
            ),
        )),
    }
}

impl RunConfig {
    /// Parses a config from TOML text.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming the key (with its line for syntax and unknown-key errors),
    /// the bad value and the allowed values.
    pub fn from_toml_str(text: &str) -> Result<RunConfig> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| format!("line {}", line_of(text, s.start)))
                .unwrap_or_else(|| "config".into());
            KilnError::config(line, crate::error::humanize(e.message()))
        })?;
        paths::check_run_name("name", &raw.name)?;
        let precision = match &raw.precision {
            Some(p) => crate::precision::Precision::parse(p, "precision")?,
            None => Default::default(),
        };
        let mut model_table = raw.model.clone();
        let initial_weights = take_initial_weights(&mut model_table)?;
        let model = ModelSpec::from_toml(&model_table)?.with_precision(precision);
        let parts = parts::read(&raw.parts, precision, raw.compile.train_step.as_deref())?;
        let optimizer = OptimizerSpec::from_toml(&raw.compile.optimizer)?;
        let gradients = GradientOptions::from_toml(&raw.compile.optimizer)?;
        let mut compile = compiled(&model, optimizer, &raw.compile)?.with_gradients(gradients)?;
        if raw.compile.loss_scale.is_some() {
            compile = compile.with_loss_scale(raw.compile.loss_scale)?;
        }
        compile = compile.with_steps_per_execution(raw.compile.steps_per_execution)?;
        raw.fit.validate()?;
        if model.has_several_outputs() && !raw.fit.class_weight.is_empty() {
            return Err(KilnError::config(
                "fit.class_weight",
                "applies to a model with one output (as in Keras); weigh the outputs with \
                 `compile.loss_weights`, or the examples with per-example weights (the batch \
                 component \"sample_weight\")",
            ));
        }
        crate::fit::ClassWeight::from_config(&raw.fit.class_weight, model.output_units())?;
        let mut data = raw.data;
        if data.uses_pipelines() {
            // Keys written in the file (even at their default values) decide the form.
            let written: toml::Table = toml::from_str(text).unwrap_or_default();
            let keys = written
                .get("data")
                .and_then(toml::Value::as_table)
                .cloned()
                .unwrap_or_default();
            if let Some(key) = data::ARRAY_FORM_KEYS
                .iter()
                .find(|k| keys.contains_key(**k))
            {
                return Err(data::form_conflict(key, &data));
            }
            if !keys.contains_key("data_dir") {
                data.data_dir = PathBuf::from(".");
            }
        }
        data.validate()?;
        let (callbacks, backup) = callbacks::read(&raw.callbacks)?;
        callbacks::check_scheduled_rate(&raw.callbacks, compile.optimizer.schedule().is_some())?;
        // Whether each key fits the strategy is checked after command-line overrides (kiln
        // train --strategy), when the strategy is built.
        raw.distribute.validate_values()?;
        let cfg = RunConfig {
            name: raw.name,
            seed: raw.seed,
            data,
            model,
            compile,
            fit: raw.fit,
            backup,
            callbacks,
            distribute: raw.distribute,
            train_step: raw.compile.train_step,
            parts,
            initial_weights,
        };
        cfg.check_forms()?;
        Ok(cfg)
    }

    /// Reads and parses a config file.
    ///
    /// # Errors
    /// [`KilnError::Config`] (naming the file) when it cannot be read or is invalid.
    pub fn load(path: &Path) -> Result<RunConfig> {
        let text = std::fs::read_to_string(path).map_err(|e| KilnError::Config {
            file: Some(path.to_path_buf()),
            key: "config".into(),
            message: format!("cannot read the config file: {e}"),
        })?;
        RunConfig::from_toml_str(&text).map_err(|e| e.in_file(path))
    }

    /// The resolved config (defaults filled in, names assigned) as TOML, for the run directory.
    pub fn to_toml(&self) -> String {
        let mut t = toml::Table::new();
        t.insert("name".into(), self.name.clone().into());
        t.insert("seed".into(), toml::Value::Integer(self.seed as i64));
        if self.model.precision() != crate::precision::Precision::Float32 {
            t.insert("precision".into(), self.model.precision().name().into());
        }
        let mut data = toml::Value::try_from(&self.data).expect("data config serializes");
        if self.data.uses_pipelines()
            && let Some(table) = data.as_table_mut()
        {
            // The pipeline form writes no arrays-form key (they would conflict on reading).
            table.retain(|k, _| !ARRAY_FORM_KEYS.iter().any(|a| *k == **a));
        }
        t.insert("data".into(), data);
        let mut model = self.model.to_toml();
        if let Some(w) = &self.initial_weights {
            model.insert("weights".into(), w.display().to_string().into());
        }
        t.insert("model".into(), toml::Value::Table(model));
        let mut c = toml::Table::new();
        let optimizer = optimizer_toml(&self.compile.optimizer, self.compile.gradients);
        c.insert("optimizer".into(), optimizer);
        if self.compile.loss_scale != self.model.precision().default_loss_scale()
            && let Some(ls) = self.compile.loss_scale
        {
            c.insert(
                "loss_scale".into(),
                toml::Value::try_from(ls).expect("loss scale serializes"),
            );
        }
        write_losses(&self.compile, &mut c);
        if self.compile.steps_per_execution != 1 {
            let n = self.compile.steps_per_execution as i64;
            c.insert("steps_per_execution".into(), toml::Value::Integer(n));
        }
        if let Some(step) = &self.train_step {
            c.insert("train_step".into(), step.clone().into());
        }
        t.insert("compile".into(), toml::Value::Table(c));
        if !self.parts.is_empty() {
            t.insert(
                "parts".into(),
                toml::Value::Table(parts::write(&self.parts)),
            );
        }
        t.insert(
            "fit".into(),
            toml::Value::try_from(&self.fit).expect("fit config serializes"),
        );
        let callbacks = callbacks::write(&self.callbacks, &self.backup);
        if !callbacks.is_empty() {
            t.insert("callbacks".into(), toml::Value::Array(callbacks));
        }
        if !self.distribute.is_default() {
            t.insert(
                "distribute".into(),
                toml::Value::try_from(&self.distribute).expect("distribute config serializes"),
            );
        }
        toml::to_string_pretty(&t).expect("config serializes")
    }

    /// Checks the settings that tie `[fit]` to the `[data]` form: with pipeline tables,
    /// `fit.validation_split` is refused (as Keras refuses it for datasets) and
    /// `fit.validation_data = "test"` needs `[data.test]` and excludes `[data.validation]`.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming the keys.
    pub fn check_forms(&self) -> Result<()> {
        if !self.data.uses_pipelines() {
            return Ok(());
        }
        if self.fit.validation_split > 0.0 {
            return Err(KilnError::config(
                "fit.validation_split",
                "cannot split a [data.train] pipeline (Keras refuses validation_split for \
                 datasets too); give a [data.validation] table, or fit.validation_data = \"test\"",
            ));
        }
        if self.fit.validation_data.as_deref() == Some("test") {
            if self.data.validation.is_some() {
                return Err(KilnError::config(
                    "fit.validation_data",
                    "give either [data.validation] or fit.validation_data = \"test\", not both",
                ));
            }
            if self.data.test.is_none() {
                return Err(KilnError::config(
                    "fit.validation_data",
                    "\"test\" needs a [data.test] table",
                ));
            }
        }
        Ok(())
    }

    /// The default run directory: `runs/<name>`.
    pub fn default_run_dir(&self) -> PathBuf {
        PathBuf::from("runs").join(&self.name)
    }
}

#[cfg(test)]
mod key_mentions;
#[cfg(test)]
mod tests;
