//! Whole runs, as the `kiln` command performs them: train a config into a run directory,
//! evaluate it, predict with it. Library users call these too.

use std::path::{Path, PathBuf};

use burn::prelude::Device;
use kiln_data::Dataset;

use crate::checkpoint::{CheckpointDir, Manifest};
use crate::compile::{Family, argmax};
use crate::config::RunConfig;
use crate::error::{KilnError, Result};
use crate::fit::{Backup, Callback, FitOptions, History, Interrupt, Logs, Model};
use crate::input::{check_against_model, load_idx, pipeline, read_inputs, split_last};
use crate::pipeline::{self as pipelines, Split};
use crate::run_dir::{DirLock, RunDir};

/// Command-line overrides of config values.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `fit.epochs`.
    pub epochs: Option<usize>,
    /// `fit.batch_size`.
    pub batch_size: Option<usize>,
    /// `seed`.
    pub seed: Option<u64>,
    /// `data.data_dir`.
    pub data_dir: Option<PathBuf>,
    /// `precision` (`kiln train --precision`).
    pub precision: Option<crate::precision::Precision>,
}

impl RunConfig {
    /// Applies overrides and re-checks the values.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming the flag when a value is out of range.
    pub fn apply(&mut self, o: &Overrides) -> Result<()> {
        // Checked here so that the message names the flag, not the config file's key.
        for (flag, value) in [("--epochs", o.epochs), ("--batch-size", o.batch_size)] {
            if value == Some(0) {
                return Err(KilnError::config(flag, "must be at least 1"));
            }
        }
        if let Some(v) = o.epochs {
            self.fit.epochs = v;
        }
        if let Some(v) = o.batch_size {
            self.fit.batch_size = v;
            // The flag wins over the pipeline tables' own batch sizes, too.
            for p in [
                &mut self.data.train,
                &mut self.data.validation,
                &mut self.data.test,
            ]
            .into_iter()
            .flatten()
            {
                if p.batch_size.is_some() {
                    p.batch_size = Some(v);
                }
            }
        }
        if let Some(v) = o.seed {
            self.seed = v;
        }
        if let Some(v) = &o.data_dir {
            self.data.data_dir = v.clone();
        }
        if let Some(p) = o.precision {
            self.set_precision(p);
        }
        self.fit.validate()
    }
}

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

