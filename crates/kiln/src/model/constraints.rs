//! Weight constraints with Keras' names, arguments, defaults and formulas
//! (`keras/src/constraints/constraints.py`): a projection applied to a weight after each
//! optimizer update.
//!
//! TOML: `kernel_constraint = "non_neg"` (Keras' names and class names: `"max_norm"`,
//! `"MaxNorm"`, `"non_neg"`, `"unit_norm"`, `"min_max_norm"`) or a table
//! `{ class_name = "MaxNorm", max_value = 3, axis = [0, 1, 2] }` (arguments flat or under
//! `config`). [`Constraint`] serializes back to the table form.
//!
//! Norms are L2 norms over `axis` of the weight in Keras' layout (Dense kernel
//! `[in, units]`: `axis = 0` constrains each unit's incoming weights; Conv2D kernel
//! `[kh, kw, in, out]`: `axis = [0, 1, 2]` constrains each filter), kept as size-1 dims so
//! they broadcast back. Negative axes count from the end.

use burn::prelude::*;
use serde::{Deserialize, Serialize, Serializer};

use super::initializers::KerasObject;
use crate::error::{KilnError, Result};

/// Keras' `backend.epsilon()`, added to the norms before dividing by them.
pub const EPSILON: f64 = 1e-7;

/// A Keras weight constraint.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "class_name")]
pub enum Constraint {
    /// `keras.constraints.MaxNorm(max_value=2, axis=0)`:
    /// `w * clip(norms, 0, max_value) / (epsilon + norms)`.
    MaxNorm {
        /// The largest norm (at least 0).
        max_value: f64,
        /// The axes the norms are taken over.
        #[serde(serialize_with = "axes_as_keras")]
        axis: Vec<i64>,
    },
    /// `keras.constraints.NonNeg()`: `max(w, 0)`.
    NonNeg,
    /// `keras.constraints.UnitNorm(axis=0)`: `w / (epsilon + norms)`.
    UnitNorm {
        /// The axes the norms are taken over.
        #[serde(serialize_with = "axes_as_keras")]
        axis: Vec<i64>,
    },
    /// `keras.constraints.MinMaxNorm(min_value=0.0, max_value=1.0, rate=1.0, axis=0)`:
    /// `w * desired / (epsilon + norms)`,
    /// `desired = rate * clip(norms, min_value, max_value) + (1 - rate) * norms`.
    MinMaxNorm {
        /// The smallest norm (at least 0).
        min_value: f64,
        /// The largest norm (at least `min_value`).
        max_value: f64,
        /// How far towards `[min_value, max_value]` one step moves the norms, in `[0, 1]`
        /// (1: all the way).
        rate: f64,
        /// The axes the norms are taken over.
        #[serde(serialize_with = "axes_as_keras")]
        axis: Vec<i64>,
    },
}

/// One axis as an integer, several as a list, as Keras writes `axis`.
fn axes_as_keras<S: Serializer>(axes: &[i64], s: S) -> std::result::Result<S::Ok, S::Error> {
    match axes {
        [one] => s.serialize_i64(*one),
        many => many.serialize(s),
    }
}

type Build = fn(&mut KerasObject) -> Result<Constraint>;

const CONSTRAINTS: &[(&str, Build)] = &[
    ("MaxNorm", |o| {
        Ok(Constraint::MaxNorm {
            max_value: o.non_negative("max_value", 2.0)?,
            axis: o.axes("axis", 0)?,
        })
    }),
    ("NonNeg", |_| Ok(Constraint::NonNeg)),
    ("UnitNorm", |o| {
        Ok(Constraint::UnitNorm {
            axis: o.axes("axis", 0)?,
        })
    }),
    ("MinMaxNorm", read_min_max_norm),
];

const NAMES: &str = "\"max_norm\", \"non_neg\", \"unit_norm\", \"min_max_norm\" (or Keras' \
    class names \"MaxNorm\", \"NonNeg\", \"UnitNorm\", \"MinMaxNorm\")";

fn read_min_max_norm(o: &mut KerasObject) -> Result<Constraint> {
    let min_value = o.non_negative("min_value", 0.0)?;
    let max_value = o.non_negative("max_value", 1.0)?;
    if max_value < min_value {
        return Err(o.error(
            "max_value",
            format!("must be at least min_value ({min_value}), got {max_value}"),
        ));
    }
    let rate = o.number("rate", 1.0)?;
    if !(0.0..=1.0).contains(&rate) {
        return Err(o.error("rate", format!("must be between 0 and 1, got {rate}")));
    }
    Ok(Constraint::MinMaxNorm {
        min_value,
        max_value,
        rate,
        axis: o.axes("axis", 0)?,
    })
}

