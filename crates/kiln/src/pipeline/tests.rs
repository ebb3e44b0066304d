//! Building configured pipelines from real (small, temporary) files.

use std::path::{Path, PathBuf};

use kiln_data::{Array, Buffer, Element};

use super::*;

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("kiln-pipeline-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A run config whose `[data]` is `data` (with `data_dir` set to `dir`) and whose model takes
/// 4 features and has 2 outputs.
fn config(dir: &Path, data: &str) -> RunConfig {
    let text = format!(
        "name = \"t\"\nseed = 3\n[data]\ndata_dir = {:?}\n{data}\n[model]\nlayers = [{{ type = \"Input\", shape = [4] }}, {{ type = \"Dense\", units = 2 }}]\n[compile]\noptimizer = \"sgd\"\nloss = \"sparse_categorical_crossentropy\"\n",
        dir.display().to_string()
    );
    RunConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// `x.npy`: 6 examples `[2, 2]` uint8 holding `4 i .. 4 i + 3`; `y.npy`: labels `i % 2`.
fn write_npy(dir: &Path) {
    let x = Array::new(vec![6, 2, 2], Buffer::U8((0..24).collect())).unwrap();
    let y = Array::new(vec![6], Buffer::I64((0..6).map(|i| i % 2).collect())).unwrap();
    kiln_data::npy::write_npy(&dir.join("x.npy"), &x).unwrap();
    kiln_data::npy::write_npy(&dir.join("y.npy"), &y).unwrap();
}

fn batches(ds: &Dataset) -> Vec<Element> {
    ds.iter().map(|b| b.unwrap()).collect()
}

fn f32s(a: &Array) -> Vec<f32> {
    a.data().try_to_f32().unwrap()
}

#[test]
fn npy_source_take_map_and_batch() {
    let s = Scratch::new("npy");
    write_npy(&s.0);
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\ntake = 5\nbatch_size = 2\nmap = [{ op = \"rescale\", scale = 0.5 }]\n",
    );
    let ds = build(&cfg, Split::Train).unwrap();
    assert_eq!(ds.cardinality(), Cardinality::Finite(3));
    let b = batches(&ds);
    let shapes: Vec<Vec<usize>> = b
        .iter()
        .map(|e| e.get("x").unwrap().shape().to_vec())
        .collect();
    assert_eq!(shapes, vec![vec![2, 2, 2], vec![2, 2, 2], vec![1, 2, 2]]);
    assert_eq!(f32s(b[2].get("x").unwrap()), vec![8.0, 8.5, 9.0, 9.5]);
    assert_eq!(b[1].get("y").unwrap().data(), &Buffer::I64(vec![0, 1]));
    // The first example, before batching, for the up-front model check.
    let first = first_example(&cfg, Split::Train).unwrap().unwrap();
    assert_eq!(first.get("x").unwrap().shape(), &[2, 2]);
    // No [data.test] table.
    let e = build(&cfg, Split::Test).unwrap_err().to_string();
    assert_eq!(e, "data.test: this run has no [data.test] table");
}

#[test]
fn adapt_computes_training_statistics_and_shares_them() {
    let s = Scratch::new("adapt");
    write_npy(&s.0);
    let table = |name: &str, take: &str| {
        format!(
            "[data.{name}]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\n{take}map = [{{ op = \"rescale\", scale = 2.0 }}, {{ op = \"normalize\", axis = [], adapt = true }}]\n"
        )
    };
    let cfg = config(&s.0, &(table("train", "take = 2\n") + &table("test", "")));
    // Not adapted yet: building refuses.
    let e = build(&cfg, Split::Train).unwrap_err().to_string();
    assert!(e.contains("normalize has no statistics"), "{e}");
    let resolved = adapt(&cfg).unwrap();
    // Training values after rescale: 2 * (0..8) -> mean 7, variance 4 * var(0..8) = 21.
    let OpConfig::Normalize {
        mean,
        variance,
        adapt: false,
        ..
    } = &resolved.data.train.as_ref().unwrap().map[1]
    else {
        panic!("not adapted")
    };
    assert_eq!(mean.as_ref().unwrap().to_vec(), vec![7.0]);
    assert_eq!(variance.as_ref().unwrap().to_vec(), vec![21.0]);
    // The test table reuses the training statistics (not the test data's).
    assert_eq!(
        resolved.data.test.as_ref().unwrap().map[1],
        resolved.data.train.as_ref().unwrap().map[1]
    );
    let b = batches(&build(&resolved, Split::Test).unwrap());
    let x = f32s(b[0].get("x").unwrap());
    assert!((x[1] - (2.0 - 7.0) / 21f32.sqrt()).abs() < 1e-6, "{x:?}");
    // The resolved config round-trips with its statistics.
    let again = RunConfig::from_toml_str(&resolved.to_toml()).unwrap();
    assert_eq!(again.data, resolved.data);
    // A test op with adapt needs a training op on the same component.
    let cfg = config(
        &s.0,
        &(table("test", "") + "[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\n"),
    );
    let e = adapt(&cfg).unwrap_err().to_string();
    assert!(
        e.starts_with("data.test.map[1].adapt: statistics come from the training data"),
        "{e}"
    );
}

/// How many of the 6 examples of one epoch are flipped left-right.
fn flips(ds: &Dataset) -> Vec<bool> {
    batches(ds)
        .iter()
        .flat_map(|b| {
            let v = b.get("x").unwrap().data().try_to_i64().unwrap();
            v.chunks(4).map(|c| c[0] > c[1]).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn random_ops_run_in_training_only() {
    let s = Scratch::new("random");
    write_npy(&s.0);
    let table = |name: &str| {
        format!(
            "[data.{name}]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\ncache = \"memory\"\nmap = [{{ op = \"random_flip\", mode = \"horizontal\" }}]\n"
        )
    };
    let cfg = config(&s.0, &(table("train") + &table("test")));
    let train = build(&cfg, Split::Train).unwrap();
    let epochs: Vec<Vec<bool>> = (0..4).map(|_| flips(&train)).collect();
    assert!(epochs.iter().any(|e| e.contains(&true)), "{epochs:?}");
    assert!(
        epochs.windows(2).any(|w| w[0] != w[1]),
        "new flips each epoch (after the cache): {epochs:?}"
    );
    // Rebuilt with the same seed: the same flips.
    let again = build(&cfg, Split::Train).unwrap();
    assert_eq!(flips(&again), epochs[0]);
    // The test pipeline never flips.
    let test = build(&cfg, Split::Test).unwrap();
    assert_eq!(flips(&test), vec![false; 6]);
}

#[test]
fn csv_columns_stacked_into_features() {
    let s = Scratch::new("csv");
    std::fs::write(
        s.0.join("rows.csv"),
        "a,b,c,d,species\n1,2.5,3,4,0\n5,6.5,7,8,1\n9,10.5,11,12,1\n",
    )
    .unwrap();
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"csv\"\nfiles = \"*.csv\"\nlabel_name = \"species\"\nx = \"features\"\nbatch_size = 2\nmap = [{ op = \"stack\", components = [\"a\", \"b\", \"c\", \"d\"], output = \"features\" }]\n",
    );
    let p = cfg.data.train.as_ref().unwrap();
    assert_eq!(p.y_name(), "species");
    let b = batches(&build(&cfg, Split::Train).unwrap());
    assert_eq!(b.len(), 2);
    let x = b[0].get("x").unwrap();
    assert_eq!(x.shape(), &[2, 4]);
    assert_eq!(f32s(x), vec![1.0, 2.5, 3.0, 4.0, 5.0, 6.5, 7.0, 8.0]);
    assert_eq!(b[1].get("y").unwrap().data(), &Buffer::I32(vec![1]));
    // select_cols by index, and column_defaults.
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"csv\"\nfiles = \"rows.csv\"\nselect_cols = [1, \"species\"]\ncolumn_defaults = [0.0, \"int64\"]\nlabel_name = \"species\"\nx = \"b\"\n",
    );
    let b = batches(&build(&cfg, Split::Train).unwrap());
    assert_eq!(
        b[0].get("x").unwrap().data(),
        &Buffer::F32(vec![2.5, 6.5, 10.5])
    );
    assert_eq!(b[0].get("y").unwrap().data(), &Buffer::I64(vec![0, 1, 1]));
}

#[test]
fn tfrecord_features_are_parsed() {
    use kiln_data::tfrecord::{Example, Feature, TfRecordWriter};
    let s = Scratch::new("tfrecord");
    let mut w = TfRecordWriter::create(s.0.join("d.tfrecord.gz"), Compression::Gzip).unwrap();
    for i in 0..3 {
        let e = Example::new()
            .with("pixels", Feature::int64(vec![i, i + 1, i + 2, i + 3]))
            .with("label", Feature::int64(vec![i % 2]));
        w.write(&e.to_bytes()).unwrap();
    }
    w.finish().unwrap();
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"tfrecord\"\nfiles = \"d.tfrecord.gz\"\ncompression_type = \"GZIP\"\nx = \"pixels\"\ny = \"label\"\nmap = [{ op = \"cast\", dtype = \"float32\" }]\n[data.train.features]\npixels = { dtype = \"int64\", shape = [4] }\nlabel = { type = \"FixedLenFeature\", dtype = \"int64\", default_value = 0 }\nextra = { type = \"VarLenFeature\", dtype = \"float32\" }\n",
    );
    let b = batches(&build(&cfg, Split::Train).unwrap());
    assert_eq!(b.len(), 1);
    let x = b[0].get("x").unwrap();
    assert_eq!((x.shape(), x.dtype()), (&[3, 4][..], DType::F32));
    assert_eq!(b[0].get("y").unwrap().data(), &Buffer::I64(vec![0, 1, 0]));
}

#[test]
fn tfrecord_raw_images_are_decoded_reshaped_and_flipped() {
    use kiln_data::tfrecord::{Example, Feature, TfRecordWriter};
    let s = Scratch::new("tfrecord-raw");
    let mut w = TfRecordWriter::create(s.0.join("raw.tfrecord"), Compression::None).unwrap();
    // Image i: 2x3x1 pixels 10 i .. 10 i + 5, as a bytes feature (tf.io.decode_raw's input).
    let pixels = |i: u8| -> Vec<u8> { (0..6).map(|p| 10 * i + p).collect() };
    for i in 0..8u8 {
        let e = Example::new()
            .with("image", Feature::bytes([pixels(i)]))
            .with("label", Feature::int64(vec![i64::from(i)]));
        w.write(&e.to_bytes()).unwrap();
    }
    w.finish().unwrap();
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"tfrecord\"\nfiles = \"raw.tfrecord\"\nx = \"image\"\ny = \"label\"\nbatch_size = 8\nmap = [{ op = \"decode_raw\", out_type = \"uint8\" }, { op = \"reshape\", shape = [2, 3, 1] }, { op = \"cast\", dtype = \"float32\" }, { op = \"random_flip\", mode = \"horizontal\" }]\n[data.train.features]\nimage = { dtype = \"string\" }\nlabel = { dtype = \"int64\" }\n",
    );
    let b = batches(&build(&cfg, Split::Train).unwrap());
    let x = b[0].get("x").unwrap();
    assert_eq!((x.shape(), x.dtype()), (&[8, 2, 3, 1][..], DType::F32));
    let values = f32s(x);
    let mut flipped = 0;
    for (i, image) in values.chunks(6).enumerate() {
        let original: Vec<f32> = pixels(i as u8).iter().map(|&p| f32::from(p)).collect();
        // Left-right flip of each row of 3.
        let mirrored: Vec<f32> = original
            .chunks(3)
            .flat_map(|row| row.iter().rev().copied())
            .collect();
        assert!(image == original || image == mirrored, "{i}: {image:?}");
        flipped += usize::from(image == mirrored);
    }
    // Seed 3 flips some of the 8 images and keeps others.
    assert!(flipped > 0 && flipped < 8, "{flipped} of 8 flipped");
    assert_eq!(
        b[0].get("y").unwrap().data(),
        &Buffer::I64((0..8).collect())
    );
}

#[test]
fn missing_components_and_files_are_clear_errors() {
    let s = Scratch::new("errors");
    write_npy(&s.0);
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\ncomponents = [\"image\", \"label\"]\nx = \"image\"\ny = \"labels\"\n",
    );
    let e = build(&cfg, Split::Train)
        .unwrap()
        .iter()
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "data.train.y: the elements have no component \"labels\" (components: [\"image\", \"label\"])"
        ),
        "{e}"
    );
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"nope.npy\"]\n",
    );
    let e = build(&cfg, Split::Train).unwrap_err().to_string();
    assert!(
        e.starts_with("data.train.files[1]: ") && e.contains("nope.npy does not exist"),
        "{e}"
    );
    let cfg = config(&s.0, "[data.train]\nsource = \"text\"\nfiles = \"*.txt\"\n");
    let e = build(&cfg, Split::Train).unwrap_err().to_string();
    assert!(e.contains("No files matched pattern"), "{e}");
}

