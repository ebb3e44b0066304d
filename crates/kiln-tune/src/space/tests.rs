use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::*;

fn space(src: &str) -> Result<SearchSpace, TuneError> {
    let doc: toml::Table = toml::from_str(src).expect("valid TOML");
    SearchSpace::from_toml(&doc["hyperparameters"])
}

fn err(src: &str) -> String {
    match space(src) {
        Ok(_) => panic!("expected an error for {src}"),
        Err(e) => e.to_string(),
    }
}

fn ints(v: &[Value]) -> Vec<i64> {
    v.iter()
        .map(|x| match x {
            Value::Int(i) => *i,
            other => panic!("{other:?}"),
        })
        .collect()
}

fn floats(v: &[Value]) -> Vec<f64> {
    v.iter()
        .map(|x| match x {
            Value::Float(f) => *f,
            other => panic!("{other:?}"),
        })
        .collect()
}

const KERAS_CASES: &str = r#"
[[hyperparameters]]
name = "int_log_step"
type = "Int"
min_value = 2
max_value = 32
step = 2
sampling = "log"
[[hyperparameters]]
name = "int_log"
type = "Int"
min_value = 1
max_value = 100
sampling = "log"
[[hyperparameters]]
name = "int_rev"
type = "Int"
min_value = 1
max_value = 100
sampling = "reverse_log"
[[hyperparameters]]
name = "int_lin"
type = "Int"
min_value = 6
max_value = 13
step = 3
[[hyperparameters]]
name = "float_log"
type = "Float"
min_value = 1e-4
max_value = 1e-2
sampling = "log"
[[hyperparameters]]
name = "float_rev"
type = "Float"
min_value = 1e-4
max_value = 1e-2
sampling = "reverse_log"
[[hyperparameters]]
name = "float_step_log"
type = "Float"
min_value = 0.001
max_value = 10
step = 10
sampling = "log"
[[hyperparameters]]
name = "choice"
type = "Choice"
values = ["a", "b", "c"]
"#;

/// `prob_to_value` at u = 0, 0.25, 0.5, 0.75, 0.999, from the real Keras Tuner 1.4.8:
/// tests/reference/space_keras_tuner.py.
#[test]
fn from_prob_matches_keras_tuner() {
    let s = space(KERAS_CASES).unwrap();
    let us = [0.0, 0.25, 0.5, 0.75, 0.999];
    let at = |name: &str| -> Vec<Value> {
        let hp = s.get(name).unwrap();
        us.iter().map(|&u| hp.from_prob(u)).collect()
    };
    assert_eq!(ints(&at("int_log_step")), [2, 4, 8, 16, 32]);
    assert_eq!(ints(&at("int_log")), [1, 3, 10, 31, 100]);
    assert_eq!(ints(&at("int_rev")), [1, 70, 91, 98, 100]);
    assert_eq!(ints(&at("int_lin")), [6, 6, 9, 12, 12]);
    let close = |got: Vec<f64>, want: [f64; 5]| {
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-12 * w.abs(), "{got:?} vs {want:?}");
        }
    };
    close(
        floats(&at("float_log")),
        [
            0.0001,
            0.000316227766016838,
            0.001,
            0.0031622776601683794,
            0.00995405417351527,
        ],
    );
    close(
        floats(&at("float_rev")),
        [
            9.99999999999994e-05,
            0.00693772233983162,
            0.0091,
            0.009783772233983162,
            0.00999953842097216,
        ],
    );
    close(floats(&at("float_step_log")), [0.001, 0.01, 0.1, 1.0, 10.0]);
    assert_eq!(
        at("choice"),
        ["a", "a", "b", "c", "c"]
            .map(|s| Value::Str(s.into()))
            .to_vec()
    );
    // Keras Tuner's docstring examples: log step multiplies, max inclusive.
    let hp = s.get("int_log_step").unwrap();
    assert_eq!(ints(&hp.discrete_values().unwrap()), [2, 4, 8, 16, 32]);
    assert_eq!(
        ints(&s.get("int_lin").unwrap().discrete_values().unwrap()),
        [6, 9, 12]
    );
    assert!(s.get("float_log").unwrap().discrete_values().is_none());
}

