//! Where the study gets its oracle and pruner: the search space, algorithms and pruners of
//! [`crate::space`], [`crate::oracle`] and [`crate::pruner`].
//!
//! Stand-in until those land: a seeded random search over `Choice`, `Int` and `Float`
//! (linear) hyperparameters, without pruning.

use rand::{Rng, SeedableRng};

use crate::config::TuneConfig;
use crate::error::TuneError;
use crate::oracle::Oracle;
use crate::pruner::Pruner;
use crate::trial::{Decision, Params, TrialPlan, TrialRecord, Value};

/// The `[tuner]` keys the search reads.
pub const ORACLE_KEYS: &[&str] = &["algorithm", "seed", "pruner"];

/// A study's oracle and its pruner (if any).
pub type Search = (Box<dyn Oracle>, Option<Box<dyn Pruner>>);

/// The oracle and the pruner of a tune config.
///
/// # Errors
/// [`TuneError::Config`] for an invalid search space or search key.
pub fn build(cfg: &TuneConfig) -> Result<Search, TuneError> {
    let seed = cfg
        .tuner
        .get("seed")
        .and_then(toml::Value::as_integer)
        .unwrap_or(0) as u64;
    let space = cfg.hyperparameters.as_array().cloned().unwrap_or_default();
    Ok((
        Box::new(Random {
            seed,
            space,
            max_trials: cfg.settings.max_trials,
        }),
        None,
    ))
}

struct Random {
    seed: u64,
    space: Vec<toml::Value>,
    max_trials: u64,
}

impl Oracle for Random {
    fn next(&self, history: &[TrialRecord]) -> Decision {
        if history.len() as u64 >= self.max_trials {
            return Decision::Done;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(self.seed ^ (history.len() as u64 + 1));
        let mut params = Params::new();
        for hp in &self.space {
            let name = hp.get("name").and_then(|v| v.as_str()).unwrap_or_default();
            let f = |k: &str| {
                hp.get(k)
                    .and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64)))
            };
            let value = match hp.get("type").and_then(|v| v.as_str()) {
                Some("Choice") => {
                    let values = hp
                        .get("values")
                        .and_then(|v| v.as_array())
                        .cloned()
                        .unwrap_or_default();
                    match &values[rng
                        .random_range(0..values.len().max(1))
                        .min(values.len() - 1)]
                    {
                        toml::Value::Integer(i) => Value::Int(*i),
                        toml::Value::Float(x) => Value::Float(*x),
                        toml::Value::Boolean(b) => Value::Bool(*b),
                        other => Value::Str(other.as_str().unwrap_or_default().into()),
                    }
                }
                Some("Int") => Value::Int(rng.random_range(
                    f("min_value").unwrap_or(0.0) as i64..=f("max_value").unwrap_or(1.0) as i64,
                )),
                _ => Value::Float(
                    rng.random_range(f("min_value").unwrap_or(0.0)..=f("max_value").unwrap_or(1.0)),
                ),
            };
            params.insert(name.to_string(), value);
        }
        Decision::Run(TrialPlan {
            params,
            epochs: 0,
            resume_from: None,
            bracket: None,
        })
    }
}
