//! Storage tests: `file://` URLs (always), and `s3://` against a real S3-compatible server on
//! loopback (ignored unless asked for: `scripts/s3-test-server.sh start` prints the endpoint to
//! put in `KILN_TEST_S3_ENDPOINT`; `scripts/test.sh` runs ignored tests, and `.ci/run` starts
//! the server first).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use object_store::{ObjectStoreExt, PutPayload};

use super::*;
use crate::dataset::Dataset;
use crate::element::{Array, Buffer, DType, Element};
use crate::sources::{CsvOptions, RecordDefault};
use crate::tfrecord::{
    Example, ExampleSpec, Feature, FeatureDType, FeatureSpec, TfRecordReader, TfRecordWriter,
};
use crate::{Compression, Parallelism};

/// Every element of one iteration (panics on errors).
fn elements(ds: &Dataset) -> Vec<Element> {
    ds.iter().map(|e| e.unwrap()).collect()
}

/// `n` examples `{"x": float32 [2], "label": int64 []}` with x = (i, i/2), label = i.
fn write_examples(path: &Path, compression: Compression, n: i64) {
    let mut writer = TfRecordWriter::create(path, compression).unwrap();
    for i in 0..n {
        let example = Example::new()
            .with("x", Feature::float32(vec![i as f32, i as f32 / 2.0]))
            .with("label", Feature::int64(vec![i]));
        writer.write(&example.to_bytes()).unwrap();
    }
    writer.finish().unwrap();
}

fn example_spec() -> ExampleSpec {
    ExampleSpec::new()
        .with("x", FeatureSpec::fixed_len(vec![2], FeatureDType::Float32))
        .with("label", FeatureSpec::fixed_len(vec![], FeatureDType::Int64))
}

fn parsed(files: Vec<PathBuf>, compression: Compression) -> Vec<Element> {
    elements(
        &Dataset::tfrecord(files, compression)
            .parse_example(example_spec(), Parallelism::Sequential),
    )
}

const CSV: &[u8] = b"name,score,count\n\"a, quoted\",1.5,3\nb,,4\nc,-2.25,\n";

fn csv_defaults() -> Vec<RecordDefault> {
    vec![
        RecordDefault::Required(DType::String),
        RecordDefault::Float32(0.0),
        RecordDefault::Int64(-1),
    ]
}

fn csv_options() -> CsvOptions {
    CsvOptions {
        header: true,
        ..CsvOptions::default()
    }
}

// ---------------------------------------------------------------------------------------------
// file:// URLs: no server needed.

#[test]
fn file_urls_read_like_paths() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("a b");
    std::fs::create_dir(&sub).unwrap();
    let tf = sub.join("x.tfrecord");
    write_examples(&tf, Compression::Gzip, 4);
    let tf_url = url::file_url(&tf).unwrap();
    assert!(tf_url.contains("a%20b"), "{tf_url}");
    let from_url = parsed(vec![PathBuf::from(&tf_url)], Compression::Gzip);
    assert_eq!(from_url, parsed(vec![tf.clone()], Compression::Gzip));
    assert_eq!(from_url.len(), 4);
    assert_eq!(
        from_url[3].get("label").unwrap().data(),
        &Buffer::I64(vec![3])
    );

    let csv = sub.join("t.csv");
    std::fs::write(&csv, CSV).unwrap();
    let csv_url = PathBuf::from(url::file_url(&csv).unwrap());
    let rows =
        |p: &PathBuf| elements(&Dataset::csv_dataset([p], csv_defaults(), csv_options()).unwrap());
    assert_eq!(rows(&csv_url), rows(&csv));
    assert_eq!(
        rows(&csv_url)[1].get("1").unwrap().data(),
        &Buffer::F32(vec![0.0])
    );
    assert_eq!(read(&csv_url).unwrap(), CSV);

    // list_files on a file:// glob returns file:// URLs, which open.
    let pattern = format!("{}/*.csv", url::file_url(&sub).unwrap());
    let files = crate::sources::matching_files(&pattern).unwrap();
    assert_eq!(files, vec![csv_url.clone()]);
    let lines = Dataset::text_line_dataset(files);
    let got: Vec<Vec<u8>> = elements(&lines)
        .iter()
        .map(|e| e.get("line").unwrap().data().as_strings().unwrap()[0].clone())
        .collect();
    assert_eq!(got[0], b"name,score,count");
    assert_eq!(got.len(), 4);

    // A missing file:// file names the URL, as a missing path names the path.
    let missing = PathBuf::from(format!("{}/missing.csv", url::file_url(&sub).unwrap()));
    match open(&missing) {
        Err(DataError::Io { path, source }) => {
            assert_eq!(path, missing);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        Err(other) => panic!("expected an Io error, got {other:?}"),
        Ok(_) => panic!("opened a missing file"),
    }
}

