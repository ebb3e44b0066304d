//! TFRecord files: verify every record's framing, decode the first as `tf.train.Example`s.

use std::path::Path;

use super::{Out, abbreviate, show_bytes};
use crate::compression::Compression;
use crate::error::Result;
use crate::storage::SourceReader;
use crate::tfrecord::{Example, FeatureKind, TfRecordReader};

/// Reads every record of `source` (the file `path`) (verifying both checksums of each), describing the first `n`.
/// Returns the number of records.
pub(super) fn inspect(
    path: &Path,
    source: SourceReader,
    compression: Compression,
    n: usize,
    w: &mut Out<'_>,
) -> Result<u64> {
    let buffered = std::io::BufReader::with_capacity(256 << 10, source);
    let mut reader = TfRecordReader::new(buffered, path, compression);
    loop {
        let (index, offset) = (reader.index(), reader.offset());
        let Some(data) = reader.read_record()? else {
            break;
        };
        if (index as usize) < n {
            describe(index, offset, &data, w)?;
        }
    }
    let records = reader.index();
    w.line(format_args!(
        "{records} record{}, every length and data CRC-32C verified",
        if records == 1 { "" } else { "s" }
    ))?;
    Ok(records)
}

/// One record: its position and size, then its features when it is a `tf.train.Example`.
fn describe(index: u64, offset: u64, data: &[u8], w: &mut Out<'_>) -> Result<()> {
    let example = match Example::from_bytes(data, index) {
        Ok(e) => e,
        Err(_) => {
            return w.line(format_args!(
                "record {index} (byte {offset}, {} bytes): not a tf.train.Example: {}",
                data.len(),
                show_bytes(data)
            ));
        }
    };
    let features = example.features.map(|f| f.feature).unwrap_or_default();
    w.line(format_args!(
        "record {index} (byte {offset}, {} bytes): tf.train.Example with {} feature{}",
        data.len(),
        features.len(),
        if features.len() == 1 { "" } else { "s" }
    ))?;
    let width = features.keys().map(|k| k.len()).max().unwrap_or(0);
    for (name, feature) in &features {
        let (dtype, values) = match &feature.kind {
            Some(FeatureKind::Int64List(l)) => ("int64", abbreviate(&l.value)),
            Some(FeatureKind::FloatList(l)) => ("float32", abbreviate(&l.value)),
            Some(FeatureKind::BytesList(l)) => {
                let shown: Vec<String> = l.value.iter().map(|b| show_bytes(b)).collect();
                ("string", abbreviate(&shown))
            }
            None => ("(empty)", "[]".to_string()),
        };
        let count = feature.len();
        w.line(format_args!(
            "  {name:<width$}  {dtype:<7}  {count:>6} value{}  {values}",
            if count == 1 { " " } else { "s" }
        ))?;
    }
    Ok(())
}
