//! [`Dataset::make_csv_dataset`]: `tf.data.experimental.make_csv_dataset`.
//!
//! Follows `tensorflow/python/data/experimental/ops/readers.py` (`make_csv_dataset_v2`):
//! column names from the header, column types inferred from the first rows, a
//! [`Dataset::csv_dataset`] over the matching files, then shuffle, repeat, batch and
//! prefetch.

use std::path::{Path, PathBuf};

use super::csv_dataset::{parse_field, read_error, reader};
use super::{CsvOptions, RecordDefault, SkipCounter, matching_files_with};
use crate::compression::Compression;
use crate::dataset::{AUTOTUNE, Dataset};
use crate::element::DType;
use crate::error::{DataError, Result};

/// Options of [`Dataset::make_csv_dataset`], with `make_csv_dataset`'s defaults.
#[derive(Debug, Clone)]
pub struct MakeCsvOptions {
    /// Names of all file columns, in order. Default: read from the header (needs
    /// `header = true`; every file's header must agree). With a header, these names replace
    /// the header's (the header line is still skipped), as in TensorFlow. The first row of
    /// every file must have this many fields.
    pub column_names: Option<Vec<String>>,
    /// Type and default of each selected column. Default: inferred from the first
    /// `num_rows_for_inference` rows as TensorFlow does (the narrowest of `int32`, `int64`,
    /// `float32`, `float64`, `string` that holds every non-empty value), with default `0` or
    /// `""` for empty fields.
    pub column_defaults: Option<Vec<RecordDefault>>,
    /// The column returned as the label, after the features. Default: none (features only).
    pub label_name: Option<String>,
    /// Column names to keep (others are not parsed). Output order is the file's column order.
    pub select_columns: Option<Vec<String>>,
    /// Field separator byte (default `b','`).
    pub field_delim: u8,
    /// Double quotes delimit fields (default `true`).
    pub use_quote_delim: bool,
    /// A field equal to this string counts as empty (default `""`).
    pub na_value: String,
    /// The first line of each file is a header (default `true`).
    pub header: bool,
    /// Passes over the data; `None` repeats forever (the default) and then drops the last
    /// partial batch, as TensorFlow does.
    pub num_epochs: Option<u64>,
    /// Shuffle records with a buffer of `shuffle_buffer_size` (default `true`).
    pub shuffle: bool,
    /// Shuffle buffer size in records (default 10000).
    pub shuffle_buffer_size: usize,
    /// Shuffle seed; `None` draws one at random.
    pub shuffle_seed: Option<u64>,
    /// Batches prefetched on a background thread; 0 disables (default
    /// `AUTOTUNE.prefetch_buffer()`).
    pub prefetch_buffer_size: usize,
    /// Rows read to infer column types when `column_defaults` is `None` (default 100).
    pub num_rows_for_inference: usize,
    /// Skip rows that fail to parse, counting them in `skipped` and in the iteration's
    /// [`crate::DatasetIter::skip_stats`] (default `false`).
    pub ignore_errors: bool,
    /// Let the glob's `*`, `?`, `[…]` and `**` match hidden files and folders (names
    /// starting with `.`; default `false`: left out, see
    /// [`crate::sources::matching_files_with`]). Not a TensorFlow argument.
    pub include_hidden: bool,
    /// Where skipped rows are counted; keep a clone to read the count.
    pub skipped: SkipCounter,
    /// tf.data's `compression_type`: every file is one GZIP or ZLIB stream (default
    /// [`Compression::None`]); see [`CsvOptions::compression_type`].
    pub compression_type: Compression,
}

impl Default for MakeCsvOptions {
    fn default() -> MakeCsvOptions {
        MakeCsvOptions {
            column_names: None,
            column_defaults: None,
            label_name: None,
            select_columns: None,
            field_delim: b',',
            use_quote_delim: true,
            na_value: String::new(),
            header: true,
            num_epochs: None,
            shuffle: true,
            shuffle_buffer_size: 10_000,
            shuffle_seed: None,
            prefetch_buffer_size: AUTOTUNE.prefetch_buffer(),
            num_rows_for_inference: 100,
            ignore_errors: false,
            include_hidden: false,
            skipped: SkipCounter::new(),
            compression_type: Compression::None,
        }
    }
}