/// Trains `cfg` on `device` into `run_dir` with BackupAndRestore: checkpoints in
/// `run_dir/checkpoints/` (or the config's `backup_dir`), and a resume from the last good one
/// unless `opts.resume` is false. A resume checks the checkpoint's recorded config and pipeline
/// fingerprints against this run's and refuses (with the list of changes) a changed model, or
/// changed data unless `opts.allow_changed_data`; checkpoints none of which is usable are
/// refused too, never silently replaced by a fresh start.
///
/// The call holds `run_dir`'s lock ([`DirLock`], and the checkpoint directory's when that lies
/// outside `run_dir`) from its first step to its return: another process, or another call in
/// this process, training into the same directory is refused at once.
///
/// The config's `[[callbacks]]` are not built here: pass them in `callbacks`
/// ([`RunConfig::build_callbacks`] with the same `run_dir`), as `kiln train` does after its
/// progress display. Their order must stay the same across resumes (their states are kept in
/// the checkpoints by position).
///
/// With `strategy = "multi_worker_mirrored"` every process of the `mpirun` job calls this with
/// the same arguments: rank 0 writes `run_dir`; the others read its checkpoints and write to a
/// scratch directory ([`crate::distribute::world::worker_scratch_dir`], build their callbacks
/// there too); a stop request on any worker stops all after the same step
/// ([`crate::distribute::MultiWorkerMirroredStrategy`]).
///
/// # Errors
/// [`KilnError::RunDirLocked`] when another writer holds the directory;
/// [`KilnError::MissingData`], data, shape and I/O errors; [`KilnError::Changed`] when a
/// resume finds changes; [`KilnError::UnusableCheckpoints`] when the directory has checkpoints
/// and none can resume; [`KilnError::Config`] when MPI cannot start or `mpirun` started the
/// process with another strategy; [`KilnError::Interrupted`] after a stop request. The run directory
/// keeps what was written before the error, checkpoints included.
pub fn train_with(
    cfg: &RunConfig,
    run_dir: &Path,
    device: Device,
    opts: &TrainOptions,
    callbacks: &mut [&mut dyn Callback],
    on_model: impl FnOnce(&mut Model),
) -> Result<TrainReport> {
    check_several_outputs(cfg)?;
    // The outermost folder of `run_dir` that this call creates (None when it exists).
    let created = run_dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
        .last()
        .map(Path::to_path_buf);
    // One writer per run directory: locked before anything is read or written, so that a
    // second process is refused at once; released when this returns (or the process dies).
    let _locks = lock_run_dirs(cfg, run_dir, opts.notes)?;
    let (resolved, inputs, train, validation, test) = match input_datasets(cfg) {
        Ok(inputs) => inputs,
        Err(e) => {
            // Nothing was written: the folders this call created go again.
            if let Some(top) = &created {
                remove_if_only_lock(run_dir);
                remove_empty_up_to(run_dir, top);
            }
            return Err(e);
        }
    };
    let mut resolved = resolved;
    if resolved.data.data_dir.is_relative() {
        // The run directory's config must find the data from any working directory.
        resolved.data.data_dir = std::path::absolute(&resolved.data.data_dir)
            .map_err(|e| KilnError::io(&resolved.data.data_dir, e))?;
    }
    let cfg = &resolved;

    // multi_worker_mirrored: workers other than rank 0 write to a scratch directory and
    // read rank 0's checkpoints; a stop request is shared through the gradient all-reduce.
    let mut strategy = cfg.distribute.build()?;
    let chief = strategy.is_chief();
    let mut interrupt = opts.interrupt.clone();
    let (mut shard, mut shard_note) = (None, None);
    if let crate::distribute::Strategy::MultiWorkerMirrored(m) = &mut strategy {
        let agreed = Interrupt::new();
        m.set_interrupts(opts.interrupt.clone().unwrap_or_default(), agreed.clone());
        interrupt = Some(agreed);
        let sharding = crate::distribute::shard::input_shard(&inputs, m.world())?;
        shard = sharding.shard;
        shard_note = sharding.note;
        m.set_local_input(shard.is_some());
    }
    if !chief {
        crate::distribute::world::remove_stale_scratch_dirs();
    }
    let scratch = (!chief).then(crate::distribute::world::worker_scratch_dir);
    let _remove_scratch = scratch.as_ref().map(|d| RemoveOnDrop(d.clone()));
    let notes: fn(&str) = if chief { opts.notes } else { |_| {} };
    if let crate::distribute::Strategy::Pipeline(p) = &mut strategy {
        // Checked against the model before anything is written.
        notes(p.describe(&cfg.model)?.trim_end());
    }
    let has_batch_norm = !cfg.model.batch_norm_channels().is_empty();
    if cfg.distribute.sync_batch_norm == Some(true) {
        if !has_batch_norm {
            notes(
                "sync_batch_norm: the model has no BatchNormalization layer: nothing to synchronize",
            );
        } else if strategy.num_replicas_in_sync() == 1 {
            notes(
                "sync_batch_norm: one replica, whose batch is the global batch: nothing to synchronize",
            );
        }
    }
    if let crate::distribute::Strategy::Mirrored(m) = &strategy
        && m.sync_batch_norm()
        && m.num_replicas() > 1
        && has_batch_norm
    {
        notes(&format!(
            "sync_batch_norm: the {} replicas share one device, so each step runs as one \
             replica on the global batch (the same statistics and gradients)",
            m.num_replicas()
        ));
    }
    // Created now so that an unwritable place fails before training; the files are written
    // together after training, so a failed run never leaves a config that does not match the
    // weights beside it.
    let dir = RunDir::create(scratch.as_deref().unwrap_or(run_dir))?;
    let units = cfg.model.output_units();
    let class_weight = crate::fit::ClassWeight::from_config(&cfg.fit.class_weight, units)?;
    let weighted = |ds: Dataset| match &class_weight {
        Some(w) => w.clone().apply(ds),
        None => ds,
    };
    let train = weighted(train);
    let mut fingerprints = std::collections::BTreeMap::new();
    // The whole input's fingerprint, the same on every worker, also when each reads a shard.
    fingerprints.insert("train".to_string(), format!("{:016x}", train.fingerprint()));
    if let Some(v) = &validation {
        fingerprints.insert(
            "validation".to_string(),
            format!("{:016x}", v.fingerprint()),
        );
    }
    if let Some(note) = &shard_note {
        notes(note);
    }
    let train = match shard {
        Some(s) => {
            // The data each worker reads depends on the number of workers: a resume with
            // another number is a change of data (refused unless allow_changed_data).
            let whole = fingerprints.get("train").cloned().unwrap_or_default();
            fingerprints.insert(
                "train".to_string(),
                format!("{whole}/file-shards-{}", s.count),
            );
            weighted(pipelines::build_shard(&inputs, Split::Train, s)?)
        }
        None => train,
    };
    let chief_dir = if chief { dir.path() } else { run_dir };
    let ckpt_dir = CheckpointDir::new(cfg.backup.dir_in(chief_dir), cfg.backup.keep);
    let config_toml = cfg.to_toml();
    let resume = if opts.resume {
        let (latest, skipped) = ckpt_dir.resume_point()?;
        for u in skipped {
            notes(&format!("warning: skipping checkpoint {u}"));
        }
        if let Some(ckpt) = &latest {
            check_unchanged(
                &ckpt.manifest,
                &config_toml,
                &fingerprints,
                &TrainOptions {
                    notes,
                    ..opts.clone()
                },
                ckpt_dir.path(),
            )?;
            if ckpt.manifest.epoch >= cfg.fit.epochs {
                notes(&format!(
                    "The run in {} already trained its {} epoch{} ({}): nothing left to train, \
                     evaluating it again. Raise --epochs to train further, or pass \
                     --no-resume to train anew.",
                    dir.path().display(),
                    ckpt.manifest.epoch,
                    if ckpt.manifest.epoch == 1 { "" } else { "s" },
                    ckpt.path.display(),
                ));
            } else {
                notes(&format!(
                    "Resuming from {} (epoch {}, batch {} of it, step {} of the run)",
                    ckpt.path.display(),
                    ckpt.manifest.epoch + 1,
                    ckpt.manifest.step_in_epoch,
                    ckpt.manifest.iterations
                ));
            }
        }
        latest
    } else {
        if chief {
            ckpt_dir.clear()?;
        }
        None
    };
    if let crate::distribute::Strategy::MultiWorkerMirrored(_) = &strategy {
        // Every worker has read the checkpoints before rank 0 writes new ones.
        crate::distribute::world::barrier();
    }
    let ckpt_dir = match &scratch {
        Some(s) => {
            let own = s.join("checkpoints");
            // The checkpoint resumed from, also where this worker's NaN rollbacks find it.
            if let Some(ckpt) = &resume
                && let Some(name) = ckpt.path.file_name()
            {
                copy_flat_dir(&ckpt.path, &own.join(name))?;
            }
            CheckpointDir::new(own, cfg.backup.keep)
        }
        None => ckpt_dir,
    };
    // Built once the resume is settled, so that a refused one prints no summary.
    let mut model = Model::new(
        &cfg.name,
        cfg.model.clone(),
        cfg.compile.clone(),
        cfg.seed,
        device,
    );
    model.set_check_numerics(cfg.fit.check_numerics);
    model.set_strategy(strategy.clone());
    on_model(&mut model);
    let epochs_before = resume.as_ref().map_or(0, |c| c.manifest.epoch);
    let fit_opts = FitOptions {
        epochs: cfg.fit.epochs,
        initial_epoch: cfg.fit.initial_epoch,
        steps_per_epoch: cfg.fit.steps_per_epoch,
        validation_freq: cfg.fit.validation_freq,
        backup: Some(Backup {
            dir: ckpt_dir.clone(),
            save_freq: cfg.backup.save_freq,
            resume,
            config: config_toml,
            data_fingerprints: fingerprints,
        }),
        on_nan: cfg.fit.on_nan(),
        interrupt: interrupt.clone(),
        report_dir: Some(dir.path().join("nan_report")),
    };
    let history = model.fit_with(&train, validation.as_ref(), &fit_opts, callbacks)?;
    model.save_weights(&dir.weights())?;
    dir.save_config(&cfg.to_toml())?;
    dir.save_history(&history)?;
    let stopped = || {
        let signal = interrupt.as_ref().and_then(|i| i.requested());
        signal.map_or(Ok(()), |signal| {
            Err(KilnError::InterruptedAfterTraining {
                signal,
                run_dir: dir.path().to_path_buf(),
            })
        })
    };
    stopped()?;
    let test_logs = match &test {
        Some(test) => {
            let logs = model.evaluate(test)?;
            dir.save_metrics(&logs)?;
            logs
        }
        None => Logs::default(),
    };
    // A signal during the evaluation: its metrics are saved, and the exit says so.
    stopped()?;
    if cfg.backup.delete_checkpoint {
        ckpt_dir.clear()?;
    }
    Ok(TrainReport {
        model,
        history,
        test: test_logs,
        run_dir: dir.path().to_path_buf(),
        epochs_before,
    })
}

