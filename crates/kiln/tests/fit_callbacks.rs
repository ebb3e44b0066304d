//! Keras callbacks driven by `Model::fit` itself: the learning rate they set is the one the
//! steps use, the weights they restore are the model's, and TensorBoard sees fit's values —
//! on disk before each checkpoint, and once each after a resume.

mod common;

use std::cell::RefCell;
use std::path::PathBuf;

use kiln::callbacks::{EarlyStopping, LearningRateScheduler, TensorBoard, UpdateFreq};
use kiln::checkpoint::CheckpointDir;
use kiln::fit::{Backup, FitContext, FitOptions, NamedWeight, SaveFreq};
use kiln::model::weights::keras_weights;
use kiln::summary::{event_files, read_events, read_scalars, visible_scalars};
use kiln::{Callback, Logs, Model};
use kiln_data::Dataset;

fn data() -> Dataset {
    common::two_class_points()
}

fn model() -> Model {
    common::two_layer_classifier("toy", 4, 2, 5)
}

/// Overwrites `val_loss` with a script (so the test decides which epoch is best) and records
/// the weights at each epoch end.
struct Script {
    val_loss: Vec<f64>,
    weights: Vec<Vec<NamedWeight>>,
}

impl Callback for Script {
    fn on_epoch_end(
        &mut self,
        epoch: usize,
        logs: &mut Logs,
        ctx: &mut dyn FitContext,
    ) -> kiln::Result<()> {
        logs.set("val_loss", self.val_loss[epoch]);
        self.weights.push(ctx.weights());
        Ok(())
    }
}

fn model_weights(m: &Model) -> Vec<Vec<f32>> {
    keras_weights(m.spec(), m.network())
        .into_iter()
        .map(|(_, _, v)| v)
        .collect()
}

fn values(ws: &[NamedWeight]) -> Vec<Vec<f32>> {
    ws.iter().map(|(_, v)| v.clone()).collect()
}

#[test]
fn early_stopping_stops_where_keras_does_and_restores_the_best_epochs_weights() {
    let mut m = model();
    // Keras (see callbacks/early_stopping.rs): patience 2 on this sequence stops after epoch 3
    // with epoch 1 best.
    let mut script = Script {
        val_loss: vec![1.0, 0.8, 0.9, 0.85, 0.7, 0.6],
        weights: Vec::new(),
    };
    let mut es = EarlyStopping::new().patience(2).restore_best_weights(true);
    let history = m
        .fit(&data(), None, 6, &mut [&mut script, &mut es])
        .unwrap();
    assert_eq!(history.epoch, vec![0, 1, 2, 3]);
    assert_eq!(es.stopped_epoch(), Some(3));
    let recorded: Vec<Vec<Vec<f32>>> = script.weights.iter().map(|w| values(w)).collect();
    assert_ne!(
        recorded[3], recorded[1],
        "training changed the weights after epoch 1"
    );
    assert_eq!(model_weights(&m), recorded[1]);
    assert_eq!(
        script.weights[0][0].0, "toy/dense/kernel",
        "Keras 3 weight paths"
    );
}

#[test]
fn the_learning_rate_a_callback_sets_is_the_one_the_steps_use() {
    let mut m = model();
    let mut script = Script {
        val_loss: vec![0.0; 3],
        weights: Vec::new(),
    };
    // Epoch 0 trains at 0.01; from epoch 1 on the rate is 0, so the weights stop moving.
    let mut lr = LearningRateScheduler::new(|epoch, lr| if epoch == 0 { lr } else { 0.0 });
    let history = m
        .fit(&data(), None, 3, &mut [&mut lr, &mut script])
        .unwrap();
    let w: Vec<Vec<Vec<f32>>> = script.weights.iter().map(|w| values(w)).collect();
    assert_eq!(w[1], w[0]);
    assert_eq!(w[2], w[0]);
    assert_eq!(
        history.history["learning_rate"],
        vec![0.01f32 as f64, 0.0, 0.0],
        "learning_rate added to the logs reaches the history, as in Keras"
    );
    // And a rate that stays 0.01 does move them.
    let mut m = model();
    let mut script = Script {
        val_loss: vec![0.0; 2],
        weights: Vec::new(),
    };
    m.fit(&data(), None, 2, &mut [&mut script]).unwrap();
    assert_ne!(values(&script.weights[1]), values(&script.weights[0]));
}

