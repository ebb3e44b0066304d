//! Hyperband, as Keras Tuner's `HyperbandOracle` (`keras_tuner/tuners/hyperband.py`)
//! computes it: brackets `s = s_max … 0`, each a successive-halving run whose round `r` has
//! `size(s, r)` trials of `epochs(s, r)` epochs; round `r + 1` promotes the best completed
//! trials of round `r`, which continue from their checkpoint.

use super::{Oracle, random_unique, trial_rng, wait_or_done};
use crate::space::SearchSpace;
use crate::trial::{Decision, Direction, TrialPlan, TrialRecord, TrialState};

/// The Hyperband oracle. Settings are Keras Tuner's: `max_epochs` (default 100), `factor`
/// (3), `hyperband_iterations` (1); `min_epochs` is 1.
///
/// Keras Tuner keeps its brackets as mutable state; here they are rebuilt from `history` on
/// every call (trials by `number`: a round-0 trial joins the newest bracket while its first
/// round has room, else opens the next bracket in Keras Tuner's order; a promoted trial joins
/// its `resume_from` parent's bracket at its recorded round), then Keras Tuner's
/// `populate_space` runs on that state:
/// 1. in each unfinished bracket, oldest first: fill round 0 with random points; else for
///    each later round, promote the best completed, not yet promoted trial of the round
///    before when more than `size(r−1) − size(r)` such trials wait;
/// 2. otherwise open the next bracket (`s − 1`, or `s_max` of the next iteration) with a
///    random trial, or after the last bracket of the last iteration `Wait` while trials run,
///    else `Done`.
///
/// As in Keras Tuner, a worker that finds every bracket waiting on running trials opens the
/// next bracket instead of waiting; failed and pruned trials are never promoted.
#[derive(Clone, Debug)]
pub struct HyperbandOracle {
    space: SearchSpace,
    direction: Direction,
    seed: u64,
    max_epochs: u32,
    factor: u32,
    iterations: u32,
}

/// One bracket instance: per round, the trials in it as `(index in history, parent number)`.
struct Bracket {
    s: u32,
    rounds: Vec<Vec<(usize, Option<u64>)>>,
}

impl HyperbandOracle {
    /// A Hyperband oracle (`max_epochs >= 1`, `factor >= 2`, `iterations >= 1`).
    pub fn new(
        space: SearchSpace,
        direction: Direction,
        seed: u64,
        max_epochs: u32,
        factor: u32,
        iterations: u32,
    ) -> HyperbandOracle {
        HyperbandOracle {
            space,
            direction,
            seed,
            max_epochs,
            factor: factor.max(2),
            iterations: iterations.max(1),
        }
    }

    /// Keras Tuner's `_get_num_brackets`: how many times `max_epochs` divides by `factor`
    /// (float division) while staying `>= 1`.
    pub fn num_brackets(&self) -> u32 {
        let mut epochs = self.max_epochs as f64;
        let mut brackets = 0;
        while epochs >= 1.0 {
            epochs /= self.factor as f64;
            brackets += 1;
        }
        brackets
    }

    /// Keras Tuner's `_get_size`: trials in round `round` of bracket `bracket`,
    /// `⌈⌈1 + log_factor(max_epochs)⌉ / (bracket + 1) · factor^(bracket − round)⌉`
    /// (`math.log(x, base)` = `ln x / ln base`, float rounding included).
    pub fn size(&self, bracket: u32, round: u32) -> usize {
        let log = (self.max_epochs as f64).ln() / (self.factor as f64).ln();
        let bracket0_end_size = (1.0 + log).ceil();
        let bracket_end_size = bracket0_end_size / (bracket as f64 + 1.0);
        (bracket_end_size * (self.factor as f64).powi((bracket - round) as i32)).ceil() as usize
    }

    /// Keras Tuner's `_get_epochs`: `⌈max_epochs / factor^(bracket − round)⌉`.
    pub fn epochs(&self, bracket: u32, round: u32) -> u32 {
        (self.max_epochs as f64 / (self.factor as f64).powi((bracket - round) as i32)).ceil() as u32
    }

