use super::*;
use std::cell::RefCell;

use crate::fit::{ManualContext, NamedWeight, WeightsSnapshot};

/// A [`ManualContext`] that records every `save_weights` call: the file name and the epoch
/// whose weights were saved (the model's one weight is the epoch number), as the Keras script
/// records its `model.save_weights` calls.
#[derive(Default)]
struct Recorder {
    inner: ManualContext,
    saved: RefCell<Vec<(String, usize)>>,
}

impl FitContext for Recorder {
    fn learning_rate(&self) -> f64 {
        self.inner.learning_rate
    }
    fn set_learning_rate(&mut self, lr: f64) {
        self.inner.learning_rate = lr;
    }
    fn stop_training(&self) -> bool {
        self.inner.stop_training
    }
    fn set_stop_training(&mut self, value: bool) {
        self.inner.stop_training = value;
    }
    fn iterations(&self) -> u64 {
        self.inner.iterations
    }
    fn snapshot_weights(&self) -> WeightsSnapshot {
        self.inner.snapshot_weights()
    }
    fn restore_weights(&mut self, snapshot: &WeightsSnapshot) -> Result<()> {
        self.inner.restore_weights(snapshot)
    }
    fn weights(&self) -> Vec<NamedWeight> {
        self.inner.weights()
    }
    fn save_weights(&self, path: &Path) -> Result<()> {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let epoch = self.inner.weights[0].1[0] as usize;
        self.saved.borrow_mut().push((name, epoch));
        self.inner.save_weights(path)
    }
}

/// Drives `cb` through `epochs` as `fit` does (`on_epoch_begin`, `batches` batches with
/// batch logs `loss = epoch + batch / 10`, `on_epoch_end`), from epoch `from`; returns the
/// saves as `(file name, epoch of the weights)`.
fn drive(
    cb: &mut ModelCheckpoint,
    epochs: &[Logs],
    batches: u64,
    from: usize,
) -> Vec<(String, usize)> {
    let mut ctx = Recorder::default();
    cb.on_train_begin(&mut ctx).unwrap();
    for (epoch, logs) in epochs.iter().enumerate().skip(from) {
        ctx.inner.weights = vec![("w".into(), vec![epoch as f32])];
        cb.on_epoch_begin(epoch, epochs.len(), Some(batches), &mut ctx)
            .unwrap();
        for b in 0..batches {
            let mut l = Logs::default();
            l.set("loss", epoch as f64 + b as f64 / 10.0);
            cb.on_train_batch_end(b, &l, &mut ctx).unwrap();
        }
        cb.on_epoch_end(epoch, &mut logs.clone(), &mut ctx).unwrap();
    }
    cb.on_train_end(&Logs::default(), &mut ctx).unwrap();
    ctx.saved.into_inner()
}

fn val(key: &str, values: &[f64]) -> Vec<Logs> {
    values
        .iter()
        .map(|&v| {
            let mut l = Logs::default();
            l.set("loss", 1.0);
            l.set(key, v);
            l
        })
        .collect()
}

fn saves(pairs: &[(&str, usize)]) -> Vec<(String, usize)> {
    pairs.iter().map(|(n, e)| (n.to_string(), *e)).collect()
}

fn checkpoint(dir: &Path, filepath: &str) -> ModelCheckpoint {
    ModelCheckpoint::new(filepath).unwrap().base_dir(dir)
}

// Expected saves: Keras 3.15's ModelCheckpoint driven with the same logs by
// `tests/reference/keras_model_checkpoint_reference.py` (its `.weights.h5` names written here
// as `.safetensors`).

#[test]
fn every_epoch_with_formatted_names() {
    // "every epoch: ... saved=[('ckpt-01-0.50.weights.h5', 0), ('ckpt-02-0.40.weights.h5', 1),
    //  ('ckpt-03-0.46.weights.h5', 2), ('ckpt-04-0.30.weights.h5', 3)]"
    let dir = tempfile::tempdir().unwrap();
    let mut cb = checkpoint(dir.path(), "ckpt-{epoch:02d}-{val_loss:.2f}.safetensors");
    let got = drive(&mut cb, &val("val_loss", &[0.5, 0.4, 0.456, 0.3]), 0, 0);
    assert_eq!(
        got,
        saves(&[
            ("ckpt-01-0.50.safetensors", 0),
            ("ckpt-02-0.40.safetensors", 1),
            ("ckpt-03-0.46.safetensors", 2),
            ("ckpt-04-0.30.safetensors", 3),
        ])
    );
    for (name, _) in &got {
        assert!(dir.path().join(name).is_file(), "{name}");
    }
}

