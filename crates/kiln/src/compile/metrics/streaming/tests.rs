//! Streaming metrics against Keras 3.15 over three batches (3, 2 and 3 rows of 3 units), the
//! value after each batch as `fit` reports it (`tests/reference/metrics_reference.py`). The
//! epoch values differ from the means of the batch values (printed by the script too).

use crate::compile::LossKind;
use crate::compile::metrics::{MetricKind, MetricSpec, batch_sums};

#[rustfmt::skip]
const PROBS: [f32; 24] = [
    0.9, 0.2, 0.55, 0.4, 0.65, 0.1, 0.3, 0.3, 0.8,
    0.05, 0.5, 0.45, 0.7, 0.35, 0.6,
    0.15, 0.95, 0.25, 0.6, 0.1, 0.3, 0.5, 0.75, 0.0,
];
#[rustfmt::skip]
const LABELS: [f32; 24] = [
    1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0,
    0.0, 0.0, 1.0, 1.0, 1.0, 0.0,
    0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0,
];
#[rustfmt::skip]
const REG_Y: [f32; 24] = [
    1.0, -0.5, 2.0, 0.3, 0.05, -1.2, 2.5, 1.0, 0.4,
    -0.7, 0.9, 1.5, 0.2, -1.1, 0.6,
    1.3, 0.4, -0.2, 0.8, 0.0, 2.2, -0.4, 0.7, 1.0,
];
#[rustfmt::skip]
const REG_P: [f32; 24] = [
    0.8, 0.1, 2.6, 0.2, 0.5, -3.0, 0.5, 1.1, 0.7,
    -0.2, 2.4, 1.45, 0.0, -0.9, 0.3,
    1.0, 0.6, 0.1, 1.1, -0.3, 1.8, 0.1, 0.2, 0.9,
];
const BATCHES: [(usize, usize); 3] = [(0, 3), (3, 5), (5, 8)];

fn metric(text: &str) -> MetricSpec {
    let v: toml::Table = toml::from_str(&format!("m = {text}")).unwrap();
    MetricSpec::from_toml_at(
        &v["m"],
        "compile.metrics[0]",
        LossKind::BinaryCrossentropy,
        3,
    )
    .unwrap()
}

fn error(text: &str) -> String {
    let v: toml::Table = toml::from_str(&format!("m = {text}")).unwrap();
    MetricSpec::from_toml_at(
        &v["m"],
        "compile.metrics[1]",
        LossKind::BinaryCrossentropy,
        3,
    )
    .unwrap_err()
    .to_string()
}

/// The metric's value(s) after each batch, its sums kept over the batches.
fn streamed(kind: MetricKind, outputs: &[f32], targets: &[f32]) -> Vec<Vec<f64>> {
    let mut sums = vec![0.0; kind.width(3)];
    BATCHES
        .iter()
        .map(|&(a, b)| {
            let batch = batch_sums(kind, &outputs[a * 3..b * 3], 3, &[], &targets[a * 3..b * 3]);
            for (s, x) in sums.iter_mut().zip(batch) {
                *s += x;
            }
            kind.values(&sums, b as f64)
        })
        .collect()
}

fn assert_keras(text: &str, got: &[Vec<f64>], keras: &[&[f64]]) {
    assert_eq!(got.len(), keras.len(), "{text}");
    for (g, k) in got.iter().zip(keras) {
        assert_eq!(g.len(), k.len(), "{text}: {got:?} vs Keras {keras:?}");
        for (g, k) in g.iter().zip(*k) {
            assert!((g - k).abs() <= 1e-6, "{text}: {got:?} vs Keras {keras:?}");
        }
    }
}

