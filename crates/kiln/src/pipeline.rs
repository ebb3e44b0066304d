//! The configured tf.data pipelines (`[data.train]`, `[data.validation]`, `[data.test]`)
//! built with kiln-data, plus `adapt` for `normalize` ops and the pipeline benchmark behind
//! `kiln data bench`.
//!
//! Order of a pipeline, whatever the order of its keys (tf.data's performance guide):
//! source → (tfrecord: `parse_example`) → `skip` → `take` → `map` ops before the first random
//! one → `cache` → `shuffle` → the remaining `map` ops → select `x` and `y` (renamed to the
//! model's `x` / `y`) → `batch` → `prefetch`. Random ops (`random_flip`, `random_crop`) are
//! active in the training pipeline only; validation, test and predict run them in inference
//! mode (no flip, central crop), as Keras' augmentation layers do outside `fit`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use kiln_data::sources::{
    ColorMode, ImageFolderOptions, LabelMode, MakeCsvOptions, TextFolderOptions,
};
use kiln_data::tfrecord::ExampleSpec;
use kiln_data::{
    AUTOTUNE, Array, BufferSize, CacheTarget, Cardinality, Compression, DType, DataError, Dataset,
    Element, Parallelism, PipelineStats, Preprocess,
};

use crate::batch::{FEATURES, LABELS, SAMPLE_WEIGHT};
use crate::config::pipeline_values::{color_mode, compression, feature_spec, record_default};
use crate::config::{ColumnRef, OpConfig, PipelineConfig, RunConfig, Source};
use crate::error::{KilnError, Result};

/// Which pipeline table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// `[data.train]`.
    Train,
    /// `[data.validation]`.
    Validation,
    /// `[data.test]`.
    Test,
}

impl Split {
    /// The table's dotted key (`data.train`, …).
    pub fn key(self) -> &'static str {
        match self {
            Split::Train => "data.train",
            Split::Validation => "data.validation",
            Split::Test => "data.test",
        }
    }

    /// The table of `cfg`, if present.
    pub fn table(self, cfg: &RunConfig) -> Option<&PipelineConfig> {
        match self {
            Split::Train => cfg.data.train.as_ref(),
            Split::Validation => cfg.data.validation.as_ref(),
            Split::Test => cfg.data.test.as_ref(),
        }
    }

    fn table_mut(self, cfg: &mut RunConfig) -> Option<&mut PipelineConfig> {
        match self {
            Split::Train => cfg.data.train.as_mut(),
            Split::Validation => cfg.data.validation.as_mut(),
            Split::Test => cfg.data.test.as_mut(),
        }
    }
}

impl std::str::FromStr for Split {
    type Err = KilnError;

    fn from_str(s: &str) -> Result<Split> {
        match s {
            "train" => Ok(Split::Train),
            "validation" => Ok(Split::Validation),
            "test" => Ok(Split::Test),
            other => Err(KilnError::config(
                "--split",
                format!("unknown split \"{other}\"; allowed: train, validation, test"),
            )),
        }
    }
}

/// True when `pattern` has glob characters.
fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

/// `data_dir / pattern` (or `pattern` when absolute or a URL: `s3://`, `file://`).
fn under_data_dir(cfg: &RunConfig, pattern: &str) -> PathBuf {
    let p = Path::new(pattern);
    if p.is_absolute() || kiln_data::storage::scheme(pattern).is_some() {
        p.to_path_buf()
    } else {
        cfg.data.data_dir.join(p)
    }
}

/// The files of a pipeline: each entry of `files` under `data_dir`, globs expanded (sorted).
fn resolve_files(cfg: &RunConfig, p: &PipelineConfig, key: &str) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for (i, pattern) in p.files.to_vec().iter().enumerate() {
        let path = under_data_dir(cfg, pattern);
        if is_glob(pattern) {
            let matched =
                kiln_data::sources::matching_files_with(&path.to_string_lossy(), p.include_hidden)
                    .map_err(|e| KilnError::MissingData(format!("{key}.files[{i}]: {e}")))?;
            out.extend(matched);
        } else if path.exists() || kiln_data::storage::scheme(&path.to_string_lossy()).is_some() {
            // A URL (s3://, or a data_dir that is one) is checked when it is read.
            out.push(path);
        } else {
            return Err(KilnError::MissingData(format!(
                "{key}.files[{i}]: {} does not exist (relative files are inside data.data_dir = \
                 {}; --data-dir overrides it)",
                path.display(),
                cfg.data.data_dir.display()
            )));
        }
    }
    Ok(out)
}

