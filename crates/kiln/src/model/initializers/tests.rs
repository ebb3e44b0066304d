//! Initializer tests against Keras 3's draws (tests/reference/initializers_reference.py writes
//! crates/kiln/tests/data/initializers_reference.json), and the reference-file helpers the
//! regularizer and constraint tests share.

use burn::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::*;

/// The known answers Keras recorded.
pub(crate) fn reference() -> serde_json::Value {
    serde_json::from_str(include_str!(
        "../../../tests/data/initializers_reference.json"
    ))
    .expect("the reference file is JSON")
}

/// A case's fixed input tensor as host values (row-major).
pub(crate) fn input(case: &serde_json::Value) -> Vec<f32> {
    let values: Vec<f64> = serde_json::from_value(case["input"].clone()).unwrap();
    values.into_iter().map(|v| v as f32).collect()
}

/// A case's fixed input tensor on the CPU device, shape `case["shape"]` of rank `D`.
pub(crate) fn tensor<const D: usize>(case: &serde_json::Value) -> Tensor<D> {
    let shape: Vec<usize> = serde_json::from_value(case["shape"].clone()).unwrap();
    assert_eq!(shape.len(), D);
    Tensor::from_data(TensorData::new(input(case), shape), &Device::flex())
}

fn parse(text: &str) -> Result<Initializer> {
    let table: toml::Table = toml::from_str(&format!("i = {text}")).unwrap();
    Initializer::from_toml(&table["i"], "model.layers[0].kernel_initializer")
}

fn draw(init: &Initializer, shape: &[usize], seed: u64) -> Vec<f32> {
    init.sample(shape, &mut StdRng::seed_from_u64(seed))
        .unwrap()
}

/// (mean, std, min, max) in f64.
fn moments(w: &[f32]) -> [f64; 4] {
    let n = w.len() as f64;
    let mean = w.iter().map(|v| f64::from(*v)).sum::<f64>() / n;
    let var = w
        .iter()
        .map(|v| (f64::from(*v) - mean).powi(2))
        .sum::<f64>()
        / n;
    let min = w.iter().fold(f64::INFINITY, |m, v| m.min(f64::from(*v)));
    let max = w
        .iter()
        .fold(f64::NEG_INFINITY, |m, v| m.max(f64::from(*v)));
    [mean, var.sqrt(), min, max]
}

/// What the formula says: (mean, std, bounds of the support when it has some).
fn expected(init: &Initializer, shape: &[usize]) -> (f64, f64, Option<(f64, f64)>) {
    let n = shape.iter().product::<usize>() as f64;
    if let Some((scale, mode, distribution)) = init.variance_scaling() {
        let (fan_in, fan_out) = compute_fans(shape);
        let fan = match mode {
            FanMode::FanIn => fan_in as f64,
            FanMode::FanOut => fan_out as f64,
            FanMode::FanAvg => (fan_in + fan_out) as f64 / 2.0,
        };
        let std = (scale / fan).sqrt();
        let bound = match distribution {
            ScalingDistribution::Uniform => Some(std * 3f64.sqrt()),
            ScalingDistribution::TruncatedNormal => Some(2.0 * std / TRUNCATION_STDDEV),
            ScalingDistribution::UntruncatedNormal => None,
        };
        return (0.0, std, bound.map(|b| (-b, b)));
    }
    match *init {
        Initializer::RandomNormal { mean, stddev, .. } => (mean, stddev, None),
        Initializer::TruncatedNormal { mean, stddev, .. } => (
            mean,
            stddev * TRUNCATION_STDDEV,
            Some((mean - 2.0 * stddev, mean + 2.0 * stddev)),
        ),
        Initializer::RandomUniform { minval, maxval, .. } => (
            (minval + maxval) / 2.0,
            (maxval - minval) / 12f64.sqrt(),
            Some((minval, maxval)),
        ),
        Initializer::Orthogonal { gain, .. } => {
            // gain^2 * min(rows, cols) spread over n entries.
            let cols = shape[shape.len() - 1] as f64;
            let rows = n / cols;
            (0.0, gain * (rows.min(cols) / n).sqrt(), None)
        }
        Initializer::Identity { gain } => {
            let diag = shape[0].min(shape[1]) as f64;
            let mean = gain * diag / n;
            (mean, (gain * gain * diag / n - mean * mean).sqrt(), None)
        }
        Initializer::Zeros => (0.0, 0.0, Some((0.0, 0.0))),
        Initializer::Ones => (1.0, 0.0, Some((1.0, 1.0))),
        Initializer::Constant { value } => (value, 0.0, Some((value, value))),
        _ => unreachable!(),
    }
}

