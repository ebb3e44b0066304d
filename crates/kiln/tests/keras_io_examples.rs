//! The keras.io examples translated under `examples/keras-io/`: each config loads as a user's
//! would and trains a few steps through `kiln::run::train` (the library's `kiln train`), on its
//! real data where it is on the machine (Fashion-MNIST for `mnist_convnet`, the example's own
//! generated sums for `addition_rnn`, a text Debian ships for the character model), else on
//! random data of the example's shapes written as the `.npy` files the config names.

use std::path::{Path, PathBuf};

use burn::prelude::Device;
use kiln::config::RunConfig;
use kiln_data::npy::write_npy;
use kiln_data::{Array, Buffer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/keras-io")
        .join(name)
}

/// Writes `arrays` (file name, shape, values) into `dir` as float32 `.npy` files, or int64
/// ones for the names in `ints`.
fn write(dir: &Path, arrays: Vec<(&str, Vec<usize>, Vec<f32>)>, ints: &[&str]) {
    for (file, shape, values) in arrays {
        let buffer = match ints.contains(&file) {
            true => Buffer::I64(values.iter().map(|&v| v as i64).collect()),
            false => Buffer::F32(values),
        };
        write_npy(&dir.join(file), &Array::new(shape, buffer).unwrap()).unwrap();
    }
}

/// Trains the example `name` for `epochs` epochs of `steps` steps with its data in `data_dir`
/// (`None`: the config's own) and returns the training loss of each epoch.
fn train(name: &str, data_dir: Option<&Path>, epochs: usize, steps: u64) -> Vec<f64> {
    let mut cfg = RunConfig::load(&example(name)).unwrap();
    if let Some(dir) = data_dir {
        cfg.data.data_dir = dir.to_path_buf();
    }
    cfg.fit.epochs = epochs;
    cfg.fit.steps_per_epoch = Some(steps);
    let run_dir = tempfile::tempdir().unwrap();
    let report = kiln::run::train(&cfg, run_dir.path(), Device::flex(), &mut [], |_| {}).unwrap();
    let losses = report.history.history["loss"].clone();
    assert_eq!(losses.len(), epochs, "{name}");
    assert!(losses.iter().all(|l| l.is_finite()), "{name}: {losses:?}");
    losses
}

fn uniform(rng: &mut StdRng, n: usize, below: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(0..below) as f32).collect()
}

#[test]
fn mnist_convnet_trains_on_fashion_mnist() {
    let losses = train("mnist_convnet.toml", None, 2, 6);
    assert!(losses[1] < losses[0], "{losses:?}");
}

#[test]
fn bidirectional_lstm_imdb_trains() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    let n = 64;
    let x = uniform(&mut rng, n * 200, 20_000);
    let y = uniform(&mut rng, n, 2);
    write(
        dir.path(),
        vec![
            ("imdb-x.npy", vec![n, 200], x),
            ("imdb-y.npy", vec![n, 1], y),
        ],
        &[],
    );
    train("bidirectional_lstm_imdb.toml", Some(dir.path()), 1, 2);
}

/// The example's own data: questions `a+b` (numbers of up to 3 digits) padded to 7 characters
/// and reversed, answers padded to 4, one-hot over `0123456789+ `.
fn additions(n: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    const CHARS: &str = "0123456789+ ";
    let index = |c: char| CHARS.find(c).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut x, mut y) = (vec![0.0; n * 7 * 12], Vec::with_capacity(n * 4));
    for i in 0..n {
        let (a, b) = (rng.random_range(0..1000), rng.random_range(0..1000));
        let question = format!("{:<7}", format!("{a}+{b}"));
        for (t, c) in question.chars().rev().enumerate() {
            x[(i * 7 + t) * 12 + index(c)] = 1.0;
        }
        y.extend(format!("{:<4}", a + b).chars().map(|c| index(c) as f32));
    }
    (x, y)
}

#[test]
fn addition_rnn_learns_on_the_examples_own_data() {
    let dir = tempfile::tempdir().unwrap();
    let n = 640;
    let (x, y) = additions(n, 3);
    write(
        dir.path(),
        vec![
            ("addition-x.npy", vec![n, 7, 12], x),
            ("addition-y.npy", vec![n, 4], y),
        ],
        &["addition-y.npy"],
    );
    let losses = train("addition_rnn.toml", Some(dir.path()), 3, 20);
    assert!(losses[2] < losses[0], "{losses:?}");
}

#[test]
fn lstm_character_model_learns_on_a_real_text() {
    // The GNU GPL's text, which every Debian system ships (base-files).
    let text = std::fs::read_to_string("/usr/share/common-licenses/GPL-3")
        .expect("/usr/share/common-licenses/GPL-3 (Debian's base-files) is missing")
        .to_lowercase();
    let mut alphabet: Vec<char> = text.chars().collect();
    alphabet.sort_unstable();
    alphabet.dedup();
    alphabet.truncate(56);
    let ids: Vec<usize> = text
        .chars()
        .filter_map(|c| alphabet.iter().position(|&a| a == c))
        .take(20_000)
        .collect();
    let starts: Vec<usize> = (0..ids.len() - 41).step_by(3).take(1280).collect();
    let n = starts.len();
    let mut x = vec![0.0; n * 40 * 56];
    let mut y = Vec::with_capacity(n);
    for (i, &s) in starts.iter().enumerate() {
        for t in 0..40 {
            x[(i * 40 + t) * 56 + ids[s + t]] = 1.0;
        }
        y.push(ids[s + 40] as f32);
    }
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        vec![
            ("chars-x.npy", vec![n, 40, 56], x),
            ("chars-y.npy", vec![n], y),
        ],
        &["chars-y.npy"],
    );
    let losses = train(
        "lstm_character_level_text_generation.toml",
        Some(dir.path()),
        2,
        10,
    );
    assert!(losses[1] < losses[0], "{losses:?}");
}

