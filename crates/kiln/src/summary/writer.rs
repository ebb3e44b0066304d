//! [`EventWriter`]: one TensorBoard event file, as TensorFlow 2's
//! `tf.summary.create_file_writer` writes it.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiln_data::tfrecord::write_record;

use super::histogram::{DEFAULT_BUCKET_COUNT, buckets};
use super::proto::{
    DT_DOUBLE, DT_FLOAT, Dim, Event, PluginData, SESSION_START, SessionLog, SourceMetadata,
    Summary, SummaryMetadata, TensorProto, TensorShapeProto, Value, ValueKind, What,
};
use crate::error::{KilnError, Result};

/// The version string of the first event of every file (`tensorflow/core/util/events_writer.cc`).
pub const FILE_VERSION: &str = "brain.Event:2";
/// The plugin that shows scalars (`tensorboard/plugins/scalar/metadata.py`).
pub const SCALARS_PLUGIN: &str = "scalars";
/// The plugin that shows histograms (`tensorboard/plugins/histogram/metadata.py`).
pub const HISTOGRAMS_PLUGIN: &str = "histograms";
/// TensorFlow 2's `max_queue` default: events written before a flush.
pub const DEFAULT_MAX_QUEUE: usize = 10;
/// The longest an event waits in the writer's buffer before it reaches the file, written or
/// idle: 5 seconds, TensorBoard's default `--reload_interval`, so a value shows up by about
/// TensorBoard's next reload. (TensorFlow 2's `flush_millis` default is 120 s, and it flushes
/// only when the next event is written, so an idle writer keeps its last events to itself.)
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(5);

/// Writers created by this process, for unique file names (TensorFlow's `ops.uid()`).
static WRITERS: AtomicU64 = AtomicU64::new(0);