#[test]
fn moments_match_keras_and_the_formula() {
    let cases = reference()["initializers"].as_array().unwrap().clone();
    assert_eq!(cases.len(), 39);
    for case in &cases {
        let config: toml::Value = serde_json::from_value(case["config"].clone()).unwrap();
        let init = Initializer::from_toml(&config, "i").unwrap();
        let shape: Vec<usize> = serde_json::from_value(case["shape"].clone()).unwrap();
        let keras = ["mean", "std", "min", "max"].map(|k| case[k].as_f64().unwrap());
        let ours = moments(&draw(&init, &shape, 1));
        let (mean, std, bounds) = expected(&init, &shape);
        let n = shape.iter().product::<usize>() as f64;
        // Five standard errors of the sample mean and of the sample std.
        let mean_tol = 5.0 * std / n.sqrt() + 1e-7;
        let std_tol = 5.0 * std / (2.0 * n).sqrt() + 1e-7;
        let what = format!("{config} {shape:?}");
        for (who, m) in [("Keras", keras), ("kiln", ours)] {
            assert!(
                (m[0] - mean).abs() <= mean_tol,
                "{what}: {who} mean {} vs {mean}",
                m[0]
            );
            assert!(
                (m[1] - std).abs() <= std_tol,
                "{what}: {who} std {} vs {std}",
                m[1]
            );
            if let Some((lo, hi)) = bounds {
                // Within the support (float32 rounding aside) and reaching near its ends.
                let slack = 1e-6 * hi.abs().max(lo.abs()).max(1.0);
                let reach = 0.01 * (hi - lo);
                assert!(
                    m[2] >= lo - slack && m[2] <= lo + reach,
                    "{what}: {who} min {}",
                    m[2]
                );
                assert!(
                    m[3] <= hi + slack && m[3] >= hi - reach,
                    "{what}: {who} max {}",
                    m[3]
                );
            }
        }
    }
}

#[test]
fn constants_are_exact() {
    let shape = [3, 3, 2, 4];
    assert!(
        draw(&parse("\"zeros\"").unwrap(), &shape, 0)
            .iter()
            .all(|v| *v == 0.0)
    );
    assert!(
        draw(&parse("\"one\"").unwrap(), &shape, 0)
            .iter()
            .all(|v| *v == 1.0)
    );
    let c = parse("{ class_name = \"Constant\", value = -0.75 }").unwrap();
    let w = draw(&c, &shape, 0);
    assert_eq!(w.len(), 72);
    assert!(w.iter().all(|v| *v == -0.75));
    let eye = draw(
        &parse("{ class_name = \"Identity\", gain = 2 }").unwrap(),
        &[2, 3],
        0,
    );
    assert_eq!(eye, [2.0, 0.0, 0.0, 0.0, 2.0, 0.0]);
    // An array value: the weight's values (keras.io PointNet's identity bias), or its last
    // axis repeated (Keras broadcasts `value * ones(shape)`); other sizes are refused.
    let identity = parse("{ class_name = \"Constant\", value = [1, 0, 0, 1] }").unwrap();
    assert_eq!(draw(&identity, &[4], 0), [1.0, 0.0, 0.0, 1.0]);
    let row = parse("{ class_name = \"Constant\", value = [0.5, -2] }").unwrap();
    assert_eq!(draw(&row, &[3, 2], 0), [0.5, -2.0, 0.5, -2.0, 0.5, -2.0]);
    let e = identity
        .sample(&[3, 3], &mut StdRng::seed_from_u64(0))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("has 4 values, which fit neither the weight's 9 values nor its last axis of 3"),
        "{e}"
    );
    let written = toml::Value::try_from(&identity).unwrap();
    assert_eq!(Initializer::from_toml(&written, "k").unwrap(), identity);
}