#[test]
fn collaborative_filtering_trains_with_two_inputs_and_dot() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(2);
    let n = 256;
    let users = uniform(&mut rng, n, 610);
    let movies = uniform(&mut rng, n, 9724);
    let ratings: Vec<f32> = (0..n)
        .map(|_| rng.random_range(0..=8) as f32 / 8.0)
        .collect();
    write(
        dir.path(),
        vec![
            ("user.npy", vec![n, 1], users),
            ("movie.npy", vec![n, 1], movies),
            ("rating.npy", vec![n, 1], ratings),
        ],
        &[],
    );
    train(
        "collaborative_filtering_movielens.toml",
        Some(dir.path()),
        1,
        3,
    );
}

#[test]
fn imbalanced_classification_trains_with_class_weight() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(4);
    let n = 4096;
    let x: Vec<f32> = (0..n * 30).map(|_| rng.random_range(-2.0..2.0)).collect();
    let y: Vec<f32> = (0..n)
        .map(|i| if i % 500 == 7 { 1.0 } else { 0.0 })
        .collect();
    write(
        dir.path(),
        vec![
            ("fraud-x.npy", vec![n, 30], x),
            ("fraud-y.npy", vec![n, 1], y),
        ],
        &[],
    );
    train("imbalanced_classification.toml", Some(dir.path()), 1, 2);
}

#[test]
fn multi_label_classification_trains_on_multi_hot_targets() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    let n = 256;
    let x: Vec<f32> = (0..n * 20_000)
        .map(|_| match rng.random_range(0..200) {
            0 => rng.random_range(0.5..3.0),
            _ => 0.0,
        })
        .collect();
    let y: Vec<f32> = (0..n * 153)
        .map(|_| (rng.random_range(0..50) == 0) as u8 as f32)
        .collect();
    write(
        dir.path(),
        vec![
            ("abstracts-x.npy", vec![n, 20_000], x),
            ("abstracts-y.npy", vec![n, 153], y),
        ],
        &[],
    );
    train("multi_label_classification.toml", Some(dir.path()), 1, 2);
}

#[test]
fn autoencoder_learns_to_reconstruct_fashion_mnist() {
    let losses = train("autoencoder.toml", None, 2, 6);
    assert!(losses[1] < losses[0], "{losses:?}");
}

#[test]
fn text_classification_trains_with_strided_conv1d() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(6);
    let n = 64;
    let x = uniform(&mut rng, n * 500, 20_000);
    let y = uniform(&mut rng, n, 2);
    write(
        dir.path(),
        vec![
            ("reviews-x.npy", vec![n, 500], x),
            ("reviews-y.npy", vec![n, 1], y),
        ],
        &[],
    );
    train(
        "text_classification_from_scratch.toml",
        Some(dir.path()),
        1,
        2,
    );
}

#[test]
fn timeseries_classification_trains_and_validates() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let n = 2900;
    let x: Vec<f32> = (0..n * 500).map(|_| rng.random_range(-2.0..2.0)).collect();
    let y = uniform(&mut rng, n, 2);
    write(
        dir.path(),
        vec![
            ("forda-x.npy", vec![n, 500, 1], x),
            ("forda-y.npy", vec![n], y),
        ],
        &["forda-y.npy"],
    );
    train(
        "timeseries_classification_from_scratch.toml",
        Some(dir.path()),
        1,
        2,
    );
}

#[test]
fn oxford_pets_unet_has_keras_parameter_count_and_trains() {
    let cfg = RunConfig::load(&example("oxford_pets_image_segmentation.toml")).unwrap();
    // keras.Model(...).count_params() of the example's get_model((160, 160), 3).
    assert_eq!(cfg.model.param_count(), (2_055_203, 3_776));
    assert_eq!(cfg.model.output_shape(), &[160, 160, 3]);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(8);
    let n = 4;
    let x: Vec<f32> = (0..n * 160 * 160 * 3)
        .map(|_| rng.random_range(0.0..1.0))
        .collect();
    let y = uniform(&mut rng, n * 160 * 160, 3);
    write(
        dir.path(),
        vec![
            ("pets-x.npy", vec![n, 160, 160, 3], x),
            ("pets-y.npy", vec![n, 160, 160], y),
        ],
        &["pets-y.npy"],
    );
    train(
        "oxford_pets_image_segmentation.toml",
        Some(dir.path()),
        1,
        1,
    );
}

#[test]
fn mixup_trains_on_fashion_mnist_with_mixed_batches() {
    let losses = train("mixup.toml", None, 2, 4);
    // Mixed one-hot labels: the cross-entropy of a fresh 10-class model is near ln 10.
    assert!(losses[0] > 1.0, "{losses:?}");
}

#[test]
fn cutmix_resnet20_trains_on_cifar10_shaped_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let n = 64;
    for split in ["train", "test"] {
        let x = uniform(&mut rng, n * 32 * 32 * 3, 256);
        let y = uniform(&mut rng, n, 10);
        let (xf, yf) = (format!("x_{split}.npy"), format!("y_{split}.npy"));
        write(
            dir.path(),
            vec![
                (xf.as_str(), vec![n, 32, 32, 3], x),
                (yf.as_str(), vec![n], y),
            ],
            &[yf.as_str()],
        );
    }
    train("cutmix.toml", Some(dir.path()), 1, 2);
}