/// Slices one array per file (idx / npy) along the first axis.
fn array_source(cfg: &RunConfig, p: &PipelineConfig, key: &str) -> Result<Dataset> {
    let files = resolve_files(cfg, p, key)?;
    let names = p.component_names();
    if files.len() != names.len() {
        return Err(KilnError::config(
            format!("{key}.components"),
            format!(
                "{} files matched but {} component names are given; name one component per file",
                files.len(),
                names.len()
            ),
        ));
    }
    let mut element = Element::new();
    let mut first: Option<(usize, &Path)> = None;
    for (path, name) in files.iter().zip(&names) {
        let a = match p.source {
            Source::Npy => kiln_data::npy::read_npy(path)?,
            _ => kiln_data::idx::read_idx(path)?,
        };
        let n = a.shape().first().copied().unwrap_or(0);
        match first {
            Some((m, other)) if m != n => {
                return Err(KilnError::Shape(format!(
                    "{key}: {} has {n} examples but {} has {m}; the files of one pipeline must \
                     hold the same examples",
                    path.display(),
                    other.display()
                )));
            }
            None => first = Some((n, path)),
            _ => {}
        }
        element.insert(name.as_str(), a);
    }
    Ok(Dataset::from_tensor_slices(element)?)
}

/// `make_csv_dataset` over each `files` pattern, one element per row; with `shard`, over
/// this worker's files.
fn csv_source(
    cfg: &RunConfig,
    p: &PipelineConfig,
    key: &str,
    shard: Option<Shard>,
) -> Result<Dataset> {
    let resolved = resolve_files(cfg, p, key)?; // clear errors for missing files
    let options = |select: Option<Vec<String>>, label: Option<String>| -> Result<MakeCsvOptions> {
        Ok(MakeCsvOptions {
            header: p.header.unwrap_or(true),
            column_names: p.column_names.clone(),
            label_name: label,
            select_columns: select,
            column_defaults: match &p.column_defaults {
                Some(d) => Some(
                    d.iter()
                        .enumerate()
                        .map(|(i, v)| {
                            record_default(v).map_err(|m| {
                                KilnError::config(format!("{key}.column_defaults[{i}]"), m)
                            })
                        })
                        .collect::<Result<_>>()?,
                ),
                None => None,
            },
            field_delim: p.field_delim.as_deref().map_or(b',', |d| d.as_bytes()[0]),
            na_value: p.na_value.clone().unwrap_or_default(),
            num_epochs: Some(1),
            shuffle: false,
            prefetch_buffer_size: 0,
            compression_type: compression_of(p, key)?,
            ignore_errors: p.ignore_errors,
            include_hidden: p.include_hidden,
            ..MakeCsvOptions::default()
        })
    };
    let patterns: Vec<String> = match shard {
        Some(s) => s
            .keep(resolved)
            .iter()
            .map(|f| f.to_string_lossy().into_owned())
            .collect(),
        None => p
            .files
            .to_vec()
            .iter()
            .map(|f| under_data_dir(cfg, f).to_string_lossy().into_owned())
            .collect(),
    };
    let mut out: Option<Dataset> = None;
    for pattern in patterns {
        let select = match &p.select_cols {
            None => None,
            Some(cols) => {
                // Indices name columns of the file: read the header once to map them.
                let needs_names = cols.iter().any(|c| matches!(c, ColumnRef::Index(_)));
                let names: Vec<String> = if needs_names {
                    // Types inferred (not column_defaults, which are per selected column).
                    let probe_options = MakeCsvOptions {
                        column_defaults: None,
                        ..options(None, None)?
                    };
                    let probe = Dataset::make_csv_dataset(&pattern, 1, probe_options)?;
                    match probe.iter().next() {
                        Some(e) => e?.names().map(str::to_string).collect(),
                        None => Vec::new(),
                    }
                } else {
                    Vec::new()
                };
                let mut selected = Vec::new();
                for (i, c) in cols.iter().enumerate() {
                    selected.push(match c {
                        ColumnRef::Name(n) => n.clone(),
                        ColumnRef::Index(j) => names.get(*j).cloned().ok_or_else(|| {
                            KilnError::config(
                                format!("{key}.select_cols[{i}]"),
                                format!("column {j} does not exist; the columns are {names:?}"),
                            )
                        })?,
                    });
                }
                Some(selected)
            }
        };
        let ds = Dataset::make_csv_dataset(&pattern, 1, options(select, p.label_name.clone())?)
            .map_err(|e| KilnError::config(key, e.to_string()))?
            .unbatch();
        out = Some(match out {
            None => ds,
            Some(prev) => prev.concatenate(ds),
        });
    }
    out.ok_or_else(|| KilnError::config(format!("{key}.files"), "no files given"))
}