#[test]
fn float_linear_step_includes_max() {
    let s = space(
        "[[hyperparameters]]\nname = \"d\"\ntype = \"Float\"\nmin_value = 0\nmax_value = 1\nstep = 0.2\n",
    )
    .unwrap();
    let v = floats(&s.hyperparameters()[0].discrete_values().unwrap());
    assert_eq!(v.len(), 6, "{v:?}");
    assert!((v[5] - 1.0).abs() < 1e-12);
}

/// Kolmogorov–Smirnov distance between the samples' log values and the uniform law on
/// [ln min, ln max].
fn ks_log_uniform(samples: &[f64], min: f64, max: f64) -> f64 {
    let mut u: Vec<f64> = samples
        .iter()
        .map(|x| (x / min).ln() / (max / min).ln())
        .collect();
    u.sort_by(f64::total_cmp);
    let n = u.len() as f64;
    u.iter()
        .enumerate()
        .map(|(i, &x)| (x - i as f64 / n).abs().max(((i + 1) as f64 / n - x).abs()))
        .fold(0.0, f64::max)
}

#[test]
fn log_sampling_stays_in_bounds_and_is_log_uniform() {
    let src = |sampling: &str| {
        format!(
            "[[hyperparameters]]\nname = \"lr\"\ntype = \"Float\"\nmin_value = 1e-4\nmax_value = 1e-2\nsampling = \"{sampling}\"\n"
        )
    };
    let draw = |s: &SearchSpace| -> Vec<f64> {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        (0..20_000)
            .map(|_| match s.sample(&mut rng)["lr"] {
                Value::Float(f) => f,
                ref other => panic!("{other:?}"),
            })
            .collect()
    };
    let log = draw(&space(&src("log")).unwrap());
    assert!(log.iter().all(|&x| (1e-4..=1e-2).contains(&x)));
    // Each decade holds half the draws (log-uniform), within 2%.
    let low_decade = log.iter().filter(|&&x| x < 1e-3).count() as f64 / log.len() as f64;
    assert!((low_decade - 0.5).abs() < 0.02, "{low_decade}");
    // 10 equal buckets in log space: chi-square with 9 degrees of freedom below 21.67 (p = 0.01).
    let mut buckets = [0f64; 10];
    for &x in &log {
        let b = ((x / 1e-4).ln() / 100f64.ln() * 10.0).floor() as usize;
        buckets[b.min(9)] += 1.0;
    }
    let expected = log.len() as f64 / 10.0;
    let chi2: f64 = buckets
        .iter()
        .map(|c| (c - expected).powi(2) / expected)
        .sum();
    assert!(chi2 < 21.67, "chi2 {chi2}, buckets {buckets:?}");
    // KS: below the 1% critical value 1.63/√n.
    let crit = 1.63 / (log.len() as f64).sqrt();
    let d = ks_log_uniform(&log, 1e-4, 1e-2);
    assert!(d < crit, "KS {d} >= {crit}");
    // The same test rejects linear sampling (it is not vacuous).
    let linear = draw(&space(&src("linear")).unwrap());
    assert!(ks_log_uniform(&linear, 1e-4, 1e-2) > 10.0 * crit);
    // reverse_log: in bounds and dense near max (median above the midpoint).
    let mut rev = draw(&space(&src("reverse_log")).unwrap());
    assert!(rev.iter().all(|&x| (1e-4..=1e-2).contains(&x)));
    rev.sort_by(f64::total_cmp);
    assert!(rev[rev.len() / 2] > 0.9e-2, "{}", rev[rev.len() / 2]);
}

