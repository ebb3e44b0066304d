//! `TensorBoard`: write training's values as TensorBoard event files
//! (`keras/src/callbacks/tensorboard.py`, Keras 3).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{KilnError, Result};
use crate::fit::{Callback, FitContext, Logs};
use crate::summary::hparams::{HParamValue, SessionStatus};
use crate::summary::{EventWriter, restart};

/// How often batch-level values are written (Keras' `update_freq`; TOML: `"epoch"`,
/// `"batch"` or a positive integer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpdateFreq {
    /// `"epoch"`: only epoch-level values.
    #[default]
    Epoch,
    /// `"batch"` (= 1) or an integer N: `batch_*` values every N training batches.
    Batches(u64),
}

impl UpdateFreq {
    /// Parses Keras' spellings: `"epoch"`, `"batch"`, or a positive integer.
    ///
    /// # Errors
    /// [`KilnError::Config`] for anything else (0 included: Keras would divide by it).
    pub fn parse(s: &str) -> Result<UpdateFreq> {
        match s {
            "epoch" => Ok(UpdateFreq::Epoch),
            "batch" => Ok(UpdateFreq::Batches(1)),
            n => match n.parse::<u64>() {
                Ok(n) if n > 0 => Ok(UpdateFreq::Batches(n)),
                _ => Err(KilnError::config(
                    "TensorBoard.update_freq",
                    format!("got \"{s}\"; use \"epoch\", \"batch\" or a number of batches >= 1"),
                )),
            },
        }
    }
}

impl serde::Serialize for UpdateFreq {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            UpdateFreq::Epoch => s.serialize_str("epoch"),
            UpdateFreq::Batches(1) => s.serialize_str("batch"),
            UpdateFreq::Batches(n) => s.serialize_u64(*n),
        }
    }
}