/// The table's `compression_type` (none when absent).
fn compression_of(p: &PipelineConfig, key: &str) -> Result<Compression> {
    match &p.compression_type {
        Some(c) => {
            compression(c).map_err(|m| KilnError::config(format!("{key}.compression_type"), m))
        }
        None => Ok(Compression::None),
    }
}

/// The pipeline's source, before any transformation; with `shard`, this worker's files only.
fn source(cfg: &RunConfig, p: &PipelineConfig, key: &str, shard: Option<Shard>) -> Result<Dataset> {
    let files = |cfg, p, key| -> Result<Vec<PathBuf>> {
        let all = resolve_files(cfg, p, key)?;
        Ok(match shard {
            Some(s) => s.keep(all),
            None => all,
        })
    };
    Ok(match p.source {
        Source::Idx | Source::Npy => array_source(cfg, p, key)?,
        Source::Csv => csv_source(cfg, p, key, shard)?,
        Source::Tfrecord => {
            let files = files(cfg, p, key)?;
            let c = compression_of(p, key)?;
            let mut spec = ExampleSpec::new();
            for (name, f) in p.features.iter().flatten() {
                spec = spec.with(
                    name.as_str(),
                    feature_spec(f)
                        .map_err(|m| KilnError::config(format!("{key}.features.{name}"), m))?,
                );
            }
            Dataset::tfrecord(files, c).parse_example(spec, p.parallelism())
        }
        Source::Text => {
            Dataset::text_line_dataset_with(files(cfg, p, key)?, compression_of(p, key)?)
        }
        Source::ImageFolder => {
            let dir = resolve_files(cfg, p, key)?
                .into_iter()
                .next()
                .ok_or_else(|| KilnError::config(format!("{key}.files"), "no directory given"))?;
            let options = ImageFolderOptions {
                class_names: p.class_names.clone(),
                color_mode: match &p.color_mode {
                    Some(m) => color_mode(m)
                        .map_err(|e| KilnError::config(format!("{key}.color_mode"), e))?,
                    None => ColorMode::Rgb,
                },
                image_size: p.image_size.map(|[h, w]| (h, w)),
                shuffle: false,
                num_parallel_calls: p.parallelism(),
                ignore_errors: p.ignore_errors,
                include_hidden: p.include_hidden,
                ..ImageFolderOptions::default()
            };
            Dataset::image_dataset_from_directory(&dir, options)?
        }
        Source::TextFolder => {
            let dir = resolve_files(cfg, p, key)?
                .into_iter()
                .next()
                .ok_or_else(|| KilnError::config(format!("{key}.files"), "no directory given"))?;
            let label_mode = match &p.label_mode {
                Some(m) => m.parse().map_err(|e: DataError| {
                    KilnError::config(format!("{key}.label_mode"), e.to_string())
                })?,
                None => LabelMode::Int,
            };
            let options = TextFolderOptions {
                class_names: p.class_names.clone(),
                label_mode,
                max_length: p.max_length,
                include_hidden: p.include_hidden,
                ..TextFolderOptions::default()
            };
            Dataset::text_dataset_from_directory(&dir, options)
                .map_err(|e| KilnError::config(format!("{key}.files"), e.to_string()))?
        }
        Source::Timeseries => data_utils::timeseries_source(cfg, p, key)?,
    })
}