#[test]
fn int_log_sampling_reaches_both_ends() {
    let s = space(
        "[[hyperparameters]]\nname = \"u\"\ntype = \"Int\"\nmin_value = 2\nmax_value = 32\nstep = 2\nsampling = \"log\"\n",
    )
    .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..5000 {
        *counts
            .entry(ints(&[s.sample(&mut rng)["u"].clone()])[0])
            .or_insert(0) += 1;
    }
    assert_eq!(
        counts.keys().copied().collect::<Vec<_>>(),
        [2, 4, 8, 16, 32]
    );
    assert!(
        counts.values().all(|&c| (900..1100).contains(&c)),
        "{counts:?}"
    );
}

const CONDITIONAL: &str = r#"
[[hyperparameters]]
name = "model"
type = "Choice"
values = ["linear", "dnn"]
[[hyperparameters]]
name = "layers"
type = "Int"
min_value = 1
max_value = 3
parent_name = "model"
parent_values = ["dnn"]
[[hyperparameters]]
name = "units"
type = "Choice"
values = [16, 32]
parent_name = "model"
parent_values = ["dnn"]
[[hyperparameters]]
name = "bias"
type = "Boolean"
"#;

fn point(items: &[(&str, Value)]) -> Params {
    items
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// The order of Keras Tuner 1.4.8's GridSearchOracle over the same space
/// (tests/reference/space_keras_tuner.py): 14 points, the Boolean's default (false) first.
#[test]
fn conditional_grid_matches_keras_tuner() {
    let s = space(CONDITIONAL).unwrap();
    let grid = s.grid().unwrap();
    let s_ = |x: &str| Value::Str(x.into());
    let mut want = vec![
        point(&[("bias", Value::Bool(false)), ("model", s_("linear"))]),
        point(&[("bias", Value::Bool(true)), ("model", s_("linear"))]),
    ];
    for layers in 1..=3 {
        for units in [16, 32] {
            for bias in [false, true] {
                want.push(point(&[
                    ("bias", Value::Bool(bias)),
                    ("layers", Value::Int(layers)),
                    ("model", s_("dnn")),
                    ("units", Value::Int(units)),
                ]));
            }
        }
    }
    assert_eq!(grid, want);
    assert!(grid.iter().all(|p| s.contains(p)));
    // Inactive children are absent from a random point too.
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..50 {
        let p = s.sample(&mut rng);
        assert!(s.contains(&p), "{p:?}");
        assert_eq!(p.contains_key("layers"), p["model"] == s_("dnn"));
    }
}

#[test]
fn grid_needs_steps() {
    let s = space(
        "[[hyperparameters]]\nname = \"a\"\ntype = \"Int\"\nmin_value = 1\nmax_value = 3\n[[hyperparameters]]\nname = \"lr\"\ntype = \"Float\"\nmin_value = 0.1\nmax_value = 1.0\n",
    )
    .unwrap();
    let e = s.grid().unwrap_err().to_string();
    assert!(
        e.contains("hyperparameters[1].step") && e.contains("'lr'"),
        "{e}"
    );
}

#[test]
fn defaults_and_fixed() {
    let s = space(
        r#"
[[hyperparameters]]
name = "opt"
type = "Choice"
values = ["adam", "sgd"]
default = "sgd"
[[hyperparameters]]
name = "momentum"
type = "Float"
min_value = 0.0
max_value = 0.99
default = 0.9
parent_name = "opt"
parent_values = "sgd"
[[hyperparameters]]
name = "batch"
type = "Fixed"
value = 64
key = "fit.batch_size"
"#,
    )
    .unwrap();
    assert_eq!(
        s.defaults(),
        point(&[
            ("batch", Value::Int(64)),
            ("momentum", Value::Float(0.9)),
            ("opt", Value::Str("sgd".into())),
        ])
    );
    assert_eq!(s.hyperparameters()[2].key, "fit.batch_size");
    assert_eq!(s.hyperparameters()[0].key, "opt");
}

#[test]
fn errors_name_the_key_and_the_fix() {
    let hp = |body: &str| format!("[[hyperparameters]]\nname = \"a\"\n{body}\n");
    let cases: &[(&str, &[&str])] = &[
        (
            "type = \"Float\"\nmin_value = 2.0\nmax_value = 1.0",
            &["hyperparameters[0].min_value", "greater than max_value"],
        ),
        (
            "type = \"Float\"\nmin_value = 0.0\nmax_value = 1.0\nsampling = \"log\"",
            &["hyperparameters[0].min_value", "min_value > 0"],
        ),
        (
            "type = \"Int\"\nmin_value = 1\nmax_value = 8\nstep = 1\nsampling = \"log\"",
            &["hyperparameters[0].step", "> 1"],
        ),
        (
            "type = \"Real\"",
            &["hyperparameters[0].type", "Int, Float, Choice"],
        ),
        (
            "type = \"Float\"\nmin_value = 1.0\nmax_value = 2.0\nsampling = \"exp\"",
            &["hyperparameters[0].sampling", "reverse_log"],
        ),
        (
            "type = \"Choice\"\nvalues = [1, 0.5]",
            &["hyperparameters[0].values[1]", "one type", "1.0"],
        ),
        (
            "type = \"Int\"\nmin_value = 1\nmax_value = 2\nmax = 3",
            &["hyperparameters[0].max", "unknown key", "max_value"],
        ),
        (
            "type = \"Int\"\nmin_value = 1.5\nmax_value = 2",
            &["hyperparameters[0].min_value", "integer"],
        ),
        (
            "type = \"Choice\"\nvalues = [\"x\"]\ndefault = \"y\"",
            &["hyperparameters[0].default", "not one of"],
        ),
        (
            "type = \"Boolean\"\nparent_name = \"b\"\nparent_values = [true]",
            &[
                "hyperparameters[0].parent_name",
                "define the parent earlier",
            ],
        ),
    ];
    for (body, needles) in cases {
        let e = err(&hp(body));
        for n in *needles {
            assert!(e.contains(n), "{e:?} lacks {n:?}");
        }
    }
    // A parent defined after its child.
    let e = err(
        "[[hyperparameters]]\nname = \"c\"\ntype = \"Boolean\"\nparent_name = \"p\"\nparent_values = [true]\n[[hyperparameters]]\nname = \"p\"\ntype = \"Boolean\"\n",
    );
    assert!(
        e.contains("hyperparameters[0].parent_name") && e.contains("'p'"),
        "{e}"
    );
    // Duplicate names.
    let e = err(
        "[[hyperparameters]]\nname = \"p\"\ntype = \"Boolean\"\n[[hyperparameters]]\nname = \"p\"\ntype = \"Boolean\"\n",
    );
    assert!(
        e.contains("hyperparameters[1].name") && e.contains("duplicate"),
        "{e}"
    );
    // A parent value the parent cannot take.
    let e = err(
        "[[hyperparameters]]\nname = \"p\"\ntype = \"Choice\"\nvalues = [\"a\", \"b\"]\n[[hyperparameters]]\nname = \"c\"\ntype = \"Boolean\"\nparent_name = \"p\"\nparent_values = [\"z\"]\n",
    );
    assert!(
        e.contains("hyperparameters[1].parent_values[0]") && e.contains("never be active"),
        "{e}"
    );
    // Not an array.
    let e = SearchSpace::from_toml(&toml::Value::Integer(3))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("hyperparameters: expected an array"), "{e}");
}