/// max |W'^T W' - gain^2 I| with W' the weight as a [rows, cols] matrix, transposed first
/// when rows < cols (then its rows are the orthonormal ones).
fn orthogonality_error(w: &[f32], shape: &[usize], gain: f64) -> f64 {
    let cols = shape[shape.len() - 1];
    let rows = w.len() / cols;
    let at = |i: usize, j: usize| {
        f64::from(if rows >= cols {
            w[i * cols + j]
        } else {
            w[j * cols + i]
        })
    };
    let (tall, narrow) = (rows.max(cols), rows.min(cols));
    let mut worst = 0.0f64;
    for a in 0..narrow {
        for b in 0..narrow {
            let dot: f64 = (0..tall).map(|i| at(i, a) * at(i, b)).sum();
            let want = if a == b { gain * gain } else { 0.0 };
            worst = worst.max((dot - want).abs());
        }
    }
    worst
}

#[test]
fn orthogonal_is_orthogonal_for_square_tall_wide_and_conv_shapes() {
    for (gain, shape) in [
        (1.0, vec![64, 64]),
        (2.0, vec![100, 30]),
        (0.5, vec![20, 70]),
        (1.0, vec![3, 3, 16, 32]),
        (1.5, vec![3, 3, 2, 64]),
    ] {
        let init = Initializer::Orthogonal { gain, seed: None };
        let w = draw(&init, &shape, 7);
        assert_eq!(w.len(), shape.iter().product::<usize>());
        let err = orthogonality_error(&w, &shape, gain);
        assert!(err <= 1e-4, "{shape:?} gain {gain}: W^T W off by {err}");
    }
    let err = Initializer::Orthogonal {
        gain: 1.0,
        seed: None,
    }
    .sample(&[5], &mut StdRng::seed_from_u64(0))
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("orthogonal needs a weight of rank 2"),
        "{err}"
    );
    let err = parse("\"identity\"")
        .unwrap()
        .sample(&[3, 3, 1], &mut StdRng::seed_from_u64(0));
    assert!(err.unwrap_err().to_string().contains("rank-2"));
}

#[test]
fn a_seed_fixes_the_draws_and_leaves_the_generator_alone() {
    let shape = [3, 3, 4, 8];
    for name in [
        "glorot_uniform",
        "glorot_normal",
        "he_normal",
        "he_uniform",
        "lecun_normal",
        "lecun_uniform",
        "variance_scaling",
        "orthogonal",
        "random_normal",
        "random_uniform",
        "truncated_normal",
    ] {
        let seeded =
            |seed: u64| parse(&format!("{{ class_name = \"{name}\", seed = {seed} }}")).unwrap();
        let mut rng = StdRng::seed_from_u64(99);
        let a = seeded(3).sample(&shape, &mut rng).unwrap();
        let b = seeded(3)
            .sample(&shape, &mut StdRng::seed_from_u64(5))
            .unwrap();
        assert_eq!(a, b, "{name}: same seed, same values");
        assert_ne!(
            a,
            draw(&seeded(4), &shape, 0),
            "{name}: another seed, other values"
        );
        // The generator passed in was not advanced.
        assert_eq!(
            rng.random::<u64>(),
            StdRng::seed_from_u64(99).random::<u64>()
        );
        // Unseeded: the generator decides.
        let unseeded = parse(&format!("\"{name}\"")).unwrap();
        assert_eq!(
            draw(&unseeded, &shape, 8),
            draw(&unseeded, &shape, 8),
            "{name}"
        );
        assert_ne!(
            draw(&unseeded, &shape, 8),
            draw(&unseeded, &shape, 9),
            "{name}"
        );
    }
}

