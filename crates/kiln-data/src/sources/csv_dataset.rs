//! [`Dataset::csv_dataset`]: `tf.data.experimental.CsvDataset`.
//!
//! Parsing is RFC 4180 (<https://www.rfc-editor.org/rfc/rfc4180>) through the [`csv`]
//! crate: fields separated by `field_delim`, records by `\n` or `\r\n`, a field in double
//! quotes may hold the delimiter, newlines and doubled quotes (`""` for `"`). Column typing,
//! defaults, `na_value`, `select_cols` / `exclude_cols` and `header` follow TensorFlow's
//! `CsvDatasetOp` (`tensorflow/core/kernels/data/experimental/csv_dataset_op.cc`).

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{SkipCounter, open};
use crate::compression::Compression;
use crate::dataset::{BoxIter, Cardinality, Dataset, Fingerprint, Node, autotune};
use crate::element::{Array, Buffer, DType, Element};
use crate::error::{DataError, Result};
use crate::storage::SourceReader;

/// Read buffer per open file: 4 MiB, CsvDataset's default `buffer_size`.
const BUFFER_SIZE: usize = 4 * 1024 * 1024;

/// The type and default of one output column — one entry of tf's `record_defaults`.
///
/// TensorFlow accepts either a dtype (the column is required) or a one-element tensor (its
/// value replaces an empty field); kiln spells these `Required(dtype)` and the typed
/// variants. Allowed types are TensorFlow's: `float32`, `float64`, `int32`, `int64`,
/// `string`.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordDefault {
    /// The column must have a value: an empty field (or one equal to `na_value`) is an error.
    Required(DType),
    /// `float32`, with this value for empty fields.
    Float32(f32),
    /// `float64`, with this value for empty fields.
    Float64(f64),
    /// `int32`, with this value for empty fields.
    Int32(i32),
    /// `int64`, with this value for empty fields.
    Int64(i64),
    /// `string` (the field's bytes), with this value for empty fields.
    String(String),
}

impl RecordDefault {
    /// The column's dtype.
    pub fn dtype(&self) -> DType {
        match self {
            RecordDefault::Required(d) => *d,
            RecordDefault::Float32(_) => DType::F32,
            RecordDefault::Float64(_) => DType::F64,
            RecordDefault::Int32(_) => DType::I32,
            RecordDefault::Int64(_) => DType::I64,
            RecordDefault::String(_) => DType::String,
        }
    }

    /// The default as a scalar buffer; `None` for a required column.
    fn value(&self) -> Option<Buffer> {
        Some(match self {
            RecordDefault::Required(_) => return None,
            RecordDefault::Float32(v) => Buffer::F32(vec![*v]),
            RecordDefault::Float64(v) => Buffer::F64(vec![*v]),
            RecordDefault::Int32(v) => Buffer::I32(vec![*v]),
            RecordDefault::Int64(v) => Buffer::I64(vec![*v]),
            RecordDefault::String(v) => Buffer::String(vec![v.as_bytes().to_vec()]),
        })
    }
}

/// Options of [`Dataset::csv_dataset`], with `CsvDataset`'s defaults.
#[derive(Debug, Clone)]
pub struct CsvOptions {
    /// The first record of each file is a header and is skipped (default `false`).
    pub header: bool,
    /// Field separator byte (default `b','`).
    pub field_delim: u8,
    /// Double quotes delimit fields (RFC 4180, default `true`); with `false`, `"` is an
    /// ordinary character.
    pub use_quote_delim: bool,
    /// A field equal to this string counts as empty: it takes the column's default, or is an
    /// error for a required column (default `""`, i.e. only empty fields).
    pub na_value: String,
    /// Indices (0-based, strictly increasing) of the file columns to keep, one per record
    /// default; other columns are not parsed. Default: all columns.
    pub select_cols: Option<Vec<usize>>,
    /// Indices (0-based, strictly increasing) of file columns to drop; the remaining columns
    /// match the record defaults in order. Cannot be combined with `select_cols`.
    pub exclude_cols: Option<Vec<usize>>,
    /// Component names, one per record default. Default: `"0"`, `"1"`, … (the position in
    /// TensorFlow's output tuple).
    pub column_names: Option<Vec<String>>,
    /// Skip records (and files) that fail instead of yielding the error, counting them in
    /// `skipped` and in the iteration's [`crate::DatasetIter::skip_stats`] —
    /// `CsvDataset(...).ignore_errors()` in tf.data (default `false`).
    pub ignore_errors: bool,
    /// Where skipped records are counted; keep a clone to read the count
    /// ([`SkipCounter::count`]).
    pub skipped: SkipCounter,
    /// tf.data's `compression_type`: each file is one GZIP or ZLIB stream, decompressed
    /// before parsing (default [`Compression::None`]). Line numbers and byte offsets in errors
    /// count uncompressed bytes; a damaged or truncated stream is a [`DataError::Record`]
    /// naming the file, line and uncompressed byte.
    pub compression_type: Compression,
}

