//! The optimizer arguments every Keras optimizer accepts about its gradients: `clipnorm`,
//! `clipvalue`, `global_clipnorm` and `gradient_accumulation_steps`
//! (`keras/src/optimizers/base_optimizer.py`, `BaseOptimizer.__init__`).
//!
//! TOML: in the optimizer table, next to its own hyperparameters,
//! `optimizer = { type = "AdamW", learning_rate = 1e-3, global_clipnorm = 1.0,
//! gradient_accumulation_steps = 4 }`.

use serde::{Deserialize, Serialize};

use super::clipping::Clipping;
use crate::error::{KilnError, Result};

fn one() -> usize {
    1
}
fn is_one(n: &usize) -> bool {
    *n == 1
}

/// Clipping and gradient accumulation, with Keras' names.
///
/// Keras' rules, kept: at most one of `clipnorm`, `clipvalue` and `global_clipnorm`; clipping
/// is applied to the (averaged) gradients of an update, just before the optimizer's rule.
/// Where kiln differs: a value `<= 0` is an error (Keras silently ignores it), and
/// `gradient_accumulation_steps = 1` means no accumulation (Keras refuses 1 and spells "no
/// accumulation" `None`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GradientOptions {
    /// Each parameter's gradient is rescaled to an L2 norm of at most this (Keras `clipnorm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clipnorm: Option<f64>,
    /// Each gradient element is clipped to `[-clipvalue, clipvalue]` (Keras `clipvalue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clipvalue: Option<f64>,
    /// All gradients together are rescaled to a global L2 norm of at most this (Keras
    /// `global_clipnorm`, `tf.clip_by_global_norm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_clipnorm: Option<f64>,
    /// One optimizer update every this many batches, with the mean of their gradients (Keras
    /// `gradient_accumulation_steps`); 1 = an update every batch. See
    /// [`crate::fit::GradientAccumulation`] for the counting of steps.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub gradient_accumulation_steps: usize,
}

impl Default for GradientOptions {
    fn default() -> GradientOptions {
        GradientOptions {
            clipnorm: None,
            clipvalue: None,
            global_clipnorm: None,
            gradient_accumulation_steps: 1,
        }
    }
}

impl GradientOptions {
    /// The TOML keys, as Keras names the arguments.
    pub const KEYS: [&'static str; 4] = [
        "clipnorm",
        "clipvalue",
        "global_clipnorm",
        "gradient_accumulation_steps",
    ];