#[test]
fn glorot_uniform_draws_what_init_glorot_uniform_draws() {
    for shape in [
        vec![784, 128],
        vec![3, 3, 16, 32],
        vec![5, 5, 1, 6],
        vec![7, 1],
    ] {
        let (fan_in, fan_out) = compute_fans(&shape);
        let n = shape.iter().product();
        let old =
            crate::model::init::glorot_uniform(&mut StdRng::seed_from_u64(42), n, fan_in, fan_out);
        assert_eq!(old, draw(&Initializer::default(), &shape, 42), "{shape:?}");
    }
}

#[test]
fn fans_are_keras_compute_fans() {
    assert_eq!(compute_fans(&[]), (1, 1));
    assert_eq!(compute_fans(&[7]), (7, 7));
    assert_eq!(compute_fans(&[784, 128]), (784, 128));
    assert_eq!(compute_fans(&[3, 3, 16, 32]), (144, 288));
    assert_eq!(compute_fans(&[5, 8, 4]), (40, 20));
}

#[test]
fn names_aliases_and_tables_are_read() {
    assert_eq!(Initializer::default().name(), "glorot_uniform");
    for (text, want) in [
        (
            "\"glorot_uniform\"",
            Initializer::GlorotUniform { seed: None },
        ),
        (
            "\"GlorotUniform\"",
            Initializer::GlorotUniform { seed: None },
        ),
        ("\"HeNormal\"", Initializer::HeNormal { seed: None }),
        (
            "\"normal\"",
            Initializer::RandomNormal {
                mean: 0.0,
                stddev: 0.05,
                seed: None,
            },
        ),
        (
            "\"uniform\"",
            Initializer::RandomUniform {
                minval: -0.05,
                maxval: 0.05,
                seed: None,
            },
        ),
        ("\"zero\"", Initializer::Zeros),
        (
            "\"OrthogonalInitializer\"",
            Initializer::Orthogonal {
                gain: 1.0,
                seed: None,
            },
        ),
        (
            "\"variance_scaling\"",
            Initializer::VarianceScaling {
                scale: 1.0,
                mode: FanMode::FanIn,
                distribution: ScalingDistribution::TruncatedNormal,
                seed: None,
            },
        ),
        (
            "{ class_name = \"VarianceScaling\", scale = 2.0, mode = \"fan_in\", \
             distribution = \"truncated_normal\", seed = 3 }",
            Initializer::VarianceScaling {
                scale: 2.0,
                mode: FanMode::FanIn,
                distribution: ScalingDistribution::TruncatedNormal,
                seed: Some(3),
            },
        ),
        (
            "{ class_name = \"VarianceScaling\", config = { mode = \"fan_avg\", \
             distribution = \"Normal\" } }",
            Initializer::VarianceScaling {
                scale: 1.0,
                mode: FanMode::FanAvg,
                distribution: ScalingDistribution::TruncatedNormal,
                seed: None,
            },
        ),
        (
            "{ class_name = \"he_uniform\", seed = 0 }",
            Initializer::HeUniform { seed: Some(0) },
        ),
    ] {
        assert_eq!(parse(text).unwrap(), want, "{text}");
    }
}

