//! One hyperparameter: its kind, range and the maps from a uniform draw `u ∈ [0, 1)` to a
//! value, exactly as Keras Tuner computes them
//! (`keras_tuner/engine/hyperparameters/hp_types/{numerical,int_hp,float_hp,choice_hp,
//! boolean_hp,fixed_hp}.py`, `hp_utils.py`).

use crate::trial::Value;

/// How a numerical range is walked (Keras Tuner's `sampling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampling {
    /// `min + u·(max − min)`.
    Linear,
    /// `min·(max/min)^u` (needs `min > 0`); with a `step`, the step multiplies.
    Log,
    /// `max + min − min·(max/min)^(1−u)`: dense near `max` (needs `min > 0`).
    ReverseLog,
}

impl Sampling {
    /// The TOML spelling.
    pub fn name(self) -> &'static str {
        match self {
            Sampling::Linear => "linear",
            Sampling::Log => "log",
            Sampling::ReverseLog => "reverse_log",
        }
    }
}

/// The kind of a hyperparameter and its range.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// Integers in `[min, max]` (both inclusive). Linear sampling without `step` means
    /// `step = 1` (as Keras Tuner); log sampling without `step` draws any integer.
    Int {
        /// Lower bound, inclusive.
        min: i64,
        /// Upper bound, inclusive.
        max: i64,
        /// Distance (linear) or ratio (log, reverse_log; `> 1`) between values.
        step: Option<i64>,
        /// How the range is walked.
        sampling: Sampling,
    },
    /// Floats in `[min, max]`; with `step`, only `min + k·step` (linear) or `min·step^k` (log).
    Float {
        /// Lower bound, inclusive.
        min: f64,
        /// Upper bound, inclusive.
        max: f64,
        /// Distance (linear) or ratio (log, reverse_log; `> 1`) between values.
        step: Option<f64>,
        /// How the range is walked.
        sampling: Sampling,
    },
    /// One of `values` (all of one type).
    Choice {
        /// The choices, in the order given.
        values: Vec<Value>,
        /// Whether the values are ordered (defaults to true for numbers; must be false for
        /// strings and booleans).
        ordered: bool,
    },
    /// `true` or `false`.
    Boolean,
    /// Always `value` (not tuned, but recorded in every trial where it is active).
    Fixed {
        /// The value.
        value: Value,
    },
}

/// When a conditional hyperparameter is active: its parent is active and its value is one of
/// `values` (Keras Tuner's `conditions.Parent`).
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    /// The parent hyperparameter's name (defined earlier in the list).
    pub parent_name: String,
    /// The parent values that activate the child.
    pub parent_values: Vec<Value>,
}

/// One entry of the tune config's `[[hyperparameters]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct HyperParameter {
    /// Unique name; the key of [`crate::Params`].
    pub name: String,
    /// The run-config key it sets (dotted, e.g. `compile.optimizer.learning_rate`);
    /// defaults to `name`.
    pub key: String,
    /// Kind and range.
    pub kind: Kind,
    /// The default value (Keras Tuner: `min_value` for numbers, the first choice, `false`,
    /// the fixed value). The grid visits it first.
    pub default: Value,
    /// The activation condition, if any.
    pub condition: Option<Condition>,
}

/// Keras Tuner's `hp_utils.prob_to_index`: the bucket of `u` among `n` equal buckets.
pub(crate) fn prob_to_index(u: f64, n: usize) -> usize {
    let index = (u / (1.0 / n as f64)).floor() as usize;
    index.min(n - 1)
}

/// Number of stepped values from `min` to `max` inclusive.
///
/// Linear: `⌊(max − min)/step⌋ + 1` with a 1e-9 relative tolerance, so that `max` is a value
/// when `max − min` is a multiple of `step` in decimal (Keras Tuner's Python `//` gives 5
/// values for `Float(0, 1, step=0.2)`, dropping 1.0 by float rounding; kiln gives 6, as its
/// docstring promises). Log and reverse_log: `⌊log_step(max/min) + 1e-8⌋ + 1` (Keras Tuner's
/// `_get_n_values`).
pub(crate) fn n_stepped(min: f64, max: f64, step: f64, sampling: Sampling) -> usize {
    match sampling {
        Sampling::Linear => ((max - min) / step * (1.0 + 1e-9)).floor() as usize + 1,
        Sampling::Log | Sampling::ReverseLog => {
            ((max / min).ln() / step.ln() + 1e-8).floor() as usize + 1
        }
    }
}

