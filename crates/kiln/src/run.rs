//! Whole runs, as the `kiln` command performs them: train a config into a run directory,
//! evaluate it, predict with it. Library users call these too.

use std::path::{Path, PathBuf};

use burn::prelude::Device;
use kiln_data::Dataset;

use crate::compile::{Family, argmax};
use crate::config::RunConfig;
use crate::error::{KilnError, Result};
use crate::fit::{Callback, History, Interrupt, Logs, Model};
use crate::input::{check_against_model, load_idx, pipeline, read_inputs, split_last};
use crate::pipeline::{self as pipelines, Split};
use crate::run_dir::RunDir;

pub use crate::config::Overrides;
pub use train::train_with;

mod resume_check;
mod train;

impl RunConfig {
    /// Sets the global dtype policy, and the loss scaling that goes with it when the config
    /// left it to the policy (`mixed_float16`: Keras' defaults; other policies: none). A
    /// `[compile] loss_scale` given in the config is kept.
    pub fn set_precision(&mut self, precision: crate::precision::Precision) {
        let was_default = self.compile.loss_scale == self.model.precision().default_loss_scale();
        self.model = self.model.clone().with_precision(precision);
        if was_default {
            self.compile.loss_scale = precision.default_loss_scale();
        }
    }
}

/// What `train` produced.
#[derive(Debug)]
pub struct TrainReport {
    /// The trained model.
    pub model: Model,
    /// Per-epoch values.
    pub history: History,
    /// Loss and metrics on the test split (empty when a pipeline-form config has no
    /// `[data.test]`).
    pub test: Logs,
    /// Where everything was written.
    pub run_dir: PathBuf,
    /// Epochs finished before this call (a resumed run's checkpoint epoch; 0 for a fresh run):
    /// `history` holds them too, so this process trained `history.epoch.len() - epochs_before`.
    pub epochs_before: usize,
}

/// How [`train_with`] treats an earlier run in the same directory, and outside stop requests.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// Resume from the run directory's last good checkpoint, if there is one (default: true;
    /// `kiln train --no-resume` sets false and starts over, removing the old checkpoints).
    pub resume: bool,
    /// Resume even when the data or the pipeline changed since the checkpoint
    /// (`--allow-changed-data`).
    pub allow_changed_data: bool,
    /// Stop request (signals): finish the batch, checkpoint, return
    /// [`KilnError::Interrupted`].
    pub interrupt: Option<Interrupt>,
    /// Messages for the user (resume notes, skipped checkpoints).
    pub notes: fn(&str),
}

impl Default for TrainOptions {
    fn default() -> TrainOptions {
        TrainOptions {
            resume: true,
            allow_changed_data: false,
            interrupt: None,
            notes: |m| eprintln!("{m}"),
        }
    }
}

/// Trains `cfg` on `device`, writing the run directory `run_dir`, with the default
/// [`TrainOptions`] (resume from the directory's checkpoints). `on_model` sees the compiled
/// model before training (to print its summary, or turn on profiling).
///
/// # Errors
/// As [`train_with`].
pub fn train(
    cfg: &RunConfig,
    run_dir: &Path,
    device: Device,
    callbacks: &mut [&mut dyn Callback],
    on_model: impl FnOnce(&mut Model),
) -> Result<TrainReport> {
    train_with(
        cfg,
        run_dir,
        device,
        &TrainOptions::default(),
        callbacks,
        on_model,
    )
}

/// The arrays form's `(train, validation, test)` pipelines: the IDX files loaded, checked
/// against the model, the validation split held out.
fn array_pipelines(cfg: &RunConfig) -> Result<(Dataset, Option<Dataset>, Dataset)> {
    let data = load_idx(&cfg.data)?;
    check_against_model(&data, cfg)?;
    let ((train_x, train_y), held_out) =
        split_last(&data.train_x, &data.train_y, cfg.fit.validation_split);
    if train_x.shape()[0] == 0 {
        return Err(KilnError::config(
            "fit.validation_split",
            format!(
                "{} leaves 0 of {} examples for training; use a smaller fraction",
                cfg.fit.validation_split,
                data.train_x.shape()[0]
            ),
        ));
    }
    let validation = match (held_out, cfg.fit.validation_data.as_deref()) {
        (Some((x, y)), _) => Some(pipeline(x, Some(y), cfg, false)?),
        (None, Some("test")) => Some(pipeline(
            data.test_x.clone(),
            Some(data.test_y.clone()),
            cfg,
            false,
        )?),
        _ => None,
    };
    let train = pipeline(train_x, Some(train_y), cfg, cfg.fit.shuffle)?;
    let test = pipeline(data.test_x, Some(data.test_y), cfg, false)?;
    Ok((train, validation, test))
}

