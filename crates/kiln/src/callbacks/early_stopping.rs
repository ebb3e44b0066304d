//! `EarlyStopping`: stop training when a monitored quantity stops improving
//! (`keras/src/callbacks/early_stopping.py`, Keras 3).

use serde::{Deserialize, Serialize};

use super::monitor::{Mode, Monitor, warn_missing_once};
use super::state::{self, opt_float};
use crate::error::Result;
use crate::fit::{Callback, FitContext, Logs, WeightsSnapshot};

/// Keras' `EarlyStopping(monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto",
/// baseline=None, restore_best_weights=False, start_from_epoch=0)`.
///
/// At each epoch end from `start_from_epoch` on, with the monitored value `current` (Keras 3's
/// exact order of steps):
/// 1. `wait += 1`;
/// 2. if `current` improves on the best so far by more than `min_delta` (the first value always
///    does): it becomes the best, its weights are kept (with `restore_best_weights`), and `wait`
///    goes back to 0 — but only if `current` also beats `baseline`, when one is set; then the
///    epoch ends here, with no stop;
/// 3. otherwise, if `wait >= patience` and the epoch is not the first (`epoch > 0`), training
///    stops after this epoch.
///
/// With `restore_best_weights`, the weights of the best epoch are put back at
/// `on_train_end` **whether or not training stopped early** (Keras 3; tf.keras 2 restored only
/// on an early stop). Weights go through [`FitContext::snapshot_weights`] /
/// [`FitContext::restore_weights`]: `Model::fit` keeps a clone of its network (no copy: Burn's
/// tensors are immutable and shared), so keeping the best weights costs the memory of one
/// more set of parameters once they diverge.
///
/// A missing monitored value skips the epoch (Keras warns); NaN never improves.
///
/// **Resumed runs** (BackupAndRestore): [`Callback::state`] keeps `wait`, `best`, `best_epoch`
/// and `stopped_epoch`, so a resumed run stops at the same epoch as an uninterrupted one. The
/// best weights are **not** kept in checkpoints (they would double their size): with
/// `restore_best_weights`, a resumed run restores the weights of the best epoch **since the
/// resume** (the first epoch after it, or a later one with a better value), which are the
/// overall best ones only when an epoch after the resume improved on the best.
///
/// ```
/// use kiln::callbacks::EarlyStopping;
/// use kiln::fit::{Callback, Logs, ManualContext};
///
/// let mut es = EarlyStopping::new().patience(1);
/// let mut ctx = ManualContext::new(0.01);
/// es.on_train_begin(&mut ctx).unwrap();
/// for (epoch, val_loss) in [0.5, 0.6, 0.7].into_iter().enumerate() {
///     let mut logs = Logs::default();
///     logs.set("val_loss", val_loss);
///     es.on_epoch_end(epoch, &mut logs, &mut ctx).unwrap();
///     if ctx.stop_training { break; }
/// }
/// assert_eq!(es.stopped_epoch(), Some(1));
/// ```
#[derive(Debug)]
pub struct EarlyStopping {
    monitor: String,
    min_delta: f64,
    patience: usize,
    verbose: bool,
    mode: Mode,
    baseline: Option<f64>,
    restore_best_weights: bool,
    start_from_epoch: usize,
    warned_missing: bool,
    // State, reset by `on_train_begin`.
    test: Option<Monitor>,
    wait: usize,
    best: Option<f64>,
    best_epoch: usize,
    best_weights: Option<WeightsSnapshot>,
    /// The value and epoch of the weights in `best_weights`: those of `best` in an
    /// uninterrupted run, the best since the resume in a resumed one.
    weights_value: Option<f64>,
    weights_epoch: usize,
    stopped_epoch: Option<usize>,
    /// Set by `restore_state`: the next `on_train_begin` keeps the restored state.
    restored: bool,
}

/// What [`Callback::state`] keeps.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    wait: usize,
    #[serde(with = "opt_float")]
    best: Option<f64>,
    best_epoch: usize,
    stopped_epoch: Option<usize>,
}

impl Default for EarlyStopping {
    fn default() -> Self {
        EarlyStopping::new()
    }
}