impl Default for CsvOptions {
    fn default() -> CsvOptions {
        CsvOptions {
            header: false,
            field_delim: b',',
            use_quote_delim: true,
            na_value: String::new(),
            select_cols: None,
            exclude_cols: None,
            column_names: None,
            ignore_errors: false,
            skipped: SkipCounter::new(),
            compression_type: Compression::None,
        }
    }
}

/// Which file columns feed the output.
#[derive(Debug, Clone)]
enum Columns {
    /// Exactly `record_defaults.len()` fields, all used.
    All,
    /// These columns (strictly increasing); records may have more fields.
    Select(Vec<usize>),
    /// All but these (strictly increasing); records have `record_defaults.len() + len`
    /// fields.
    Exclude(Vec<usize>),
}

/// Everything a reader needs, shared by iterations.
#[derive(Debug)]
struct Spec {
    files: Vec<PathBuf>,
    defaults: Vec<RecordDefault>,
    names: Vec<String>,
    columns: Columns,
    options: CsvOptions,
}

impl Dataset {
    /// `tf.data.experimental.CsvDataset(filenames, record_defaults, header, field_delim,
    /// use_quote_delim, na_value, select_cols, exclude_cols)`: one element per CSV record,
    /// files read in order, lazily, one at a time.
    ///
    /// Each element has one scalar component per record default, named by
    /// `options.column_names` (default `"0"`, `"1"`, …), typed by the default
    /// ([`RecordDefault`]). A field that is empty or equal to `na_value` takes the default;
    /// numbers may have surrounding spaces (`" 3 "`), floats accept `nan` and `inf`. String
    /// fields keep their bytes as they are (after unquoting). A UTF-8 byte-order mark at the
    /// start of a file is removed. Blank lines are skipped (TensorFlow would report them as
    /// records with one empty field). Cardinality is [`Cardinality::Unknown`]. Files may be
    /// local paths, `file://` URLs or `s3://bucket/key` URLs ([`crate::storage`]).
    ///
    /// # Errors
    /// Returned now, as [`DataError::InvalidArgument`]: no record defaults, an unsupported
    /// dtype (`uint8`), `select_cols` and `exclude_cols` together, `select_cols` not strictly
    /// increasing or of a different length than `record_defaults`, `column_names` of the
    /// wrong length or with duplicates, a `field_delim` of `\n`, `\r` or (with quoting) `"`.
    ///
    /// Yielded during iteration: [`DataError::Record`] — `file:line: message`, `line` being
    /// the physical (1-based) line where the record starts — for a record with the wrong
    /// number of fields, a required column that is empty, or a value that does not parse as
    /// its column's type (the message names the column, the value and the type, and ends
    /// with `(the record starts at byte N)`, N counted from the file's first byte);
    /// [`DataError::Io`] for a file that cannot be opened or read (iteration goes on with the
    /// next file). With `options.ignore_errors` these are skipped and counted in
    /// `options.skipped` instead.
    pub fn csv_dataset<P: Into<PathBuf>>(
        files: impl IntoIterator<Item = P>,
        record_defaults: Vec<RecordDefault>,
        options: CsvOptions,
    ) -> Result<Dataset> {
        let spec = Spec::new(
            files.into_iter().map(Into::into).collect(),
            record_defaults,
            options,
        )?;
        Ok(Dataset::from_node(CsvNode {
            spec: Arc::new(spec),
        }))
    }
}

fn invalid(message: String) -> DataError {
    DataError::InvalidArgument(format!("CsvDataset: {message}"))
}

/// True when `cols` is strictly increasing.
fn strictly_increasing(cols: &[usize]) -> bool {
    cols.windows(2).all(|w| w[0] < w[1])
}