/// Checks the first example of every pipeline table against the model before training: the
/// features' element count against the Input, an integer class label against the output
/// units.
///
/// # Errors
/// [`KilnError::Shape`] naming the table and component; data errors from the first example.
fn check_pipelines_against_model(cfg: &RunConfig) -> Result<()> {
    for split in [Split::Train, Split::Validation, Split::Test] {
        check_split_against_model(cfg, split).map_err(|e| mismatch_as_config(e, split.key()))?;
    }
    Ok(())
}

/// A mismatch between the data's components and the model (a component an Input or output
/// needs is missing, or has another shape) is a config error at the split's key (exit code 2):
/// the config names both sides.
fn mismatch_as_config(e: KilnError, key: &str) -> KilnError {
    let message = match e {
        KilnError::Shape(m) => m,
        KilnError::Data(kiln_data::DataError::InvalidArgument(m)) => m,
        other => return other,
    };
    let (key, message) = match message.split_once(": ") {
        Some((k, rest)) if k.starts_with(key) => (k.to_string(), rest.to_string()),
        _ => (key.to_string(), message),
    };
    KilnError::config(key, message)
}

/// [`check_pipelines_against_model`] for one split.
fn check_split_against_model(cfg: &RunConfig, split: Split) -> Result<()> {
    let Some(p) = split.table(cfg) else {
        return Ok(());
    };
    let Some(first) = pipelines::first_example(cfg, split)? else {
        return Err(KilnError::Shape(format!(
            "{}: the pipeline yields no examples; check files, skip and take",
            split.key()
        )));
    };
    // One Input takes the `x` component; several take the components named like them.
    let fed: Vec<(String, String, &[usize])> = match crate::batch::input_components(&cfg.model) {
        None => vec![(
            crate::batch::FEATURES.to_string(),
            p.x_name().to_string(),
            cfg.model.input_shape(),
        )],
        Some(names) => names
            .into_iter()
            .zip(cfg.model.inputs())
            .map(|(n, (_, shape))| (n.clone(), n, shape.as_slice()))
            .collect(),
    };
    for (component, shown, shape) in fed {
        let x = first.require(&component)?;
        if x.len() != shape.iter().product::<usize>() {
            return Err(KilnError::Shape(format!(
                "{}: examples of component \"{shown}\" have shape {} ({}) but the model's \
                     Input expects {}; {}",
                split.key(),
                crate::model::keras_shape(x.shape()),
                x.dtype(),
                crate::model::keras_shape(shape),
                pipelines::shape_fix(p, split.key(), &component, shape)
            )));
        }
    }
    pipelines::check_mix_labels(p, &first, split.key())?;
    check_first_labels(cfg, first, split.key())?;
    Ok(())
}

/// The resolved config (with `adapt` statistics), the config the pipelines are built from
/// (each worker's own cache files) and the train, validation and test datasets, checked
/// against the model.
type Inputs = (
    RunConfig,
    RunConfig,
    Dataset,
    Option<Dataset>,
    Option<Dataset>,
);