/// The kiln-data ops of `ops` (keys `key.map[offset + i]`).
fn to_ops(
    p: &PipelineConfig,
    ops: &[OpConfig],
    offset: usize,
    key: &str,
) -> Result<Vec<Preprocess>> {
    ops.iter()
        .enumerate()
        .map(|(i, op)| op.to_preprocess(p.x_name(), &format!("{key}.map[{}]", offset + i)))
        .collect()
}

/// What [`build_with`] leaves out.
#[derive(Debug, Clone, Copy, Default)]
struct Parts {
    /// Stop after this many `map` ops (and skip cache, shuffle, select, batch, prefetch).
    ops_only: Option<usize>,
    /// Leave out `cache` and `shuffle` (for a quick look at the first element).
    no_cache_no_shuffle: bool,
    /// Read only this worker's files, batched at its batch size.
    shard: Option<Shard>,
}

/// One worker's part of a pipeline whose files are split across workers (tf.data's
/// `AutoShardPolicy.FILE`): worker `index` of `count` reads files `index`, `index + count`,
/// … of the sorted file list, and batches them at `batch_size` (its part of the global
/// batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This worker's rank.
    pub index: usize,
    /// Number of workers.
    pub count: usize,
    /// This worker's batch size.
    pub batch_size: usize,
}

impl Shard {
    fn keep<T>(&self, files: Vec<T>) -> Vec<T> {
        files
            .into_iter()
            .skip(self.index)
            .step_by(self.count.max(1))
            .collect()
    }
}