impl EarlyStopping {
    /// Keras' defaults: monitor `val_loss`, `patience = 0`, everything else off.
    pub fn new() -> EarlyStopping {
        EarlyStopping {
            monitor: "val_loss".to_string(),
            min_delta: 0.0,
            patience: 0,
            verbose: false,
            mode: Mode::Auto,
            baseline: None,
            restore_best_weights: false,
            start_from_epoch: 0,
            warned_missing: false,
            test: None,
            wait: 0,
            best: None,
            best_epoch: 0,
            best_weights: None,
            weights_value: None,
            weights_epoch: 0,
            stopped_epoch: None,
            restored: false,
        }
    }

    /// The logs key to watch (`val_loss`, `val_accuracy`).
    pub fn monitor(mut self, monitor: impl Into<String>) -> Self {
        self.monitor = monitor.into();
        self
    }

    /// The smallest change that counts as an improvement (its sign is ignored).
    pub fn min_delta(mut self, min_delta: f64) -> Self {
        self.min_delta = min_delta;
        self
    }

    /// Epochs without improvement before stopping.
    pub fn patience(mut self, patience: usize) -> Self {
        self.patience = patience;
        self
    }

    /// Print Keras' messages (`Epoch 4: early stopping`) to stderr.
    pub fn verbose(mut self, verbose: bool) -> Self {
        self.verbose = verbose;
        self
    }

    /// Whether lower or higher is better.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// A value to beat: epochs that improve on the best but not on `baseline` still count
    /// towards `patience`.
    pub fn baseline(mut self, baseline: f64) -> Self {
        self.baseline = Some(baseline);
        self
    }

    /// Put back the best epoch's weights at the end of training.
    pub fn restore_best_weights(mut self, restore: bool) -> Self {
        self.restore_best_weights = restore;
        self
    }

    /// Epochs to ignore before watching (warm-up).
    pub fn start_from_epoch(mut self, epoch: usize) -> Self {
        self.start_from_epoch = epoch;
        self
    }

    /// The epoch after which training was stopped (Keras' `stopped_epoch`, with `None` for
    /// Keras' 0 = not stopped).
    pub fn stopped_epoch(&self) -> Option<usize> {
        self.stopped_epoch
    }

    /// The best monitored value so far.
    pub fn best(&self) -> Option<f64> {
        self.best
    }

    /// The epoch of the best value (Keras' `best_epoch`).
    pub fn best_epoch(&self) -> usize {
        self.best_epoch
    }

    /// Epochs since the last improvement (Keras' `wait`).
    pub fn wait(&self) -> usize {
        self.wait
    }
}

impl Callback for EarlyStopping {
    fn on_train_begin(&mut self, _ctx: &mut dyn FitContext) -> Result<()> {
        self.test = Some(Monitor::new(
            self.mode.resolve(&self.monitor, "EarlyStopping")?,
            self.min_delta,
        ));
        self.best_weights = None;
        self.weights_value = None;
        if !self.restored {
            self.wait = 0;
            self.best = None;
            self.best_epoch = 0;
            self.stopped_epoch = None;
        }
        self.restored = false;
        Ok(())
    }

    fn on_epoch_end(
        &mut self,
        epoch: usize,
        logs: &mut Logs,
        ctx: &mut dyn FitContext,
    ) -> Result<()> {
        let test = match self.test {
            Some(t) => t,
            None => {
                self.on_train_begin(ctx)?;
                self.test.expect("set by on_train_begin")
            }
        };
        let Some(current) = logs.get(&self.monitor) else {
            let what = format!(
                "Early stopping conditioned on metric `{}` which is not available.",
                self.monitor
            );
            warn_missing_once(&mut self.warned_missing, &what, logs);
            return Ok(());
        };
        if epoch < self.start_from_epoch {
            return Ok(());
        }
        // Keras keeps the weights of the first epoch watched, then of each new best. After a
        // resume `best` predates the weights kept, so they follow their own value (in an
        // uninterrupted run `weights_value == best` and this is Keras' rule exactly).
        if self.restore_best_weights
            && (self.best_weights.is_none() || test.is_improvement(current, self.weights_value))
        {
            self.best_weights = Some(ctx.snapshot_weights());
            self.weights_value = Some(current);
            self.weights_epoch = epoch;
        }
        self.wait += 1;
        if test.is_improvement(current, self.best) {
            self.best = Some(current);
            self.best_epoch = epoch;
            if self.baseline.is_none() || test.is_improvement(current, self.baseline) {
                self.wait = 0;
            }
            return Ok(());
        }
        if self.wait >= self.patience && epoch > 0 {
            self.stopped_epoch = Some(epoch);
            ctx.set_stop_training(true);
        }
        Ok(())
    }

