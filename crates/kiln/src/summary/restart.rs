//! TensorBoard after a resume: the restart marker, and what kiln writes so that every step
//! shows once.
//!
//! A resumed training runs again the steps after its checkpoint, so the run directory's old
//! files hold values the new process writes a second time ("orphans": written after the
//! checkpoint, by a process that was then killed, or after an older checkpoint than the newest
//! one). TensorBoard's rule for them (`_CheckForRestartAndMaybePurge` in
//! `tensorboard/backend/event_processing/plugin_event_accumulator.py`, for files with
//! `file_version` `brain.Event:2`): it reads a run directory's files in name order, and an
//! event `session_log { status: START }` at step `s` drops every value **of every tag** of
//! that directory read before it with `step >= s`. The first START of a directory is taken
//! for the session's own start and drops nothing in that accumulator (the older
//! `event_accumulator.py` drops on every START, but only from its scalar, histogram, image and
//! audio stores, never its tensors, so it cannot hide orphans of TF2 scalars, Keras' included).
//! TensorBoard's fast data server (`--load_fast`)
//! ignores START and drops, per tag, the values at or after a step that the tag writes again.
//!
//! One threshold per directory does not fit kiln's series: `train/` holds `epoch_*` values at
//! the epoch index and `batch_*` values at the global batch, and `validation/` holds `epoch_*`
//! at the epoch index and `evaluation_*_vs_iterations` at the optimizer step (Keras' layout).
//! A resume at epoch 1 after 512 batches must drop epochs `>= 1` but batches `>= 513` only;
//! a START at 1 would hide batches 1..=512, one at 513 would keep the epoch-1 orphans.
//! So [`plan`] reads what TensorBoard shows of the directory (this module applies the same
//! rule to the files), finds the series with orphans and writes, in the new file:
//!
//! 1. a START at the smallest first-orphan step among the series that have orphans (twice
//!    when the directory has had no START yet, so that neither accumulator takes it for the
//!    session's own start), and
//! 2. the values that START hides wrongly — those of other series at or after that step
//!    but before their own first orphan — copied again, unchanged, from the old files.
//!
//! The UI's accumulator then shows each step once, and so does the data server (the copies and
//! the new values write each step again). Copies are needed only when a series with a small
//! step axis has orphans while one with a large axis has values past its threshold (an
//! epoch's values written before the kill, or a resume from an older checkpoint, with
//! batch-level values on): then the batch values after the resumed epoch are copied once.
//! A plain kill inside an epoch needs no copy: the START goes at the first orphaned batch.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use kiln_data::tfrecord::TfRecordReader;
use kiln_data::{Compression, DataError};
use prost::Message;

use super::proto::{Event, SESSION_START, SessionLog, What};
use super::reader::event_files;
use super::writer::EventWriter;
use crate::error::{KilnError, Result};

/// Where an event is: the index of its file (in name order) and of its record.
type Position = (usize, u64);

/// `tensorflow.Event` with only what the restart rule needs: decoding skips the tensors.
#[derive(Clone, PartialEq, Message)]
struct EventHead {
    #[prost(int64, tag = "2")]
    step: i64,
    #[prost(message, optional, tag = "5")]
    summary: Option<SummaryTags>,
    #[prost(message, optional, tag = "7")]
    session_log: Option<SessionLog>,
}

#[derive(Clone, PartialEq, Message)]
struct SummaryTags {
    #[prost(message, repeated, tag = "1")]
    value: Vec<TagOnly>,
}

#[derive(Clone, PartialEq, Message)]
struct TagOnly {
    #[prost(string, tag = "1")]
    tag: String,
}

/// What TensorBoard shows of one run directory: every tag's values (step and position), after
/// the START events of its files.
#[derive(Debug, Default)]
struct RunView {
    files: Vec<PathBuf>,
    /// Records read of each file (a file being appended to is read up to here only).
    records: Vec<u64>,
    /// Whether a START was read (the next one is not the session's first).
    seen_start: bool,
    series: BTreeMap<String, Vec<(i64, Position)>>,
}

impl RunView {
    /// Applies one event, as TensorBoard's plugin event accumulator does.
    fn apply(&mut self, head: EventHead, at: Position) {
        if head.session_log.is_some_and(|l| l.status == SESSION_START) {
            if self.seen_start {
                for values in self.series.values_mut() {
                    values.retain(|(step, _)| *step < head.step);
                }
            }
            self.seen_start = true;
        }
        for value in head.summary.into_iter().flat_map(|s| s.value) {
            self.series
                .entry(value.tag)
                .or_default()
                .push((head.step, at));
        }
    }
}