/// [`n_stepped`] for Int: exact integer division when linear.
pub(crate) fn int_n_stepped(min: i64, max: i64, step: i64, sampling: Sampling) -> usize {
    match sampling {
        Sampling::Linear => ((max - min) / step) as usize + 1,
        _ => n_stepped(min as f64, max as f64, step as f64, sampling),
    }
}

/// The `index`-th stepped value (Keras Tuner's `_get_value_by_index`).
pub(crate) fn stepped_value(
    min: f64,
    max: f64,
    step: f64,
    sampling: Sampling,
    index: usize,
) -> f64 {
    match sampling {
        Sampling::Linear => min + index as f64 * step,
        Sampling::Log => min * step.powi(index as i32),
        Sampling::ReverseLog => max + min - min * step.powi(index as i32),
    }
}

/// Keras Tuner's `_sample_numerical_value`: `u ∈ [0, 1)` to `[min, max]`.
pub(crate) fn numerical_from_prob(min: f64, max: f64, sampling: Sampling, u: f64) -> f64 {
    match sampling {
        Sampling::Linear => u * (max - min) + min,
        Sampling::Log => min * (max / min).powf(u),
        Sampling::ReverseLog => max + min - min * (max / min).powf(1.0 - u),
    }
}

impl HyperParameter {
    /// The value for a uniform draw `u ∈ [0, 1)` (Keras Tuner's `prob_to_value`, what
    /// `random_sample` returns): Float `min·(max/min)^u` for log sampling, Int with `max + 1`
    /// as the open upper end so that `max` can be drawn, stepped kinds by equal buckets of `u`.
    pub fn from_prob(&self, u: f64) -> Value {
        match &self.kind {
            Kind::Int {
                min,
                max,
                step,
                sampling,
            } => {
                let (minf, maxf) = (*min as f64, *max as f64);
                let v = match step {
                    None => numerical_from_prob(minf, maxf + 1.0, *sampling, u),
                    Some(step) => {
                        let n = int_n_stepped(*min, *max, *step, *sampling);
                        stepped_value(minf, maxf, *step as f64, *sampling, prob_to_index(u, n))
                    }
                };
                // Python's int(): truncation toward zero; clamp guards float round-off.
                Value::Int((v.trunc() as i64).clamp(*min, *max))
            }
            Kind::Float {
                min,
                max,
                step,
                sampling,
            } => match step {
                None => Value::Float(numerical_from_prob(*min, *max, *sampling, u)),
                Some(step) => {
                    let n = n_stepped(*min, *max, *step, *sampling);
                    Value::Float(stepped_value(
                        *min,
                        *max,
                        *step,
                        *sampling,
                        prob_to_index(u, n),
                    ))
                }
            },
            Kind::Choice { values, .. } => values[prob_to_index(u, values.len())].clone(),
            Kind::Boolean => Value::Bool(u >= 0.5),
            Kind::Fixed { value } => value.clone(),
        }
    }

    /// How many values a discrete hyperparameter has (without listing them), or `None` for a
    /// continuous one (see [`discrete_values`](Self::discrete_values)).
    pub fn n_values(&self) -> Option<usize> {
        match &self.kind {
            Kind::Int {
                min,
                max,
                step,
                sampling,
            } => match (step, sampling) {
                (Some(s), _) => Some(int_n_stepped(*min, *max, *s, *sampling)),
                (None, Sampling::Linear) => Some(int_n_stepped(*min, *max, 1, *sampling)),
                (None, _) => None,
            },
            Kind::Float {
                min,
                max,
                step,
                sampling,
            } => step.map(|s| n_stepped(*min, *max, s, *sampling)),
            Kind::Choice { values, .. } => Some(values.len()),
            Kind::Boolean => Some(2),
            Kind::Fixed { .. } => Some(1),
        }
    }

    /// The finite list of values of a discrete hyperparameter, in Keras Tuner's `values`
    /// order, or `None` for a continuous one (Float without `step`, Int log/reverse_log
    /// without `step`).
    pub fn discrete_values(&self) -> Option<Vec<Value>> {
        match &self.kind {
            Kind::Int {
                min,
                max,
                step,
                sampling,
            } => {
                let step = match (step, sampling) {
                    (Some(s), _) => *s,
                    (None, Sampling::Linear) => 1,
                    (None, _) => return None,
                };
                let (minf, maxf) = (*min as f64, *max as f64);
                let n = int_n_stepped(*min, *max, step, *sampling);
                Some(
                    (0..n)
                        .map(|i| {
                            Value::Int(stepped_value(minf, maxf, step as f64, *sampling, i) as i64)
                        })
                        .collect(),
                )
            }
            Kind::Float {
                min,
                max,
                step,
                sampling,
            } => {
                let step = (*step)?;
                let n = n_stepped(*min, *max, step, *sampling);
                Some(
                    (0..n)
                        .map(|i| Value::Float(stepped_value(*min, *max, step, *sampling, i)))
                        .collect(),
                )
            }
            Kind::Choice { values, .. } => Some(values.clone()),
            Kind::Boolean => Some(vec![Value::Bool(true), Value::Bool(false)]),
            Kind::Fixed { value } => Some(vec![value.clone()]),
        }
    }