/// One writer per run directory: locks `run_dir`, and the checkpoint directory too when it lies
/// outside (an absolute or `..` `backup_dir`, which another run may name as well). Workers
/// other than rank 0 of an `mpirun` job lock nothing: they write only their scratch
/// directories and read rank 0's checkpoints.
///
/// # Errors
/// [`KilnError::RunDirLocked`] naming the process that holds a lock.
fn lock_run_dirs(cfg: &RunConfig, run_dir: &Path, notes: fn(&str)) -> Result<Vec<DirLock>> {
    use crate::distribute::world;
    if world::current()
        .or_else(world::launched)
        .is_some_and(|w| w.rank > 0)
    {
        return Ok(Vec::new());
    }
    let mut locks = vec![DirLock::acquire(
        run_dir,
        "kiln train",
        "train into another run directory (another `name` in the config, or --run-dir)",
    )?];
    let inside = cfg.backup.backup_dir.components().all(|c| {
        matches!(
            c,
            std::path::Component::Normal(_) | std::path::Component::CurDir
        )
    });
    if !inside {
        locks.push(DirLock::acquire(
            &cfg.backup.dir_in(run_dir),
            "kiln train",
            "give this run another callbacks.BackupAndRestore.backup_dir",
        )?);
    }
    for w in locks.iter().filter_map(DirLock::warning) {
        notes(w);
    }
    Ok(locks)
}