impl<'de> serde::Deserialize<'de> for UpdateFreq {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = UpdateFreq;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"epoch\", \"batch\" or a number of batches >= 1")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<UpdateFreq, E> {
                match v {
                    "epoch" => Ok(UpdateFreq::Epoch),
                    "batch" => Ok(UpdateFreq::Batches(1)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<UpdateFreq, E> {
                match u64::try_from(v) {
                    Ok(n) if n > 0 => Ok(UpdateFreq::Batches(n)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Signed(v), &self)),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<UpdateFreq, E> {
                match v {
                    0 => Err(E::invalid_value(serde::de::Unexpected::Unsigned(v), &self)),
                    n => Ok(UpdateFreq::Batches(n)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Keras' `TensorBoard(log_dir="logs", histogram_freq=0, write_steps_per_second=False,
/// update_freq="epoch")`, writing the runs and tags Keras writes:
///
/// | run | tag | step | when |
/// |---|---|---|---|
/// | `<log_dir>/train` | `epoch_<key>` for every non-`val_` key of the epoch's logs (`epoch_loss`, `epoch_accuracy`, and kiln's `epoch_samples_per_second`, `epoch_input_wait_seconds` when `fit` puts them in the logs) | epoch | each epoch |
/// | `train` | `epoch_learning_rate` (from [`FitContext::learning_rate`]) | epoch | each epoch |
/// | `train` | `epoch_steps_per_second` | epoch | with `write_steps_per_second` |
/// | `<log_dir>/validation` | `epoch_<key>` for each `val_<key>` | epoch | each epoch with validation |
/// | `validation` | `evaluation_<key>_vs_iterations` | optimizer steps | each epoch with validation |
/// | `train` | `batch_<key>` (running means), `batch_steps_per_second` | global batch (1-based) | every `update_freq` batches |
/// | `train` | `<weight path>/histogram` (`sequential/dense/kernel/histogram`) | epoch | every `histogram_freq` epochs |
///
/// Values are float32 TF2 scalar summaries; histograms are TF2 `[30, 3]` buckets
/// ([`crate::summary`]). Files are created at the first value (Keras creates writers lazily),
/// flushed at every epoch end, at most [`crate::summary::DEFAULT_FLUSH_INTERVAL`] after each
/// value, and flushed and synced before `fit` commits a checkpoint ([`Callback::flush`]), so a
/// kill never loses values of steps a checkpoint covers; closed at `on_train_end` (or when
/// dropped).
///
/// **Resumed runs continue both axes**: `fit` passes absolute epochs, and the global batch
/// starts from [`FitContext::iterations`] at `on_train_begin` (or from
/// [`TensorBoard::initial_step`] when set, or from the checkpoint's count), so a run resumed
/// after 12 batches writes its first batch at step 13. (Keras restarts its batch counter at
/// each `fit`.) Each run adds new files beside the old ones; TensorBoard shows them as one run.
///
/// **Each step once**: at the first epoch of a training (a resume, a NaN rollback, or a new
/// training in a log directory that already has values), values that TensorBoard shows at or
/// after the steps this training writes again — its epoch, batch `global batch + 1`,
/// iteration `iterations + 1` — are hidden with TensorBoard's restart marker (a `SessionLog`
/// START event, [`crate::summary::restart`]), in `train/` and `validation/` alike; the
/// values before those steps stay.
///
/// | `<log_dir>` | `_hparams_/session_start_info` (HParams plugin) | 0 | at `on_train_begin`, with [`TensorBoard::hparams`] |
/// | `<log_dir>` | `_hparams_/session_end_info`, status success | 0 | at `on_train_end`, with [`TensorBoard::hparams`] |
///
/// The HParams summaries are what Keras' `hp.KerasCallback(log_dir, hparams)` writes into the
/// same `log_dir` ([`crate::summary::hparams`]): TensorBoard's HParams dashboard then shows the
/// run as one session with those hyperparameters and the `train`/`validation` scalars as its
/// metrics (a tuning study gives each trial its own `log_dir`).
///
/// Not written: the model graph (`write_graph`), weight images, embeddings and the profiler
/// trace (`profile_batch`) — kiln has no TensorFlow graph to show.
#[derive(Debug)]
pub struct TensorBoard {
    log_dir: PathBuf,
    histogram_freq: usize,
    write_steps_per_second: bool,
    update_freq: UpdateFreq,
    initial_step: Option<u64>,
    hparams: BTreeMap<String, HParamValue>,
    session: Option<EventWriter>,
    train: Option<EventWriter>,
    validation: Option<EventWriter>,
    global_batch: u64,
    in_batch: bool,
    batch_started: Option<Instant>,
    epoch_started: Option<(Instant, u64)>,
    /// The global batch came from a checkpoint ([`Callback::restore_state`]).
    restored: bool,
    /// The next `on_epoch_begin` hides the values this training writes again.
    restart_pending: bool,
}

/// The steps at which a training that starts here writes its first values, on each of the
/// callback's step axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FirstSteps {
    /// `epoch_*` and histograms: the epoch index.
    pub(crate) epoch: i64,
    /// `batch_*`: the global batch (1-based).
    pub(crate) batch: i64,
    /// `evaluation_*_vs_iterations`: the optimizer step after an epoch.
    pub(crate) iteration: i64,
}

impl FirstSteps {
    /// The first step of series `tag` that this training writes again: earlier values stay,
    /// later ones are orphans of the interrupted training.
    pub(crate) fn of(&self, tag: &str) -> i64 {
        if tag.starts_with("batch_") {
            self.batch
        } else if tag.starts_with("evaluation_") && tag.ends_with("_vs_iterations") {
            self.iteration
        } else {
            self.epoch
        }
    }
}

impl TensorBoard {
    /// Writes under `log_dir` (Keras' default is `"logs"`), with Keras' defaults otherwise.
    pub fn new(log_dir: impl Into<PathBuf>) -> TensorBoard {
        TensorBoard {
            log_dir: log_dir.into(),
            histogram_freq: 0,
            write_steps_per_second: false,
            update_freq: UpdateFreq::Epoch,
            initial_step: None,
            hparams: BTreeMap::new(),
            session: None,
            train: None,
            validation: None,
            global_batch: 0,
            in_batch: false,
            batch_started: None,
            epoch_started: None,
            restored: false,
            restart_pending: false,
        }
    }

    /// Weight histograms every `freq` epochs (epochs `0, freq, 2 freq, ...`); 0 = never.
    pub fn histogram_freq(mut self, freq: usize) -> Self {
        self.histogram_freq = freq;
        self
    }

    /// Also write `epoch_steps_per_second` and `batch_steps_per_second`.
    pub fn write_steps_per_second(mut self, on: bool) -> Self {
        self.write_steps_per_second = on;
        self
    }

    /// How often batch-level values are written.
    pub fn update_freq(mut self, freq: UpdateFreq) -> Self {
        self.update_freq = freq;
        self
    }

    /// Batches already done before this training (a resumed run's step count); by default
    /// [`FitContext::iterations`] at `on_train_begin`.
    pub fn initial_step(mut self, step: u64) -> Self {
        self.initial_step = Some(step);
        self
    }

    /// Hyperparameters of this training, written for TensorBoard's HParams dashboard into
    /// `<log_dir>` at train begin (and the session's end at train end); none by default.
    pub fn hparams(mut self, hparams: BTreeMap<String, HParamValue>) -> Self {
        self.hparams = hparams;
        self
    }

    /// The run directory of training values, `<log_dir>/train`.
    pub fn train_dir(&self) -> PathBuf {
        self.log_dir.join("train")
    }

    /// The run directory of validation values, `<log_dir>/validation`.
    pub fn validation_dir(&self) -> PathBuf {
        self.log_dir.join("validation")
    }

    /// The global batch number of the last batch written (1-based; 0 before the first).
    pub fn global_batch(&self) -> u64 {
        self.global_batch
    }

    fn writer<'a>(slot: &'a mut Option<EventWriter>, dir: &Path) -> Result<&'a mut EventWriter> {
        if slot.is_none() {
            *slot = Some(EventWriter::create(dir)?);
        }
        Ok(slot.as_mut().expect("created above"))
    }

    fn train_writer(&mut self) -> Result<&mut EventWriter> {
        let dir = self.train_dir();
        TensorBoard::writer(&mut self.train, &dir)
    }

    fn validation_writer(&mut self) -> Result<&mut EventWriter> {
        let dir = self.validation_dir();
        TensorBoard::writer(&mut self.validation, &dir)
    }

    fn flush(&mut self) -> Result<()> {
        for w in [&mut self.train, &mut self.validation]
            .into_iter()
            .flatten()
        {
            w.flush()?;
        }
        Ok(())
    }

    /// Hides, in `train/` and `validation/`, what TensorBoard shows at or after the steps this
    /// training writes again ([`restart::plan`]); writers are created only where needed.
    fn restart(&mut self, first: FirstSteps) -> Result<()> {
        let first_orphan = |tag: &str| first.of(tag);
        let train_dir = self.train_dir();
        let validation_dir = self.validation_dir();
        for (slot, dir) in [
            (&mut self.train, train_dir),
            (&mut self.validation, validation_dir),
        ] {
            if let Some(w) = slot.as_mut() {
                // A rollback reads this process's own file too.
                w.flush()?;
            }
            if let Some(plan) = restart::plan(&dir, &first_orphan)? {
                TensorBoard::writer(slot, &dir)?.write_restart(&plan)?;
            }
        }
        Ok(())
    }
}

impl Callback for TensorBoard {
    fn on_train_begin(&mut self, ctx: &mut dyn FitContext) -> Result<()> {
        if !std::mem::take(&mut self.restored) {
            self.global_batch = self.initial_step.unwrap_or_else(|| ctx.iterations());
        }
        self.in_batch = false;
        self.restart_pending = true;
        if !self.hparams.is_empty() {
            let mut w = EventWriter::create(&self.log_dir)?;
            w.add_hparams_session_start(&self.hparams)?;
            w.flush()?;
            self.session = Some(w);
        }
        Ok(())
    }

    fn on_epoch_begin(
        &mut self,
        epoch: usize,
        _epochs: usize,
        _steps: Option<u64>,
        ctx: &mut dyn FitContext,
    ) -> Result<()> {
        if std::mem::take(&mut self.restart_pending) {
            self.restart(FirstSteps {
                epoch: epoch as i64,
                batch: self.global_batch as i64 + 1,
                iteration: ctx.iterations() as i64 + 1,
            })?;
        }
        self.epoch_started = Some((Instant::now(), ctx.iterations()));
        Ok(())
    }

    fn on_train_batch_begin(&mut self, _step: u64, _ctx: &mut dyn FitContext) -> Result<()> {
        self.global_batch += 1;
        self.in_batch = true;
        self.batch_started = Some(Instant::now());
        Ok(())
    }

    fn on_train_batch_end(
        &mut self,
        _step: u64,
        logs: &Logs,
        _ctx: &mut dyn FitContext,
    ) -> Result<()> {
        if !self.in_batch {
            // Driven without `on_train_batch_begin`: count the batch here.
            self.global_batch += 1;
        }
        self.in_batch = false;
        let UpdateFreq::Batches(n) = self.update_freq else {
            return Ok(());
        };
        if !self.global_batch.is_multiple_of(n) {
            return Ok(());
        }
        let step = self.global_batch as i64;
        let per_second = match (self.write_steps_per_second, self.batch_started) {
            (true, Some(t)) => Some(1.0 / t.elapsed().as_secs_f64().max(1e-9)),
            _ => None,
        };
        let w = self.train_writer()?;
        if let Some(v) = per_second {
            w.add_scalar("batch_steps_per_second", v, step)?;
        }
        for (name, value) in &logs.0 {
            w.add_scalar(&format!("batch_{name}"), *value, step)?;
        }
        Ok(())
    }

    fn on_epoch_end(
        &mut self,
        epoch: usize,
        logs: &mut Logs,
        ctx: &mut dyn FitContext,
    ) -> Result<()> {
        let step = epoch as i64;
        let mut train = Logs(
            logs.0
                .iter()
                .filter(|(k, _)| !k.starts_with("val_"))
                .cloned()
                .collect(),
        );
        train.set("learning_rate", ctx.learning_rate());
        if self.write_steps_per_second
            && let Some((started, iterations)) = self.epoch_started
        {
            let steps = ctx.iterations().saturating_sub(iterations) as f64;
            train.set(
                "steps_per_second",
                steps / started.elapsed().as_secs_f64().max(1e-9),
            );
        }
        let w = self.train_writer()?;
        for (name, value) in &train.0 {
            w.add_scalar(&format!("epoch_{name}"), *value, step)?;
        }
        let val: Vec<(String, f64)> = logs
            .0
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("val_").map(|k| (k.to_string(), *v)))
            .collect();
        if !val.is_empty() {
            let iterations = ctx.iterations() as i64;
            let w = self.validation_writer()?;
            for (name, value) in &val {
                w.add_scalar(&format!("epoch_{name}"), *value, step)?;
            }
            for (name, value) in &val {
                w.add_scalar(
                    &format!("evaluation_{name}_vs_iterations"),
                    *value,
                    iterations,
                )?;
            }
        }
        if self.histogram_freq > 0 && epoch.is_multiple_of(self.histogram_freq) {
            let weights = ctx.weights();
            let w = self.train_writer()?;
            for (name, values) in &weights {
                w.add_histogram(&format!("{name}/histogram"), values, step)?;
            }
        }
        self.flush()
    }

    fn on_train_end(&mut self, _logs: &Logs, _ctx: &mut dyn FitContext) -> Result<()> {
        self.restored = false;
        if let Some(w) = self.session.as_mut() {
            w.add_hparams_session_end(SessionStatus::Success)?;
        }
        for w in [
            self.session.take(),
            self.train.take(),
            self.validation.take(),
        ]
        .into_iter()
        .flatten()
        {
            w.close()?;
        }
        Ok(())
    }

    /// Flushes and syncs every event file: the checkpoint about to be committed covers
    /// these values.
    fn flush(&mut self) -> Result<()> {
        for w in [&mut self.session, &mut self.train, &mut self.validation]
            .into_iter()
            .flatten()
        {
            w.sync()?;
        }
        Ok(())
    }

    fn state(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({ "global_batch": self.global_batch }))
    }

    /// The checkpoint's global batch; the next epoch hides the values written after it.
    fn restore_state(&mut self, state: &serde_json::Value) -> Result<()> {
        let global_batch = state
            .get("global_batch")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| KilnError::Callback {
                callback: "TensorBoard".to_string(),
                message: format!(
                    "the checkpoint's TensorBoard state {state} has no global_batch; was it \
                     written for another callback? Start over with --no-resume"
                ),
            })?;
        self.global_batch = global_batch;
        self.in_batch = false;
        self.restored = true;
        self.restart_pending = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::ManualContext;
    use crate::summary::{event_files, read_events, read_scalars};

    /// Runs `epochs` (absolute epoch numbers) of `batches` batches through `tb` as `fit` does:
    /// batch loss `epoch + batch / 10`, epoch logs `loss = 1 / (epoch + 1)`, `accuracy`,
    /// and `val_loss = 2 / (epoch + 1)`.
    fn train(
        tb: &mut TensorBoard,
        ctx: &mut ManualContext,
        epochs: std::ops::Range<usize>,
        batches: u64,
    ) {
        tb.on_train_begin(ctx).unwrap();
        for epoch in epochs.clone() {
            tb.on_epoch_begin(epoch, epochs.end, Some(batches), ctx)
                .unwrap();
            for b in 0..batches {
                tb.on_train_batch_begin(b, ctx).unwrap();
                ctx.iterations += 1;
                let mut logs = Logs::default();
                logs.set("loss", epoch as f64 + b as f64 / 10.0);
                tb.on_train_batch_end(b, &logs, ctx).unwrap();
            }
            let mut logs = Logs::default();
            logs.set("loss", 1.0 / (epoch as f64 + 1.0));
            logs.set("accuracy", 0.5);
            logs.set("val_loss", 2.0 / (epoch as f64 + 1.0));
            tb.on_epoch_end(epoch, &mut logs, ctx).unwrap();
        }
        tb.on_train_end(&Logs::default(), ctx).unwrap();
    }

    #[test]
    fn keras_tags_steps_and_runs() {
        let dir = tempfile::tempdir().unwrap();
        let mut tb = TensorBoard::new(dir.path()).update_freq(UpdateFreq::Batches(2));
        let mut ctx = ManualContext::new(0.01);
        train(&mut tb, &mut ctx, 0..2, 3);
        let train_dir = dir.path().join("train");
        let val_dir = dir.path().join("validation");
        assert_eq!(
            read_scalars(&train_dir, "epoch_loss").unwrap(),
            vec![(0, 1.0), (1, 0.5)]
        );
        assert_eq!(
            read_scalars(&train_dir, "epoch_accuracy").unwrap(),
            vec![(0, 0.5), (1, 0.5)]
        );
        assert_eq!(
            read_scalars(&train_dir, "epoch_learning_rate").unwrap(),
            vec![(0, 0.01), (1, 0.01)]
        );
        assert!(
            read_scalars(&train_dir, "epoch_val_loss")
                .unwrap()
                .is_empty()
        );
        // Global batches 1..=6, written at 2, 4, 6: epoch 0 batch 1, epoch 1 batches 0 and 2.
        assert_eq!(
            read_scalars(&train_dir, "batch_loss").unwrap(),
            vec![(2, 0.1), (4, 1.0), (6, 1.2)]
        );
        assert_eq!(
            read_scalars(&val_dir, "epoch_loss").unwrap(),
            vec![(0, 2.0), (1, 1.0)]
        );
        assert_eq!(
            read_scalars(&val_dir, "evaluation_loss_vs_iterations").unwrap(),
            vec![(3, 2.0), (6, 1.0)]
        );
        assert_eq!(event_files(&train_dir).unwrap().len(), 1);
    }

    #[test]
    fn a_resumed_run_continues_both_step_axes() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = ManualContext::new(0.01);
        let batch = UpdateFreq::Batches(1);
        train(
            &mut TensorBoard::new(dir.path()).update_freq(batch),
            &mut ctx,
            0..2,
            2,
        );
        // A new process resumes at epoch 2 after 4 batches (the context carries the count).
        let mut ctx = ManualContext {
            iterations: 4,
            ..ManualContext::new(0.01)
        };
        train(
            &mut TensorBoard::new(dir.path()).update_freq(batch),
            &mut ctx,
            2..3,
            2,
        );
        let train_dir = dir.path().join("train");
        assert_eq!(event_files(&train_dir).unwrap().len(), 2);
        let steps = |tag| -> Vec<i64> {
            let mut s: Vec<i64> = read_scalars(&train_dir, tag)
                .unwrap()
                .into_iter()
                .map(|(s, _)| s)
                .collect();
            s.sort();
            s
        };
        assert_eq!(steps("epoch_loss"), vec![0, 1, 2]);
        assert_eq!(steps("batch_loss"), vec![1, 2, 3, 4, 5, 6]);
        // An explicit initial step wins over the context.
        let other = tempfile::tempdir().unwrap();
        let mut tb = TensorBoard::new(other.path())
            .update_freq(batch)
            .initial_step(100);
        train(&mut tb, &mut ManualContext::new(0.1), 0..1, 1);
        assert_eq!(tb.global_batch(), 101);
    }

    fn visible_steps(dir: &Path, tag: &str) -> Vec<i64> {
        crate::summary::visible_scalars(dir, tag)
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect()
    }

    #[test]
    fn a_resume_from_an_older_checkpoint_shows_every_step_once() {
        let dir = tempfile::tempdir().unwrap();
        let batch = UpdateFreq::Batches(1);
        // Epochs 0 and 1 (batches 1..=8); the newest checkpoint is lost, so the run resumes
        // from the one after epoch 0 (4 batches) and trains epochs 1 and 2 again.
        let mut ctx = ManualContext::new(0.01);
        train(
            &mut TensorBoard::new(dir.path()).update_freq(batch),
            &mut ctx,
            0..2,
            4,
        );
        let mut ctx = ManualContext {
            iterations: 4,
            ..ManualContext::new(0.01)
        };
        train(
            &mut TensorBoard::new(dir.path()).update_freq(batch),
            &mut ctx,
            1..3,
            4,
        );
        let (train_dir, val_dir) = (dir.path().join("train"), dir.path().join("validation"));
        // The files hold epoch 1 and batches 5..=8 twice; TensorBoard shows them once.
        assert_eq!(read_scalars(&train_dir, "epoch_loss").unwrap().len(), 4);
        assert_eq!(visible_steps(&train_dir, "epoch_loss"), [0, 1, 2]);
        assert_eq!(visible_steps(&train_dir, "epoch_learning_rate"), [0, 1, 2]);
        assert_eq!(
            visible_steps(&train_dir, "batch_loss"),
            (1..=12).collect::<Vec<_>>()
        );
        assert_eq!(visible_steps(&val_dir, "epoch_loss"), [0, 1, 2]);
        assert_eq!(
            visible_steps(&val_dir, "evaluation_loss_vs_iterations"),
            [4, 8, 12]
        );
    }

    #[test]
    fn a_rollback_hides_the_batches_after_its_checkpoint_in_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut tb = TensorBoard::new(dir.path()).update_freq(UpdateFreq::Batches(1));
        let mut ctx = ManualContext::new(0.01);
        fn batches(tb: &mut TensorBoard, ctx: &mut ManualContext, n: u64, loss: f64) {
            for b in 0..n {
                tb.on_train_batch_begin(b, ctx).unwrap();
                ctx.iterations += 1;
                let mut logs = Logs::default();
                logs.set("loss", loss);
                tb.on_train_batch_end(b, &logs, ctx).unwrap();
            }
        }
        tb.on_train_begin(&mut ctx).unwrap();
        tb.on_epoch_begin(0, 2, Some(4), &mut ctx).unwrap();
        batches(&mut tb, &mut ctx, 4, 1.0);
        let checkpoint = tb.state().unwrap();
        assert_eq!(checkpoint, serde_json::json!({ "global_batch": 4 }));
        // Epoch 1: two batches, the second one's loss is NaN: fit rolls back to the
        // checkpoint after epoch 0 and runs epoch 1 again (with another learning rate).
        tb.on_epoch_begin(1, 2, Some(4), &mut ctx).unwrap();
        batches(&mut tb, &mut ctx, 2, 2.0);
        tb.on_train_batch_begin(2, &mut ctx).unwrap();
        ctx.iterations = 4;
        tb.restore_state(&checkpoint).unwrap();
        tb.on_epoch_begin(1, 2, Some(4), &mut ctx).unwrap();
        batches(&mut tb, &mut ctx, 4, 3.0);
        tb.on_train_end(&Logs::default(), &mut ctx).unwrap();
        let train_dir = dir.path().join("train");
        assert_eq!(
            event_files(&train_dir).unwrap().len(),
            1,
            "one process, one file"
        );
        assert_eq!(
            crate::summary::visible_scalars(&train_dir, "batch_loss").unwrap(),
            [1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0]
                .iter()
                .enumerate()
                .map(|(i, v)| (i as i64 + 1, *v as f32))
                .collect::<Vec<_>>()
        );
        let err = tb
            .restore_state(&serde_json::json!({ "wait": 1 }))
            .unwrap_err()
            .to_string();
        assert!(err.contains("global_batch"), "{err}");
    }

