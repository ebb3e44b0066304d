//! Reading `[[hyperparameters]]` tables, with Keras Tuner's argument names and checks
//! (`numerical.py::_check_sampling_arg`, `choice_hp.py`, `conditions.py::Parent`).

use std::collections::BTreeSet;

use super::hyperparameter::{Condition, HyperParameter, Kind, Sampling};
use crate::error::TuneError;
use crate::trial::Value;

const COMMON_KEYS: &[&str] = &[
    "name",
    "type",
    "key",
    "default",
    "parent_name",
    "parent_values",
];
const NUMERICAL_KEYS: &[&str] = &["min_value", "max_value", "step", "sampling"];

/// Builds the error `hyperparameters[i].field: what; fix`.
fn err(i: usize, field: &str, what: impl std::fmt::Display) -> TuneError {
    TuneError::Config(format!("hyperparameters[{i}].{field}: {what}"))
}

/// A TOML scalar as a [`Value`]; `None` for tables, arrays and datetimes.
pub(crate) fn value_from_toml(v: &toml::Value) -> Option<Value> {
    match v {
        toml::Value::Boolean(b) => Some(Value::Bool(*b)),
        toml::Value::Integer(i) => Some(Value::Int(*i)),
        toml::Value::Float(f) => Some(Value::Float(*f)),
        toml::Value::String(s) => Some(Value::Str(s.clone())),
        _ => None,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "boolean",
        Value::Int(_) => "integer",
        Value::Float(_) => "float",
        Value::Str(_) => "string",
    }
}

/// One `[[hyperparameters]]` table as read so far (for parent lookups).
pub(crate) fn parse_one(
    i: usize,
    item: &toml::Value,
    earlier: &[HyperParameter],
) -> Result<HyperParameter, TuneError> {
    let table = item.as_table().ok_or_else(|| {
        TuneError::Config(format!(
            "hyperparameters[{i}]: expected a table ([[hyperparameters]] with name, type, ...), \
             found {}",
            item.type_str()
        ))
    })?;
    let name = match table.get("name") {
        Some(toml::Value::String(s)) if !s.is_empty() => s.clone(),
        Some(other) => {
            return Err(err(
                i,
                "name",
                format!("expected a non-empty string, found {other}"),
            ));
        }
        None => {
            return Err(err(
                i,
                "name",
                "missing; give each hyperparameter a unique name",
            ));
        }
    };
    if earlier.iter().any(|hp| hp.name == name) {
        return Err(err(
            i,
            "name",
            format!(
                "duplicate name '{name}'; names must be unique (use `key` to set the same run-config key from two conditional hyperparameters)"
            ),
        ));
    }
    let ty = match table.get("type") {
        Some(toml::Value::String(s)) => s.clone(),
        Some(other) => return Err(err(i, "type", format!("expected a string, found {other}"))),
        None => {
            return Err(err(
                i,
                "type",
                "missing; one of Int, Float, Choice, Boolean, Fixed",
            ));
        }
    };
    let allowed: Vec<&str> = match ty.as_str() {
        "Int" | "Float" => COMMON_KEYS.iter().chain(NUMERICAL_KEYS).copied().collect(),
        "Choice" => COMMON_KEYS
            .iter()
            .copied()
            .chain(["values", "ordered"])
            .collect(),
        "Boolean" => COMMON_KEYS.to_vec(),
        "Fixed" => COMMON_KEYS
            .iter()
            .copied()
            .filter(|k| *k != "default")
            .chain(["value"])
            .collect(),
        other => {
            return Err(err(
                i,
                "type",
                format!(
                    "unknown type '{other}'; one of Int, Float, Choice, Boolean, Fixed (Keras Tuner's names, case-sensitive)"
                ),
            ));
        }
    };
    for k in table.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(err(
                i,
                k,
                format!(
                    "unknown key for type {ty} (hyperparameter '{name}'); allowed: {}",
                    allowed.join(", ")
                ),
            ));
        }
    }
    let key = match table.get("key") {
        Some(toml::Value::String(s)) if !s.is_empty() => s.clone(),
        Some(other) => {
            return Err(err(
                i,
                "key",
                format!(
                    "expected a dotted run-config key such as \"compile.optimizer.learning_rate\", found {other}"
                ),
            ));
        }
        None => name.clone(),
    };
    let default = table
        .get("default")
        .map(|v| {
            value_from_toml(v).ok_or_else(|| {
                err(
                    i,
                    "default",
                    format!(
                        "expected a number, string or boolean, found {}",
                        v.type_str()
                    ),
                )
            })
        })
        .transpose()?;

    let (kind, default) = match ty.as_str() {
        "Int" => parse_int(i, table, default)?,
        "Float" => parse_float(i, table, default)?,
        "Choice" => parse_choice(i, table, default)?,
        "Boolean" => match default {
            None => (Kind::Boolean, Value::Bool(false)),
            Some(Value::Bool(b)) => (Kind::Boolean, Value::Bool(b)),
            Some(other) => {
                return Err(err(
                    i,
                    "default",
                    format!("expected true or false, found {}", type_name(&other)),
                ));
            }
        },
        _ => {
            let value = table
                .get("value")
                .ok_or_else(|| err(i, "value", "missing; a Fixed hyperparameter needs `value`"))?;
            let value = value_from_toml(value).ok_or_else(|| {
                err(
                    i,
                    "value",
                    format!(
                        "expected a number, string or boolean, found {}",
                        value.type_str()
                    ),
                )
            })?;
            (
                Kind::Fixed {
                    value: value.clone(),
                },
                value,
            )
        }
    };
    let condition = parse_condition(i, table, earlier)?;
    Ok(HyperParameter {
        name,
        key,
        kind,
        default,
        condition,
    })
}

