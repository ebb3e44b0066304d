//! Optimizers with Keras' names and defaults (`keras/src/optimizers/*.py`): SGD runs on Burn's
//! optimizer; Adam and AdamW on [`KerasAdam`], Keras' exact update; RMSprop, Adagrad,
//! Adadelta, Adamax, Nadam and Lion on the optimizers of [`super::optimizers`]. Every
//! optimizer's `learning_rate` is a number or a schedule table ([`LearningRate`]).

use burn::optim::momentum::MomentumConfig;
use burn::optim::{ModuleOptimizer, SgdConfig};
use serde::{Deserialize, Serialize};

use super::optimizers::{
    KerasAdadelta, KerasAdagrad, KerasAdamax, KerasLion, KerasNadam, KerasRmsProp,
};
use super::{KerasAdam, LearningRate, Schedule};
use crate::error::{KilnError, Result};

fn sgd_lr() -> LearningRate {
    LearningRate::Constant(0.01)
}
fn keras_lr() -> LearningRate {
    LearningRate::Constant(0.001)
}
fn beta_1() -> f64 {
    0.9
}
fn beta_2() -> f64 {
    0.999
}
fn lion_beta_2() -> f64 {
    0.99
}
fn epsilon() -> f64 {
    1e-7
}
fn adamw_decay() -> f64 {
    0.004
}
fn rms_rho() -> f64 {
    0.9
}
fn adadelta_rho() -> f64 {
    0.95
}
fn initial_accumulator() -> f64 {
    0.1
}

/// An optimizer and its hyperparameters. TOML: `optimizer = "adamw"` or
/// `optimizer = { type = "AdamW", learning_rate = 0.001, weight_decay = 0.004 }`; any
/// `learning_rate` may be a schedule table (`{ type = "CosineDecay", ... }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum OptimizerSpec {
    /// `keras.optimizers.SGD(learning_rate=0.01, momentum=0.0, nesterov=False)`.
    #[serde(rename = "SGD")]
    Sgd {
        /// Step size.
        #[serde(default = "sgd_lr")]
        learning_rate: LearningRate,
        /// Velocity decay; 0 disables momentum.
        #[serde(default)]
        momentum: f64,
        /// Nesterov momentum.
        #[serde(default)]
        nesterov: bool,
    },
    /// `keras.optimizers.Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
    /// amsgrad=False)`.
    Adam {
        /// Step size.
        #[serde(default = "keras_lr")]
        learning_rate: LearningRate,
        /// First-moment decay.
        #[serde(default = "beta_1")]
        beta_1: f64,
        /// Second-moment decay.
        #[serde(default = "beta_2")]
        beta_2: f64,
        /// Denominator fuzz.
        #[serde(default = "epsilon")]
        epsilon: f64,
        /// AMSGrad: divide by the running maximum of the second moment.
        #[serde(default)]
        amsgrad: bool,
    },
    /// `keras.optimizers.AdamW(learning_rate=0.001, weight_decay=0.004, beta_1=0.9,
    /// beta_2=0.999, epsilon=1e-7, amsgrad=False)`; decoupled decay
    /// `w -= lr * weight_decay * w` (Loshchilov & Hutter, 2019).
    AdamW {
        /// Step size.
        #[serde(default = "keras_lr")]
        learning_rate: LearningRate,
        /// Decoupled weight decay.
        #[serde(default = "adamw_decay")]
        weight_decay: f64,
        /// First-moment decay.
        #[serde(default = "beta_1")]
        beta_1: f64,
        /// Second-moment decay.
        #[serde(default = "beta_2")]
        beta_2: f64,
        /// Denominator fuzz.
        #[serde(default = "epsilon")]
        epsilon: f64,
        /// AMSGrad: divide by the running maximum of the second moment.
        #[serde(default)]
        amsgrad: bool,
    },
    /// `keras.optimizers.RMSprop(learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7,
    /// centered=False)` ([`KerasRmsProp`]).
    #[serde(rename = "RMSprop")]
    RmsProp {
        /// Step size.
        #[serde(default = "keras_lr")]
        learning_rate: LearningRate,
        /// Decay of the moving average of squared gradients.
        #[serde(default = "rms_rho")]
        rho: f64,
        /// Momentum; 0 disables it.
        #[serde(default)]
        momentum: f64,
        /// Added inside the square root.
        #[serde(default = "epsilon")]
        epsilon: f64,
        /// Normalize by the gradient's variance.
        #[serde(default)]
        centered: bool,
    },
    /// `keras.optimizers.Adagrad(learning_rate=0.001, initial_accumulator_value=0.1,
    /// epsilon=1e-7)` ([`KerasAdagrad`]).
    Adagrad {
        /// Step size.
        #[serde(default = "keras_lr")]
        learning_rate: LearningRate,
        /// The accumulator's starting value.
        #[serde(default = "initial_accumulator")]
        initial_accumulator_value: f64,
        /// Added inside the square root.
        #[serde(default = "epsilon")]
        epsilon: f64,
    },
    /// `keras.optimizers.Adadelta(learning_rate=0.001, rho=0.95, epsilon=1e-7)`
    /// ([`KerasAdadelta`]).
    Adadelta {
        /// Step size (Keras' default 0.001; the paper's Adadelta has 1.0).
        #[serde(default = "keras_lr")]
        learning_rate: LearningRate,
        /// Decay of both accumulators.
        #[serde(default = "adadelta_rho")]
        rho: f64,
        /// Added inside the square roots.
        #[serde(default = "epsilon")]
        epsilon: f64,
    },
    /// `keras.optimizers.Adamax(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7)`
    /// ([`KerasAdamax`]).
    Adamax {
        /// Step size.
        #[serde(default = "keras_lr")]
        learning_rate: LearningRate,
        /// First-moment decay.
        #[serde(default = "beta_1")]
        beta_1: f64,
        /// Decay of the infinity norm.
        #[serde(default = "beta_2")]
        beta_2: f64,
        /// Denominator fuzz.
        #[serde(default = "epsilon")]
        epsilon: f64,
    },
    /// `keras.optimizers.Nadam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7)`
    /// ([`KerasNadam`]).
    Nadam {
        /// Step size.
        #[serde(default = "keras_lr")]
        learning_rate: LearningRate,
        /// First-moment decay.
        #[serde(default = "beta_1")]
        beta_1: f64,
        /// Second-moment decay.
        #[serde(default = "beta_2")]
        beta_2: f64,
        /// Denominator fuzz.
        #[serde(default = "epsilon")]
        epsilon: f64,
    },
    /// `keras.optimizers.Lion(learning_rate=0.001, beta_1=0.9, beta_2=0.99)` ([`KerasLion`]).
    Lion {
        /// Step size.
        #[serde(default = "keras_lr")]
        learning_rate: LearningRate,
        /// Interpolation of the update direction.
        #[serde(default = "beta_1")]
        beta_1: f64,
        /// Decay of the momentum.
        #[serde(default = "lion_beta_2")]
        beta_2: f64,
    },
}