#[test]
fn best_only_overwrites_one_file_when_the_monitor_improves() {
    // "best only: values 1.0, 0.8, 0.9, 0.7, 0.7, nan, 0.6 -> saved=[('best.weights.h5', 0),
    //  ('best.weights.h5', 1), ('best.weights.h5', 3), ('best.weights.h5', 6)] best=0.6"
    let dir = tempfile::tempdir().unwrap();
    let mut cb = checkpoint(dir.path(), "best.safetensors").save_best_only(true);
    let values = [1.0, 0.8, 0.9, 0.7, 0.7, f64::NAN, 0.6];
    let got = drive(&mut cb, &val("val_loss", &values), 0, 0);
    let b = "best.safetensors";
    assert_eq!(got, saves(&[(b, 0), (b, 1), (b, 3), (b, 6)]));
    assert_eq!(cb.best(), Some(0.6));
    // "best only, named by epoch: 1.0, 0.8, 0.9, 0.7 -> e1, e2, e4; best=0.7"
    let mut cb = checkpoint(dir.path(), "e{epoch}.safetensors").save_best_only(true);
    let got = drive(&mut cb, &val("val_loss", &[1.0, 0.8, 0.9, 0.7]), 0, 0);
    assert_eq!(
        got,
        saves(&[
            ("e1.safetensors", 0),
            ("e2.safetensors", 1),
            ("e4.safetensors", 3)
        ])
    );
    assert!(!dir.path().join("e3.safetensors").exists());
}

#[test]
fn max_mode_and_auto_mode_for_accuracy() {
    // "best only, max: val_accuracy 0.5, 0.7, 0.6, 0.9 -> e1, e2, e4; best=0.9". With
    // mode = "auto", kiln reads accuracy's direction from its name (Keras from the compiled
    // metric, the same "up").
    let want = saves(&[
        ("e1.safetensors", 0),
        ("e2.safetensors", 1),
        ("e4.safetensors", 3),
    ]);
    let logs = val("val_accuracy", &[0.5, 0.7, 0.6, 0.9]);
    for mode in [Mode::Max, Mode::Auto] {
        let dir = tempfile::tempdir().unwrap();
        let mut cb = checkpoint(dir.path(), "e{epoch}.safetensors")
            .save_best_only(true)
            .monitor("val_accuracy")
            .mode(mode);
        assert_eq!(drive(&mut cb, &logs, 0, 0), want, "{mode:?}");
        assert_eq!(cb.best(), Some(0.9));
    }
}

#[test]
fn initial_value_threshold_must_be_beaten_first() {
    // "initial_value_threshold 0.75: 0.8, 0.7, 0.72, 0.6 -> e2, e4; best=0.6"
    let dir = tempfile::tempdir().unwrap();
    let mut cb = checkpoint(dir.path(), "e{epoch}.safetensors")
        .save_best_only(true)
        .initial_value_threshold(0.75);
    assert_eq!(cb.best(), Some(0.75));
    let got = drive(&mut cb, &val("val_loss", &[0.8, 0.7, 0.72, 0.6]), 0, 0);
    assert_eq!(got, saves(&[("e2.safetensors", 1), ("e4.safetensors", 3)]));
    assert_eq!(cb.best(), Some(0.6));
}

#[test]
fn a_missing_monitor_warns_and_saves_as_keras_3() {
    // "monitor missing: [{loss: 1.0}, {loss: 0.5}] -> saved e1, e2; warnings=['Can save best
    //  model only with val_loss available.'] best=None"
    let dir = tempfile::tempdir().unwrap();
    let mut cb = checkpoint(dir.path(), "e{epoch}.safetensors").save_best_only(true);
    let logs: Vec<Logs> = [1.0, 0.5]
        .iter()
        .map(|&v| {
            let mut l = Logs::default();
            l.set("loss", v);
            l
        })
        .collect();
    let got = drive(&mut cb, &logs, 0, 0);
    assert_eq!(got, saves(&[("e1.safetensors", 0), ("e2.safetensors", 1)]));
    assert_eq!(cb.best(), None);
}

#[test]
fn every_n_batches_counts_across_epochs() {
    // 2 epochs of 4 batches, save_freq 3: global batches 3 and 6 = epoch 1 batch 3 and epoch 2
    // batch 2. "every 3 batches: -> saved=[('b-1-3-0.200.weights.h5', 0),
    //  ('b-2-2-1.100.weights.h5', 1)]"
    let dir = tempfile::tempdir().unwrap();
    let mut cb = checkpoint(dir.path(), "b-{epoch}-{batch}-{loss:.3f}.safetensors")
        .save_freq(SaveFreq::Batches(3));
    let got = drive(&mut cb, &val("val_loss", &[0.5, 0.4]), 4, 0);
    assert_eq!(
        got,
        saves(&[
            ("b-1-3-0.200.safetensors", 0),
            ("b-2-2-1.100.safetensors", 1)
        ])
    );
    // "every 3 batches, best loss: -> saved=[('b-1-3.weights.h5', 0)] best=0.2"
    let mut cb = checkpoint(dir.path(), "c-{epoch}-{batch}.safetensors")
        .save_freq(SaveFreq::Batches(3))
        .save_best_only(true)
        .monitor("loss")
        .mode(Mode::Min);
    let got = drive(&mut cb, &val("val_loss", &[0.5, 0.4]), 4, 0);
    assert_eq!(got, saves(&[("c-1-3.safetensors", 0)]));
    assert_eq!(cb.best(), Some(0.2));
}

