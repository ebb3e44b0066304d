//! Keras' dynamic loss scale (`keras.optimizers.LossScaleOptimizer`,
//! `keras/src/optimizers/loss_scale_optimizer.py`).
//!
//! The rule, kept exactly:
//! - the loss is multiplied by the scale before backward, and the gradients divided by it
//!   before the optimizer sees them (clipping applies to the unscaled gradients, as Keras'
//!   inner optimizer clips what `LossScaleOptimizer` hands it);
//! - a step with any non-finite gradient is skipped (no update: weights and optimizer state,
//!   Adam's step counter included, stay as they were), the scale is halved and the count of
//!   finite steps reset;
//! - a finite step is applied; when it is the `dynamic_growth_steps`-th finite step in a row the
//!   scale doubles and the count restarts (Keras: `step_counter == dynamic_growth_steps - 1`
//!   → double and reset, else increment).
//!
//! Defaults: `initial_scale = 2^15 = 32768`, `dynamic_growth_steps = 2000`. A "step" is one
//! gradient computation (one call of Keras' `apply`): with gradient accumulation, one
//! micro-batch, and a skipped micro-batch is left out of the accumulated mean.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{KilnError, Result};

fn initial_scale() -> f64 {
    32768.0
}
fn growth_steps() -> u64 {
    2000
}

/// `LossScaleOptimizer(initial_scale=2**15, dynamic_growth_steps=2000)`'s arguments. TOML:
/// `[compile] loss_scale = { initial_scale = 32768.0, dynamic_growth_steps = 2000 }`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LossScaleOptions {
    /// The first scale; Keras recommends a high one (a scale too high is lowered much faster
    /// than one too low is raised).
    #[serde(default = "initial_scale")]
    pub initial_scale: f64,
    /// Finite steps in a row after which the scale doubles.
    #[serde(default = "growth_steps")]
    pub dynamic_growth_steps: u64,
}

impl Default for LossScaleOptions {
    fn default() -> LossScaleOptions {
        LossScaleOptions {
            initial_scale: initial_scale(),
            dynamic_growth_steps: growth_steps(),
        }
    }
}

impl LossScaleOptions {
    /// Checks the values: a positive, finite scale and at least one growth step.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `compile.loss_scale.<key>`.
    pub fn validate(&self) -> Result<()> {
        if !(self.initial_scale.is_finite() && self.initial_scale > 0.0) {
            return Err(KilnError::config(
                "compile.loss_scale.initial_scale",
                format!(
                    "must be a positive number, got {} (Keras' default is 32768 = 2^15)",
                    self.initial_scale
                ),
            ));
        }
        if self.dynamic_growth_steps == 0 {
            return Err(KilnError::config(
                "compile.loss_scale.dynamic_growth_steps",
                "must be at least 1 (Keras' default is 2000)",
            ));
        }
        Ok(())
    }
}

/// The loss scale's state: the scale and the finite steps since it last changed. Saved in
/// checkpoints (`manifest.json`, `loss_scale`), so a resumed run continues it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossScale {
    /// The current scale (a power of two times `initial_scale`).
    pub scale: f64,
    /// Finite steps in a row since the scale last changed (Keras' `step_counter`).
    pub finite_steps: u64,
    /// `dynamic_growth_steps`.
    pub growth_steps: u64,
}

/// What [`LossScale::update`] decided for a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleUpdate {
    /// Finite gradients: apply them; the scale is unchanged.
    Apply,
    /// Finite gradients: apply them; this was the `dynamic_growth_steps`-th finite step in a
    /// row, so the scale doubled.
    ApplyAndGrow,
    /// A non-finite gradient: skip the update; the scale halved.
    SkipAndShrink,
}

impl LossScale {
    /// The state at the start of training.
    pub fn new(options: LossScaleOptions) -> LossScale {
        LossScale {
            scale: options.initial_scale,
            finite_steps: 0,
            growth_steps: options.dynamic_growth_steps.max(1),
        }
    }

    /// Advances the state machine after a step whose gradients were `finite` (Keras'
    /// `_stateful_handle_finite_grads` / `_stateful_handle_non_finite_grads`).
    pub fn update(&mut self, finite: bool) -> ScaleUpdate {
        if !finite {
            self.finite_steps = 0;
            self.scale *= 0.5;
            return ScaleUpdate::SkipAndShrink;
        }
        if self.finite_steps == self.growth_steps - 1 {
            self.finite_steps = 0;
            self.scale *= 2.0;
            ScaleUpdate::ApplyAndGrow
        } else {
            self.finite_steps += 1;
            ScaleUpdate::Apply
        }
    }
}

