//! `ReduceLROnPlateau`: lower the learning rate when a monitored quantity stops improving
//! (`keras/src/callbacks/reduce_lr_on_plateau.py`, Keras 3).

use serde::{Deserialize, Serialize};

use super::monitor::{Mode, Monitor, warn_missing_once};
use super::state::{self, opt_float};
use super::{as_keras_lr, set_keras_lr};
use crate::error::{KilnError, Result};
use crate::fit::{Callback, FitContext, Logs};

/// Keras' `ReduceLROnPlateau(monitor="val_loss", factor=0.1, patience=10, verbose=0,
/// mode="auto", min_delta=1e-4, cooldown=0, min_lr=0.0)`.
///
/// At each epoch end (Keras' order), with `lr` the current learning rate:
/// 1. the logs get `learning_rate = lr`;
/// 2. in cooldown: `cooldown_counter -= 1`, `wait = 0`;
/// 3. if the value improves on the best by more than `min_delta`: new best, `wait = 0`;
/// 4. else, out of cooldown: `wait += 1`, and when `wait >= patience` and `lr > min_lr`:
///    `lr = max(lr * factor, min_lr)`, `cooldown_counter = cooldown`, `wait = 0`.
///
/// Keras keeps the learning rate in a float32 variable: `lr` is read as float32 and the new
/// rate is stored rounded to float32, so kiln's rates equal Keras' bit for bit
/// (`0.1 * 0.5` gives `0.05000000074505806`).
///
/// **Resumed runs** (BackupAndRestore): [`Callback::state`] keeps `best`, `wait` and
/// `cooldown_counter` (the learning rate itself is in the checkpoint), so a resumed run
/// reduces at the same epochs as an uninterrupted one.
#[derive(Debug, Clone)]
pub struct ReduceLROnPlateau {
    monitor: String,
    factor: f64,
    patience: usize,
    verbose: bool,
    mode: Mode,
    min_delta: f64,
    cooldown: usize,
    min_lr: f64,
    warned_missing: bool,
    test: Option<Monitor>,
    best: Option<f64>,
    wait: usize,
    cooldown_counter: usize,
    /// Set by `restore_state`: the next `on_train_begin` keeps the restored state.
    restored: bool,
}

/// What [`Callback::state`] keeps.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    #[serde(with = "opt_float")]
    best: Option<f64>,
    wait: usize,
    cooldown_counter: usize,
}

impl ReduceLROnPlateau {
    /// Keras' defaults with `factor` (`new_lr = lr * factor`).
    ///
    /// # Errors
    /// [`KilnError::Config`] for `factor >= 1` (Keras' `ValueError`) or `factor <= 0`.
    pub fn new(factor: f64) -> Result<ReduceLROnPlateau> {
        if !(factor > 0.0 && factor < 1.0) {
            return Err(KilnError::config(
                "ReduceLROnPlateau.factor",
                format!("must be between 0 and 1 (exclusive), got {factor}; the default is 0.1"),
            ));
        }
        Ok(ReduceLROnPlateau {
            monitor: "val_loss".to_string(),
            factor,
            patience: 10,
            verbose: false,
            mode: Mode::Auto,
            min_delta: 1e-4,
            cooldown: 0,
            min_lr: 0.0,
            warned_missing: false,
            test: None,
            best: None,
            wait: 0,
            cooldown_counter: 0,
            restored: false,
        })
    }

    /// The logs key to watch.
    pub fn monitor(mut self, monitor: impl Into<String>) -> Self {
        self.monitor = monitor.into();
        self
    }

    /// Epochs without improvement before reducing.
    pub fn patience(mut self, patience: usize) -> Self {
        self.patience = patience;
        self
    }

    /// Print Keras' message (`Epoch 3: ReduceLROnPlateau reducing learning rate to 0.01.`) to
    /// stderr.
    pub fn verbose(mut self, verbose: bool) -> Self {
        self.verbose = verbose;
        self
    }

    /// Whether lower or higher is better.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The smallest change that counts as an improvement.
    pub fn min_delta(mut self, min_delta: f64) -> Self {
        self.min_delta = min_delta;
        self
    }

    /// Epochs after a reduction during which no plateau is counted.
    pub fn cooldown(mut self, cooldown: usize) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// The lowest learning rate.
    pub fn min_lr(mut self, min_lr: f64) -> Self {
        self.min_lr = min_lr;
        self
    }

    fn in_cooldown(&self) -> bool {
        self.cooldown_counter > 0
    }
}