#[test]
fn tensorboard_records_fits_values() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = model();
    let mut tb = TensorBoard::new(dir.path()).histogram_freq(1);
    let history = m.fit(&data(), Some(&data()), 2, &mut [&mut tb]).unwrap();
    let train = dir.path().join("train");
    let as_f32 = |v: &[f64]| -> Vec<(i64, f32)> {
        v.iter()
            .enumerate()
            .map(|(i, &x)| (i as i64, x as f32))
            .collect()
    };
    assert_eq!(
        read_scalars(&train, "epoch_loss").unwrap(),
        as_f32(&history.history["loss"])
    );
    assert_eq!(
        read_scalars(&train, "epoch_accuracy").unwrap(),
        as_f32(&history.history["accuracy"])
    );
    assert_eq!(
        read_scalars(&train, "epoch_learning_rate").unwrap(),
        vec![(0, 0.01), (1, 0.01)]
    );
    assert_eq!(
        read_scalars(&dir.path().join("validation"), "epoch_loss").unwrap(),
        as_f32(&history.history["val_loss"])
    );
    // 64 / 16 = 4 batches per epoch.
    assert_eq!(
        read_scalars(
            &dir.path().join("validation"),
            "evaluation_loss_vs_iterations"
        )
        .unwrap()
        .iter()
        .map(|(s, _)| *s)
        .collect::<Vec<_>>(),
        vec![4, 8]
    );
    let mut kernel_counts = Vec::new();
    for f in event_files(&train).unwrap() {
        for e in read_events(&f).unwrap() {
            for v in e.values() {
                if v.tag == "toy/dense/kernel/histogram" {
                    let total: f64 = v.as_histogram().unwrap().iter().map(|r| r[2]).sum();
                    kernel_counts.push((e.step, total));
                }
            }
        }
    }
    assert_eq!(
        kernel_counts,
        vec![(0, 8.0), (1, 8.0)],
        "2 x 4 kernel values per epoch"
    );
}

fn backup(dir: &CheckpointDir, save_freq: SaveFreq, resume: Option<PathBuf>) -> Backup {
    Backup {
        dir: dir.clone(),
        save_freq,
        resume: resume.map(|p| CheckpointDir::read(&p).unwrap()),
        config: String::new(),
        data_fingerprints: Default::default(),
    }
}

/// Placed after `TensorBoard`: its `state` is read while `fit` builds a checkpoint's
/// manifest — after every callback's `flush`, before the checkpoint is committed — and
/// records the batch steps TensorBoard's files hold at that moment.
struct OnDiskAtCheckpoint {
    train_dir: PathBuf,
    iterations: u64,
    seen: RefCell<Vec<(u64, Vec<i64>)>>,
}

impl Callback for OnDiskAtCheckpoint {
    fn on_train_batch_end(
        &mut self,
        _step: u64,
        _logs: &Logs,
        ctx: &mut dyn FitContext,
    ) -> kiln::Result<()> {
        self.iterations = ctx.iterations();
        Ok(())
    }

    fn state(&self) -> Option<serde_json::Value> {
        let steps = match self.train_dir.exists() {
            true => read_scalars(&self.train_dir, "batch_loss").unwrap(),
            false => Vec::new(),
        };
        let steps = steps.into_iter().map(|(s, _)| s).collect();
        self.seen.borrow_mut().push((self.iterations, steps));
        None
    }
}

#[test]
fn tensorboard_values_are_on_disk_before_each_checkpoint_is_committed() {
    let logs = tempfile::tempdir().unwrap();
    let ckpts = CheckpointDir::new(logs.path().join("checkpoints"), 3);
    let mut tb = TensorBoard::new(logs.path()).update_freq(UpdateFreq::Batches(1));
    let mut probe = OnDiskAtCheckpoint {
        train_dir: logs.path().join("train"),
        iterations: 0,
        seen: RefCell::new(Vec::new()),
    };
    let opts = FitOptions {
        backup: Some(backup(&ckpts, SaveFreq::Batches(3), None)),
        ..FitOptions::epochs(2)
    };
    model()
        .fit_with(&data(), None, &opts, &mut [&mut tb, &mut probe])
        .unwrap();
    // Checkpoints at the start, after batches 3 and 6, and at the epoch ends (4, 8). Without
    // the flush, batches 1..=3 would still be queued (10 events per flush) at the first.
    let seen = probe.seen.into_inner();
    let at: Vec<u64> = seen.iter().map(|(i, _)| *i).collect();
    assert_eq!(at, [0, 3, 4, 6, 8]);
    for (iterations, steps) in seen {
        assert_eq!(
            steps,
            (1..=iterations as i64).collect::<Vec<_>>(),
            "on disk at the checkpoint after {iterations} batches"
        );
    }
}