    #[test]
    fn histograms_every_histogram_freq_epochs_and_steps_per_second() {
        let dir = tempfile::tempdir().unwrap();
        let mut tb = TensorBoard::new(dir.path())
            .histogram_freq(2)
            .write_steps_per_second(true);
        let mut ctx = ManualContext::new(0.1);
        ctx.weights = vec![("seq/dense/kernel".into(), vec![1.0, 2.0, 3.0])];
        train(&mut tb, &mut ctx, 0..3, 2);
        let train_dir = dir.path().join("train");
        let mut hist_steps = Vec::new();
        for file in event_files(&train_dir).unwrap() {
            for e in read_events(&file).unwrap() {
                for v in e.values() {
                    if v.tag == "seq/dense/kernel/histogram" {
                        assert_eq!(v.plugin_name(), Some("histograms"));
                        let rows = v.as_histogram().unwrap();
                        assert_eq!(rows.iter().map(|r| r[2]).sum::<f64>(), 3.0);
                        hist_steps.push(e.step);
                    }
                }
            }
        }
        assert_eq!(hist_steps, vec![0, 2]);
        let sps = read_scalars(&train_dir, "epoch_steps_per_second").unwrap();
        assert_eq!(sps.len(), 3);
        assert!(sps.iter().all(|(_, v)| *v > 0.0));
        // update_freq = "epoch": no batch values.
        assert!(read_scalars(&train_dir, "batch_loss").unwrap().is_empty());
    }

