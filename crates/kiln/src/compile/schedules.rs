//! Built-in learning-rate schedules with Keras' names, arguments and formulas
//! (`keras/src/optimizers/schedules/learning_rate_schedule.py`, Keras 3), plus the classic step
//! decay. An optimizer's `learning_rate` may be one ([`LearningRate`], evaluated at Keras'
//! `optimizer.iterations` before each step), and [`crate::callbacks::LearningRateScheduler`]
//! applies them per epoch or per batch.

use serde::{Deserialize, Serialize};

use crate::error::{KilnError, Result};

fn one() -> f64 {
    1.0
}
fn two() -> f64 {
    2.0
}
fn end_learning_rate() -> f64 {
    0.0001
}

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
    /// `keras.optimizers.schedules.CosineDecayRestarts(initial_learning_rate,
    /// first_decay_steps, t_mul=2.0, m_mul=1.0, alpha=0.0)` (SGDR, Loshchilov & Hutter 2017):
    /// cosine decays whose `i`-th period lasts `first_decay_steps * t_mul^i` steps and starts
    /// at `initial_learning_rate * m_mul^i`.
    CosineDecayRestarts {
        /// The rate at step 0.
        initial_learning_rate: f64,
        /// Length of the first period (> 0).
        first_decay_steps: u64,
        /// Each period is `t_mul` times longer than the last (> 0).
        #[serde(default = "two")]
        t_mul: f64,
        /// Each period starts at `m_mul` times the last one's start.
        #[serde(default = "one")]
        m_mul: f64,
        /// The lowest rate as a fraction of the period's starting rate.
        #[serde(default)]
        alpha: f64,
    },
    /// `keras.optimizers.schedules.PolynomialDecay(initial_learning_rate, decay_steps,
    /// end_learning_rate=0.0001, power=1.0, cycle=False)`, with `s = min(step, decay_steps)`:
    /// `(initial_learning_rate - end_learning_rate) * (1 - s / decay_steps)^power +
    /// end_learning_rate`; with `cycle`, `decay_steps` grows to the first multiple of itself at
    /// or above `step` instead.
    PolynomialDecay {
        /// The rate at step 0.
        initial_learning_rate: f64,
        /// Length of the decay (> 0).
        decay_steps: u64,
        /// The rate at and after `decay_steps`.
        #[serde(default = "end_learning_rate")]
        end_learning_rate: f64,
        /// Exponent of the polynomial.
        #[serde(default = "one")]
        power: f64,
        /// Restart the decay after `decay_steps`.
        #[serde(default)]
        cycle: bool,
    },
    /// `keras.optimizers.schedules.InverseTimeDecay(initial_learning_rate, decay_steps,
    /// decay_rate, staircase=False)`: `initial_learning_rate / (1 + decay_rate * step /
    /// decay_steps)`, the fraction floored when `staircase`.
    InverseTimeDecay {
        /// The rate at step 0.
        initial_learning_rate: f64,
        /// Steps per unit of decay (> 0).
        decay_steps: u64,
        /// Decay per `decay_steps`.
        decay_rate: f64,
        /// Decay in whole steps of `decay_steps`.
        #[serde(default)]
        staircase: bool,
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
    /// The schedule's type name (`"CosineDecay"`).
    pub fn name(&self) -> &'static str {
        match self {
            Schedule::ExponentialDecay { .. } => "ExponentialDecay",
            Schedule::CosineDecay { .. } => "CosineDecay",
            Schedule::CosineDecayRestarts { .. } => "CosineDecayRestarts",
            Schedule::PolynomialDecay { .. } => "PolynomialDecay",
            Schedule::InverseTimeDecay { .. } => "InverseTimeDecay",
            Schedule::PiecewiseConstantDecay { .. } => "PiecewiseConstantDecay",
            Schedule::StepDecay { .. } => "StepDecay",
        }
    }

    /// Checks the arguments as Keras' constructors do, with errors keyed
    /// `<Type>.<argument>` (`CosineDecay.decay_steps`).
    ///
    /// # Errors
    /// As [`Schedule::validate_at`].
    pub fn validate(&self) -> Result<()> {
        self.validate_at(self.name())
    }

    /// Checks the arguments, naming them under `key` (`compile.optimizer.learning_rate`):
    /// `decay_steps`, `first_decay_steps` or `step_size` of 0 (Keras: "must be > 0"), a rate or
    /// factor that is negative or not finite, `t_mul` of 0, a `boundaries` / `values` length
    /// mismatch, boundaries that do not increase.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `key.<argument>` and the value.
    pub fn validate_at(&self, key: &str) -> Result<()> {
        let err =
            |arg: &str, message: String| Err(KilnError::config(format!("{key}.{arg}"), message));
        let (steps, floats): (Vec<Arg<u64>>, Vec<Arg<f64>>) = match self {
            Schedule::ExponentialDecay {
                initial_learning_rate,
                decay_steps,
                decay_rate,
                ..
            }
            | Schedule::InverseTimeDecay {
                initial_learning_rate,
                decay_steps,
                decay_rate,
                ..
            } => (
                vec![("decay_steps", *decay_steps)],
                vec![
                    ("initial_learning_rate", *initial_learning_rate),
                    ("decay_rate", *decay_rate),
                ],
            ),
            Schedule::CosineDecay {
                initial_learning_rate,
                decay_steps,
                alpha,
                warmup_target,
                ..
            } => (
                vec![("decay_steps", *decay_steps)],
                vec![
                    ("initial_learning_rate", *initial_learning_rate),
                    ("alpha", *alpha),
                    ("warmup_target", warmup_target.unwrap_or(0.0)),
                ],
            ),
            Schedule::CosineDecayRestarts {
                initial_learning_rate,
                first_decay_steps,
                t_mul,
                m_mul,
                alpha,
            } => {
                if *t_mul <= 0.0 {
                    return err("t_mul", format!("must be positive, got {t_mul}"));
                }
                (
                    vec![("first_decay_steps", *first_decay_steps)],
                    vec![
                        ("initial_learning_rate", *initial_learning_rate),
                        ("t_mul", *t_mul),
                        ("m_mul", *m_mul),
                        ("alpha", *alpha),
                    ],
                )
            }
            Schedule::PolynomialDecay {
                initial_learning_rate,
                decay_steps,
                end_learning_rate,
                power,
                ..
            } => (
                vec![("decay_steps", *decay_steps)],
                vec![
                    ("initial_learning_rate", *initial_learning_rate),
                    ("end_learning_rate", *end_learning_rate),
                    ("power", *power),
                ],
            ),
            Schedule::StepDecay {
                initial_learning_rate,
                factor,
                step_size,
            } => (
                vec![("step_size", *step_size)],
                vec![
                    ("initial_learning_rate", *initial_learning_rate),
                    ("factor", *factor),
                ],
            ),
            Schedule::PiecewiseConstantDecay { boundaries, values } => {
                if boundaries.len() + 1 != values.len() {
                    return err(
                        "values",
                        format!(
                            "needs one more value than boundaries; got {} boundaries and {} values",
                            boundaries.len(),
                            values.len()
                        ),
                    );
                }
                if boundaries.windows(2).any(|w| w[0] >= w[1]) {
                    return err(
                        "boundaries",
                        format!("must increase strictly; got {boundaries:?}"),
                    );
                }
                (Vec::new(), values.iter().map(|v| ("values", *v)).collect())
            }
        };
        for (arg, value) in steps {
            if value == 0 {
                return err(
                    arg,
                    format!("must be positive, got 0 (Keras: \"Argument `{arg}` must be > 0\")"),
                );
            }
        }
        for (arg, value) in floats {
            if !(value >= 0.0 && value.is_finite()) {
                return err(arg, format!("must be a non-negative number, got {value}"));
            }
        }
        Ok(())
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
            } => initial_learning_rate * decay_rate.powf(fraction(s, *decay_steps, *staircase)),
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
            Schedule::CosineDecayRestarts {
                initial_learning_rate,
                first_decay_steps,
                t_mul,
                m_mul,
                alpha,
            } => {
                let fraction = s / *first_decay_steps as f64;
                let (restart, fraction) = if *t_mul == 1.0 {
                    (fraction.floor(), fraction - fraction.floor())
                } else {
                    let i = ((1.0 - fraction * (1.0 - t_mul)).ln() / t_mul.ln()).floor();
                    let done = (1.0 - t_mul.powf(i)) / (1.0 - t_mul);
                    (i, (fraction - done) / t_mul.powf(i))
                };
                let cosine =
                    0.5 * m_mul.powf(restart) * (1.0 + (std::f64::consts::PI * fraction).cos());
                initial_learning_rate * ((1.0 - alpha) * cosine + alpha)
            }
            Schedule::PolynomialDecay {
                initial_learning_rate,
                decay_steps,
                end_learning_rate,
                power,
                cycle,
            } => {
                let mut steps = *decay_steps as f64;
                let s = if *cycle {
                    steps *= if step == 0 { 1.0 } else { (s / steps).ceil() };
                    s
                } else {
                    s.min(steps)
                };
                (initial_learning_rate - end_learning_rate) * (1.0 - s / steps).powf(*power)
                    + end_learning_rate
            }
            Schedule::InverseTimeDecay {
                initial_learning_rate,
                decay_steps,
                decay_rate,
                staircase,
            } => initial_learning_rate / (1.0 + decay_rate * fraction(s, *decay_steps, *staircase)),
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

