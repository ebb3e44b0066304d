//! `bayesian`: the Tree-structured Parzen Estimator as Optuna's `TPESampler` with Optuna 4.x
//! defaults (`optuna/samplers/_tpe/sampler.py`, v4.9.0): univariate (`multivariate=False`),
//! `n_startup_trials = 10`, `n_ei_candidates = 24`, `gamma(n) = min(⌈0.1·n⌉, 25)`,
//! `default_weights`, `prior_weight = 1`, `consider_endpoints = False`,
//! `consider_magic_clip = True`, `constant_liar = False`.

mod parzen;
mod truncnorm;

use parzen::{Domain, Parzen};
use rand::Rng;

use super::{Oracle, random_unique, trial_rng, wait_or_done};
use crate::space::{HyperParameter, Kind, Sampling, SearchSpace};
use crate::trial::{Decision, Direction, Params, TrialPlan, TrialRecord, TrialState, Value};

/// TPE's settings (Optuna's names and defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TpeSettings {
    /// Random trials (Keras Tuner sampling) before TPE starts: TPE runs once this many trials
    /// are complete or pruned. Optuna: 10.
    pub n_startup_trials: usize,
    /// Candidates drawn from the good trials' estimator per parameter; the one with the
    /// highest `ln l(x) − ln g(x)` wins. Optuna: 24.
    pub n_ei_candidates: usize,
    /// Optuna's `constant_liar`: running trials join the bad group (`g`), so concurrent
    /// workers spread out. Default false (Optuna 4.x): running trials are skipped.
    pub constant_liar: bool,
}

impl Default for TpeSettings {
    fn default() -> TpeSettings {
        TpeSettings {
            n_startup_trials: 10,
            n_ei_candidates: 24,
            constant_liar: false,
        }
    }
}

/// The TPE oracle.
///
/// Decision for `history`: while fewer than `n_startup_trials` trials are complete or pruned,
/// a random point as [`super::RandomOracle`]; then each active hyperparameter in order is
/// drawn independently: complete trials sorted by value (the objective's direction) and then
/// pruned trials (by last epoch reached, then last value) give the `gamma(n)` best ("below",
/// density `l`) and the rest ("above", `g`), `n` = complete + pruned trials; only trials
/// where the parameter is active contribute a kernel. Failed trials (and complete ones
/// without a finite value) are ignored; running ones too unless `constant_liar`.
///
/// Optuna's distributions for Keras Tuner's kinds: Float linear/log → `FloatDistribution`
/// (log); Float reverse_log → log kernels over `max + min − x`; Int log/reverse_log without
/// step → `IntDistribution(log=True)` (mirrored for reverse_log); every stepped kind (Int
/// linear, whose default step is 1, and any `step`) → an index `0..n` with step 1 (for linear
/// steps this is Optuna's `step` distribution up to an affine map; for log steps it is
/// log-uniform in the value); Choice and Boolean → `CategoricalDistribution`; Fixed → its
/// value. Randomness: stream `history.len()` of `seed`.
#[derive(Clone, Debug)]
pub struct TpeOracle {
    space: SearchSpace,
    direction: Direction,
    seed: u64,
    settings: TpeSettings,
}

/// Optuna's `default_gamma`: `min(⌈0.1·n⌉, 25)`.
pub fn default_gamma(n: usize) -> usize {
    n.div_ceil(10).min(25)
}

impl TpeOracle {
    /// A TPE oracle over `space`, optimising in `direction`.
    pub fn new(
        space: SearchSpace,
        direction: Direction,
        seed: u64,
        settings: TpeSettings,
    ) -> TpeOracle {
        TpeOracle {
            space,
            direction,
            seed,
            settings,
        }
    }

    /// Optuna's `_split_trials`: (below, above), each sorted by trial number.
    fn split<'a>(
        &self,
        history: &'a [TrialRecord],
    ) -> (Vec<&'a TrialRecord>, Vec<&'a TrialRecord>) {
        let finite = |t: &&TrialRecord| t.value.is_some_and(f64::is_finite);
        let mut complete: Vec<&TrialRecord> = history
            .iter()
            .filter(|t| t.state == TrialState::Complete)
            .filter(finite)
            .collect();
        let mut pruned: Vec<&TrialRecord> = history
            .iter()
            .filter(|t| t.state == TrialState::Pruned)
            .collect();
        let running: Vec<&TrialRecord> = if self.settings.constant_liar {
            history
                .iter()
                .filter(|t| t.state == TrialState::Running)
                .collect()
        } else {
            Vec::new()
        };
        let mut n_below = default_gamma(complete.len() + pruned.len());
        let signed = |v: f64| match self.direction {
            Direction::Min => v,
            Direction::Max => -v,
        };
        complete.sort_by(|a, b| {
            signed(a.value.unwrap_or(0.0)).total_cmp(&signed(b.value.unwrap_or(0.0)))
        });
        // Optuna's _get_pruned_trial_score: (−last step, value in minimising sign); NaN last.
        let score = |t: &TrialRecord| match t.intermediate.iter().max_by_key(|(e, _)| *e) {
            None => (1.0, 0.0),
            Some((e, v)) if v.is_nan() => (-(*e as f64), f64::INFINITY),
            Some((e, v)) => (-(*e as f64), signed(*v)),
        };
        pruned.sort_by(|a, b| {
            let (sa, sb) = (score(a), score(b));
            sa.0.total_cmp(&sb.0).then(sa.1.total_cmp(&sb.1))
        });
        let k = n_below.min(complete.len());
        let mut below: Vec<&TrialRecord> = complete[..k].to_vec();
        let mut above: Vec<&TrialRecord> = complete[k..].to_vec();
        n_below -= k;
        let k = n_below.min(pruned.len());
        below.extend(&pruned[..k]);
        above.extend(&pruned[k..]);
        above.extend(running);
        below.sort_by_key(|t| t.number);
        above.sort_by_key(|t| t.number);
        (below, above)
    }

    /// One hyperparameter's TPE draw.
    fn sample_one<R: Rng + ?Sized>(
        &self,
        hp: &HyperParameter,
        below: &[&TrialRecord],
        above: &[&TrialRecord],
        rng: &mut R,
    ) -> Value {
        let Some(map) = TpeMap::of(hp) else {
            return hp.default.clone();
        };
        let obs = |ts: &[&TrialRecord]| -> Vec<f64> {
            ts.iter()
                .filter_map(|t| t.plan.params.get(&hp.name))
                .filter_map(|v| map.to_internal(hp, v))
                .collect()
        };
        let l = Parzen::fit(&obs(below), map.domain);
        let g = Parzen::fit(&obs(above), map.domain);
        let candidates = l.sample(rng, self.settings.n_ei_candidates.max(1));
        let mut best = (f64::NEG_INFINITY, candidates[0]);
        for &x in &candidates {
            let acq = l.log_pdf(x) - g.log_pdf(x);
            // np.argmax: the first maximum; NaN never wins.
            if acq > best.0 {
                best = (acq, x);
            }
        }
        map.to_value(hp, best.1)
    }
}

