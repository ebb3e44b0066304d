use super::*;
use crate::trial::{Direction, TrialPlan};

fn space(src: &str) -> SearchSpace {
    let doc: toml::Table = toml::from_str(src).expect("valid TOML");
    SearchSpace::from_toml(&doc["hyperparameters"]).expect("valid space")
}

fn record(number: u64, plan: TrialPlan, state: TrialState, value: Option<f64>) -> TrialRecord {
    TrialRecord {
        number,
        plan,
        state,
        value,
        intermediate: vec![],
        retries: 0,
    }
}

const X: &str =
    "[[hyperparameters]]\nname = \"x\"\ntype = \"Float\"\nmin_value = 0.0\nmax_value = 1.0\n";

/// Keras Tuner 1.4.8's HyperbandOracle, max_epochs = 27, factor = 3, one worker, trial `i`
/// scoring `(7·i) mod 11` (maximised): `(trial, bracket, round, epochs, initial_epoch,
/// parent or −1)`, then STOPPED. From tests/reference/hyperband_keras_tuner.py.
const KERAS_HYPERBAND_27_3: &[(u64, u32, u32, u32, u32, i64)] = &[
    (0, 3, 0, 1, 0, -1),
    (1, 3, 0, 1, 0, -1),
    (2, 3, 0, 1, 0, -1),
    (3, 3, 0, 1, 0, -1),
    (4, 3, 0, 1, 0, -1),
    (5, 3, 0, 1, 0, -1),
    (6, 3, 0, 1, 0, -1),
    (7, 3, 0, 1, 0, -1),
    (8, 3, 0, 1, 0, -1),
    (9, 3, 0, 1, 0, -1),
    (10, 3, 0, 1, 0, -1),
    (11, 3, 0, 1, 0, -1),
    (12, 3, 0, 1, 0, -1),
    (13, 3, 0, 1, 0, -1),
    (14, 3, 0, 1, 0, -1),
    (15, 3, 0, 1, 0, -1),
    (16, 3, 0, 1, 0, -1),
    (17, 3, 0, 1, 0, -1),
    (18, 3, 0, 1, 0, -1),
    (19, 3, 0, 1, 0, -1),
    (20, 3, 0, 1, 0, -1),
    (21, 3, 0, 1, 0, -1),
    (22, 3, 0, 1, 0, -1),
    (23, 3, 0, 1, 0, -1),
    (24, 3, 0, 1, 0, -1),
    (25, 3, 0, 1, 0, -1),
    (26, 3, 0, 1, 0, -1),
    (27, 3, 1, 3, 1, 3),
    (28, 3, 1, 3, 1, 14),
    (29, 3, 1, 3, 1, 25),
    (30, 3, 1, 3, 1, 6),
    (31, 3, 1, 3, 1, 17),
    (32, 3, 1, 3, 1, 9),
    (33, 3, 1, 3, 1, 20),
    (34, 3, 1, 3, 1, 1),
    (35, 3, 1, 3, 1, 12),
    (36, 3, 2, 9, 3, 28),
    (37, 3, 2, 9, 3, 31),
    (38, 3, 2, 9, 3, 34),
    (39, 3, 3, 27, 9, 36),
    (40, 2, 0, 3, 0, -1),
    (41, 2, 0, 3, 0, -1),
    (42, 2, 0, 3, 0, -1),
    (43, 2, 0, 3, 0, -1),
    (44, 2, 0, 3, 0, -1),
    (45, 2, 0, 3, 0, -1),
    (46, 2, 0, 3, 0, -1),
    (47, 2, 0, 3, 0, -1),
    (48, 2, 0, 3, 0, -1),
    (49, 2, 0, 3, 0, -1),
    (50, 2, 0, 3, 0, -1),
    (51, 2, 0, 3, 0, -1),
    (52, 2, 1, 9, 3, 47),
    (53, 2, 1, 9, 3, 50),
    (54, 2, 1, 9, 3, 42),
    (55, 2, 1, 9, 3, 45),
    (56, 2, 2, 27, 9, 53),
    (57, 2, 2, 27, 9, 54),
    (58, 1, 0, 9, 0, -1),
    (59, 1, 0, 9, 0, -1),
    (60, 1, 0, 9, 0, -1),
    (61, 1, 0, 9, 0, -1),
    (62, 1, 0, 9, 0, -1),
    (63, 1, 0, 9, 0, -1),
    (64, 1, 1, 27, 9, 58),
    (65, 1, 1, 27, 9, 61),
    (66, 0, 0, 27, 0, -1),
    (67, 0, 0, 27, 0, -1),
    (68, 0, 0, 27, 0, -1),
    (69, 0, 0, 27, 0, -1),
];