fn build_with(cfg: &RunConfig, split: Split, parts: Parts) -> Result<Dataset> {
    let key = split.key();
    let p = split
        .table(cfg)
        .ok_or_else(|| KilnError::config(key, format!("this run has no [{key}] table")))?;
    let training = split == Split::Train;
    let par = p.parallelism();
    let deterministic = p.deterministic.unwrap_or(true);
    if p.repeat == Some(-1) && !(training && cfg.fit.steps_per_epoch.is_some()) {
        return Err(KilnError::config(
            format!("{key}.repeat"),
            if training {
                "-1 repeats forever: set fit.steps_per_epoch so that an epoch ends".to_string()
            } else {
                format!("-1 repeats forever, so {key} would never end; give a count")
            },
        ));
    }
    // `ignore_errors` drops failed examples right after the source (so that `skip` and
    // `take` count good ones) and after each group of `map` ops.
    let skip_errors = |ds: Dataset| {
        if p.ignore_errors {
            ds.ignore_errors()
        } else {
            ds
        }
    };
    let mut ds = skip_errors(source(cfg, p, key, parts.shard)?);
    if let Some(n) = p.skip {
        ds = ds.skip(n);
    }
    if let Some(n) = p.take {
        ds = ds.take(n);
    }
    let run_ops = |ds: Dataset, ops: Vec<Preprocess>| -> Dataset {
        let some = !ops.is_empty();
        let ds = if training {
            ds.preprocess_with(ops, cfg.seed, par, deterministic)
        } else {
            ds.map_with(
                move |e| kiln_data::preprocess::apply_all(&ops, e, None),
                par,
                deterministic,
            )
        };
        if some { skip_errors(ds) } else { ds }
    };
    if let Some(n) = parts.ops_only {
        let ops = to_ops(p, &p.map[..n], 0, key)?;
        return Ok(run_ops(ds, ops));
    }
    let split_at = p.random_from();
    let (before, after) = p.map.split_at(split_at);
    ds = run_ops(ds, to_ops(p, before, 0, key)?);
    if !parts.no_cache_no_shuffle {
        match p.cache.as_deref() {
            None => {}
            Some("memory") => ds = ds.cache(CacheTarget::Memory),
            Some(path) => ds = ds.cache(CacheTarget::File(PathBuf::from(path))),
        }
        if let Some(s) = &p.shuffle {
            ds = ds.shuffle(
                s.buffer_size,
                Some(s.seed.unwrap_or(cfg.seed)),
                s.reshuffle_each_iteration,
            );
        }
        match p.repeat {
            None | Some(1) => {}
            Some(n) if n < 0 => ds = ds.repeat(None),
            Some(n) => ds = ds.repeat(Some(n as u64)),
        }
    }
    ds = run_ops(ds, to_ops(p, after, split_at, key)?);
    let (x, y) = (p.x_name().to_string(), p.y_name().to_string());
    let labels_optional = cfg.train_step.is_some() && p.y.is_none();
    // A model with several Inputs takes the components named like them (Keras' dict
    // inputs, `model.fit({"a": ..., "b": ...}, y)`).
    let input_names = crate::batch::input_components(&cfg.model);
    // A model with several outputs takes each output's labels from the component named like
    // it (Keras' dict labels); `y` then does not apply.
    let output_names = cfg
        .model
        .has_several_outputs()
        .then(|| cfg.model.output_names());
    let select = move |mut e: Element| -> kiln_data::Result<Element> {
        let present: Vec<String> = e.names().map(str::to_string).collect();
        let missing = |which: &str, name: &str| {
            DataError::InvalidArgument(format!(
                "{key}.{which}: the elements have no component \"{name}\" (components: \
                 {present:?}); set {key}.{which} to the model's {}",
                if which == "x" { "features" } else { "labels" }
            ))
        };
        let mut out = Element::new();
        match &input_names {
            None => out = out.with(FEATURES, e.remove(&x).ok_or_else(|| missing("x", &x))?),
            Some(names) => {
                for name in names {
                    let v = e.remove(name).ok_or_else(|| {
                        DataError::InvalidArgument(format!(
                            "{key}: the model's Input \"{name}\" takes the component of that \
                             name, which the elements lack (components: {present:?}); name \
                             the Inputs after the components, or rename them with a map op"
                        ))
                    })?;
                    out = out.with(name.as_str(), v);
                }
            }
        }
        match &output_names {
            None => match e.remove(&y) {
                Some(v) => out = out.with(LABELS, v),
                // A custom train step may train on features alone (Keras' `vae.fit(x)`).
                None if labels_optional => {}
                None => return Err(missing("y", &y)),
            },
            Some(names) => {
                for name in names {
                    let v = e.remove(name).ok_or_else(|| {
                        DataError::InvalidArgument(format!(
                            "{key}: the model's output \"{name}\" takes its labels from the \
                             component of that name, which the elements lack (components: \
                             {present:?}); name the outputs after the label components"
                        ))
                    })?;
                    out = out.with(name.as_str(), v);
                }
            }
        }
        // Keras' `(x, y, sample_weight)`: a component of that name weighs each example's loss.
        if let Some(w) = e.remove(SAMPLE_WEIGHT) {
            out = out.with(SAMPLE_WEIGHT, w);
        }
        Ok(out)
    };
    ds = ds.map(select, Parallelism::Sequential);
    let mut batch_size = match parts.shard {
        Some(s) => s.batch_size,
        None => p.batch_size.unwrap_or(cfg.fit.batch_size),
    }
    .max(1);
    if let Cardinality::Finite(n) = ds.cardinality() {
        // A batch larger than the data is the whole data (and allocates no more).
        batch_size = batch_size.min(n.max(1) as usize);
    }
    ds = data_utils::batch(ds, p, key, batch_size)?;
    if training && !parts.no_cache_no_shuffle {
        ds = data_utils::mix(ds, cfg, p, key)?;
    }
    Ok(ds.prefetch(p.prefetch.map_or(BufferSize::Autotune, BufferSize::Fixed)))
}

/// The batched pipeline of `split`, as `fit` / `evaluate` consume it (components `x`, `y`).
///
/// # Errors
/// [`KilnError::Config`] when the table is absent or a `normalize` op still needs `adapt`
/// (call [`adapt`] first); [`KilnError::MissingData`] for missing files; data errors from
/// reading array files or CSV headers. Errors in the data itself come while iterating.
pub fn build(cfg: &RunConfig, split: Split) -> Result<Dataset> {
    build_with(cfg, split, Parts::default())
}