#[test]
#[allow(clippy::excessive_precision)]
fn classification_metrics_stream_like_keras() {
    let cases: [(&str, [f64; 3]); 20] = [
        (
            "\"precision\"",
            [0.75, 0.6666666865348816, 0.6666666865348816],
        ),
        ("\"recall\"", [0.75, 0.5714285969734192, 0.5454545617103577]),
        (
            "{ type = \"Precision\", thresholds = 0.3 }",
            [0.6000000238418579, 0.6000000238418579, 0.6428571343421936],
        ),
        (
            "{ type = \"recall\", thresholds = 0.7 }",
            [0.25, 0.1428571492433548, 0.27272728085517883],
        ),
        (
            "{ type = \"precision\", top_k = 1 }",
            [0.6666666865348816, 0.6000000238418579, 0.625],
        ),
        (
            "{ type = \"recall\", top_k = 2 }",
            [1.0, 0.8571428656578064, 0.9090909361839294],
        ),
        ("{ type = \"precision\", class_id = 1 }", [1.0, 1.0, 1.0]),
        (
            "{ type = \"Recall\", class_id = 0, top_k = 1 }",
            [0.5, 0.6666666865348816, 0.5],
        ),
        (
            "\"auc\"",
            [0.7749999761581421, 0.7232142686843872, 0.7937063574790955],
        ),
        (
            "{ type = \"AUC\", curve = \"PR\" }",
            [0.7227427363395691, 0.6730477213859558, 0.7432371377944946],
        ),
        (
            "{ type = \"auc\", curve = \"PR\", num_thresholds = 10 }",
            [0.7227427363395691, 0.6648374199867249, 0.7308574914932251],
        ),
        (
            "{ type = \"auc\", summation_method = \"minoring\", num_thresholds = 7 }",
            [0.699999988079071, 0.6607142686843872, 0.727272629737854],
        ),
        (
            "{ type = \"auc\", curve = \"PR\", summation_method = \"majoring\" }",
            [0.7541667222976685, 0.7011904716491699, 0.7563916444778442],
        ),
        (
            "{ type = \"auc\", multi_label = true }",
            [0.6666666865348816, 0.6666666865348816, 0.7833333015441895],
        ),
        (
            "{ type = \"f1_score\", average = \"micro\" }",
            [0.5714284777641296, 0.4999999403953552, 0.5263156890869141],
        ),
        (
            "{ type = \"F1Score\", average = \"macro\" }",
            [0.5555554628372192, 0.43333330750465393, 0.4404761493206024],
        ),
        (
            "{ type = \"f1_score\", average = \"weighted\" }",
            [0.5833332538604736, 0.48571425676345825, 0.4805194139480591],
        ),
        (
            "{ type = \"f1_score\", average = \"macro\", threshold = 0.4 }",
            [0.7777776718139648, 0.6555555462837219, 0.69047611951828],
        ),
        (
            "{ type = \"FBetaScore\", average = \"weighted\", beta = 2.0, threshold = 0.5 }",
            [0.7361111044883728, 0.5947227478027344, 0.5693779587745667],
        ),
        (
            "{ type = \"f_beta_score\", average = \"weighted\", beta = 2, threshold = 0.5 }",
            [0.7361111044883728, 0.5947227478027344, 0.5693779587745667],
        ),
    ];
    for (text, keras) in cases {
        let got = streamed(metric(text).kind, &PROBS, &LABELS);
        assert_keras(
            text,
            &got,
            &keras
                .map(|k| vec![k])
                .iter()
                .map(|v| &v[..])
                .collect::<Vec<_>>(),
        );
    }
    // Without `average`: one value per class.
    let got = streamed(metric("\"f1_score\"").kind, &PROBS, &LABELS);
    let keras: [&[f64]; 3] = [
        &[0.666666567325592, 0.9999998211860657, 0.0],
        &[0.7999999523162842, 0.4999999403953552, 0.0],
        &[0.5714284777641296, 0.7499999403953552, 0.0],
    ];
    assert_keras("f1_score", &got, &keras);
}

