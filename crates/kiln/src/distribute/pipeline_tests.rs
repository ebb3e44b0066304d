//! Acceptance: a pipeline of stages trains the weights one device trains with the same
//! global batch.

use burn::prelude::Device;
use kiln_data::{Array, Buffer, Dataset, Element};

use super::tests::{ADAMW, MLP, SCCE, classification, config, max_diff, mirrored, model, weights};
use super::{BalanceBy, PipelineStrategy, Stages, Strategy};

fn pipeline(stages: Stages, micro: usize) -> PipelineStrategy {
    PipelineStrategy::new(stages, BalanceBy::Parameters, micro).unwrap()
}

/// The issue's acceptance: 2 stages (balanced by parameters: Dense(16) | Dense(3)), 4
/// micro-batches of 2, 5 AdamW steps at global batch 8: the one-device weights within 1e-5,
/// and the same epoch loss and accuracy.
#[test]
fn two_stages_train_the_one_device_weights() {
    let cfg = config(MLP, ADAMW, SCCE);
    let data = classification(40, 8);
    let mut one = model(&cfg, Strategy::OneDevice);
    let mut pipe = pipeline(Stages::Count(2), 4);
    assert_eq!(pipe.plan(&cfg.model).unwrap(), [0..1, 1..2]);
    let mut two = model(&cfg, Strategy::Pipeline(pipe));
    let initial = weights(&one);
    let h1 = one.fit(&data, None, 1, &mut []).unwrap();
    let h2 = two.fit(&data, None, 1, &mut []).unwrap();
    assert!(
        max_diff(&initial, &weights(&one)) > 1e-2,
        "the weights moved"
    );
    let diff = max_diff(&weights(&one), &weights(&two));
    assert!(diff <= 1e-5, "2 stages differ from one device by {diff}");
    for key in ["loss", "accuracy"] {
        let (a, b) = (h1.history[key][0], h2.history[key][0]);
        assert!((a - b).abs() <= 1e-6, "{key}: {a} vs {b}");
    }
}

/// `n` images of 4 × 4 × 1 in [-1, 1) and 3 classes, deterministic.
fn images(n: usize, batch: usize) -> Dataset {
    let x: Vec<f32> = (0..n * 16)
        .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
        .collect();
    let y: Vec<i64> = (0..n as i64).map(|i| (i * 5 + 1) % 3).collect();
    let x = Array::new(vec![n, 4, 4, 1], Buffer::F32(x)).unwrap();
    let y = Array::new(vec![n], Buffer::I64(y)).unwrap();
    Dataset::from_tensor_slices(Element::new().with("x", x).with("y", y))
        .unwrap()
        .batch(batch, false)
}

const CNN: &str = r#"{ type = "Input", shape = [4, 4, 1] },
    { type = "Conv2D", filters = 4, kernel_size = 3, padding = "same", activation = "relu" },
    { type = "MaxPooling2D" },
    { type = "Flatten" },
    { type = "Dense", units = 8, activation = "relu" },
    { type = "Dense", units = 3, activation = "softmax" }"#;

/// A CNN in 3 stages of given sizes on listed devices, with an uneven last batch (37
/// examples in batches of 8: the last has 5, split into micro-batches of 2, 2 and 1) and
/// an activation crossing each boundary (NCHW images, then flat rows): the one-device
/// weights after 2 epochs.
#[test]
fn stages_on_devices_with_an_uneven_last_batch() {
    let cfg = config(CNN, ADAMW, "\"sparse_categorical_crossentropy\"");
    let data = images(37, 8);
    let mut one = model(&cfg, Strategy::OneDevice);
    let pipe = pipeline(Stages::Sizes(vec![2, 2, 1]), 3)
        .on_devices(vec![Device::flex(); 3])
        .unwrap();
    let mut three = model(&cfg, Strategy::Pipeline(pipe));
    one.fit(&data, None, 2, &mut []).unwrap();
    let h = three.fit(&data, None, 2, &mut []).unwrap();
    let diff = max_diff(&weights(&one), &weights(&three));
    assert!(diff <= 1e-5, "3 stages differ from one device by {diff}");
    assert!(
        h.history
            .contains_key(super::diagnosis::COMMUNICATION_SECONDS),
        "stages on devices report their copies as communication"
    );
}

/// BatchNormalization normalizes each micro-batch with its own statistics, as GPipe does:
/// a pipeline with 2 micro-batches trains what 2 mirrored replicas train (each part's own
/// statistics, gradients weighted by share, the mean of the moving averages), and with one
/// micro-batch what one device trains.
#[test]
fn batch_normalization_sees_micro_batches() {
    let layers = r#"{ type = "Input", shape = [6] },
        { type = "Dense", units = 8 },
        { type = "BatchNormalization", momentum = 0.9 },
        { type = "Activation", activation = "relu" },
        { type = "Dense", units = 3 }"#;
    let cfg = config(layers, ADAMW, SCCE);
    let data = classification(32, 8);
    let train = |strategy: Strategy| {
        let mut m = model(&cfg, strategy);
        m.fit(&data, None, 1, &mut []).unwrap();
        weights(&m)
    };
    let one = train(Strategy::OneDevice);
    let replicas = train(mirrored(2));
    let micro2 = train(Strategy::Pipeline(pipeline(Stages::Count(2), 2)));
    let micro1 = train(Strategy::Pipeline(pipeline(Stages::Count(2), 1)));
    assert!(max_diff(&micro2, &replicas) <= 1e-5);
    assert!(max_diff(&micro1, &one) <= 1e-5);
    assert!(
        max_diff(&micro2, &one) > 1e-4,
        "per-micro-batch statistics change the result"
    );
}

/// A plan that does not fit the model is refused when training starts, naming the key.
#[test]
fn a_plan_that_does_not_fit_the_model_is_refused() {
    let cfg = config(MLP, ADAMW, SCCE);
    let err = pipeline(Stages::Count(3), 1)
        .describe(&cfg.model)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("distribute.stages") && err.contains("between 1 and 2"),
        "{err}"
    );
    let text = pipeline(Stages::Count(2), 4).describe(&cfg.model).unwrap();
    assert!(text.starts_with("Pipeline: 2 stages balanced by parameters, 4 micro-batches"));
    assert!(
        text.contains("stage 0: dense (1 layer), 112 parameters"),
        "{text}"
    );
    assert!(
        text.contains("stage 1: dense_1 (1 layer), 51 parameters"),
        "{text}"
    );
}