impl Spec {
    fn new(files: Vec<PathBuf>, defaults: Vec<RecordDefault>, options: CsvOptions) -> Result<Spec> {
        let n = defaults.len();
        if n == 0 {
            return Err(invalid(
                "record_defaults is empty; give one per column".into(),
            ));
        }
        for (i, d) in defaults.iter().enumerate() {
            if matches!(d.dtype(), DType::U8) {
                return Err(invalid(format!(
                    "record_defaults[{i}] has dtype uint8; CSV columns are float32, float64, \
                     int32, int64 or string"
                )));
            }
        }
        let columns = match (&options.select_cols, &options.exclude_cols) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "select_cols and exclude_cols cannot both be given".into(),
                ));
            }
            (Some(cols), None) => {
                if !strictly_increasing(cols) {
                    return Err(invalid(format!(
                        "select_cols {cols:?} must be strictly increasing"
                    )));
                }
                if cols.len() != n {
                    return Err(invalid(format!(
                        "select_cols has {} columns but record_defaults has {n}; give one \
                         default per selected column",
                        cols.len()
                    )));
                }
                Columns::Select(cols.clone())
            }
            (None, Some(cols)) => {
                if !strictly_increasing(cols) {
                    return Err(invalid(format!(
                        "exclude_cols {cols:?} must be strictly increasing"
                    )));
                }
                Columns::Exclude(cols.clone())
            }
            (None, None) => Columns::All,
        };
        let names = match &options.column_names {
            Some(names) => {
                if names.len() != n {
                    return Err(invalid(format!(
                        "column_names has {} names but record_defaults has {n}",
                        names.len()
                    )));
                }
                for (i, name) in names.iter().enumerate() {
                    if names[..i].contains(name) {
                        return Err(invalid(format!("column name {name:?} appears twice")));
                    }
                }
                names.clone()
            }
            None => (0..n).map(|i| i.to_string()).collect(),
        };
        let delim = options.field_delim;
        if delim == b'\n' || delim == b'\r' || (options.use_quote_delim && delim == b'"') {
            return Err(invalid(format!(
                "field_delim {:?} cannot be used (it separates records or quotes fields)",
                delim as char
            )));
        }
        Ok(Spec {
            files,
            defaults,
            names,
            columns,
            options,
        })
    }

    /// The file column that output column `j` reads.
    fn file_column(&self, j: usize) -> usize {
        match &self.columns {
            Columns::All => j,
            Columns::Select(cols) => cols[j],
            Columns::Exclude(cols) => {
                // The j-th column not in `cols`.
                let mut c = j;
                for &x in cols {
                    if x <= c {
                        c += 1;
                    }
                }
                c
            }
        }
    }

    /// Checks the number of fields of a record.
    fn check_width(&self, found: usize) -> std::result::Result<(), String> {
        let n = self.defaults.len();
        let (ok, expected) = match &self.columns {
            Columns::All => (found == n, format!("{n} fields (one per record default)")),
            Columns::Select(cols) => {
                let need = cols[n - 1] + 1;
                (
                    found >= need,
                    format!(
                        "at least {need} fields (select_cols reads column {})",
                        need - 1
                    ),
                )
            }
            Columns::Exclude(cols) => {
                let want = n + cols.len();
                (
                    found == want,
                    format!(
                        "{want} fields ({n} record defaults + {} excluded)",
                        cols.len()
                    ),
                )
            }
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "expected {expected} but the record has {found}; check field_delim and quoting, \
                 or fix the row{}",
                self.skip_hint()
            ))
        }
    }

    /// The end of a bad row's message: how to skip such rows, unless they are skipped.
    fn skip_hint(&self) -> &'static str {
        if self.options.ignore_errors {
            ""
        } else {
            ", or set ignore_errors = true to skip bad rows"
        }
    }

    /// Parses one record into an element; `Err` holds the message for [`DataError::Record`].
    fn parse(&self, record: &csv::ByteRecord) -> std::result::Result<Element, String> {
        self.check_width(record.len())?;
        let mut element = Element::new();
        for (j, default) in self.defaults.iter().enumerate() {
            let c = self.file_column(j);
            let field = record.get(c).unwrap_or_default();
            let column = if self.options.column_names.is_some() {
                format!("column {c} ({:?})", self.names[j])
            } else {
                format!("column {c}")
            };
            let missing = field.is_empty() || field == self.options.na_value.as_bytes();
            let buffer = if missing {
                default.value().ok_or_else(|| {
                    format!(
                        "{column} is required but the field is empty{}; fill in the value, or \
                         give the column a default value instead of a dtype{}",
                        if field.is_empty() {
                            String::new()
                        } else {
                            format!(" (na_value {:?})", self.options.na_value)
                        },
                        self.skip_hint()
                    )
                })?
            } else {
                parse_field(field, default.dtype()).ok_or_else(|| {
                    format!(
                        "{column}: {:?} is not a valid {}; fix the value, or change the type of the \
                         column's default{}",
                        String::from_utf8_lossy(field),
                        default.dtype(),
                        self.skip_hint()
                    )
                })?
            };
            let array = Array::scalar(buffer).map_err(|e| e.to_string())?;
            element.insert(self.names[j].as_str(), array);
        }
        Ok(element)
    }
}

