//! File-level tests: writer and reader round trips, damaged files, the dataset source and
//! `parse_example` over a dataset.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;
use crate::dataset::Cardinality;
use crate::element::{Buffer, Element};
use crate::error::{DataError, Result};
use crate::{Dataset, Parallelism};

/// A fresh temporary directory for one test.
fn temp_dir(test: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("kiln-data-tfrecord-{}-{test}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Three records of 5, 0 and 10 bytes: they start at bytes 0, 21 and 37; the file is 63
/// bytes long.
fn records() -> Vec<Vec<u8>> {
    vec![b"hello".to_vec(), vec![], (0..10).collect()]
}

const STARTS: [u64; 3] = [0, 21, 37];
const FILE_LEN: usize = 63;

fn write_file(path: &Path, compression: Compression, records: &[Vec<u8>]) {
    let mut writer = TfRecordWriter::create(path, compression).unwrap();
    for r in records {
        writer.write(r).unwrap();
    }
    assert_eq!(writer.records(), records.len() as u64);
    assert_eq!(writer.finish().unwrap(), path);
}

fn read_file(path: &Path, compression: Compression) -> Vec<Result<Vec<u8>>> {
    TfRecordReader::open(path, compression).unwrap().collect()
}

fn plain_bytes() -> Vec<u8> {
    records().iter().flat_map(|r| encode_record(r)).collect()
}

/// `(path, index, offset, message, detail)` of a [`DataError::TfRecord`].
fn record_error(err: &DataError) -> (&Path, u64, u64, &str, &str) {
    match err {
        DataError::TfRecord {
            path,
            index,
            offset,
            message,
            detail,
        } => (path, *index, *offset, message, detail),
        other => panic!("expected a Record error, got {other:?}"),
    }
}

#[test]
fn round_trips_plain_gzip_and_zlib() {
    let dir = temp_dir("round_trip");
    for (compression, name, magic) in [
        (Compression::None, "plain.tfrecord", None),
        (Compression::Gzip, "data.tfrecord.gz", Some([0x1f, 0x8b])),
        (Compression::Zlib, "data.tfrecord.zz", Some([0x78, 0x9c])),
    ] {
        let path = dir.join(name);
        write_file(&path, compression, &records());
        let raw = fs::read(&path).unwrap();
        match magic {
            None => assert_eq!(raw, plain_bytes()),
            Some(m) => assert_eq!(raw[..2], m, "{compression}"),
        }
        let back: Vec<Vec<u8>> = read_file(&path, compression)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(back, records(), "{compression}");
    }
    assert_eq!(plain_bytes().len(), FILE_LEN);
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn unfinished_writer_leaves_no_file() {
    let dir = temp_dir("unfinished");
    let path = dir.join("out.tfrecord");
    let mut writer = TfRecordWriter::create(&path, Compression::None).unwrap();
    writer.write(b"partial").unwrap();
    assert!(
        !path.exists(),
        "the final name must not appear before finish"
    );
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "one temporary file");
    drop(writer);
    assert!(!path.exists());
    assert_eq!(
        fs::read_dir(&dir).unwrap().count(),
        0,
        "temporary file removed"
    );
    // Finishing over an existing file replaces it whole.
    write_file(&path, Compression::None, &records());
    write_file(&path, Compression::None, &records()[..1]);
    assert_eq!(fs::read(&path).unwrap(), encode_record(b"hello"));
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
    let err =
        TfRecordWriter::create(dir.join("no/such/dir/x.tfrecord"), Compression::None).unwrap_err();
    assert!(matches!(err, DataError::Io { .. }), "{err:?}");
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn truncated_files_report_the_record_start() {
    let dir = temp_dir("truncated");
    let full = plain_bytes();
    // (cut, records read before the error, damaged record index, where the cut falls)
    let cases = [
        (5, 0, "header"),
        (12 + 2, 0, "data"),
        (19, 0, "footer"),
        (21 + 11, 1, "header"),
        (37 + 12 + 9, 2, "data"),
        (FILE_LEN - 1, 2, "footer"),
    ];
    for compression in [Compression::None, Compression::Gzip, Compression::Zlib] {
        for (cut, good, part) in cases {
            let path = dir.join(format!("cut-{cut}.tfrecord"));
            let mut encoder = compression.encoder(Vec::new());
            std::io::Write::write_all(&mut encoder, &full[..cut]).unwrap();
            fs::write(&path, encoder.finish().unwrap()).unwrap();
            let results = read_file(&path, compression);
            assert_eq!(results.len(), good + 1, "cut {cut} {compression}");
            for (r, expected) in results.iter().zip(records()) {
                if let Ok(data) = r {
                    assert_eq!(data, &expected);
                }
            }
            let err = results[good].as_ref().unwrap_err();
            let start = STARTS[good];
            let text = err.to_string();
            assert!(
                text.contains(&format!("truncated record at byte {start}")),
                "cut {cut}: {text}"
            );
            assert!(text.contains(&format!("cut-{cut}.tfrecord")), "{text}");
            assert!(text.contains(&format!("record index {good}")), "{text}");
            let (p, index, offset, message, detail) = record_error(err);
            assert_eq!(
                (p, index, offset, message),
                (path.as_path(), good as u64, start, "truncated record")
            );
            assert!(detail.contains(part), "cut {cut}: {detail}");
        }
    }
    // Cuts at record boundaries are complete files.
    for (cut, n) in [(0, 0), (21, 1), (37, 2)] {
        let path = dir.join("boundary.tfrecord");
        fs::write(&path, &full[..cut]).unwrap();
        let back: Vec<Vec<u8>> = read_file(&path, Compression::None)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(back, records()[..n].to_vec());
    }
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn flipped_bytes_report_a_corrupted_record() {
    let dir = temp_dir("flipped");
    // (byte flipped, damaged record, detail fragment)
    let cases = [
        (21 + 2, 1, "length field's checksum"),   // length of record 1
        (21 + 9, 1, "length field's checksum"),   // header CRC of record 1
        (37 + 12 + 4, 2, "data's checksum"),      // data of record 2
        (37 + 12 + 10 + 1, 2, "data's checksum"), // footer of record 2
        (3, 0, "length field's checksum"),        // length of record 0
        (12 + 4, 0, "data's checksum"),           // data of record 0
    ];
    for (flip, damaged, part) in cases {
        let mut bytes = plain_bytes();
        bytes[flip] ^= 0x40;
        let path = dir.join("flipped.tfrecord");
        fs::write(&path, &bytes).unwrap();
        let results = read_file(&path, Compression::None);
        assert_eq!(results.len(), damaged + 1, "flip {flip}");
        for (r, expected) in results.iter().take(damaged).zip(records()) {
            assert_eq!(r.as_ref().unwrap(), &expected);
        }
        let err = results[damaged].as_ref().unwrap_err();
        let text = err.to_string();
        let start = STARTS[damaged];
        assert!(
            text.contains(&format!("corrupted record at byte {start}")),
            "flip {flip}: {text}"
        );
        assert!(text.contains("flipped.tfrecord"), "{text}");
        let (_, index, offset, message, detail) = record_error(err);
        assert_eq!(
            (index, offset, message),
            (damaged as u64, start, "corrupted record")
        );
        assert!(detail.contains(part), "flip {flip}: {detail}");
    }
    // A GZIP file read without compression_type: the header checksum fails at byte 0 and the
    // message suggests the fix.
    let path = dir.join("compressed.tfrecord");
    write_file(&path, Compression::Gzip, &records());
    let results = read_file(&path, Compression::None);
    let err = results[0].as_ref().unwrap_err();
    assert_eq!(record_error(err).2, 0);
    assert!(err.to_string().contains("compression_type GZIP"), "{err}");
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn damaged_gzip_stream_is_an_error_naming_the_file() {
    let dir = temp_dir("bad_gzip");
    let big: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 200]).collect();
    let path = dir.join("big.tfrecord.gz");
    write_file(&path, Compression::Gzip, &big);
    let gz = fs::read(&path).unwrap();
    for cut in [gz.len() / 2, gz.len() - 4, 11] {
        fs::write(&path, &gz[..cut]).unwrap();
        let results = read_file(&path, Compression::Gzip);
        let last = results.last().unwrap();
        let err = last.as_ref().unwrap_err();
        assert!(err.to_string().contains("big.tfrecord.gz"), "{err}");
        assert!(
            matches!(err, DataError::Format { .. } | DataError::TfRecord { .. }),
            "{err:?}"
        );
        for (r, expected) in results.iter().zip(&big) {
            if let Ok(data) = r {
                assert_eq!(data, expected);
            }
        }
    }
    fs::remove_dir_all(dir).unwrap();
}

fn record_values(e: &Element) -> Vec<u8> {
    let record = e.get(RECORD).unwrap();
    assert_eq!(record.shape(), &[record.len()]);
    match record.data() {
        Buffer::U8(v) => v.clone(),
        other => panic!("record is not uint8: {other:?}"),
    }
}

#[test]
fn dataset_reads_files_in_order_and_reports_errors_in_place() {
    let dir = temp_dir("dataset");
    let a = dir.join("a.tfrecord");
    let b = dir.join("b.tfrecord");
    write_file(&a, Compression::Zlib, &records());
    write_file(&b, Compression::Zlib, &[b"last".to_vec()]);
    let missing = dir.join("missing.tfrecord");
    let ds = Dataset::tfrecord(vec![a.clone(), missing, b.clone()], Compression::Zlib);
    assert_eq!(ds.cardinality(), Cardinality::Unknown);
    for _epoch in 0..2 {
        let results: Vec<Result<Vec<u8>>> =
            ds.iter().map(|r| r.map(|e| record_values(&e))).collect();
        assert_eq!(results.len(), 5);
        assert_eq!(results[0].as_ref().unwrap(), b"hello");
        assert_eq!(results[1].as_ref().unwrap(), b"");
        assert_eq!(results[2].as_ref().unwrap(), &(0..10).collect::<Vec<u8>>());
        let err = results[3].as_ref().unwrap_err();
        assert!(matches!(err, DataError::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("missing.tfrecord"), "{err}");
        assert_eq!(results[4].as_ref().unwrap(), b"last");
    }
    fs::remove_dir_all(dir).unwrap();
}

fn examples() -> Vec<Example> {
    (0..6)
        .map(|i| {
            let mut e = Example::new()
                .with("label", Feature::int64(vec![i]))
                .with("x", Feature::float32(vec![i as f32 * 0.5, -1.0]))
                .with("raw", Feature::bytes([vec![i as u8; i as usize]]));
            if i % 2 == 0 {
                e = e.with("tags", Feature::int64((0..i).collect::<Vec<_>>()));
            }
            e
        })
        .collect()
}

fn spec() -> ExampleSpec {
    ExampleSpec::new()
        .with("x", FeatureSpec::fixed_len(vec![2], FeatureDType::Float32))
        .with("label", FeatureSpec::fixed_len(vec![], FeatureDType::Int64))
        .with("raw", FeatureSpec::fixed_len(vec![], FeatureDType::Bytes))
        .with("tags", FeatureSpec::var_len(FeatureDType::Int64))
}

#[test]
fn parse_example_over_a_tfrecord_dataset() {
    let dir = temp_dir("parse");
    let path = dir.join("examples.tfrecord.gz");
    let serialized: Vec<Vec<u8>> = examples().iter().map(Example::to_bytes).collect();
    write_file(&path, Compression::Gzip, &serialized);
    let source = Dataset::tfrecord(vec![path], Compression::Gzip);
    let sequential: Vec<Element> = source
        .clone()
        .parse_example(spec(), Parallelism::Sequential)
        .iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(sequential.len(), 6);
    for (i, e) in sequential.iter().enumerate() {
        assert_eq!(e.names().collect::<Vec<_>>(), ["x", "label", "raw", "tags"]);
        assert_eq!(
            e.get("x").unwrap().data(),
            &Buffer::F32(vec![i as f32 * 0.5, -1.0])
        );
        assert_eq!(e.get("label").unwrap().data(), &Buffer::I64(vec![i as i64]));
        assert_eq!(e.get("raw").unwrap().data(), &Buffer::U8(vec![i as u8; i]));
        let tags: Vec<i64> = if i % 2 == 0 {
            (0..i as i64).collect()
        } else {
            vec![]
        };
        assert_eq!(e.get("tags").unwrap().data(), &Buffer::I64(tags));
    }
    let parallel: Vec<Element> = source
        .parse_example(spec(), Parallelism::Fixed(3))
        .iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(parallel, sequential);
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn parse_example_errors_name_the_record_position() {
    let mut serialized: Vec<Vec<u8>> = examples().iter().map(Example::to_bytes).collect();
    serialized[4] = Example::new()
        .with("label", Feature::float32(vec![1.0]))
        .to_bytes();
    let elements = serialized
        .into_iter()
        .map(|bytes| {
            let n = bytes.len();
            Element::new().with(
                RECORD,
                crate::Array::new(vec![n], Buffer::U8(bytes)).unwrap(),
            )
        })
        .collect::<Vec<Element>>();
    let spec =
        ExampleSpec::new().with("label", FeatureSpec::fixed_len(vec![], FeatureDType::Int64));
    for parallelism in [Parallelism::Sequential, Parallelism::Fixed(2)] {
        let results: Vec<Result<Element>> = Dataset::from_elements(elements.clone())
            .parse_example(spec.clone(), parallelism)
            .iter()
            .collect();
        assert_eq!(results.len(), 6);
        assert!(
            results
                .iter()
                .enumerate()
                .all(|(i, r)| r.is_ok() == (i != 4))
        );
        let err = results[4].as_ref().unwrap_err();
        let DataError::Example {
            record, feature, ..
        } = err
        else {
            panic!("expected an Example error, got {err:?}");
        };
        assert_eq!((*record, feature.as_deref()), (4, Some("label")));
        assert!(err.to_string().contains("found float_list"), "{err}");
    }
    // A bad spec fails the whole dataset once.
    let bad = ExampleSpec::new().with("s", FeatureSpec::var_len(FeatureDType::Bytes));
    let results: Vec<_> = Dataset::from_elements(elements)
        .parse_example(bad, Parallelism::Sequential)
        .iter()
        .collect();
    assert_eq!(results.len(), 1);
    assert!(matches!(results[0], Err(DataError::InvalidArgument(_))));
}

/// Parsing a TFRecord source directly names each bad record's file and its index in that
/// file; with `ignore_errors` the bad records are dropped and listed with those names, and a
/// damaged record ends its file, as in TensorFlow.
#[test]
fn parse_errors_of_a_tfrecord_source_name_the_file_and_are_skippable() {
    let dir = temp_dir("parse_errors_name_the_file");
    let good = |v: i64| {
        Example::new()
            .with("label", Feature::int64(vec![v]))
            .to_bytes()
    };
    let bad = Example::new()
        .with("label", Feature::float32(vec![1.0]))
        .to_bytes();
    let (a, b) = (dir.join("a.tfrecord"), dir.join("b.tfrecord"));
    write_file(&a, Compression::None, &[good(0), good(1)]);
    write_file(&b, Compression::None, &[good(2), bad, good(3)]);
    let mut damaged = plain_bytes();
    damaged[STARTS[1] as usize + 13] ^= 0xff; // the second record's length CRC
    let c = dir.join("c.tfrecord");
    fs::write(&c, damaged).unwrap();
    let spec =
        ExampleSpec::new().with("label", FeatureSpec::fixed_len(vec![], FeatureDType::Int64));
    let ds = Dataset::tfrecord(vec![a.clone(), b.clone()], Compression::None)
        .parse_example(spec.clone(), Parallelism::Fixed(2));
    let results: Vec<Result<Element>> = ds.iter().collect();
    assert_eq!(results.len(), 5);
    let err = results[3].as_ref().unwrap_err();
    assert_eq!(err.path(), Some(b.as_path()));
    // Record 1 of b starts right after record 0.
    let offset = encode_record(&good(2)).len();
    assert!(
        err.to_string().starts_with(&format!(
            "{}: tf.train.Example record 1 (at byte {offset}), feature \"label\":",
            b.display()
        )),
        "{err}"
    );
    assert!(matches!(err, DataError::Example { offset: Some(o), .. } if *o == offset as u64));
    // The parsed elements carry no bookkeeping components.
    let first = results[0].as_ref().unwrap();
    assert_eq!(first.names().collect::<Vec<_>>(), ["label"]);

    let skipping = Dataset::tfrecord(vec![a, b.clone(), c.clone()], Compression::None)
        .parse_example(spec, Parallelism::Sequential)
        .ignore_errors();
    let mut it = skipping.iter();
    let labels: Vec<i64> = it
        .by_ref()
        .map(|e| e.unwrap().get("label").unwrap().data().to_i64()[0])
        .collect();
    assert_eq!(
        labels,
        vec![0, 1, 2, 3],
        "c.tfrecord's records are not Examples"
    );
    let skipped = it.skip_stats().unwrap();
    // b's bad record; c's first record ("hello" is no Example); c's damaged second record,
    // which ends the file.
    assert_eq!(skipped.count, 3);
    let paths: Vec<Option<&Path>> = skipped.first.iter().map(|r| r.path.as_deref()).collect();
    assert_eq!(
        paths,
        vec![Some(b.as_path()), Some(c.as_path()), Some(c.as_path())]
    );
    assert!(
        skipped.first[2].error.contains(&format!(
            "corrupted record at byte {} (record index 1)",
            STARTS[1]
        )),
        "{}",
        skipped.first[2].error
    );
    let _ = fs::remove_dir_all(&dir);
}

/// Framing and `tf.train.Example` decoding on mutated files: both CRCs are fixed up half the
/// time, so that mutations reach the Example decoder and the spec.
#[test]
fn fuzz_tfrecord() {
    let example = |i: i64| {
        Example::new()
            .with("label", Feature::int64(vec![i]))
            .with("x", Feature::float32(vec![0.5, -1.0]))
            .with("name", Feature::bytes([format!("n{i}")]))
            .to_bytes()
    };
    let file: Vec<u8> = (0..3).flat_map(|i| encode_record(&example(i))).collect();
    let seeds = vec![file, plain_bytes(), example(7)];
    let spec = ExampleSpec::new()
        .with("label", FeatureSpec::fixed_len(vec![], FeatureDType::Int64))
        .with("x", FeatureSpec::fixed_len(vec![2], FeatureDType::Float32))
        .with("name", FeatureSpec::var_len(FeatureDType::Bytes));
    let limits = kiln_fuzz::Limits::new(10_000);
    let report = kiln_fuzz::fuzz("tfrecord", seeds, limits, move |bytes| {
        // The bytes as one serialized Example, then as a framed file of them.
        let _ = spec.parse(bytes, 0);
        let framed = if bytes.first().is_some_and(|b| b & 1 == 1) {
            encode_record(bytes)
        } else {
            bytes.to_vec()
        };
        let mut reader = TfRecordReader::new(
            std::io::Cursor::new(framed),
            Path::new("f"),
            Compression::None,
        );
        let mut parsed = 0;
        while let Some(record) = reader.read_record()? {
            spec.parse(&record, reader.index() - 1)?;
            parsed += 1;
        }
        Ok::<_, DataError>(parsed)
    });
    assert!(report.accepted > 0 && report.refused > 0, "{report:?}");
}
