//! TensorBoard event files, written as TensorFlow 2 writes them, so `tensorboard --logdir`
//! shows kiln's runs unmodified.
//!
//! * [`EventWriter`]: one event file — TFRecord framing (from `kiln_data::tfrecord`), a first
//!   event with `file_version = "brain.Event:2"`, then scalar and histogram summaries as
//!   TF2 tensor summaries (`scalars` and `histograms` plugins).
//! * [`proto`]: the `Event` / `Summary` / `TensorProto` protobufs, written out for `prost`.
//! * [`histogram`]: `tf.summary.histogram`'s buckets.
//! * [`hparams`]: the HParams plugin's `session_start_info` / `session_end_info`.
//! * [`restart`]: the `SessionLog` START marker a resumed training writes, so that TensorBoard
//!   shows each step once.
//! * [`read_events`], [`read_scalars`], [`visible_scalars`]: reading files back (tests, tools).
//!
//! The Keras `TensorBoard` callback that writes `epoch_loss` and friends is
//! [`crate::callbacks::TensorBoard`]. Format reference: `/work/shared/reference`
//! `tf-keras-semantics.md` §3; checked against the real `tensorboard` package by
//! `tests/interop/tensorboard_interop.py`.
//!
//! ```
//! use kiln::summary::{EventWriter, read_scalars};
//!
//! let dir = std::env::temp_dir().join(format!("kiln-doc-tb-{}", std::process::id()));
//! let mut writer = EventWriter::create(&dir.join("train")).unwrap();
//! writer.add_scalar("epoch_loss", 0.5, 0).unwrap();
//! writer.add_scalar("epoch_loss", 0.25, 1).unwrap();
//! writer.close().unwrap();
//! assert_eq!(
//!     read_scalars(&dir.join("train"), "epoch_loss").unwrap(),
//!     vec![(0, 0.5), (1, 0.25)]
//! );
//! std::fs::remove_dir_all(dir).unwrap();
//! ```

pub mod histogram;
pub mod hparams;
pub mod proto;
mod reader;
pub mod restart;
mod writer;

pub use proto::Event;
pub use reader::{event_files, read_events, read_scalars};
pub use restart::{Restart, visible_scalars};
pub use writer::{
    DEFAULT_FLUSH_INTERVAL, DEFAULT_MAX_QUEUE, EventWriter, FILE_VERSION, HISTOGRAMS_PLUGIN,
    SCALARS_PLUGIN, event_file_name, hostname,
};

#[cfg(test)]
mod tests {
    use super::proto::{DT_DOUBLE, DT_FLOAT, ValueKind, What};
    use super::*;

    #[test]
    fn scalars_and_histograms_read_back_as_tensorflow_writes_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        w.add_scalar("epoch_loss", 0.75, 0).unwrap();
        w.add_scalar("epoch_loss", 1.0 / 3.0, 7).unwrap();
        w.add_histogram("dense/kernel/histogram", &[1.0, 2.0, 2.0, 3.0, 10.0], 2)
            .unwrap();
        let path = w.path().to_path_buf();
        w.close().unwrap();

        let events = read_events(&path).unwrap();
        assert_eq!(events.len(), 4);
        assert_eq!(
            events[0].what,
            Some(What::FileVersion("brain.Event:2".into()))
        );
        assert_eq!(events[0].wall_time.fract(), 0.0, "whole seconds, as TF");

        let loss = &events[2].values()[0];
        assert_eq!((events[2].step, loss.tag.as_str()), (7, "epoch_loss"));
        assert_eq!(loss.plugin_name(), Some("scalars"));
        let Some(ValueKind::Tensor(t)) = &loss.value else {
            panic!("a tensor summary")
        };
        assert_eq!((t.dtype, t.shape()), (DT_FLOAT, vec![]));
        assert_eq!(t.tensor_content, (1.0f32 / 3.0).to_le_bytes());
        assert_eq!(loss.as_scalar(), Some(1.0f32 / 3.0));
        assert!(events[1].wall_time >= events[0].wall_time);

