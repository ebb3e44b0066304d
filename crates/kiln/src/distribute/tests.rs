//! Acceptance: mirrored replicas train the weights one device trains with the same global
//! batch.

use burn::prelude::Device;
use kiln_data::{Array, Buffer, Dataset, Element};

use super::{MirroredStrategy, Strategy};
use crate::config::RunConfig;
use crate::fit::Model;
use crate::model::weights::keras_weights;

pub(super) fn config(layers: &str, optimizer: &str, loss: &str) -> RunConfig {
    RunConfig::from_toml_str(&format!(
        r#"name = "mirror"
[data]
[model]
layers = [{layers}]
[compile]
optimizer = {optimizer}
loss = {loss}
metrics = ["accuracy"]
"#
    ))
    .unwrap()
}

pub(super) fn model(cfg: &RunConfig, strategy: Strategy) -> Model {
    let mut m = Model::new(
        "mirror",
        cfg.model.clone(),
        cfg.compile.clone(),
        7,
        Device::flex(),
    );
    m.set_strategy(strategy);
    m
}

pub(super) fn mirrored(n: usize) -> Strategy {
    Strategy::Mirrored(MirroredStrategy::new(n).unwrap())
}

/// `n` examples of 6 features in [-1, 1) and 3 classes, deterministic.
pub(super) fn classification(n: usize, batch: usize) -> Dataset {
    let x: Vec<f32> = (0..n * 6)
        .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
        .collect();
    let y: Vec<i64> = (0..n as i64).map(|i| (i * 5 + 1) % 3).collect();
    let x = Array::new(vec![n, 6], Buffer::F32(x)).unwrap();
    let y = Array::new(vec![n], Buffer::I64(y)).unwrap();
    Dataset::from_tensor_slices(Element::new().with("x", x).with("y", y))
        .unwrap()
        .batch(batch, false)
}

pub(super) fn weights(m: &Model) -> Vec<(String, Vec<f32>)> {
    keras_weights(m.spec(), m.network())
        .into_iter()
        .map(|(n, _, v)| (n, v))
        .collect()
}

pub(super) fn max_diff(a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|((na, va), (nb, vb))| {
            assert_eq!(na, nb);
            va.iter().zip(vb).map(|(x, y)| (x - y).abs())
        })
        .fold(0.0, f32::max)
}

pub(super) const MLP: &str = r#"{ type = "Input", shape = [6] },
    { type = "Dense", units = 16, activation = "relu" },
    { type = "Dense", units = 3 }"#;
pub(super) const ADAMW: &str = r#"{ type = "AdamW", learning_rate = 0.01 }"#;
pub(super) const SCCE: &str = r#"{ type = "sparse_categorical_crossentropy", from_logits = true }"#;

/// The issue's acceptance: 2 replicas, 5 AdamW steps on a small MLP, global batch 8: the
/// weights of one device with batch 8, within 1e-5; so are the epoch's loss and accuracy.
#[test]
fn two_replicas_train_the_one_device_weights() {
    let cfg = config(MLP, ADAMW, SCCE);
    let data = classification(40, 8);
    let mut one = model(&cfg, Strategy::OneDevice);
    let mut two = model(&cfg, mirrored(2));
    let initial = weights(&one);
    assert_eq!(max_diff(&initial, &weights(&two)), 0.0);
    let h1 = one.fit(&data, None, 1, &mut []).unwrap();
    let h2 = two.fit(&data, None, 1, &mut []).unwrap();
    let (w1, w2) = (weights(&one), weights(&two));
    assert!(
        max_diff(&initial, &w1) > 1e-2,
        "5 steps at lr 0.01 move the weights"
    );
    let diff = max_diff(&w1, &w2);
    assert!(diff <= 1e-5, "2 replicas differ from one device by {diff}");
    for key in ["loss", "accuracy"] {
        let (a, b) = (h1.history[key][0], h2.history[key][0]);
        assert!((a - b).abs() <= 1e-6, "{key}: {a} vs {b}");
    }
}

/// Uneven splits (TensorFlow's, [`super::split_sizes`]): 37 examples in batches of 8 on 3
/// replicas ([3, 3, 2] four times, then [2, 2, 1]) give the one-device weights too, since each
/// replica's gradient is weighted by its share of the global batch, not by 1/replicas.
#[test]
fn uneven_splits_weight_replicas_by_their_examples() {
    let cfg = config(MLP, ADAMW, SCCE);
    let data = classification(37, 8);
    let mut one = model(&cfg, Strategy::OneDevice);
    let mut three = model(&cfg, mirrored(3));
    one.fit(&data, None, 2, &mut []).unwrap();
    three.fit(&data, None, 2, &mut []).unwrap();
    let diff = max_diff(&weights(&one), &weights(&three));
    assert!(diff <= 1e-5, "3 replicas differ from one device by {diff}");
}