/// Copies the files of directory `from` into a new directory `to`.
fn copy_flat_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(|e| KilnError::io(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| KilnError::io(from, e))? {
        let entry = entry.map_err(|e| KilnError::io(from, e))?;
        if entry.path().is_file() {
            let dest = to.join(entry.file_name());
            std::fs::copy(entry.path(), &dest).map_err(|e| KilnError::io(&dest, e))?;
        }
    }
    Ok(())
}

/// Removes a worker's scratch directory, and dead workers' ones, when the run ends (success
/// or error).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        // Again at the end: a worker of a killed job that was still exiting when this job
        // started has exited by now.
        crate::distribute::world::remove_stale_scratch_dirs();
    }
}

/// `table` flattened to `dotted.key -> value` (arrays of tables as `key[i]`).
fn flatten(
    prefix: &str,
    value: &toml::Value,
    out: &mut std::collections::BTreeMap<String, String>,
) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        toml::Value::Array(a) if a.iter().any(|v| v.is_table()) => {
            for (i, v) in a.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), v, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// The keys whose values differ between two resolved configs, as `key: old -> new` lines.
fn config_changes(old: &str, new: &str) -> Vec<(String, String)> {
    let parse = |text: &str| {
        let mut out = std::collections::BTreeMap::new();
        if let Ok(t) = toml::from_str::<toml::Table>(text) {
            flatten("", &toml::Value::Table(t), &mut out);
        }
        out
    };
    let (a, b) = (parse(old), parse(new));
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let show = |v: Option<&String>| v.cloned().unwrap_or_else(|| "(absent)".into());
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| {
            (
                (*k).clone(),
                format!("{} -> {}", show(a.get(k)), show(b.get(k))),
            )
        })
        .collect()
}

