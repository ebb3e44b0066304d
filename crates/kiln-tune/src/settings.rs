//! Typed reads of `[tuner]` keys with errors that name the key and the fix.

use crate::error::TuneError;

/// An integer `table.key` (or `default` when absent) that must be `>= min`.
pub(crate) fn get_int(
    table: &toml::Table,
    prefix: &str,
    key: &str,
    default: i64,
    min: i64,
) -> Result<i64, TuneError> {
    match table.get(key) {
        None => Ok(default),
        Some(toml::Value::Integer(v)) if *v >= min => Ok(*v),
        Some(toml::Value::Integer(v)) => Err(TuneError::Config(format!(
            "{prefix}.{key} = {v}: must be >= {min}"
        ))),
        Some(other) => Err(TuneError::Config(format!(
            "{prefix}.{key}: expected an integer >= {min}, found {other}"
        ))),
    }
}

/// A boolean `table.key` (or `default`).
pub(crate) fn get_bool(
    table: &toml::Table,
    prefix: &str,
    key: &str,
    default: bool,
) -> Result<bool, TuneError> {
    match table.get(key) {
        None => Ok(default),
        Some(toml::Value::Boolean(b)) => Ok(*b),
        Some(other) => Err(TuneError::Config(format!(
            "{prefix}.{key}: expected true or false, found {other}"
        ))),
    }
}

/// Rejects keys of `table` that belong to other algorithms: `only` lists (key, owner).
pub(crate) fn reject_foreign(
    table: &toml::Table,
    prefix: &str,
    chosen: &str,
    only: &[(&str, &str)],
) -> Result<(), TuneError> {
    for (key, owner) in only {
        if table.contains_key(*key) && !owner.split('|').any(|o| o == chosen) {
            return Err(TuneError::Config(format!(
                "{prefix}.{key}: applies to {} only, but the {prefix} uses \"{chosen}\"; remove it or change the algorithm",
                owner.replace('|', " and ")
            )));
        }
    }
    Ok(())
}