fn parse_sampling(i: usize, table: &toml::Table) -> Result<Sampling, TuneError> {
    match table.get("sampling") {
        None => Ok(Sampling::Linear),
        Some(toml::Value::String(s)) => match s.to_lowercase().as_str() {
            "linear" => Ok(Sampling::Linear),
            "log" => Ok(Sampling::Log),
            "reverse_log" => Ok(Sampling::ReverseLog),
            other => Err(err(
                i,
                "sampling",
                format!("unknown sampling '{other}'; one of \"linear\", \"log\", \"reverse_log\""),
            )),
        },
        Some(other) => Err(err(
            i,
            "sampling",
            format!("expected a string, found {other}"),
        )),
    }
}

fn get_f64(i: usize, table: &toml::Table, field: &str) -> Result<Option<f64>, TuneError> {
    match table.get(field) {
        None => Ok(None),
        Some(toml::Value::Integer(v)) => Ok(Some(*v as f64)),
        Some(toml::Value::Float(v)) if v.is_finite() => Ok(Some(*v)),
        Some(other) => Err(err(
            i,
            field,
            format!("expected a finite number, found {other}"),
        )),
    }
}

fn get_i64(i: usize, table: &toml::Table, field: &str) -> Result<Option<i64>, TuneError> {
    match table.get(field) {
        None => Ok(None),
        Some(toml::Value::Integer(v)) => Ok(Some(*v)),
        // Keras Tuner's `_check_int` accepts 2.0 for 2.
        Some(toml::Value::Float(v)) if v.fract() == 0.0 && v.abs() < 9.0e15 => Ok(Some(*v as i64)),
        Some(other) => Err(err(
            i,
            field,
            format!("expected an integer for an Int hyperparameter, found {other}"),
        )),
    }
}

