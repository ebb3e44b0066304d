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

/// `n` generated sentences of 4 to 11 words drawn from `words`, the word picked by `pick`.
fn sentences(rng: &mut StdRng, n: usize, words: &[&str]) -> Vec<String> {
    (0..n)
        .map(|_| {
            let len = rng.random_range(4..12);
            let w: Vec<&str> = (0..len)
                .map(|_| words[rng.random_range(0..words.len())])
                .collect();
            w.join(" ")
        })
        .collect()
}

const WORDS: [&str; 12] = [
    "the",
    "model",
    "learns",
    "Graph",
    "neural,",
    "networks",
    "vision",
    "language!",
    "robust",
    "data",
    "training",
    "of",
];

#[test]
fn multi_label_classification_trains_on_tf_idf_bigrams_and_multi_hot_terms() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    let terms = ["cs.LG", "cs.AI", "cs.CV", "stat.ML", "cs.CL"];
    let mut csv = String::from("titles,summaries,terms\n");
    for (i, text) in sentences(&mut rng, 96, &WORDS).iter().enumerate() {
        let t = format!("{} {}", terms[i % 5], terms[(i / 5) % 5]);
        csv.push_str(&format!("title {i},\"{text}\",{t}\n"));
    }
    std::fs::write(dir.path().join("arxiv_data.csv"), csv).unwrap();
    train("multi_label_classification.toml", Some(dir.path()), 1, 2);
}

#[test]
fn autoencoder_learns_to_reconstruct_fashion_mnist() {
    let losses = train("autoencoder.toml", None, 2, 6);
    assert!(losses[1] < losses[0], "{losses:?}");
}

#[test]
fn text_classification_trains_from_a_text_folder_with_text_vectorization() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(6);
    for class in ["neg", "pos"] {
        let folder = dir.path().join("aclImdb/train").join(class);
        std::fs::create_dir_all(&folder).unwrap();
        for (i, text) in sentences(&mut rng, 32, &WORDS).iter().enumerate() {
            std::fs::write(folder.join(format!("{i}_7.txt")), text).unwrap();
        }
    }
    train(
        "text_classification_from_scratch.toml",
        Some(dir.path()),
        1,
        2,
    );
}

#[test]
fn structured_data_classification_trains_on_a_heart_disease_shaped_csv() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(8);
    let mut csv = String::from(
        "age,sex,cp,trestbps,chol,fbs,restecg,thalach,exang,oldpeak,slope,ca,thal,target\n",
    );
    let thal = ["fixed", "normal", "reversible"];
    for _ in 0..96 {
        let row = format!(
            "{},{},{},{},{},{},{},{},{},{:.1},{},{},{},{}\n",
            rng.random_range(29..78),
            rng.random_range(0..2),
            rng.random_range(0..5),
            rng.random_range(94..200),
            rng.random_range(126..564),
            rng.random_range(0..2),
            rng.random_range(0..3),
            rng.random_range(71..202),
            rng.random_range(0..2),
            rng.random_range(0.0..6.2),
            rng.random_range(1..4),
            rng.random_range(0..4),
            thal[rng.random_range(0..3)],
            rng.random_range(0..2),
        );
        csv.push_str(&row);
    }
    std::fs::write(dir.path().join("heart.csv"), csv).unwrap();
    train(
        "structured_data_classification_from_scratch.toml",
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

/// One-hot rows of `classes` for `n` random labels.
fn one_hot(rng: &mut StdRng, n: usize, classes: usize) -> Vec<f32> {
    let mut y = vec![0.0; n * classes];
    for row in y.chunks_mut(classes) {
        row[rng.random_range(0..classes)] = 1.0;
    }
    y
}

#[test]
fn eeg_signal_classification_trains() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    let n = 128;
    let x: Vec<f32> = (0..n * 512).map(|_| rng.random_range(0.0..1.0)).collect();
    let y = one_hot(&mut rng, n, 5);
    write(
        dir.path(),
        vec![
            ("eeg-x.npy", vec![n, 512, 1], x),
            ("eeg-y.npy", vec![n, 5], y),
        ],
        &[],
    );
    train("eeg_signal_classification.toml", Some(dir.path()), 1, 2);
}

#[test]
fn pointnet_has_keras_parameter_count_and_trains() {
    let cfg = RunConfig::load(&example("pointnet.toml")).unwrap();
    // Keras 3.15's count for the example's model (trainable, non-trainable).
    assert_eq!(cfg.model.param_count(), (742_899, 6_080));
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(6);
    let n = 96;
    let x: Vec<f32> = (0..n * 2048 * 3)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let y = uniform(&mut rng, n, 10);
    write(
        dir.path(),
        vec![
            ("modelnet10-x.npy", vec![n, 2048, 3], x),
            ("modelnet10-y.npy", vec![n], y),
        ],
        &["modelnet10-y.npy"],
    );
    train("pointnet.toml", Some(dir.path()), 1, 1);
}