impl Callback for ReduceLROnPlateau {
    fn on_train_begin(&mut self, _ctx: &mut dyn FitContext) -> Result<()> {
        self.test = Some(Monitor::new(
            self.mode.resolve(&self.monitor, "ReduceLROnPlateau")?,
            self.min_delta,
        ));
        if !self.restored {
            self.best = None;
            self.wait = 0;
            self.cooldown_counter = 0;
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
        let old_lr = as_keras_lr(ctx.learning_rate());
        logs.set("learning_rate", old_lr);
        let Some(current) = logs.get(&self.monitor) else {
            let what = format!(
                "Learning rate reduction is conditioned on metric `{}` which is not available.",
                self.monitor
            );
            warn_missing_once(&mut self.warned_missing, &what, logs);
            return Ok(());
        };
        if self.in_cooldown() {
            self.cooldown_counter -= 1;
            self.wait = 0;
        }
        if test.is_improvement(current, self.best) {
            self.best = Some(current);
            self.wait = 0;
        } else if !self.in_cooldown() {
            self.wait += 1;
            if self.wait >= self.patience && old_lr > as_keras_lr(self.min_lr) {
                let new_lr = (old_lr * self.factor).max(self.min_lr);
                set_keras_lr(ctx, new_lr);
                if self.verbose {
                    eprintln!(
                        "\nEpoch {}: ReduceLROnPlateau reducing learning rate to {new_lr}.",
                        epoch + 1
                    );
                }
                self.cooldown_counter = self.cooldown;
                self.wait = 0;
            }
        }
        Ok(())
    }

    fn on_train_end(&mut self, _logs: &Logs, _ctx: &mut dyn FitContext) -> Result<()> {
        self.restored = false;
        Ok(())
    }

    fn state(&self) -> Option<serde_json::Value> {
        Some(state::encode(
            "ReduceLROnPlateau",
            &State {
                best: self.best,
                wait: self.wait,
                cooldown_counter: self.cooldown_counter,
            },
        ))
    }

    fn restore_state(&mut self, value: &serde_json::Value) -> Result<()> {
        let s: State = state::decode("ReduceLROnPlateau", value)?;
        self.best = s.best;
        self.wait = s.wait;
        self.cooldown_counter = s.cooldown_counter;
        self.restored = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::ManualContext;

    /// The learning rate after each epoch end for scripted `val_loss` values.
    fn run(mut cb: ReduceLROnPlateau, lr: f64, values: &[f64]) -> Vec<f64> {
        let mut ctx = ManualContext::new(lr);
        cb.on_train_begin(&mut ctx).unwrap();
        values
            .iter()
            .enumerate()
            .map(|(epoch, &v)| {
                let before = ctx.learning_rate;
                let mut logs = Logs::default();
                logs.set("val_loss", v);
                cb.on_epoch_end(epoch, &mut logs, &mut ctx).unwrap();
                // Keras logs the rate the epoch trained with, as its float32 variable holds it.
                assert_eq!(logs.get("learning_rate"), Some(before as f32 as f64));
                ctx.learning_rate
            })
            .collect()
    }

    fn as_f32(v: &[f64]) -> Vec<f32> {
        v.iter().map(|&x| x as f32).collect()
    }

    // Expected values: Keras 3.15.1's ReduceLROnPlateau driven with the same sequences by
    // `tests/reference/keras_callbacks_reference.py` (float32 learning rates, as printed).

    #[test]
    fn plateau_with_patience_cooldown_and_min_lr() {
        // By hand (factor 0.5, patience 2, cooldown 1, min_lr 0.02, min_delta 1e-4):
        // e0 best=1; e1 wait 1; e2 wait 2 -> 0.05, cooldown; e3 cooldown ends, 0.9 is a new
        // best; e4 wait 1; e5 wait 2 -> 0.025; e6 cooldown ends, wait 1; e7 wait 2 ->
        // max(0.0125, 0.02) = 0.02; e8 wait 1; e9 wait 2 but lr is not > min_lr: no change.
        let cb = ReduceLROnPlateau::new(0.5)
            .unwrap()
            .patience(2)
            .cooldown(1)
            .min_lr(0.02);
        let got = run(cb, 0.1, &[1.0, 1.0, 1.0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]);
        let keras = [
            0.10000000149011612,
            0.10000000149011612,
            0.05000000074505806,
            0.05000000074505806,
            0.05000000074505806,
            0.02500000037252903,
            0.02500000037252903,
            0.019999999552965164,
            0.019999999552965164,
            0.019999999552965164,
        ];
        assert_eq!(as_f32(&got), as_f32(&keras));
        assert_eq!(
            got[2], 0.05000000074505806,
            "rounded to float32 like Keras' variable"
        );
    }

    #[test]
    fn min_delta_decides_what_is_a_plateau() {
        // 0.99995 and 0.9999 do not beat 1.0 by more than 1e-4 ("min_delta" line).
        let cb = ReduceLROnPlateau::new(0.1).unwrap().patience(1);
        let got = run(cb, 0.1, &[1.0, 0.99995, 0.9999, 0.99985, 0.5]);
        let keras = [
            0.10000000149011612,
            0.009999999776482582,
            0.0009999999310821295,
            0.0009999999310821295,
            0.0009999999310821295,
        ];
        assert_eq!(as_f32(&got), as_f32(&keras));
        assert_eq!(
            got[1..],
            keras[1..],
            "reduced rates are Keras' float32 values exactly"
        );
    }

    #[test]
    fn min_lr_is_compared_in_float32() {
        // "min_lr" line: 1e-3 -> 1e-4 -> 1.0000000656873453e-05 (> f32 1e-5, so one more
        // reduction, clamped to min_lr) -> 9.999999747378752e-06, then no change.
        let cb = ReduceLROnPlateau::new(0.1)
            .unwrap()
            .patience(1)
            .min_lr(1e-5);
        let got = run(cb, 1e-3, &[1.0; 6]);
        let keras = [
            0.0010000000474974513,
            0.00010000000474974513,
            1.0000000656873453e-05,
            9.999999747378752e-06,
            9.999999747378752e-06,
            9.999999747378752e-06,
        ];
        assert_eq!(got[1..], keras[1..]);
    }

    #[test]
    fn factor_must_be_below_one() {
        assert!(ReduceLROnPlateau::new(1.0).is_err());
        assert!(ReduceLROnPlateau::new(0.0).is_err());
        let err = ReduceLROnPlateau::new(2.0).unwrap_err().to_string();
        assert!(
            err.contains("ReduceLROnPlateau.factor") && err.contains("got 2"),
            "{err}"
        );
    }

    #[test]
    fn a_restored_callback_reduces_at_the_same_epochs() {
        // The "plateau" sequence above, interrupted after each epoch: the second part runs
        // with a fresh callback restored from the first's state (through JSON text) and the
        // learning rate the checkpoint holds.
        let values = [1.0, 1.0, 1.0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9];
        let make = || {
            ReduceLROnPlateau::new(0.5)
                .unwrap()
                .patience(2)
                .cooldown(1)
                .min_lr(0.02)
        };
        let whole = run(make(), 0.1, &values);
        for cut in 1..values.len() {
            let first = run(make(), 0.1, &values[..cut]);
            // `run` consumed its callback: replay the first part to get the state.
            let mut cb = make();
            let mut ctx = ManualContext::new(0.1);
            cb.on_train_begin(&mut ctx).unwrap();
            for (epoch, &v) in values[..cut].iter().enumerate() {
                let mut logs = Logs::default();
                logs.set("val_loss", v);
                cb.on_epoch_end(epoch, &mut logs, &mut ctx).unwrap();
            }
            let text = cb.state().unwrap().to_string();
            let mut resumed = make();
            resumed
                .restore_state(&serde_json::from_str(&text).unwrap())
                .unwrap();
            let lr = *first.last().unwrap();
            let mut ctx = ManualContext::new(lr);
            resumed.on_train_begin(&mut ctx).unwrap();
            let mut got = first.clone();
            for (epoch, &v) in values.iter().enumerate().skip(cut) {
                let mut logs = Logs::default();
                logs.set("val_loss", v);
                resumed.on_epoch_end(epoch, &mut logs, &mut ctx).unwrap();
                got.push(ctx.learning_rate);
            }
            assert_eq!(got, whole, "cut after epoch {cut}");
        }
        // A fresh callback (no state) after epoch 4 would wait two epochs from scratch:
        // no reduction at epoch 5, where the uninterrupted run reduces.
        let mut fresh = make();
        let mut ctx = ManualContext::new(whole[4]);
        fresh.on_train_begin(&mut ctx).unwrap();
        let mut logs = Logs::default();
        logs.set("val_loss", 0.9);
        fresh.on_epoch_end(5, &mut logs, &mut ctx).unwrap();
        assert_eq!(ctx.learning_rate, whole[4]);
        assert_ne!(whole[5], whole[4]);
    }
}