/// Divides every gradient of `module`'s parameters by `scale` and says whether all of them are
/// finite (one device read for the whole model: the sum over all gradients of `g * 0`, which is
/// NaN exactly when some element is NaN or ±Inf).
pub fn unscale<M: Module>(
    module: &M,
    grads: GradientsParams,
    scale: f64,
) -> (GradientsParams, bool) {
    let mut visitor = Unscale {
        grads,
        inverse: 1.0 / scale,
        probe: None,
    };
    module.visit(&mut visitor);
    let finite = match visitor.probe {
        Some(p) => p.into_scalar::<f32>().is_finite(),
        None => true,
    };
    (visitor.grads, finite)
}

struct Unscale {
    grads: GradientsParams,
    inverse: f64,
    probe: Option<Tensor<1>>,
}

impl ModuleVisitor for Unscale {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.remove::<D>(p.id) {
            let g = if self.inverse == 1.0 {
                g
            } else {
                g.mul_scalar(self.inverse)
            };
            let zero = g.clone().mul_scalar(0.0).sum();
            self.probe = Some(match self.probe.take() {
                Some(acc) => acc + zero,
                None => zero,
            });
            self.grads.register::<D>(p.id, g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keras' rule: the scale doubles on the 2000th finite step in a row, not before; a
    /// non-finite step halves it and restarts the count.
    #[test]
    fn scale_doubles_after_exactly_2000_finite_steps() {
        let mut s = LossScale::new(LossScaleOptions::default());
        assert_eq!(s.scale, 32768.0);
        for i in 0..1999 {
            assert_eq!(s.update(true), ScaleUpdate::Apply, "step {i}");
        }
        assert_eq!(s.scale, 32768.0);
        assert_eq!(s.update(true), ScaleUpdate::ApplyAndGrow);
        assert_eq!(s.scale, 65536.0);
        assert_eq!(s.finite_steps, 0);
        // 1500 finite, one overflow: halved and the count restarts.
        for _ in 0..1500 {
            s.update(true);
        }
        assert_eq!(s.update(false), ScaleUpdate::SkipAndShrink);
        assert_eq!((s.scale, s.finite_steps), (32768.0, 0));
        for _ in 0..1999 {
            s.update(true);
        }
        assert_eq!(s.scale, 32768.0);
        s.update(true);
        assert_eq!(s.scale, 65536.0);
    }

    #[test]
    fn repeated_overflows_halve_each_time() {
        let mut s = LossScale::new(LossScaleOptions {
            initial_scale: 8.0,
            dynamic_growth_steps: 1,
        });
        s.update(false);
        s.update(false);
        assert_eq!(s.scale, 2.0);
        // growth_steps = 1: every finite step doubles.
        assert_eq!(s.update(true), ScaleUpdate::ApplyAndGrow);
        assert_eq!(s.scale, 4.0);
    }

    #[test]
    fn bad_options_name_the_key() {
        let e = LossScaleOptions {
            initial_scale: 0.0,
            dynamic_growth_steps: 2000,
        }
        .validate()
        .unwrap_err();
        assert!(
            e.to_string().contains("compile.loss_scale.initial_scale"),
            "{e}"
        );
        let e = LossScaleOptions {
            initial_scale: 1.0,
            dynamic_growth_steps: 0,
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("dynamic_growth_steps"), "{e}");
    }

    #[derive(Module, Debug)]
    struct Two {
        a: Param<Tensor<1>>,
        b: Param<Tensor<2>>,
    }

    fn two() -> Two {
        let d = Device::flex();
        Two {
            a: Param::from_tensor(Tensor::zeros([3], &d)),
            b: Param::from_tensor(Tensor::zeros([2, 2], &d)),
        }
    }

    #[test]
    fn unscale_divides_and_detects_non_finite() {
        let m = two();
        let d = Device::flex();
        let grads = |b3: f32| {
            let mut g = GradientsParams::new();
            g.register(
                m.a.id,
                Tensor::<1>::from_data(TensorData::new(vec![2.0f32, -4.0, 8.0], [3]), &d),
            );
            g.register(
                m.b.id,
                Tensor::<2>::from_data(TensorData::new(vec![1.0f32, 0.5, 0.0, b3], [2, 2]), &d),
            );
            g
        };
        let (g, finite) = unscale(&m, grads(6.0), 2.0);
        assert!(finite);
        let a = g.get::<1>(m.a.id).unwrap().into_data();
        assert_eq!(a.try_to_vec::<f32>().unwrap(), vec![1.0, -2.0, 4.0]);
        let b = g.get::<2>(m.b.id).unwrap().into_data();
        assert_eq!(b.try_to_vec::<f32>().unwrap(), vec![0.5, 0.25, 0.0, 3.0]);
        for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            let (_, finite) = unscale(&m, grads(bad), 2.0);
            assert!(!finite, "{bad}");
        }
    }
}