#[test]
fn predict_applies_the_feature_ops_in_inference_mode() {
    let s = Scratch::new("predict");
    write_npy(&s.0);
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\nmap = [{ op = \"random_crop\", height = 1, width = 2 }, { op = \"rescale\", scale = 0.5 }, { op = \"one_hot\", component = \"y\", depth = 2 }]\n",
    );
    let x = Array::new(vec![2, 2, 2], Buffer::U8(vec![0, 2, 4, 6, 8, 10, 12, 14])).unwrap();
    let b = batches(&predict_dataset(&cfg, x).unwrap());
    let out = b[0].get("x").unwrap();
    // The central 1x2 window of a 2x2 image is its first row (offset (2 - 1) / 2 = 0).
    assert_eq!(out.shape(), &[2, 1, 2]);
    assert_eq!(f32s(out), vec![0.0, 1.0, 4.0, 5.0]);
    assert_eq!(b[0].names().collect::<Vec<_>>(), vec!["x"]);
}

#[test]
fn bench_counts_batches_and_examples() {
    let s = Scratch::new("bench");
    write_npy(&s.0);
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\nbatch_size = 4\n",
    );
    let r = bench(&cfg, Split::Train, None).unwrap();
    assert_eq!((r.batches, r.elements), (2, 6));
    assert_eq!(
        r.batch_shapes[0],
        ("x".to_string(), DType::U8, vec![4, 2, 2])
    );
    let r = bench(&cfg, Split::Train, Some(1)).unwrap();
    assert_eq!((r.batches, r.elements), (1, 4));
    assert!(r.elements_per_second() > 0.0);
    // Three fresh iterations; each report carries its own iteration's statistics: the caller
    // got 2 batches, and the last stage (prefetch) handed over both.
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\nbatch_size = 4\nmap = [{ op = \"rescale\", scale = 0.5 }]\nnum_parallel_calls = 2\nprefetch = 1\n",
    );
    let rs = bench_epochs(&cfg, Split::Train, None, 3).unwrap();
    assert_eq!(
        rs.iter().map(|r| r.epoch).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    for r in &rs {
        assert_eq!((r.batches, r.elements, r.stats.elements), (2, 6, 2));
        let names: Vec<&str> = r.stats.stages.iter().map(|st| st.name).collect();
        assert_eq!(names, vec!["map", "map", "prefetch"], "{}", r.stats);
        // The rescale map: 6 examples on 2 workers; the select map runs inline; prefetch
        // keeps one batch.
        let (rescale, select, prefetch) =
            (&r.stats.stages[0], &r.stats.stages[1], &r.stats.stages[2]);
        assert_eq!((rescale.elements, rescale.parallelism), (6, 2));
        assert_eq!((select.elements, select.parallelism), (6, 0));
        assert_eq!((prefetch.elements, prefetch.buffer), (2, 1));
    }
    assert_eq!(bench_epochs(&cfg, Split::Train, None, 0).unwrap().len(), 1);
}

#[test]
fn repeat_and_deterministic_keys() {
    let s = Scratch::new("repeat");
    write_npy(&s.0);
    // repeat = 2 after an unshuffled source: tf.data's `repeat(2)`, the 6 examples twice,
    // batched across the boundary (batch 4: [0..4], [4, 5, 0, 1], [2..6]).
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\nrepeat = 2\nbatch_size = 4\nnum_parallel_calls = 2\ndeterministic = false\nmap = [{ op = \"rescale\", scale = 0.25 }]\n",
    );
    let ds = build(&cfg, Split::Train).unwrap();
    assert_eq!(ds.cardinality(), Cardinality::Finite(3));
    let b = batches(&ds);
    let ys: Vec<i64> = b
        .iter()
        .flat_map(|e| e.get("y").unwrap().data().to_i64())
        .collect();
    // deterministic = false may reorder; every example comes twice with its own label.
    let mut firsts: Vec<(i64, i64)> = b
        .iter()
        .flat_map(|e| {
            let x = f32s(e.get("x").unwrap());
            let y = e.get("y").unwrap().data().to_i64();
            (0..y.len())
                .map(|i| ((x[4 * i] * 4.0) as i64 / 4, y[i]))
                .collect::<Vec<_>>()
        })
        .collect();
    firsts.sort_unstable();
    let expected: Vec<(i64, i64)> = (0..6).flat_map(|i| [(i, i % 2), (i, i % 2)]).collect();
    assert_eq!(firsts, expected);
    assert_eq!(ys.len(), 12);
    // With shuffling, each pass is a permutation of the 6 examples (reshuffled each pass).
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\nrepeat = 3\nshuffle = { buffer_size = 6 }\nbatch_size = 6\n",
    );
    let b = batches(&build(&cfg, Split::Train).unwrap());
    assert_eq!(b.len(), 3);
    let passes: Vec<Vec<u8>> = b
        .iter()
        .map(|e| {
            let x = e.get("x").unwrap().data().to_i64();
            x.chunks(4).map(|c| (c[0] / 4) as u8).collect()
        })
        .collect();
    for pass in &passes {
        let mut sorted = pass.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![0, 1, 2, 3, 4, 5], "{passes:?}");
    }
    assert!(
        passes[0] != passes[1] || passes[1] != passes[2],
        "{passes:?}"
    );
    // repeat = -1 needs fit.steps_per_epoch; 0 is refused when the config is read.
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\nrepeat = -1\n",
    );
    let e = build(&cfg, Split::Train).unwrap_err().to_string();
    assert!(
        e.contains("data.train.repeat") && e.contains("steps_per_epoch"),
        "{e}"
    );
    let text = format!(
        "name = \"t\"\n[data]\ndata_dir = {:?}\n[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\nrepeat = 0\n[model]\nlayers = [{{ type = \"Input\", shape = [4] }}, {{ type = \"Dense\", units = 2 }}]\n[compile]\noptimizer = \"sgd\"\nloss = \"sparse_categorical_crossentropy\"\n",
        s.0.display().to_string()
    );
    let e = RunConfig::from_toml_str(&text).unwrap_err().to_string();
    assert!(e.contains("data.train.repeat"), "{e}");
}