/// Each type's canonical name, as `type` takes it (matched without regard to case).
const TYPES: &[&str] = &[
    "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam", "Lion",
];

const NAMES: &str = "\"sgd\", \"adam\", \"adamw\", \"rmsprop\", \"adagrad\", \"adadelta\", \
     \"adamax\", \"nadam\", \"lion\" (or a table with type = \"SGD\" | \"Adam\" | \"AdamW\" | \
     \"RMSprop\" | \"Adagrad\" | \"Adadelta\" | \"Adamax\" | \"Nadam\" | \"Lion\")";

/// The range a hyperparameter must lie in.
#[derive(Clone, Copy)]
enum Range {
    /// `[0, 1]`.
    Closed,
    /// `[0, 1)`: a decay whose bias correction divides by `1 - β^t`.
    HalfOpen,
    /// `(0, 1]` (Lion's `beta_1`: at 0 it degenerates to SignSGD).
    AboveZero,
    /// A finite number `>= 0`.
    NonNegative,
}

impl Range {
    fn holds(self, x: f64) -> bool {
        match self {
            Range::Closed => (0.0..=1.0).contains(&x),
            Range::HalfOpen => (0.0..1.0).contains(&x),
            Range::AboveZero => x > 0.0 && x <= 1.0,
            Range::NonNegative => x >= 0.0 && x.is_finite(),
        }
    }

    fn wanted(self) -> &'static str {
        match self {
            Range::Closed => "between 0 and 1",
            Range::HalfOpen => "at least 0 and below 1 (e.g. 0.9 and 0.999)",
            Range::AboveZero => "above 0 and at most 1 (Keras' range)",
            Range::NonNegative => "a non-negative number",
        }
    }
}