/// [`build`] for one worker of a multi-worker job that splits the files (see [`Shard`]).
///
/// # Errors
/// As [`build`].
pub fn build_shard(cfg: &RunConfig, split: Split, shard: Shard) -> Result<Dataset> {
    let parts = Parts {
        shard: Some(shard),
        ..Parts::default()
    };
    build_with(cfg, split, parts)
}

/// The number of files `split`'s pipeline reads record by record, which workers can split
/// among themselves (`tfrecord`, `text` and `csv` sources, globs expanded); `None` for the
/// other sources (IDX and NPY files hold one component each; an image folder is one
/// directory) and for a split without a table.
///
/// # Errors
/// [`KilnError::MissingData`] / [`KilnError::Config`] for files that do not exist.
pub fn shardable_files(cfg: &RunConfig, split: Split) -> Result<Option<usize>> {
    let Some(p) = split.table(cfg) else {
        return Ok(None);
    };
    Ok(match p.source {
        Source::Tfrecord | Source::Text | Source::Csv => {
            Some(resolve_files(cfg, p, split.key())?.len())
        }
        _ => None,
    })
}

/// The first element of `split` before `cache`, `shuffle` and batching, components `x`, `y`:
/// `kiln train` checks it against the model before training.
///
/// # Errors
/// As [`build`], plus the first element's error.
pub fn first_example(cfg: &RunConfig, split: Split) -> Result<Option<Element>> {
    let parts = Parts {
        no_cache_no_shuffle: true,
        ..Parts::default()
    };
    let ds = build_with(cfg, split, parts)?;
    let first = ds
        .iter()
        .next()
        .transpose()
        .map_err(|e| op_error(cfg, split, e))?;
    Ok(first.map(|batch| {
        // The batch of one (or more) elements: keep its first row.
        let mut out = Element::new();
        for (name, a) in batch.iter() {
            out.insert(name, a.row(0));
        }
        out
    }))
}

/// A `map` op's error on the first example (strings given to a numeric op, numbers to a
/// string op, values that do not fit) as a config error at the op's key, `data.train.map[2]`:
/// the fix is in the config. Other errors pass through.
fn op_error(cfg: &RunConfig, split: Split, e: DataError) -> KilnError {
    let DataError::Preprocess {
        op,
        component,
        message,
    } = &e
    else {
        return e.into();
    };
    let Some(p) = split.table(cfg) else {
        return e.into();
    };
    let at = p
        .map
        .iter()
        .position(|o| o.name() == op && o.component().unwrap_or(p.x_name()) == component.as_str());
    match at {
        Some(i) => KilnError::config(
            format!("{}.map[{i}]", split.key()),
            format!("{op} on component \"{component}\": {message}"),
        ),
        None => e.into(),
    }
}