#[test]
fn hyperband_matches_keras_tuner_for_27_epochs_factor_3() {
    let oracle = HyperbandOracle::new(space(X), Direction::Max, 1, 27, 3, 1);
    assert_eq!(oracle.num_brackets(), 4);
    // Sizes and epochs per (bracket, round), as Keras Tuner's _get_size/_get_epochs.
    let sizes: Vec<Vec<usize>> = (0..4)
        .rev()
        .map(|b| (0..=b).map(|r| oracle.size(b, r)).collect())
        .collect();
    assert_eq!(
        sizes,
        vec![vec![27, 9, 3, 1], vec![12, 4, 2], vec![6, 2], vec![4]]
    );
    let epochs: Vec<Vec<u32>> = (0..4)
        .rev()
        .map(|b| (0..=b).map(|r| oracle.epochs(b, r)).collect())
        .collect();
    assert_eq!(
        epochs,
        vec![vec![1, 3, 9, 27], vec![3, 9, 27], vec![9, 27], vec![27]]
    );

    let mut history: Vec<TrialRecord> = Vec::new();
    for &(n, bracket, round, ep, initial, parent) in KERAS_HYPERBAND_27_3 {
        let Decision::Run(plan) = oracle.next(&history) else {
            panic!("trial {n}: expected a plan");
        };
        assert_eq!(plan.bracket, Some((bracket, round)), "trial {n}");
        assert_eq!(plan.epochs, ep, "trial {n}");
        let want_parent = (parent >= 0).then_some(parent as u64);
        assert_eq!(plan.resume_from, want_parent, "trial {n}");
        // initial epoch = the parent's epochs.
        let init = plan
            .resume_from
            .map_or(0, |p| history[p as usize].plan.epochs);
        assert_eq!(init, initial, "trial {n}");
        if let Some(p) = plan.resume_from {
            assert_eq!(plan.params, history[p as usize].plan.params);
        }
        history.push(record(
            n,
            plan,
            TrialState::Complete,
            Some(((n * 7) % 11) as f64),
        ));
    }
    assert_eq!(oracle.next(&history), Decision::Done);
}

#[test]
fn hyperband_waits_for_the_last_bracket_and_iterates() {
    // max_epochs 9, factor 3: bracket 2 has rounds of 9, 3, 1 trials, bracket 1 of 5, 2,
    // bracket 0 of 3 (Keras Tuner's _get_size).
    let oracle = HyperbandOracle::new(space(X), Direction::Min, 0, 9, 3, 2);
    let mut history: Vec<TrialRecord> = Vec::new();
    let mut brackets = Vec::new();
    loop {
        match oracle.next(&history) {
            Decision::Run(plan) => {
                let n = history.len() as u64;
                brackets.push(plan.bracket.unwrap());
                history.push(record(n, plan, TrialState::Complete, Some(n as f64)));
            }
            Decision::Wait => panic!("nothing runs"),
            Decision::Done => break,
        }
        assert!(history.len() < 1000);
    }
    // Two iterations of the same schedule.
    let half = brackets.len() / 2;
    assert_eq!(brackets[..half], brackets[half..]);
    assert_eq!(brackets[0], (2, 0));
    assert_eq!(*brackets.last().unwrap(), (0, 0));
    // With the last trial still running, the oracle waits instead of stopping.
    let last = history.len() - 1;
    history[last].state = TrialState::Running;
    history[last].value = None;
    assert_eq!(oracle.next(&history), Decision::Wait);
    // Minimising: the first promotion of bracket 2 is its lowest-valued trial (trial 0).
    let first_promoted = history
        .iter()
        .find(|t| t.plan.resume_from.is_some())
        .unwrap();
    assert_eq!(first_promoted.plan.resume_from, Some(0));
}

#[test]
fn hyperband_opens_the_next_bracket_while_a_round_runs() {
    // Keras Tuner: a worker that finds every bracket waiting starts the next bracket.
    let oracle = HyperbandOracle::new(space(X), Direction::Max, 0, 9, 3, 1);
    let size0 = oracle.size(2, 0);
    let mut history: Vec<TrialRecord> = Vec::new();
    for n in 0..size0 as u64 {
        let Decision::Run(plan) = oracle.next(&history) else {
            panic!()
        };
        history.push(record(n, plan, TrialState::Running, None));
    }
    let Decision::Run(plan) = oracle.next(&history) else {
        panic!()
    };
    assert_eq!(plan.bracket, Some((1, 0)));
    assert_eq!(plan.resume_from, None);
}