#[test]
fn unsupported_schemes_are_io_errors_naming_the_url() {
    let url = PathBuf::from("gs://bucket/train.tfrecord");
    let results: Vec<_> = Dataset::tfrecord(vec![url.clone()], Compression::None)
        .iter()
        .collect();
    assert_eq!(results.len(), 1);
    let err = results[0].as_ref().unwrap_err();
    assert!(
        matches!(err, DataError::Io { path, .. } if path == &url),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("cannot read gs://bucket/train.tfrecord"),
        "{err}"
    );
    assert!(err.to_string().contains("s3://"), "{err}");
    let err = crate::sources::matching_files("gs://bucket/*.csv").unwrap_err();
    assert!(err.to_string().contains("unsupported URL scheme"), "{err}");
    // A malformed S3 glob is refused before any request.
    let err = crate::sources::matching_files("s3://bucket/data/[.csv").unwrap_err();
    assert!(matches!(err, DataError::InvalidArgument(_)), "{err:?}");
    assert!(
        err.to_string().contains("\"s3://bucket/data/[.csv\""),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// s3:// against a server on loopback.

const NEEDS_SERVER: &str = "KILN_TEST_S3_ENDPOINT is not set: start the test S3 server with \
    `scripts/s3-test-server.sh start` and export the endpoint it prints, e.g. \
    KILN_TEST_S3_ENDPOINT=http://127.0.0.1:5555 (.ci/run does both)";

/// The test server's endpoint; panics saying how to start it when unset.
fn endpoint() -> String {
    std::env::var("KILN_TEST_S3_ENDPOINT").unwrap_or_else(|_| panic!("{NEEDS_SERVER}"))
}

/// Options for the test server (moto accepts any credentials). Also made the process-wide
/// options, so the `Dataset` sources use them.
fn server() -> S3Options {
    let options = S3Options::new()
        .with("AWS_ENDPOINT_URL", endpoint())
        .with("AWS_ACCESS_KEY_ID", "testing")
        .with("AWS_SECRET_ACCESS_KEY", "testing")
        .with("AWS_REGION", "us-east-1")
        .with_retries(2, Duration::from_secs(20));
    set_s3_options(Some(options.clone()));
    options
}

/// Creates a fresh bucket (`kiln-<name>-<pid>-<nanos>`) with an S3 `CreateBucket` request — a
/// plain `PUT /bucket`, since `object_store` cannot create buckets — and returns its name.
fn bucket(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let bucket = format!("kiln-{name}-{}-{nanos}", std::process::id());
    let endpoint = endpoint();
    let host = endpoint
        .strip_prefix("http://")
        .expect("the test endpoint is http://host:port")
        .trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(host)
        .unwrap_or_else(|e| panic!("cannot connect to {endpoint}: {e}. {NEEDS_SERVER}"));
    write!(
        stream,
        "PUT /{bucket} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "CreateBucket {bucket} failed: {response}"
    );
    bucket
}

/// Uploads `bytes` to `s3://bucket/key` through object_store and returns the URL as a path.
fn put(options: &S3Options, bucket: &str, key: &str, bytes: Vec<u8>) -> PathBuf {
    let url = url::s3_url(bucket, key);
    let store = s3::store(bucket, options).unwrap();
    let path = s3::object_path(key).unwrap();
    runtime::block_on(async move { store.put(&path, PutPayload::from(bytes)).await })
        .unwrap()
        .unwrap();
    PathBuf::from(url)
}

#[test]
#[ignore = "needs an S3 server: scripts/s3-test-server.sh start"]
fn tfrecord_from_s3_reads_as_the_local_file() {
    let options = server();
    let bucket = bucket("tfrecord");
    let dir = tempfile::tempdir().unwrap();
    for (compression, name) in [
        (Compression::None, "plain.tfrecord"),
        (Compression::Gzip, "train.tfrecord.gz"),
    ] {
        let local = dir.path().join(name);
        write_examples(&local, compression, 50);
        let url = put(
            &options,
            &bucket,
            &format!("data/{name}"),
            std::fs::read(&local).unwrap(),
        );
        let remote = parsed(vec![url.clone()], compression);
        assert_eq!(remote, parsed(vec![local.clone()], compression), "{name}");
        assert_eq!(remote.len(), 50);
        assert_eq!(
            remote[7].get("x").unwrap().data(),
            &Buffer::F32(vec![7.0, 3.5])
        );
        assert_eq!(
            remote[49].get("label").unwrap().data(),
            &Buffer::I64(vec![49])
        );
        // Raw records too, and the same through a second epoch.
        let raw = Dataset::tfrecord(vec![url], compression);
        assert_eq!(elements(&raw), elements(&raw));
        assert_eq!(
            elements(&raw),
            elements(&Dataset::tfrecord(vec![local], compression))
        );
    }
}

#[test]
#[ignore = "needs an S3 server: scripts/s3-test-server.sh start"]
fn csv_text_npy_and_idx_from_s3_read_as_local() {
    let options = server();
    let bucket = bucket("csv");
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("t.csv");
    std::fs::write(&local, CSV).unwrap();
    let url = put(&options, &bucket, "tables/t.csv", CSV.to_vec());
    let rows =
        |p: &PathBuf| elements(&Dataset::csv_dataset([p], csv_defaults(), csv_options()).unwrap());
    let remote = rows(&url);
    assert_eq!(remote, rows(&local));
    assert_eq!(remote.len(), 3);
    assert_eq!(
        remote[0].get("0").unwrap().data(),
        &Buffer::String(vec![b"a, quoted".to_vec()])
    );
    assert_eq!(remote[1].get("1").unwrap().data(), &Buffer::F32(vec![0.0]));
    assert_eq!(remote[2].get("2").unwrap().data(), &Buffer::I64(vec![-1]));

    // make_csv_dataset globs the bucket and infers types from the object.
    let made = Dataset::make_csv_dataset(
        &format!("s3://{bucket}/tables/*.csv"),
        2,
        crate::MakeCsvOptions {
            label_name: Some("count".into()),
            shuffle: false,
            num_epochs: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    let batches = elements(&made);
    assert_eq!(batches.len(), 2);
    assert_eq!(
        batches[0].get("score").unwrap().data(),
        &Buffer::F32(vec![1.5, 0.0])
    );

    let lines = elements(&Dataset::text_line_dataset([url.clone()]));
    assert_eq!(lines.len(), 4);
    assert_eq!(
        lines[3].get("line").unwrap().data(),
        &Buffer::String(vec![b"c,-2.25,".to_vec()])
    );

    let array = Array::new(
        vec![2, 3],
        Buffer::F32(vec![1.0, -2.0, 3.5, 0.0, 5.0, 6.25]),
    )
    .unwrap();
    let npy = put(
        &options,
        &bucket,
        "arrays/a.npy",
        crate::npy::encode_npy(&array),
    );
    assert_eq!(crate::npy::read_npy(&npy).unwrap(), array);
    let bytes = Array::new(vec![2, 2], Buffer::U8(vec![1, 2, 3, 255])).unwrap();
    let idx = put(
        &options,
        &bucket,
        "arrays/b.idx",
        crate::idx::encode_idx(&bytes).unwrap(),
    );
    assert_eq!(crate::idx::read_idx(&idx).unwrap(), bytes);
}

#[test]
#[ignore = "needs an S3 server: scripts/s3-test-server.sh start"]
fn list_files_globs_a_bucket() {
    let options = server();
    let bucket = bucket("list");
    for key in [
        "data/train-1.tfrecord",
        "data/train-0.tfrecord",
        "data/train-10.csv",
        "data/val-0.tfrecord",
        "data/sub/train-2.tfrecord",
        "other/train-3.tfrecord",
        "top.tfrecord",
    ] {
        put(&options, &bucket, key, key.as_bytes().to_vec());
    }
    let keys = |pattern: &str| -> Vec<String> {
        crate::sources::matching_files(&format!("s3://{bucket}/{pattern}"))
            .unwrap()
            .into_iter()
            .map(|p| {
                p.to_str()
                    .unwrap()
                    .strip_prefix(&format!("s3://{bucket}/"))
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(
        keys("data/train-*.tfrecord"),
        vec!["data/train-0.tfrecord", "data/train-1.tfrecord"],
        "* stays within a folder"
    );
    assert_eq!(keys("data/?al-[0-9].tfrecord"), vec!["data/val-0.tfrecord"]);
    assert_eq!(
        keys("data/**/*.tfrecord"),
        vec![
            "data/sub/train-2.tfrecord",
            "data/train-0.tfrecord",
            "data/train-1.tfrecord",
            "data/val-0.tfrecord"
        ]
    );
    assert_eq!(keys("*.tfrecord"), vec!["top.tfrecord"]);
    assert_eq!(keys("data/val-0.tfrecord"), vec!["data/val-0.tfrecord"]);

    let err = crate::sources::matching_files(&format!("s3://{bucket}/data/*.parquet")).unwrap_err();
    assert!(matches!(err, DataError::InvalidArgument(_)), "{err:?}");
    assert!(
        err.to_string().contains(&format!(
            "No files matched pattern: s3://{bucket}/data/*.parquet"
        )),
        "{err}"
    );

    // Dataset::list_files: elements are the URLs, and they open.
    let ds = Dataset::list_files(&format!("s3://{bucket}/data/train-*"), true, Some(3)).unwrap();
    let mut names: Vec<Vec<u8>> = elements(&ds)
        .iter()
        .map(|e| e.get("filename").unwrap().data().as_strings().unwrap()[0].clone())
        .collect();
    names.sort();
    let first = format!("s3://{bucket}/data/train-0.tfrecord");
    assert_eq!(names[0], first.as_bytes());
    assert_eq!(names.len(), 3);
    assert_eq!(read(Path::new(&first)).unwrap(), b"data/train-0.tfrecord");
}

#[test]
#[ignore = "needs an S3 server: scripts/s3-test-server.sh start"]
fn missing_keys_and_buckets_are_clear_errors_naming_the_url() {
    let _ = server();
    let bucket = bucket("missing");
    let url = PathBuf::from(format!("s3://{bucket}/no/such.tfrecord"));
    let results: Vec<_> = Dataset::tfrecord(vec![url.clone()], Compression::None)
        .iter()
        .collect();
    assert_eq!(results.len(), 1, "one error for the file, then the end");
    let err = results[0].as_ref().unwrap_err();
    match err {
        DataError::Io { path, source } => {
            assert_eq!(path, &url);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected an Io error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("cannot read s3://{bucket}/no/such.tfrecord")),
        "{text}"
    );
    assert!(text.contains("no such key"), "{text}");
    assert_eq!(
        text.matches("no/such.tfrecord").count(),
        1,
        "the URL once: {text}"
    );
    assert!(text.contains(&endpoint()), "{text}");

    let nobucket = PathBuf::from("s3://kiln-no-such-bucket-here/x.csv");
    let err = crate::npy::read_npy(&nobucket).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("s3://kiln-no-such-bucket-here/x.csv"),
        "{text}"
    );
    assert!(text.contains("no such bucket"), "{text}");
    let err = crate::sources::matching_files("s3://kiln-no-such-bucket-here/*.csv").unwrap_err();
    assert!(err.to_string().contains("no such bucket"), "{err}");
}

/// Deterministic bytes that differ at every offset of a small period.
fn pattern_bytes(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
#[ignore = "needs an S3 server: scripts/s3-test-server.sh start"]
fn read_ahead_crosses_chunk_boundaries() {
    let options = server();
    let bucket = bucket("chunks");
    let data = pattern_bytes(100_003, 1);
    put(&options, &bucket, "blob", data.clone());
    put(&options, &bucket, "empty", Vec::new());
    for (chunk, ahead) in [(4096, 0), (4096, 1), (1000, 3), (100_003, 1), (1 << 20, 2)] {
        let small = options
            .clone()
            .with_chunk_size(chunk)
            .with_read_ahead(ahead);
        let mut reader = ObjectReader::open(&bucket, "blob", &small).unwrap();
        assert_eq!(reader.size(), 100_003);
        // Odd-sized reads land on every position relative to the chunk boundaries.
        let mut got = Vec::new();
        let mut buf = [0u8; 777];
        loop {
            let n = reader.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got.len(), data.len(), "chunk {chunk}, read-ahead {ahead}");
        assert!(
            got == data,
            "chunk {chunk}, read-ahead {ahead}: bytes differ"
        );
        assert_eq!(reader.read(&mut buf).unwrap(), 0, "stays at the end");
    }
    // The requests in flight: `read_ahead` chunks beyond the one being read.
    for ahead in [0, 1, 3] {
        let o = options.clone().with_chunk_size(1000).with_read_ahead(ahead);
        let mut reader = ObjectReader::open(&bucket, "blob", &o).unwrap();
        assert_eq!(
            reader.requested(),
            (ahead, 1000 * ahead as u64),
            "open, {ahead}"
        );
        let mut byte = [0u8; 1];
        reader.read_exact(&mut byte).unwrap();
        assert_eq!(byte[0], data[0]);
        let expected = (ahead, 1000 * (ahead as u64 + 1));
        assert_eq!(reader.requested(), expected, "reading chunk 0, {ahead}");
    }
    let mut empty = Vec::new();
    ObjectReader::open(&bucket, "empty", &options)
        .unwrap()
        .read_to_end(&mut empty)
        .unwrap();
    assert!(empty.is_empty());

    // TFRecord records straddling 1 KiB chunks, gzip-compressed, through the framing reader.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("r.tfrecord.gz");
    let records: Vec<Vec<u8>> = (0..40)
        .map(|i| pattern_bytes(50 + 37 * i, i as u32))
        .collect();
    let mut writer = TfRecordWriter::create(&local, Compression::Gzip).unwrap();
    for r in &records {
        writer.write(r).unwrap();
    }
    writer.finish().unwrap();
    let url = put(
        &options,
        &bucket,
        "r.tfrecord.gz",
        std::fs::read(&local).unwrap(),
    );
    let small = options.clone().with_chunk_size(1024).with_read_ahead(2);
    let reader = ObjectReader::open(&bucket, "r.tfrecord.gz", &small).unwrap();
    assert!(
        reader.size() > 4 * 1024,
        "several chunks: {}",
        reader.size()
    );
    let got: Vec<Vec<u8>> = TfRecordReader::new(reader, &url, Compression::Gzip)
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got, records);
}

#[test]
#[ignore = "needs an S3 server: scripts/s3-test-server.sh start"]
fn replaced_objects_change_the_fingerprint_and_fail_a_reader() {
    let options = server();
    let bucket = bucket("replace");
    let url = put(&options, &bucket, "a.txt", b"one\ntwo\n".to_vec());
    let ds = Dataset::text_line_dataset([url.clone()]);
    let before = ds.fingerprint();
    assert_eq!(
        before,
        Dataset::text_line_dataset([url.clone()]).fingerprint()
    );
    put(&options, &bucket, "a.txt", b"one\nTWO\n".to_vec());
    assert_ne!(ds.fingerprint(), before, "same size, new ETag");
    assert_ne!(
        Dataset::text_line_dataset([PathBuf::from(format!("s3://{bucket}/b.txt"))]).fingerprint(),
        ds.fingerprint()
    );

    // A reader opened before a replacement fails instead of mixing versions: with no
    // read-ahead, the second chunk is requested only once the first has been read, which is
    // after the replacement.
    let old = pattern_bytes(3 * 1024, 5);
    put(&options, &bucket, "blob", old.clone());
    let small = options.clone().with_chunk_size(1024).with_read_ahead(0);
    let mut reader = ObjectReader::open(&bucket, "blob", &small).unwrap();
    let mut first = vec![0u8; 1024];
    reader.read_exact(&mut first).unwrap();
    assert_eq!(first, old[..1024]);
    put(&options, &bucket, "blob", pattern_bytes(3 * 1024, 6));
    let mut rest = Vec::new();
    let err = reader.read_to_end(&mut rest).unwrap_err();
    assert!(
        err.to_string().contains("object changed while reading"),
        "{err}"
    );
}

/// A `w x h` PNG whose pixel (x, y) is (10x + 1, 10y + 2, seed).
fn png(w: u32, h: u32, seed: u8) -> Vec<u8> {
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([10 * x as u8 + 1, 10 * y as u8 + 2, seed])
    });
    let mut bytes = std::io::Cursor::new(Vec::new());
    img.write_to(&mut bytes, image::ImageFormat::Png).unwrap();
    bytes.into_inner()
}

#[test]
#[ignore = "needs an S3 server: scripts/s3-test-server.sh start"]
fn image_folder_from_s3_reads_as_the_local_folder() {
    let options = server();
    let bucket = bucket("images");
    let dir = tempfile::tempdir().unwrap();
    let files: [(&str, Vec<u8>); 6] = [
        ("cat/b.png", png(2, 3, 1)),
        ("cat/a.png", png(2, 3, 2)),
        ("cat/sub/c.png", png(2, 3, 3)),
        ("dog/d.png", png(2, 3, 4)),
        ("dog/notes.txt", b"not an image".to_vec()),
        ("stray.png", png(2, 3, 5)),
    ];
    for (name, bytes) in &files {
        let local = dir.path().join(name);
        std::fs::create_dir_all(local.parent().unwrap()).unwrap();
        std::fs::write(&local, bytes).unwrap();
        put(&options, &bucket, &format!("pets/{name}"), bytes.clone());
    }
    let read = |d: &Path| {
        let opts = crate::ImageFolderOptions {
            shuffle: false,
            ..crate::ImageFolderOptions::default()
        };
        elements(&Dataset::image_dataset_from_directory(d, opts).unwrap())
    };
    let url = PathBuf::from(format!("s3://{bucket}/pets"));
    let remote = read(&url);
    assert_eq!(remote, read(dir.path()));
    // Keras' order: cat (label 0) a, b, then sub/c; dog (label 1) d; stray.png is no class.
    let seeds: Vec<(u8, i64)> = remote
        .iter()
        .map(|e| {
            let px = e.get("image").unwrap().data();
            let Buffer::U8(px) = px else { panic!("uint8") };
            (px[2], e.get("label").unwrap().data().to_i64()[0])
        })
        .collect();
    assert_eq!(seeds, vec![(2, 0), (1, 0), (3, 0), (4, 1)]);
    assert_eq!(remote[0].get("image").unwrap().shape(), &[3, 2, 3]);
    // A trailing slash names the same folder; a missing prefix has no classes.
    assert_eq!(read(&PathBuf::from(format!("s3://{bucket}/pets/"))), remote);
    let err = Dataset::image_dataset_from_directory(
        format!("s3://{bucket}/nothing-here"),
        crate::ImageFolderOptions::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("no images found"), "{err}");
}

#[test]
#[ignore = "needs an S3 server: scripts/s3-test-server.sh start"]
fn tfrecord_writer_uploads_to_s3_when_finished() {
    let options = server();
    let bucket = bucket("writer");
    let dir = tempfile::tempdir().unwrap();
    for compression in [Compression::None, Compression::Gzip] {
        let key = format!("out/train-{}.tfrecord", compression.tf_name());
        let url = PathBuf::from(url::s3_url(&bucket, &key));
        let local = dir
            .path()
            .join(format!("{}.tfrecord", compression.tf_name()));
        write_examples(&local, compression, 30);
        write_examples(&url, compression, 30);
        // The object holds exactly the bytes of the local file, and parses the same.
        assert_eq!(read(&url).unwrap(), std::fs::read(&local).unwrap());
        let remote = parsed(vec![url.clone()], compression);
        assert_eq!(remote.len(), 30);
        assert_eq!(
            remote[29].get("x").unwrap().data(),
            &Buffer::F32(vec![29.0, 14.5])
        );
    }
    // An unfinished writer uploads nothing: the key stays missing.
    let url = PathBuf::from(url::s3_url(&bucket, "out/unfinished.tfrecord"));
    let mut writer = TfRecordWriter::create(&url, Compression::None).unwrap();
    writer.write(b"record").unwrap();
    drop(writer);
    let err = read(&url).unwrap_err().to_string();
    assert!(err.contains("no such key"), "{err}");
    // The multipart path (forced with a zero single-request limit): 3 MiB in one part.
    let big = dir.path().join("big.bin");
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&big, &data).unwrap();
    s3::upload_with_limit(&bucket, "out/big.bin", &big, &options, 0).unwrap();
    let url = PathBuf::from(url::s3_url(&bucket, "out/big.bin"));
    assert_eq!(read(&url).unwrap(), data);
}
