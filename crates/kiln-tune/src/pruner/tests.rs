use super::*;
use crate::trial::{TrialPlan, TrialState};

/// The value trial `t` reports at epoch `s` in tests/reference/pruners_optuna.py.
fn v(t: u64, s: u32) -> f64 {
    ((5 * t) % 7) as f64 / 7.0 + ((37 * t + 11 * s as u64) % 17) as f64 / 170.0 - 0.05 * s as f64
}

/// Runs 12 trials of 8 epochs one after another, asking the pruner after each report;
/// returns (trial, epoch) where pruned trials stopped.
fn simulate(pruner: &dyn Pruner, direction: Direction) -> Vec<(u64, u32)> {
    let mut history: Vec<TrialRecord> = Vec::new();
    let mut stops = Vec::new();
    for t in 0..12u64 {
        history.push(TrialRecord {
            number: t,
            plan: TrialPlan {
                params: Default::default(),
                epochs: 8,
                resume_from: None,
                bracket: None,
            },
            state: TrialState::Running,
            value: None,
            intermediate: vec![],
            retries: 0,
        });
        let i = history.len() - 1;
        for s in 0..8u32 {
            history[i].intermediate.push((s, v(t, s)));
            let trial = history[i].clone();
            if pruner.should_prune(&trial, &history, direction) {
                stops.push((t, s));
                history[i].state = TrialState::Pruned;
                history[i].value = Some(v(t, s));
                break;
            }
        }
        if history[i].state == TrialState::Running {
            history[i].state = TrialState::Complete;
            history[i].value = Some(v(t, 7));
        }
    }
    stops
}

/// Where Optuna 5.0.0's MedianPruner / SuccessiveHalvingPruner stop the same study
/// (tests/reference/pruners_optuna.py); Optuna keeps successive halving's rung values as
/// trial attributes, kiln rebuilds them from the history, and both agree.
#[test]
fn pruners_match_optuna() {
    type Case = (
        &'static str,
        Box<dyn Pruner>,
        Direction,
        &'static [(u64, u32)],
    );
    let cases: Vec<Case> = vec![
        (
            "median_default",
            Box::new(MedianPruner::default()),
            Direction::Min,
            &[(5, 0), (8, 0), (9, 0), (11, 0)],
        ),
        (
            "median_2_2_2_3",
            Box::new(MedianPruner {
                n_startup_trials: 2,
                n_warmup_steps: 2,
                interval_steps: 2,
                n_min_trials: 3,
            }),
            Direction::Min,
            &[(4, 2), (5, 2), (6, 6), (8, 2), (9, 2), (10, 4), (11, 2)],
        ),
        (
            "sh_1_2_0",
            Box::new(SuccessiveHalvingPruner {
                min_resource: Some(1),
                reduction_factor: 2,
                min_early_stopping_rate: 0,
                bootstrap_count: 0,
            }),
            Direction::Min,
            &[
                (1, 1),
                (2, 1),
                (3, 2),
                (4, 1),
                (5, 1),
                (6, 2),
                (7, 4),
                (8, 1),
                (9, 1),
                (10, 2),
                (11, 1),
            ],
        ),
        (
            "sh_default",
            Box::new(SuccessiveHalvingPruner::default()),
            Direction::Min,
            &[(4, 1), (5, 1), (6, 1), (8, 1), (9, 1), (10, 1), (11, 1)],
        ),
        (
            "sh_1_3_1",
            Box::new(SuccessiveHalvingPruner {
                min_resource: Some(1),
                reduction_factor: 3,
                min_early_stopping_rate: 1,
                bootstrap_count: 0,
            }),
            Direction::Min,
            &[
                (1, 3),
                (2, 3),
                (3, 3),
                (4, 3),
                (5, 3),
                (6, 3),
                (8, 3),
                (9, 3),
                (10, 3),
                (11, 3),
            ],
        ),
        (
            "median_default",
            Box::new(MedianPruner::default()),
            Direction::Max,
            &[(6, 0), (7, 0), (9, 0), (10, 0)],
        ),
        (
            "median_2_2_2_3",
            Box::new(MedianPruner {
                n_startup_trials: 2,
                n_warmup_steps: 2,
                interval_steps: 2,
                n_min_trials: 3,
            }),
            Direction::Max,
            &[(3, 2), (6, 2), (7, 2), (9, 2), (10, 2)],
        ),
        (
            "sh_1_2_0",
            Box::new(SuccessiveHalvingPruner {
                min_resource: Some(1),
                reduction_factor: 2,
                min_early_stopping_rate: 0,
                bootstrap_count: 0,
            }),
            Direction::Max,
            &[
                (2, 1),
                (3, 1),
                (5, 2),
                (6, 1),
                (7, 1),
                (8, 4),
                (9, 2),
                (10, 1),
            ],
        ),
        (
            "sh_default",
            Box::new(SuccessiveHalvingPruner::default()),
            Direction::Max,
            &[
                (2, 1),
                (3, 1),
                (5, 1),
                (6, 1),
                (7, 1),
                (8, 1),
                (9, 1),
                (10, 1),
            ],
        ),
        (
            "sh_1_3_1",
            Box::new(SuccessiveHalvingPruner {
                min_resource: Some(1),
                reduction_factor: 3,
                min_early_stopping_rate: 1,
                bootstrap_count: 0,
            }),
            Direction::Max,
            &[(2, 3), (3, 3), (5, 3), (6, 3), (7, 3), (9, 3), (10, 3)],
        ),
    ];
    for (name, pruner, direction, want) in cases {
        assert_eq!(
            simulate(pruner.as_ref(), direction),
            want,
            "{name} {direction:?}"
        );
    }
}