/// GZIP text and CSV sources (`compression_type`), as TensorFlow reads them
/// (tests/reference/compressed_text_csv_reference.py).
#[test]
fn gzip_text_and_csv_sources() {
    use std::io::Write;
    let s = Scratch::new("gzip");
    let gz = |name: &str, data: &[u8]| {
        let mut enc = kiln_data::Compression::Gzip.encoder(Vec::new());
        enc.write_all(data).unwrap();
        std::fs::write(s.0.join(name), enc.finish().unwrap()).unwrap();
    };
    gz(
        "rows.csv.gz",
        b"a,b,c,d,species\n1,2.5,3,4,0\n5,6.5,7,8,1\n",
    );
    gz("lines.txt.gz", b"first\nsecond\r\n");
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"csv\"\nfiles = \"rows.csv.gz\"\ncompression_type = \"GZIP\"\nlabel_name = \"species\"\nx = \"features\"\nmap = [{ op = \"stack\", components = [\"a\", \"b\", \"c\", \"d\"], output = \"features\" }]\n",
    );
    let b = batches(&build(&cfg, Split::Train).unwrap());
    assert_eq!(
        f32s(b[0].get("x").unwrap()),
        vec![1.0, 2.5, 3.0, 4.0, 5.0, 6.5, 7.0, 8.0]
    );
    assert_eq!(b[0].get("y").unwrap().data(), &Buffer::I32(vec![0, 1]));
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"text\"\nfiles = \"lines.txt.gz\"\ncompression_type = \"GZIP\"\nx = \"line\"\ny = \"line2\"\n",
    );
    // Only the source matters here: the text source yields {line}.
    let p = cfg.data.train.as_ref().unwrap();
    let lines: Vec<Vec<u8>> = source(&cfg, p, "data.train", None)
        .unwrap()
        .iter()
        .map(|e| e.unwrap().get("line").unwrap().data().as_strings().unwrap()[0].clone())
        .collect();
    assert_eq!(lines, vec![b"first".to_vec(), b"second".to_vec()]);
    // compression_type belongs to tfrecord, csv and text only.
    let text = format!(
        "name = \"t\"\n[data]\ndata_dir = {:?}\n[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\"]\ncompression_type = \"GZIP\"\n[model]\nlayers = [{{ type = \"Input\", shape = [4] }}, {{ type = \"Dense\", units = 2 }}]\n[compile]\noptimizer = \"sgd\"\nloss = \"sparse_categorical_crossentropy\"\n",
        s.0.display().to_string()
    );
    let e = RunConfig::from_toml_str(&text).unwrap_err().to_string();
    assert!(
        e.contains("data.train.compression_type") && e.contains("\"text\""),
        "{e}"
    );
}