/// Keras Tuner's `Numerical._check_sampling_arg`, plus `step > 0` for linear sampling.
fn check_numerical(
    i: usize,
    min: f64,
    max: f64,
    step: Option<f64>,
    sampling: Sampling,
) -> Result<(), TuneError> {
    if min > max {
        return Err(err(
            i,
            "min_value",
            format!("min_value {min} is greater than max_value {max}; swap them"),
        ));
    }
    if sampling != Sampling::Linear && min <= 0.0 {
        return Err(err(
            i,
            "min_value",
            format!(
                "sampling = \"{}\" needs min_value > 0, found {min}; raise min_value or use sampling = \"linear\"",
                sampling.name()
            ),
        ));
    }
    match (step, sampling) {
        (Some(s), Sampling::Linear) if s <= 0.0 => Err(err(
            i,
            "step",
            format!("step must be > 0 with linear sampling, found {s}"),
        )),
        (Some(s), Sampling::Log | Sampling::ReverseLog) if s <= 1.0 => Err(err(
            i,
            "step",
            format!(
                "with sampling = \"{}\" the step multiplies and must be > 1 (e.g. 2 or 10), found {s}",
                sampling.name()
            ),
        )),
        _ => Ok(()),
    }
}

fn require(i: usize, v: Option<f64>, field: &str) -> Result<f64, TuneError> {
    v.ok_or_else(|| {
        err(
            i,
            field,
            "missing; Int and Float need min_value and max_value",
        )
    })
}

fn parse_int(
    i: usize,
    table: &toml::Table,
    default: Option<Value>,
) -> Result<(Kind, Value), TuneError> {
    let min = get_i64(i, table, "min_value")?.ok_or_else(|| {
        err(
            i,
            "min_value",
            "missing; Int and Float need min_value and max_value",
        )
    })?;
    let max = get_i64(i, table, "max_value")?.ok_or_else(|| {
        err(
            i,
            "max_value",
            "missing; Int and Float need min_value and max_value",
        )
    })?;
    let step = get_i64(i, table, "step")?;
    let sampling = parse_sampling(i, table)?;
    check_numerical(i, min as f64, max as f64, step.map(|s| s as f64), sampling)?;
    // Keras Tuner: linear sampling without step means step 1.
    let step = step.or((sampling == Sampling::Linear).then_some(1));
    let kind = Kind::Int {
        min,
        max,
        step,
        sampling,
    };
    let default = match default {
        None => Value::Int(min),
        Some(Value::Int(d)) if (min..=max).contains(&d) => Value::Int(d),
        Some(other) => {
            return Err(err(
                i,
                "default",
                format!("expected an integer within [{min}, {max}], found {other}"),
            ));
        }
    };
    Ok((kind, default))
}

fn parse_float(
    i: usize,
    table: &toml::Table,
    default: Option<Value>,
) -> Result<(Kind, Value), TuneError> {
    let min = require(i, get_f64(i, table, "min_value")?, "min_value")?;
    let max = require(i, get_f64(i, table, "max_value")?, "max_value")?;
    let step = get_f64(i, table, "step")?;
    let sampling = parse_sampling(i, table)?;
    check_numerical(i, min, max, step, sampling)?;
    let default = match default {
        None => Value::Float(min),
        Some(Value::Float(d)) if d >= min && d <= max => Value::Float(d),
        Some(Value::Int(d)) if (d as f64) >= min && (d as f64) <= max => Value::Float(d as f64),
        Some(other) => {
            return Err(err(
                i,
                "default",
                format!("expected a number within [{min}, {max}], found {other}"),
            ));
        }
    };
    Ok((
        Kind::Float {
            min,
            max,
            step,
            sampling,
        },
        default,
    ))
}

