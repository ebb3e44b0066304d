//! The epoch accumulator's metric slots: a streaming metric keeps several sums next to the
//! one-sum metrics, and a metric with one value per class logs `<name>_<class>`.

use super::{Logs, add_sums, set_metrics, widths};
use crate::compile::{LossKind, MetricSpec, batch_sums};

fn spec(name: &str) -> MetricSpec {
    MetricSpec::parse(name, 0, LossKind::BinaryCrossentropy, 2).unwrap()
}

#[test]
fn streaming_sums_sit_between_one_sum_metrics() {
    let metrics = [spec("binary_accuracy"), spec("f1_score"), spec("precision")];
    assert_eq!(widths(&metrics, 2), 1 + 8 + 3);
    let mut slots = vec![0.0; widths(&metrics, 2)];
    // Two batches of two rows, sums per batch; sequence positions would divide them all.
    let batches = [
        ([0.9, 0.2, 0.3, 0.7], [1.0, 0.0, 1.0, 1.0]),
        ([0.6, 0.4, 0.1, 0.8], [0.0, 1.0, 0.0, 1.0]),
    ];
    for (outputs, targets) in &batches {
        add_sums(&mut slots, &metrics, 1.0, |m| {
            batch_sums(m.kind, outputs, 2, &[], targets)
        });
    }
    let mut logs = Logs::default();
    set_metrics(&mut logs, "out_", (&metrics, 2), &slots, 4.0);
    let keys: Vec<&str> = logs.0.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "out_binary_accuracy",
            "out_f1_score_0",
            "out_f1_score_1",
            "out_precision"
        ]
    );
    // binary accuracy: 5 of 8 units; precision at 0.5: tp 3 (0.9, 0.7, 0.8), fp 1 (0.6).
    assert_eq!(logs.get("out_binary_accuracy"), Some(5.0 / 8.0));
    assert_eq!(logs.get("out_precision"), Some(0.75));
    // f1 without threshold: row argmax; class 0 tp 1 fp 1 fn 1, class 1 tp 2 fp 0 fn 1.
    let f1 = |tp: f64, fp: f64, fneg: f64| {
        let (p, r) = (tp / (tp + fp + 1e-7), tp / (tp + fneg + 1e-7));
        2.0 * p * r / (p + r + 1e-7)
    };
    assert_eq!(logs.get("out_f1_score_0"), Some(f1(1.0, 1.0, 1.0)));
    assert_eq!(logs.get("out_f1_score_1"), Some(f1(2.0, 0.0, 1.0)));
    // Before any batch there are no sums, and nothing is logged.
    let mut empty = Logs::default();
    set_metrics(&mut empty, "", (&metrics, 2), &[], 0.0);
    assert!(empty.0.is_empty());
}
