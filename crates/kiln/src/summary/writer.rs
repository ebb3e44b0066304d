//! [`EventWriter`]: one TensorBoard event file, as TensorFlow 2's
//! `tf.summary.create_file_writer` writes it.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiln_data::tfrecord::write_record;

use super::histogram::{DEFAULT_BUCKET_COUNT, buckets};
use super::proto::{
    DT_DOUBLE, DT_FLOAT, Dim, Event, PluginData, SourceMetadata, Summary, SummaryMetadata,
    TensorProto, TensorShapeProto, Value, ValueKind, What,
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
/// TensorFlow 2's `flush_millis` default: the longest time events wait for a flush.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_millis(120_000);

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

/// Writes one TensorBoard event file: TFRecord framing (`kiln_data::tfrecord::write_record`)
/// around serialized [`Event`]s, the first one carrying [`FILE_VERSION`].
///
/// Events reach the file (the OS) every [`DEFAULT_MAX_QUEUE`] events, when
/// [`DEFAULT_FLUSH_INTERVAL`] has passed since the last flush, on [`EventWriter::flush`], and
/// when the writer is dropped — TensorFlow 2's rules. A process killed between flushes loses
/// the unflushed events only; TensorBoard skips a torn last record.
///
/// Every writer makes a new file, so a resumed run adds a file beside the old ones in the same
/// directory and TensorBoard shows both as one run; pass steps that continue the old ones.
#[derive(Debug)]
pub struct EventWriter {
    path: PathBuf,
    out: BufWriter<File>,
    queued: usize,
    max_queue: usize,
    flush_interval: Duration,
    last_flush: Instant,
}

impl EventWriter {
    /// Creates `dir` (and parents) and a new event file in it, named by
    /// [`event_file_name`], and writes the `file_version` event.
    ///
    /// # Errors
    /// [`KilnError::Io`] naming the directory or file when it cannot be created or written.
    pub fn create(dir: &Path) -> Result<EventWriter> {
        std::fs::create_dir_all(dir).map_err(|e| KilnError::io(dir, e))?;
        let wall_time = now();
        let secs = wall_time as u64;
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
        let mut writer = EventWriter {
            path,
            out: BufWriter::new(file),
            queued: 0,
            max_queue: DEFAULT_MAX_QUEUE,
            flush_interval: DEFAULT_FLUSH_INTERVAL,
            last_flush: Instant::now(),
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
        self.max_queue = max_queue.max(1);
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

    /// Appends `event` as one record; flushes when the queue or time limit is reached.
    ///
    /// # Errors
    /// [`KilnError::Io`] when writing fails.
    pub fn write_event(&mut self, event: &Event) -> Result<()> {
        write_record(&mut self.out, &event.to_bytes()).map_err(|e| self.io(e))?;
        self.queued += 1;
        if self.queued >= self.max_queue || self.last_flush.elapsed() >= self.flush_interval {
            self.flush()?;
        }
        Ok(())
    }

    /// Hands every written event to the OS, so TensorBoard (and a reader after a crash of
    /// this process) sees it.
    ///
    /// # Errors
    /// [`KilnError::Io`] when writing fails.
    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| self.io(e))?;
        self.queued = 0;
        self.last_flush = Instant::now();
        Ok(())
    }

    /// Flushes and closes the file, reporting a failure that dropping would only ignore.
    ///
    /// # Errors
    /// [`KilnError::Io`] when writing fails.
    pub fn close(mut self) -> Result<()> {
        self.flush()
    }

    fn io(&self, e: std::io::Error) -> KilnError {
        KilnError::io(&self.path, e)
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; `close` reports them.
        let _ = self.out.flush();
    }
}