/// A copy of `cfg` whose ops with `adapt = true` hold what they learned from the training
/// data (Keras' `layer.adapt(train_ds)`): `normalize` its statistics, `discretization` its bin
/// boundaries, `string_lookup`, `integer_lookup` and `text_vectorization` their vocabularies
/// (and `tf_idf` weights). Each is computed over `[data.train]` up to that op (source, `skip`,
/// `take`, the ops before it). Validation and test ops with `adapt = true` take what the
/// training op of the same name on the same component learned, since Keras adapts once, on
/// the training data. Vocabulary files (`vocabulary = "words.txt"`, under `data.data_dir`) are
/// read here into lists. The copy is what the run directory records, so `evaluate`, `predict`
/// and `serve` apply the same numbers and vocabularies.
///
/// # Errors
/// As [`build`]; [`KilnError::Config`] for a vocabulary file that cannot be read, an adapt
/// over no data (naming the op's key), or a validation / test op with `adapt = true` and no
/// adapted training op like it; data errors met while adapting.
pub fn adapt(cfg: &RunConfig) -> Result<RunConfig> {
    let mut out = cfg.clone();
    read_vocabulary_files(&mut out)?;
    // (component, op name, adapted op) of each adapted training op, in order.
    let mut adapted: Vec<(String, &'static str, OpConfig)> = Vec::new();
    let ops = cfg.data.train.as_ref().map_or(0, |p| p.map.len());
    for i in 0..ops {
        let train = out.data.train.as_ref().expect("counted above");
        let op = &train.map[i];
        if !op.needs_adapt() {
            continue;
        }
        let component = op.component().unwrap_or(train.x_name()).to_string();
        let parts = Parts {
            ops_only: Some(i),
            ..Parts::default()
        };
        let ds = build_with(&out, Split::Train, parts)?;
        let learned = op.adapt_over(&format!("data.train.map[{i}]"), &ds, &component)?;
        let train = out.data.train.as_mut().expect("counted above");
        train.map[i] = learned.clone();
        adapted.push((component, learned.name(), learned));
    }
    for split in [Split::Validation, Split::Test] {
        let key = split.key();
        let Some(p) = split.table_mut(&mut out) else {
            continue;
        };
        let x = p.x_name().to_string();
        for (i, op) in p.map.iter_mut().enumerate() {
            if !op.needs_adapt() {
                continue;
            }
            let component = op.component().unwrap_or(&x).to_string();
            let name = op.name();
            let Some((_, _, learned)) = adapted
                .iter()
                .rev()
                .find(|(c, n, _)| *c == component && *n == name)
            else {
                return Err(KilnError::config(
                    format!("{key}.map[{i}].adapt"),
                    format!(
                        "{} come from the training data, but data.train has no {name} op with \
                         adapt = true on component \"{component}\"",
                        match name {
                            "normalize" => "statistics",
                            "discretization" => "bin boundaries",
                            _ => "vocabularies",
                        }
                    ),
                ));
            };
            *op = learned.with_component(op.component().map(str::to_string));
        }
    }
    model_adapt::adapt_layers(&mut out)?;
    Ok(out)
}

/// Replaces each `vocabulary = "file"` of every pipeline by the file's tokens (one per line;
/// relative paths inside `data.data_dir`).
fn read_vocabulary_files(cfg: &mut RunConfig) -> Result<()> {
    let data_dir = cfg.data.data_dir.clone();
    for split in [Split::Train, Split::Validation, Split::Test] {
        let key = split.key();
        let Some(p) = split.table_mut(cfg) else {
            continue;
        };
        for (i, op) in p.map.iter_mut().enumerate() {
            let (Some(file), Some(kind)) = (op.vocabulary_file(), op.token_kind()) else {
                continue;
            };
            let path = data_dir.join(file);
            let tokens = crate::config::read_vocabulary(&format!("{key}.map[{i}]"), &path, kind)?;
            *op = op.with_vocabulary(tokens);
        }
    }
    Ok(())
}

/// `predict`'s pipeline for the features `x` (`[examples, ...]`): the `map` ops of the test
/// pipeline (or the training one) whose inputs are all the features component, in inference
/// mode, then batches of `fit.batch_size`.
///
/// # Errors
/// As [`build`] for the ops; [`KilnError::Data`] when `x` cannot be sliced.
pub fn predict_dataset(cfg: &RunConfig, x: Array) -> Result<Dataset> {
    let (split, p) = [Split::Test, Split::Train]
        .into_iter()
        .find_map(|s| s.table(cfg).map(|p| (s, p)))
        .ok_or_else(|| KilnError::config("data.train", "this run has no pipeline table"))?;
    let name = p.x_name().to_string();
    let ops: Vec<Preprocess> = to_ops(p, &p.map, 0, split.key())?
        .into_iter()
        .filter(|op| op.inputs().iter().all(|i| *i == name))
        .collect();
    let n = x.shape().first().copied().unwrap_or(1).max(1);
    let ds = Dataset::from_tensor_slices(Element::new().with(name.as_str(), x))?;
    let batch = p.batch_size.unwrap_or(cfg.fit.batch_size).clamp(1, n);
    Ok(ds
        .map(
            move |e| {
                let mut e = kiln_data::preprocess::apply_all(&ops, e, None)?;
                let x = e.require(&name)?.clone();
                e = Element::new().with(FEATURES, x);
                Ok(e)
            },
            p.parallelism(),
        )
        .batch(batch, false)
        .prefetch(AUTOTUNE))
}

/// What [`bench`] measured over one epoch.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// The table benchmarked.
    pub split: Split,
    /// The epoch (0-based): each epoch is a fresh iteration (`Dataset::iter`), as `fit` runs.
    pub epoch: usize,
    /// Batches read.
    pub batches: u64,
    /// Examples read (the first dimension of `x`, summed).
    pub elements: u64,
    /// Seconds from the start of the iteration to the end of the last batch.
    pub seconds: f64,
    /// Seconds until the first batch arrived (includes filling shuffle buffers).
    pub first_batch_seconds: f64,
    /// Seconds spent in `adapt` before the pipeline ran (0 without `normalize` adapt ops;
    /// counted in the first epoch's report only).
    pub adapt_seconds: f64,
    /// `(component, dtype, shape)` of the first batch.
    pub batch_shapes: Vec<(String, DType, Vec<usize>)>,
    /// The iteration's per-stage statistics at its end (`DatasetIter::stats`): time the
    /// caller waited, and each `map` / `prefetch` / `interleave` stage's busy and waited
    /// time, threads and buffer.
    pub stats: PipelineStats,
}