#[test]
fn stepped_indices_round_trip_without_listing() {
    let s = space(&format!(
        "{KERAS_CASES}\n[[hyperparameters]]\nname = \"f_lin\"\ntype = \"Float\"\nmin_value = 0.0\nmax_value = 1.0\nstep = 0.2\n[[hyperparameters]]\nname = \"i_rev\"\ntype = \"Int\"\nmin_value = 1\nmax_value = 1000\nstep = 10\nsampling = \"reverse_log\"\n"
    ))
    .unwrap();
    for name in [
        "int_log_step",
        "int_lin",
        "float_step_log",
        "f_lin",
        "i_rev",
    ] {
        let hp = s.get(name).unwrap();
        let values = hp.discrete_values().unwrap();
        assert_eq!(hp.n_values(), Some(values.len()), "{name}");
        for (i, v) in values.iter().enumerate() {
            assert_eq!(hp.step_index(v), Some(i), "{name} {v:?}");
            assert_eq!(hp.step_value(i).as_ref(), Some(v), "{name}");
            assert!(hp.contains(v));
        }
        assert_eq!(hp.step_value(values.len()), None);
    }
    // reverse_log with a multiplying step: 1000 + 1 − 1·10^i.
    let rev = s.get("i_rev").unwrap().discrete_values().unwrap();
    assert_eq!(ints(&rev), [1000, 991, 901, 1]);
    // Off-grid values are not in the space.
    assert!(!s.get("int_lin").unwrap().contains(&Value::Int(7)));
    assert!(!s.get("f_lin").unwrap().contains(&Value::Float(0.3)));
    assert!(!s.get("int_log_step").unwrap().contains(&Value::Int(6)));
    // A huge range is answered arithmetically (listing it would not fit in memory).
    let big = space(
        "[[hyperparameters]]\nname = \"n\"\ntype = \"Int\"\nmin_value = 0\nmax_value = 1000000000000\nstep = 3\n",
    )
    .unwrap();
    let hp = &big.hyperparameters()[0];
    assert_eq!(hp.n_values(), Some(333_333_333_334));
    assert!(hp.contains(&Value::Int(300_000_000_000)));
    assert!(!hp.contains(&Value::Int(300_000_000_001)));
    assert_eq!(
        hp.step_value(100_000_000_000),
        Some(Value::Int(300_000_000_000))
    );
    assert!(
        big.grid()
            .unwrap_err()
            .to_string()
            .contains("grid grows past")
    );
}