#[test]
fn serializes_to_the_table_it_reads() {
    for init in [
        Initializer::GlorotUniform { seed: None },
        Initializer::LecunNormal { seed: Some(9) },
        Initializer::VarianceScaling {
            scale: 0.5,
            mode: FanMode::FanOut,
            distribution: ScalingDistribution::Uniform,
            seed: Some(1),
        },
        Initializer::TruncatedNormal {
            mean: 0.1,
            stddev: 0.3,
            seed: None,
        },
        Initializer::Zeros,
        Initializer::Constant { value: 0.5 },
        Initializer::Identity { gain: 2.0 },
    ] {
        let value = toml::Value::try_from(&init).unwrap();
        assert_eq!(
            snake_case(value["class_name"].as_str().unwrap()),
            init.name()
        );
        assert_eq!(
            value.get("seed").and_then(|s| s.as_integer()),
            init.seed().map(|s| s as i64)
        );
        assert_eq!(Initializer::from_toml(&value, "k").unwrap(), init);
        let via_serde: Initializer = value.try_into().unwrap();
        assert_eq!(via_serde, init);
    }
    let vs = toml::Value::try_from(Initializer::VarianceScaling {
        scale: 2.0,
        mode: FanMode::FanAvg,
        distribution: ScalingDistribution::UntruncatedNormal,
        seed: None,
    })
    .unwrap();
    assert_eq!(vs["mode"].as_str(), Some("fan_avg"));
    assert_eq!(vs["distribution"].as_str(), Some("untruncated_normal"));
}

#[test]
fn bad_values_name_the_key() {
    let key = "model.layers[0].kernel_initializer";
    for (text, field, words) in [
        (
            "\"glorot\"",
            "",
            "unknown name \"glorot\"; allowed: glorot_uniform",
        ),
        ("{ class_name = 3 }", ".class_name", "expected a string"),
        ("{ seed = 3 }", ".class_name", "missing"),
        ("[1]", "", "expected an initializer name or a table"),
        (
            "{ class_name = \"VarianceScaling\", scale = -1.0 }",
            ".scale",
            "positive",
        ),
        (
            "{ class_name = \"VarianceScaling\", scale = 0 }",
            ".scale",
            "positive",
        ),
        (
            "{ class_name = \"VarianceScaling\", mode = \"fan\" }",
            ".mode",
            "unknown mode",
        ),
        (
            "{ class_name = \"VarianceScaling\", distribution = \"cauchy\" }",
            ".distribution",
            "unknown distribution",
        ),
        (
            "{ class_name = \"RandomNormal\", stddev = 0 }",
            ".stddev",
            "positive",
        ),
        (
            "{ class_name = \"TruncatedNormal\", stddev = -0.1 }",
            ".stddev",
            "positive",
        ),
        (
            "{ class_name = \"RandomUniform\", minval = 1, maxval = 0 }",
            ".maxval",
            "at least",
        ),
        (
            "{ class_name = \"GlorotUniform\", seed = -1 }",
            ".seed",
            "at least 0",
        ),
        (
            "{ class_name = \"GlorotUniform\", seed = 1.5 }",
            ".seed",
            "integer",
        ),
        (
            "{ class_name = \"Orthogonal\", gain = nan }",
            ".gain",
            "finite",
        ),
        (
            "{ class_name = \"Constant\", value = \"x\" }",
            ".value",
            "expected a number",
        ),
        (
            "{ class_name = \"Constant\", value = [] }",
            ".value",
            "at least one number",
        ),
        (
            "{ class_name = \"Constant\", value = [1, \"x\"] }",
            ".value",
            "expected finite numbers",
        ),
        (
            "{ class_name = \"HeNormal\", scale = 2.0 }",
            ".scale",
            "allowed: seed",
        ),
        (
            "{ class_name = \"Zeros\", value = 1 }",
            ".value",
            "takes no arguments",
        ),
        (
            "{ class_name = \"Ones\", config = 1 }",
            ".config",
            "table of arguments",
        ),
    ] {
        let err = parse(text).unwrap_err();
        assert!(matches!(err, KilnError::Config { .. }), "{text}: {err:?}");
        let err = err.to_string();
        assert!(err.starts_with(&format!("{key}{field}: ")), "{text}: {err}");
        assert!(err.contains(words), "{text}: {err}");
    }
    // Through serde, the key is `initializer`.
    let err = toml::from_str::<std::collections::BTreeMap<String, Initializer>>("i = \"he\"")
        .unwrap_err()
        .to_string();
    assert!(err.contains("initializer: unknown name \"he\""), "{err}");
}