impl BenchReport {
    /// Examples per second.
    pub fn elements_per_second(&self) -> f64 {
        self.elements as f64 / self.seconds.max(1e-9)
    }
}

/// Runs the pipeline of `split` alone (no model) for up to `steps` batches (all of one epoch
/// when `None`) and times it: [`bench_epochs`] with one epoch.
///
/// # Errors
/// As [`build`] and [`adapt`]; the first data error met while iterating.
pub fn bench(cfg: &RunConfig, split: Split, steps: Option<u64>) -> Result<BenchReport> {
    let mut reports = bench_epochs(cfg, split, steps, 1)?;
    Ok(reports.remove(0))
}

/// Runs the pipeline of `split` alone (no model) `epochs` times (at least once), each epoch a
/// fresh iteration of the same dataset, for up to `steps` batches each (a whole epoch when
/// `None`), and times every epoch: the first one includes warm-up (threads starting, autotuning
/// from one worker, a cold page cache), so compare the later ones. `adapt` runs once, before.
///
/// # Errors
/// As [`build`] and [`adapt`]; the first data error met while iterating.
pub fn bench_epochs(
    cfg: &RunConfig,
    split: Split,
    steps: Option<u64>,
    epochs: usize,
) -> Result<Vec<BenchReport>> {
    let start = Instant::now();
    let cfg = adapt(cfg)?;
    let adapt_seconds = start.elapsed().as_secs_f64();
    let ds = build(&cfg, split)?;
    let mut reports = Vec::new();
    for epoch in 0..epochs.max(1) {
        let start = Instant::now();
        let mut report = BenchReport {
            split,
            epoch,
            batches: 0,
            elements: 0,
            seconds: 0.0,
            first_batch_seconds: 0.0,
            adapt_seconds: if epoch == 0 { adapt_seconds } else { 0.0 },
            batch_shapes: Vec::new(),
            stats: PipelineStats {
                elapsed: Default::default(),
                elements: 0,
                waited: Default::default(),
                stages: Vec::new(),
                skipped: None,
            },
        };
        let mut it = ds.iter();
        // Stop before pulling a batch past `steps` (so the statistics count what was used).
        while steps.is_none_or(|s| report.batches < s) {
            let Some(batch) = it.next() else { break };
            let batch = batch?;
            if report.batches == 0 {
                report.first_batch_seconds = start.elapsed().as_secs_f64();
                report.batch_shapes = batch
                    .iter()
                    .map(|(n, a)| (n.to_string(), a.dtype(), a.shape().to_vec()))
                    .collect();
            }
            report.batches += 1;
            // Every component of a batch has the batch axis first (several Inputs: no `x`).
            report.elements += batch
                .get(FEATURES)
                .or_else(|| batch.get(LABELS))
                .and_then(|a| a.shape().first().copied())
                .unwrap_or(1) as u64;
        }
        report.seconds = start.elapsed().as_secs_f64();
        report.stats = it.stats();
        reports.push(report);
    }
    Ok(reports)
}

mod data_utils;
mod model_adapt;
pub mod shard;

pub(crate) use data_utils::{check_mix_labels, shape_fix};

#[cfg(test)]
mod tests;