fn invalid(message: String) -> DataError {
    DataError::InvalidArgument(format!("make_csv_dataset: {message}"))
}

impl Dataset {
    /// `tf.data.experimental.make_csv_dataset(file_pattern, batch_size, ...)`: batches of CSV
    /// records from the files matching the glob `file_pattern` (read in sorted order).
    ///
    /// Each element is a batch: one component per selected column except the label, named by
    /// column and in file order — TensorFlow's features dict — each of shape `[batch]`, then
    /// the label column (named `label_name`) as the last component. Pipeline, as in
    /// TensorFlow: [`Dataset::csv_dataset`] → `shuffle(shuffle_buffer_size, shuffle_seed)` →
    /// `repeat(num_epochs)` → `batch(batch_size, drop_remainder = num_epochs.is_none())` →
    /// `prefetch`. Unlike TensorFlow, files are not shuffled (only records) and are read
    /// one at a time.
    ///
    /// # Errors
    /// Returned now: no file matches the pattern (see [`crate::sources::matching_files`]);
    /// [`DataError::InvalidArgument`] when `header` is false and `column_names` is missing,
    /// the headers of the files differ, column names repeat, a selected column or the label is
    /// not a column, `column_defaults` has the wrong length, or `batch_size` is 0;
    /// [`DataError::Io`] / [`DataError::Record`] when reading the header or the rows used for
    /// type inference fails. Yielded during iteration: as [`Dataset::csv_dataset`].
    pub fn make_csv_dataset(
        file_pattern: &str,
        batch_size: usize,
        options: MakeCsvOptions,
    ) -> Result<Dataset> {
        if batch_size == 0 {
            return Err(invalid("batch_size must be at least 1".into()));
        }
        let files = matching_files_with(file_pattern, options.include_hidden)?;
        let dialect = CsvOptions {
            header: options.header,
            field_delim: options.field_delim,
            use_quote_delim: options.use_quote_delim,
            na_value: options.na_value.clone(),
            compression_type: options.compression_type,
            ..CsvOptions::default()
        };
        let column_names = match &options.column_names {
            Some(names) => {
                check_width(&files, &dialect, names)?;
                names.clone()
            }
            None if options.header => header_names(&files, &dialect)?,
            None => {
                return Err(invalid(
                    "cannot infer column names without a header line; set column_names or \
                     header = true"
                        .into(),
                ));
            }
        };
        for (i, name) in column_names.iter().enumerate() {
            if column_names[..i].contains(name) {
                return Err(invalid(format!(
                    "column name {name:?} appears twice in {column_names:?}"
                )));
            }
        }
        let select_cols: Vec<usize> = match &options.select_columns {
            Some(wanted) => {
                let mut cols = Vec::with_capacity(wanted.len());
                for name in wanted {
                    let c = column_names.iter().position(|n| n == name).ok_or_else(|| {
                        invalid(format!(
                            "the selected column {name:?} is not a column; columns: \
                             {column_names:?}"
                        ))
                    })?;
                    cols.push(c);
                }
                cols.sort_unstable();
                cols.dedup();
                cols
            }
            None => (0..column_names.len()).collect(),
        };
        let names: Vec<String> = select_cols
            .iter()
            .map(|&c| column_names[c].clone())
            .collect();
        if let Some(label) = &options.label_name
            && !names.contains(label)
        {
            return Err(invalid(format!(
                "label_name {label:?} must be one of the (selected) columns {names:?}"
            )));
        }
        let defaults = match &options.column_defaults {
            Some(defaults) => {
                if defaults.len() != names.len() {
                    return Err(invalid(format!(
                        "column_defaults has {} entries but there are {} (selected) columns",
                        defaults.len(),
                        names.len()
                    )));
                }
                defaults.clone()
            }
            None => infer_defaults(
                &files,
                &dialect,
                &select_cols,
                options.num_rows_for_inference,
            )?,
        };
        let all_columns = select_cols.len() == column_names.len();
        let csv_options = CsvOptions {
            select_cols: (!all_columns).then_some(select_cols),
            column_names: Some(names.clone()),
            ignore_errors: options.ignore_errors,
            skipped: options.skipped.clone(),
            ..dialect
        };
        let mut ds = Dataset::csv_dataset(files, defaults, csv_options)?;
        if let Some(label) = options.label_name.clone() {
            ds = ds.map(
                move |mut e| {
                    let y = e
                        .remove(&label)
                        .ok_or_else(|| DataError::MissingComponent {
                            name: label.clone(),
                            present: e.names().map(str::to_string).collect(),
                        })?;
                    e.insert(label.as_str(), y);
                    Ok(e)
                },
                crate::Parallelism::Sequential,
            );
        }
        if options.shuffle {
            ds = ds.shuffle(options.shuffle_buffer_size, options.shuffle_seed, true);
        }
        ds = ds
            .repeat(options.num_epochs)
            .batch(batch_size, options.num_epochs.is_none());
        Ok(ds.prefetch(options.prefetch_buffer_size))
    }
}

