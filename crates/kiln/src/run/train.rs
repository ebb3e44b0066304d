//! `kiln train` as a library call: a config trained into a run directory ([`train_with`]), in
//! stages: lock the directory, build the inputs, place the run on the strategy's workers, settle
//! the resume point, build the model, fit, and write the results.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::prelude::Device;
use kiln_data::Dataset;

use super::resume_check::check_unchanged;
use super::{TrainOptions, TrainReport, check_several_outputs, input_datasets};
use crate::checkpoint::{Checkpoint, CheckpointDir};
use crate::config::RunConfig;
use crate::distribute::{Strategy, world};
use crate::error::{KilnError, Result};
use crate::fit::{Backup, Callback, FitOptions, History, Interrupt, Logs, Model};
use crate::pipeline::{self as pipelines, Shard, Split};
use crate::run_dir::{DirLock, RunDir};

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
    // One writer per run directory: locked before anything is read or written, so that a
    // second process is refused at once; released when this returns (or the process dies).
    let created = first_created(run_dir);
    let _locks = lock_run_dirs(cfg, run_dir, opts.notes)?;
    let result = train_locked(cfg, run_dir, device, opts, callbacks, on_model);
    // A run refused before it wrote anything (bad data, devices, weights) leaves no folder
    // behind: the folders this call created go again when they hold only the lock.
    if let (Err(_), Some(top)) = (&result, &created) {
        super::remove_if_only_lock(run_dir);
        super::remove_empty_up_to(run_dir, top);
    }
    result
}

/// [`train_with`] once the run directory is locked.
fn train_locked(
    cfg: &RunConfig,
    run_dir: &Path,
    device: Device,
    opts: &TrainOptions,
    callbacks: &mut [&mut dyn Callback],
    on_model: impl FnOnce(&mut Model),
) -> Result<TrainReport> {
    let (cfg, inputs, train, validation, test) = resolved_inputs(cfg)?;
    let cfg = &cfg;
    let mut place = Placement::new(cfg, &inputs, opts)?;
    let _remove_scratch = place.scratch.as_ref().map(|d| RemoveOnDrop(d.clone()));
    place.describe(cfg)?;
    // Created now so that an unwritable place fails before training; the files are written
    // together after training, so a failed run never leaves a config that does not match the
    // weights beside it.
    let dir = RunDir::create(place.scratch.as_deref().unwrap_or(run_dir))?;
    let (train, fingerprints) = training_data(cfg, &inputs, train, validation.as_ref(), &place)?;
    let (ckpt_dir, resume) = resume_point(cfg, (&dir, run_dir), &fingerprints, opts, &place)?;
    let epochs_before = resume.as_ref().map_or(0, |c| c.manifest.epoch);
    // Built once the resume is settled, so that a refused one prints no summary.
    let mut model = Model::new(
        &cfg.name,
        cfg.model.clone(),
        cfg.compile.clone(),
        cfg.seed,
        device,
    );
    // `[model] weights`: the start of a fresh run; a resume continues from its checkpoint.
    if let Some(w) = cfg.initial_weights.as_ref().filter(|_| resume.is_none()) {
        model
            .load_weights(w)
            .map_err(|e| KilnError::config("model.weights", e.to_string()))?;
    }
    model.set_check_numerics(cfg.fit.check_numerics);
    model.set_strategy(place.strategy.clone());
    custom_step(cfg, &mut model)?;
    on_model(&mut model);
    let backup = Backup {
        dir: ckpt_dir.clone(),
        save_freq: cfg.backup.save_freq,
        resume,
        config: cfg.to_toml(),
        data_fingerprints: fingerprints,
    };
    let fit_opts = fit_options(cfg, backup, place.interrupt.clone(), &dir);
    let history = model.fit_with(&train, validation.as_ref(), &fit_opts, callbacks)?;
    let ended = Ended {
        model,
        history,
        dir,
        ckpt_dir,
        interrupt: place.interrupt,
        epochs_before,
    };
    ended.finish(cfg, test.as_ref())
}