/// Builds [`Inputs`] for `cfg`.
///
/// # Errors
/// Data, config and shape errors of the pipelines and of their first examples.
fn input_datasets(cfg: &RunConfig) -> Result<Inputs> {
    if cfg.data.uses_pipelines() {
        // adapt runs first: its statistics go into the resolved config and the pipelines.
        let resolved = pipelines::adapt(cfg)?;
        check_pipelines_against_model(&resolved)?;
        // Several workers (mpirun) must not share cache files.
        let inputs = match crate::distribute::world::launched().filter(|w| w.size > 1) {
            Some(w) => crate::pipeline::shard::per_worker_caches(&resolved, w),
            None => resolved.clone(),
        };
        let validation = match (
            &inputs.data.validation,
            inputs.fit.validation_data.as_deref(),
        ) {
            (Some(_), _) => Some(pipelines::build(&inputs, Split::Validation)?),
            (None, Some("test")) => Some(pipelines::build(&inputs, Split::Test)?),
            _ => None,
        };
        let train = pipelines::build(&inputs, Split::Train)?;
        let test = match inputs.data.test {
            Some(_) => Some(pipelines::build(&inputs, Split::Test)?),
            None => None,
        };
        Ok((resolved, inputs, train, validation, test))
    } else {
        // A model Normalization with adapt = true needs [data.train] as a pipeline: adapt
        // says so (and leaves other configs as they are).
        pipelines::adapt(cfg)?;
        let (train, validation, test) = array_pipelines(cfg)?;
        Ok((cfg.clone(), cfg.clone(), train, validation, Some(test)))
    }
}

/// The first `examples` training examples of the run in `run_dir` as the model receives them
/// (the run's preprocessing applied), flattened in Keras' layout: TensorFlow Lite's
/// "representative dataset" for calibrating a full-integer model. Returns the values and the
/// number of examples (fewer when the training data is smaller).
///
/// # Errors
/// As [`load_run`]'s config, the pipeline's errors, and a model with several inputs
/// ([`KilnError::Config`]).
pub fn representative_set(run_dir: &Path, examples: usize) -> Result<(Vec<f32>, usize)> {
    let dir = RunDir::open(run_dir)?;
    let cfg = RunConfig::load(&dir.config())?;
    if cfg.model.inputs().len() != 1 {
        return Err(KilnError::config(
            "--quantization",
            "full_integer calibrates a model with one Input; this one has several",
        ));
    }
    let (_, _, train, _, _) = input_datasets(&cfg)?;
    let per: usize = cfg.model.input_shape().iter().product();
    let mut values = Vec::with_capacity(examples * per);
    for element in train.iter() {
        let element = element?;
        let Some(x) = element.get(crate::batch::FEATURES) else {
            continue;
        };
        values.extend(x.data().try_to_f32()?);
        if values.len() >= examples * per {
            break;
        }
    }
    values.truncate(examples * per);
    let n = values.len() / per.max(1);
    Ok((values, n))
}

/// Removes `dir` when it holds nothing but its lock file.
/// Removes the empty folders from `dir`'s parent up to `top` (which this call created).
fn remove_empty_up_to(dir: &Path, top: &Path) {
    for a in dir.ancestors().skip(1) {
        if !a.starts_with(top) || std::fs::remove_dir(a).is_err() {
            break;
        }
    }
}