/// An argument's name and value, for [`Schedule::validate_at`].
type Arg<T> = (&'static str, T);

/// `step / decay_steps`, floored when `staircase` (ExponentialDecay, InverseTimeDecay).
fn fraction(step: f64, decay_steps: u64, staircase: bool) -> f64 {
    let p = step / decay_steps as f64;
    if staircase { p.floor() } else { p }
}

/// An optimizer's `learning_rate`: a number, or a schedule table evaluated at Keras'
/// `optimizer.iterations` (the optimizer steps applied before this one) at every step.
/// TOML: `learning_rate = 0.01` or `learning_rate = { type = "ExponentialDecay",
/// initial_learning_rate = 0.1, decay_steps = 1000, decay_rate = 0.96 }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LearningRate {
    /// A fixed rate (callbacks may change it during `fit`).
    Constant(f64),
    /// A rate that follows the optimizer's step count (Keras' `LearningRateSchedule`).
    Schedule(Schedule),
}

impl From<f64> for LearningRate {
    fn from(rate: f64) -> LearningRate {
        LearningRate::Constant(rate)
    }
}

impl LearningRate {
    /// The rate of the step that follows `iterations` applied steps.
    pub fn at(&self, iterations: u64) -> f64 {
        match self {
            LearningRate::Constant(rate) => *rate,
            LearningRate::Schedule(s) => s.at(iterations),
        }
    }

