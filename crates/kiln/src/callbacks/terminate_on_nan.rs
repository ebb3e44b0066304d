//! `TerminateOnNaN`: stop when the loss becomes NaN or infinite
//! (`keras/src/callbacks/terminate_on_nan.py`, Keras 3).

use crate::error::{KilnError, Result};
use crate::fit::{Callback, FitContext, Logs};

/// Keras' `TerminateOnNaN(raise_error=False)`: after each training batch, if the logs' `loss`
/// is NaN or ±Inf, either ask training to stop (printing Keras' `Batch 3: Invalid loss,
/// terminating training` to stderr) or, with `raise_error`, end `fit` with an error at once.
/// `on_train_end` still runs for the other callbacks when stopping; with `raise_error` it does
/// not (as an exception in Keras).
///
/// The batch's loss in kiln's logs is the running mean over the epoch, as in Keras: once a
/// batch is non-finite, the mean is too.
#[derive(Debug, Clone, Default)]
pub struct TerminateOnNaN {
    raise_error: bool,
    terminated_at: Option<(usize, u64)>,
    epoch: usize,
}

impl TerminateOnNaN {
    /// Stops training on a non-finite loss.
    pub fn new() -> TerminateOnNaN {
        TerminateOnNaN::default()
    }

    /// Ends `fit` with [`KilnError::Callback`] instead of stopping quietly.
    pub fn raise_error(mut self, raise_error: bool) -> Self {
        self.raise_error = raise_error;
        self
    }

    /// `(epoch, batch)` where training was stopped, if it was.
    pub fn terminated_at(&self) -> Option<(usize, u64)> {
        self.terminated_at
    }
}

impl Callback for TerminateOnNaN {
    fn on_epoch_begin(
        &mut self,
        epoch: usize,
        _epochs: usize,
        _steps: Option<u64>,
        _ctx: &mut dyn FitContext,
    ) -> Result<()> {
        self.epoch = epoch;
        Ok(())
    }

    fn on_train_batch_end(
        &mut self,
        batch: u64,
        logs: &Logs,
        ctx: &mut dyn FitContext,
    ) -> Result<()> {
        let Some(loss) = logs.get("loss") else {
            return Ok(());
        };
        if loss.is_finite() {
            return Ok(());
        }
        if self.raise_error {
            return Err(KilnError::Callback {
                callback: "TerminateOnNaN".into(),
                message: format!(
                    "NaN or Inf loss encountered at batch {batch} of epoch {}. Loss value: \
                     {loss}. Terminating training immediately. Lower the learning rate, clip \
                     gradients (global_clipnorm) or check the inputs for NaN/Inf",
                    self.epoch + 1
                ),
            });
        }
        eprintln!("Batch {batch}: Invalid loss, terminating training");
        self.terminated_at = Some((self.epoch, batch));
        ctx.set_stop_training(true);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::ManualContext;

    /// Feeds batch losses; returns the batch after which training stopped, if any.
    fn run(cb: &mut TerminateOnNaN, losses: &[f64]) -> Result<Option<u64>> {
        let mut ctx = ManualContext::new(0.1);
        cb.on_epoch_begin(2, 5, None, &mut ctx)?;
        for (batch, &loss) in losses.iter().enumerate() {
            let mut logs = Logs::default();
            logs.set("loss", loss);
            cb.on_train_batch_end(batch as u64, &logs, &mut ctx)?;
            if ctx.stop_training {
                return Ok(Some(batch as u64));
            }
        }
        Ok(None)
    }

    #[test]
    fn stops_after_the_first_non_finite_loss() {
        let mut cb = TerminateOnNaN::new();
        assert_eq!(run(&mut cb, &[1.0, 0.5, f64::NAN, 0.4]).unwrap(), Some(2));
        assert_eq!(cb.terminated_at(), Some((2, 2)));
        let mut cb = TerminateOnNaN::new();
        assert_eq!(run(&mut cb, &[1.0, f64::INFINITY]).unwrap(), Some(1));
        assert_eq!(
            run(&mut TerminateOnNaN::new(), &[1.0, 1e30, -3.0]).unwrap(),
            None
        );
    }

    #[test]
    fn raise_error_names_the_batch_and_value() {
        let mut cb = TerminateOnNaN::new().raise_error(true);
        let err = run(&mut cb, &[1.0, f64::NEG_INFINITY])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("TerminateOnNaN: NaN or Inf loss encountered at batch 1 of epoch 3")
                && err.contains("Loss value: -inf"),
            "{err}"
        );
    }
}