fn remove_if_only_lock(dir: &Path) {
    let only_lock = std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .all(|e| e.file_name() == crate::run_dir::LOCK_FILE)
    });
    if only_lock {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A model with several outputs reads each output's labels from a named component of
/// `[data.train]`-style pipelines, and trains on one device (the default strategy).
///
/// # Errors
/// [`KilnError::Config`] naming `data` or `distribute.strategy`.
fn check_several_outputs(cfg: &RunConfig) -> Result<()> {
    if !cfg.model.has_several_outputs() {
        return Ok(());
    }
    let names = cfg.model.output_names();
    if !cfg.data.uses_pipelines() {
        return Err(KilnError::config(
            "data",
            format!(
                "the model has several outputs {names:?}, whose labels come from the batch \
                 components named like them: describe the data as pipelines \
                 ([data.train] with NPY, CSV or TFRecord components named {names:?})"
            ),
        ));
    }
    if cfg.distribute.strategy != crate::config::StrategyKind::OneDevice {
        return Err(KilnError::config(
            "distribute.strategy",
            format!(
                "a model with several outputs trains with the default strategy (one device) \
                 in this version; \"{}\" does not combine per-output losses and metrics yet",
                cfg.distribute.strategy.name()
            ),
        ));
    }
    Ok(())
}

/// The first example's labels go through the conversion every batch goes through, so that
/// labels that do not fit the outputs and losses (their shape, a class id outside `[0,
/// units)`) are refused before anything is written, not at the first step.
///
/// # Errors
/// [`KilnError::Shape`] naming the table (`data.train`) and the labels.
fn check_first_labels(cfg: &RunConfig, first: kiln_data::Element, key: &str) -> Result<()> {
    let mut one = kiln_data::Element::new();
    for (name, a) in first.iter() {
        let mut shape = vec![1];
        shape.extend_from_slice(a.shape());
        one.insert(name, a.clone().reshape(shape)?);
    }
    match crate::batch::to_device(&one, &cfg.model, &cfg.compile, &Device::flex()) {
        Ok(_) => Ok(()),
        Err(e) => Err(KilnError::Shape(format!(
            "{key}: the first example does not fit the model: {}",
            e.to_string()
                .replace("example 0 of the batch", "the first example")
        ))),
    }
}

/// Loads a run directory's config (with `overrides`, e.g. another `data_dir`) and model.
///
/// # Errors
/// [`KilnError::MissingData`] when `run_dir` is not a run directory; config and weights errors.
pub fn load_run(
    run_dir: &Path,
    overrides: &Overrides,
    device: Device,
) -> Result<(RunConfig, Model)> {
    let dir = RunDir::open(run_dir)?;
    let mut cfg = RunConfig::load(&dir.config())?;
    cfg.apply(overrides)?;
    let mut model = Model::from_weights(
        &cfg.name,
        cfg.model.clone(),
        cfg.compile.clone(),
        &dir.weights(),
        device,
    )?;
    model.set_check_numerics(cfg.fit.check_numerics);
    load_parts(&cfg, &dir, &mut model)?;
    Ok((cfg, model))
}

/// A custom-step run's parts (weights from `part-<name>.safetensors`) and its step, when this
/// binary has it registered.
fn load_parts(cfg: &RunConfig, dir: &RunDir, model: &mut Model) -> Result<()> {
    for part in &cfg.parts {
        model.add_part(part.clone())?;
        model.load_part_weights(&part.name, &dir.part_weights(&part.name))?;
    }
    if let Some(step) = cfg.train_step.as_deref()
        && let Ok(step) = crate::step::custom::train_step_named(step)
    {
        model.set_train_step(step);
    }
    Ok(())
}

/// What `evaluate` measured on the test split.
#[derive(Debug)]
pub struct Evaluation {
    /// Loss and metrics.
    pub logs: Logs,
    /// Predicted class (argmax of the output) per test example, in file order.
    pub predicted: Vec<usize>,
}

/// Evaluates a trained run on its test split (Keras' `model.evaluate`).
///
/// # Errors
/// As [`load_run`], plus data errors.
pub fn evaluate(run_dir: &Path, overrides: &Overrides, device: Device) -> Result<Evaluation> {
    let (cfg, model) = load_run(run_dir, overrides, device)?;
    if let Some(step) = &cfg.train_step
        && !model.has_train_step()
    {
        // Its losses are the step's: the compiled loss would measure something else.
        crate::step::custom::train_step_named(step)?;
    }
    let test = if cfg.data.uses_pipelines() {
        if cfg.data.test.is_none() {
            return Err(KilnError::config(
                "data.test",
                "kiln evaluate needs a [data.test] table in the run's config",
            ));
        }
        pipelines::build(&cfg, Split::Test)?
    } else {
        let data = load_idx(&cfg.data)?;
        pipeline(data.test_x, Some(data.test_y), &cfg, false)?
    };
    let logs = model.evaluate(&test)?;
    let (outputs, units) = model.predict(&test)?;
    // A model with several outputs: the class of the first output (its first columns).
    let first = cfg.model.units_of_output(0);
    let predicted = outputs
        .chunks_exact(units)
        .map(|row| argmax(&row[..first]))
        .collect();
    Ok(Evaluation { logs, predicted })
}

/// Class probabilities for the examples in `input` (IDX or NPY): `[examples, units]` row-major
/// and `units`. A file holding one example with the Input's shape (no batch axis) counts as one
/// example. The run's preprocessing applies: `data.rescale`, or with pipeline tables the `map`
/// ops of `[data.test]` (else `[data.train]`) that read only the features, in inference mode.
/// Outputs of a `from_logits` model go through softmax (sigmoid for `binary_crossentropy`), so
/// rows are probabilities either way.
///
/// # Errors
/// As [`load_run`], plus I/O, format and shape errors naming the input file.
pub fn predict(run_dir: &Path, input: &Path, device: Device) -> Result<Predictions> {
    let (cfg, model) = load_run(run_dir, &Overrides::default(), device)?;
    if let Some(names) = crate::batch::input_components(&cfg.model) {
        return Err(KilnError::config(
            "model.layers",
            format!(
                "kiln predict reads one file, for a model with one Input; this model has {} \
                 Inputs ({}): evaluate it with a [data.test] pipeline (kiln evaluate), or \
                 export it (--format onnx) and feed each input by name",
                names.len(),
                names.join(", ")
            ),
        ));
    }
    let x = read_inputs(input)?;
    let per: usize = cfg.model.input_shape().iter().product();
    let x = if x.len() == per && x.shape().first() != Some(&1) {
        let mut shape = vec![1];
        shape.extend_from_slice(x.shape());
        x.reshape(shape)?
    } else {
        x
    };
    if x.shape().first() == Some(&0) {
        return Err(KilnError::Shape(format!(
            "{}: the file holds 0 examples",
            input.display()
        )));
    }
    // With pipeline tables the map ops (crop, resize, reshape) may change the shape: the
    // batch conversion checks the result against the Input instead.
    let shape_changes = cfg.data.uses_pipelines();
    if x.shape().is_empty() || (!shape_changes && x.shape()[1..].iter().product::<usize>() != per) {
        return Err(KilnError::Shape(format!(
            "{}: examples of shape {:?} do not fit the model's Input {}",
            input.display(),
            x.shape().get(1..).unwrap_or(&[]),
            crate::model::keras_shape(cfg.model.input_shape())
        )));
    }
    let ds = if cfg.data.uses_pipelines() {
        pipelines::predict_dataset(&cfg, x)
    } else {
        pipeline(x, None, &cfg, false)
    }
    .map_err(|e| name_input(e, input))?;
    let (mut values, units) = model.predict(&ds).map_err(|e| name_input(e, input))?;
    // Each output's columns, with its loss: `from_logits` outputs become probabilities.
    let mut columns = Vec::with_capacity(units);
    let mut start = 0;
    let names = cfg.model.output_names();
    for (k, output) in names.iter().enumerate() {
        let width = cfg.model.units_of_output(k);
        let loss = cfg.compile.loss_of_output(k);
        for row in values.chunks_exact_mut(units) {
            to_probabilities(&mut row[start..start + width], loss);
        }
        let prefix = if names.len() > 1 { output } else { "class" };
        columns.extend((0..width).map(|c| format!("{prefix}_{c}")));
        start += width;
    }
    Ok(Predictions {
        values,
        units,
        columns,
    })
}

/// What [`predict`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Predictions {
    /// `[examples, units]` row-major (a model with several outputs: each example's outputs
    /// side by side, in `outputs` order).
    pub values: Vec<f32>,
    /// Values per example.
    pub units: usize,
    /// A name per column: `class_<k>` for a model with one output, `<output>_<k>` otherwise.
    pub columns: Vec<String>,
}

/// `from_logits` outputs as probabilities: softmax (sigmoid for `binary_crossentropy`).
fn to_probabilities(row: &mut [f32], loss: &crate::compile::LossSpec) {
    if !loss.from_logits {
        return;
    }
    // Only probability losses (and registered ones) take from_logits.
    match loss.family() {
        Family::Sigmoid => row.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
        Family::Softmax | Family::Values => softmax_in_place(row),
    }
}

/// Names `predict`'s input file in a shape or `check_numerics` error about its examples (the
/// example index is the record in the file: predict reads it in order).
fn name_input(err: KilnError, input: &Path) -> KilnError {
    let shown = input.display().to_string();
    match err {
        KilnError::NonFinite(mut n) => {
            n.file = Some(input.to_path_buf());
            KilnError::NonFinite(n)
        }
        KilnError::Shape(m) if !m.contains(&shown) => KilnError::Shape(format!("{shown}: {m}")),
        other => other,
    }
}

fn softmax_in_place(row: &mut [f32]) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let sum: f32 = row
        .iter_mut()
        .map(|v| {
            *v = (*v - max).exp();
            *v
        })
        .sum();
    row.iter_mut().for_each(|v| *v /= sum);
}
