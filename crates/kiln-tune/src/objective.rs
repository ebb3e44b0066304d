//! The study's objective: read from `[tuner] objective`, its direction inferred from the name
//! as Keras Tuner infers it, and its value read from a trial's `history.json`.

use std::path::Path;

use crate::error::TuneError;
use crate::trial::{Direction, Objective};

/// Metric names (without `val_`) that are maximised; from Keras Tuner's
/// `keras_tuner/src/engine/metrics_tracking.py` (`infer_metric_direction`) and the Keras metrics
/// kiln logs.
const MAXIMISED: &[&str] = &[
    "accuracy",
    "acc",
    "binary_accuracy",
    "categorical_accuracy",
    "sparse_categorical_accuracy",
    "top_k_categorical_accuracy",
    "sparse_top_k_categorical_accuracy",
    "auc",
    "precision",
    "recall",
    "f1_score",
    "r2_score",
];

/// Metric names (without `val_`) that are minimised besides every name containing `loss`.
const MINIMISED: &[&str] = &[
    "mae",
    "mse",
    "mape",
    "msle",
    "mean_absolute_error",
    "mean_squared_error",
    "mean_absolute_percentage_error",
    "mean_squared_logarithmic_error",
    "root_mean_squared_error",
    "binary_crossentropy",
    "categorical_crossentropy",
    "sparse_categorical_crossentropy",
    "hinge",
    "squared_hinge",
];

/// The direction Keras Tuner infers for a metric name: `*loss*` and error metrics are
/// minimised, accuracy-like metrics maximised, others unknown (`None`). A `val_` prefix is
/// ignored.
pub fn infer_direction(name: &str) -> Option<Direction> {
    let base = name.strip_prefix("val_").unwrap_or(name);
    if base.contains("loss") || MINIMISED.contains(&base) {
        Some(Direction::Min)
    } else if MAXIMISED.contains(&base) {
        Some(Direction::Max)
    } else {
        None
    }
}

/// Reads `[tuner] objective`: a metric name (`"val_accuracy"`, direction inferred) or a table
/// `{ name = "val_loss", direction = "min" }`.
///
/// # Errors
/// [`TuneError::Config`] naming `file` when the value has another form, the direction is not
/// `"min"`/`"max"`, or it cannot be inferred from the name.
pub fn parse(value: &toml::Value, file: &Path) -> Result<Objective, TuneError> {
    let err = |m: String| TuneError::Config(format!("{}: [tuner] objective: {m}", file.display()));
    let (name, direction) = match value {
        toml::Value::String(s) => (s.clone(), None),
        toml::Value::Table(t) => {
            if let Some(k) = t
                .keys()
                .find(|k| !["name", "direction"].contains(&k.as_str()))
            {
                return Err(err(format!(
                    "unknown key \"{k}\"; the table takes name and direction"
                )));
            }
            let name = t
                .get("name")
                .and_then(toml::Value::as_str)
                .ok_or_else(|| err("the table needs a name = \"<metric>\"".into()))?;
            let direction = match t.get("direction") {
                None => None,
                Some(toml::Value::String(d)) if d == "min" => Some(Direction::Min),
                Some(toml::Value::String(d)) if d == "max" => Some(Direction::Max),
                Some(other) => {
                    return Err(err(format!("direction {other} is not \"min\" or \"max\"")));
                }
            };
            (name.to_string(), direction)
        }
        other => {
            return Err(err(format!(
                "{other} is not a metric name; write objective = \"val_accuracy\" or \
                 objective = {{ name = \"val_loss\", direction = \"min\" }}"
            )));
        }
    };
    if name.trim().is_empty() {
        return Err(err("the metric name is empty".into()));
    }
    let direction = match direction.or_else(|| infer_direction(&name)) {
        Some(d) => d,
        None => {
            return Err(err(format!(
                "cannot tell whether \"{name}\" is minimised or maximised; write \
                 objective = {{ name = \"{name}\", direction = \"max\" }} (or \"min\")"
            )));
        }
    };
    Ok(Objective { name, direction })
}

