//! Reading event files back: for tests, tools and checks of a run directory. TensorBoard
//! itself needs none of this.

use std::path::{Path, PathBuf};

use kiln_data::tfrecord::TfRecordReader;
use kiln_data::{Compression, DataError};
use prost::Message;

use super::proto::Event;
use crate::error::{KilnError, Result};

/// Every event of the file at `path`, in file order.
///
/// # Errors
/// [`KilnError::Data`] for damaged framing (with the record's byte offset and index, from
/// `kiln_data`'s TFRecord reader) or a record that is not an `Event` protobuf.
pub fn read_events(path: &Path) -> Result<Vec<Event>> {
    let mut reader = TfRecordReader::open(path, Compression::None)?;
    let mut events = Vec::new();
    loop {
        let (index, offset) = (reader.index(), reader.offset());
        let Some(record) = reader.read_record()? else {
            break;
        };
        let event = Event::decode(record.as_slice()).map_err(|e| DataError::Decode {
            path: path.to_path_buf(),
            message: format!(
                "record {index} at byte {offset} is not a tensorflow.Event protobuf ({e}); \
                 is this a TensorBoard event file?"
            ),
        })?;
        events.push(event);
    }
    Ok(events)
}

/// The event files of the run directory `dir` (names containing `tfevents`, as TensorBoard's
/// `io_wrapper.IsSummaryEventsFile`), in name order — the order TensorBoard reads them.
///
/// # Errors
/// [`KilnError::Io`] when the directory cannot be listed.
pub fn event_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| KilnError::io(dir, e))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| KilnError::io(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.contains("tfevents") && !name.ends_with(".profile-empty") {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// `(step, value)` of every scalar named `tag` in the events of all event files of `dir`,
/// in reading order — values that TensorBoard drops after a restart marker included (see
/// [`crate::summary::visible_scalars`] for what TensorBoard shows).
///
/// # Errors
/// As [`event_files`] and [`read_events`].
pub fn read_scalars(dir: &Path, tag: &str) -> Result<Vec<(i64, f32)>> {
    let mut out = Vec::new();
    for file in event_files(dir)? {
        for event in read_events(&file)? {
            for value in event.values() {
                if value.tag == tag
                    && let Some(v) = value.as_scalar()
                {
                    out.push((event.step, v));
                }
            }
        }
    }
    Ok(out)
}
