//! End-to-end `fit` on a synthetic, linearly separable problem: three Gaussian blobs in 2-D.

mod common;

use burn::prelude::Device;
use kiln::fit::FitContext;
use kiln::{Callback, Logs, Model};
use kiln_data::{Array, Buffer, Dataset, Element};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// 600 points: class k is centered at 3 * (cos, sin)(2 pi k / 3) with uniform noise in
/// [-1, 1]^2, so classes are separated by a margin of about 0.6.
fn blobs(seed: u64) -> (Array, Array) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for i in 0..600 {
        let k = i % 3;
        let a = 2.0 * std::f32::consts::PI * k as f32 / 3.0;
        x.push(3.0 * a.cos() + rng.random_range(-1.0..1.0));
        x.push(3.0 * a.sin() + rng.random_range(-1.0..1.0));
        y.push(k as i64);
    }
    (
        Array::new(vec![600, 2], Buffer::F32(x)).unwrap(),
        Array::new(vec![600], Buffer::I64(y)).unwrap(),
    )
}

fn dataset(x: Array, y: Array, shuffle: bool) -> Dataset {
    let ds = Dataset::from_tensor_slices(Element::new().with("x", x).with("y", y)).unwrap();
    let ds = if shuffle {
        ds.shuffle(600, Some(1), true)
    } else {
        ds
    };
    ds.batch(32, false)
}

fn model(seed: u64) -> Model {
    common::two_layer_classifier("blobs", 16, 3, seed)
}

#[derive(Default)]
struct Counter {
    batches: u64,
    epochs: usize,
}

impl Callback for Counter {
    fn on_train_batch_end(
        &mut self,
        _step: u64,
        _logs: &Logs,
        _ctx: &mut dyn FitContext,
    ) -> kiln::Result<()> {
        self.batches += 1;
        Ok(())
    }
    fn on_epoch_end(
        &mut self,
        _epoch: usize,
        _logs: &mut Logs,
        _ctx: &mut dyn FitContext,
    ) -> kiln::Result<()> {
        self.epochs += 1;
        Ok(())
    }
}

#[test]
fn fit_separates_three_blobs_and_reports_history() {
    let (x, y) = blobs(5);
    let mut m = model(11);
    let before = m.evaluate(&dataset(x.clone(), y.clone(), false)).unwrap();
    let mut counter = Counter::default();
    let history = m
        .fit(
            &dataset(x.clone(), y.clone(), true),
            Some(&dataset(x.clone(), y.clone(), false)),
            15,
            &mut [&mut counter],
        )
        .unwrap();
    // 600 / 32 -> 19 batches (the short last batch is kept) per epoch.
    assert_eq!((counter.epochs, counter.batches), (15, 15 * 19));
    assert_eq!(history.epoch, (0..15).collect::<Vec<_>>());
    let loss = &history.history["loss"];
    assert!(loss[14] < 0.5 * loss[0], "{loss:?}");
    assert!(history.samples_per_second.iter().all(|&s| s > 0.0));
    let after = m.evaluate(&dataset(x.clone(), y.clone(), false)).unwrap();
    assert!(before.get("accuracy").unwrap() < 0.7, "{before:?}");
    assert!(after.get("accuracy").unwrap() >= 0.98, "{after:?}");
    // Validation ran in inference mode on the same data: it equals evaluate.
    assert!((history.last("val_accuracy").unwrap() - after.get("accuracy").unwrap()).abs() < 1e-9);
}

#[test]
fn saved_weights_reload_to_identical_predictions() {
    let (x, y) = blobs(6);
    let mut m = model(3);
    m.fit(&dataset(x.clone(), y.clone(), true), None, 2, &mut [])
        .unwrap();
    let dir = std::env::temp_dir().join(format!("kiln-weights-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.safetensors");
    m.save_weights(&path).unwrap();
    let again = Model::from_weights(
        "blobs",
        m.spec().clone(),
        m.compiled().clone(),
        &path,
        Device::flex(),
    )
    .unwrap();
    let (a, units) = m.predict(&dataset(x.clone(), y.clone(), false)).unwrap();
    let (b, _) = again.predict(&dataset(x, y, false)).unwrap();
    assert_eq!(units, 3);
    assert_eq!(a.len(), 600 * 3);
    assert_eq!(a, b);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn same_seed_same_training() {
    let (x, y) = blobs(7);
    let run = || {
        let mut m = model(21);
        m.fit(&dataset(x.clone(), y.clone(), true), None, 2, &mut [])
            .unwrap()
            .history["loss"]
            .clone()
    };
    assert_eq!(run(), run());
}