/// Reads the records of `path` as TensorBoard does: up to the end, a torn or damaged record
/// (the rest of the file is invisible to TensorBoard too) or `limit` records; `each` gets
/// each record's index and bytes.
fn read_records(
    path: &Path,
    limit: u64,
    mut each: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<u64> {
    let mut reader = match TfRecordReader::open(path, Compression::None) {
        Ok(r) => r,
        // Removed since the listing: nothing TensorBoard shows either.
        Err(DataError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(0);
        }
        Err(e) => return Err(e.into()),
    };
    while reader.index() < limit {
        let index = reader.index();
        match reader.read_record() {
            Ok(Some(record)) => each(index, &record)?,
            Ok(None) | Err(DataError::TfRecord { .. }) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(reader.index())
}

/// What TensorBoard shows of `dir` (nothing when it does not exist).
fn scan(dir: &Path) -> Result<RunView> {
    let files = match event_files(dir) {
        Ok(f) => f,
        Err(KilnError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(RunView::default());
        }
        Err(e) => return Err(e),
    };
    let mut view = RunView::default();
    for (i, file) in files.iter().enumerate() {
        // A record that is not an Event ends the file (TensorBoard stops there too).
        let mut readable = true;
        let read = read_records(file, u64::MAX, |index, record| {
            if readable {
                match EventHead::decode(record) {
                    Ok(head) => view.apply(head, (i, index)),
                    Err(_) => readable = false,
                }
            }
            Ok(())
        })?;
        view.records.push(read);
    }
    view.files = files;
    Ok(view)
}

/// Calls `each` with the events at the `wanted` positions of `view`'s files, in reading
/// order, each with only the values of the tags listed for it.
fn events_at(
    view: &RunView,
    wanted: &HashMap<Position, Vec<String>>,
    mut each: impl FnMut(Event) -> Result<()>,
) -> Result<()> {
    let files: HashSet<usize> = wanted.keys().map(|(file, _)| *file).collect();
    for (i, file) in view.files.iter().enumerate() {
        if !files.contains(&i) {
            continue;
        }
        read_records(file, view.records[i], |index, record| {
            let Some(tags) = wanted.get(&(i, index)) else {
                return Ok(());
            };
            let Ok(mut event) = Event::decode(record) else {
                return Ok(());
            };
            if let Some(What::Summary(s)) = &mut event.what {
                s.value.retain(|v| tags.contains(&v.tag));
            }
            each(event)
        })?;
    }
    Ok(())
}

/// The restart marker for one run directory, from [`plan`]: where the START goes and which
/// old values are written again after it.
#[derive(Debug)]
pub struct Restart {
    step: i64,
    twice: bool,
    view: RunView,
    copies: HashMap<Position, Vec<String>>,
}

impl Restart {
    /// The START's step: TensorBoard drops the values read before it at this step or later.
    pub fn step(&self) -> i64 {
        self.step
    }

    /// How many old values are written again after the START.
    pub fn copies(&self) -> usize {
        self.copies.values().map(Vec::len).sum()
    }
}

/// The restart marker that makes TensorBoard show the values of `dir` before each series'
/// first orphaned step once, and nothing at or after it: `first_orphan(tag)` is the first
/// step of `tag` that the resumed training writes again (or that no longer counts). `None`
/// when TensorBoard shows no such value (a fresh directory, a resume that follows the last
/// values), so nothing needs writing.
///
/// # Errors
/// [`KilnError::Io`] / [`KilnError::Data`] when the directory or a file cannot be read.
pub fn plan(dir: &Path, first_orphan: &dyn Fn(&str) -> i64) -> Result<Option<Restart>> {
    let view = scan(dir)?;
    let step = view
        .series
        .iter()
        .filter_map(|(tag, values)| {
            let first = first_orphan(tag);
            values.iter().any(|(s, _)| *s >= first).then_some(first)
        })
        .min();
    let Some(step) = step else {
        return Ok(None);
    };
    let mut copies: HashMap<Position, Vec<String>> = HashMap::new();
    for (tag, values) in &view.series {
        let first = first_orphan(tag);
        for (_, at) in values.iter().filter(|(s, _)| (step..first).contains(s)) {
            copies.entry(*at).or_default().push(tag.clone());
        }
    }
    Ok(Some(Restart {
        step,
        twice: !view.seen_start,
        view,
        copies,
    }))
}

impl EventWriter {
    /// Writes `restart` (the START, then the old values it would hide wrongly) and flushes.
    ///
    /// # Errors
    /// [`KilnError::Io`] / [`KilnError::Data`] when writing or reading the old files fails.
    pub fn write_restart(&mut self, restart: &Restart) -> Result<()> {
        if restart.twice {
            self.add_session_start(restart.step)?;
        }
        self.add_session_start(restart.step)?;
        events_at(&restart.view, &restart.copies, |event| {
            self.write_event(&event)
        })?;
        self.flush()
    }
}

/// `(step, value)` of the scalar `tag` as TensorBoard shows it from the files of `dir`: in
/// reading order, without the values its restart rule drops (compare
/// [`crate::summary::read_scalars`], every value written).
///
/// # Errors
/// As [`crate::summary::read_events`].
pub fn visible_scalars(dir: &Path, tag: &str) -> Result<Vec<(i64, f32)>> {
    let view = scan(dir)?;
    let wanted: HashMap<Position, Vec<String>> = view
        .series
        .get(tag)
        .into_iter()
        .flatten()
        .map(|(_, at)| (*at, vec![tag.to_string()]))
        .collect();
    let mut out = Vec::new();
    events_at(&view, &wanted, |event| {
        out.extend(
            event
                .values()
                .iter()
                .filter_map(|v| v.as_scalar())
                .map(|v| (event.step, v)),
        );
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::{read_events, read_scalars};

    /// Epoch values at the epoch index, batch values at the global batch, as the
    /// `TensorBoard` callback writes them.
    fn first_orphan(epoch: i64, batch: i64) -> impl Fn(&str) -> i64 {
        move |tag: &str| {
            if tag.starts_with("batch_") {
                batch
            } else {
                epoch
            }
        }
    }

    /// One training process: `epochs` complete epochs of 4 batches each (from `batch` on),
    /// then `extra` batches of the next epoch.
    fn session(dir: &Path, epochs: std::ops::Range<i64>, batch: i64, extra: i64) -> i64 {
        let mut w = EventWriter::create(dir).unwrap();
        let mut b = batch;
        for e in epochs.clone() {
            for _ in 0..4 {
                b += 1;
                w.add_scalar("batch_loss", b as f64, b).unwrap();
            }
            w.add_scalar("epoch_loss", 10.0 * e as f64, e).unwrap();
        }
        for _ in 0..extra {
            b += 1;
            w.add_scalar("batch_loss", b as f64, b).unwrap();
        }
        w.close().unwrap();
        b
    }

    fn steps(dir: &Path, tag: &str) -> Vec<i64> {
        visible_scalars(dir, tag)
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect()
    }

    #[test]
    fn the_start_event_encodes_as_tensorflow_writes_it() {
        let event = Event {
            wall_time: 1.5,
            step: 7,
            what: Some(What::SessionLog(SessionLog {
                status: SESSION_START,
            })),
            source_metadata: None,
        };
        // tensorboard.compat.proto.event_pb2.Event(wall_time=1.5, step=7,
        //   session_log=SessionLog(status=SessionLog.START)).SerializeToString()
        let tensorflow = [
            0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, // wall_time, field 1, double
            0x10, 0x07, // step, field 2, varint
            0x3a, 0x02, 0x08, 0x01, // session_log, field 7: { status (1) = START (1) }
        ];
        assert_eq!(event.to_bytes(), tensorflow);
        let back = Event::decode(&tensorflow[..]).unwrap();
        assert!(back.is_session_start());
        assert_eq!(back.step, 7);
        let head = EventHead::decode(&tensorflow[..]).unwrap();
        assert_eq!(head.session_log.unwrap().status, SESSION_START);
    }

    #[test]
    fn a_kill_inside_an_epoch_needs_a_start_at_the_first_orphaned_batch_only() {
        let dir = tempfile::tempdir().unwrap();
        // Epoch 0 (batches 1..=4), then 3 batches of epoch 1; the checkpoint is at batch 5.
        session(dir.path(), 0..1, 0, 3);
        assert!(plan(dir.path(), &first_orphan(1, 8)).unwrap().is_none());
        let restart = plan(dir.path(), &first_orphan(1, 6)).unwrap().unwrap();
        assert_eq!((restart.step(), restart.copies()), (6, 0));
        let mut w = EventWriter::create(dir.path()).unwrap();
        w.write_restart(&restart).unwrap();
        let starts: Vec<i64> = read_events(w.path())
            .unwrap()
            .iter()
            .filter(|e| e.is_session_start())
            .map(|e| e.step)
            .collect();
        // The directory's first START: written twice, so that the accumulator that takes the
        // first one for the session's own start still drops.
        assert_eq!(starts, [6, 6]);
        assert_eq!(steps(dir.path(), "batch_loss"), [1, 2, 3, 4, 5]);
        assert_eq!(steps(dir.path(), "epoch_loss"), [0]);
        drop(w);
        // The resumed process writes on; each step once.
        session(dir.path(), 1..3, 5, 0);
        assert_eq!(
            steps(dir.path(), "batch_loss"),
            (1..=13).collect::<Vec<_>>()
        );
        assert_eq!(steps(dir.path(), "epoch_loss"), [0, 1, 2]);
        // Written: 7 + 8 values, batches 6 and 7 twice.
        assert_eq!(read_scalars(dir.path(), "batch_loss").unwrap().len(), 15);
    }

    #[test]
    fn a_resume_from_an_older_checkpoint_copies_the_batches_its_start_hides() {
        let dir = tempfile::tempdir().unwrap();
        // Epochs 0 and 1 (batches 1..=8); the resume starts at epoch 1 after batch 4.
        session(dir.path(), 0..2, 0, 0);
        let restart = plan(dir.path(), &first_orphan(1, 5)).unwrap().unwrap();
        // epoch_loss at 1 is an orphan: the START goes at 1, and batches 1..=4 are copied.
        assert_eq!((restart.step(), restart.copies()), (1, 4));
        EventWriter::create(dir.path())
            .unwrap()
            .write_restart(&restart)
            .unwrap();
        assert_eq!(steps(dir.path(), "batch_loss"), [1, 2, 3, 4]);
        assert_eq!(steps(dir.path(), "epoch_loss"), [0]);
        // The copies keep their values.
        assert_eq!(
            visible_scalars(dir.path(), "batch_loss").unwrap()[3],
            (4, 4.0)
        );
        session(dir.path(), 1..3, 4, 0);
        assert_eq!(
            steps(dir.path(), "batch_loss"),
            (1..=12).collect::<Vec<_>>()
        );
        assert_eq!(steps(dir.path(), "epoch_loss"), [0, 1, 2]);
        // A second restart in the directory: one START suffices now.
        let restart = plan(dir.path(), &first_orphan(2, 9)).unwrap().unwrap();
        assert_eq!((restart.step(), restart.copies()), (2, 7));
        let mut w = EventWriter::create(dir.path()).unwrap();
        w.write_restart(&restart).unwrap();
        let starts = read_events(w.path())
            .unwrap()
            .iter()
            .filter(|e| e.is_session_start())
            .count();
        assert_eq!(starts, 1);
        assert_eq!(steps(dir.path(), "batch_loss"), (1..=8).collect::<Vec<_>>());
        assert_eq!(steps(dir.path(), "epoch_loss"), [0, 1]);
    }

    #[test]
    fn a_torn_last_record_and_a_missing_directory_are_read_as_tensorboard_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            plan(&dir.path().join("none"), &first_orphan(0, 1))
                .unwrap()
                .is_none()
        );
        session(dir.path(), 0..1, 0, 2);
        let file = crate::summary::event_files(dir.path()).unwrap()[0].clone();
        let mut bytes = std::fs::read(&file).unwrap();
        let whole = kiln_data::tfrecord::encode_record(b"a record cut short by a kill");
        bytes.extend_from_slice(&whole[..whole.len() - 5]);
        std::fs::write(&file, bytes).unwrap();
        assert_eq!(steps(dir.path(), "batch_loss"), [1, 2, 3, 4, 5, 6]);
        let restart = plan(dir.path(), &first_orphan(1, 5)).unwrap().unwrap();
        assert_eq!((restart.step(), restart.copies()), (5, 0));
    }
}
