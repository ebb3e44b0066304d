//! Optimizers with Keras' names and defaults (`keras/src/optimizers/{sgd,adam,adamw}.py`):
//! SGD runs on Burn's optimizer; Adam and AdamW on [`KerasAdam`], Keras' exact update.

use burn::optim::momentum::MomentumConfig;
use burn::optim::{ModuleOptimizer, SgdConfig};
use serde::{Deserialize, Serialize};

use super::KerasAdam;
use crate::error::{KilnError, Result};

fn sgd_lr() -> f64 {
    0.01
}
fn adam_lr() -> f64 {
    0.001
}
fn beta_1() -> f64 {
    0.9
}
fn beta_2() -> f64 {
    0.999
}
fn epsilon() -> f64 {
    1e-7
}
fn adamw_decay() -> f64 {
    0.004
}

/// An optimizer and its hyperparameters. TOML: `optimizer = "adamw"` or
/// `optimizer = { type = "AdamW", learning_rate = 0.001, weight_decay = 0.004 }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum OptimizerSpec {
    /// `keras.optimizers.SGD(learning_rate=0.01, momentum=0.0, nesterov=False)`.
    #[serde(rename = "SGD")]
    Sgd {
        /// Step size.
        #[serde(default = "sgd_lr")]
        learning_rate: f64,
        /// Velocity decay; 0 disables momentum.
        #[serde(default)]
        momentum: f64,
        /// Nesterov momentum.
        #[serde(default)]
        nesterov: bool,
    },
    /// `keras.optimizers.Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7)`.
    Adam {
        /// Step size.
        #[serde(default = "adam_lr")]
        learning_rate: f64,
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
    /// `keras.optimizers.AdamW(learning_rate=0.001, weight_decay=0.004, beta_1=0.9,
    /// beta_2=0.999, epsilon=1e-7)`; decoupled decay `w -= lr * weight_decay * w`
    /// (Loshchilov & Hutter, 2019).
    AdamW {
        /// Step size.
        #[serde(default = "adam_lr")]
        learning_rate: f64,
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
    },
}

const NAMES: &str =
    "\"sgd\", \"adam\", \"adamw\" (or a table with type = \"SGD\" | \"Adam\" | \"AdamW\")";

impl OptimizerSpec {
    /// Reads `compile.optimizer`: a Keras string name or a table. The gradient keys every
    /// optimizer accepts ([`super::GradientOptions::KEYS`]: `clipnorm`, ...) are skipped here:
    /// [`super::GradientOptions::from_toml`] reads them from the same value.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `compile.optimizer` and the allowed names.
    pub fn from_toml(value: &toml::Value) -> Result<OptimizerSpec> {
        let key = "compile.optimizer";
        let (mut table, ty) = super::named_table(value, key, NAMES)?;
        table.retain(|k, _| !super::GradientOptions::KEYS.contains(&k));
        let canonical = match ty.to_ascii_lowercase().as_str() {
            "sgd" => "SGD",
            "adam" => "Adam",
            "adamw" => "AdamW",
            _ => {
                return Err(KilnError::config(
                    format!("{key}.type"),
                    format!("unknown optimizer \"{ty}\"; allowed: {NAMES}"),
                ));
            }
        };
        table.insert("type".into(), toml::Value::String(canonical.into()));
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

    /// Refuses hyperparameters outside their meaningful range: a learning rate that is not a
    /// positive number, `momentum` outside `[0, 1]` (Keras' SGD raises the same), `beta_1` /
    /// `beta_2` outside `[0, 1)` (at 1 Adam's bias correction `1 - β^t` divides by zero), a
    /// negative `epsilon` or `weight_decay`, and any non-finite value.
    fn check_ranges(&self, key: &str) -> Result<()> {
        let bad = |field: &str, value: f64, want: &str| -> Result<()> {
            Err(KilnError::config(
                format!("{key}.{field}"),
                format!("must be {want}, got {value}"),
            ))
        };
        let lr = self.learning_rate();
        if lr <= 0.0 || !lr.is_finite() {
            return bad("learning_rate", lr, "a positive number");
        }
        let (betas, epsilon, decay) = match *self {
            OptimizerSpec::Sgd { momentum, .. } => {
                if !(0.0..=1.0).contains(&momentum) {
                    return bad("momentum", momentum, "between 0 and 1 (Keras' range)");
                }
                return Ok(());
            }
            OptimizerSpec::Adam {
                beta_1,
                beta_2,
                epsilon,
                ..
            } => ([beta_1, beta_2], epsilon, 0.0),
            OptimizerSpec::AdamW {
                beta_1,
                beta_2,
                epsilon,
                weight_decay,
                ..
            } => ([beta_1, beta_2], epsilon, weight_decay),
        };
        for (field, beta) in ["beta_1", "beta_2"].into_iter().zip(betas) {
            if !(0.0..1.0).contains(&beta) {
                return bad(field, beta, "at least 0 and below 1 (e.g. 0.9 and 0.999)");
            }
        }
        if !(epsilon >= 0.0 && epsilon.is_finite()) {
            return bad(
                "epsilon",
                epsilon,
                "a small non-negative number (Keras: 1e-7)",
            );
        }
        if !(decay >= 0.0 && decay.is_finite()) {
            return bad(
                "weight_decay",
                decay,
                "a non-negative number (Keras: 0.004)",
            );
        }
        Ok(())
    }

    /// The (constant) learning rate.
    pub fn learning_rate(&self) -> f64 {
        match self {
            OptimizerSpec::Sgd { learning_rate, .. }
            | OptimizerSpec::Adam { learning_rate, .. }
            | OptimizerSpec::AdamW { learning_rate, .. } => *learning_rate,
        }
    }

    /// The Burn optimizer. Keras' SGD momentum has no dampening, so Burn's `dampening` is 0.
    /// Adam and AdamW use [`KerasAdam`] (Keras' formulas, `epsilon` added to `sqrt(v)`).
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
                ..
            } => ModuleOptimizer::from(KerasAdam {
                beta_1,
                beta_2,
                epsilon,
                weight_decay: 0.0,
            }),
            OptimizerSpec::AdamW {
                weight_decay,
                beta_1,
                beta_2,
                epsilon,
                ..
            } => ModuleOptimizer::from(KerasAdam {
                beta_1,
                beta_2,
                epsilon,
                weight_decay,
            }),
        }
    }
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
                learning_rate: 0.001,
                weight_decay: 0.004,
                beta_1: 0.9,
                beta_2: 0.999,
                epsilon: 1e-7
            }
        );
        let s = OptimizerSpec::from_toml(&toml::Value::String("SGD".into())).unwrap();
        assert_eq!(s.learning_rate(), 0.01);
    }

    #[test]
    fn unknown_names_and_fields_are_config_errors() {
        let e = OptimizerSpec::from_toml(&toml::Value::String("lion".into())).unwrap_err();
        assert!(e.to_string().contains("unknown optimizer \"lion\""), "{e}");
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
}