#[test]
fn two_hyperparameters_setting_one_key_must_be_alternatives() {
    let two = r#"
[[hyperparameters]]
name = "lr"
key = "compile.optimizer.learning_rate"
type = "Choice"
values = [0.1, 0.01]
[[hyperparameters]]
name = "lr2"
key = "compile.optimizer.learning_rate"
type = "Choice"
values = [0.5]
"#;
    let e = err(two);
    assert!(
        e.contains("hyperparameters[0] \"lr\" and hyperparameters[1] \"lr2\" both set key \"compile.optimizer.learning_rate\""),
        "{e}"
    );
    // Conditional alternatives (same parent, disjoint values) may share a key.
    let alt = r#"
[[hyperparameters]]
name = "opt"
type = "Choice"
values = ["adam", "sgd"]
[[hyperparameters]]
name = "adam_lr"
key = "lr"
type = "Choice"
values = [0.001]
parent_name = "opt"
parent_values = ["adam"]
[[hyperparameters]]
name = "sgd_lr"
key = "lr"
type = "Choice"
values = [0.1]
parent_name = "opt"
parent_values = ["sgd"]
"#;
    assert!(space(alt).is_ok());
    let e = err(&alt.replace(
        "parent_values = [\"sgd\"]",
        "parent_values = [\"sgd\", \"adam\"]",
    ));
    assert!(e.contains("both set key \"lr\""), "{e}");
}

#[test]
fn messages_show_values_as_toml() {
    let e = err(r#"
[[hyperparameters]]
name = "opt"
type = "Choice"
values = ["Adam", "RMSprop", "Adam"]
"#);
    assert!(e.contains("duplicate value \"Adam\""), "{e}");
    let e = err(r#"
[[hyperparameters]]
name = "lr"
type = "Choice"
values = [1.0, 2.0]
default = 5.0
"#);
    assert!(e.contains("5.0 is not one of the values [1.0, 2.0]"), "{e}");
    assert!(!e.contains("Float("), "{e}");
}