/// The config's custom train step and its parts, on `model`.
fn custom_step(cfg: &RunConfig, model: &mut Model) -> Result<()> {
    if let Some(name) = &cfg.train_step {
        model.set_train_step(crate::step::custom::train_step_named(name)?);
    }
    for part in &cfg.parts {
        model.add_part(part.clone())?;
    }
    Ok(())
}

/// The outermost folder of `run_dir` that training will create (`None` when it exists).
fn first_created(run_dir: &Path) -> Option<PathBuf> {
    run_dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
        .last()
        .map(Path::to_path_buf)
}

/// [`input_datasets`] with the data directory made absolute (the run directory's config must
/// find the data from any working directory).
fn resolved_inputs(cfg: &RunConfig) -> Result<Inputs> {
    let (mut resolved, inputs, train, validation, test) = input_datasets(cfg)?;
    if resolved.data.data_dir.is_relative() {
        resolved.data.data_dir = std::path::absolute(&resolved.data.data_dir)
            .map_err(|e| KilnError::io(&resolved.data.data_dir, e))?;
    }
    Ok((resolved, inputs, train, validation, test))
}

type Inputs = super::Inputs;

/// Where this process stands in the strategy: `multi_worker_mirrored` workers other than
/// rank 0 write to a scratch directory and read rank 0's checkpoints, and a stop request is
/// shared through the gradient all-reduce.
struct Placement {
    strategy: Strategy,
    chief: bool,
    interrupt: Option<Interrupt>,
    /// This worker's input shard, when each worker reads its own files.
    shard: Option<Shard>,
    shard_note: Option<String>,
    scratch: Option<PathBuf>,
    /// The user's notes on the chief; nothing on the other workers.
    notes: fn(&str),
}

impl Placement {
    /// The strategy of `cfg`, with `inputs` (the per-worker pipeline config) sharded.
    fn new(cfg: &RunConfig, inputs: &RunConfig, opts: &TrainOptions) -> Result<Placement> {
        let mut strategy = cfg.distribute.build()?;
        let chief = strategy.is_chief();
        let mut interrupt = opts.interrupt.clone();
        let (mut shard, mut shard_note) = (None, None);
        if let Strategy::MultiWorkerMirrored(m) = &mut strategy {
            let agreed = Interrupt::new();
            m.set_interrupts(opts.interrupt.clone().unwrap_or_default(), agreed.clone());
            interrupt = Some(agreed);
            let sharding = crate::pipeline::shard::input_shard(inputs, m.world())?;
            (shard, shard_note) = (sharding.shard, sharding.note);
            m.set_local_input(shard.is_some());
        }
        if !chief {
            world::remove_stale_scratch_dirs();
        }
        Ok(Placement {
            strategy,
            chief,
            interrupt,
            shard,
            shard_note,
            scratch: (!chief).then(world::worker_scratch_dir),
            notes: if chief { opts.notes } else { |_| {} },
        })
    }

    /// Notes on how the strategy runs `cfg`'s model (pipeline stages, sync_batch_norm);
    /// pipeline stages are checked against the model before anything is written.
    fn describe(&mut self, cfg: &RunConfig) -> Result<()> {
        let notes = self.notes;
        if let Strategy::Pipeline(p) = &mut self.strategy {
            notes(p.describe(&cfg.model)?.trim_end());
        }
        // The compiled model's layers or a custom step's parts'.
        let has_batch_norm = std::iter::once(&cfg.model)
            .chain(cfg.parts.iter().map(|p| &p.model))
            .any(|m| !m.batch_norm_channels().is_empty());
        if cfg.distribute.sync_batch_norm == Some(true) {
            if !has_batch_norm {
                notes(
                    "sync_batch_norm: neither the model nor its parts have a \
                     BatchNormalization layer: nothing to synchronize",
                );
            } else if self.strategy.num_replicas_in_sync() == 1 {
                notes(
                    "sync_batch_norm: one replica, whose batch is the global batch: nothing to \
                     synchronize",
                );
            }
        }
        if let Strategy::Mirrored(m) = &self.strategy
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
        Ok(())
    }
}

