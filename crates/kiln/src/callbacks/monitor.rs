//! The monitored-quantity logic `EarlyStopping` and `ReduceLROnPlateau` share: Keras'
//! `MonitorCallback` (`keras/src/callbacks/monitor_callback.py`).

use serde::{Deserialize, Serialize};

use crate::error::{KilnError, Result};

/// Whether the monitored quantity should go down or up (Keras' `mode`; TOML: `"auto"`,
/// `"min"`, `"max"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Inferred from the name ([`Mode::resolve`]).
    #[default]
    Auto,
    /// Lower is better (losses, errors).
    Min,
    /// Higher is better (accuracies).
    Max,
}

/// Metric names (without `val_`) that Keras 3 marks as improving upwards
/// (`_direction = "up"` in `keras/src/metrics`).
const UP: &[&str] = &[
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
    "fbeta_score",
    "r2_score",
    "cosine_similarity",
    "iou",
    "mean_iou",
    "mean_io_u",
];

/// Metric names that Keras 3 marks as improving downwards.
const DOWN: &[&str] = &[
    "loss",
    "mean_squared_error",
    "mse",
    "mean_absolute_error",
    "mae",
    "mean_absolute_percentage_error",
    "mape",
    "mean_squared_logarithmic_error",
    "msle",
    "root_mean_squared_error",
    "binary_crossentropy",
    "categorical_crossentropy",
    "sparse_categorical_crossentropy",
    "kl_divergence",
    "poisson",
    "hinge",
    "squared_hinge",
    "categorical_hinge",
    "log_cosh",
];

impl Mode {
    /// Parses Keras' spelling: `"auto"`, `"min"`, `"max"`.
    ///
    /// # Errors
    /// [`KilnError::Config`] for other strings. (Keras warns and falls back to `"auto"`; kiln
    /// refuses, so a typo does not silently change what is monitored.)
    pub fn parse(s: &str) -> Result<Mode> {
        match s {
            "auto" => Ok(Mode::Auto),
            "min" => Ok(Mode::Min),
            "max" => Ok(Mode::Max),
            other => Err(KilnError::config(
                "mode",
                format!("unknown mode \"{other}\"; use \"auto\", \"min\" or \"max\""),
            )),
        }
    }

    /// `Min` or `Max` for `monitor`. `Auto` strips `val_` and looks the name up: `loss` (and
    /// names ending in `_loss`) and Keras' error metrics go down, accuracies and Keras' other
    /// "up" metrics go up — what Keras 3 reads from the compiled metrics' `_direction`.
    ///
    /// # Errors
    /// [`KilnError::Callback`] naming `callback` when the direction of `monitor` is unknown
    /// (Keras raises `ValueError` too), asking for `mode = "min"` or `"max"`.
    pub fn resolve(self, monitor: &str, callback: &str) -> Result<Mode> {
        if self != Mode::Auto {
            return Ok(self);
        }
        let name = monitor.strip_prefix("val_").unwrap_or(monitor);
        if DOWN.contains(&name) || name.ends_with("_loss") {
            Ok(Mode::Min)
        } else if UP.contains(&name) || name.ends_with("_accuracy") {
            Ok(Mode::Max)
        } else {
            Err(KilnError::Callback {
                callback: callback.to_string(),
                message: format!(
                    "cannot tell whether monitor \"{monitor}\" should be maximized or \
                     minimized; set mode = \"max\" to keep the highest value or mode = \"min\" \
                     to keep the lowest"
                ),
            })
        }
    }
}

/// Keras' improvement test: with `min_delta = |min_delta|` negated in `Min` mode,
/// `current` improves on `reference` iff `current - min_delta < reference` (`Min`) or
/// `current - min_delta > reference` (`Max`); anything improves on no reference. A NaN
/// never improves (every comparison with NaN is false, as in Keras).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Monitor {
    /// `Min` or `Max`.
    pub mode: Mode,
    /// The signed delta: `-|min_delta|` in `Min` mode, `|min_delta|` in `Max` mode.
    pub min_delta: f64,
}

impl Monitor {
    /// The test for a resolved `mode` (`Min` or `Max`; `Auto` is treated as `Min`).
    pub fn new(mode: Mode, min_delta: f64) -> Monitor {
        let d = min_delta.abs();
        Monitor {
            mode,
            min_delta: if mode == Mode::Max { d } else { -d },
        }
    }

    /// Whether `current` improves on `reference`.
    pub fn is_improvement(&self, current: f64, reference: Option<f64>) -> bool {
        let Some(reference) = reference else {
            return true;
        };
        match self.mode {
            Mode::Max => current - self.min_delta > reference,
            _ => current - self.min_delta < reference,
        }
    }
}

/// Prints `warning: <message> Available metrics are: <keys of logs>` once (`*warned` keeps
/// track), as Keras' callbacks warn when their monitored value is missing from the logs
/// (`warnings.warn`, shown once per place): a mistyped `monitor` must not go unnoticed.
pub fn warn_missing_once(warned: &mut bool, message: &str, logs: &crate::logs::Logs) {
    if *warned {
        return;
    }
    *warned = true;
    let keys: Vec<&str> = logs.0.iter().map(|(k, _)| k.as_str()).collect();
    eprintln!(
        "warning: {message} Available metrics are: {}.",
        keys.join(", ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_mode_follows_keras_directions() {
        let r = |m: &str| Mode::Auto.resolve(m, "EarlyStopping").unwrap();
        assert_eq!(r("val_loss"), Mode::Min);
        assert_eq!(r("loss"), Mode::Min);
        assert_eq!(r("val_accuracy"), Mode::Max);
        assert_eq!(r("sparse_categorical_accuracy"), Mode::Max);
        assert_eq!(r("val_mae"), Mode::Min);
        assert_eq!(Mode::Max.resolve("whatever", "x").unwrap(), Mode::Max);
        let err = Mode::Auto
            .resolve("val_custom", "EarlyStopping")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("EarlyStopping: cannot tell") && err.contains("mode = \"max\""),
            "{err}"
        );
        assert!(Mode::parse("maximum").is_err());
        assert_eq!(Mode::parse("max").unwrap(), Mode::Max);
    }

    #[test]
    fn min_delta_is_signed_by_mode() {
        let min = Monitor::new(Mode::Min, 0.1);
        assert!(min.is_improvement(5.0, None));
        assert!(min.is_improvement(0.85, Some(1.0))); // 0.85 + 0.1 < 1
        assert!(!min.is_improvement(0.95, Some(1.0))); // 0.95 + 0.1 >= 1
        let max = Monitor::new(Mode::Max, -0.1); // the sign given does not matter
        assert!(max.is_improvement(1.15, Some(1.0)));
        assert!(!max.is_improvement(1.05, Some(1.0)));
        assert!(!min.is_improvement(f64::NAN, Some(1.0)));
        assert!(!max.is_improvement(f64::NAN, Some(1.0)));
    }
}