#[test]
fn random_is_deterministic_and_avoids_duplicates() {
    let s = space(
        "[[hyperparameters]]\nname = \"c\"\ntype = \"Choice\"\nvalues = [\"a\", \"b\", \"c\"]\n",
    );
    let oracle = RandomOracle::new(s, 42);
    let mut history: Vec<TrialRecord> = Vec::new();
    for n in 0..3 {
        let d = oracle.next(&history);
        assert_eq!(d, oracle.next(&history));
        let Decision::Run(plan) = d else {
            panic!("trial {n}")
        };
        assert_eq!(plan.epochs_override(), None);
        history.push(record(n, plan, TrialState::Running, None));
    }
    let mut seen: Vec<_> = history.iter().map(|t| t.plan.params["c"].clone()).collect();
    seen.sort_by_key(|v| format!("{v:?}"));
    seen.dedup();
    assert_eq!(seen.len(), 3, "three distinct points");
    // Exhausted: wait while trials run, done after.
    assert_eq!(oracle.next(&history), Decision::Wait);
    for t in &mut history {
        t.state = TrialState::Complete;
    }
    assert_eq!(oracle.next(&history), Decision::Done);
}

#[test]
fn grid_visits_every_point_once_under_any_states() {
    let s = space(
        "[[hyperparameters]]\nname = \"a\"\ntype = \"Int\"\nmin_value = 1\nmax_value = 3\n[[hyperparameters]]\nname = \"b\"\ntype = \"Choice\"\nvalues = [0.1, 0.2]\n[[hyperparameters]]\nname = \"c\"\ntype = \"Boolean\"\nparent_name = \"b\"\nparent_values = [0.2]\n",
    );
    let oracle = GridOracle::new(s.clone()).unwrap();
    // 3 × (1 + 2) points.
    assert_eq!(oracle.points().len(), 9);
    let states = [
        TrialState::Complete,
        TrialState::Failed,
        TrialState::Running,
        TrialState::Pruned,
    ];
    let mut history: Vec<TrialRecord> = Vec::new();
    while let Decision::Run(plan) = oracle.next(&history) {
        let n = history.len() as u64;
        assert!(s.contains(&plan.params));
        history.push(record(n, plan, states[n as usize % 4], None));
        assert!(history.len() <= 9);
    }
    assert_eq!(history.len(), 9);
    let mut keys: Vec<String> = history
        .iter()
        .map(|t| serde_json::to_string(&t.plan.params).unwrap())
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 9, "no point twice");
    // Two workers reading the same history agree on the next point; after one claims it the
    // other gets the following one.
    let partial = &history[..4];
    let Decision::Run(p1) = oracle.next(partial) else {
        panic!()
    };
    let Decision::Run(p2) = oracle.next(partial) else {
        panic!()
    };
    assert_eq!(p1, p2);
    let mut more = partial.to_vec();
    more.push(record(4, p1.clone(), TrialState::Running, None));
    let Decision::Run(p3) = oracle.next(&more) else {
        panic!()
    };
    assert_ne!(p3.params, p1.params);
    // Resume after a gap: a history missing a middle point gets that point back.
    let mut gap = history.clone();
    let removed = gap.remove(2);
    let Decision::Run(p) = oracle.next(&gap) else {
        panic!()
    };
    assert_eq!(p.params, removed.plan.params);
}

#[test]
fn build_reads_tuner_keys() {
    let objective = Objective {
        name: "val_loss".into(),
        direction: Direction::Min,
    };
    let table = |src: &str| -> toml::Table { toml::from_str(src).unwrap() };
    for alg in ["random", "grid", "hyperband", "bayesian"] {
        let t = table(&format!("algorithm = \"{alg}\"\nseed = 3"));
        let s = space(
            "[[hyperparameters]]\nname = \"a\"\ntype = \"Int\"\nmin_value = 1\nmax_value = 3\n",
        );
        assert!(
            matches!(
                build(&t, &s, &objective).unwrap().next(&[]),
                Decision::Run(_)
            ),
            "{alg}"
        );
    }
    let err = |src: &str| {
        build(&table(src), &space(X), &objective)
            .err()
            .expect(src)
            .to_string()
    };
    assert!(err("algorithm = \"annealing\"").contains("tuner.algorithm"));
    assert!(
        err("algorithm = \"random\"\nmax_epochs = 3")
            .contains("tuner.max_epochs: applies to hyperband only")
    );
    assert!(
        err("algorithm = \"hyperband\"\nfactor = 1").contains("tuner.factor = 1: must be >= 2")
    );
    assert!(err("algorithm = \"grid\"").contains("hyperparameters[0].step"));
    assert!(err("algorithm = \"bayesian\"\nn_ei_candidates = 0").contains("tuner.n_ei_candidates"));
    for key in [
        "algorithm",
        "seed",
        "max_epochs",
        "factor",
        "hyperband_iterations",
        "n_startup_trials",
        "n_ei_candidates",
        "constant_liar",
    ] {
        assert!(ORACLE_KEYS.contains(&key));
    }
}