/// The training dataset (class weights applied; this worker's shard when each reads its own)
/// and the fingerprints of the training and validation data that checkpoints record.
fn training_data(
    cfg: &RunConfig,
    inputs: &RunConfig,
    train: Dataset,
    validation: Option<&Dataset>,
    place: &Placement,
) -> Result<(Dataset, BTreeMap<String, String>)> {
    let units = cfg.model.output_units();
    let class_weight = crate::fit::ClassWeight::from_config(&cfg.fit.class_weight, units)?;
    let weighted = |ds: Dataset| match &class_weight {
        Some(w) => w.clone().apply(ds),
        None => ds,
    };
    let train = weighted(train);
    // The whole input's fingerprint, the same on every worker, also when each reads a shard.
    let mut fingerprints = BTreeMap::new();
    let mut whole = format!("{:016x}", train.fingerprint());
    if let Some(v) = validation {
        let fingerprint = format!("{:016x}", v.fingerprint());
        fingerprints.insert("validation".to_string(), fingerprint);
    }
    if let Some(note) = &place.shard_note {
        (place.notes)(note);
    }
    let train = match place.shard {
        Some(s) => {
            // The data each worker reads depends on the number of workers: a resume with
            // another number is a change of data (refused unless allow_changed_data).
            whole = format!("{whole}/file-shards-{}", s.count);
            weighted(pipelines::build_shard(inputs, Split::Train, s)?)
        }
        None => train,
    };
    fingerprints.insert("train".to_string(), whole);
    Ok((train, fingerprints))
}

/// The checkpoint directory this process writes, and the checkpoint to resume from (none
/// with `opts.resume` false: the chief then clears the old checkpoints). `dir` is where this
/// process writes, `run_dir` the chief's run directory.
fn resume_point(
    cfg: &RunConfig,
    (dir, run_dir): (&RunDir, &Path),
    fingerprints: &BTreeMap<String, String>,
    opts: &TrainOptions,
    place: &Placement,
) -> Result<(CheckpointDir, Option<Checkpoint>)> {
    let chief_dir = if place.chief { dir.path() } else { run_dir };
    let ckpt_dir = CheckpointDir::new(cfg.backup.dir_in(chief_dir), cfg.backup.keep);
    let resume = match opts.resume {
        true => latest_checkpoint(cfg, &ckpt_dir, dir, fingerprints, opts, place.notes)?,
        false => {
            if place.chief {
                ckpt_dir.clear()?;
            }
            None
        }
    };
    if let Strategy::MultiWorkerMirrored(_) = &place.strategy {
        // Every worker has read the checkpoints before rank 0 writes new ones.
        world::barrier();
    }
    let Some(scratch) = &place.scratch else {
        return Ok((ckpt_dir, resume));
    };
    let own = scratch.join("checkpoints");
    // The checkpoint resumed from, also where this worker's NaN rollbacks find it.
    if let Some(ckpt) = &resume
        && let Some(name) = ckpt.path.file_name()
    {
        copy_flat_dir(&ckpt.path, &own.join(name))?;
    }
    Ok((CheckpointDir::new(own, cfg.backup.keep), resume))
}

