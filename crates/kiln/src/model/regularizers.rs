//! Weight regularizers with Keras' names, arguments, defaults and formulas
//! (`keras/src/regularizers/regularizers.py`): the penalty a layer adds to the loss for a
//! weight.
//!
//! TOML: `kernel_regularizer = "l2"` (Keras' names and class names: `"l1"`, `"l2"`,
//! `"l1_l2"`, `"L1L2"`) or a table `{ class_name = "L2", l2 = 1e-4 }` (arguments flat or under
//! `config`). [`Regularizer`] serializes back to the table form.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::initializers::KerasObject;
use crate::error::Result;

/// A Keras weight regularizer. Factors are finite and at least 0 (Keras'
/// `validate_float_arg`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "class_name")]
pub enum Regularizer {
    /// `keras.regularizers.L1(l1=0.01)`: `l1 * sum(|w|)`.
    L1 {
        /// Factor of the sum of absolute values.
        l1: f64,
    },
    /// `keras.regularizers.L2(l2=0.01)`: `l2 * sum(w^2)`.
    L2 {
        /// Factor of the sum of squares.
        l2: f64,
    },
    /// `keras.regularizers.L1L2(l1=0.0, l2=0.0)`: `l1 * sum(|w|) + l2 * sum(w^2)`; a zero
    /// factor's term is skipped, as Keras.
    L1L2 {
        /// Factor of the sum of absolute values.
        l1: f64,
        /// Factor of the sum of squares.
        l2: f64,
    },
}

type Build = fn(&mut KerasObject) -> Result<Regularizer>;

const REGULARIZERS: &[(&str, Build)] = &[
    ("L1", |o| {
        Ok(Regularizer::L1 {
            l1: o.non_negative("l1", 0.01)?,
        })
    }),
    ("L2", |o| {
        Ok(Regularizer::L2 {
            l2: o.non_negative("l2", 0.01)?,
        })
    }),
    ("L1L2", |o| {
        Ok(Regularizer::L1L2 {
            l1: o.non_negative("l1", 0.0)?,
            l2: o.non_negative("l2", 0.0)?,
        })
    }),
];

impl Regularizer {
    /// Keras' snake_case name (`"l1"`, `"l2"`, `"l1_l2"`).
    pub fn name(&self) -> &'static str {
        match self {
            Regularizer::L1 { .. } => "l1",
            Regularizer::L2 { .. } => "l2",
            Regularizer::L1L2 { .. } => "l1_l2",
        }
    }

    /// `(l1, l2)`: the factors of `sum(|w|)` and `sum(w^2)`.
    pub fn factors(&self) -> (f64, f64) {
        match *self {
            Regularizer::L1 { l1 } => (l1, 0.0),
            Regularizer::L2 { l2 } => (0.0, l2),
            Regularizer::L1L2 { l1, l2 } => (l1, l2),
        }
    }

    /// The penalty of weight `w` (any shape), a one-element tensor on `w`'s device:
    /// `l1 * sum(|w|) + l2 * sum(w^2)`, a term left out when its factor is 0, zero when both
    /// are. Differentiable in `w` when `w` is tracked.
    pub fn penalty<const D: usize>(&self, w: Tensor<D>) -> Tensor<1> {
        let (l1, l2) = self.factors();
        let device = w.device();
        let l1_term = (l1 != 0.0).then(|| w.clone().abs().sum().mul_scalar(l1));
        let l2_term = (l2 != 0.0).then(|| w.square().sum().mul_scalar(l2));
        match (l1_term, l2_term) {
            (Some(a), Some(b)) => a + b,
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => Tensor::zeros([1], &device),
        }
    }

    /// [`Regularizer::penalty`] of host values, in f64.
    pub fn penalty_host(&self, w: &[f32]) -> f64 {
        let (l1, l2) = self.factors();
        let abs: f64 = w.iter().map(|v| f64::from(v.abs())).sum();
        let squares: f64 = w.iter().map(|v| f64::from(*v) * f64::from(*v)).sum();
        l1 * abs + l2 * squares
    }

    /// Reads a regularizer from TOML: a name or a table with `class_name` and Keras'
    /// arguments. `key` is the dotted config path named in errors.
    ///
    /// # Errors
    /// [`crate::error::KilnError::Config`] naming `key` (or `key.argument`) for an unknown
    /// name or argument, or a factor that is negative, not finite, or not a number.
    pub fn from_toml(value: &toml::Value, key: &str) -> Result<Regularizer> {
        let mut obj = KerasObject::parse(value, key, "regularizer", NAMES)?;
        let build = obj.resolve(REGULARIZERS, &[])?;
        let regularizer = build(&mut obj)?;
        obj.finish()?;
        Ok(regularizer)
    }
}