/// The best value of the objective over the epochs of a `history.json` written by
/// `kiln train` (`{"epoch": [...], "history": {"val_accuracy": [...], ...}}`), in the
/// objective's direction: Keras Tuner scores a trial by its best epoch
/// (`keras_tuner/src/engine/tuner_utils.py`, `convert_to_metrics_dict`). NaN epochs are
/// skipped.
///
/// # Errors
/// [`TuneError::Io`] when the file cannot be read or parsed; [`TuneError::Config`] when the
/// metric is not in it (listing the metrics that are, and saying to log it: validation data
/// for `val_*`).
pub fn best_value(history: &Path, objective: &Objective) -> Result<Option<f64>, TuneError> {
    let text = std::fs::read_to_string(history).map_err(|e| TuneError::io("read", history, e))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| TuneError::io("parse", history, e))?;
    let metrics = json.get("history").and_then(|h| h.as_object());
    let Some(values) = metrics.and_then(|m| m.get(&objective.name)) else {
        let have: Vec<String> = metrics
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let hint = if objective.name.starts_with("val_") {
            " (val_* metrics need validation data: fit.validation_split or [data.validation])"
        } else {
            ""
        };
        return Err(TuneError::Config(format!(
            "the objective \"{}\" is not in {} (it has: {}){hint}; set [tuner] objective to one \
             of those",
            objective.name,
            history.display(),
            have.join(", ")
        )));
    };
    let mut best: Option<f64> = None;
    for v in values.as_array().into_iter().flatten() {
        let Some(v) = v.as_f64().filter(|v| v.is_finite()) else {
            continue;
        };
        if best.is_none_or(|b| objective.direction.better(v, b)) {
            best = Some(v);
        }
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_are_inferred_like_keras_tuner() {
        assert_eq!(infer_direction("val_accuracy"), Some(Direction::Max));
        assert_eq!(infer_direction("accuracy"), Some(Direction::Max));
        assert_eq!(infer_direction("val_loss"), Some(Direction::Min));
        assert_eq!(infer_direction("my_custom_loss"), Some(Direction::Min));
        assert_eq!(infer_direction("val_mae"), Some(Direction::Min));
        assert_eq!(infer_direction("val_score"), None);
    }

    #[test]
    fn objective_forms() {
        let f = Path::new("t.toml");
        let o = parse(&"val_accuracy".into(), f).unwrap();
        assert_eq!(o.direction, Direction::Max);
        let t: toml::Value =
            toml::from_str::<toml::Table>("o = { name = \"val_score\", direction = \"min\" }")
                .unwrap()["o"]
                .clone();
        let o = parse(&t, f).unwrap();
        assert_eq!(
            (o.name.as_str(), o.direction),
            ("val_score", Direction::Min)
        );
        let err = parse(&"val_score".into(), f).unwrap_err().to_string();
        assert!(err.contains("direction = \"max\""), "{err}");
        assert!(err.starts_with("t.toml: [tuner] objective"), "{err}");
        let err = parse(&toml::Value::Integer(3), f).unwrap_err().to_string();
        assert!(err.contains("not a metric name"), "{err}");
    }

    #[test]
    fn best_epoch_in_the_objectives_direction() {
        let dir = tempfile::tempdir().unwrap();
        let h = dir.path().join("history.json");
        std::fs::write(
            &h,
            r#"{"epoch":[0,1,2],"history":{"val_loss":[0.9,0.4,0.6],"val_accuracy":[0.5,0.8,0.7]}}"#,
        )
        .unwrap();
        let max = Objective {
            name: "val_accuracy".into(),
            direction: Direction::Max,
        };
        assert_eq!(best_value(&h, &max).unwrap(), Some(0.8));
        let min = Objective {
            name: "val_loss".into(),
            direction: Direction::Min,
        };
        assert_eq!(best_value(&h, &min).unwrap(), Some(0.4));
        let missing = Objective {
            name: "val_auc".into(),
            direction: Direction::Max,
        };
        let err = best_value(&h, &missing).unwrap_err().to_string();
        assert!(err.contains("it has: val_accuracy, val_loss"), "{err}");
    }
}
