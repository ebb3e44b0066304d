//! The search space: Keras Tuner's hyperparameter kinds, read from the tune config's
//! `[[hyperparameters]]` tables.
//!
//! ```toml
//! [[hyperparameters]]
//! name = "learning_rate"
//! type = "Float"                            # Int | Float | Choice | Boolean | Fixed
//! min_value = 1e-4                          # Int, Float: min_value, max_value (inclusive)
//! max_value = 1e-2
//! sampling = "log"                          # linear (default) | log | reverse_log
//! key = "compile.optimizer.learning_rate"   # the run-config key it sets; default: name
//!
//! [[hyperparameters]]
//! name = "units2"
//! type = "Int"
//! min_value = 32
//! max_value = 256
//! step = 32                                 # log sampling: the step multiplies
//! parent_name = "layers"                    # active only when `layers` is 2 or 3
//! parent_values = [2, 3]
//! ```
//!
//! Choice: `values = [...]` (one type), `ordered`; Boolean: `default`; Fixed: `value`; every
//! kind: `default`, `parent_name`, `parent_values`. Semantics are Keras Tuner's
//! (`keras_tuner/engine/hyperparameters/`); see [`HyperParameter::from_prob`].

mod hyperparameter;
mod parse;

pub use hyperparameter::{Condition, HyperParameter, Kind, Sampling};

use rand::Rng;

use crate::error::TuneError;
use crate::trial::{Params, Value};

/// The most points [`SearchSpace::grid`] enumerates.
pub const MAX_GRID_POINTS: usize = 1_000_000;

/// Hyperparameters in definition order; parents come before their children.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchSpace {
    hps: Vec<HyperParameter>,
}

/// Whether two hyperparameters with these conditions are never active together: the same
/// parent and no parent value in common.
fn alternatives(a: Option<&Condition>, b: Option<&Condition>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            a.parent_name == b.parent_name
                && !a.parent_values.iter().any(|v| b.parent_values.contains(v))
        }
        _ => false,
    }
}