impl Constraint {
    /// Keras' snake_case name (`"max_norm"`, `"non_neg"`, `"unit_norm"`, `"min_max_norm"`).
    pub fn name(&self) -> &'static str {
        match self {
            Constraint::MaxNorm { .. } => "max_norm",
            Constraint::NonNeg => "non_neg",
            Constraint::UnitNorm { .. } => "unit_norm",
            Constraint::MinMaxNorm { .. } => "min_max_norm",
        }
    }

    /// The axes the norms are taken over, as written (empty for `NonNeg`).
    pub fn axes(&self) -> &[i64] {
        match self {
            Constraint::MaxNorm { axis, .. }
            | Constraint::UnitNorm { axis }
            | Constraint::MinMaxNorm { axis, .. } => axis,
            Constraint::NonNeg => &[],
        }
    }

    /// Checks that every axis fits a weight of `rank` (in `-rank..rank`, distinct after
    /// counting negative ones from the end); call it when the layer is built, before
    /// [`Constraint::apply`].
    ///
    /// # Errors
    /// [`KilnError::Config`] at `key.axis` naming the rank.
    pub fn check_rank(&self, rank: usize, key: &str) -> Result<()> {
        let mut seen = Vec::new();
        for &a in self.axes() {
            let resolved = resolve_axis(a, rank).filter(|r| !seen.contains(r));
            match resolved {
                Some(r) => seen.push(r),
                None => {
                    return Err(KilnError::config(
                        format!("{key}.axis"),
                        format!(
                            "axis {a} does not fit (or repeats an axis of) this weight of rank \
                             {rank}; allowed: distinct axes from {} to {}",
                            -(rank as i64),
                            rank as i64 - 1
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The constrained weight, same shape as `w` (Keras' layout, see the module docs).
    ///
    /// # Panics
    /// When an axis does not fit rank `D`: [`Constraint::check_rank`] refuses those.
    pub fn apply<const D: usize>(&self, w: Tensor<D>) -> Tensor<D> {
        let norms = |w: &Tensor<D>| {
            let dims: Vec<usize> = self
                .axes()
                .iter()
                .map(|&a| resolve_axis(a, D).expect("constraint axes are checked for the rank"))
                .collect();
            w.clone().square().sum_dims(&dims).sqrt()
        };
        match *self {
            Constraint::NonNeg => w.clamp_min(0.0),
            Constraint::UnitNorm { .. } => {
                let n = norms(&w);
                w / n.add_scalar(EPSILON)
            }
            Constraint::MaxNorm { max_value, .. } => {
                let n = norms(&w);
                let desired = n.clone().clamp(0.0, max_value);
                w * (desired / n.add_scalar(EPSILON))
            }
            Constraint::MinMaxNorm {
                min_value,
                max_value,
                rate,
                ..
            } => {
                let n = norms(&w);
                let desired = n.clone().clamp(min_value, max_value).mul_scalar(rate)
                    + n.clone().mul_scalar(1.0 - rate);
                w * (desired / n.add_scalar(EPSILON))
            }
        }
    }

    /// Reads a constraint from TOML: a name or a table with `class_name` and Keras'
    /// arguments. `key` is the dotted config path named in errors.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `key` (or `key.argument`) for an unknown name or
    /// argument, a wrong type, a negative norm bound, `max_value < min_value`, `rate` outside
    /// `[0, 1]`, or an `axis` that is not an integer or a list of distinct integers.
    pub fn from_toml(value: &toml::Value, key: &str) -> Result<Constraint> {
        let mut obj = KerasObject::parse(value, key, "constraint", NAMES)?;
        let build = obj.resolve(CONSTRAINTS, &[])?;
        let constraint = build(&mut obj)?;
        obj.finish()?;
        Ok(constraint)
    }
}

/// `axis` counted from the front (`-1` is `rank - 1`), `None` outside `-rank..rank`.
fn resolve_axis(axis: i64, rank: usize) -> Option<usize> {
    let rank = rank as i64;
    let a = if axis < 0 { axis + rank } else { axis };
    (0..rank).contains(&a).then_some(a as usize)
}

impl<'de> Deserialize<'de> for Constraint {
    /// Any value [`Constraint::from_toml`] reads; errors name the key `constraint`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let value = toml::Value::deserialize(d)?;
        Constraint::from_toml(&value, "constraint").map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::initializers::tests::{reference, tensor};

    fn parse(text: &str) -> Result<Constraint> {
        let table: toml::Table = toml::from_str(&format!("c = {text}")).unwrap();
        Constraint::from_toml(&table["c"], "model.layers[1].kernel_constraint")
    }

    #[test]
    fn names_and_defaults_are_keras() {
        assert_eq!(
            parse("\"max_norm\"").unwrap(),
            Constraint::MaxNorm {
                max_value: 2.0,
                axis: vec![0]
            }
        );
        assert_eq!(parse("\"NonNeg\"").unwrap(), Constraint::NonNeg);
        assert_eq!(
            parse("\"unit_norm\"").unwrap(),
            Constraint::UnitNorm { axis: vec![0] }
        );
        assert_eq!(
            parse("\"MinMaxNorm\"").unwrap(),
            Constraint::MinMaxNorm {
                min_value: 0.0,
                max_value: 1.0,
                rate: 1.0,
                axis: vec![0]
            }
        );
        assert_eq!(
            parse("{ class_name = \"MaxNorm\", max_value = 3, axis = [0, 1, 2] }").unwrap(),
            Constraint::MaxNorm {
                max_value: 3.0,
                axis: vec![0, 1, 2]
            }
        );
    }

    #[test]
    fn serializes_to_the_table_it_reads() {
        for (c, class, axis) in [
            (Constraint::NonNeg, "NonNeg", None),
            (
                Constraint::UnitNorm { axis: vec![-1] },
                "UnitNorm",
                Some(toml::Value::Integer(-1)),
            ),
            (
                Constraint::MaxNorm {
                    max_value: 1.5,
                    axis: vec![0, 1, 2],
                },
                "MaxNorm",
                Some(toml::Value::Array(vec![0.into(), 1.into(), 2.into()])),
            ),
        ] {
            let value = toml::Value::try_from(&c).unwrap();
            assert_eq!(value["class_name"].as_str(), Some(class));
            assert_eq!(value.get("axis"), axis.as_ref());
            assert_eq!(Constraint::from_toml(&value, "k").unwrap(), c);
            let via_serde: Constraint = value.try_into().unwrap();
            assert_eq!(via_serde, c);
        }
    }

    #[test]
    fn bad_values_name_the_key() {
        let key = "model.layers[1].kernel_constraint";
        for (text, field, words) in [
            ("\"max\"", "", "unknown name \"max\""),
            (
                "{ class_name = \"MaxNorm\", max_value = -1 }",
                ".max_value",
                "at least 0",
            ),
            (
                "{ class_name = \"MaxNorm\", axis = [0, 0] }",
                ".axis",
                "distinct",
            ),
            (
                "{ class_name = \"MaxNorm\", axis = 0.5 }",
                ".axis",
                "list of axes",
            ),
            (
                "{ class_name = \"UnitNorm\", axes = 1 }",
                ".axes",
                "allowed: axis",
            ),
            (
                "{ class_name = \"NonNeg\", axis = 1 }",
                ".axis",
                "takes no arguments",
            ),
            (
                "{ class_name = \"MinMaxNorm\", min_value = 2, max_value = 1 }",
                ".max_value",
                "at least min_value",
            ),
            (
                "{ class_name = \"MinMaxNorm\", rate = 1.5 }",
                ".rate",
                "between 0 and 1",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.starts_with(&format!("{key}{field}: ")), "{text}: {err}");
            assert!(err.contains(words), "{text}: {err}");
        }
        let c = parse("{ class_name = \"MaxNorm\", axis = [0, -3] }").unwrap();
        assert!(c.check_rank(4, key).is_ok());
        let err = c.check_rank(2, key).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{key}.axis: axis -3")), "{err}");
        let err = parse("{ class_name = \"UnitNorm\", axis = [1, -1] }")
            .unwrap()
            .check_rank(2, key)
            .unwrap_err();
        assert!(err.to_string().contains("repeats"), "{err}");
    }

    #[test]
    fn outputs_match_keras() {
        let reference = reference();
        let cases = reference["constraints"].as_array().unwrap();
        assert_eq!(cases.len(), 19);
        for case in cases {
            let config: toml::Value = serde_json::from_value(case["config"].clone()).unwrap();
            let c = Constraint::from_toml(&config, "c").unwrap();
            let rank = case["shape"].as_array().unwrap().len();
            c.check_rank(rank, "c").unwrap();
            let got = match rank {
                2 => c.apply(tensor::<2>(case)).into_data(),
                _ => c.apply(tensor::<4>(case)).into_data(),
            };
            let got = got.try_to_vec::<f32>().unwrap();
            let want: Vec<f64> = serde_json::from_value(case["output"].clone()).unwrap();
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let d = (f64::from(*g) - w).abs();
                assert!(
                    d <= 1e-6,
                    "{config} {:?}[{i}]: {g} vs Keras {w}",
                    case["shape"]
                );
            }
        }
    }
}