/// A `[data.train]` table reading `s3://` files (written to the bucket with kiln-data's
/// TFRecord writer) gives the same batches as the local copy. Needs the test S3 server:
/// `scripts/s3-test-server.sh start` and `KILN_TEST_S3_ENDPOINT` (scripts/test.sh does both).
#[test]
#[ignore = "needs an S3 server: scripts/s3-test-server.sh start"]
fn tfrecord_pipeline_over_s3() {
    use kiln_data::tfrecord::{Example, Feature, TfRecordWriter};
    use std::io::{Read, Write};
    let endpoint = std::env::var("KILN_TEST_S3_ENDPOINT")
        .expect("KILN_TEST_S3_ENDPOINT: start scripts/s3-test-server.sh");
    kiln_data::storage::set_s3_options(Some(
        kiln_data::storage::S3Options::new()
            .with("AWS_ENDPOINT_URL", endpoint.clone())
            .with("AWS_ACCESS_KEY_ID", "testing")
            .with("AWS_SECRET_ACCESS_KEY", "testing")
            .with("AWS_REGION", "us-east-1"),
    ));
    // CreateBucket is a plain PUT /bucket (object_store cannot create buckets).
    let bucket = format!("kiln-pipeline-{}", std::process::id());
    let host = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    write!(
        stream,
        "PUT /{bucket} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");

    let s = Scratch::new("s3");
    for target in [
        s.0.join("train.tfrecord.gz"),
        PathBuf::from(format!("s3://{bucket}/data/train.tfrecord.gz")),
    ] {
        let mut w = TfRecordWriter::create(&target, kiln_data::Compression::Gzip).unwrap();
        for i in 0..5i64 {
            let x: Vec<f32> = (0..4).map(|j| (4 * i + j) as f32).collect();
            let e = Example::new()
                .with("x", Feature::float32(x))
                .with("y", Feature::int64(vec![i % 2]));
            w.write(&e.to_bytes()).unwrap();
        }
        w.finish().unwrap();
    }
    let table = |files: &str| {
        format!(
            "[data.train]\nsource = \"tfrecord\"\nfiles = {files:?}\ncompression_type = \"GZIP\"\nbatch_size = 2\nfeatures.x = {{ dtype = \"float32\", shape = [4] }}\nfeatures.y = {{ dtype = \"int64\" }}\n"
        )
    };
    let local = batches(&build(&config(&s.0, &table("train.tfrecord.gz")), Split::Train).unwrap());
    let url = format!("s3://{bucket}/data/*.tfrecord.gz");
    let remote = batches(&build(&config(&s.0, &table(&url)), Split::Train).unwrap());
    assert_eq!(remote, local);
    assert_eq!(remote.len(), 3);
    assert_eq!(
        f32s(remote[2].get("x").unwrap()),
        vec![16.0, 17.0, 18.0, 19.0]
    );
    assert_eq!(remote[1].get("y").unwrap().data(), &Buffer::I64(vec![0, 1]));
    // A missing object is named when the pipeline reads it.
    let missing = format!("s3://{bucket}/data/none.tfrecord.gz");
    let ds = build(&config(&s.0, &table(&missing)), Split::Train).unwrap();
    let err = ds.iter().next().unwrap().unwrap_err().to_string();
    assert!(err.contains(&missing), "{err}");
    kiln_data::storage::set_s3_options(None);
}