/// Seconds since the Unix epoch.
pub(crate) fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// This machine's name for event file names (`/proc/sys/kernel/hostname`, `/etc/hostname`,
/// `$HOSTNAME`, else `localhost`), with path separators and spaces replaced.
pub fn hostname() -> String {
    let from_file = |p: &str| std::fs::read_to_string(p).ok();
    let name = from_file("/proc/sys/kernel/hostname")
        .or_else(|| from_file("/etc/hostname"))
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string());
    name.chars()
        .map(|c| {
            if c == '/' || c == '\\' || c.is_whitespace() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// The file name TensorFlow 2 gives an event file:
/// `events.out.tfevents.<10-digit unix seconds>.<hostname>.<pid>.<n>.v2`
/// (`tensorflow/core/util/events_writer.cc` with the suffix of
/// `tensorflow/python/ops/summary_ops_v2.py`'s `create_file_writer`). TensorBoard only needs
/// the name to contain `tfevents`; files of one directory are read in name order.
pub fn event_file_name(secs: u64, host: &str, pid: u32, n: u64) -> String {
    format!("events.out.tfevents.{secs:010}.{host}.{pid}.{n}.v2")
}

/// The seconds field of an event file name (`events.out.tfevents.<secs>.…`), if it has one.
fn name_secs(name: &str) -> Option<u64> {
    name.strip_prefix("events.out.tfevents.")?
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// The seconds for a new file name in `dir`: now, or one more than the newest event file's
/// when that one is from this second or later, so that the new file sorts after every file
/// already there. TensorBoard reads a directory's files in name order, and its restart rule
/// ([`crate::summary::restart`]) needs the new file read after the old ones; a process that
/// resumes within the second of a killed one (or a second writer of this process, whose
/// number may sort lower: `.10.` < `.9.`) would otherwise sort before them.
fn sorting_secs(dir: &Path, now: u64) -> Result<u64> {
    let newest = super::reader::event_files(dir)?
        .iter()
        .filter_map(|p| name_secs(&p.file_name()?.to_string_lossy()))
        .max();
    Ok(match newest {
        Some(s) if s >= now => s + 1,
        _ => now,
    })
}

/// The writer's file and queue, shared with its background flush thread.
#[derive(Debug)]
struct Inner {
    out: BufWriter<File>,
    queued: usize,
    max_queue: usize,
    flush_interval: Duration,
    /// When the oldest event not yet flushed was written.
    pending_since: Option<Instant>,
    /// A failure of the background flush, reported by the next call of the writer.
    failed: Option<std::io::Error>,
}

impl Inner {
    fn due(&self) -> bool {
        self.pending_since
            .is_some_and(|t| t.elapsed() >= self.flush_interval)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.out.flush()?;
        self.queued = 0;
        self.pending_since = None;
        Ok(())
    }

    /// How long the flush thread sleeps: until the oldest queued event is due, or one
    /// interval when nothing is queued.
    fn wait(&self) -> Duration {
        let left = match self.pending_since {
            Some(t) => self.flush_interval.saturating_sub(t.elapsed()),
            None => self.flush_interval,
        };
        left.max(Duration::from_millis(1))
    }
}

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // A panic while holding the lock leaves a usable buffer (at worst a torn last record,
    // which readers skip).
    inner.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The background flush: every event reaches the file at most `flush_interval` after it was
/// written, also when no other event follows. Ends when the writer drops its sender.
fn spawn_flusher(inner: Arc<Mutex<Inner>>) -> std::io::Result<(Sender<()>, JoinHandle<()>)> {
    let (stop, stopped) = mpsc::channel::<()>();
    let handle = std::thread::Builder::new()
        .name("kiln-tensorboard-flush".to_string())
        .spawn(move || {
            loop {
                let wait = lock(&inner).wait();
                match stopped.recv_timeout(wait) {
                    Err(RecvTimeoutError::Timeout) => {
                        let mut inner = lock(&inner);
                        if inner.due()
                            && let Err(e) = inner.flush()
                        {
                            inner.failed = Some(e);
                        }
                    }
                    _ => return,
                }
            }
        })?;
    Ok((stop, handle))
}

/// Writes one TensorBoard event file: TFRecord framing (`kiln_data::tfrecord::write_record`)
/// around serialized [`Event`]s, the first one carrying [`FILE_VERSION`].
///
/// Events reach the file (the OS) every [`DEFAULT_MAX_QUEUE`] events, at the latest
/// [`DEFAULT_FLUSH_INTERVAL`] after they were written (a background thread flushes a writer
/// that has gone idle), on [`EventWriter::flush`] / [`EventWriter::sync`], and when the writer
/// is closed or dropped. A process killed between flushes loses the unflushed events only;
/// TensorBoard skips a torn last record.
///
/// Every writer makes a new file, named to sort after the files already in the directory, so
/// a resumed run adds a file beside the old ones and TensorBoard shows both as one run; pass
/// steps that continue the old ones, and see [`crate::summary::restart`] for steps that a
/// resume writes again.
#[derive(Debug)]
pub struct EventWriter {
    path: PathBuf,
    inner: Arc<Mutex<Inner>>,
    flusher: Option<(Sender<()>, JoinHandle<()>)>,
}

impl EventWriter {
    /// Creates `dir` (and parents) and a new event file in it, named by
    /// [`event_file_name`] (sorting after the event files already there), and writes the
    /// `file_version` event.
    ///
    /// # Errors
    /// [`KilnError::Io`] naming the directory or file when it cannot be created or written.
    pub fn create(dir: &Path) -> Result<EventWriter> {
        std::fs::create_dir_all(dir).map_err(|e| KilnError::io(dir, e))?;
        let secs = sorting_secs(dir, now() as u64)?;
        let host = hostname();
        let pid = std::process::id();
        let (path, file) = loop {
            let n = WRITERS.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(event_file_name(secs, &host, pid, n));
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => break (path, file),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(KilnError::io(path, e)),
            }
        };
        let inner = Arc::new(Mutex::new(Inner {
            out: BufWriter::new(file),
            queued: 0,
            max_queue: DEFAULT_MAX_QUEUE,
            flush_interval: DEFAULT_FLUSH_INTERVAL,
            pending_since: None,
            failed: None,
        }));
        let flusher = spawn_flusher(Arc::clone(&inner)).map_err(|e| KilnError::io(&path, e))?;
        let mut writer = EventWriter {
            path,
            inner,
            flusher: Some(flusher),
        };
        writer.write_event(&Event {
            // TensorFlow writes whole seconds here, the file name's time.
            wall_time: secs as f64,
            step: 0,
            what: Some(What::FileVersion(FILE_VERSION.to_string())),
            source_metadata: Some(SourceMetadata {
                writer: "kiln".to_string(),
            }),
        })?;
        writer.flush()?;
        Ok(writer)
    }

    /// The event file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sets how many events wait before a flush (TensorFlow's `max_queue`; at least 1).
    pub fn set_max_queue(&mut self, max_queue: usize) {
        lock(&self.inner).max_queue = max_queue.max(1);
    }

    /// Sets the longest time an event waits before it reaches the file (TensorFlow's
    /// `flush_millis`; [`DEFAULT_FLUSH_INTERVAL`] by default, at least 1 ms).
    pub fn set_flush_interval(&mut self, interval: Duration) {
        lock(&self.inner).flush_interval = interval.max(Duration::from_millis(1));
    }

    /// Writes `value` as the scalar `tag` at `step`, as TensorFlow 2's `tf.summary.scalar`
    /// does: a rank-0 `DT_FLOAT` tensor (the value rounded to float32, 4 little-endian bytes in
    /// `tensor_content`) with `plugin_name = "scalars"`.
    ///
    /// # Errors
    /// [`KilnError::Io`] when writing fails.
    pub fn add_scalar(&mut self, tag: &str, value: f64, step: i64) -> Result<()> {
        let tensor = TensorProto {
            dtype: DT_FLOAT,
            tensor_shape: Some(TensorShapeProto { dim: Vec::new() }),
            tensor_content: (value as f32).to_le_bytes().to_vec(),
            float_val: Vec::new(),
            double_val: Vec::new(),
        };
        self.add_tensor(tag, SCALARS_PLUGIN, tensor, step)
    }

    /// Writes a histogram of `values` as `tag` at `step`, as TensorFlow 2's
    /// `tf.summary.histogram` does: a `[30, 3]` `DT_DOUBLE` tensor of `(left, right, count)`
    /// rows ([`buckets`]) with `plugin_name = "histograms"`.
    ///
    /// # Errors
    /// [`KilnError::Io`] when writing fails.
    pub fn add_histogram(&mut self, tag: &str, values: &[f32], step: i64) -> Result<()> {
        let rows = buckets(values, DEFAULT_BUCKET_COUNT);
        let tensor = TensorProto {
            dtype: DT_DOUBLE,
            tensor_shape: Some(TensorShapeProto {
                dim: vec![
                    Dim {
                        size: rows.len() as i64,
                    },
                    Dim { size: 3 },
                ],
            }),
            tensor_content: rows
                .iter()
                .flatten()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
            float_val: Vec::new(),
            double_val: Vec::new(),
        };
        self.add_tensor(tag, HISTOGRAMS_PLUGIN, tensor, step)
    }

    /// Writes a TF2 tensor summary for `plugin` (metadata on every value, as TensorFlow does).
    ///
    /// # Errors
    /// [`KilnError::Io`] when writing fails.
    pub fn add_tensor(
        &mut self,
        tag: &str,
        plugin: &str,
        tensor: TensorProto,
        step: i64,
    ) -> Result<()> {
        let value = Value {
            tag: tag.to_string(),
            metadata: Some(SummaryMetadata {
                plugin_data: Some(PluginData {
                    plugin_name: plugin.to_string(),
                    content: Vec::new(),
                }),
                display_name: String::new(),
                summary_description: String::new(),
                data_class: 0,
            }),
            value: Some(ValueKind::Tensor(tensor)),
        };
        self.write_event(&Event {
            wall_time: now(),
            step,
            what: Some(What::Summary(Summary { value: vec![value] })),
            source_metadata: None,
        })
    }

    /// Writes a `session_log` event with status `START` at `step`: TensorBoard then drops the
    /// values of this run directory at `step` or later that it read before it (see
    /// [`crate::summary::restart`] for when and where kiln writes one).
    ///
    /// # Errors
    /// [`KilnError::Io`] when writing fails.
    pub fn add_session_start(&mut self, step: i64) -> Result<()> {
        self.write_event(&Event {
            wall_time: now(),
            step,
            what: Some(What::SessionLog(SessionLog {
                status: SESSION_START,
            })),
            source_metadata: None,
        })
    }

    /// Appends `event` as one record; flushes when the queue or time limit is reached.
    ///
    /// # Errors
    /// [`KilnError::Io`] when writing fails, or when the background flush failed since the
    /// last call.
    pub fn write_event(&mut self, event: &Event) -> Result<()> {
        let mut inner = lock(&self.inner);
        if let Some(e) = inner.failed.take() {
            return Err(KilnError::io(&self.path, e));
        }
        let written = write_record(&mut inner.out, &event.to_bytes()).and_then(|()| {
            inner.queued += 1;
            inner.pending_since.get_or_insert_with(Instant::now);
            if inner.queued >= inner.max_queue || inner.due() {
                inner.flush()?;
            }
            Ok(())
        });
        written.map_err(|e| KilnError::io(&self.path, e))
    }

    /// Hands every written event to the OS, so TensorBoard (and a reader after a crash of
    /// this process) sees it.
    ///
    /// # Errors
    /// [`KilnError::Io`] when writing fails.
    pub fn flush(&mut self) -> Result<()> {
        lock(&self.inner)
            .flush()
            .map_err(|e| KilnError::io(&self.path, e))
    }

    /// [`EventWriter::flush`], then waits until the file's data is on the storage device
    /// (`fsync`), so that the events survive a power loss too — what `fit` does before it
    /// commits a checkpoint.
    ///
    /// # Errors
    /// [`KilnError::Io`] when writing or syncing fails.
    pub fn sync(&mut self) -> Result<()> {
        let mut inner = lock(&self.inner);
        let synced = inner.flush().and_then(|()| inner.out.get_ref().sync_data());
        synced.map_err(|e| KilnError::io(&self.path, e))
    }

    /// Flushes and closes the file, reporting a failure that dropping would only ignore.
    ///
    /// # Errors
    /// [`KilnError::Io`] when writing fails.
    pub fn close(mut self) -> Result<()> {
        self.stop_flusher();
        self.flush()
    }

    fn stop_flusher(&mut self) {
        if let Some((stop, handle)) = self.flusher.take() {
            drop(stop);
            let _ = handle.join();
        }
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        self.stop_flusher();
        // Errors cannot be reported from drop; `close` reports them.
        let _ = lock(&self.inner).flush();
    }
}