#[test]
fn median_known_answer() {
    // Five complete trials reporting 1..5 at epoch 0 (median 3); minimising.
    let rec = |n: u64, state: TrialState, inter: Vec<(u32, f64)>| TrialRecord {
        number: n,
        plan: TrialPlan {
            params: Default::default(),
            epochs: 0,
            resume_from: None,
            bracket: None,
        },
        state,
        value: None,
        intermediate: inter,
        retries: 0,
    };
    let mut history: Vec<TrialRecord> = (0..5)
        .map(|n| rec(n, TrialState::Complete, vec![(0, (n + 1) as f64)]))
        .collect();
    let p = MedianPruner::default();
    let probe = |value: f64, history: &mut Vec<TrialRecord>| {
        history.push(rec(5, TrialState::Running, vec![(0, value)]));
        let r = p.should_prune(&history[5].clone(), history, Direction::Min);
        history.pop();
        r
    };
    assert!(probe(3.5, &mut history));
    assert!(!probe(3.0, &mut history), "equal to the median is kept");
    assert!(!probe(2.0, &mut history));
    // Even count: median of 1..4 is 2.5 (linear interpolation).
    history.remove(4);
    history.push(rec(9, TrialState::Failed, vec![(0, 100.0)]));
    assert!(
        !probe(2.6, &mut history),
        "only 4 complete: below n_startup_trials"
    );
    assert_eq!(
        super::median::nan_percentile(&[1.0, 2.0, 3.0, 4.0], 50.0),
        2.5
    );
    assert!(super::median::nan_percentile(&[f64::NAN], 50.0).is_nan());
}

#[test]
fn build_reads_the_pruner_key() {
    let t = |src: &str| -> toml::Table { toml::from_str(src).unwrap() };
    assert!(build(&t("")).unwrap().is_none());
    assert!(build(&t("pruner = \"none\"")).unwrap().is_none());
    assert!(build(&t("pruner = \"median\"")).unwrap().is_some());
    assert!(
        build(&t(
            "pruner = { type = \"successive_halving\", min_resource = 2, reduction_factor = 3 }"
        ))
        .unwrap()
        .is_some()
    );
    let err = |src: &str| build(&t(src)).err().expect(src).to_string();
    assert!(err("pruner = \"hyperband\"").contains("unknown pruner"));
    assert!(
        err("pruner = { type = \"median\", reduction_factor = 3 }")
            .contains("tuner.pruner.reduction_factor: applies to successive_halving only")
    );
    assert!(
        err("pruner = { type = \"median\", interval_steps = 0 }")
            .contains("tuner.pruner.interval_steps = 0: must be >= 1")
    );
    assert!(
        err("pruner = { type = \"successive_halving\", min_resource = 0 }")
            .contains("tuner.pruner.min_resource")
    );
    assert!(
        err("pruner = { type = \"successive_halving\", bootstrap_count = 2 }")
            .contains("incompatible")
    );
    assert!(
        err("pruner = { type = \"median\", patience = 2 }")
            .contains("tuner.pruner.patience: unknown key")
    );
    assert!(err("pruner = 3").contains("tuner.pruner"));
}
