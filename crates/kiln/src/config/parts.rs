//! `[parts.<name>]`: the extra networks of a custom train step (`compile.train_step`), each a
//! `[model]`-style table (`layers`, `outputs`) with its own `optimizer` (the forms and
//! clipping keys of `compile.optimizer`).
//!
//! ```toml
//! [parts.generator]
//! optimizer = { type = "adam", learning_rate = 0.0002, beta_1 = 0.5 }
//! layers = [
//!   { type = "Input", shape = [64] },
//!   { type = "Dense", units = 784, activation = "sigmoid" },
//!   { type = "Reshape", target_shape = [28, 28, 1] },
//! ]
//! ```

use crate::compile::{GradientOptions, OptimizerSpec};
use crate::error::{KilnError, Result};
use crate::model::ModelSpec;
use crate::precision::Precision;
use crate::step::custom::PartSpec;

/// The parts of `table` (`[parts]`), in name order, with the run's `precision`.
///
/// # Errors
/// [`KilnError::Config`] naming `parts.<name>.<key>`; parts without `compile.train_step`.
pub(super) fn read(
    table: &toml::Table,
    precision: Precision,
    train_step: Option<&str>,
) -> Result<Vec<PartSpec>> {
    if let (Some(name), None) = (table.keys().next(), train_step) {
        return Err(KilnError::config(
            format!("parts.{name}"),
            "parts are the extra networks of a custom train step; set compile.train_step \
             (docs/custom-train-step.md) or remove [parts]",
        ));
    }
    table
        .iter()
        .map(|(name, value)| part(name, value, precision))
        .collect()
}

/// Why `name` cannot name a part's files, if it cannot: ASCII letters, digits, `_` and `-`,
/// at most 64 characters.
fn bad_name(name: &str) -> Option<String> {
    if name.len() > 64 {
        return Some(format!("the name is {} characters long", name.len()));
    }
    name.chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
        .map(|c| format!("the name contains {c:?}"))
}

fn part(name: &str, value: &toml::Value, precision: Precision) -> Result<PartSpec> {
    let key = format!("parts.{name}");
    let Some(table) = value.as_table() else {
        return Err(KilnError::config(
            key,
            "expected a table with the part's optimizer and its list of layers",
        ));
    };
    if name.is_empty() {
        return Err(KilnError::config(
            key,
            "a part needs a name: [parts.<name>]",
        ));
    }
    if name == "main" {
        return Err(KilnError::config(
            key,
            "the name main is the compiled model ([model]); name the part otherwise",
        ));
    }
    if let Some(problem) = bad_name(name) {
        return Err(KilnError::config(
            key,
            format!(
                "{problem}: a part's name becomes part of file names in the run directory \
                 (part-<name>.safetensors); use ASCII letters, digits, underscores and hyphens, at most 64 characters"
            ),
        ));
    }
    if let Some(k) = table
        .keys()
        .find(|k| !["optimizer", "layers", "outputs"].contains(&k.as_str()))
    {
        return Err(KilnError::config(
            format!("{key}.{k}"),
            "unknown key; a part takes optimizer (with its learning rate and clipping keys), \
             layers and outputs",
        ));
    }
    let mut model = table.clone();
    let optimizer = model.remove("optimizer").ok_or_else(|| {
        KilnError::config(
            format!("{key}.optimizer"),
            "missing: each part has its own optimizer, e.g. optimizer = \"adam\"",
        )
    })?;
    let renamed = |e: KilnError, from: &str| match e {
        KilnError::Config {
            file,
            key: k,
            message,
        } => KilnError::Config {
            file,
            key: k.replacen(from, &key, 1),
            message,
        },
        other => other,
    };
    let spec = ModelSpec::from_toml(&model).map_err(|e| renamed(e, "model"))?;
    let optimizer_spec = OptimizerSpec::from_toml(&optimizer).map_err(|e| renamed(e, "compile"))?;
    let gradients = GradientOptions::from_toml(&optimizer).map_err(|e| renamed(e, "compile"))?;
    if gradients.gradient_accumulation_steps > 1 {
        return Err(KilnError::config(
            format!("{key}.optimizer.gradient_accumulation_steps"),
            "a part's updates are the step's to apply; accumulate inside the step",
        ));
    }
    Ok(PartSpec {
        name: name.to_string(),
        model: spec.with_precision(precision),
        optimizer: optimizer_spec,
        gradients,
    })
}

/// `parts` as the `[parts]` table, as [`read`] reads it back.
pub(super) fn write(parts: &[PartSpec]) -> toml::Table {
    let mut all = toml::Table::new();
    for p in parts {
        let mut t = p.model.to_toml();
        let optimizer = super::optimizer_toml(&p.optimizer, p.gradients);
        t.insert("optimizer".into(), optimizer);
        all.insert(p.name.clone(), toml::Value::Table(t));
    }
    all
}
