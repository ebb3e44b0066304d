//! Built-in learning-rate schedules with Keras' names, arguments and formulas
//! (`keras/src/optimizers/schedules/learning_rate_schedule.py`, Keras 3), plus the classic step
//! decay. [`super::LearningRateScheduler`] applies them per epoch or per batch.

use serde::{Deserialize, Serialize};

use crate::error::{KilnError, Result};

/// A learning rate as a function of a step (an optimizer step or an epoch, 0-based).
///
/// In TOML a table with `type` = the variant's name and Keras' argument names, with Keras'
/// defaults (`staircase = false`, `alpha = 0.0`, `warmup_steps = 0`, no `warmup_target`):
/// `{ type = "CosineDecay", initial_learning_rate = 0.001, decay_steps = 10000 }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum Schedule {
    /// `keras.optimizers.schedules.ExponentialDecay(initial_learning_rate, decay_steps,
    /// decay_rate, staircase=False)`:
    /// `initial_learning_rate * decay_rate ^ (step / decay_steps)`, the exponent floored
    /// when `staircase`.
    ExponentialDecay {
        /// The rate at step 0.
        initial_learning_rate: f64,
        /// Steps per factor of `decay_rate` (> 0).
        decay_steps: u64,
        /// Factor per `decay_steps`.
        decay_rate: f64,
        /// Decay in whole steps of `decay_steps`.
        #[serde(default)]
        staircase: bool,
    },
    /// `keras.optimizers.schedules.CosineDecay(initial_learning_rate, decay_steps, alpha=0.0,
    /// warmup_target=None, warmup_steps=0)`. Without warm-up, with `s = min(step, decay_steps)`:
    /// `initial_learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * s / decay_steps)) + alpha)`.
    /// With `warmup_target`, the first `warmup_steps` steps rise linearly,
    /// `initial_learning_rate + (warmup_target - initial_learning_rate) * step / warmup_steps`,
    /// then the cosine decays from `warmup_target` over `step - warmup_steps` (capped at
    /// `decay_steps`).
    CosineDecay {
        /// The rate at step 0.
        initial_learning_rate: f64,
        /// Length of the decay (> 0).
        decay_steps: u64,
        /// The final rate as a fraction of the decay's starting rate.
        #[serde(default)]
        alpha: f64,
        /// The rate reached at the end of the warm-up; `None`: no warm-up.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        warmup_target: Option<f64>,
        /// Length of the warm-up.
        #[serde(default)]
        warmup_steps: u64,
    },
    /// `keras.optimizers.schedules.PiecewiseConstantDecay(boundaries, values)`:
    /// `values[0]` for `step <= boundaries[0]`, `values[i]` for
    /// `boundaries[i-1] < step <= boundaries[i]`, `values[last]` after the last boundary.
    PiecewiseConstantDecay {
        /// Increasing step boundaries.
        boundaries: Vec<u64>,
        /// One more value than boundaries.
        values: Vec<f64>,
    },
    /// Step decay (no Keras class; the classic `LearningRateScheduler` recipe):
    /// `initial_learning_rate * factor ^ floor(step / step_size)` — `ExponentialDecay` with
    /// `staircase = true`, by the names people use for it.
    StepDecay {
        /// The rate at step 0.
        initial_learning_rate: f64,
        /// Multiplier applied every `step_size` steps (`0.5` halves).
        factor: f64,
        /// Steps (or epochs) between drops (> 0).
        step_size: u64,
    },
}

impl Schedule {
    /// Checks the arguments as Keras' constructors do.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming the argument: `decay_steps` or `step_size` of 0, a
    /// `boundaries` / `values` length mismatch, boundaries that do not increase.
    pub fn validate(&self) -> Result<()> {
        let err = |key: &str, message: String| Err(KilnError::config(key, message));
        match self {
            Schedule::ExponentialDecay { decay_steps: 0, .. } => err(
                "ExponentialDecay.decay_steps",
                "must be > 0 (Keras: \"Argument `decay_steps` must be > 0\")".into(),
            ),
            Schedule::CosineDecay { decay_steps: 0, .. } => err(
                "CosineDecay.decay_steps",
                "must be > 0 (Keras: \"Argument `decay_steps` must be > 0\")".into(),
            ),
            Schedule::StepDecay { step_size: 0, .. } => {
                err("StepDecay.step_size", "must be > 0".into())
            }
            Schedule::PiecewiseConstantDecay { boundaries, values }
                if boundaries.len() + 1 != values.len() =>
            {
                err(
                    "PiecewiseConstantDecay.values",
                    format!(
                        "needs one more value than boundaries; got {} boundaries and {} values",
                        boundaries.len(),
                        values.len()
                    ),
                )
            }
            Schedule::PiecewiseConstantDecay { boundaries, .. }
                if boundaries.windows(2).any(|w| w[0] >= w[1]) =>
            {
                err(
                    "PiecewiseConstantDecay.boundaries",
                    format!("must increase strictly; got {boundaries:?}"),
                )
            }
            _ => Ok(()),
        }
    }