/// The last good checkpoint of `ckpt_dir`, checked against this run's config and data, with
/// notes on what is skipped and where training resumes.
fn latest_checkpoint(
    cfg: &RunConfig,
    ckpt_dir: &CheckpointDir,
    dir: &RunDir,
    fingerprints: &BTreeMap<String, String>,
    opts: &TrainOptions,
    notes: fn(&str),
) -> Result<Option<Checkpoint>> {
    let (latest, skipped) = ckpt_dir.resume_point()?;
    for u in skipped {
        notes(&format!("warning: skipping checkpoint {u}"));
    }
    let Some(ckpt) = &latest else {
        return Ok(None);
    };
    let opts = TrainOptions {
        notes,
        ..opts.clone()
    };
    let m = &ckpt.manifest;
    check_unchanged(m, &cfg.to_toml(), fingerprints, &opts, ckpt_dir.path())?;
    notes(&if m.stopped {
        format!(
            "The run in {} stopped early at epoch {} (a callback such as EarlyStopping ended \
             it; {}): it is finished, evaluating it again. Pass --no-resume to train anew.",
            dir.path().display(),
            m.epoch,
            ckpt.path.display(),
        )
    } else if m.epoch >= cfg.fit.epochs {
        format!(
            "The run in {} already trained its {} epoch{} ({}): nothing left to train, \
             evaluating it again. Raise --epochs to train further, or pass --no-resume to \
             train anew.",
            dir.path().display(),
            m.epoch,
            if m.epoch == 1 { "" } else { "s" },
            ckpt.path.display(),
        )
    } else {
        format!(
            "Resuming from {} (epoch {}, batch {} of it, step {} of the run)",
            ckpt.path.display(),
            m.epoch + 1,
            m.step_in_epoch,
            m.iterations
        )
    });
    Ok(latest)
}

/// `fit`'s options for `cfg`, with BackupAndRestore and NaN reports under `dir`.
fn fit_options(
    cfg: &RunConfig,
    backup: Backup,
    interrupt: Option<Interrupt>,
    dir: &RunDir,
) -> FitOptions {
    FitOptions {
        epochs: cfg.fit.epochs,
        initial_epoch: cfg.fit.initial_epoch,
        steps_per_epoch: cfg.fit.steps_per_epoch,
        validation_freq: cfg.fit.validation_freq,
        backup: Some(backup),
        on_nan: cfg.fit.on_nan(),
        interrupt,
        report_dir: Some(dir.path().join("nan_report")),
    }
}

/// A finished `fit`, to be written and evaluated.
struct Ended {
    model: Model,
    history: History,
    dir: RunDir,
    ckpt_dir: CheckpointDir,
    interrupt: Option<Interrupt>,
    epochs_before: usize,
}

impl Ended {
    /// Writes the weights, config and history, evaluates on `test` (its metrics written too)
    /// and, with `delete_checkpoint`, removes the checkpoints.
    fn finish(self, cfg: &RunConfig, test: Option<&Dataset>) -> Result<TrainReport> {
        let dir = &self.dir;
        self.model.save_weights(&dir.weights())?;
        for part in self.model.parts() {
            let name = part.name();
            self.model
                .save_part_weights(name, &dir.part_weights(name))?;
        }
        dir.save_config(&cfg.to_toml())?;
        dir.save_history(&self.history)?;
        self.stopped()?;
        let test_logs = match test {
            Some(test) => {
                let logs = self.model.evaluate(test)?;
                dir.save_metrics(&logs)?;
                logs
            }
            None => Logs::default(),
        };
        // A signal during the evaluation: its metrics are saved, and the exit says so.
        self.stopped()?;
        if cfg.backup.delete_checkpoint {
            self.ckpt_dir.clear()?;
        }
        Ok(TrainReport {
            run_dir: dir.path().to_path_buf(),
            model: self.model,
            history: self.history,
            test: test_logs,
            epochs_before: self.epochs_before,
        })
    }

    /// [`KilnError::InterruptedAfterTraining`] when a signal arrived.
    fn stopped(&self) -> Result<()> {
        let signal = self.interrupt.as_ref().and_then(|i| i.requested());
        signal.map_or(Ok(()), |signal| {
            Err(KilnError::InterruptedAfterTraining {
                signal,
                run_dir: self.dir.path().to_path_buf(),
            })
        })
    }
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
