//! CSV files: header, inferred column types, first rows, row count.

use std::path::Path;

use super::{Out, io_error};
use crate::compression::Compression;
use crate::element::DType;
use crate::error::{DataError, Result};
use crate::sources::infer_type;

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

/// The CSV records of `path`, decompressed with `compression` (checked against the file's
/// first bytes, [`Compression::text_decoder`]).
fn reader(
    path: &Path,
    compression: Compression,
) -> Result<csv::Reader<crate::storage::SourceReader>> {
    let file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    let file = compression.text_decoder(path, Box::new(file))?;
    Ok(csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(file))
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
    compression: Compression,
    n: usize,
    w: &mut Out<'_>,
) -> Result<u64> {
    // First pass: the header decision and types, from the first rows.
    let mut rdr = reader(path, compression)?;
    let mut rows: Vec<(u64, csv::ByteRecord)> = Vec::new();
    for r in rdr.byte_records().take(INFERENCE_ROWS + 1) {
        let r = r.map_err(|e| record_error(path, e))?;
        let line = r.position().map_or(0, |p| p.line());
        rows.push((line, r));
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
    // Second pass: count every row (and surface parse errors anywhere in the file).
    let mut count = 0u64;
    let mut record = csv::ByteRecord::new();
    let mut rdr = reader(path, compression)?;
    while rdr
        .read_byte_record(&mut record)
        .map_err(|e| record_error(path, e))?
    {
        count += 1;
    }
    let rows = count.saturating_sub(u64::from(header));
    w.line(format_args!(
        "{rows} row{}",
        if rows == 1 { "" } else { "s" }
    ))?;
    Ok(rows)
}