    /// The learning rate at `step` (computed in float64; Keras computes in float32, so
    /// values agree to float32 precision).
    pub fn at(&self, step: u64) -> f64 {
        let s = step as f64;
        match self {
            Schedule::ExponentialDecay {
                initial_learning_rate,
                decay_steps,
                decay_rate,
                staircase,
            } => {
                let mut p = s / *decay_steps as f64;
                if *staircase {
                    p = p.floor();
                }
                initial_learning_rate * decay_rate.powf(p)
            }
            Schedule::CosineDecay {
                initial_learning_rate,
                decay_steps,
                alpha,
                warmup_target,
                warmup_steps,
            } => {
                let decay_steps = *decay_steps as f64;
                let cosine = |step: f64, from: f64| {
                    let fraction = step / decay_steps;
                    let decayed = 0.5 * (1.0 + (std::f64::consts::PI * fraction).cos());
                    from * ((1.0 - alpha) * decayed + alpha)
                };
                match warmup_target {
                    None => cosine(s.min(decay_steps), *initial_learning_rate),
                    Some(target) => {
                        let warmup = *warmup_steps as f64;
                        let s = s.min(decay_steps + warmup);
                        if s < warmup {
                            (target - initial_learning_rate) * (s / warmup) + initial_learning_rate
                        } else {
                            cosine(s - warmup, *target)
                        }
                    }
                }
            }
            Schedule::PiecewiseConstantDecay { boundaries, values } => {
                let i = boundaries.iter().take_while(|&&b| step > b).count();
                values.get(i).or(values.last()).copied().unwrap_or(0.0)
            }
            Schedule::StepDecay {
                initial_learning_rate,
                factor,
                step_size,
            } => initial_learning_rate * factor.powf((step / step_size) as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keras 3.15.1's values (float32), printed by
    /// `tests/reference/keras_callbacks_reference.py`, against kiln's float64 formula.
    fn assert_keras(schedule: &Schedule, keras: &[(u64, f64)]) {
        schedule.validate().unwrap();
        for &(step, want) in keras {
            let got = schedule.at(step);
            assert!(
                (got - want).abs() <= 2.5e-7 * want.abs(),
                "{schedule:?} at {step}: {got} vs Keras {want}"
            );
        }
    }

    #[test]
    fn exponential_decay_matches_keras() {
        // 0.1 * 0.5^(step/10): at 5, 0.1 / sqrt(2) = 0.0707106781.
        let smooth = Schedule::ExponentialDecay {
            initial_learning_rate: 0.1,
            decay_steps: 10,
            decay_rate: 0.5,
            staircase: false,
        };
        assert_keras(
            &smooth,
            &[
                (0, 0.100000001),
                (5, 0.0707106814),
                (10, 0.0500000007),
                (15, 0.0353553407),
                (25, 0.0176776703),
            ],
        );
        let stairs = Schedule::ExponentialDecay {
            initial_learning_rate: 0.1,
            decay_steps: 10,
            decay_rate: 0.5,
            staircase: true,
        };
        assert_keras(
            &stairs,
            &[
                (0, 0.100000001),
                (5, 0.100000001),
                (10, 0.0500000007),
                (15, 0.0500000007),
                (25, 0.0250000004),
            ],
        );
    }

    #[test]
    fn cosine_decay_matches_keras() {
        // 0.1 * (0.9 * 0.5 * (1 + cos(pi * s / 100)) + 0.1): at 25, 0.1 * (0.45 * 1.7071 + 0.1).
        let cosine = Schedule::CosineDecay {
            initial_learning_rate: 0.1,
            decay_steps: 100,
            alpha: 0.1,
            warmup_target: None,
            warmup_steps: 0,
        };
        assert_keras(
            &cosine,
            &[
                (0, 0.100000001),
                (25, 0.0868198127),
                (50, 0.054999996),
                (100, 0.0100000007),
                (150, 0.0100000007),
            ],
        );
    }

    #[test]
    fn cosine_decay_with_linear_warmup_matches_keras() {
        // Warm-up 0 -> 0.1 over 10 steps (5 -> 0.05), then 0.1 * 0.5 * (1 + cos(pi * (s-10)/100)),
        // ending at 0 from step 110 on.
        let warm = Schedule::CosineDecay {
            initial_learning_rate: 0.0,
            decay_steps: 100,
            alpha: 0.0,
            warmup_target: Some(0.1),
            warmup_steps: 10,
        };
        assert_keras(
            &warm,
            &[
                (0, 0.0),
                (5, 0.0500000007),
                (10, 0.100000001),
                (35, 0.0853553414),
                (60, 0.049999997),
            ],
        );
        assert!(warm.at(110).abs() < 1e-12 && warm.at(200).abs() < 1e-12);
    }

    #[test]
    fn piecewise_constant_matches_keras() {
        let p = Schedule::PiecewiseConstantDecay {
            boundaries: vec![10, 20],
            values: vec![1.0, 0.5, 0.1],
        };
        assert_keras(
            &p,
            &[
                (0, 1.0),
                (10, 1.0),
                (11, 0.5),
                (20, 0.5),
                (21, 0.100000001),
                (100, 0.100000001),
            ],
        );
    }

    #[test]
    fn step_decay_halves_every_step_size() {
        let s = Schedule::StepDecay {
            initial_learning_rate: 0.1,
            factor: 0.5,
            step_size: 3,
        };
        let got: Vec<f64> = (0..7).map(|e| s.at(e)).collect();
        assert_eq!(got, vec![0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025]);
    }

    #[test]
    fn bad_arguments_are_refused_with_the_argument_named() {
        let bad = Schedule::PiecewiseConstantDecay {
            boundaries: vec![10],
            values: vec![1.0],
        };
        let err = bad.validate().unwrap_err().to_string();
        assert!(
            err.contains("PiecewiseConstantDecay.values") && err.contains("1 boundaries"),
            "{err}"
        );
        let unordered = Schedule::PiecewiseConstantDecay {
            boundaries: vec![10, 5],
            values: vec![1.0, 0.5, 0.1],
        };
        assert!(unordered.validate().is_err());
        let zero = Schedule::StepDecay {
            initial_learning_rate: 0.1,
            factor: 0.5,
            step_size: 0,
        };
        assert!(
            zero.validate()
                .unwrap_err()
                .to_string()
                .contains("StepDecay.step_size")
        );
    }
}