/// The header of every file, which must agree; returns the column names.
fn header_names(files: &[PathBuf], dialect: &CsvOptions) -> Result<Vec<String>> {
    let mut first: Option<(Vec<String>, &Path)> = None;
    for path in files {
        let names = read_header(path, dialect)?;
        match &first {
            None => first = Some((names, path)),
            Some((want, want_path)) if *want != names => {
                return Err(invalid(format!(
                    "files have different column names in the header row: {} has {want:?}, {} \
                     has {names:?}",
                    want_path.display(),
                    path.display()
                )));
            }
            Some(_) => {}
        }
    }
    Ok(first.map(|(names, _)| names).unwrap_or_default())
}

/// Checks that the first record of every file has one field per name of `column_names`.
fn check_width(files: &[PathBuf], dialect: &CsvOptions, column_names: &[String]) -> Result<()> {
    for path in files {
        let mut rdr = reader(path, dialect)?;
        let mut record = csv::ByteRecord::new();
        let found = rdr
            .read_byte_record(&mut record)
            .map_err(|e| read_error(path, e, rdr.position(), dialect.compression_type))?;
        if found && record.len() != column_names.len() {
            let what = if dialect.header {
                "header"
            } else {
                "first row"
            };
            return Err(invalid(format!(
                "column_names has {} names but the {what} of {} has {} fields; give one name per \
                 column of the file",
                column_names.len(),
                path.display(),
                record.len()
            )));
        }
    }
    Ok(())
}

/// The first record of `path`, as UTF-8 column names.
fn read_header(path: &Path, dialect: &CsvOptions) -> Result<Vec<String>> {
    let mut rdr = reader(path, dialect)?;
    let mut record = csv::ByteRecord::new();
    if !rdr
        .read_byte_record(&mut record)
        .map_err(|e| read_error(path, e, rdr.position(), dialect.compression_type))?
    {
        return Err(DataError::Record {
            path: path.to_path_buf(),
            line: 1,
            message: "the file is empty but header = true expects a header row of column names"
                .into(),
        });
    }
    record
        .iter()
        .enumerate()
        .map(|(i, field)| {
            String::from_utf8(field.to_vec()).map_err(|_| DataError::Record {
                path: path.to_path_buf(),
                line: 1,
                message: format!("header column {i} is not UTF-8"),
            })
        })
        .collect()
}

/// The type ladder of TensorFlow's `_infer_type`, narrowest first.
const LADDER: [DType; 5] = [
    DType::I32,
    DType::I64,
    DType::F32,
    DType::F64,
    DType::String,
];

/// TensorFlow's `_infer_type`: the narrowest type on [`LADDER`], no narrower than `prev`,
/// that holds `value`. Floats follow `_is_valid_float`: the parsed value must be below the
/// type's maximum, so `nan` and overflowing values move on to the next type.
pub(crate) fn infer_type(value: &[u8], prev: Option<DType>) -> DType {
    let from = prev.map_or(0, |p| LADDER.iter().position(|&t| t == p).unwrap_or(0));
    for &t in &LADDER[from..] {
        let ok = match (t, parse_field(value, t)) {
            (DType::F32, Some(b)) => b.to_f32()[0] < f32::MAX,
            (DType::F64, Some(crate::Buffer::F64(v))) => v[0] < f64::MAX,
            (_, parsed) => parsed.is_some(),
        };
        if ok {
            return t;
        }
    }
    DType::String
}