impl Oracle for TpeOracle {
    fn next(&self, history: &[TrialRecord]) -> Decision {
        let mut rng = trial_rng(self.seed, history.len());
        let finished = history
            .iter()
            .filter(|t| {
                (t.state == TrialState::Complete && t.value.is_some_and(f64::is_finite))
                    || t.state == TrialState::Pruned
            })
            .count();
        let params = if finished < self.settings.n_startup_trials {
            match random_unique(&self.space, history, &mut rng) {
                Some(p) => p,
                None => return wait_or_done(history),
            }
        } else {
            let (below, above) = self.split(history);
            let mut params = Params::new();
            for hp in self.space.hyperparameters() {
                if self.space.is_active(hp, &params) {
                    let v = self.sample_one(hp, &below, &above, &mut rng);
                    params.insert(hp.name.clone(), v);
                }
            }
            params
        };
        Decision::Run(TrialPlan {
            params,
            epochs: 0,
            resume_from: None,
            bracket: None,
        })
    }
}

/// How a Keras Tuner hyperparameter maps to an Optuna distribution.
struct TpeMap {
    domain: Domain,
    /// Internal value = `max + min − value` (reverse_log).
    mirror: Option<(f64, f64)>,
    /// Internal value = index into these values (choices).
    choices: Option<Vec<Value>>,
    /// Internal value = index of a stepped Int or Float ([`HyperParameter::step_index`]).
    stepped: bool,
}

impl TpeMap {
    fn of(hp: &HyperParameter) -> Option<TpeMap> {
        let categorical = |values: Vec<Value>| TpeMap {
            domain: Domain::Categorical { n: values.len() },
            mirror: None,
            choices: Some(values),
            stepped: false,
        };
        let continuous = |min: f64, max: f64, step: Option<f64>, sampling: Sampling| TpeMap {
            domain: Domain::Numerical {
                low: min,
                high: max,
                step,
                log: sampling != Sampling::Linear,
            },
            mirror: (sampling == Sampling::ReverseLog).then_some((min, max)),
            choices: None,
            stepped: false,
        };
        match &hp.kind {
            Kind::Fixed { .. } => None,
            Kind::Choice { values, .. } => Some(categorical(values.clone())),
            Kind::Boolean => Some(categorical(vec![Value::Bool(true), Value::Bool(false)])),
            Kind::Float {
                min,
                max,
                step: None,
                sampling,
            } => Some(continuous(*min, *max, None, *sampling)),
            Kind::Int {
                min,
                max,
                step: None,
                sampling,
            } => Some(continuous(*min as f64, *max as f64, Some(1.0), *sampling)),
            _ => {
                let n = hp.n_values()?;
                Some(TpeMap {
                    domain: Domain::Numerical {
                        low: 0.0,
                        high: n.saturating_sub(1) as f64,
                        step: Some(1.0),
                        log: false,
                    },
                    mirror: None,
                    choices: None,
                    stepped: true,
                })
            }
        }
    }

    fn to_internal(&self, hp: &HyperParameter, v: &Value) -> Option<f64> {
        if let Some(values) = &self.choices {
            return values.iter().position(|x| x == v).map(|i| i as f64);
        }
        if self.stepped {
            return hp.step_index(v).map(|i| i as f64);
        }
        if !hp.contains(v) {
            return None;
        }
        let x = match v {
            Value::Int(i) => *i as f64,
            Value::Float(f) => *f,
            _ => return None,
        };
        Some(match self.mirror {
            Some((min, max)) => max + min - x,
            None => x,
        })
    }

    fn to_value(&self, hp: &HyperParameter, x: f64) -> Value {
        let index = x.round().max(0.0) as usize;
        if let Some(values) = &self.choices {
            return values[index.min(values.len() - 1)].clone();
        }
        if self.stepped {
            let last = hp.n_values().unwrap_or(1).saturating_sub(1);
            return hp
                .step_value(index.min(last))
                .unwrap_or_else(|| hp.default.clone());
        }
        let x = match self.mirror {
            Some((min, max)) => max + min - x,
            None => x,
        };
        match &hp.kind {
            Kind::Int { min, max, .. } => Value::Int((x.round() as i64).clamp(*min, *max)),
            Kind::Float { min, max, .. } => Value::Float(x.clamp(*min, *max)),
            _ => hp.default.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