    /// The grid order of Keras Tuner's `GridSearchOracle`: the default first, then the other
    /// [`discrete_values`](Self::discrete_values) in order. `None` when continuous.
    pub fn grid_values(&self) -> Option<Vec<Value>> {
        let mut values = self.discrete_values()?;
        values.retain(|v| v != &self.default);
        values.insert(0, self.default.clone());
        Some(values)
    }

    /// Whether `value` is one this hyperparameter can take (type and range; a stepped kind's
    /// stepped values, within 1e-9 relative for floats, or its default).
    pub fn contains(&self, value: &Value) -> bool {
        match (&self.kind, value) {
            (Kind::Int { min, max, .. }, Value::Int(v)) => {
                (min..=max).contains(&v)
                    && (self.n_values().is_none()
                        || value == &self.default
                        || self.step_index(value).is_some())
            }
            (Kind::Float { min, max, step, .. }, Value::Float(v)) => {
                let tol = float_tol(*min, *max);
                if *v < min - tol || *v > max + tol {
                    return false;
                }
                step.is_none() || value == &self.default || self.step_index(value).is_some()
            }
            (Kind::Choice { values, .. }, v) => values.contains(v),
            (Kind::Boolean, Value::Bool(_)) => true,
            (Kind::Fixed { value: fixed }, v) => fixed == v,
            _ => false,
        }
    }

    /// For a stepped Int or Float (Int linear included, whose step is 1): the index of `value`
    /// among [`discrete_values`](Self::discrete_values), computed without listing them; `None`
    /// when `value` is not a stepped value or the kind is not stepped.
    pub fn step_index(&self, value: &Value) -> Option<usize> {
        let n = self.n_values()?;
        match (&self.kind, value) {
            (
                Kind::Int {
                    min,
                    max,
                    step,
                    sampling,
                },
                Value::Int(v),
            ) => {
                let step = step.unwrap_or(1);
                match sampling {
                    Sampling::Linear => {
                        let d = v.checked_sub(*min)?;
                        (d >= 0 && d % step == 0 && ((d / step) as usize) < n)
                            .then_some((d / step) as usize)
                    }
                    // Log steps: n is logarithmic in the range, so a scan is cheap.
                    _ => (0..n).find(|&i| {
                        stepped_value(*min as f64, *max as f64, step as f64, *sampling, i) as i64
                            == *v
                    }),
                }
            }
            (
                Kind::Float {
                    min,
                    max,
                    step: Some(step),
                    sampling,
                },
                Value::Float(v),
            ) => {
                let approx = match sampling {
                    Sampling::Linear => (v - min) / step,
                    Sampling::Log => (v / min).ln() / step.ln(),
                    Sampling::ReverseLog => ((max + min - v) / min).ln() / step.ln(),
                };
                if !approx.is_finite() || approx < -0.5 {
                    return None;
                }
                let i = approx.round() as usize;
                let x = stepped_value(*min, *max, *step, *sampling, i);
                (i < n && (x - v).abs() <= float_tol(*min, *max)).then_some(i)
            }
            _ => None,
        }
    }

    /// The `index`-th of [`discrete_values`](Self::discrete_values) for a stepped Int or Float,
    /// computed without listing them (`None` past the end or for other kinds).
    pub fn step_value(&self, index: usize) -> Option<Value> {
        if index >= self.n_values()? {
            return None;
        }
        match &self.kind {
            Kind::Int {
                min,
                max,
                step,
                sampling,
            } => Some(Value::Int(stepped_value(
                *min as f64,
                *max as f64,
                step.unwrap_or(1) as f64,
                *sampling,
                index,
            ) as i64)),
            Kind::Float {
                min,
                max,
                step: Some(step),
                sampling,
            } => Some(Value::Float(stepped_value(
                *min, *max, *step, *sampling, index,
            ))),
            _ => None,
        }
    }
}

/// The tolerance for comparing floats of the range `[min, max]`.
fn float_tol(min: f64, max: f64) -> f64 {
    1e-9 * (max - min).abs().max(min.abs()).max(max.abs()).max(1e-300)
}