#[test]
#[allow(clippy::excessive_precision)]
fn r2_score_streams_like_keras() {
    let cases = [
        (
            "\"r2_score\"",
            [0.05976305529475212, 0.24304749071598053, 0.3372894823551178],
        ),
        (
            "{ type = \"R2Score\", class_aggregation = \"variance_weighted_average\" }",
            [0.05521886423230171, 0.2662971019744873, 0.3979555368423462],
        ),
    ];
    for (text, keras) in cases {
        let got = streamed(metric(text).kind, &REG_P, &REG_Y);
        let keras: Vec<Vec<f64>> = keras.iter().map(|&k| vec![k]).collect();
        let keras: Vec<&[f64]> = keras.iter().map(|v| &v[..]).collect();
        assert_keras(text, &got, &keras);
    }
}

#[test]
fn sparse_labels_count_as_one_hot_rows() {
    let m = metric("{ type = \"f1_score\", average = \"macro\" }");
    let dense = batch_sums(
        m.kind,
        &PROBS[..9],
        3,
        &[],
        &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
    );
    assert_eq!(batch_sums(m.kind, &PROBS[..9], 3, &[0, 1, 2], &[]), dense);
}

#[test]
fn names_defaults_and_tables_read_back() {
    let names = [
        ("\"Precision\"", "precision"),
        ("\"recall\"", "recall"),
        ("\"AUC\"", "auc"),
        ("\"F1Score\"", "f1_score"),
        ("\"FBetaScore\"", "fbeta_score"),
        ("\"R2Score\"", "r2_score"),
        (
            "{ type = \"auc\", name = \"pr_auc\", curve = \"PR\" }",
            "pr_auc",
        ),
    ];
    for (text, logged) in names {
        let m = metric(text);
        assert_eq!(m.name, logged, "{text}");
        assert_eq!(metric(&m.to_toml().to_string()), m, "{text}");
    }
    assert_eq!(metric("\"auc\"").to_toml(), toml::Value::from("auc"));
    for text in [
        "{ type = \"precision\", thresholds = 0.3, top_k = 2, class_id = 1 }",
        "{ type = \"f_beta_score\", average = \"weighted\", beta = 0.5, threshold = 0.7 }",
        "{ type = \"auc\", num_thresholds = 50, summation_method = \"majoring\", multi_label = true, from_logits = true }",
        "{ type = \"r2_score\", class_aggregation = \"variance_weighted_average\" }",
    ] {
        let m = metric(text);
        assert_eq!(metric(&m.to_toml().to_string()), m, "{text}");
    }
}

#[test]
fn bad_arguments_are_one_line_errors_naming_the_key() {
    let cases = [
        (
            "{ type = \"precision\", thresholds = 1.5 }",
            "compile.metrics[1].thresholds: precision needs thresholds as one number in [0, 1], got 1.5",
        ),
        (
            "{ type = \"Recall\", thresholds = -0.1 }",
            "compile.metrics[1].thresholds: Recall needs thresholds as one number in [0, 1], got -0.1",
        ),
        (
            "{ type = \"f1_score\", threshold = 0.0 }",
            "compile.metrics[1].threshold: f1_score needs threshold as one number in (0, 1] (as Keras), got 0.0",
        ),
        (
            "{ type = \"f1_score\", average = \"samples\" }",
            "compile.metrics[1].average: average must be one of micro, macro, weighted, got \"samples\"",
        ),
        (
            "{ type = \"auc\", num_thresholds = 1 }",
            "compile.metrics[1].num_thresholds: num_thresholds must be an integer >= 2, got 1",
        ),
        (
            "{ type = \"auc\", curve = \"PRGAIN\" }",
            "compile.metrics[1].curve: curve must be one of ROC, PR, got \"PRGAIN\"",
        ),
        (
            "{ type = \"precision\", class_id = 3 }",
            "compile.metrics[1].class_id: class_id 3 is not a unit of the output's 3",
        ),
        (
            "{ type = \"precision\", top_k = 0 }",
            "compile.metrics[1].top_k: top_k must be an integer >= 1, got 0",
        ),
        (
            "{ type = \"f1_score\", beta = 2.0 }",
            "compile.metrics[1].beta: metric \"f1_score\" has no argument \"beta\"",
        ),
    ];
    for (text, message) in cases {
        assert_eq!(error(text), message, "{text}");
    }
}

