//! BackupAndRestore inside `fit`: writing a checkpoint of the loop's state, resuming from one,
//! and the NaN policy's rollback.

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::store::ModuleRecord;
use burn::tensor::Bytes;

use super::input_cursor::InputCursor;
use super::options::{Backup, FitOptions, OnNan};
use super::{Accumulator, Callback, Control, History, Model};
use crate::checkpoint::{Checkpoint, EpochSums, FORMAT, MODEL_FILE, Manifest, OPTIMIZER_FILE};
use crate::error::{KilnError, Result};
use crate::model::Network;

/// The seed of the backend RNG (dropout) for training step `iteration` of a run seeded with
/// `seed`: SplitMix64's finaliser over both, so neighbouring steps get unrelated streams.
pub(crate) fn step_seed(seed: u64, iteration: u64) -> u64 {
    let mut z = seed ^ iteration.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The loop's own state, besides the model, the optimizer and the input position.
#[derive(Debug, Default)]
pub(super) struct LoopState {
    /// The epoch running (0-based).
    pub(super) epoch: usize,
    /// Sums of the epoch so far.
    pub(super) acc: Accumulator,
    /// Finished epochs.
    pub(super) history: History,
    /// NaN rollbacks so far.
    pub(super) rollbacks: u32,
    /// Batches skipped for a NaN loss in the epoch (`on_nan = "skip_step"`).
    pub(super) skipped_nan_steps: u64,
    /// The sampled gradient norms before the last non-finite loss, oldest first.
    pub(super) recent_grad_norms: Vec<super::GradNormSample>,
    /// The loss scale's state (mixed_float16), as of the last step.
    pub(super) loss_scale: Option<crate::precision::LossScale>,
    /// Training was stopped early (see [`crate::checkpoint::Manifest::stopped`]).
    pub(super) stopped: bool,
}

/// What the loop does after a non-finite loss.
pub(super) enum NanAction {
    /// Go on with the next batch.
    Skip,
    /// State was rolled back: restart the epoch loop from `LoopState`.
    Restart,
}

fn record_error(what: &str, e: impl std::fmt::Display) -> KilnError {
    KilnError::Weights {
        path: what.into(),
        message: e.to_string(),
    }
}

/// The checkpoint files of extra part `name`: its network and its optimizer state.
fn part_files(name: &str) -> (String, String) {
    (
        format!("part-{name}.model.bpk"),
        format!("part-{name}.optimizer.bpk"),
    )
}

/// `net` with the record of `files.0` of `ckpt` loaded, and `optim` with `files.1`'s state.
fn loaded(
    ckpt: &Checkpoint,
    (model, optimizer): &(String, String),
    net: &Network,
    optim: ModuleOptimizer,
) -> Result<(Network, ModuleOptimizer)> {
    let bad = |e: &dyn std::fmt::Display| KilnError::Weights {
        path: ckpt.path.clone(),
        message: format!(
            "the checkpoint does not fit this model ({e}); start over with --no-resume or \
             another run directory"
        ),
    };
    let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(ckpt.file(model)?.to_vec()))
        .map_err(|e| bad(&e))?;
    let net = net.clone().try_load_record(record).map_err(|e| bad(&e))?;
    let optim = optim
        .from_bytes(Bytes::from_bytes_vec(ckpt.file(optimizer)?.to_vec()))
        .map_err(|e| bad(&e))?;
    Ok((net, optim))
}

fn callback_key(i: usize) -> String {
    format!("callback_{i}")
}

impl Model {
    /// The network and optimizer state as burnpack bytes (parameter ids kept, so the optimizer
    /// state finds its parameters after loading); with a custom step's extra parts, each
    /// part's as `part-<name>.model.bpk` and `part-<name>.optimizer.bpk`.
    ///
    /// # Errors
    /// [`KilnError::Weights`] when Burn cannot serialize them.
    pub fn checkpoint_files(&self) -> Result<Vec<(String, Vec<u8>)>> {
        let mut files = Vec::with_capacity(2 + 2 * self.parts.len());
        let mut add = |(model, optim): (String, String), net: &Network, opt: &ModuleOptimizer| {
            let net = net.clone().into_record().into_bytes();
            let net = net.map_err(|e| record_error("model record", e))?;
            let opt = opt.into_bytes();
            let opt = opt.map_err(|e| record_error("optimizer record", e))?;
            files.push((model, net.to_vec()));
            files.push((optim, opt.to_vec()));
            Ok::<(), KilnError>(())
        };
        let main = (MODEL_FILE.to_string(), OPTIMIZER_FILE.to_string());
        add(main, &self.net, &self.optim)?;
        for p in &self.parts {
            add(part_files(p.name()), p.network(), p.optimizer())?;
        }
        Ok(files)
    }