    fn on_train_end(&mut self, _logs: &Logs, ctx: &mut dyn FitContext) -> Result<()> {
        if let (Some(epoch), true) = (self.stopped_epoch, self.verbose) {
            eprintln!("Epoch {}: early stopping", epoch + 1);
        }
        if self.restore_best_weights
            && let Some(best) = &self.best_weights
        {
            if self.verbose {
                eprintln!(
                    "Restoring model weights from the end of the best epoch: {}.",
                    self.weights_epoch + 1
                );
            }
            ctx.restore_weights(best)?;
        }
        self.restored = false;
        Ok(())
    }

    fn state(&self) -> Option<serde_json::Value> {
        Some(state::encode(
            "EarlyStopping",
            &State {
                wait: self.wait,
                best: self.best,
                best_epoch: self.best_epoch,
                stopped_epoch: self.stopped_epoch,
            },
        ))
    }

    fn restore_state(&mut self, value: &serde_json::Value) -> Result<()> {
        let s: State = state::decode("EarlyStopping", value)?;
        self.wait = s.wait;
        self.best = s.best;
        self.best_epoch = s.best_epoch;
        self.stopped_epoch = s.stopped_epoch;
        self.restored = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::ManualContext;

    /// What one scripted run gives: the last epoch run, `stopped_epoch`, `best_epoch`, `best`,
    /// and the epoch whose weights the model holds after `on_train_end`.
    #[derive(Debug, PartialEq)]
    struct Outcome {
        last_epoch: usize,
        stopped: Option<usize>,
        best_epoch: usize,
        best: Option<f64>,
        weights_of_epoch: f32,
    }

    /// Drives `es` as `fit` does; before each epoch end the model's one weight is set to the
    /// epoch number, so restored weights name their epoch.
    fn run(mut es: EarlyStopping, monitor: &str, values: &[f64]) -> Outcome {
        let mut ctx = ManualContext::new(0.1);
        es.on_train_begin(&mut ctx).unwrap();
        let mut last_epoch = 0;
        for (epoch, &v) in values.iter().enumerate() {
            ctx.weights = vec![("dense/kernel".into(), vec![epoch as f32])];
            let mut logs = Logs::default();
            logs.set(monitor, v);
            es.on_epoch_end(epoch, &mut logs, &mut ctx).unwrap();
            last_epoch = epoch;
            if ctx.stop_training {
                break;
            }
        }
        es.on_train_end(&Logs::default(), &mut ctx).unwrap();
        Outcome {
            last_epoch,
            stopped: es.stopped_epoch(),
            best_epoch: es.best_epoch(),
            best: es.best(),
            weights_of_epoch: ctx.weights[0].1[0],
        }
    }

    fn outcome(
        last: usize,
        stopped: Option<usize>,
        best_epoch: usize,
        best: f64,
        w: f32,
    ) -> Outcome {
        Outcome {
            last_epoch: last,
            stopped,
            best_epoch,
            best: Some(best),
            weights_of_epoch: w,
        }
    }

    // Expected values: Keras 3.15.1's EarlyStopping driven with the same sequences by
    // `tests/reference/keras_callbacks_reference.py` (its printed lines are quoted).

    #[test]
    fn patience_two_stops_after_two_epochs_without_improvement_and_restores_the_best() {
        // "patience 2: ... -> last epoch run=3 stopped_epoch=3 best_epoch=1 best=0.8
        //  weights after train end = epoch 1"
        let es = EarlyStopping::new().patience(2).restore_best_weights(true);
        let got = run(es, "val_loss", &[1.0, 0.8, 0.9, 0.85, 0.7, 0.6]);
        assert_eq!(got, outcome(3, Some(3), 1, 0.8, 1.0));
    }

    #[test]
    fn patience_zero_stops_at_the_first_non_improvement_without_restoring() {
        // "patience 0: ... -> last epoch run=1 stopped_epoch=1 best_epoch=0 best=1.0
        //  weights after train end = epoch 1"
        let got = run(EarlyStopping::new(), "val_loss", &[1.0, 1.1, 0.5]);
        assert_eq!(got, outcome(1, Some(1), 0, 1.0, 1.0));
    }

    #[test]
    fn min_delta_makes_small_gains_count_as_no_improvement() {
        // 0.95 + 0.1 is not < 1.0. "min_delta: ... -> last epoch run=1 stopped_epoch=1
        // best_epoch=0 best=1.0"
        let es = EarlyStopping::new().patience(1).min_delta(0.1);
        let got = run(es, "val_loss", &[1.0, 0.95, 0.85, 0.8]);
        assert_eq!(got, outcome(1, Some(1), 0, 1.0, 1.0));
    }

    #[test]
    fn baseline_counts_patience_but_improving_epochs_never_stop() {
        // An improving epoch returns before the stop check even when wait >= patience.
        // "baseline, improving: ... -> last epoch run=3 stopped_epoch=0 best_epoch=3 best=0.6"
        let es = EarlyStopping::new().patience(2).baseline(0.5);
        let got = run(es, "val_loss", &[0.9, 0.8, 0.7, 0.6]);
        assert_eq!(got, outcome(3, None, 3, 0.6, 3.0));
        // "baseline, flat: ... -> last epoch run=1 stopped_epoch=1 best_epoch=0 best=0.9":
        // the first epoch's wait of 1 is kept because 0.9 does not beat the baseline.
        let es = EarlyStopping::new().patience(2).baseline(0.5);
        let got = run(es, "val_loss", &[0.9, 0.95, 0.97, 0.4]);
        assert_eq!(got, outcome(1, Some(1), 0, 0.9, 1.0));
    }

    #[test]
    fn start_from_epoch_ignores_the_warm_up() {
        // "start_from_epoch: ... -> last epoch run=4 stopped_epoch=4 best_epoch=3 best=2.5
        //  weights after train end = epoch 3"
        let es = EarlyStopping::new()
            .patience(1)
            .start_from_epoch(2)
            .restore_best_weights(true);
        let got = run(es, "val_loss", &[1.0, 2.0, 3.0, 2.5, 2.6, 0.1]);
        assert_eq!(got, outcome(4, Some(4), 3, 2.5, 3.0));
    }

    #[test]
    fn best_weights_are_restored_even_without_an_early_stop() {
        // Keras 3: "max, never stops: ... -> last epoch run=2 stopped_epoch=0 best_epoch=1
        // best=0.7 weights after train end = epoch 1"
        let es = EarlyStopping::new()
            .monitor("val_accuracy")
            .mode(Mode::Max)
            .patience(5)
            .restore_best_weights(true);
        let got = run(es, "val_accuracy", &[0.5, 0.7, 0.6]);
        assert_eq!(got, outcome(2, None, 1, 0.7, 1.0));
        // mode = auto finds accuracy's direction by name (Keras reads it from the metric).
        let es = EarlyStopping::new()
            .monitor("val_accuracy")
            .patience(5)
            .restore_best_weights(true);
        assert_eq!(
            run(es, "val_accuracy", &[0.5, 0.7, 0.6]).weights_of_epoch,
            1.0
        );
    }

    #[test]
    fn nan_never_improves() {
        // "nan: ... values=[1.0, nan, 0.9, 0.95] -> last epoch run=1 stopped_epoch=1
        //  best_epoch=0 best=1.0"
        let got = run(
            EarlyStopping::new().patience(1),
            "val_loss",
            &[1.0, f64::NAN, 0.9, 0.95],
        );
        assert_eq!(got, outcome(1, Some(1), 0, 1.0, 1.0));
    }

    #[test]
    fn a_missing_monitor_is_skipped_and_an_unknown_direction_is_an_error() {
        let got = run(EarlyStopping::new(), "loss", &[1.0, 2.0, 3.0]);
        assert_eq!((got.last_epoch, got.stopped, got.best), (2, None, None));
        let mut es = EarlyStopping::new().monitor("val_custom");
        let err = es.on_train_begin(&mut ManualContext::new(0.1)).unwrap_err();
        assert!(err.to_string().contains("val_custom"), "{err}");
    }

    #[test]
    fn state_resets_at_train_begin() {
        let mut es = EarlyStopping::new();
        let a = run(EarlyStopping::new(), "val_loss", &[1.0, 2.0]);
        assert_eq!(a.stopped, Some(1));
        let mut ctx = ManualContext::new(0.1);
        for values in [[1.0, 2.0], [5.0, 4.0]] {
            es.on_train_begin(&mut ctx).unwrap();
            for (epoch, v) in values.into_iter().enumerate() {
                let mut logs = Logs::default();
                logs.set("val_loss", v);
                es.on_epoch_end(epoch, &mut logs, &mut ctx).unwrap();
            }
        }
        assert_eq!((es.stopped_epoch(), es.best()), (None, Some(4.0)));
    }

    /// `run`, interrupted after epoch `cut` and resumed with a fresh callback restored from
    /// the first one's state (through JSON text, as a checkpoint manifest stores it).
    fn run_resumed(make: impl Fn() -> EarlyStopping, values: &[f64], cut: usize) -> Outcome {
        let mut ctx = ManualContext::new(0.1);
        let mut es = make();
        es.on_train_begin(&mut ctx).unwrap();
        let feed = |es: &mut EarlyStopping, ctx: &mut ManualContext, epoch: usize| {
            ctx.weights = vec![("dense/kernel".into(), vec![epoch as f32])];
            let mut logs = Logs::default();
            logs.set("val_loss", values[epoch]);
            es.on_epoch_end(epoch, &mut logs, ctx).unwrap();
            ctx.stop_training
        };
        for epoch in 0..cut {
            assert!(!feed(&mut es, &mut ctx, epoch), "stopped before the cut");
        }
        let text = es.state().unwrap().to_string();
        let mut es = make();
        es.restore_state(&serde_json::from_str(&text).unwrap())
            .unwrap();
        let mut ctx = ManualContext::new(0.1);
        es.on_train_begin(&mut ctx).unwrap();
        let mut last_epoch = cut;
        for epoch in cut..values.len() {
            last_epoch = epoch;
            if feed(&mut es, &mut ctx, epoch) {
                break;
            }
        }
        es.on_train_end(&Logs::default(), &mut ctx).unwrap();
        Outcome {
            last_epoch,
            stopped: es.stopped_epoch(),
            best_epoch: es.best_epoch(),
            best: es.best(),
            weights_of_epoch: ctx.weights[0].1[0],
        }
    }

    #[test]
    fn a_restored_callback_stops_where_the_uninterrupted_one_does() {
        let values = [1.0, 0.8, 0.9, 0.85, 0.7, 0.75, 0.72, 0.71, 0.9];
        // By hand (patience 3, min_delta 0.01): bests at epochs 0, 1, 4 (0.7); 0.75, 0.72 and
        // 0.71 do not beat 0.7 by 0.01, so the third of them (epoch 7) stops.
        let make = || EarlyStopping::new().patience(3).min_delta(0.01);
        let whole = run(make(), "val_loss", &values);
        assert_eq!((whole.stopped, whole.best_epoch), (Some(7), 4));
        for cut in 1..=whole.last_epoch {
            assert_eq!(run_resumed(make, &values, cut), whole, "cut after {cut}");
        }
        // Without the state, a fresh callback would start counting again and run longer.
        let mut fresh = make();
        let mut ctx = ManualContext::new(0.1);
        fresh.on_train_begin(&mut ctx).unwrap();
        for (epoch, &v) in values.iter().enumerate().skip(5) {
            let mut logs = Logs::default();
            logs.set("val_loss", v);
            fresh.on_epoch_end(epoch, &mut logs, &mut ctx).unwrap();
        }
        assert_eq!(fresh.stopped_epoch(), None);
        // A second training without a restore starts over (the flag is used up).
        let mut es = make();
        es.restore_state(&make().state().unwrap()).unwrap();
        es.on_train_begin(&mut ctx).unwrap();
        es.on_train_end(&Logs::default(), &mut ctx).unwrap();
        assert!(!es.restored);
    }

    #[test]
    fn restored_best_weights_are_the_best_since_the_resume() {
        // Best 0.5 at epoch 1, before the cut after epoch 2: the weights kept from then on are
        // epoch 2's (the first after the resume), then epoch 3's (0.55 beats 0.6), while the
        // decisions (stop after epoch 4, best 0.5 at epoch 1) are the uninterrupted run's.
        let values = [1.0, 0.5, 0.6, 0.55, 0.7];
        let make = || EarlyStopping::new().patience(3).restore_best_weights(true);
        let whole = run(make(), "val_loss", &values);
        assert_eq!(whole, outcome(4, Some(4), 1, 0.5, 1.0));
        let resumed = run_resumed(make, &values, 2);
        assert_eq!(resumed, outcome(4, Some(4), 1, 0.5, 3.0));
    }
}
