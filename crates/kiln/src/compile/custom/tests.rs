//! The registries: names taken, unknown names listed, arguments read and written back, and the
//! registered loss and metric computed where kiln computes the built-in ones.

use std::sync::Once;

use super::*;
use crate::compile::{MetricKind, correct};

/// `Σ |output - target|` over the units, scaled (dense labels): a loss whose every value a test
/// can work out by hand.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestAbsLoss {
    #[serde(default = "one")]
    scale: f64,
}

fn one() -> f64 {
    1.0
}

impl Loss for TestAbsLoss {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn config(&self) -> toml::Table {
        crate::model::config_table(self)
    }
    fn labels(&self) -> LabelKind {
        LabelKind::Dense
    }
    fn per_example(&self, output: Tensor<2>, _: Option<Tensor<2>>, labels: &Labels) -> Tensor<1> {
        let Labels::Dense(y) = labels else {
            unreachable!("dense labels")
        };
        let [b, _] = output.dims();
        (output - y.clone())
            .abs()
            .sum_dim(1)
            .mul_scalar(self.scale)
            .reshape([b])
    }
}

impl LossConfig for TestAbsLoss {
    const NAME: &'static str = "test_abs_loss";
    fn validate(&self) -> std::result::Result<(), String> {
        if self.scale > 0.0 {
            Ok(())
        } else {
            Err(format!("scale must be > 0, got {}", self.scale))
        }
    }
}

/// The share of examples whose first output is the largest.
#[derive(Debug, Default, Deserialize)]
struct TestFirstWins {}

impl Metric for TestFirstWins {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn update(&self, batch: &MetricBatch) -> f64 {
        batch
            .rows()
            .filter(|r| crate::compile::argmax(r) == 0)
            .count() as f64
    }
}

impl MetricConfig for TestFirstWins {
    const NAME: &'static str = "test_first_wins";
}

fn registered() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        register_loss::<TestAbsLoss>().unwrap();
        register_metric::<TestFirstWins>().unwrap();
    });
}

fn parse(text: &str) -> Result<LossSpec> {
    let v: toml::Table = toml::from_str(&format!("loss = {text}")).unwrap();
    LossSpec::from_toml(&v["loss"])
}

fn t2(v: &[f32], shape: [usize; 2]) -> Tensor<2> {
    Tensor::from_data(TensorData::new(v.to_vec(), shape), &Device::flex())
}

#[test]
fn a_registered_loss_is_read_by_name_or_table_and_written_back() {
    registered();
    let plain = parse("\"test_abs_loss\"").unwrap();
    assert_eq!(plain.name(), "test_abs_loss");
    assert!(!plain.sparse_labels() && !plain.from_logits);
    let scaled = parse("{ type = \"test_abs_loss\", scale = 2.0 }").unwrap();
    assert_ne!(plain, scaled);
    assert_eq!(
        scaled,
        parse("{ type = \"test_abs_loss\", scale = 2.0 }").unwrap()
    );
    let written = scaled.to_toml();
    assert_eq!(written["type"].as_str(), Some("test_abs_loss"));
    assert_eq!(written["scale"].as_float(), Some(2.0));
    assert_eq!(LossSpec::from_toml(&written).unwrap(), scaled);
    // Built-in losses are written as before.
    let mse = parse("\"mse\"").unwrap().to_toml();
    assert_eq!(mse["type"].as_str(), Some("mean_squared_error"));
    assert_eq!(mse["from_logits"].as_bool(), Some(false));
}