    /// The bracket number of the `k`-th bracket opened (0-based): `s_max, …, 0, s_max, …`.
    fn bracket_of(&self, k: usize) -> u32 {
        let b = self.num_brackets() as usize;
        (b - 1 - k % b) as u32
    }

    /// Rebuilds Keras Tuner's brackets from `history` (sorted by number).
    fn replay(&self, history: &[&TrialRecord]) -> Vec<Bracket> {
        let mut brackets = vec![Bracket {
            s: self.bracket_of(0),
            rounds: vec![Vec::new(); self.bracket_of(0) as usize + 1],
        }];
        for (i, t) in history.iter().enumerate() {
            match t.plan.resume_from {
                None => {
                    let last = brackets.last().expect("one bracket at least");
                    if last.rounds[0].len() >= self.size(last.s, 0) {
                        let s = self.bracket_of(brackets.len());
                        brackets.push(Bracket {
                            s,
                            rounds: vec![Vec::new(); s as usize + 1],
                        });
                    }
                    brackets.last_mut().expect("pushed").rounds[0].push((i, None));
                }
                Some(parent) => {
                    let round = t.plan.bracket.map_or(1, |(_, r)| r as usize);
                    let home = brackets.iter_mut().find(|b| {
                        b.rounds
                            .iter()
                            .flatten()
                            .any(|(j, _)| history[*j].number == parent)
                    });
                    if let Some(b) = home
                        && round < b.rounds.len()
                    {
                        b.rounds[round].push((i, Some(parent)));
                    }
                }
            }
        }
        brackets
    }

    fn fresh(&self, history: &[TrialRecord], bracket: u32) -> Decision {
        let mut rng = trial_rng(self.seed, history.len());
        match random_unique(&self.space, history, &mut rng) {
            Some(params) => Decision::Run(TrialPlan {
                params,
                epochs: self.epochs(bracket, 0),
                resume_from: None,
                bracket: Some((bracket, 0)),
            }),
            None => wait_or_done(history),
        }
    }
}

impl Oracle for HyperbandOracle {
    fn next(&self, history: &[TrialRecord]) -> Decision {
        let mut sorted: Vec<&TrialRecord> = history.iter().collect();
        sorted.sort_by_key(|t| t.number);
        let brackets = self.replay(&sorted);
        for b in &brackets {
            let last = b.rounds.len() - 1;
            if b.rounds[last].len() >= self.size(b.s, last as u32) {
                continue; // Keras Tuner's _remove_completed_brackets
            }
            if b.rounds[0].len() < self.size(b.s, 0) {
                return self.fresh(history, b.s);
            }
            for r in 1..b.rounds.len() {
                let selected: Vec<u64> = b.rounds[r].iter().filter_map(|(_, p)| *p).collect();
                let mut candidates: Vec<(&TrialRecord, f64)> = b.rounds[r - 1]
                    .iter()
                    .map(|(j, _)| sorted[*j])
                    .filter(|t| !selected.contains(&t.number))
                    .filter(|t| t.state == TrialState::Complete)
                    .filter_map(|t| t.value.filter(|v| !v.is_nan()).map(|v| (t, v)))
                    .collect();
                let size = self.size(b.s, r as u32);
                let past_size = self.size(b.s, r as u32 - 1);
                if candidates.len() + size > past_size {
                    // Stable sort, best first (Python's sorted(..., reverse=...) keeps ties
                    // in round order).
                    candidates.sort_by(|a, b| match self.direction {
                        Direction::Max => b.1.total_cmp(&a.1),
                        Direction::Min => a.1.total_cmp(&b.1),
                    });
                    let best = candidates[0].0;
                    return Decision::Run(TrialPlan {
                        params: best.plan.params.clone(),
                        epochs: self.epochs(b.s, r as u32),
                        resume_from: Some(best.number),
                        bracket: Some((b.s, r as u32)),
                    });
                }
            }
        }
        let opened = brackets.len() - 1;
        let current = brackets[opened].s;
        let iteration = opened / self.num_brackets() as usize;
        if current == 0 && iteration + 1 >= self.iterations as usize {
            return wait_or_done(history);
        }
        self.fresh(history, self.bracket_of(opened + 1))
    }
}