fn parse_choice(
    i: usize,
    table: &toml::Table,
    default: Option<Value>,
) -> Result<(Kind, Value), TuneError> {
    let arr = match table.get("values") {
        Some(toml::Value::Array(a)) if !a.is_empty() => a,
        Some(toml::Value::Array(_)) => {
            return Err(err(i, "values", "empty; a Choice needs at least one value"));
        }
        Some(other) => {
            return Err(err(
                i,
                "values",
                format!("expected an array, found {other}"),
            ));
        }
        None => return Err(err(i, "values", "missing; a Choice needs `values = [...]`")),
    };
    let mut values = Vec::with_capacity(arr.len());
    for (j, v) in arr.iter().enumerate() {
        let v = value_from_toml(v).ok_or_else(|| {
            err(
                i,
                &format!("values[{j}]"),
                format!(
                    "expected a number, string or boolean, found {}",
                    v.type_str()
                ),
            )
        })?;
        if let Some(first) = values.first()
            && type_name(first) != type_name(&v)
        {
            return Err(err(
                i,
                &format!("values[{j}]"),
                format!(
                    "a Choice holds one type of value: values[0] is {}, values[{j}] is {} (write 1.0 rather than 1 for floats)",
                    type_name(first),
                    type_name(&v)
                ),
            ));
        }
        if values.contains(&v) {
            return Err(err(
                i,
                &format!("values[{j}]"),
                format!("duplicate value {v}; list each choice once"),
            ));
        }
        values.push(v);
    }
    let numeric = matches!(values[0], Value::Int(_) | Value::Float(_));
    let ordered = match table.get("ordered") {
        None => numeric,
        Some(toml::Value::Boolean(true)) if !numeric => {
            return Err(err(
                i,
                "ordered",
                "must be false for string and boolean choices",
            ));
        }
        Some(toml::Value::Boolean(b)) => *b,
        Some(other) => {
            return Err(err(
                i,
                "ordered",
                format!("expected true or false, found {other}"),
            ));
        }
    };
    let default = match default {
        None => values[0].clone(),
        Some(d) if values.contains(&d) => d,
        Some(d) => {
            return Err(err(
                i,
                "default",
                format!(
                    "{d} is not one of the values [{}]",
                    values
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    };
    Ok((Kind::Choice { values, ordered }, default))
}

fn parse_condition(
    i: usize,
    table: &toml::Table,
    earlier: &[HyperParameter],
) -> Result<Option<Condition>, TuneError> {
    let parent_name = match table.get("parent_name") {
        None => {
            if table.contains_key("parent_values") {
                return Err(err(
                    i,
                    "parent_values",
                    "given without parent_name; name the parent hyperparameter",
                ));
            }
            return Ok(None);
        }
        Some(toml::Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(err(
                i,
                "parent_name",
                format!("expected a string, found {other}"),
            ));
        }
    };
    let parent = earlier.iter().find(|hp| hp.name == parent_name).ok_or_else(|| {
        err(
            i,
            "parent_name",
            format!("no hyperparameter named '{parent_name}' before this one; define the parent earlier in [[hyperparameters]]"),
        )
    })?;
    let raw: Vec<&toml::Value> = match table.get("parent_values") {
        None => {
            return Err(err(
                i,
                "parent_values",
                "missing; list the parent values that activate this hyperparameter",
            ));
        }
        Some(toml::Value::Array(a)) if a.is_empty() => {
            return Err(err(
                i,
                "parent_values",
                "empty; list at least one parent value",
            ));
        }
        Some(toml::Value::Array(a)) => a.iter().collect(),
        // Keras Tuner's `utils.to_list`: a scalar is a one-element list.
        Some(v) => vec![v],
    };
    let mut parent_values = Vec::with_capacity(raw.len());
    for (j, v) in raw.into_iter().enumerate() {
        let field = format!("parent_values[{j}]");
        let mut value = value_from_toml(v).ok_or_else(|| {
            err(
                i,
                &field,
                format!(
                    "expected a number, string or boolean, found {}",
                    v.type_str()
                ),
            )
        })?;
        if let (Value::Int(x), Value::Float(_)) = (&value, &parent.default) {
            value = Value::Float(*x as f64);
        }
        if type_name(&value) != type_name(&parent.default) {
            return Err(err(
                i,
                &field,
                format!(
                    "{value} is a {} but parent '{parent_name}' takes {} values",
                    type_name(&value),
                    type_name(&parent.default)
                ),
            ));
        }
        if !parent.contains(&value) {
            return Err(err(
                i,
                &field,
                format!(
                    "{value} is not a value parent '{parent_name}' can take, so this hyperparameter would never be active"
                ),
            ));
        }
        parent_values.push(value);
    }
    let unique: BTreeSet<String> = parent_values.iter().map(|v| format!("{v:?}")).collect();
    if unique.len() != parent_values.len() {
        return Err(err(
            i,
            "parent_values",
            "lists a value twice; list each once",
        ));
    }
    Ok(Some(Condition {
        parent_name,
        parent_values,
    }))
}