    #[test]
    fn hparams_session_in_the_log_dir() {
        use crate::summary::hparams::{HParamValue, PluginDataKind, ProtoValueKind};
        let dir = tempfile::tempdir().unwrap();
        let hparams: BTreeMap<String, HParamValue> = [
            ("learning_rate".to_string(), HParamValue::Float(0.01)),
            ("units".to_string(), HParamValue::Int(32)),
        ]
        .into();
        let mut tb = TensorBoard::new(dir.path()).hparams(hparams);
        train(&mut tb, &mut ManualContext::new(0.01), 0..1, 1);
        // The session's events are in <log_dir> itself, beside train/ and validation/.
        let files = event_files(dir.path()).unwrap();
        assert_eq!(files.len(), 1);
        let values: Vec<_> = read_events(&files[0])
            .unwrap()
            .iter()
            .flat_map(|e| e.values().to_vec())
            .collect();
        let kinds: Vec<_> = values
            .iter()
            .map(|v| v.as_hparams().unwrap().data.unwrap())
            .collect();
        let [
            PluginDataKind::SessionStartInfo(start),
            PluginDataKind::SessionEndInfo(end),
        ] = kinds.as_slice()
        else {
            panic!("{kinds:?}");
        };
        assert_eq!(
            start.hparams["learning_rate"].kind,
            Some(ProtoValueKind::NumberValue(0.01))
        );
        assert_eq!(
            start.hparams["units"].kind,
            Some(ProtoValueKind::NumberValue(32.0))
        );
        assert_eq!(end.status, 1);
        // Without hparams, nothing is written there.
        let other = tempfile::tempdir().unwrap();
        train(
            &mut TensorBoard::new(other.path()),
            &mut ManualContext::new(0.01),
            0..1,
            1,
        );
        assert!(event_files(other.path()).unwrap().is_empty());
    }

    #[test]
    fn update_freq_parses_keras_spellings() {
        assert_eq!(UpdateFreq::parse("epoch").unwrap(), UpdateFreq::Epoch);
        assert_eq!(UpdateFreq::parse("batch").unwrap(), UpdateFreq::Batches(1));
        assert_eq!(UpdateFreq::parse("100").unwrap(), UpdateFreq::Batches(100));
        let err = UpdateFreq::parse("0").unwrap_err().to_string();
        assert!(
            err.contains("update_freq") && err.contains("\"0\""),
            "{err}"
        );
        assert!(UpdateFreq::parse("epochs").is_err());
    }
}