/// Runs `make()` over `epochs` uninterrupted, and again split at each epoch boundary: the
/// first part with one callback, the rest with a fresh one restored from the first's
/// `state()` (through JSON text, as a manifest stores it). The saves must be the same.
fn assert_resumes_identically(
    make: impl Fn(&Path) -> ModelCheckpoint,
    epochs: &[Logs],
    batches: u64,
) {
    let dir = tempfile::tempdir().unwrap();
    let whole = drive(&mut make(&dir.path().join("whole")), epochs, batches, 0);
    assert!(!whole.is_empty());
    for cut in 1..epochs.len() {
        let base = dir.path().join(format!("cut{cut}"));
        let mut first = make(&base);
        let mut got = drive(&mut first, &epochs[..cut], batches, 0);
        let text = first.state().unwrap().to_string();
        let mut second = make(&base);
        second
            .restore_state(&serde_json::from_str(&text).unwrap())
            .unwrap();
        got.extend(drive(&mut second, epochs, batches, cut));
        assert_eq!(got, whole, "resumed after epoch {cut}");
    }
}

#[test]
fn a_restored_checkpoint_saves_as_the_uninterrupted_one() {
    let values = [1.0, 0.8, 0.9, 0.7, 0.75, 0.6, 0.65];
    assert_resumes_identically(
        |d| checkpoint(d, "e{epoch}.safetensors").save_best_only(true),
        &val("val_loss", &values),
        0,
    );
    // The batch counter too: saves every 3 batches of 4-batch epochs fall at different
    // batches of each epoch.
    assert_resumes_identically(
        |d| checkpoint(d, "b-{epoch}-{batch}.safetensors").save_freq(SaveFreq::Batches(3)),
        &val("val_loss", &values),
        4,
    );
    // A fresh callback without the state would save again at the first epoch after the cut.
    let dir = tempfile::tempdir().unwrap();
    let logs = val("val_loss", &values);
    let make = || checkpoint(dir.path(), "e{epoch}.safetensors").save_best_only(true);
    let fresh = drive(&mut make(), &logs, 0, 4);
    assert_eq!(fresh[0], ("e5.safetensors".to_string(), 4));
    let other = crate::callbacks::EarlyStopping::new().state().unwrap();
    let err = make().restore_state(&other).unwrap_err().to_string();
    assert!(err.contains("belongs to a EarlyStopping"), "{err}");
}

#[test]
fn settings_are_checked_before_training() {
    let err = ModelCheckpoint::new("model.weights.h5")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("ModelCheckpoint.filepath: \"model.weights.h5\" must end in .safetensors"),
        "{err}"
    );
    let err = ModelCheckpoint::new("e{epoch:>3}.safetensors")
        .unwrap_err()
        .to_string();
    assert!(err.contains("{epoch:>3}"), "{err}");
    let mut cb = ModelCheckpoint::new("b{batch}.safetensors").unwrap();
    let err = cb
        .on_train_begin(&mut ManualContext::new(0.1))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("uses {batch}") && err.contains("save_freq"),
        "{err}"
    );
    let cb = ModelCheckpoint::new("x.safetensors")
        .unwrap()
        .save_freq(SaveFreq::Batches(0));
    assert!(cb.check().is_err());
    let cb = ModelCheckpoint::new("x.safetensors")
        .unwrap()
        .save_best_only(true)
        .monitor("val_custom");
    let err = cb.check().unwrap_err().to_string();
    assert!(
        err.starts_with("ModelCheckpoint.mode:") && err.contains("val_custom"),
        "{err}"
    );
}

#[test]
fn a_key_missing_from_the_logs_is_an_error_naming_what_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let mut cb = checkpoint(dir.path(), "e{epoch}-{val_acc:.2f}.safetensors");
    let mut ctx = ManualContext::new(0.1);
    cb.on_train_begin(&mut ctx).unwrap();
    let mut logs = val("val_accuracy", &[0.5]).remove(0);
    let err = cb
        .on_epoch_end(0, &mut logs, &mut ctx)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("ModelCheckpoint: cannot format filepath")
            && err.contains("val_acc")
            && err.contains("loss, val_accuracy"),
        "{err}"
    );
}

#[test]
fn absolute_paths_ignore_the_base_dir_and_directories_are_created() {
    let dir = tempfile::tempdir().unwrap();
    let abs = dir.path().join("abs").join("w{epoch}.safetensors");
    let mut cb = ModelCheckpoint::new(&abs)
        .unwrap()
        .base_dir("/nonexistent-base");
    let got = drive(&mut cb, &val("val_loss", &[1.0]), 0, 0);
    assert_eq!(got, saves(&[("w1.safetensors", 0)]));
    assert!(dir.path().join("abs/w1.safetensors").is_file());
    let mut cb = checkpoint(dir.path(), "sub/dir/w.safetensors");
    drive(&mut cb, &val("val_loss", &[1.0]), 0, 0);
    assert!(dir.path().join("sub/dir/w.safetensors").is_file());
}
