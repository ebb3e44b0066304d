//! `inspect` on small files of every format, and on damaged TFRecords.

use std::path::{Path, PathBuf};

use super::*;
use crate::element::{Array, Buffer};
use crate::tfrecord::{Example, Feature, TfRecordWriter, encode_record};

fn run(path: &Path, n: usize, format: Option<FileFormat>) -> (Result<InspectSummary>, String) {
    let mut out = Vec::new();
    let r = inspect(path, n, format, &mut out);
    (r, String::from_utf8(out).unwrap())
}

/// Three Examples: `{"label": int64 [i], "pixels": float32 [0.5; 10], "name": bytes}`.
fn examples() -> Vec<Vec<u8>> {
    (0..3)
        .map(|i| {
            Example::new()
                .with("label", Feature::int64(vec![i]))
                .with("pixels", Feature::float32(vec![0.5; 10]))
                .with("name", Feature::bytes([format!("item-{i}")]))
                .to_bytes()
        })
        .collect()
}

fn write_tfrecord(path: &Path, compression: Compression) -> PathBuf {
    let mut w = TfRecordWriter::create(path, compression).unwrap();
    for e in examples() {
        w.write(&e).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn tfrecord_examples_are_decoded_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_tfrecord(&dir.path().join("data.tfrecord"), Compression::None);
    let (r, text) = run(&path, 2, None);
    let summary = r.unwrap();
    assert_eq!(summary.format, FileFormat::TfRecord(Compression::None));
    assert_eq!(summary.records, 3);
    assert!(text.contains("record 0 (byte 0, "), "{text}");
    assert!(text.contains("tf.train.Example with 3 features"), "{text}");
    assert!(
        text.contains("label   int64         1 value   [0]"),
        "{text}"
    );
    assert!(
        text.contains(
            "pixels  float32      10 values  [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, …]"
        ),
        "{text}"
    );
    assert!(
        text.contains("name    string        1 value   [\"item-1\"]"),
        "{text}"
    );
    assert!(
        !text.contains("record 2 ("),
        "only two records shown: {text}"
    );
    assert!(
        text.ends_with("3 records, every length and data CRC-32C verified\n"),
        "{text}"
    );
}

#[test]
fn compressed_and_unnamed_tfrecords_are_recognised_by_content() {
    let dir = tempfile::tempdir().unwrap();
    for (name, c) in [
        ("a.bin", Compression::Gzip),
        ("b.bin", Compression::Zlib),
        ("c.bin", Compression::None),
    ] {
        let path = write_tfrecord(&dir.path().join(name), c);
        assert_eq!(
            FileFormat::detect(&path).unwrap(),
            FileFormat::TfRecord(c),
            "{name}"
        );
        assert_eq!(run(&path, 1, None).0.unwrap().records, 3);
    }
    let gz = write_tfrecord(&dir.path().join("d.tfrecord.gz"), Compression::Gzip);
    assert_eq!(
        FileFormat::detect(&gz).unwrap(),
        FileFormat::TfRecord(Compression::Gzip)
    );
    // A record that is not an Example is shown as bytes, not an error.
    let raw = dir.path().join("raw.tfrecord");
    std::fs::write(&raw, encode_record(b"\xff\xfe not a proto")).unwrap();
    let (r, text) = run(&raw, 5, None);
    assert_eq!(r.unwrap().records, 1);
    assert!(
        text.contains("not a tf.train.Example: <14 bytes: ff fe"),
        "{text}"
    );
}

#[test]
fn a_flipped_byte_names_the_record_and_its_byte_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_tfrecord(&dir.path().join("data.tfrecord"), Compression::None);
    let mut bytes = std::fs::read(&path).unwrap();
    let first = 12 + examples()[0].len() + 4; // header, data, footer of record 0
    bytes[first + 12 + 3] ^= 0x40; // a data byte of record 1
    std::fs::write(&path, &bytes).unwrap();
    let (r, text) = run(&path, 10, None);
    match r.unwrap_err() {
        DataError::TfRecord {
            index,
            offset,
            message,
            ..
        } => {
            assert_eq!((index, offset), (1, first as u64));
            assert_eq!(message, "corrupted record");
        }
        other => panic!("expected a TFRecord error, got {other}"),
    }
    // Record 0 was still shown.
    assert!(
        text.contains("record 0 (byte 0,") && !text.contains("record 1"),
        "{text}"
    );
    // A flipped length byte of record 2 is caught by the length checksum.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[first + 12 + 3] ^= 0x40; // repair record 1
    let third = 2 * first;
    bytes[third] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let e = run(&path, 0, None).0.unwrap_err().to_string();
    assert!(
        e.contains(&format!("at byte {third} (record index 2)")),
        "{e}"
    );
}