impl OptimizerSpec {
    /// Reads `compile.optimizer`: a Keras string name or a table. The gradient keys every
    /// optimizer accepts ([`super::GradientOptions::KEYS`]: `clipnorm`, ...) are skipped here:
    /// [`super::GradientOptions::from_toml`] reads them from the same value.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `compile.optimizer` (or the key inside it) and the allowed
    /// names or range.
    pub fn from_toml(value: &toml::Value) -> Result<OptimizerSpec> {
        let key = "compile.optimizer";
        let (mut table, ty) = super::named_table(value, key, NAMES)?;
        table.retain(|k, _| !super::GradientOptions::KEYS.contains(&k));
        let Some(canonical) = TYPES.iter().find(|t| t.eq_ignore_ascii_case(&ty)) else {
            return Err(KilnError::config(
                format!("{key}.type"),
                format!("unknown optimizer \"{ty}\"; allowed: {NAMES}"),
            ));
        };
        table.insert("type".into(), toml::Value::String((*canonical).into()));
        if let Some(lr) = table.get_mut("learning_rate") {
            check_learning_rate(lr, &format!("{key}.learning_rate"))?;
        }
        let spec: OptimizerSpec =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    let mut message = crate::error::humanize(e.message());
                    if message.contains("unknown field") {
                        message += &format!(
                            " (every optimizer also takes {})",
                            super::GradientOptions::KEYS.join(", ")
                        );
                    }
                    KilnError::config(key, message)
                })?;
        spec.check_ranges(key)?;
        Ok(spec)
    }

    /// Refuses hyperparameters outside their meaningful range (each optimizer's
    /// [`OptimizerSpec::ranges`]): a learning rate that is not a positive number, `momentum`
    /// outside `[0, 1]` (Keras' SGD raises the same), `beta_1` / `beta_2` / `rho` outside
    /// `[0, 1)`, a negative `epsilon`, `weight_decay` or `initial_accumulator_value`, and any
    /// non-finite value.
    fn check_ranges(&self, key: &str) -> Result<()> {
        if let LearningRate::Constant(lr) = *self.rate()
            && !(lr > 0.0 && lr.is_finite())
        {
            return Err(KilnError::config(
                format!("{key}.learning_rate"),
                format!("must be a positive number, got {lr}"),
            ));
        }
        for (field, value, range) in self.ranges() {
            if !range.holds(value) || !value.is_finite() {
                return Err(KilnError::config(
                    format!("{key}.{field}"),
                    format!("must be {}, got {value}", range.wanted()),
                ));
            }
        }
        Ok(())
    }

    /// Each hyperparameter with the range it must lie in.
    fn ranges(&self) -> Vec<(&'static str, f64, Range)> {
        use Range::*;
        let adam = |b1, b2, eps| {
            vec![
                ("beta_1", b1, HalfOpen),
                ("beta_2", b2, HalfOpen),
                ("epsilon", eps, NonNegative),
            ]
        };
        match *self {
            OptimizerSpec::Sgd { momentum, .. } => vec![("momentum", momentum, Closed)],
            OptimizerSpec::Adam {
                beta_1,
                beta_2,
                epsilon,
                ..
            }
            | OptimizerSpec::Adamax {
                beta_1,
                beta_2,
                epsilon,
                ..
            }
            | OptimizerSpec::Nadam {
                beta_1,
                beta_2,
                epsilon,
                ..
            } => adam(beta_1, beta_2, epsilon),
            OptimizerSpec::AdamW {
                beta_1,
                beta_2,
                epsilon,
                weight_decay,
                ..
            } => {
                let mut r = adam(beta_1, beta_2, epsilon);
                r.push(("weight_decay", weight_decay, NonNegative));
                r
            }
            OptimizerSpec::RmsProp {
                rho,
                momentum,
                epsilon,
                ..
            } => {
                vec![
                    ("rho", rho, HalfOpen),
                    ("momentum", momentum, Closed),
                    ("epsilon", epsilon, NonNegative),
                ]
            }
            OptimizerSpec::Adagrad {
                initial_accumulator_value,
                epsilon,
                ..
            } => vec![
                (
                    "initial_accumulator_value",
                    initial_accumulator_value,
                    NonNegative,
                ),
                ("epsilon", epsilon, NonNegative),
            ],
            OptimizerSpec::Adadelta { rho, epsilon, .. } => {
                vec![("rho", rho, HalfOpen), ("epsilon", epsilon, NonNegative)]
            }
            OptimizerSpec::Lion { beta_1, beta_2, .. } => {
                vec![("beta_1", beta_1, AboveZero), ("beta_2", beta_2, Closed)]
            }
        }
    }

    /// The learning rate: a number or a schedule.
    pub fn rate(&self) -> &LearningRate {
        match self {
            OptimizerSpec::Sgd { learning_rate, .. }
            | OptimizerSpec::Adam { learning_rate, .. }
            | OptimizerSpec::AdamW { learning_rate, .. }
            | OptimizerSpec::RmsProp { learning_rate, .. }
            | OptimizerSpec::Adagrad { learning_rate, .. }
            | OptimizerSpec::Adadelta { learning_rate, .. }
            | OptimizerSpec::Adamax { learning_rate, .. }
            | OptimizerSpec::Nadam { learning_rate, .. }
            | OptimizerSpec::Lion { learning_rate, .. } => learning_rate,
        }
    }

    /// The learning rate of the first step (the constant rate, or the schedule at step 0).
    pub fn learning_rate(&self) -> f64 {
        self.rate().at(0)
    }

    /// The schedule, when `learning_rate` is one.
    pub fn schedule(&self) -> Option<&Schedule> {
        self.rate().schedule()
    }

    /// The Burn optimizer. Keras' SGD momentum has no dampening, so Burn's `dampening` is 0.
    /// Adam and AdamW use [`KerasAdam`] (Keras' formulas, `epsilon` added to `sqrt(v)`); the
    /// others their `Keras*` optimizer.
    pub fn build(&self) -> ModuleOptimizer {
        match *self {
            OptimizerSpec::Sgd {
                momentum, nesterov, ..
            } => {
                let m = (momentum > 0.0).then(|| {
                    MomentumConfig::new()
                        .with_momentum(momentum)
                        .with_dampening(0.0)
                        .with_nesterov(nesterov)
                });
                SgdConfig::new().with_momentum(m).init()
            }
            OptimizerSpec::Adam {
                beta_1,
                beta_2,
                epsilon,
                amsgrad,
                ..
            } => KerasAdam {
                beta_1,
                beta_2,
                epsilon,
                weight_decay: 0.0,
                amsgrad,
            }
            .into(),
            OptimizerSpec::AdamW {
                weight_decay,
                beta_1,
                beta_2,
                epsilon,
                amsgrad,
                ..
            } => KerasAdam {
                beta_1,
                beta_2,
                epsilon,
                weight_decay,
                amsgrad,
            }
            .into(),
            OptimizerSpec::RmsProp {
                rho,
                momentum,
                epsilon,
                centered,
                ..
            } => KerasRmsProp {
                rho,
                momentum,
                epsilon,
                centered,
            }
            .into(),
            OptimizerSpec::Adagrad {
                initial_accumulator_value,
                epsilon,
                ..
            } => KerasAdagrad {
                initial_accumulator_value,
                epsilon,
            }
            .into(),
            OptimizerSpec::Adadelta { rho, epsilon, .. } => KerasAdadelta { rho, epsilon }.into(),
            OptimizerSpec::Adamax {
                beta_1,
                beta_2,
                epsilon,
                ..
            } => KerasAdamax {
                beta_1,
                beta_2,
                epsilon,
            }
            .into(),
            OptimizerSpec::Nadam {
                beta_1,
                beta_2,
                epsilon,
                ..
            } => KerasNadam {
                beta_1,
                beta_2,
                epsilon,
            }
            .into(),
            OptimizerSpec::Lion { beta_1, beta_2, .. } => KerasLion { beta_1, beta_2 }.into(),
        }
    }
}