        let hist = &events[3].values()[0];
        assert_eq!(events[3].step, 2);
        assert_eq!(hist.plugin_name(), Some("histograms"));
        let Some(ValueKind::Tensor(t)) = &hist.value else {
            panic!("a tensor summary")
        };
        assert_eq!((t.dtype, t.shape()), (DT_DOUBLE, vec![30, 3]));
        let rows = hist.as_histogram().unwrap();
        assert_eq!(rows, histogram::buckets(&[1.0, 2.0, 2.0, 3.0, 10.0], 30));
        assert_eq!(rows.iter().map(|r| r[2]).sum::<f64>(), 5.0);
    }

    #[test]
    fn file_names_follow_tensorflow_and_each_writer_gets_its_own_file() {
        assert_eq!(
            event_file_name(1_796_044_059, "vm", 6557, 0),
            "events.out.tfevents.1796044059.vm.6557.0.v2"
        );
        assert_eq!(
            event_file_name(7, "h", 1, 12),
            "events.out.tfevents.0000000007.h.1.12.v2"
        );
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("logs").join("train");
        let mut first = EventWriter::create(&run).unwrap();
        let second = EventWriter::create(&run).unwrap();
        assert_ne!(first.path(), second.path());
        assert!(
            second.path() > first.path(),
            "a later writer's file sorts after"
        );
        let name = first
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        let host = hostname();
        assert!(name.starts_with("events.out.tfevents."), "{name}");
        assert!(
            name.contains(&format!(".{host}.{}.", std::process::id())),
            "{name}"
        );
        assert!(name.ends_with(".v2"), "{name}");
        first.add_scalar("a", 1.0, 0).unwrap();
        drop(second);
        drop(first);
        assert_eq!(event_files(&run).unwrap().len(), 2);
        assert_eq!(read_scalars(&run, "a").unwrap(), vec![(0, 1.0)]);
    }

    #[test]
    fn events_reach_the_file_on_flush_queue_limit_and_drop() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        let path = w.path().to_path_buf();
        // The file_version event is flushed at creation.
        assert_eq!(read_events(&path).unwrap().len(), 1);
        w.add_scalar("s", 1.0, 1).unwrap();
        assert_eq!(read_events(&path).unwrap().len(), 1, "still queued");
        w.flush().unwrap();
        assert_eq!(read_events(&path).unwrap().len(), 2);
        w.set_max_queue(2);
        w.add_scalar("s", 2.0, 2).unwrap();
        assert_eq!(read_events(&path).unwrap().len(), 2);
        w.add_scalar("s", 3.0, 3).unwrap();
        assert_eq!(read_events(&path).unwrap().len(), 4, "queue of 2 flushed");
        w.add_scalar("s", 4.0, 4).unwrap();
        drop(w);
        assert_eq!(
            read_scalars(dir.path(), "s").unwrap(),
            vec![(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]
        );
    }

    #[test]
    fn an_idle_writer_flushes_after_the_flush_interval() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        let interval = std::time::Duration::from_secs(2);
        w.set_flush_interval(interval);
        let written = std::time::Instant::now();
        w.add_scalar("s", 1.0, 1).unwrap();
        assert_eq!(read_events(w.path()).unwrap().len(), 1, "still queued");
        // Nothing else is written: the background flush hands the event to the file.
        let deadline = written + std::time::Duration::from_secs(60);
        while read_events(w.path()).unwrap().len() < 2 {
            assert!(std::time::Instant::now() < deadline, "never flushed");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(written.elapsed() >= interval, "not before the interval");
        // Writing goes on normally after a background flush.
        w.add_scalar("s", 2.0, 2).unwrap();
        w.close().unwrap();
        assert_eq!(
            read_scalars(dir.path(), "s").unwrap(),
            vec![(1, 1.0), (2, 2.0)]
        );
    }

    #[test]
    fn a_new_file_sorts_after_files_of_the_same_second_or_later() {
        let dir = tempfile::tempdir().unwrap();
        let now = writer::now() as u64;
        // A file of another process from a later second (a resumed process whose clock is
        // behind, or one of the same second with a larger pid).
        let other = dir.path().join(event_file_name(now + 100, "h", 99999, 0));
        std::fs::write(&other, b"").unwrap();
        let w = EventWriter::create(dir.path()).unwrap();
        assert!(w.path() > other.as_path(), "{}", w.path().display());
        let name = w.path().file_name().unwrap().to_string_lossy().to_string();
        assert!(
            name.starts_with(&format!("events.out.tfevents.{:010}.", now + 101)),
            "{name}"
        );
        assert_eq!(
            read_events(w.path()).unwrap()[0].wall_time,
            (now + 101) as f64
        );
    }

    #[test]
    fn a_damaged_file_is_reported_with_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        w.add_scalar("s", 1.0, 1).unwrap();
        let path = w.path().to_path_buf();
        w.close().unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 6] ^= 0xff; // inside the last record's data
        std::fs::write(&path, &bytes).unwrap();
        let err = read_events(&path).unwrap_err().to_string();
        assert!(err.contains("corrupted record"), "{err}");
        // Not a protobuf Event: valid framing around garbage.
        let garbage = dir.path().join("garbage.tfevents");
        let mut out = Vec::new();
        kiln_data::tfrecord::write_record(&mut out, &[0xff, 0xff, 0xff]).unwrap();
        std::fs::write(&garbage, out).unwrap();
        let err = read_events(&garbage).unwrap_err().to_string();
        assert!(err.contains("record 0 at byte 0"), "{err}");
    }
}