/// Refuses a resume whose model changed, or whose data changed without
/// `allow_changed_data`; notes other changed settings.
fn check_unchanged(
    manifest: &Manifest,
    config: &str,
    fingerprints: &std::collections::BTreeMap<String, String>,
    opts: &TrainOptions,
    dir: &Path,
) -> Result<()> {
    if manifest.config.is_empty() {
        return Ok(());
    }
    let changes = config_changes(&manifest.config, config);
    let is = |k: &str, p: &str| {
        k == p || k.starts_with(&format!("{p}.")) || k.starts_with(&format!("{p}["))
    };
    let model: Vec<_> = changes.iter().filter(|(k, _)| is(k, "model")).collect();
    let mut data: Vec<String> = changes
        .iter()
        .filter(|(k, _)| is(k, "data"))
        .map(|(k, v)| format!("  {k}: {v}"))
        .collect();
    let seed = changes.iter().find(|(k, _)| k == "seed");
    for (split, fp) in fingerprints {
        match (manifest.data_fingerprints.get(split), seed) {
            (Some(old), Some((_, v))) if old != fp && data.is_empty() => data.push(format!(
                "  seed: {v} (the {split} data's shuffle order and random maps follow the seed)"
            )),
            (Some(old), None) if old != fp && data.is_empty() => {
                let shards = |f: &str| {
                    let (whole, n) = f.split_once("/file-shards-").unwrap_or((f, "1"));
                    (whole.to_string(), n.to_string())
                };
                let ((was, n_was), (now, n_now)) = (shards(old), shards(fp));
                data.push(if was == now {
                    format!(
                        "  the {split} data: the workers of the job read it file by file \
                         (auto_shard_policy), and their number changed ({n_was} -> {n_now} \
                         readers), so each reads other files than the checkpoint's"
                    )
                } else {
                    format!(
                        "  the {split} data: the files or the pipeline it reads changed (fingerprint {old} -> {fp})"
                    )
                });
            }
            _ => {}
        }
    }
    let list = |v: &[String]| v.join("\n");
    if !model.is_empty() {
        let lines: Vec<String> = model.iter().map(|(k, v)| format!("  {k}: {v}")).collect();
        return Err(KilnError::Changed(format!(
            "cannot resume from {}: the model changed since the checkpoint was written:\n{}\n\
             The checkpoint's weights do not fit the new model. Start over with --no-resume, or \
             use another --run-dir.",
            dir.display(),
            list(&lines)
        )));
    }
    if !data.is_empty() && !opts.allow_changed_data {
        return Err(KilnError::Changed(format!(
            "cannot resume from {}: the data or its pipeline changed since the checkpoint was \
             written:\n{}\nResume anyway with --allow-changed-data, or start over with \
             --no-resume.",
            dir.display(),
            list(&data)
        )));
    }
    let others: Vec<String> = changes
        .iter()
        .filter(|(k, _)| !is(k, "model") && !is(k, "data"))
        .filter(|(k, _)| k != "seed" || data.is_empty())
        .map(|(k, v)| format!("  {k}: {v}"))
        .collect();
    if !data.is_empty() {
        (opts.notes)(&format!(
            "note: resuming with changed data (--allow-changed-data):\n{}",
            list(&data)
        ));
    }
    if !others.is_empty() {
        (opts.notes)(&format!(
            "note: resuming with changed settings:\n{}\n(the checkpoint's learning rate and \
             optimizer state are kept: start over with --no-resume to apply optimizer changes)",
            list(&others)
        ));
    }
    Ok(())
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
            Some(w) => crate::distribute::shard::per_worker_caches(&resolved, w),
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
    Ok((cfg, model))
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