    /// Loads the network and optimizer state of `ckpt` (and every extra part's).
    ///
    /// # Errors
    /// [`KilnError::Weights`] naming the checkpoint when its records do not fit this model.
    pub fn load_checkpoint(&mut self, ckpt: &Checkpoint) -> Result<()> {
        let main = (MODEL_FILE.to_string(), OPTIMIZER_FILE.to_string());
        let optim = self.compiled.optimizer.build();
        let (net, optim) = loaded(ckpt, &main, &self.net, optim)?;
        self.net = net;
        self.optim = optim;
        for i in 0..self.parts.len() {
            let p = &self.parts[i];
            let files = part_files(p.name());
            let optim = p.spec_optimizer().build();
            let (net, optim) = loaded(ckpt, &files, p.network(), optim)?;
            self.parts[i].set_state(net, optim);
        }
        Ok(())
    }

    /// Writes a checkpoint of the loop's state, after every callback's [`Callback::flush`]: what
    /// they wrote for the steps the checkpoint covers is on disk before the checkpoint is.
    pub(super) fn save_checkpoint(
        &self,
        backup: &Backup,
        control: &Control,
        state: &LoopState,
        input: &InputCursor,
        callbacks: &mut [&mut dyn Callback],
    ) -> Result<std::path::PathBuf> {
        for c in callbacks.iter_mut() {
            c.flush()?;
        }
        let manifest = Manifest {
            format: FORMAT,
            kiln_version: env!("CARGO_PKG_VERSION").to_string(),
            epoch: state.epoch,
            step_in_epoch: state.acc.batches,
            iterations: control.iterations,
            learning_rate: control.learning_rate,
            seed: self.seed,
            epoch_sums: state.acc.sums(),
            input: input.position(),
            history: state.history.clone(),
            callbacks: callbacks
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.state().map(|s| (callback_key(i), s)))
                .collect(),
            rollbacks: state.rollbacks,
            config: backup.config.clone(),
            data_fingerprints: backup.data_fingerprints.clone(),
            files: Vec::new(),
            loss_scale: state.loss_scale,
            stopped: state.stopped,
        };
        let files = self.checkpoint_files()?;
        let refs: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(n, b)| (n.as_str(), b.as_slice()))
            .collect();
        backup.dir.save(&manifest, &refs)
    }

    /// Puts the model, optimizer, loop state and callbacks back as `ckpt` recorded them and
    /// returns the input position to restore.
    pub(super) fn resume_from(
        &mut self,
        ckpt: &Checkpoint,
        control: &mut Control,
        state: &mut LoopState,
        callbacks: &mut [&mut dyn Callback],
    ) -> Result<crate::checkpoint::InputPosition> {
        self.load_checkpoint(ckpt)?;
        let m = &ckpt.manifest;
        control.learning_rate = m.learning_rate;
        control.iterations = m.iterations;
        state.epoch = m.epoch;
        state.acc = Accumulator::from_sums(&m.epoch_sums, m.step_in_epoch);
        state.history = m.history.clone();
        state.rollbacks = m.rollbacks;
        state.stopped = m.stopped;
        if m.loss_scale.is_some() {
            state.loss_scale = m.loss_scale;
        }
        for (i, c) in callbacks.iter_mut().enumerate() {
            if let Some(s) = m.callbacks.get(&callback_key(i)) {
                c.restore_state(s)?;
            }
        }
        Ok(m.input)
    }

    /// The NaN policy after batch `step` of the epoch produced a non-finite loss (the network
    /// and optimizer are as before that batch).
    pub(super) fn on_non_finite(
        &mut self,
        opts: &FitOptions,
        control: &mut Control,
        state: &mut LoopState,
        input: &mut InputCursor,
        (step, batch): (u64, &kiln_data::Element),
        callbacks: &mut [&mut dyn Callback],
    ) -> Result<NanAction> {
        let what = format!(
            "the training loss became NaN or infinite at epoch {}, batch {step} (step {} of the \
             run) with learning rate {}",
            state.epoch + 1,
            control.iterations,
            crate::logs::short(control.rate())
        );
        if opts.on_nan == OnNan::SkipStep {
            state.skipped_nan_steps += 1;
            eprintln!("warning: {what}; skipping that batch (on_nan = \"skip_step\")");
            return Ok(NanAction::Skip);
        }
        let report = self.nan_report(opts, control, state, step, batch);
        match opts.on_nan {
            OnNan::Continue | OnNan::SkipStep => unreachable!("handled above or not guarded"),
            OnNan::Stop => Err(KilnError::NanLoss(format!(
                "{what}; stopping (on_nan = \"stop\"; \"rollback\" restores the last checkpoint \
                 with a lower learning rate).\n{report}"
            ))),
            OnNan::Rollback {
                factor,
                max_rollbacks,
            } => {
                let Some(backup) = &opts.backup else {
                    return Err(KilnError::NanLoss(format!(
                        "{what}; on_nan = \"rollback\" needs BackupAndRestore checkpoints, and \
                         this run has none.\n{report}"
                    )));
                };
                if state.rollbacks >= max_rollbacks {
                    return Err(KilnError::NanLoss(format!(
                        "{what}; giving up after {max_rollbacks} rollbacks (fit.max_rollbacks).\n\
                         {report}"
                    )));
                }
                let (ckpt, _) = backup.dir.latest()?;
                let ckpt = ckpt.ok_or_else(|| {
                    KilnError::NanLoss(format!("{what}; no checkpoint to roll back to"))
                })?;
                let rollbacks = state.rollbacks + 1;
                // The rate in use (already lowered by earlier rollbacks), lowered once more:
                // the cuts compound even though the checkpoint may predate them.
                let learning_rate = control.learning_rate * factor;
                let position = self.resume_from(&ckpt, control, state, callbacks)?;
                state.rollbacks = rollbacks;
                control.learning_rate = learning_rate;
                eprintln!(
                    "warning: {what}.\n{report}\nRolled back to {} (epoch {}, batch {}) with \
                     learning rate {} (rollback {rollbacks} of {max_rollbacks})",
                    ckpt.path.display(),
                    state.epoch + 1,
                    state.acc.batches,
                    crate::logs::short(control.rate())
                );
                if control.schedule.is_some() {
                    eprintln!(
                        "note: compile.optimizer.learning_rate is a schedule; its rates are not \
                         lowered by the rollback"
                    );
                }
                input.reposition(position)?;
                Ok(NanAction::Restart)
            }
        }
    }

    /// The NaN report's text for the screen (written to `opts.report_dir` with the batch), or
    /// why it could not be made.
    fn nan_report(
        &self,
        opts: &FitOptions,
        control: &Control,
        state: &LoopState,
        step: u64,
        batch: &kiln_data::Element,
    ) -> String {
        if let Some(step) = &self.train_step {
            return format!(
                "(no NaN report: the model trains with the custom step \"{}\", whose losses are \
                 its own)",
                step.name()
            );
        }
        let dir = opts
            .report_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("kiln-nan-report"));
        let info = super::nan_report::StepInfo {
            epoch: state.epoch,
            step,
            learning_rate: control.rate(),
            recent_grad_norms: state.recent_grad_norms.clone(),
            global_clipnorm: self.compiled.gradients.global_clipnorm,
        };
        match super::nan_report::diagnose(&self.net, &self.spec, &self.compiled, batch, &info, &dir)
        {
            Ok(report) => format!("{report}\n(report and batch saved in {})", dir.display()),
            Err(e) => format!("(no NaN report: {e})"),
        }
    }
}

impl Accumulator {
    /// The sums, for a manifest.
    pub(super) fn sums(&self) -> EpochSums {
        EpochSums {
            examples: self.examples,
            loss: self.loss,
            correct: self.correct.clone(),
            per_output: self.per_output.clone(),
            custom: self.custom.clone(),
        }
    }

    /// An accumulator holding `sums` after `batches` batches.
    pub(super) fn from_sums(sums: &EpochSums, batches: u64) -> Accumulator {
        Accumulator {
            examples: sums.examples,
            loss: sums.loss,
            correct: sums.correct.clone(),
            per_output: sums.per_output.clone(),
            batches,
            custom: sums.custom.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_seeds_differ_between_steps_and_seeds() {
        let a: Vec<u64> = (0..4).map(|i| step_seed(1337, i)).collect();
        let mut sorted = a.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), 4);
        assert_ne!(step_seed(1, 0), step_seed(2, 0));
        assert_eq!(step_seed(5, 9), step_seed(5, 9));
    }
}