const NAMES: &str = "\"l1\", \"l2\", \"l1_l2\" (or Keras' class names \"L1\", \"L2\", \"L1L2\")";

impl<'de> Deserialize<'de> for Regularizer {
    /// Any value [`Regularizer::from_toml`] reads; errors name the key `regularizer`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let value = toml::Value::deserialize(d)?;
        Regularizer::from_toml(&value, "regularizer").map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::initializers::tests::{input, reference, tensor};

    fn parse(text: &str) -> Result<Regularizer> {
        let table: toml::Table = toml::from_str(&format!("r = {text}")).unwrap();
        Regularizer::from_toml(&table["r"], "model.layers[0].kernel_regularizer")
    }

    #[test]
    fn names_and_defaults_are_keras() {
        assert_eq!(parse("\"l1\"").unwrap(), Regularizer::L1 { l1: 0.01 });
        assert_eq!(parse("\"L2\"").unwrap(), Regularizer::L2 { l2: 0.01 });
        for name in ["\"l1_l2\"", "\"l1l2\"", "\"L1L2\""] {
            assert_eq!(parse(name).unwrap(), Regularizer::L1L2 { l1: 0.0, l2: 0.0 });
        }
        assert_eq!(
            parse("{ class_name = \"L2\", l2 = 1e-4 }").unwrap(),
            Regularizer::L2 { l2: 1e-4 }
        );
        assert_eq!(
            parse("{ class_name = \"L1L2\", config = { l1 = 1, l2 = 0.5 } }").unwrap(),
            Regularizer::L1L2 { l1: 1.0, l2: 0.5 }
        );
        assert_eq!(Regularizer::L1L2 { l1: 0.0, l2: 0.0 }.name(), "l1_l2");
    }

    #[test]
    fn serializes_to_the_table_it_reads() {
        for (r, class) in [
            (Regularizer::L1 { l1: 0.5 }, "L1"),
            (Regularizer::L2 { l2: 1e-4 }, "L2"),
            (Regularizer::L1L2 { l1: 0.1, l2: 0.2 }, "L1L2"),
        ] {
            let value = toml::Value::try_from(r).unwrap();
            assert_eq!(value["class_name"].as_str(), Some(class));
            assert_eq!(Regularizer::from_toml(&value, "k").unwrap(), r);
            let via_serde: Regularizer = value.try_into().unwrap();
            assert_eq!(via_serde, r);
        }
    }

    #[test]
    fn bad_values_name_the_key() {
        let key = "model.layers[0].kernel_regularizer";
        for (text, at, words) in [
            ("\"l3\"", key.to_string(), "unknown name \"l3\""),
            (
                "{ class_name = \"L2\", l2 = -1.0 }",
                format!("{key}.l2"),
                "at least 0",
            ),
            (
                "{ class_name = \"L1\", l2 = 0.1 }",
                format!("{key}.l2"),
                "allowed: l1",
            ),
            (
                "{ class_name = \"L1\", l1 = \"big\" }",
                format!("{key}.l1"),
                "expected a number",
            ),
            ("{ l1 = 0.1 }", format!("{key}.class_name"), "missing"),
            ("3", key.to_string(), "regularizer name"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.starts_with(&format!("{at}: ")), "{text}: {err}");
            assert!(err.contains(words), "{text}: {err}");
        }
    }

    #[test]
    fn penalties_match_keras() {
        let reference = reference();
        let cases = reference["regularizers"].as_array().unwrap();
        assert_eq!(cases.len(), 12);
        for case in cases {
            let config: toml::Value = serde_json::from_value(case["config"].clone()).unwrap();
            let r = Regularizer::from_toml(&config, "r").unwrap();
            let keras = case["penalty"].as_f64().unwrap();
            let w = input(case);
            let host = r.penalty_host(&w);
            assert!(
                (host - keras).abs() <= 1e-6,
                "{config}: host {host} vs Keras {keras}"
            );
            let burn = match case["shape"].as_array().unwrap().len() {
                2 => r.penalty(tensor::<2>(case)),
                _ => r.penalty(tensor::<4>(case)),
            };
            let burn = burn.into_data().try_to_vec::<f32>().unwrap();
            assert_eq!(burn.len(), 1);
            let got = f64::from(burn[0]);
            assert!(
                (got - keras).abs() <= 1e-6,
                "{config}: {got} vs Keras {keras}"
            );
        }
    }
}