#[test]
fn csv_header_types_and_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("iris.csv");
    std::fs::write(
        &path,
        "sepal,petal,big,species\n5.1,1,3000000000,setosa\n4.9,2,1,\"versi, color\"\n6.0,,2,x\n",
    )
    .unwrap();
    let (r, text) = run(&path, 2, None);
    assert_eq!(r.unwrap().records, 3);
    assert!(text.contains("4 columns (header row found"), "{text}");
    assert!(text.contains("0  sepal    float32"), "{text}");
    assert!(text.contains("1  petal    int32"), "{text}");
    assert!(text.contains("2  big      int64"), "{text}");
    assert!(text.contains("3  species  string"), "{text}");
    assert!(
        text.contains("row 1 (line 3): 4.9, 2, 1, versi, color"),
        "{text}"
    );
    assert!(!text.contains("row 2"), "{text}");
    assert!(text.ends_with("3 rows\n"), "{text}");
    // Without a header row the columns are numbered and every row counts.
    let plain = dir.path().join("plain.csv");
    std::fs::write(&plain, "1,2\n3,4\n").unwrap();
    let (r, text) = run(&plain, 5, None);
    assert_eq!(r.unwrap().records, 2);
    assert!(
        text.contains("no header row") && text.contains("row 1 (line 2): 3, 4"),
        "{text}"
    );
}

/// GZIP and ZLIB CSV files read like the plain one, whether the name says so (`.csv.gz`),
/// the content does (gzip bytes under `.csv`, or an unnamed file) or `--format` does; the
/// wrong `--format` names the mismatch.
#[test]
fn compressed_csv_files_are_decompressed() {
    let dir = tempfile::tempdir().unwrap();
    let csv = b"a,b,label\n1.5,2,0\n3.5,4,1\n5.5,6,2\n";
    let compress = |c: Compression| {
        let mut enc = c.encoder(Vec::new());
        std::io::Write::write_all(&mut enc, csv).unwrap();
        enc.finish().unwrap()
    };
    for (name, c, format) in [
        ("a.csv.gz", Compression::Gzip, None),
        ("b.csv", Compression::Gzip, None),
        ("c.bin", Compression::Gzip, None),
        ("d.csv.zz", Compression::Zlib, None),
        (
            "e.data",
            Compression::Zlib,
            Some(FileFormat::Csv(Compression::Zlib)),
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, compress(c)).unwrap();
        let (r, text) = run(&path, 1, format);
        let summary = r.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(summary.format, FileFormat::Csv(c), "{name}");
        assert_eq!(summary.records, 3, "{name}");
        assert!(text.contains("row 0 (line 2): 1.5, 2, 0"), "{name}: {text}");
        assert!(
            text.contains(&format!("CSV ({} compressed)", c.tf_name())),
            "{text}"
        );
    }
    assert_eq!(
        "csv-gzip".parse::<FileFormat>().unwrap(),
        FileFormat::Csv(Compression::Gzip)
    );
    let plain = dir.path().join("plain.csv");
    std::fs::write(&plain, csv).unwrap();
    let e = run(&plain, 1, Some(FileFormat::Csv(Compression::Gzip)))
        .0
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not start with gzip's magic bytes"), "{e}");
}

#[test]
fn idx_and_npy_show_dtype_shape_and_first_values() {
    let dir = tempfile::tempdir().unwrap();
    let a = Array::new(vec![3, 2, 2], Buffer::U8((0..12).collect())).unwrap();
    let idx = dir.path().join("images-idx3-ubyte");
    crate::idx::write_idx(&idx, &a).unwrap();
    let (r, text) = run(&idx, 2, None);
    let s = r.unwrap();
    assert_eq!((s.format, s.records), (FileFormat::Idx, 3));
    assert!(text.contains("dtype uint8, shape [3, 2, 2]"), "{text}");
    assert!(
        text.contains("record 1: shape [2, 2] [4, 5, 6, 7]"),
        "{text}"
    );
    assert!(!text.contains("record 2:"), "{text}");
    assert!(text.ends_with("3 records (the first axis)\n"), "{text}");

    let b = Array::new(
        vec![2, 10],
        Buffer::F32((0..20).map(|v| v as f32 / 2.0).collect()),
    )
    .unwrap();
    let npy = dir.path().join("x.npy");
    crate::npy::write_npy(&npy, &b).unwrap();
    let (r, text) = run(&npy, 5, None);
    assert_eq!(r.unwrap().records, 2);
    assert!(
        text.contains("record 0: shape [10] [0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, …]"),
        "{text}"
    );
}