/// Checks `learning_rate` before the whole table is read, so that its errors name the key:
/// a number (an integer becomes a float) or a schedule table ([`Schedule::validate_at`]).
fn check_learning_rate(value: &mut toml::Value, key: &str) -> Result<()> {
    match value {
        toml::Value::Integer(i) => *value = toml::Value::Float(*i as f64),
        toml::Value::Float(_) => {}
        toml::Value::Table(_) => {
            let schedule: Schedule = value.clone().try_into().map_err(|e: toml::de::Error| {
                KilnError::config(key, crate::error::humanize(e.message()))
            })?;
            schedule.validate_at(key)?;
        }
        other => {
            return Err(KilnError::config(
                key,
                format!(
                    "must be a number or a schedule table (e.g. {{ type = \"ExponentialDecay\", \
                     initial_learning_rate = 0.1, decay_steps = 1000, decay_rate = 0.96 }}), got {other}"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_names_get_keras_defaults() {
        let s = OptimizerSpec::from_toml(&toml::Value::String("adamw".into())).unwrap();
        assert_eq!(
            s,
            OptimizerSpec::AdamW {
                learning_rate: 0.001.into(),
                weight_decay: 0.004,
                beta_1: 0.9,
                beta_2: 0.999,
                epsilon: 1e-7,
                amsgrad: false,
            }
        );
        let s = OptimizerSpec::from_toml(&toml::Value::String("SGD".into())).unwrap();
        assert_eq!(s.learning_rate(), 0.01);
    }

    #[test]
    fn unknown_names_and_fields_are_config_errors() {
        let e = OptimizerSpec::from_toml(&toml::Value::String("adabelief".into())).unwrap_err();
        assert!(
            e.to_string().contains("unknown optimizer \"adabelief\""),
            "{e}"
        );
        assert!(e.to_string().contains("\"rmsprop\"") && e.to_string().contains("\"lion\""));
        let v: toml::Value = toml::from_str::<toml::Table>("o = { type = \"adam\", lr = 0.1 }")
            .unwrap()["o"]
            .clone();
        let e = OptimizerSpec::from_toml(&v).unwrap_err();
        assert!(e.to_string().contains("unknown field `lr`"), "{e}");
        assert!(e.to_string().contains("also takes clipnorm"), "{e}");
    }

    #[test]
    fn out_of_range_hyperparameters_name_the_key() {
        for (table, key, got) in [
            ("{ type = \"sgd\", momentum = -0.1 }", "momentum", "-0.1"),
            ("{ type = \"adam\", beta_1 = 1.0 }", "beta_1", "1"),
            ("{ type = \"adamw\", beta_2 = 1.5 }", "beta_2", "1.5"),
            (
                "{ type = \"adam\", epsilon = -1e-7 }",
                "epsilon",
                "-0.0000001",
            ),
            (
                "{ type = \"adamw\", weight_decay = -0.01 }",
                "weight_decay",
                "-0.01",
            ),
            (
                "{ type = \"adamw\", learning_rate = 0.0 }",
                "learning_rate",
                "0",
            ),
        ] {
            let v: toml::Value =
                toml::from_str::<toml::Table>(&format!("o = {table}")).unwrap()["o"].clone();
            let e = OptimizerSpec::from_toml(&v).unwrap_err().to_string();
            assert!(
                e.contains(&format!("compile.optimizer.{key}"))
                    && e.contains(&format!("got {got}")),
                "{table}: {e}"
            );
        }
        let ok: toml::Value =
            toml::from_str::<toml::Table>("o = { type = \"sgd\", momentum = 0.9 }").unwrap()["o"]
                .clone();
        assert!(OptimizerSpec::from_toml(&ok).is_ok());
    }

    fn parse(table: &str) -> Result<OptimizerSpec> {
        let v: toml::Value =
            toml::from_str::<toml::Table>(&format!("o = {table}")).unwrap()["o"].clone();
        OptimizerSpec::from_toml(&v)
    }

    #[test]
    fn every_keras_name_gets_keras_defaults() {
        let lr = |name: &str| OptimizerSpec::from_toml(&name.into()).unwrap();
        assert_eq!(
            lr("rmsprop"),
            OptimizerSpec::RmsProp {
                learning_rate: 0.001.into(),
                rho: 0.9,
                momentum: 0.0,
                epsilon: 1e-7,
                centered: false
            }
        );
        assert_eq!(
            lr("Adagrad"),
            OptimizerSpec::Adagrad {
                learning_rate: 0.001.into(),
                initial_accumulator_value: 0.1,
                epsilon: 1e-7
            }
        );
        assert_eq!(
            lr("adadelta"),
            OptimizerSpec::Adadelta {
                learning_rate: 0.001.into(),
                rho: 0.95,
                epsilon: 1e-7
            }
        );
        assert_eq!(
            lr("lion"),
            OptimizerSpec::Lion {
                learning_rate: 0.001.into(),
                beta_1: 0.9,
                beta_2: 0.99
            }
        );
        for name in ["adamax", "nadam"] {
            assert_eq!(lr(name).learning_rate(), 0.001);
            assert!(matches!(
                lr(name).ranges()[..],
                [
                    ("beta_1", 0.9, _),
                    ("beta_2", 0.999, _),
                    ("epsilon", 1e-7, _)
                ]
            ));
        }
        let adam = parse("{ type = \"adam\", amsgrad = true, learning_rate = 1 }").unwrap();
        assert!(matches!(adam, OptimizerSpec::Adam { amsgrad: true, .. }));
        assert_eq!(adam.learning_rate(), 1.0);
    }

    #[test]
    fn a_schedule_as_learning_rate_is_read_and_checked_under_its_key() {
        let s = parse(
            "{ type = \"rmsprop\", learning_rate = { type = \"ExponentialDecay\", \
             initial_learning_rate = 0.1, decay_steps = 10, decay_rate = 0.5 } }",
        )
        .unwrap();
        assert_eq!(s.learning_rate(), 0.1);
        assert!((s.rate().at(10) - 0.05).abs() < 1e-15);
        assert!(matches!(
            s.schedule(),
            Some(Schedule::ExponentialDecay { .. })
        ));
        // The resolved config (to_toml) reads back the same.
        let back: OptimizerSpec = toml::Value::try_from(&s).unwrap().try_into().unwrap();
        assert_eq!(back, s);
        for (lr, want) in [
            (
                "{ type = \"ExponentialDecay\", initial_learning_rate = 0.1, decay_steps = 0, decay_rate = 0.9 }",
                "compile.optimizer.learning_rate.decay_steps: must be positive, got 0",
            ),
            (
                "{ type = \"CosineDecayRestarts\", initial_learning_rate = 0.1, first_decay_steps = 0 }",
                "compile.optimizer.learning_rate.first_decay_steps: must be positive, got 0",
            ),
            (
                "{ type = \"PolynomialDecay\", initial_learning_rate = -0.1, decay_steps = 5 }",
                "compile.optimizer.learning_rate.initial_learning_rate: must be a non-negative number, got -0.1",
            ),
            (
                "{ type = \"PiecewiseConstantDecay\", boundaries = [5], values = [0.1] }",
                "compile.optimizer.learning_rate.values: needs one more value",
            ),
            (
                "{ type = \"LinearDecay\", initial_learning_rate = 0.1 }",
                "compile.optimizer.learning_rate: unknown variant `LinearDecay`",
            ),
            (
                "{ type = \"InverseTimeDecay\", initial_learning_rate = 0.1, decay_steps = 2 }",
                "compile.optimizer.learning_rate: missing field `decay_rate`",
            ),
            (
                "\"fast\"",
                "compile.optimizer.learning_rate: must be a number or a schedule table",
            ),
        ] {
            let e = parse(&format!("{{ type = \"sgd\", learning_rate = {lr} }}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{lr}: {e}");
        }
    }

    #[test]
    fn new_optimizers_refuse_out_of_range_values_by_key() {
        for (table, key, got) in [
            ("{ type = \"rmsprop\", rho = 1.0 }", "rho", "1"),
            ("{ type = \"rmsprop\", momentum = 1.5 }", "momentum", "1.5"),
            (
                "{ type = \"adagrad\", initial_accumulator_value = -1 }",
                "initial_accumulator_value",
                "-1",
            ),
            ("{ type = \"adadelta\", epsilon = -1.0 }", "epsilon", "-1"),
            ("{ type = \"adamax\", beta_2 = 1.0 }", "beta_2", "1"),
            ("{ type = \"nadam\", beta_1 = -0.5 }", "beta_1", "-0.5"),
            ("{ type = \"lion\", beta_1 = 0.0 }", "beta_1", "0"),
            (
                "{ type = \"lion\", learning_rate = -1e-3 }",
                "learning_rate",
                "-0.001",
            ),
        ] {
            let e = parse(table).unwrap_err().to_string();
            assert!(
                e.contains(&format!("compile.optimizer.{key}"))
                    && e.contains(&format!("got {got}")),
                "{table}: {e}"
            );
        }
    }
}