/// Clipping and gradient accumulation see the reduced (global-batch) gradients, as on one
/// device: AdamW with `global_clipnorm = 0.05` (small enough to clip) and
/// `gradient_accumulation_steps = 2` on 2 replicas ends on the one-device weights.
#[test]
fn clipping_and_accumulation_apply_to_the_reduced_gradients() {
    let optimizer = concat!(
        r#"{ type = "AdamW", learning_rate = 0.01, global_clipnorm = 0.05, "#,
        "gradient_accumulation_steps = 2 }"
    );
    let cfg = config(MLP, optimizer, SCCE);
    let data = classification(40, 8);
    let mut one = model(&cfg, Strategy::OneDevice);
    let mut two = model(&cfg, mirrored(2));
    let initial = weights(&one);
    one.fit(&data, None, 1, &mut []).unwrap();
    two.fit(&data, None, 1, &mut []).unwrap();
    assert!(max_diff(&initial, &weights(&one)) > 1e-3);
    let diff = max_diff(&weights(&one), &weights(&two));
    assert!(diff <= 1e-5, "2 replicas differ from one device by {diff}");
}

/// More replicas than examples in a batch: the empty replicas contribute nothing.
#[test]
fn replicas_without_examples_are_skipped() {
    let cfg = config(MLP, ADAMW, SCCE);
    let data = classification(6, 3);
    let mut one = model(&cfg, Strategy::OneDevice);
    let mut five = model(&cfg, mirrored(5));
    one.fit(&data, None, 1, &mut []).unwrap();
    let h = five.fit(&data, None, 1, &mut []).unwrap();
    assert!(max_diff(&weights(&one), &weights(&five)) <= 1e-5);
    assert!(
        h.history
            .contains_key(super::diagnosis::COMMUNICATION_SECONDS)
    );
}

/// BatchNormalization on two replicas uses per-replica batch statistics (no
/// `sync_batch_norm`), and its moving averages end as the mean of the replicas' updates.
/// One SGD step on x = [[0,0],[2,2] | [10,10],[14,14]] (momentum 0.9): replica means 1 and
/// 12, biased variances 1 and 4, so moving_mean = 0.1 * 6.5 = 0.65 (as on one device) but
/// moving_variance = 0.9 + 0.1 * 2.5 = 1.15 (one device: 0.9 + 0.1 * 32.75 = 4.175). With
/// `sync_batch_norm` the replicas use the global batch's statistics: 4.175, and one device's
/// weights.
#[test]
fn batch_normalization_statistics_are_per_replica() {
    let cfg = config(
        r#"{ type = "Input", shape = [2] }, { type = "BatchNormalization", momentum = 0.9 },
           { type = "Dense", units = 1 }"#,
        "\"sgd\"",
        "\"mean_squared_error\"",
    );
    let x = Array::new(
        vec![4, 2],
        Buffer::F32(vec![0.0, 0.0, 2.0, 2.0, 10.0, 10.0, 14.0, 14.0]),
    )
    .unwrap();
    let y = Array::new(vec![4, 1], Buffer::F32(vec![0.0, 1.0, 0.0, 1.0])).unwrap();
    let data = Dataset::from_tensor_slices(Element::new().with("x", x).with("y", y))
        .unwrap()
        .batch(4, false);
    let stat = |m: &Model, name: &str| -> Vec<f32> {
        weights(m)
            .into_iter()
            .find(|(n, _)| n.ends_with(name))
            .unwrap()
            .1
    };
    let mut one = model(&cfg, Strategy::OneDevice);
    let mut two = model(&cfg, mirrored(2));
    let synced = MirroredStrategy::new(2)
        .unwrap()
        .with_sync_batch_norm(true)
        .unwrap();
    let mut sync = model(&cfg, Strategy::Mirrored(synced));
    one.fit(&data, None, 1, &mut []).unwrap();
    two.fit(&data, None, 1, &mut []).unwrap();
    sync.fit(&data, None, 1, &mut []).unwrap();
    let close = |got: Vec<f32>, want: f32| {
        assert!(
            got.iter().all(|v| (v - want).abs() < 1e-5),
            "{got:?} vs {want}"
        )
    };
    close(stat(&one, "moving_mean"), 0.65);
    close(stat(&two, "moving_mean"), 0.65);
    close(stat(&one, "moving_variance"), 4.175);
    close(stat(&two, "moving_variance"), 1.15);
    close(stat(&sync, "moving_variance"), 4.175);
    assert!(max_diff(&weights(&one), &weights(&sync)) <= 1e-6);
    assert!(max_diff(&weights(&one), &weights(&two)) > 1e-3);
}

#[test]
fn the_resolved_config_keeps_the_strategy() {
    let text = r#"name = "d"
[data]
[model]
layers = [{ type = "Input", shape = [4] }, { type = "Dense", units = 3 }]
[compile]
optimizer = "sgd"
loss = "sparse_categorical_crossentropy"
[distribute]
strategy = "mirrored"
num_replicas = 4
"#;
    let cfg = RunConfig::from_toml_str(text).unwrap();
    assert_eq!(cfg.distribute.num_replicas, Some(4));
    let again = RunConfig::from_toml_str(&cfg.to_toml()).unwrap();
    assert_eq!(again.distribute, cfg.distribute);
    assert_eq!(again.distribute.build().unwrap().num_replicas_in_sync(), 4);
    let plain = RunConfig::from_toml_str(&text.replace("[distribute]", "[other]"));
    assert!(plain.is_err(), "unknown tables are refused");
    let one = config(MLP, ADAMW, SCCE);
    assert!(
        !one.to_toml().contains("distribute"),
        "the default is not written"
    );
}