/// Parses a non-empty field as `dtype`; `None` when it does not parse. Numbers may have
/// surrounding ASCII whitespace, as TensorFlow's `safe_strto*` allow.
pub(super) fn parse_field(field: &[u8], dtype: DType) -> Option<Buffer> {
    if dtype == DType::String {
        return Some(Buffer::String(vec![field.to_vec()]));
    }
    let text = std::str::from_utf8(field).ok()?.trim();
    Some(match dtype {
        DType::I32 => Buffer::I32(vec![text.parse().ok()?]),
        DType::I64 => Buffer::I64(vec![text.parse().ok()?]),
        DType::F32 => Buffer::F32(vec![text.parse().ok()?]),
        DType::F64 => Buffer::F64(vec![text.parse().ok()?]),
        DType::U8 | DType::String => return None,
    })
}

/// A CSV reader over the file at `path` with the options' dialect and compression (checked
/// against the file's first bytes, [`Compression::text_decoder`]). Headers are not
/// interpreted (records come back as read, so positions stay physical); blank lines are
/// skipped; records may have any number of fields (checked by the caller).
///
/// # Errors
/// As [`open`] and [`Compression::text_decoder`].
pub(super) fn reader(
    path: &Path,
    options: &CsvOptions,
) -> Result<csv::Reader<BufReader<SourceReader>>> {
    let file = options.compression_type.text_decoder(path, open(path)?)?;
    Ok(csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(options.field_delim)
        .quoting(options.use_quote_delim)
        .double_quote(true)
        .buffer_capacity(64 * 1024)
        .from_reader(BufReader::with_capacity(BUFFER_SIZE, file)))
}

/// A read error of a [`reader`] at `position`: for a compressed file, an I/O error is a
/// damaged stream, reported as a [`DataError::Record`] with the line and uncompressed byte.
pub(super) fn read_error(
    path: &Path,
    err: csv::Error,
    position: &csv::Position,
    compression: Compression,
) -> DataError {
    match err.kind() {
        csv::ErrorKind::Io(source) if compression != Compression::None => DataError::Record {
            path: path.to_path_buf(),
            line: position.line(),
            message: format!(
                "cannot decompress the {} stream at uncompressed byte {}: {source} (a \
                 truncated or damaged file, or not {0}-compressed)",
                compression.tf_name(),
                position.byte(),
            ),
        },
        _ => csv_error(path, err),
    }
}

/// Converts a `csv` error into a [`DataError`] for `path`.
pub(super) fn csv_error(path: &Path, err: csv::Error) -> DataError {
    let position = err.position().map(|p| (p.line(), p.byte()));
    match err.into_kind() {
        csv::ErrorKind::Io(source) => DataError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => DataError::Record {
            path: path.to_path_buf(),
            line: position.map_or(0, |(line, _)| line),
            message: match position {
                Some((_, byte)) => format!("{other:?} (the record starts at byte {byte})"),
                None => format!("{other:?}"),
            },
        },
    }
}

struct CsvNode {
    spec: Arc<Spec>,
}

impl Node for CsvNode {
    fn iter(&self) -> BoxIter {
        let skips = self.spec.options.ignore_errors.then(|| {
            let pipeline = autotune::current();
            pipeline.track_skips();
            pipeline
        });
        Box::new(CsvIter {
            spec: Arc::clone(&self.spec),
            next_file: 0,
            reader: None,
            record: csv::ByteRecord::new(),
            skips,
            position: 0,
        })
    }

    fn cardinality(&self) -> Cardinality {
        if self.spec.files.is_empty() {
            Cardinality::Finite(0)
        } else {
            Cardinality::Unknown
        }
    }

    /// The files' identities and every option that changes the elements (`skipped`, a
    /// counter, does not).
    fn fingerprint(&self) -> u64 {
        let spec = &self.spec;
        let o = &spec.options;
        let fp = Fingerprint::new("csv")
            .files(&spec.files)
            .str(&format!("{:?}", spec.defaults))
            .str(&format!("{:?}", spec.names))
            .str(&format!("{:?}", spec.columns))
            .bool(o.header)
            .u64(u64::from(o.field_delim))
            .bool(o.use_quote_delim)
            .str(&o.na_value)
            .bool(o.ignore_errors);
        // Uncompressed files keep the fingerprint they had before compression was supported.
        match o.compression_type {
            Compression::None => fp.finish(),
            c => fp.str(c.tf_name()).finish(),
        }
    }
}

struct CsvIter {
    spec: Arc<Spec>,
    next_file: usize,
    /// The open file's reader and its index in `spec.files`.
    reader: Option<(csv::Reader<BufReader<SourceReader>>, usize)>,
    record: csv::ByteRecord,
    /// With `ignore_errors`: the iteration's pipeline, where skips are counted.
    skips: Option<Arc<autotune::Pipeline>>,
    /// Results produced so far (records and errors), the index of the next one.
    position: u64,
}