    /// The schedule, if the rate is one.
    pub fn schedule(&self) -> Option<&Schedule> {
        match self {
            LearningRate::Constant(_) => None,
            LearningRate::Schedule(s) => Some(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keras 3.15.1's values (float32), printed by
    /// `tests/reference/keras_callbacks_reference.py` (and `optimizers_reference.py`), against
    /// kiln's float64 formula.
    fn assert_keras(schedule: &Schedule, keras: &[(u64, f64)]) {
        assert_keras_within(schedule, keras, 2.5e-7);
    }

    /// [`assert_keras`] to `relative`.
    fn assert_keras_within(schedule: &Schedule, keras: &[(u64, f64)], relative: f64) {
        schedule.validate().unwrap();
        for &(step, want) in keras {
            let got = schedule.at(step);
            assert!(
                (got - want).abs() <= relative * want.abs(),
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

    /// Keras 3.15's values, printed by `tests/reference/optimizers_reference.py`.
    #[test]
    fn cosine_decay_restarts_matches_keras() {
        let growing = Schedule::CosineDecayRestarts {
            initial_learning_rate: 0.1,
            first_decay_steps: 10,
            t_mul: 2.0,
            m_mul: 0.5,
            alpha: 0.1,
        };
        assert_keras(
            &growing,
            &[
                (0, 0.10000000149011612),
                (3, 0.08145033568143845),
                (9, 0.012202458456158638),
                (10, 0.055000003427267075),
                (17, 0.042714785784482956),
                (29, 0.01027701236307621),
                (30, 0.032499998807907104),
                (45, 0.025555187836289406),
                (69, 0.010034679435193539),
                (70, 0.021250000223517418),
                (100, 0.017777595669031143),
            ],
        );
        let equal = Schedule::CosineDecayRestarts {
            initial_learning_rate: 0.1,
            first_decay_steps: 8,
            t_mul: 1.0,
            m_mul: 0.9,
            alpha: 0.0,
        };
        // Near a period's end `1 + cos(πf)` cancels, and Keras' float32 keeps ~1e-6 of it (at
        // step 7: 0.0038060190 against float64's 0.0038060234).
        assert_keras_within(
            &equal,
            &[
                (0, 0.10000000149011612),
                (4, 0.04999999701976776),
                (7, 0.0038060189690440893),
                (8, 0.08999999612569809),
                (12, 0.044999998062849045),
                (20, 0.04049999639391899),
                (33, 0.06311286240816116),
            ],
            2e-6,
        );
    }

    #[test]
    fn polynomial_decay_matches_keras() {
        let once = Schedule::PolynomialDecay {
            initial_learning_rate: 0.1,
            decay_steps: 50,
            end_learning_rate: 0.01,
            power: 2.0,
            cycle: false,
        };
        assert_keras(
            &once,
            &[
                (0, 0.10000000149011612),
                (1, 0.09643600881099701),
                (10, 0.06760000437498093),
                (25, 0.032499998807907104),
                (49, 0.010036000050604343),
                (50, 0.009999999776482582),
                (80, 0.009999999776482582),
            ],
        );
        let cycling = Schedule::PolynomialDecay {
            initial_learning_rate: 0.1,
            decay_steps: 50,
            end_learning_rate: 0.01,
            power: 0.5,
            cycle: true,
        };
        assert_keras(
            &cycling,
            &[
                (0, 0.10000000149011612),
                (1, 0.09909545630216599),
                (25, 0.07363960891962051),
                (50, 0.009999999776482582),
                (51, 0.0729999989271164),
                (75, 0.054999999701976776),
                (100, 0.009999999776482582),
                (101, 0.061439283192157745),
                (160, 0.05024922639131546),
            ],
        );
    }

    #[test]
    fn inverse_time_decay_matches_keras() {
        let smooth = Schedule::InverseTimeDecay {
            initial_learning_rate: 0.1,
            decay_steps: 10,
            decay_rate: 0.5,
            staircase: false,
        };
        assert_keras(
            &smooth,
            &[
                (0, 0.10000000149011612),
                (1, 0.0952381044626236),
                (5, 0.07999999821186066),
                (10, 0.06666667014360428),
                (25, 0.04444444552063942),
                (100, 0.01666666753590107),
            ],
        );
        let stairs = Schedule::InverseTimeDecay {
            initial_learning_rate: 0.1,
            decay_steps: 10,
            decay_rate: 0.5,
            staircase: true,
        };
        assert_keras(
            &stairs,
            &[
                (0, 0.10000000149011612),
                (5, 0.10000000149011612),
                (9, 0.10000000149011612),
                (10, 0.06666667014360428),
                (25, 0.05000000074505806),
                (100, 0.01666666753590107),
            ],
        );
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