    /// Reads [`Self::KEYS`] from a `compile.optimizer` value (a bare name has none: the
    /// defaults). Other keys are left to [`super::OptimizerSpec::from_toml`].
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `compile.optimizer.<key>` for a wrong type or value, or
    /// `compile.optimizer` when more than one clipping key is set.
    pub fn from_toml(value: &toml::Value) -> Result<GradientOptions> {
        let Some(table) = value.as_table() else {
            return Ok(GradientOptions::default());
        };
        let ours: toml::Table = table
            .iter()
            .filter(|(k, _)| Self::KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let options: GradientOptions =
            toml::Value::Table(ours)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    KilnError::config("compile.optimizer", crate::error::humanize(e.message()))
                })?;
        options.validate()?;
        Ok(options)
    }

    /// Checks the values: clipping thresholds positive and finite, at most one of them,
    /// `gradient_accumulation_steps >= 1`.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `compile.optimizer.<key>` (or `compile.optimizer` for two
    /// clipping keys).
    pub fn validate(&self) -> Result<()> {
        let set: Vec<(&str, f64)> = [
            ("clipnorm", self.clipnorm),
            ("clipvalue", self.clipvalue),
            ("global_clipnorm", self.global_clipnorm),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
        for &(key, v) in &set {
            if !(v > 0.0 && v.is_finite()) {
                return Err(KilnError::config(
                    format!("compile.optimizer.{key}"),
                    format!("must be a positive number, got {v}; remove the key to not clip"),
                ));
            }
        }
        if set.len() > 1 {
            let given: Vec<String> = set.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            return Err(KilnError::config(
                "compile.optimizer",
                format!(
                    "only one of clipnorm, clipvalue and global_clipnorm can be set (as in Keras), \
                     got {}; keep one",
                    given.join(" and ")
                ),
            ));
        }
        if self.gradient_accumulation_steps == 0 {
            return Err(KilnError::config(
                "compile.optimizer.gradient_accumulation_steps",
                "must be at least 1 (1 = an optimizer update every batch)",
            ));
        }
        Ok(())
    }

    /// The clipping rule, if any.
    pub fn clipping(&self) -> Option<Clipping> {
        match (self.clipnorm, self.clipvalue, self.global_clipnorm) {
            (Some(c), _, _) => Some(Clipping::Norm(c)),
            (_, Some(v), _) => Some(Clipping::Value(v)),
            (_, _, Some(c)) => Some(Clipping::GlobalNorm(c)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<GradientOptions> {
        let v: toml::Table = toml::from_str(&format!("o = {text}")).unwrap();
        GradientOptions::from_toml(&v["o"])
    }

    #[test]
    fn reads_the_keras_keys_and_ignores_the_optimizers_own() {
        let g = parse(
            "{ type = \"AdamW\", learning_rate = 1e-3, global_clipnorm = 1.0, \
             gradient_accumulation_steps = 4 }",
        )
        .unwrap();
        assert_eq!(
            g,
            GradientOptions {
                global_clipnorm: Some(1.0),
                gradient_accumulation_steps: 4,
                ..GradientOptions::default()
            }
        );
        assert_eq!(g.clipping(), Some(Clipping::GlobalNorm(1.0)));
        assert_eq!(
            parse("{ type = \"sgd\", clipvalue = 0.5 }")
                .unwrap()
                .clipping(),
            Some(Clipping::Value(0.5))
        );
        assert_eq!(
            parse("{ type = \"sgd\", clipnorm = 2 }")
                .unwrap()
                .clipping(),
            Some(Clipping::Norm(2.0))
        );
        let plain = GradientOptions::from_toml(&toml::Value::from("adamw")).unwrap();
        assert_eq!(plain, GradientOptions::default());
        assert_eq!(plain.clipping(), None);
    }

    #[test]
    fn bad_values_are_config_errors_naming_the_key() {
        let e = parse("{ type = \"adam\", clipnorm = 0.0 }").unwrap_err();
        assert_eq!(
            e.to_string(),
            "compile.optimizer.clipnorm: must be a positive number, got 0; remove the key to not clip"
        );
        let e = parse("{ type = \"adam\", global_clipnorm = -1 }").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("compile.optimizer.global_clipnorm: must be a positive number"),
            "{e}"
        );
        let e = parse("{ type = \"adam\", clipvalue = nan }").unwrap_err();
        assert!(
            e.to_string().starts_with("compile.optimizer.clipvalue:"),
            "{e}"
        );
        // Keras: "Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set."
        let e = parse("{ type = \"adam\", clipnorm = 1.0, clipvalue = 0.5 }").unwrap_err();
        assert_eq!(
            e.to_string(),
            "compile.optimizer: only one of clipnorm, clipvalue and global_clipnorm can be set \
             (as in Keras), got clipnorm = 1 and clipvalue = 0.5; keep one"
        );
        let e = parse("{ type = \"adam\", gradient_accumulation_steps = 0 }").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("compile.optimizer.gradient_accumulation_steps: must be at least 1"),
            "{e}"
        );
        let e = parse("{ type = \"adam\", gradient_accumulation_steps = 2.5 }").unwrap_err();
        assert!(e.to_string().starts_with("compile.optimizer:"), "{e}");
        assert!(e.to_string().contains("integer"), "{e}");
    }
}