/// Column defaults inferred from the first `rows` records (after headers) across `files`,
/// for the file columns `cols`: TensorFlow's `_infer_column_defaults`.
fn infer_defaults(
    files: &[PathBuf],
    dialect: &CsvOptions,
    cols: &[usize],
    rows: usize,
) -> Result<Vec<RecordDefault>> {
    let mut types: Vec<Option<DType>> = vec![None; cols.len()];
    let mut seen = 0;
    let mut record = csv::ByteRecord::new();
    'files: for path in files {
        let mut rdr = reader(path, dialect)?;
        let mut first = true;
        loop {
            if seen >= rows {
                break 'files;
            }
            if !rdr
                .read_byte_record(&mut record)
                .map_err(|e| read_error(path, e, rdr.position(), dialect.compression_type))?
            {
                break;
            }
            if std::mem::take(&mut first) && dialect.header {
                continue;
            }
            seen += 1;
            for (t, &c) in types.iter_mut().zip(cols) {
                let field = record.get(c).unwrap_or_default();
                if !field.is_empty() && field != dialect.na_value.as_bytes() {
                    *t = Some(infer_type(field, *t));
                }
            }
        }
    }
    Ok(types
        .into_iter()
        .map(|t| match t.unwrap_or(DType::String) {
            DType::I32 => RecordDefault::Int32(0),
            DType::I64 => RecordDefault::Int64(0),
            DType::F32 => RecordDefault::Float32(0.0),
            DType::F64 => RecordDefault::Float64(0.0),
            _ => RecordDefault::String(String::new()),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::{Buffer, Element};
    use crate::sources::testutil::write;

    fn batches(ds: &Dataset) -> Vec<Element> {
        ds.iter().map(|e| e.unwrap()).collect()
    }

    #[test]
    fn infers_types_like_tensorflow() {
        let t = |values: &[&str]| {
            values
                .iter()
                .fold(None, |prev, v| Some(infer_type(v.as_bytes(), prev)))
                .unwrap()
        };
        assert_eq!(t(&["1", "-7"]), DType::I32);
        assert_eq!(t(&["1", "3000000000"]), DType::I64);
        assert_eq!(t(&["3000000000", "1"]), DType::I64, "never narrows");
        assert_eq!(t(&["1", "2.5"]), DType::F32);
        assert_eq!(t(&["1e39"]), DType::F64, "overflows float32");
        assert_eq!(t(&["2.5", "x"]), DType::String);
        assert_eq!(t(&["nan"]), DType::String, "nan < max is false, as in TF");
        assert_eq!(
            t(&["99999999999999999999"]),
            DType::F32,
            "too big for int64"
        );
    }

    #[test]
    fn header_names_inferred_types_label_last_and_epochs() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "a.csv",
            "\u{feff}id,city,temp,label\n1,Oslo,-3.5,0\n2,\"Rome, IT\",,1\n".as_bytes(),
        );
        write(dir.path(), "b.csv", b"id,city,temp,label\n3,Lima,18,1\n");
        let pattern = format!("{}/*.csv", dir.path().display());
        let options = MakeCsvOptions {
            label_name: Some("label".into()),
            num_epochs: Some(2),
            shuffle: false,
            ..MakeCsvOptions::default()
        };
        let ds = Dataset::make_csv_dataset(&pattern, 2, options).unwrap();
        let b = batches(&ds);
        // 3 rows x 2 epochs = 6 rows, batches of 2, the last one kept (num_epochs is finite).
        assert_eq!(b.len(), 3);
        assert_eq!(
            b[0].names().collect::<Vec<_>>(),
            ["id", "city", "temp", "label"]
        );
        assert_eq!(b[0].get("id").unwrap().data(), &Buffer::I32(vec![1, 2]));
        assert_eq!(
            b[0].get("city").unwrap().data(),
            &Buffer::String(vec![b"Oslo".to_vec(), b"Rome, IT".to_vec()])
        );
        assert_eq!(
            b[0].get("temp").unwrap().data(),
            &Buffer::F32(vec![-3.5, 0.0])
        );
        assert_eq!(b[0].get("label").unwrap().data(), &Buffer::I32(vec![0, 1]));
        assert_eq!(b[1].get("id").unwrap().data(), &Buffer::I32(vec![3, 1]));
        assert_eq!(b[2].get("id").unwrap().data(), &Buffer::I32(vec![2, 3]));
    }

    /// `make_csv_dataset(path, batch_size=4, num_epochs=1, shuffle=False,
    /// compression_type="GZIP")` in TensorFlow 2.21 gives one batch `{'name': [b'Smith, Jane',
    /// b'two\nlines', b'Ann'], 'age': [41, 7, 0], 'score': [0.5, -1000.0, 2.25]}` (types
    /// inferred through the decompression; tests/reference/compressed_text_csv_reference.py).
    #[test]
    fn gzip_files_are_inferred_and_read_like_tensorflow() {
        let dir = tempfile::tempdir().unwrap();
        let csv = b"name,age,score\n\"Smith, Jane\",41,0.5\n\"two\nlines\",7,-1e3\nAnn,,2.25\n";
        let mut enc = Compression::Gzip.encoder(Vec::new());
        std::io::Write::write_all(&mut enc, csv).unwrap();
        let path = write(dir.path(), "p.csv.gz", &enc.finish().unwrap());
        let options = MakeCsvOptions {
            num_epochs: Some(1),
            shuffle: false,
            compression_type: Compression::Gzip,
            ..MakeCsvOptions::default()
        };
        let b =
            batches(&Dataset::make_csv_dataset(&path.display().to_string(), 4, options).unwrap());
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].names().collect::<Vec<_>>(), ["name", "age", "score"]);
        assert_eq!(
            b[0].get("name").unwrap().data(),
            &Buffer::String(vec![
                b"Smith, Jane".to_vec(),
                b"two\nlines".to_vec(),
                b"Ann".to_vec()
            ])
        );
        assert_eq!(
            b[0].get("age").unwrap().data(),
            &Buffer::I32(vec![41, 7, 0])
        );
        assert_eq!(
            b[0].get("score").unwrap().data(),
            &Buffer::F32(vec![0.5, -1000.0, 2.25])
        );
    }

    /// A GZIP file cut inside the rows read for type inference: the error names the file,
    /// the line and the uncompressed byte, and says what to check; the same file without
    /// `compression_type` is refused naming the setting.
    #[test]
    fn a_gzip_file_cut_during_type_inference_names_the_line_and_byte() {
        let dir = tempfile::tempdir().unwrap();
        let csv: String = std::iter::once("id,score\n".to_string())
            .chain((0..150).map(|i| format!("{i},{}.5\n", i * 7 % 13)))
            .collect();
        let mut enc = Compression::Gzip.encoder(Vec::new());
        std::io::Write::write_all(&mut enc, csv.as_bytes()).unwrap();
        let whole = enc.finish().unwrap();
        let path = write(dir.path(), "cut.csv.gz", &whole[..whole.len() / 2]);
        let options = |compression_type| MakeCsvOptions {
            num_epochs: Some(1),
            shuffle: false,
            compression_type,
            ..MakeCsvOptions::default()
        };
        let pattern = path.display().to_string();
        let err = Dataset::make_csv_dataset(&pattern, 4, options(Compression::Gzip))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cut.csv.gz:")
                && err.contains("uncompressed byte")
                && err.contains("truncated or damaged"),
            "{err}"
        );
        let plain = Dataset::make_csv_dataset(&pattern, 4, options(Compression::None))
            .unwrap_err()
            .to_string();
        assert!(plain.contains("compression_type = \"GZIP\""), "{plain}");
    }

    #[test]
    fn select_columns_label_in_the_middle_and_forever_drops_remainder() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "d.csv",
            b"a,y,b,c\n1,10,x,0.5\n2,20,y,1.5\n3,30,z,2.5\n",
        );
        let pattern = format!("{}/d.csv", dir.path().display());
        let options = MakeCsvOptions {
            label_name: Some("y".into()),
            select_columns: Some(vec!["c".into(), "y".into(), "a".into()]),
            column_defaults: Some(vec![
                RecordDefault::Int64(0),
                RecordDefault::Int64(0),
                RecordDefault::Float64(0.0),
            ]),
            shuffle: false,
            ..MakeCsvOptions::default()
        };
        let ds = Dataset::make_csv_dataset(&pattern, 2, options).unwrap();
        let b: Vec<Element> = ds.iter().take(3).map(|e| e.unwrap()).collect();
        // Features in file order, label last.
        assert_eq!(b[0].names().collect::<Vec<_>>(), ["a", "c", "y"]);
        assert_eq!(b[0].get("a").unwrap().data(), &Buffer::I64(vec![1, 2]));
        assert_eq!(b[0].get("c").unwrap().data(), &Buffer::F64(vec![0.5, 1.5]));
        assert_eq!(b[0].get("y").unwrap().data(), &Buffer::I64(vec![10, 20]));
        // Repeats forever: the batch after [3] takes the next epoch's first row.
        assert_eq!(b[1].get("a").unwrap().data(), &Buffer::I64(vec![3, 1]));
        assert_eq!(b[2].get("a").unwrap().data(), &Buffer::I64(vec![2, 3]));
    }

    #[test]
    fn shuffled_batches_are_a_seeded_permutation() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::from("v\n");
        for i in 0..50 {
            text.push_str(&format!("{i}\n"));
        }
        write(dir.path(), "s.csv", text.as_bytes());
        let pattern = format!("{}/s.csv", dir.path().display());
        let run = |seed| {
            let options = MakeCsvOptions {
                num_epochs: Some(1),
                shuffle_seed: Some(seed),
                ..MakeCsvOptions::default()
            };
            let ds = Dataset::make_csv_dataset(&pattern, 8, options).unwrap();
            batches(&ds)
                .iter()
                .flat_map(|b| b.get("v").unwrap().data().to_i64())
                .collect::<Vec<_>>()
        };
        let a = run(1);
        assert_eq!(a, run(1));
        assert_ne!(a, run(2));
        assert_ne!(a, (0..50).collect::<Vec<_>>());
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
    }

    /// `make_csv_dataset(column_names=...)`: names for a headerless file, or in place of a
    /// header's names (the header line is still skipped, as TensorFlow's reader does); a
    /// name count that does not fit the file is refused when the dataset is made.
    #[test]
    fn column_names_name_headerless_files_and_replace_a_header() {
        let dir = tempfile::tempdir().unwrap();
        let plain = write(dir.path(), "plain.csv", b"1,2.5\n3,4.5\n");
        let headed = write(dir.path(), "headed.csv", b"a,b\n5,6.5\n");
        let read = |path: &std::path::Path, header: bool, names: &[&str]| {
            let options = MakeCsvOptions {
                header,
                column_names: Some(names.iter().map(|n| n.to_string()).collect()),
                label_name: Some(names[1].to_string()),
                num_epochs: Some(1),
                shuffle: false,
                ..MakeCsvOptions::default()
            };
            Dataset::make_csv_dataset(&path.display().to_string(), 10, options)
        };
        let b = batches(&read(&plain, false, &["x", "y"]).unwrap());
        assert_eq!(b[0].names().collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!(b[0].get("x").unwrap().data(), &Buffer::I32(vec![1, 3]));
        assert_eq!(b[0].get("y").unwrap().data(), &Buffer::F32(vec![2.5, 4.5]));
        let b = batches(&read(&headed, true, &["p", "q"]).unwrap());
        assert_eq!(b[0].names().collect::<Vec<_>>(), ["p", "q"]);
        assert_eq!(b[0].get("p").unwrap().data(), &Buffer::I32(vec![5]));
        let err = read(&plain, false, &["x", "y", "z"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("column_names has 3 names but the first row of")
                && err.contains("plain.csv has 2 fields"),
            "{err}"
        );
        let err = read(&headed, true, &["x", "y", "z"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("but the header of"), "{err}");
    }

    /// Globs leave out hidden files (`._e.csv`, which macOS writes beside `e.csv`) unless
    /// `include_hidden`; a pattern that matches hidden files only says so.
    #[test]
    fn globs_leave_hidden_files_out_unless_included() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "e.csv", b"x\n1\n");
        write(dir.path(), "._e.csv", b"\x00\x05\x16\x07 not a csv");
        write(dir.path(), ".h/f.csv", b"x\n2\n");
        let options = |include_hidden| MakeCsvOptions {
            include_hidden,
            num_epochs: Some(1),
            shuffle: false,
            ..MakeCsvOptions::default()
        };
        let pattern = format!("{}/*.csv", dir.path().display());
        let b = batches(&Dataset::make_csv_dataset(&pattern, 10, options(false)).unwrap());
        assert_eq!(b[0].get("x").unwrap().data(), &Buffer::I32(vec![1]));
        // With include_hidden the companion file is read (its header differs: refused).
        let err = Dataset::make_csv_dataset(&pattern, 10, options(true)).unwrap_err();
        assert!(err.to_string().contains("._e.csv"), "{err}");
        let deep = format!("{}/**/*.csv", dir.path().display());
        let b = batches(&Dataset::make_csv_dataset(&deep, 10, options(false)).unwrap());
        assert_eq!(b[0].get("x").unwrap().data(), &Buffer::I32(vec![1]));
        let hidden_only = format!("{}/*/f.csv", dir.path().display());
        let err = Dataset::make_csv_dataset(&hidden_only, 10, options(false)).unwrap_err();
        assert!(
            err.to_string().contains(
                "(1 hidden files match it, names starting with '.': they are left out unless \
                 include_hidden = true)"
            ),
            "{err}"
        );
        let b = batches(&Dataset::make_csv_dataset(&hidden_only, 10, options(true)).unwrap());
        assert_eq!(b[0].get("x").unwrap().data(), &Buffer::I32(vec![2]));
    }

    #[test]
    fn ignore_errors_counts_and_bad_arguments_fail_early() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "e.csv", b"x,y\n1,2\nbad,3\n4,5\n");
        write(dir.path(), "other.csv", b"x,z\n1,2\n");
        let pattern = format!("{}/e.csv", dir.path().display());
        let counter = SkipCounter::new();
        let options = MakeCsvOptions {
            column_defaults: Some(vec![
                RecordDefault::Required(DType::F32),
                RecordDefault::Required(DType::F32),
            ]),
            num_epochs: Some(1),
            shuffle: false,
            ignore_errors: true,
            skipped: counter.clone(),
            ..MakeCsvOptions::default()
        };
        let ds = Dataset::make_csv_dataset(&pattern, 10, options.clone()).unwrap();
        let b = batches(&ds);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].get("x").unwrap().data(), &Buffer::F32(vec![1.0, 4.0]));
        assert_eq!(counter.count(), 1);
        assert!(counter.last_error().unwrap().contains("e.csv:3:"));

        let err = |pattern: &str, o: MakeCsvOptions| {
            Dataset::make_csv_dataset(pattern, 1, o)
                .unwrap_err()
                .to_string()
        };
        let all = format!("{}/*.csv", dir.path().display());
        assert!(err(&all, MakeCsvOptions::default()).contains("different column names"));
        let no_header = MakeCsvOptions {
            header: false,
            ..MakeCsvOptions::default()
        };
        assert!(err(&pattern, no_header).contains("cannot infer column names"));
        let bad_label = MakeCsvOptions {
            label_name: Some("q".into()),
            ..MakeCsvOptions::default()
        };
        assert!(err(&pattern, bad_label).contains("label_name \"q\""));
        let bad_select = MakeCsvOptions {
            select_columns: Some(vec!["nope".into()]),
            ..MakeCsvOptions::default()
        };
        assert!(err(&pattern, bad_select).contains("\"nope\""));
        let missing = format!("{}/*.none", dir.path().display());
        assert!(err(&missing, MakeCsvOptions::default()).contains("No files matched pattern"));
        let zero = Dataset::make_csv_dataset(&pattern, 0, MakeCsvOptions::default());
        assert!(zero.unwrap_err().to_string().contains("batch_size"));
    }
}