#[test]
fn unknown_and_missing_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, [0xffu8, 0, 1, 2, 3]).unwrap();
    let e = run(&junk, 1, None).0.unwrap_err().to_string();
    assert!(
        e.contains("cannot tell the format of") && e.contains("--format"),
        "{e}"
    );
    let e = run(&dir.path().join("nope.csv"), 1, None).0.unwrap_err();
    assert!(matches!(e, DataError::Io { .. }), "{e}");
    assert!("parquet".parse::<FileFormat>().is_err());
    assert_eq!(
        "TFRecord-GZIP".parse::<FileFormat>().unwrap(),
        FileFormat::TfRecord(Compression::Gzip)
    );
    // A forced format that does not fit is an error, not a panic.
    let e = run(&junk, 1, Some(FileFormat::Npy)).0.unwrap_err();
    assert!(matches!(e, DataError::Format { .. }), "{e}");
}

/// `inspect`'s CSV reader on `bytes`: the summary text, or the error.
fn inspect_csv(bytes: &[u8], compression: Compression) -> Result<String> {
    let mut out = Vec::new();
    let mut w = Out { out: &mut out };
    let source = Box::new(std::io::Cursor::new(bytes.to_vec()));
    super::csv::inspect(Path::new("fuzz.csv"), source, compression, 3, &mut w)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[test]
fn fuzz_csv() {
    let gz = {
        let mut enc = Compression::Gzip.encoder(Vec::new());
        std::io::Write::write_all(&mut enc, b"x,y\n1,2\n3,4\n").unwrap();
        enc.finish().unwrap()
    };
    let seeds = vec![
        b"a,b,c\n1,2.5,x\n3,4,\"q,\"\"r\"\"\"\n-7,1e9,\n".to_vec(),
        b"\xef\xbb\xbfname,score\n\"multi\nline\",0.5\n".to_vec(),
        b"1,2\n3\n4,5,6\n".to_vec(),
        gz,
    ];
    let report = kiln_fuzz::fuzz("csv", seeds, kiln_fuzz::Limits::new(5_000), |bytes| {
        let compression = Compression::sniff(bytes).unwrap_or(Compression::None);
        inspect_csv(bytes, compression)
    });
    assert!(report.accepted > 0 && report.refused > 0, "{report:?}");
}

#[test]
fn a_csv_record_without_line_breaks_is_refused_not_held() {
    let long = vec![b'7'; super::csv::MAX_RECORD as usize + (1 << 20)];
    let err = inspect_csv(&long, Compression::None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("fuzz.csv")
            && err.contains("the record starting at byte 0 is longer than 67108864 bytes"),
        "{err}"
    );
    // Rows before a long one are fine; the error names where it starts.
    let mut bytes = b"a,b\n1,2\n".to_vec();
    bytes.extend_from_slice(&long);
    let err = inspect_csv(&bytes, Compression::None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("starting at byte 8"), "{err}");
}

#[test]
fn a_pipe_is_read_once_and_inspected() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("rows");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, "x,y\n1,2\n3,4\n5,6\n").unwrap())
    };
    let (r, text) = run(&fifo, 1, None);
    writer.join().unwrap();
    let summary = r.unwrap();
    assert_eq!(summary.format, FileFormat::Csv(Compression::None));
    assert_eq!(summary.records, 3);
    assert!(text.contains("row 0 (line 2): 1, 2"), "{text}");
}

#[test]
fn a_directory_is_named_as_one_and_a_missing_file_as_missing() {
    let dir = tempfile::tempdir().unwrap();
    let (r, _) = run(dir.path(), 1, None);
    assert!(r.unwrap_err().to_string().contains("is a directory"));
    let (r, _) = run(&dir.path().join("absent.csv"), 1, None);
    let err = r.unwrap_err();
    assert!(
        matches!(&err, DataError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
}