/// Class ids of the MeanIoU cases (`TRUE_IDS` in tests/reference/metrics_reference.py).
const TRUE_IDS: [usize; 8] = [0, 1, 0, 2, 0, 1, 2, 0];

fn one_hot_ids() -> Vec<f32> {
    let mut y = vec![0.0; 24];
    for (i, &c) in TRUE_IDS.iter().enumerate() {
        y[i * 3 + c] = 1.0;
    }
    y
}

#[test]
#[allow(clippy::excessive_precision)]
fn mean_iou_streams_like_keras() {
    let dense = [0.4999999701976776, 0.3888889253139496, 0.29999998211860657];
    let cases: [(&str, [f64; 3]); 3] = [
        (
            "{ type = \"MeanIoU\", num_classes = 3, sparse_y_pred = false }",
            dense,
        ),
        (
            "{ type = \"mean_io_u\", num_classes = 3, sparse_y_pred = false, ignore_class = 1 }",
            [0.25, 0.2222222238779068, 0.13333334028720856],
        ),
        (
            "{ type = \"MeanIoU\", num_classes = 3, sparse_y_true = false, sparse_y_pred = false }",
            dense,
        ),
    ];
    for (text, keras) in cases {
        let m = metric(text);
        assert_eq!(m.name, "mean_io_u");
        let got = streamed(m.kind, &PROBS, &one_hot_ids());
        assert_keras(text, &got, &[&keras[..1], &keras[1..2], &keras[2..]]);
        assert_eq!(metric(&m.to_toml().to_string()), m, "{text}");
    }
    // Sparse predictions: one output unit holding the class id (4 classes, one never seen).
    let text: toml::Table = toml::from_str("m = { type = \"MeanIoU\", num_classes = 4 }").unwrap();
    let m = MetricSpec::from_toml_at(
        &text["m"],
        "compile.metrics[0]",
        LossKind::MeanSquaredError,
        1,
    )
    .unwrap();
    let pred: Vec<f32> = [0, 1, 2, 1, 0, 1, 0, 1].map(|c| c as f32).to_vec();
    let truth: Vec<f32> = TRUE_IDS.map(|c| c as f32).to_vec();
    let mut sums = vec![0.0; m.kind.width(1)];
    let mut got = Vec::new();
    for (a, b) in BATCHES {
        let batch = batch_sums(m.kind, &pred[a..b], 1, &[], &truth[a..b]);
        for (s, x) in sums.iter_mut().zip(batch) {
            *s += x;
        }
        got.push(m.kind.values(&sums, b as f64));
    }
    assert_keras(
        "sparse MeanIoU",
        &got,
        &[&dense[..1], &dense[1..2], &dense[2..]],
    );
}

#[test]
fn mean_iou_arguments_are_checked() {
    assert_eq!(
        error("{ type = \"MeanIoU\", num_classes = 3 }"),
        "compile.metrics[1].sparse_y_pred: MeanIoU with sparse_y_pred = true (Keras' default) \
         reads each output as a class id, but the output has 3 units; set sparse_y_pred = false \
         to take the argmax of each row"
    );
    assert_eq!(
        error("{ type = \"MeanIoU\", sparse_y_pred = false }"),
        "compile.metrics[1].num_classes: MeanIoU needs num_classes, the number of classes"
    );
    assert_eq!(
        error("{ type = \"MeanIoU\", num_classes = 0, sparse_y_pred = false }"),
        "compile.metrics[1].num_classes: num_classes must be an integer >= 1, got 0"
    );
    // A confusion matrix the machine cannot hold is refused at load, not met mid-epoch.
    assert_eq!(
        error("{ type = \"MeanIoU\", num_classes = 10000000000, sparse_y_pred = false }"),
        "compile.metrics[1].num_classes: MeanIoU keeps a num_classes x num_classes confusion \
         matrix; 10000000000 classes is more than kiln's limit of 8192"
    );
}