#[test]
fn a_registered_loss_is_reduced_like_the_built_in_ones() {
    registered();
    let spec = parse("{ type = \"test_abs_loss\", scale = 0.5 }").unwrap();
    let out = t2(&[1.0, 0.0, 0.5, 0.5], [2, 2]);
    let y = Labels::Dense(t2(&[0.0, 1.0, 0.0, 1.0], [2, 2]));
    // Per example: 0.5 * (1 + 1) = 1, 0.5 * (0.5 + 0.5) = 0.5.
    let per = spec.per_example(out.clone(), None, &y).into_data();
    assert_eq!(per.try_to_vec::<f32>().unwrap(), vec![1.0, 0.5]);
    // sum_over_batch_size with weights [2, 0]: (2 * 1 + 0) / 2.
    let w = Tensor::from_data(TensorData::new(vec![2.0f32, 0.0], [2]), &Device::flex());
    let loss = spec.compute_weighted(out, None, &y, Some(&w));
    assert_eq!(loss.into_scalar::<f32>(), 1.0);
}

#[test]
fn bad_arguments_and_unknown_names_are_config_errors_naming_them() {
    registered();
    let e = parse("{ type = \"test_abs_loss\", scale = -1.0 }")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "compile.loss (test_abs_loss): scale must be > 0, got -1");
    let e = parse("{ type = \"test_abs_loss\", scal = 1.0 }")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("compile.loss (test_abs_loss): unknown field `scal`"),
        "{e}"
    );
    let e = parse("\"test_abs\"").unwrap_err().to_string();
    assert!(
        e.starts_with(
            "compile.loss.type: unknown loss \"test_abs\"; allowed: sparse_categorical_crossentropy"
        ),
        "{e}"
    );
    assert!(e.contains(", test_abs_loss"), "{e}");
    let e = MetricSpec::parse("first_wins", 1, LossKind::MeanSquaredError, 3)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("compile.metrics[1]: unknown metric \"first_wins\"; allowed: accuracy"),
        "{e}"
    );
    assert!(e.contains(", test_first_wins"), "{e}");
}

#[test]
fn taken_names_cannot_be_registered() {
    registered();
    let e = register_loss::<TestAbsLoss>().unwrap_err().to_string();
    assert_eq!(
        e,
        "loss registration: a loss named \"test_abs_loss\" is already registered; give yours \
         another name"
    );
    let e = register_metric::<TestFirstWins>().unwrap_err().to_string();
    assert!(
        e.contains("a metric named \"test_first_wins\" is already registered"),
        "{e}"
    );

    #[derive(Debug, Deserialize)]
    struct Mse {}
    impl Loss for Mse {
        fn name(&self) -> &'static str {
            "mse"
        }
        fn config(&self) -> toml::Table {
            toml::Table::new()
        }
        fn labels(&self) -> LabelKind {
            LabelKind::Dense
        }
        fn per_example(&self, o: Tensor<2>, _: Option<Tensor<2>>, _: &Labels) -> Tensor<1> {
            o.sum_dim(1).reshape([0])
        }
    }
    impl LossConfig for Mse {
        const NAME: &'static str = "mse";
    }
    let e = register_loss::<Mse>().unwrap_err().to_string();
    assert!(
        e.contains("a loss named \"mse\" is already registered (built in)"),
        "{e}"
    );

    #[derive(Debug, Deserialize)]
    struct Acc {}
    impl Metric for Acc {
        fn name(&self) -> &'static str {
            "acc"
        }
        fn update(&self, _: &MetricBatch) -> f64 {
            0.0
        }
    }
    impl MetricConfig for Acc {
        const NAME: &'static str = "acc";
    }
    let e = register_metric::<Acc>().unwrap_err().to_string();
    assert!(
        e.contains("a metric named \"acc\" is already registered (built in)"),
        "{e}"
    );
}

#[test]
fn a_registered_metric_counts_where_the_built_in_ones_do() {
    registered();
    let m = MetricSpec::parse("test_first_wins", 0, LossKind::MeanSquaredError, 2).unwrap();
    assert_eq!(m.name, "test_first_wins");
    let MetricKind::Custom(kind) = m.kind else {
        panic!("{m:?}")
    };
    assert_eq!(kind.name(), "test_first_wins");
    let outputs = [0.9, 0.1, 0.2, 0.8, 0.6, 0.4];
    assert_eq!(correct(m.kind, &outputs, 2, &[0, 1, 0], &[]), 2.0);
}