impl SearchSpace {
    /// Reads the tune config's `hyperparameters` array (`[[hyperparameters]]` tables).
    ///
    /// # Errors
    /// [`TuneError::Config`] naming `hyperparameters[i].<key>`: not an array, unknown type,
    /// sampling or key, `min_value > max_value`, log sampling with `min_value <= 0`, log step
    /// `<= 1`, a Choice mixing types or listing a value twice, a default outside the range,
    /// a duplicate name, a `parent_name` that is unknown or defined after its child, a
    /// `parent_values` entry the parent cannot take.
    pub fn from_toml(hps: &toml::Value) -> Result<SearchSpace, TuneError> {
        let items = hps.as_array().ok_or_else(|| {
            TuneError::Config(format!(
                "hyperparameters: expected an array of tables ([[hyperparameters]]), found {}",
                hps.type_str()
            ))
        })?;
        let mut out: Vec<HyperParameter> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let hp = parse::parse_one(i, item, &out)?;
            out.push(hp);
        }
        SearchSpace::new(out)
    }

    /// A space from already-built hyperparameters (parents must precede children).
    ///
    /// # Errors
    /// [`TuneError::Config`] on a duplicate name or a parent that is not earlier.
    pub fn new(hps: Vec<HyperParameter>) -> Result<SearchSpace, TuneError> {
        for (i, hp) in hps.iter().enumerate() {
            if hps[..i].iter().any(|h| h.name == hp.name) {
                return Err(TuneError::Config(format!(
                    "hyperparameters[{i}].name: duplicate name '{}'",
                    hp.name
                )));
            }
            if let Some(c) = &hp.condition
                && !hps[..i].iter().any(|h| h.name == c.parent_name)
            {
                return Err(TuneError::Config(format!(
                    "hyperparameters[{i}].parent_name: '{}' is not defined before '{}'",
                    c.parent_name, hp.name
                )));
            }
            if let Some(j) = hps[..i].iter().position(|h| {
                h.key == hp.key && !alternatives(h.condition.as_ref(), hp.condition.as_ref())
            }) {
                return Err(TuneError::Config(format!(
                    "hyperparameters[{j}] \"{}\" and hyperparameters[{i}] \"{}\" both set key \
                     \"{}\": only one value can be trained, so the recorded parameters would \
                     not be the trained ones; give each its own key, or make them conditional \
                     alternatives (the same parent_name with parent_values that do not overlap)",
                    hps[j].name, hp.name, hp.key
                )));
            }
        }
        Ok(SearchSpace { hps })
    }

    /// The hyperparameters, in definition order.
    pub fn hyperparameters(&self) -> &[HyperParameter] {
        &self.hps
    }

    /// The hyperparameter called `name`.
    pub fn get(&self, name: &str) -> Option<&HyperParameter> {
        self.hps.iter().find(|hp| hp.name == name)
    }

    /// Whether `hp` is active given the values of the hyperparameters before it: no condition,
    /// or its parent is in `params` (hence active) with a value in `parent_values` (Keras
    /// Tuner's `Parent.is_active`).
    pub fn is_active(&self, hp: &HyperParameter, params: &Params) -> bool {
        match &hp.condition {
            None => true,
            Some(c) => params
                .get(&c.parent_name)
                .is_some_and(|v| c.parent_values.contains(v)),
        }
    }

    /// The default point: every active hyperparameter at its default (the grid's first point).
    pub fn defaults(&self) -> Params {
        let mut params = Params::new();
        for hp in &self.hps {
            if self.is_active(hp, &params) {
                params.insert(hp.name.clone(), hp.default.clone());
            }
        }
        params
    }

    /// A random point: each active hyperparameter (in order) from one uniform draw, as
    /// Keras Tuner's `Oracle._random_values`; inactive ones are absent.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Params {
        let mut params = Params::new();
        for hp in &self.hps {
            if self.is_active(hp, &params) {
                let u: f64 = rng.random();
                params.insert(hp.name.clone(), hp.from_prob(u));
            }
        }
        params
    }

    /// Every point of a discrete space, in Keras Tuner's `GridSearchOracle` order: the first
    /// hyperparameter varies slowest, each one's default comes first, inactive conditional
    /// hyperparameters are absent (so a child's values multiply only its parent's activating
    /// values).
    ///
    /// # Errors
    /// [`TuneError::Config`] naming the first continuous hyperparameter (Float without
    /// `step`, or Int log/reverse_log without `step`) and asking for a `step`.
    pub fn grid(&self) -> Result<Vec<Params>, TuneError> {
        let mut lists = Vec::with_capacity(self.hps.len());
        let mut bound: f64 = 1.0;
        for (i, hp) in self.hps.iter().enumerate() {
            bound *= hp.n_values().map_or(1.0, |n| n as f64);
            if bound > MAX_GRID_POINTS as f64 * 4.0 {
                let n = hp.n_values().unwrap_or(0);
                return Err(TuneError::Config(format!(
                    "hyperparameters[{i}]: the grid grows past {MAX_GRID_POINTS} points at '{}' ({n} values); use a larger step, fewer values, or algorithm = \"random\"/\"bayesian\"",
                    hp.name
                )));
            }
            lists.push(hp.grid_values().ok_or_else(|| {
                TuneError::Config(format!(
                    "hyperparameters[{i}].step: '{}' is continuous, so algorithm = \"grid\" cannot enumerate it; give it a `step` (an increment, or a ratio > 1 with log sampling) or use another algorithm",
                    hp.name
                ))
            })?);
        }
        let mut out = Vec::new();
        self.grid_rec(0, &lists, &mut Params::new(), &mut out);
        if out.len() > MAX_GRID_POINTS {
            return Err(TuneError::Config(format!(
                "hyperparameters: the grid has {} points, more than {MAX_GRID_POINTS}; use larger steps or fewer values",
                out.len()
            )));
        }
        Ok(out)
    }

    fn grid_rec(&self, i: usize, lists: &[Vec<Value>], cur: &mut Params, out: &mut Vec<Params>) {
        if i == self.hps.len() {
            out.push(cur.clone());
            return;
        }
        let hp = &self.hps[i];
        if !self.is_active(hp, cur) {
            self.grid_rec(i + 1, lists, cur, out);
            return;
        }
        for v in &lists[i] {
            cur.insert(hp.name.clone(), v.clone());
            self.grid_rec(i + 1, lists, cur, out);
        }
        cur.remove(&hp.name);
    }

    /// Whether `params` is a point of this space: exactly the active hyperparameters, each
    /// with a value it can take.
    pub fn contains(&self, params: &Params) -> bool {
        let mut seen = Params::new();
        for hp in &self.hps {
            if self.is_active(hp, &seen) {
                match params.get(&hp.name) {
                    Some(v) if hp.contains(v) => {
                        seen.insert(hp.name.clone(), v.clone());
                    }
                    _ => return false,
                }
            }
        }
        seen.len() == params.len()
    }
}

#[cfg(test)]
mod tests;