#[test]
fn convmixer_has_keras_parameter_count_and_trains_with_augmentation_layers() {
    let cfg = RunConfig::load(&example("convmixer.toml")).unwrap();
    // keras.Model(...).count_params() of the example's get_conv_mixer_256_8().
    assert_eq!(cfg.model.param_count(), (594_186, 8_704));
    assert_eq!(cfg.model.output_shape(), &[10]);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(9);
    let n = 8;
    let x: Vec<f32> = (0..n * 32 * 32 * 3)
        .map(|_| rng.random_range(0.0..255.0))
        .collect();
    let y = uniform(&mut rng, n, 10);
    write(
        dir.path(),
        vec![
            ("cifar10-x.npy", vec![n, 32, 32, 3], x),
            ("cifar10-y.npy", vec![n], y),
        ],
        &["cifar10-y.npy"],
    );
    train("convmixer.toml", Some(dir.path()), 1, 1);
}

#[test]
fn vision_transformer_has_keras_parameter_count_and_trains_with_adapted_normalization() {
    let cfg = RunConfig::load(&example(
        "image_classification_with_vision_transformer.toml",
    ))
    .unwrap();
    // Keras 3.15's count of the example's model (the Normalization's mean, variance and
    // count are its 7 non-trainable values).
    assert_eq!(cfg.model.param_count(), (21_759_012, 7));
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(10);
    let n = 16;
    let x: Vec<f32> = (0..n * 32 * 32 * 3)
        .map(|_| rng.random_range(0.0..255.0))
        .collect();
    let y = uniform(&mut rng, n, 100);
    write(
        dir.path(),
        vec![
            ("cifar100-x.npy", vec![n, 32, 32, 3], x),
            ("cifar100-y.npy", vec![n], y),
        ],
        &["cifar100-y.npy"],
    );
    let mut cfg = cfg;
    cfg.data.data_dir = dir.path().to_path_buf();
    for table in [&mut cfg.data.train, &mut cfg.data.validation] {
        let table = table.as_mut().unwrap();
        table.take = table.take.map(|_| 12);
        table.skip = table.skip.map(|_| 12);
        table.batch_size = Some(4);
    }
    cfg.fit.epochs = 1;
    cfg.fit.steps_per_epoch = Some(2);
    let run_dir = tempfile::tempdir().unwrap();
    let report = kiln::run::train(&cfg, run_dir.path(), Device::flex(), &mut [], |_| {}).unwrap();
    assert!(report.history.history["loss"][0].is_finite());
    // The run records the statistics adapted on the 12 training images (uniform on [0, 255):
    // means near 127.5), one per channel.
    let saved = RunConfig::load(&run_dir.path().join("config.toml")).unwrap();
    let table = saved.model.to_toml();
    let layers = table["layers"].as_array().unwrap();
    let norm = layers
        .iter()
        .find(|l| l["type"].as_str() == Some("Normalization"));
    let mean = norm.unwrap()["mean"].as_array().unwrap();
    assert_eq!(mean.len(), 3);
    for m in mean {
        assert!((m.as_float().unwrap() - 127.5).abs() < 10.0, "{mean:?}");
    }
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

/// Rows of the UCI Adult CSV's layout (no header), values drawn from small per-column sets.
fn adult_rows(rng: &mut StdRng, n: usize) -> String {
    let pick =
        |rng: &mut StdRng, values: &[&str]| values[rng.random_range(0..values.len())].to_string();
    let mut csv = String::new();
    for _ in 0..n {
        let row = [
            rng.random_range(17..90).to_string(),
            pick(rng, &[" Private", " State-gov", " ?"]),
            rng.random_range(20_000..400_000).to_string(),
            pick(rng, &[" Bachelors", " HS-grad", " Masters", " 11th"]),
            rng.random_range(1..16).to_string(),
            pick(rng, &[" Never-married", " Divorced", " Married-civ-spouse"]),
            pick(rng, &[" Sales", " Tech-support", " Exec-managerial"]),
            pick(rng, &[" Husband", " Wife", " Own-child"]),
            pick(rng, &[" White", " Black", " Other"]),
            pick(rng, &[" Male", " Female"]),
            rng.random_range(0..5000).to_string(),
            rng.random_range(0..2000).to_string(),
            rng.random_range(1..99).to_string(),
            pick(rng, &[" United-States", " Mexico", " India"]),
            pick(rng, &[" <=50K", " >50K"]),
        ];
        csv.push_str(&row.join(","));
        csv.push('\n');
    }
    csv
}

#[test]
fn tabtransformer_has_keras_parameter_count_and_trains_on_an_adult_shaped_csv() {
    let cfg = RunConfig::load(&example("tabtransformer.toml")).unwrap();
    // Keras 3.15's count of the example's model with its vocabulary sizes (one
    // BatchNormalization per MLP layer, see the config's header).
    assert_eq!(cfg.model.param_count(), (87_745, 798));
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(12);
    std::fs::write(dir.path().join("adult.data"), adult_rows(&mut rng, 96)).unwrap();
    std::fs::write(dir.path().join("adult.test"), adult_rows(&mut rng, 32)).unwrap();
    train("tabtransformer.toml", Some(dir.path()), 1, 2);
}
