//! The run's input pipelines, built with kiln-data the way a Keras user writes tf.data:
//! `from_tensor_slices -> shuffle -> batch -> map(preprocess, AUTOTUNE) -> prefetch`.

use std::path::Path;

use kiln_data::{Array, Dataset, Element};

use crate::batch::{FEATURES, LABELS};
use crate::config::{DataConfig, RunConfig};
use crate::error::{KilnError, Result};

/// The arrays of a dataset with train and test splits.
#[derive(Debug, Clone)]
pub struct Splits {
    /// Training features `[examples, ...]`.
    pub train_x: Array,
    /// Training labels `[examples]`.
    pub train_y: Array,
    /// Test features.
    pub test_x: Array,
    /// Test labels.
    pub test_y: Array,
}

/// How to get the data when its files are missing.
pub const DATA_HINT: &str = "run scripts/setup.sh (installs Debian's dataset-fashion-mnist) or pass --data-dir / set data.data_dir to a folder with the IDX files";

/// Checks that `data_dir` and a file exist, with a message that says how to get them.
fn require_file(cfg: &DataConfig, file: &str) -> Result<std::path::PathBuf> {
    if !cfg.data_dir.is_dir() {
        return Err(KilnError::MissingData(format!(
            "data directory {} does not exist; {DATA_HINT}",
            cfg.data_dir.display()
        )));
    }
    let path = cfg.path(file);
    if !path.is_file() {
        return Err(KilnError::MissingData(format!(
            "{} is missing; {DATA_HINT}",
            path.display()
        )));
    }
    Ok(path)
}

fn check_pair(x: &Array, y: &Array, xs: &str, ys: &str) -> Result<()> {
    let (nx, ny) = (x.shape()[0], y.shape()[0]);
    if nx != ny {
        return Err(KilnError::Shape(format!(
            "{xs} has {nx} examples but {ys} has {ny} labels; the files must come from the same split"
        )));
    }
    Ok(())
}

/// Reads the four IDX files named by `cfg`.
///
/// # Errors
/// [`KilnError::MissingData`] when a file is absent; [`KilnError::Data`] when one is truncated or
/// corrupt (naming the file and byte offset).
pub fn load_idx(cfg: &DataConfig) -> Result<Splits> {
    let read =
        |file: &str| -> Result<Array> { Ok(kiln_data::idx::read_idx(&require_file(cfg, file)?)?) };
    let s = Splits {
        train_x: read(&cfg.train_images)?,
        train_y: read(&cfg.train_labels)?,
        test_x: read(&cfg.test_images)?,
        test_y: read(&cfg.test_labels)?,
    };
    check_pair(&s.train_x, &s.train_y, &cfg.train_images, &cfg.train_labels)?;
    check_pair(&s.test_x, &s.test_y, &cfg.test_images, &cfg.test_labels)?;
    Ok(s)
}

/// Checks the arrays against the model before any training: each example must have the
/// Input's element count, and class labels must lie in `[0, units)`.
///
/// # Errors
/// [`KilnError::Shape`] naming the file, and for a bad label its record and byte offset (in the
/// decompressed IDX data).
pub fn check_against_model(splits: &Splits, cfg: &RunConfig) -> Result<()> {
    let d = &cfg.data;
    let per: usize = cfg.model.input_shape().iter().product();
    for (x, file) in [
        (&splits.train_x, &d.train_images),
        (&splits.test_x, &d.test_images),
    ] {
        let have: usize = x.shape().iter().skip(1).product();
        if x.shape().len() < 2 || have != per {
            return Err(KilnError::Shape(format!(
                "{}: examples have shape {} but the model's Input expects {}; is this an image file, and is Input's `shape` right?",
                d.path(file).display(),
                crate::model::keras_shape(x.shape().get(1..).unwrap_or(&[])),
                crate::model::keras_shape(cfg.model.input_shape())
            )));
        }
    }
    let units = cfg.model.output_units();
    for (y, file) in [
        (&splits.train_y, &d.train_labels),
        (&splits.test_y, &d.test_labels),
    ] {
        if !(y.dtype().is_integer() && y.shape().len() == 1) || units == 1 {
            continue;
        }
        if let Some((i, v)) = y
            .data()
            .to_i64()
            .into_iter()
            .enumerate()
            .find(|&(_, v)| v < 0 || v as usize >= units)
        {
            let header = 4 + 4 * y.shape().len();
            return Err(KilnError::Shape(format!(
                "{}: label {v} of record {i} (byte {} of the IDX data) is outside [0, {units}): the model's last layer has {units} units; set its `units` to the number of classes",
                d.path(file).display(),
                header + i * y.dtype().size()
            )));
        }
    }
    Ok(())
}

/// Reads model inputs for `predict`: NPY or IDX (gzip or raw), told by the first bytes
/// ([`kiln_data::array_file::read_array`]); pipes, `-` and `/dev/stdin` work.
///
/// # Errors
/// [`KilnError::Data`] naming the file.
pub fn read_inputs(path: &Path) -> Result<Array> {
    Ok(kiln_data::array_file::read_array(path)?)
}

/// Batch-level preprocessing: features to float32 times `rescale` (labels untouched).
fn preprocess(
    rescale: f32,
) -> impl Fn(Element) -> kiln_data::Result<Element> + Send + Sync + 'static {
    move |mut el: Element| {
        if let Some(x) = el.remove(FEATURES) {
            el.insert(FEATURES, x.to_f32_scaled(rescale));
        }
        Ok(el)
    }
}

/// `(x, y)` slices batched and preprocessed, optionally shuffled; the pipeline `fit`,
/// `evaluate` and `predict` consume.
pub fn pipeline(x: Array, y: Option<Array>, cfg: &RunConfig, shuffle: bool) -> Result<Dataset> {
    let n = x.shape()[0];
    // A batch larger than the data is the whole data (and allocates no more).
    let batch_size = cfg.fit.batch_size.min(n).max(1);
    let mut el = Element::new().with(FEATURES, x);
    if let Some(y) = y {
        el.insert(LABELS, y);
    }
    let mut ds = Dataset::from_tensor_slices(el)?;
    if shuffle {
        let buffer = cfg.data.shuffle_buffer_size.unwrap_or(n).max(1);
        ds = ds.shuffle(buffer, Some(cfg.seed), true);
    }
    Ok(ds
        .batch(batch_size, false)
        .map(preprocess(cfg.data.rescale as f32), cfg.data.parallelism())
        .prefetch(cfg.data.prefetch_buffer()))
}

/// Keras' `validation_split`: the last `fraction` of the examples, taken before shuffling.
/// Returns `(train, validation)` arrays.
pub fn split_last(x: &Array, y: &Array, fraction: f64) -> ((Array, Array), Option<(Array, Array)>) {
    let n = x.shape()[0];
    let at = ((n as f64) * (1.0 - fraction)).floor() as usize;
    if fraction <= 0.0 || at >= n {
        return ((x.clone(), y.clone()), None);
    }
    (
        (x.rows(0, at), y.rows(0, at)),
        Some((x.rows(at, n), y.rows(at, n))),
    )
}