#[test]
fn a_fit_resumed_from_an_older_checkpoint_shows_each_step_once_in_tensorboard() {
    let logs = tempfile::tempdir().unwrap();
    let ckpts = CheckpointDir::new(logs.path().join("checkpoints"), 3);
    let tensorboard = || TensorBoard::new(logs.path()).update_freq(UpdateFreq::Batches(1));
    let opts = FitOptions {
        backup: Some(backup(&ckpts, SaveFreq::Epoch, None)),
        ..FitOptions::epochs(2)
    };
    model()
        .fit_with(&data(), Some(&data()), &opts, &mut [&mut tensorboard()])
        .unwrap();
    // The newest checkpoint (after epoch 2, 8 batches) is unusable: resume from the one after
    // epoch 1 (4 batches) and train to 3 epochs.
    let older = ckpts.path().join("ckpt-000000000004");
    let opts = FitOptions {
        backup: Some(backup(&ckpts, SaveFreq::Epoch, Some(older))),
        ..FitOptions::epochs(3)
    };
    let history = model()
        .fit_with(&data(), Some(&data()), &opts, &mut [&mut tensorboard()])
        .unwrap();
    let (train, validation) = (logs.path().join("train"), logs.path().join("validation"));
    let steps = |dir: &std::path::Path, tag: &str| -> Vec<i64> {
        visible_scalars(dir, tag)
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect()
    };
    // The files hold epoch 1 twice (the first process's and the resumed one's).
    assert_eq!(read_scalars(&train, "epoch_loss").unwrap().len(), 4);
    let as_f32 = |v: &[f64]| -> Vec<(i64, f32)> {
        v.iter()
            .enumerate()
            .map(|(i, &x)| (i as i64, x as f32))
            .collect()
    };
    assert_eq!(
        visible_scalars(&train, "epoch_loss").unwrap(),
        as_f32(&history.history["loss"]),
        "the resumed values, each epoch once"
    );
    assert_eq!(
        visible_scalars(&validation, "epoch_loss").unwrap(),
        as_f32(&history.history["val_loss"])
    );
    assert_eq!(steps(&train, "batch_loss"), (1..=12).collect::<Vec<_>>());
    assert_eq!(
        steps(&validation, "evaluation_loss_vs_iterations"),
        [4, 8, 12]
    );
}

#[test]
fn a_run_stopped_early_is_finished_and_a_resume_trains_no_further() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = CheckpointDir::new(tmp.path().join("ckpt"), 3);
    let script = || Script {
        val_loss: vec![1.0, 0.8, 0.9, 0.85, 0.7, 0.6],
        weights: Vec::new(),
    };
    let (mut m, mut s, mut es) = (model(), script(), EarlyStopping::new().patience(2));
    let opts = FitOptions {
        backup: Some(backup(&dir, SaveFreq::Epoch, None)),
        ..FitOptions::epochs(6)
    };
    let first = m
        .fit_with(&data(), None, &opts, &mut [&mut s, &mut es])
        .unwrap();
    assert_eq!(
        first.epoch,
        vec![0, 1, 2, 3],
        "EarlyStopping stops after epoch 3"
    );
    let latest = dir.latest().unwrap().0.unwrap();
    assert!(
        latest.manifest.stopped,
        "the last checkpoint says training ended"
    );
    // The same fit again, resumed from that checkpoint: nothing more is trained.
    let (mut again, mut s, mut es) = (model(), script(), EarlyStopping::new().patience(2));
    let opts = FitOptions {
        backup: Some(backup(&dir, SaveFreq::Epoch, Some(latest.path.clone()))),
        ..FitOptions::epochs(6)
    };
    let second = again
        .fit_with(&data(), None, &opts, &mut [&mut s, &mut es])
        .unwrap();
    assert_eq!(second.epoch, first.epoch);
    assert_eq!(model_weights(&again), model_weights(&m));
}

#[test]
fn an_input_shorter_than_steps_per_epoch_ends_each_epoch_early_as_keras_does() {
    // 4 batches, steps_per_epoch 6, 3 epochs: Keras 3.15 warns, ends each epoch after the
    // batches it has and starts a new pass, so all 3 epochs run on 4 batches each.
    let mut m = model();
    let opts = FitOptions {
        steps_per_epoch: Some(6),
        ..FitOptions::epochs(3)
    };
    let history = m.fit_with(&data(), None, &opts, &mut []).unwrap();
    assert_eq!(history.epoch, vec![0, 1, 2]);
    let mut one_pass = model();
    let opts = FitOptions {
        steps_per_epoch: Some(4),
        ..FitOptions::epochs(3)
    };
    let full = one_pass.fit_with(&data(), None, &opts, &mut []).unwrap();
    assert_eq!(history.history["loss"], full.history["loss"]);
}
