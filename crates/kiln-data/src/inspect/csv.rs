//! CSV files: header, inferred column types, first rows, row count.

use std::cell::Cell;
use std::io::{self, Read};
use std::path::Path;
use std::rc::Rc;

use super::{Out, io_error};
use crate::compression::Compression;
use crate::element::DType;
use crate::error::{DataError, Result};
use crate::sources::infer_type;
use crate::storage::SourceReader;

/// Rows used to infer column types: `make_csv_dataset`'s default `num_rows_for_inference`.
const INFERENCE_ROWS: usize = 100;

fn record_error(path: &Path, err: csv::Error) -> DataError {
    let line = err.position().map_or(0, |p| p.line());
    match err.into_kind() {
        csv::ErrorKind::Io(source) => io_error(path, source),
        other => DataError::Record {
            path: path.to_path_buf(),
            line,
            message: format!("{other:?}"),
        },
    }
}

/// The longest CSV record `inspect` reads: a file without line breaks would otherwise be held
/// in memory whole.
pub(super) const MAX_RECORD: u64 = 64 << 20;

/// The decompressed text, refusing to run more than [`MAX_RECORD`] bytes past the start of
/// the record being read (which the caller sets before each record).
struct RecordBound {
    inner: SourceReader,
    read: u64,
    record_start: Rc<Cell<u64>>,
}

impl Read for RecordBound {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let start = self.record_start.get();
        if self.read - start > MAX_RECORD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the record starting at byte {start} is longer than {MAX_RECORD} bytes (a \
                     file without line breaks, or an unclosed quote?); kiln does not inspect \
                     such files"
                ),
            ));
        }
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// The CSV records of `source` (the file `path`), decompressed with `compression` (checked
/// against the file's first bytes, [`Compression::text_decoder`]).
fn reader(
    path: &Path,
    source: SourceReader,
    compression: Compression,
    record_start: Rc<Cell<u64>>,
) -> Result<csv::Reader<RecordBound>> {
    let inner = compression.text_decoder(path, source)?;
    Ok(csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(RecordBound {
            inner,
            read: 0,
            record_start,
        }))
}

/// Reads the next record into `record`; false at the end of the file.
fn next_record(
    path: &Path,
    rdr: &mut csv::Reader<RecordBound>,
    record: &mut csv::ByteRecord,
    record_start: &Cell<u64>,
) -> Result<bool> {
    record_start.set(rdr.position().byte());
    rdr.read_byte_record(record)
        .map_err(|e| record_error(path, e))
}

/// True when `field` parses as a number.
fn numeric(field: &[u8]) -> bool {
    !field.is_empty()
        && matches!(
            infer_type(field, None),
            DType::I32 | DType::I64 | DType::F32 | DType::F64
        )
}

/// Describes the CSV file `path`: whether the first row is a header (it is when none of its
/// fields is a number but a later row has a number in some column), each column's inferred
/// type (from the first 100 rows, as `make_csv_dataset`), the first `n` rows, the row count.
pub(super) fn inspect(
    path: &Path,
    source: SourceReader,
    compression: Compression,
    n: usize,
    w: &mut Out<'_>,
) -> Result<u64> {
    // The first rows give the header decision and the types; then the same reader counts the
    // rest (a pipe cannot be read twice).
    let record_start = Rc::new(Cell::new(0));
    let mut rdr = reader(path, source, compression, Rc::clone(&record_start))?;
    let mut rows: Vec<(u64, csv::ByteRecord)> = Vec::new();
    let mut record = csv::ByteRecord::new();
    while rows.len() <= INFERENCE_ROWS && next_record(path, &mut rdr, &mut record, &record_start)? {
        let line = record.position().map_or(0, |p| p.line());
        rows.push((line, record.clone()));
    }
    let header = match rows.first() {
        Some((_, first)) => {
            !first.iter().any(numeric) && rows[1..].iter().any(|(_, r)| r.iter().any(numeric))
        }
        None => false,
    };
    let body = if header { &rows[1..] } else { &rows[..] };
    let columns = rows.iter().map(|(_, r)| r.len()).max().unwrap_or(0);
    let names: Vec<String> = (0..columns)
        .map(|c| match (header, rows.first()) {
            (true, Some((_, h))) => {
                String::from_utf8_lossy(h.get(c).unwrap_or_default()).into_owned()
            }
            _ => c.to_string(),
        })
        .collect();
    let mut types: Vec<Option<DType>> = vec![None; columns];
    for (_, r) in body {
        for (c, t) in types.iter_mut().enumerate() {
            let field = r.get(c).unwrap_or_default();
            if !field.is_empty() {
                *t = Some(infer_type(field, *t));
            }
        }
    }
    w.line(format_args!(
        "{} column{} ({}; types inferred from the first {} rows):",
        columns,
        if columns == 1 { "" } else { "s" },
        if header {
            "header row found"
        } else {
            "no header row: columns are numbered"
        },
        body.len()
    ))?;
    let width = names.iter().map(|s| s.len()).max().unwrap_or(0);
    for (c, (name, t)) in names.iter().zip(&types).enumerate() {
        let t = t.map_or("(empty)", |t| t.name());
        w.line(format_args!("  {c:>3}  {name:<width$}  {t}"))?;
    }
    for (i, (line, r)) in body.iter().take(n).enumerate() {
        let fields: Vec<String> = r
            .iter()
            .map(|f| {
                let s = String::from_utf8_lossy(f);
                if s.chars().count() > 24 {
                    format!("{}…", s.chars().take(24).collect::<String>())
                } else {
                    s.into_owned()
                }
            })
            .collect();
        w.line(format_args!("row {i} (line {line}): {}", fields.join(", ")))?;
    }
    // Count every row (and surface parse errors anywhere in the file).
    let mut count = rows.len() as u64;
    while next_record(path, &mut rdr, &mut record, &record_start)? {
        count += 1;
    }
    let rows = count.saturating_sub(u64::from(header));
    w.line(format_args!(
        "{rows} row{}",
        if rows == 1 { "" } else { "s" }
    ))?;
    Ok(rows)
}