impl CsvIter {
    /// The next element or error, ignoring `ignore_errors`; `None` at the end.
    fn next_result(&mut self) -> Option<Result<Element>> {
        loop {
            if self.reader.is_none() {
                let index = self.next_file;
                let path = self.spec.files.get(index)?;
                self.next_file += 1;
                match reader(path, &self.spec.options) {
                    Ok(mut rdr) => {
                        if self.spec.options.header
                            && let Err(e) = rdr.read_byte_record(&mut self.record)
                        {
                            let compression = self.spec.options.compression_type;
                            return Some(Err(read_error(path, e, rdr.position(), compression)));
                        }
                        self.reader = Some((rdr, index));
                    }
                    Err(err) => return Some(Err(err)),
                }
            }
            let (rdr, index) = self.reader.as_mut()?;
            let path = &self.spec.files[*index];
            match rdr.read_byte_record(&mut self.record) {
                Ok(true) => {
                    let (line, byte) = self
                        .record
                        .position()
                        .map_or((0, 0), |p| (p.line(), p.byte()));
                    return Some(self.spec.parse(&self.record).map_err(|message| {
                        DataError::Record {
                            path: path.clone(),
                            line,
                            message: format!("{message} (the record starts at byte {byte})"),
                        }
                    }));
                }
                Ok(false) => self.reader = None,
                Err(e) => {
                    let compression = self.spec.options.compression_type;
                    let err = read_error(path, e, rdr.position(), compression);
                    self.reader = None;
                    return Some(Err(err));
                }
            }
        }
    }
}

