//! The data utilities of a pipeline: the `timeseries` source, `padded_batch`, and the
//! batch-level `mix_up` / `cut_mix` of the training pipeline.

use kiln_data::preprocess::MixOptions;
use kiln_data::{Buffer, DataError, Dataset, Element};

use super::resolve_files;
use crate::batch::{FEATURES, LABELS};
use crate::config::{PaddedBatchConfig, PipelineConfig, RunConfig};
use crate::error::{KilnError, Result};

/// The window arguments, as the errors of `timeseries_dataset_from_array` name them.
const WINDOW_KEYS: [&str; 5] = [
    "sequence_length",
    "sequence_stride",
    "sampling_rate",
    "start_index",
    "end_index",
];

/// `timeseries_dataset_from_array` over the data file (and the targets file) of `p`.
pub(super) fn timeseries_source(cfg: &RunConfig, p: &PipelineConfig, key: &str) -> Result<Dataset> {
    let files = resolve_files(cfg, p, key)?;
    let names = p.component_names();
    let mut arrays = files.iter().map(|f| kiln_data::npy::read_npy(f));
    let data = arrays
        .next()
        .ok_or_else(|| KilnError::config(format!("{key}.files"), "give the data .npy file"))??;
    let targets = arrays.next().transpose()?;
    let (x, y) = (
        names[0].as_str(),
        names.get(1).map_or(LABELS, String::as_str),
    );
    Dataset::timeseries_dataset_from_array(data, targets, (x, y), p.timeseries_options()).map_err(
        |e| {
            let msg = match e {
                DataError::InvalidArgument(m) | DataError::Shape(m) => m,
                other => other.to_string(),
            };
            // The messages start with the argument they are about.
            let arg = msg.split_whitespace().next().unwrap_or_default();
            let arg = if WINDOW_KEYS.contains(&arg) {
                arg
            } else {
                "files"
            };
            KilnError::config(format!("{key}.{arg}"), msg)
        },
    )
}

/// `batch` or `padded_batch` of the selected components.
pub(super) fn batch(ds: Dataset, p: &PipelineConfig, key: &str, size: usize) -> Result<Dataset> {
    Ok(match &p.padded_batch {
        None | Some(PaddedBatchConfig::On(false)) => ds.batch(size, p.drop_remainder),
        Some(_) => ds.padded_batch(
            size,
            p.padded_shapes(key)?,
            p.padding_values(key)?,
            p.drop_remainder,
        ),
    })
}

/// `mix_up` / `cut_mix` on the batches of the training pipeline (`x` and `y` of a model with
/// one input and one output).
pub(super) fn mix(ds: Dataset, cfg: &RunConfig, p: &PipelineConfig, key: &str) -> Result<Dataset> {
    let (name, m, cut) = match (&p.mix_up, &p.cut_mix) {
        (Some(m), _) => ("mix_up", m, false),
        (None, Some(m)) => ("cut_mix", m, true),
        (None, None) => return Ok(ds),
    };
    if crate::batch::input_components(&cfg.model).is_some() || cfg.model.has_several_outputs() {
        return Err(KilnError::config(
            format!("{key}.{name}"),
            "mixes the features and labels of a model with one input and one output; this \
             model has several",
        ));
    }
    let options = MixOptions {
        x: FEATURES.into(),
        y: LABELS.into(),
        alpha: m.alpha.unwrap_or(if cut { 0.25 } else { 0.2 }),
    };
    let seed = m.seed.unwrap_or(cfg.seed);
    Ok(if cut {
        ds.cut_mix(options, seed)
    } else {
        ds.mix_up(options, seed)
    })
}

/// `mix_up` / `cut_mix` blend one-hot labels: checks the training pipeline's first example
/// (`first`, components `x` and `y`) before training, so that integer class ids are a config
/// error at `key.mix_up` (exit code 2) rather than a data error at the first step.
///
/// # Errors
/// [`KilnError::Config`] naming `key.mix_up` / `key.cut_mix` and the fix.
pub(crate) fn check_mix_labels(p: &PipelineConfig, first: &Element, key: &str) -> Result<()> {
    let name = match (&p.mix_up, &p.cut_mix) {
        (Some(_), _) => "mix_up",
        (None, Some(_)) => "cut_mix",
        (None, None) => return Ok(()),
    };
    let Ok(y) = first.require(LABELS) else {
        return Ok(());
    };
    if y.shape().len() == 1 && matches!(y.data(), Buffer::F32(_) | Buffer::F64(_)) {
        return Ok(());
    }
    let label = p.y_name();
    let labels = match y.shape() {
        [] => format!("{} scalars (class ids)", y.dtype()),
        shape => format!(
            "{} of shape {}",
            y.dtype(),
            crate::model::keras_shape(shape)
        ),
    };
    Err(KilnError::config(
        format!("{key}.{name}"),
        format!(
            "{name} blends one-hot labels, but the labels \"{label}\" are {labels}; add {{ op = \
             \"one_hot\", component = \"{label}\", depth = <classes> }} (or category_encoding \
             with output_mode = \"one_hot\") to {key}.map, and use the loss \
             categorical_crossentropy"
        ),
    ))
}

/// How to make examples of `component` fit an Input of shape `want` (Keras' shape without the
/// batch axis): with `padded_batch` the padded shape must be the Input's.
pub(crate) fn shape_fix(p: &PipelineConfig, key: &str, component: &str, want: &[usize]) -> String {
    match &p.padded_batch {
        None | Some(PaddedBatchConfig::On(false)) => {
            "add a reshape or resize op, or change the Input's `shape`".into()
        }
        Some(_) => format!(
            "{key}.padded_batch pads the sequences to another length: set the Input's `shape` to \
             the padded shape, or pad to the Input's with {key}.padded_batch = {{ padded_shapes \
             = {{ {component} = {want:?} }} }}"
        ),
    }
}