/// A worker's shard of a CSV pipeline reads every N-th file of the sorted glob and batches
/// at its own batch size; `shardable_files` counts the files (IDX sources: none).
#[test]
fn a_shard_reads_every_nth_file_at_its_batch_size() {
    let s = Scratch::new("shard");
    for (name, rows) in [("p0.csv", 0..3), ("p1.csv", 3..5), ("p2.csv", 5..9)] {
        let body: String = rows.map(|i| format!("{i},{}\n", i % 2)).collect();
        std::fs::write(s.0.join(name), format!("v,label\n{body}")).unwrap();
    }
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"csv\"\nfiles = \"p*.csv\"\nlabel_name = \"label\"\nx = \"v\"\nbatch_size = 4\n",
    );
    assert_eq!(shardable_files(&cfg, Split::Train).unwrap(), Some(3));
    let values = |ds: &Dataset| -> Vec<Vec<f32>> {
        batches(ds)
            .iter()
            .map(|b| match b.get("x").unwrap().data() {
                Buffer::I32(v) => v.iter().map(|&x| x as f32).collect(),
                Buffer::I64(v) => v.iter().map(|&x| x as f32).collect(),
                Buffer::F32(v) => v.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let shard = |index| Shard {
        index,
        count: 2,
        batch_size: 2,
    };
    // Worker 0: p0 and p2 (rows 0..3, 5..9) in batches of 2; worker 1: p1 (rows 3..5).
    let w0 = values(&build_shard(&cfg, Split::Train, shard(0)).unwrap());
    assert_eq!(
        w0,
        [vec![0.0, 1.0], vec![2.0, 5.0], vec![6.0, 7.0], vec![8.0]]
    );
    let w1 = values(&build_shard(&cfg, Split::Train, shard(1)).unwrap());
    assert_eq!(w1, [vec![3.0, 4.0]]);
    // The whole pipeline, for comparison: every file at batch_size 4.
    assert_eq!(values(&build(&cfg, Split::Train).unwrap()).len(), 3);
}

/// One iteration of `ds`: the values of component `name` (as f32) and the skip statistics.
fn values_and_skips(ds: &Dataset, name: &str) -> (Vec<f32>, Option<kiln_data::SkipStats>) {
    let mut it = ds.iter();
    let values = it
        .by_ref()
        .flat_map(|b| f32s(b.unwrap().get(name).unwrap()))
        .collect();
    (values, it.skip_stats())
}

/// `ignore_errors = true` drops a CSV row that does not parse, a TFRecord record that does
/// not match the features, and an example whose `map` op fails; `take` counts good rows. A
/// strict pipeline stops at the first one, saying how to skip such rows.
#[test]
fn ignore_errors_skips_bad_records_of_every_source() {
    use kiln_data::tfrecord::{Example, Feature, TfRecordWriter};
    let s = Scratch::new("ignore-errors");
    std::fs::write(s.0.join("rows.csv"), "a,b\n1,0\nx,1\n3,0\n4,1\n").unwrap();
    let csv = |extra: &str| {
        config(
            &s.0,
            &format!(
                "[data.train]\nsource = \"csv\"\nfiles = \"rows.csv\"\ncolumn_defaults = [0.0, 0]\nlabel_name = \"b\"\nx = \"a\"\n{extra}"
            ),
        )
    };
    let strict = build(&csv(""), Split::Train).unwrap();
    let e = strict.iter().find_map(|b| b.err()).unwrap().to_string();
    assert!(
        e.contains("rows.csv:3: column 0 (\"a\"): \"x\" is not a valid float32")
            && e.contains("or set ignore_errors = true to skip bad rows"),
        "{e}"
    );
    let (a, skips) = values_and_skips(
        &build(&csv("ignore_errors = true\n"), Split::Train).unwrap(),
        "x",
    );
    assert_eq!(a, vec![1.0, 3.0, 4.0]);
    let skips = skips.unwrap();
    assert_eq!((skips.count, skips.first[0].index), (1, 1));
    assert_eq!(
        skips.first[0].path.as_deref(),
        Some(s.0.join("rows.csv").as_path())
    );
    assert!(
        !skips.first[0].error.contains("ignore_errors"),
        "{}",
        skips.first[0].error
    );
    let (a, _) = values_and_skips(
        &build(&csv("ignore_errors = true\ntake = 2\n"), Split::Train).unwrap(),
        "x",
    );
    assert_eq!(a, vec![1.0, 3.0], "take counts the good rows");

    let mut w = TfRecordWriter::create(s.0.join("d.tfrecord"), Compression::None).unwrap();
    for label in [
        Feature::int64(vec![0]),
        Feature::float32(vec![1.0]),
        Feature::int64(vec![1]),
    ] {
        let e = Example::new()
            .with("v", Feature::float32(vec![2.0]))
            .with("label", label);
        w.write(&e.to_bytes()).unwrap();
    }
    w.finish().unwrap();
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"tfrecord\"\nfiles = \"d.tfrecord\"\nignore_errors = true\nx = \"v\"\ny = \"label\"\n[data.train.features]\nv = { dtype = \"float32\" }\nlabel = { dtype = \"int64\" }\n",
    );
    let (v, skips) = values_and_skips(&build(&cfg, Split::Train).unwrap(), "x");
    assert_eq!(v, vec![2.0, 2.0]);
    let skips = skips.unwrap();
    assert_eq!(skips.count, 1);
    assert!(
        skips.first[0].error.starts_with(&format!(
            "{}: tf.train.Example record 1 (at byte 49), feature \"label\"",
            s.0.join("d.tfrecord").display()
        )),
        "{}",
        skips.first[0].error
    );

    // A map op that fails for some examples: one_hot with depth 1 on labels 0, 1, 0, 1, ...
    write_npy(&s.0);
    let npy = |extra: &str| {
        config(
            &s.0,
            &format!(
                "[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\nmap = [{{ op = \"one_hot\", depth = 1, component = \"y\" }}]\n{extra}"
            ),
        )
    };
    let e = build(&npy(""), Split::Train)
        .unwrap()
        .iter()
        .find_map(|b| b.err())
        .unwrap();
    assert!(e.to_string().contains("one_hot"), "{e}");
    let (y, skips) = values_and_skips(
        &build(&npy("ignore_errors = true\n"), Split::Train).unwrap(),
        "y",
    );
    assert_eq!(
        y,
        vec![1.0, 1.0, 1.0],
        "the three examples of class 0, one-hot"
    );
    let skips = skips.unwrap();
    let indices: Vec<u64> = skips.first.iter().map(|r| r.index).collect();
    assert_eq!((skips.count, indices), (3, vec![1, 3, 5]));
}

/// csv `column_names`: a headerless file (`header = false` needs them), or names in place of
/// the header's; `include_hidden` lets a glob take `._rows.csv`.
#[test]
fn csv_column_names_and_headerless_files() {
    let s = Scratch::new("column-names");
    std::fs::write(s.0.join("rows.csv"), "1,2.5,0\n3,4.5,1\n").unwrap();
    std::fs::write(s.0.join("named.csv"), "p,q,r\n5,6.5,1\n").unwrap();
    std::fs::write(
        s.0.join("._rows.csv"),
        "\u{0}\u{5}\u{16}\u{7} Mac OS X attributes",
    )
    .unwrap();
    let table = |files: &str, extra: &str| {
        format!(
            "[data.train]\nsource = \"csv\"\nfiles = \"{files}\"\ncolumn_names = [\"a\", \"b\", \"label\"]\nlabel_name = \"label\"\nx = \"b\"\n{extra}"
        )
    };
    let cfg = config(&s.0, &table("rows.csv", "header = false\n"));
    let b = batches(&build(&cfg, Split::Train).unwrap());
    assert_eq!(b[0].get("x").unwrap().data(), &Buffer::F32(vec![2.5, 4.5]));
    assert_eq!(b[0].get("y").unwrap().data(), &Buffer::I32(vec![0, 1]));
    // With a header, the names replace the header's; the header line is skipped.
    let cfg = config(&s.0, &table("named.csv", ""));
    let b = batches(&build(&cfg, Split::Train).unwrap());
    assert_eq!(b[0].get("x").unwrap().data(), &Buffer::F32(vec![6.5]));
    // Globs leave the hidden companion file out, unless include_hidden = true.
    let cfg = config(&s.0, &table("r*.csv", "header = false\n"));
    assert_eq!(batches(&build(&cfg, Split::Train).unwrap()).len(), 1);
    let cfg = config(
        &s.0,
        &table("*rows.csv", "header = false\ninclude_hidden = true\n"),
    );
    let e = build(&cfg, Split::Train).unwrap_err().to_string();
    assert!(e.contains("._rows.csv"), "{e}");

    let err = |data: &str| {
        let text = format!(
            "name = \"t\"\n[data]\n{data}\n[model]\nlayers = [{{ type = \"Input\", shape = [4] }}, {{ type = \"Dense\", units = 2 }}]\n[compile]\noptimizer = \"sgd\"\nloss = \"sparse_categorical_crossentropy\"\n"
        );
        RunConfig::from_toml_str(&text).unwrap_err().to_string()
    };
    let e = err("[data.train]\nsource = \"csv\"\nfiles = \"rows.csv\"\nheader = false\n");
    assert!(
        e.starts_with(
            "data.train.column_names: header = false needs the column names: give \
                       column_names = [\"a\", \"b\", ...]"
        ),
        "{e}"
    );
    let e = err(
        "[data.train]\nsource = \"csv\"\nfiles = \"rows.csv\"\ncolumn_names = [\"a\", \"a\"]\n",
    );
    assert!(
        e.contains("data.train.column_names: \"a\" appears twice"),
        "{e}"
    );
    let e = err("[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\"]\ncolumn_names = [\"a\"]\n");
    assert!(
        e.contains("data.train.column_names: applies to source = \"csv\" only"),
        "{e}"
    );
}

/// `data.npy`: 20 time steps of 2 features (`2 t`, `2 t + 1`); `targets.npy`: `10 t`.
fn write_series(dir: &Path) {
    let data = Array::new(
        vec![20, 2],
        Buffer::F32((0..40).map(|v| v as f32).collect()),
    )
    .unwrap();
    let targets = Array::new(vec![20], Buffer::I64((0..200).step_by(10).collect())).unwrap();
    kiln_data::npy::write_npy(&dir.join("data.npy"), &data).unwrap();
    kiln_data::npy::write_npy(&dir.join("targets.npy"), &targets).unwrap();
}

const SERIES: &str = "[data.train]\nsource = \"timeseries\"\nfiles = [\"data.npy\", \"targets.npy\"]\nbatch_size = 2\n";

#[test]
fn timeseries_source_cuts_windows_as_keras() {
    let s = Scratch::new("timeseries");
    write_series(&s.0);
    // Keras: starts 0, 4, 8, 12 (20 - 2 * 2 = 16 windows before the stride), target
    // targets[start].
    let cfg = config(
        &s.0,
        &format!("{SERIES}sequence_length = 3\nsampling_rate = 2\nsequence_stride = 4\n"),
    );
    let b = batches(&build(&cfg, Split::Train).unwrap());
    assert_eq!(b.len(), 2);
    let x = b[0].get("x").unwrap();
    assert_eq!(x.shape(), &[2, 3, 2]);
    assert_eq!(
        f32s(x),
        [
            0.0, 1.0, 4.0, 5.0, 8.0, 9.0, 8.0, 9.0, 12.0, 13.0, 16.0, 17.0
        ]
    );
    assert_eq!(b[0].get("y").unwrap().data(), &Buffer::I64(vec![0, 40]));
    assert_eq!(b[1].get("y").unwrap().data(), &Buffer::I64(vec![80, 120]));
    // Without targets, and windows past the data: an error naming the key.
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"timeseries\"\nfiles = \"data.npy\"\nsequence_length = 30\n",
    );
    let e = build(&cfg, Split::Train).unwrap_err().to_string();
    assert!(
        e.starts_with("data.train.sequence_length: sequence_length 30 at sampling_rate 1 spans 30"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
}

fn config_error(data: &str) -> String {
    let text = format!(
        "name = \"t\"\n[data]\n{data}\n[model]\nlayers = [{{ type = \"Input\", shape = [4] }}, {{ type = \"Dense\", units = 2 }}]\n[compile]\noptimizer = \"sgd\"\nloss = \"categorical_crossentropy\"\n"
    );
    let e = RunConfig::from_toml_str(&text).unwrap_err().to_string();
    assert!(!e.contains('\n'), "{e}");
    e
}

#[test]
fn data_utility_keys_are_checked_naming_the_key() {
    let cases = [
        (
            format!("{SERIES}sequence_length = 3\nsequence_stride = 0\n"),
            "data.train.sequence_stride: must be at least 1",
        ),
        (
            SERIES.to_string(),
            "data.train.sequence_length: source = \"timeseries\" needs sequence_length",
        ),
        (
            "[data.train]\nsource = \"npy\"\nfiles = \"x.npy\"\nsequence_length = 3\n".into(),
            "data.train.sequence_length: applies to source = \"timeseries\" only, not \"npy\"",
        ),
        (
            format!(
                "{SERIES}sequence_length = 3\nmap = [{{ op = \"pad_sequences\", maxlen = 0 }}]\n"
            ),
            "data.train.map[0].maxlen: must be at least 1",
        ),
        (
            format!(
                "{SERIES}sequence_length = 3\nmap = [{{ op = \"pad_sequences\", maxlen = 4, padding = \"both\" }}]\n"
            ),
            "data.train.map[0].padding: \"both\" is not a side",
        ),
        (
            format!(
                "{SERIES}sequence_length = 3\npadded_batch = {{ padded_shapes = {{ x = [-2] }} }}\n"
            ),
            "data.train.padded_batch.padded_shapes.x: -2 is not a size",
        ),
        (
            format!("{SERIES}sequence_length = 3\nmix_up = {{ alpha = 0.0 }}\n"),
            "data.train.mix_up.alpha: must be > 0",
        ),
        (
            format!("{SERIES}sequence_length = 3\nmix_up = {{}}\ncut_mix = {{}}\n"),
            "data.train.cut_mix: give mix_up or cut_mix, not both",
        ),
        (
            format!(
                "{SERIES}sequence_length = 3\n{}sequence_length = 3\ncut_mix = {{}}\n",
                SERIES.replace("train", "validation")
            ),
            "data.validation.cut_mix: cut_mix augments training batches",
        ),
    ];
    for (data, want) in cases {
        let e = config_error(&data);
        assert!(e.contains(want), "{data}\n{e}");
    }
}

#[test]
fn var_len_sequences_are_padded_per_example_or_per_batch() {
    use kiln_data::tfrecord::{Example, Feature, TfRecordWriter};
    let s = Scratch::new("padding");
    let mut w = TfRecordWriter::create(s.0.join("t.tfrecord"), Compression::None).unwrap();
    for tokens in [vec![1, 2, 3], vec![4, 5], vec![6, 7, 8, 9, 10], vec![11]] {
        let e = Example::new()
            .with("tokens", Feature::int64(tokens))
            .with("label", Feature::int64(vec![1]));
        w.write(&e.to_bytes()).unwrap();
    }
    w.finish().unwrap();
    let table = "[data.train]\nsource = \"tfrecord\"\nfiles = \"t.tfrecord\"\nx = \"tokens\"\ny = \"label\"\nbatch_size = 4\n";
    let features = "[data.train.features]\ntokens = { type = \"VarLenFeature\", dtype = \"int64\" }\nlabel = { dtype = \"int64\" }\n";
    // keras.utils.pad_sequences(maxlen=4, truncating="post") (tests/reference/timeseries_reference.py).
    let cfg = config(
        &s.0,
        &format!(
            "{table}map = [{{ op = \"pad_sequences\", maxlen = 4, truncating = \"post\" }}]\n{features}"
        ),
    );
    let b = batches(&build(&cfg, Split::Train).unwrap());
    assert_eq!(b[0].get("x").unwrap().shape(), &[4, 4]);
    assert_eq!(
        b[0].get("x").unwrap().data(),
        &Buffer::I64(vec![0, 1, 2, 3, 0, 0, 4, 5, 6, 7, 8, 9, 0, 0, 0, 11])
    );
    // padded_batch: to the longest in the batch, with -1.
    let cfg = config(
        &s.0,
        &format!("{table}padded_batch = {{ padding_values = {{ x = -1 }} }}\n{features}"),
    );
    let b = batches(&build(&cfg, Split::Train).unwrap());
    assert_eq!(b[0].get("x").unwrap().shape(), &[4, 5]);
    assert_eq!(
        b[0].get("x").unwrap().data().to_i64()[..10],
        [1, 2, 3, -1, -1, 4, 5, -1, -1, -1]
    );
}

#[test]
fn mix_up_and_cut_mix_mix_training_batches_reproducibly() {
    let s = Scratch::new("mix");
    let x = Array::new(vec![8, 4, 4, 1], Buffer::U8((0..128).collect())).unwrap();
    let y = Array::new(vec![8], Buffer::I64((0..8).map(|i| i % 2).collect())).unwrap();
    kiln_data::npy::write_npy(&s.0.join("x.npy"), &x).unwrap();
    kiln_data::npy::write_npy(&s.0.join("y.npy"), &y).unwrap();
    let table = "[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\nbatch_size = 4\nmap = [{ op = \"one_hot\", component = \"y\", depth = 2 }]\n";
    for mix in ["mix_up = { alpha = 0.4 }", "cut_mix = { seed = 9 }"] {
        let cfg = config(&s.0, &format!("{table}{mix}\n"));
        let run = || batches(&build(&cfg, Split::Train).unwrap());
        let (a, b) = (run(), run());
        assert_eq!(a, b, "{mix}: same seed, same batches");
        let plain = batches(&build(&config(&s.0, table), Split::Train).unwrap());
        assert_ne!(a, plain, "{mix} changes the batches");
        for batch in &a {
            let y = f32s(batch.get("y").unwrap());
            for pair in y.chunks(2) {
                assert!((pair[0] + pair[1] - 1.0).abs() < 1e-6, "{mix}: {y:?}");
            }
        }
    }
    // Integer labels: the error names the fix.
    let cfg = config(
        &s.0,
        "[data.train]\nsource = \"npy\"\nfiles = [\"x.npy\", \"y.npy\"]\nbatch_size = 4\nmix_up = {}\n",
    );
    let e = build(&cfg, Split::Train)
        .unwrap()
        .iter()
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(e.contains("one-hot float labels"), "{e}");
}