impl Iterator for CsvIter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        loop {
            let result = self.next_result()?;
            self.position += 1;
            match (result, &self.skips) {
                (Err(err), Some(pipeline)) => {
                    pipeline.record_skip(self.position - 1, &err);
                    self.spec.options.skipped.skip(&err);
                }
                (result, _) => return Some(result),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::testutil::write;

    fn rows(ds: &Dataset) -> Vec<Element> {
        ds.iter().map(|e| e.unwrap()).collect()
    }

    fn text(e: &Element, name: &str) -> String {
        let bytes = &e.get(name).unwrap().data().as_strings().unwrap()[0];
        String::from_utf8(bytes.clone()).unwrap()
    }

    #[test]
    fn quoted_fields_bom_header_and_types() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "people.csv",
            "\u{feff}name,age,score,id,note\r\n\
             \"Smith, Jane\",41,0.5,9000000000,\"said \"\"hi\"\"\"\r\n\
             Bob, 7 ,-1e3,-2,\"two\nlines\"\r\n\
             \r\n\
             Ann,,nan,3,plain"
                .as_bytes(),
        );
        let defaults = vec![
            RecordDefault::String("?".into()),
            RecordDefault::Int32(-1),
            RecordDefault::Required(DType::F32),
            RecordDefault::Required(DType::I64),
            RecordDefault::String(String::new()),
        ];
        let options = CsvOptions {
            header: true,
            ..CsvOptions::default()
        };
        let ds = Dataset::csv_dataset([&path], defaults, options).unwrap();
        assert_eq!(ds.cardinality(), Cardinality::Unknown);
        let rows = rows(&ds);
        assert_eq!(rows.len(), 3, "header and blank line skipped");
        let names: Vec<&str> = rows[0].names().collect();
        assert_eq!(names, ["0", "1", "2", "3", "4"]);
        assert_eq!(text(&rows[0], "0"), "Smith, Jane");
        assert_eq!(rows[0].get("1").unwrap().data(), &Buffer::I32(vec![41]));
        assert_eq!(rows[0].get("2").unwrap().data(), &Buffer::F32(vec![0.5]));
        assert_eq!(
            rows[0].get("3").unwrap().data(),
            &Buffer::I64(vec![9_000_000_000])
        );
        assert_eq!(text(&rows[0], "4"), "said \"hi\"");
        assert_eq!(rows[0].get("1").unwrap().shape(), &[] as &[usize]);
        // Spaces around numbers are allowed; a quoted newline stays in the field.
        assert_eq!(rows[1].get("1").unwrap().data(), &Buffer::I32(vec![7]));
        assert_eq!(
            rows[1].get("2").unwrap().data(),
            &Buffer::F32(vec![-1000.0])
        );
        assert_eq!(text(&rows[1], "4"), "two\nlines");
        // Empty field takes the default; nan parses.
        assert_eq!(text(&rows[2], "0"), "Ann");
        assert_eq!(rows[2].get("1").unwrap().data(), &Buffer::I32(vec![-1]));
        assert!(rows[2].get("2").unwrap().data().to_f32()[0].is_nan());
    }

    /// `CsvDataset(path, [tf.constant("?"), tf.constant(-1, tf.int32), tf.float32],
    /// header=True, compression_type="GZIP")` in TensorFlow 2.21 gives
    /// `[(b'Smith, Jane', 41, 0.5), (b'two\nlines', 7, -1000.0), (b'Ann', -1, 2.25)]`
    /// (tests/reference/compressed_text_csv_reference.py); ZLIB the same.
    #[test]
    fn gzip_and_zlib_files_parse_like_tensorflow() {
        let dir = tempfile::tempdir().unwrap();
        let csv = b"name,age,score\n\"Smith, Jane\",41,0.5\n\"two\nlines\",7,-1e3\nAnn,,2.25\n";
        for c in [Compression::Gzip, Compression::Zlib] {
            let mut enc = c.encoder(Vec::new());
            std::io::Write::write_all(&mut enc, csv).unwrap();
            let path = write(
                dir.path(),
                &format!("p-{}.csv", c.tf_name()),
                &enc.finish().unwrap(),
            );
            let defaults = vec![
                RecordDefault::String("?".into()),
                RecordDefault::Int32(-1),
                RecordDefault::Required(DType::F32),
            ];
            let options = CsvOptions {
                header: true,
                compression_type: c,
                ..CsvOptions::default()
            };
            let rows = rows(&Dataset::csv_dataset([&path], defaults, options).unwrap());
            assert_eq!(rows.len(), 3, "{c}");
            let got: Vec<(String, Buffer, Vec<f32>)> = rows
                .iter()
                .map(|r| {
                    (
                        text(r, "0"),
                        r.get("1").unwrap().data().clone(),
                        r.get("2").unwrap().data().to_f32(),
                    )
                })
                .collect();
            assert_eq!(
                got,
                vec![
                    ("Smith, Jane".to_string(), Buffer::I32(vec![41]), vec![0.5]),
                    (
                        "two\nlines".to_string(),
                        Buffer::I32(vec![7]),
                        vec![-1000.0]
                    ),
                    ("Ann".to_string(), Buffer::I32(vec![-1]), vec![2.25]),
                ],
                "{c}"
            );
        }
    }

    /// A GZIP CSV cut short: the rows before the cut, then a `Record` error naming the file,
    /// the line and the uncompressed byte offset.
    #[test]
    fn a_truncated_gzip_csv_names_the_line_and_byte() {
        let dir = tempfile::tempdir().unwrap();
        let csv: Vec<u8> = (0..3000)
            .flat_map(|i| format!("{i:05},{:05}\n", i * 2).into_bytes())
            .collect();
        let mut enc = Compression::Gzip.encoder(Vec::new());
        std::io::Write::write_all(&mut enc, &csv).unwrap();
        let full = enc.finish().unwrap();
        let path = write(dir.path(), "cut.csv.gz", &full[..full.len() / 2]);
        let defaults = vec![
            RecordDefault::Required(DType::I64),
            RecordDefault::Required(DType::I64),
        ];
        let options = CsvOptions {
            compression_type: Compression::Gzip,
            ..CsvOptions::default()
        };
        let results: Vec<_> = Dataset::csv_dataset([&path], defaults, options)
            .unwrap()
            .iter()
            .collect();
        let (last, ok) = results.split_last().unwrap();
        assert!(ok.len() > 100 && ok.len() < 3000, "{}", ok.len());
        for (i, r) in ok.iter().enumerate() {
            let r = r.as_ref().unwrap();
            assert_eq!(r.get("0").unwrap().data(), &Buffer::I64(vec![i as i64]));
        }
        match last {
            Err(DataError::Record {
                path: p,
                line,
                message,
            }) => {
                assert_eq!(p, &path);
                assert_eq!(*line, ok.len() as u64 + 1, "{message}");
                assert!(message.contains("GZIP"), "{message}");
                // Each row is 12 bytes: decompression stopped inside the unfinished row.
                let offset: usize = message
                    .split("uncompressed byte ")
                    .nth(1)
                    .and_then(|m| m.split(':').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("{message}"));
                let start = 12 * ok.len();
                assert!((start..start + 12).contains(&offset), "{offset}: {message}");
            }
            other => panic!("expected a Record error, got {other:?}"),
        }
    }

    #[test]
    fn a_bom_is_stripped_from_the_first_field_of_a_headerless_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "bom.csv",
            "\u{feff}5,\u{feff}x\n6,y\n".as_bytes(),
        );
        let defaults = vec![
            RecordDefault::Required(DType::I32),
            RecordDefault::String(String::new()),
        ];
        let rows = rows(&Dataset::csv_dataset([path], defaults, CsvOptions::default()).unwrap());
        assert_eq!(rows[0].get("0").unwrap().data(), &Buffer::I32(vec![5]));
        // Only the file's leading mark is removed, not one inside a field.
        assert_eq!(text(&rows[0], "1"), "\u{feff}x");
        assert_eq!(rows[1].get("0").unwrap().data(), &Buffer::I32(vec![6]));
    }

    #[test]
    fn na_value_select_cols_names_and_delimiter() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "t.tsv",
            b"a\tb\tc\td\n1\tNA\tx;y\t2.5\n2\t5\tNA\tNA\n",
        );
        let options = CsvOptions {
            header: true,
            field_delim: b'\t',
            na_value: "NA".into(),
            select_cols: Some(vec![1, 2, 3]),
            column_names: Some(vec!["b".into(), "c".into(), "d".into()]),
            ..CsvOptions::default()
        };
        let defaults = vec![
            RecordDefault::Int64(0),
            RecordDefault::String("none".into()),
            RecordDefault::Float64(-1.0),
        ];
        let rows = rows(&Dataset::csv_dataset([path], defaults, options).unwrap());
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].names().collect::<Vec<_>>(), ["b", "c", "d"]);
        assert_eq!(rows[0].get("b").unwrap().data(), &Buffer::I64(vec![0]));
        assert_eq!(text(&rows[0], "c"), "x;y");
        assert_eq!(rows[0].get("d").unwrap().data(), &Buffer::F64(vec![2.5]));
        assert_eq!(rows[1].get("b").unwrap().data(), &Buffer::I64(vec![5]));
        assert_eq!(text(&rows[1], "c"), "none");
        assert_eq!(rows[1].get("d").unwrap().data(), &Buffer::F64(vec![-1.0]));
    }

    #[test]
    fn exclude_cols_and_unquoted_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "e.csv", b"1,\"q,3\n4,5,6\n");
        let options = CsvOptions {
            exclude_cols: Some(vec![1]),
            use_quote_delim: false,
            ..CsvOptions::default()
        };
        let defaults = vec![
            RecordDefault::Int32(0),
            RecordDefault::String(String::new()),
        ];
        let rows = rows(&Dataset::csv_dataset([path], defaults, options).unwrap());
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].get("0").unwrap().data(), &Buffer::I32(vec![1]));
        assert_eq!(text(&rows[0], "1"), "3");
        assert_eq!(rows[1].get("0").unwrap().data(), &Buffer::I32(vec![4]));
        assert_eq!(text(&rows[1], "1"), "6");
    }

    #[test]
    fn a_bad_row_names_file_line_column_value_and_type() {
        let dir = tempfile::tempdir().unwrap();
        // The quoted field on line 2 spans lines 2-3, so the bad record starts on line 4.
        let path = write(
            dir.path(),
            "bad.csv",
            b"x,label\n1.5,\"multi\nline\"\nabc,ok\n2,\n3,fine\n",
        );
        let defaults = vec![
            RecordDefault::Required(DType::F32),
            RecordDefault::Required(DType::String),
        ];
        let options = CsvOptions {
            header: true,
            column_names: Some(vec!["x".into(), "label".into()]),
            ..CsvOptions::default()
        };
        let ds = Dataset::csv_dataset([&path], defaults.clone(), options.clone()).unwrap();
        let results: Vec<_> = ds.iter().collect();
        assert_eq!(
            results.len(),
            4,
            "errors are yielded in place, reading goes on"
        );
        let err = results[1].as_ref().unwrap_err();
        match err {
            DataError::Record {
                path: p,
                line,
                message,
            } => {
                assert_eq!(p, &path);
                assert_eq!(*line, 4);
                assert!(message.contains("column 0 (\"x\")"), "{message}");
                assert!(
                    message.contains("\"abc\" is not a valid float32"),
                    "{message}"
                );
                assert!(
                    message.contains("or set ignore_errors = true to skip bad rows"),
                    "{message}"
                );
                // "x,label\n" (8 bytes) + "1.5,\"multi\nline\"\n" (17 bytes).
                assert!(
                    message.ends_with("(the record starts at byte 25)"),
                    "{message}"
                );
            }
            other => panic!("expected a Record error, got {other:?}"),
        }
        assert!(
            err.to_string()
                .starts_with(&format!("{}:4: column 0", path.display())),
            "{err}"
        );
        let err = results[2].as_ref().unwrap_err().to_string();
        assert!(err.contains("bad.csv:5:"), "{err}");
        assert!(
            err.contains("column 1 (\"label\") is required but the field is empty"),
            "{err}"
        );
        assert_eq!(
            results[3].as_ref().unwrap().get("x").unwrap().data(),
            &Buffer::F32(vec![3.0])
        );

        // ignore_errors: bad rows skipped and counted, the counter shared with the caller.
        let counter = SkipCounter::new();
        let options = CsvOptions {
            ignore_errors: true,
            skipped: counter.clone(),
            ..options
        };
        let ds = Dataset::csv_dataset([&path], defaults, options).unwrap();
        let mut it = ds.iter();
        let xs: Vec<f32> = it
            .by_ref()
            .map(|e| e.unwrap().get("x").unwrap().data().to_f32()[0])
            .collect();
        assert_eq!(xs, vec![1.5, 3.0]);
        assert_eq!(counter.count(), 2);
        // The iteration's statistics list the skipped rows: position, file, line and reason.
        let skipped = it.skip_stats().unwrap();
        assert_eq!(skipped.count, 2);
        let listed: Vec<(u64, bool)> = skipped
            .first
            .iter()
            .map(|r| (r.index, r.path.as_deref() == Some(path.as_path())))
            .collect();
        assert_eq!(listed, vec![(1, true), (2, true)]);
        let reason = &skipped.first[0].error;
        assert!(
            reason.starts_with(&format!("{}:4: column 0 (\"x\"): \"abc\"", path.display())),
            "{reason}"
        );
        assert!(
            !reason.contains("ignore_errors"),
            "no advice to set what is set: {reason}"
        );
        assert!(counter.last_error().unwrap().contains("bad.csv:5:"));
        ds.iter().for_each(drop);
        assert_eq!(counter.count(), 4, "the count accumulates over epochs");
    }

    #[test]
    fn wrong_field_counts_and_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "w.csv", b"1,2\n1,2,3\n1\n");
        let missing = dir.path().join("missing.csv");
        let defaults = vec![RecordDefault::Int32(0), RecordDefault::Int32(0)];
        let ds = Dataset::csv_dataset([&missing, &path], defaults, CsvOptions::default()).unwrap();
        let results: Vec<_> = ds.iter().collect();
        assert_eq!(results.len(), 4);
        assert!(matches!(&results[0], Err(DataError::Io { path, .. }) if path == &missing));
        assert!(results[1].is_ok());
        let e2 = results[2].as_ref().unwrap_err().to_string();
        assert!(
            e2.contains("w.csv:2: expected 2 fields (one per record default) but the record has 3"),
            "{e2}"
        );
        let e3 = results[3].as_ref().unwrap_err().to_string();
        assert!(e3.contains("w.csv:3:") && e3.contains("has 1"), "{e3}");
        // select_cols needs columns up to the last selected one; more fields are fine.
        let options = CsvOptions {
            select_cols: Some(vec![0, 2]),
            ..CsvOptions::default()
        };
        let defaults = vec![RecordDefault::Int32(0), RecordDefault::Int32(0)];
        let results: Vec<_> = Dataset::csv_dataset([&path], defaults, options)
            .unwrap()
            .iter()
            .collect();
        assert!(
            results[0]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("at least 3 fields")
        );
        assert_eq!(
            results[1].as_ref().unwrap().get("1").unwrap().data(),
            &Buffer::I32(vec![3])
        );
    }

    #[test]
    fn invalid_arguments_are_rejected_when_built() {
        let none: [PathBuf; 0] = [];
        let d = || vec![RecordDefault::Int32(0), RecordDefault::Int32(0)];
        let check = |defaults: Vec<RecordDefault>, options: CsvOptions, needle: &str| {
            let err = Dataset::csv_dataset(none.clone(), defaults, options).unwrap_err();
            assert!(matches!(err, DataError::InvalidArgument(_)));
            assert!(err.to_string().contains(needle), "{err} lacks {needle}");
        };
        check(vec![], CsvOptions::default(), "record_defaults is empty");
        check(
            vec![RecordDefault::Required(DType::U8)],
            CsvOptions::default(),
            "uint8",
        );
        let o = |f: fn(&mut CsvOptions)| {
            let mut o = CsvOptions::default();
            f(&mut o);
            o
        };
        check(
            d(),
            o(|o| o.select_cols = Some(vec![2, 1])),
            "strictly increasing",
        );
        check(
            d(),
            o(|o| o.select_cols = Some(vec![1])),
            "select_cols has 1 columns",
        );
        check(
            d(),
            o(|o| {
                o.select_cols = Some(vec![0, 1]);
                o.exclude_cols = Some(vec![2]);
            }),
            "cannot both",
        );
        check(
            d(),
            o(|o| o.column_names = Some(vec!["a".into(), "a".into()])),
            "twice",
        );
        check(d(), o(|o| o.field_delim = b'"'), "field_delim");
        let ok = Dataset::csv_dataset(none.clone(), d(), CsvOptions::default()).unwrap();
        assert_eq!(ok.cardinality(), Cardinality::Finite(0));
        assert_eq!(ok.iter().count(), 0);
    }
}
