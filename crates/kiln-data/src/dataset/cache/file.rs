//! The file cache: `<prefix>.kcache`, its temp file and its lock (rules in `mod.rs`).

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::format::{self, HEADER_LEN, RecordReader};
use super::partial_warning;
use crate::dataset::{BoxIter, Cardinality, Node, warn};
use crate::element::Element;
use crate::error::{DataError, Result};

/// The three files of a cache prefix.
#[derive(Debug, Clone)]
pub(super) struct Paths {
    /// `<prefix>.kcache`: the complete cache.
    pub(super) done: PathBuf,
    /// `<prefix>.kcache.tmp`: the cache being written.
    pub(super) tmp: PathBuf,
    /// `<prefix>.lock`: held by the writer.
    pub(super) lock: PathBuf,
}

impl Paths {
    pub(super) fn new(prefix: &Path) -> Paths {
        let with = |suffix: &str| {
            let mut name = OsString::from(prefix.as_os_str());
            name.push(suffix);
            PathBuf::from(name)
        };
        Paths {
            done: with(".kcache"),
            tmp: with(".kcache.tmp"),
            lock: with(".lock"),
        }
    }
}

fn io_error(path: &Path, source: io::Error) -> DataError {
    DataError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(super) struct FileCacheNode {
    input: Arc<dyn Node>,
    paths: Paths,
}

impl FileCacheNode {
    pub(super) fn new(input: Arc<dyn Node>, prefix: PathBuf) -> FileCacheNode {
        FileCacheNode {
            input,
            paths: Paths::new(&prefix),
        }
    }

    /// Opens the complete cache, or starts writing it.
    fn start(&self) -> Result<BoxIter> {
        let fingerprint = self.input.fingerprint();
        if let Some(reader) = open_complete(&self.paths.done, fingerprint)? {
            return Ok(Box::new(reader));
        }
        if let Some(parent) = self.paths.done.parent()
            && !parent.as_os_str().is_empty()
        {
            fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
        }
        let lock = Lock::acquire(&self.paths.lock)?;
        // Another writer may have finished between our look and taking the lock.
        if let Some(reader) = open_complete(&self.paths.done, fingerprint)? {
            return Ok(Box::new(reader));
        }
        if fs::symlink_metadata(&self.paths.tmp).is_ok() {
            warn(&format!(
                "discarding the partial cache file {} left by an iteration that did not finish \
                 (a crash or kill); the cache is rebuilt from the input",
                self.paths.tmp.display()
            ));
            fs::remove_file(&self.paths.tmp).map_err(|e| io_error(&self.paths.tmp, e))?;
        }
        let file = File::create(&self.paths.tmp).map_err(|e| io_error(&self.paths.tmp, e))?;
        let mut out = BufWriter::new(file);
        if let Err(e) = out.write_all(&format::header(fingerprint)) {
            let _ = fs::remove_file(&self.paths.tmp);
            return Err(io_error(&self.paths.tmp, e));
        }
        Ok(Box::new(Writer {
            input: self.input.iter(),
            out: Some(out),
            paths: self.paths.clone(),
            lock: Some(lock),
            records: 0,
            record: Vec::new(),
            pending: None,
            finished: false,
        }))
    }
}

impl Node for FileCacheNode {
    fn iter(&self) -> BoxIter {
        match self.start() {
            Ok(iter) => iter,
            Err(err) => Box::new(std::iter::once(Err(err))),
        }
    }

    fn cardinality(&self) -> Cardinality {
        self.input.cardinality()
    }

    /// A cache yields its input's elements: the input's fingerprint.
    fn fingerprint(&self) -> u64 {
        self.input.fingerprint()
    }
}

/// A reader over the complete cache at `path`, `None` when there is none, or an error when
/// it cannot be read or was built by another pipeline.
fn open_complete(path: &Path, fingerprint: u64) -> Result<Option<RecordReader<BufReader<File>>>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path, e)),
    };
    let len = file.metadata().map_err(|e| io_error(path, e))?.len();
    let mut reader = BufReader::new(file);
    let mut head = [0u8; HEADER_LEN];
    match reader.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Err(DataError::Format {
                path: path.to_path_buf(),
                offset: len,
                message: format!(
                    "truncated cache header ({len} of {HEADER_LEN} bytes); delete the file to \
                     rebuild the cache"
                ),
            });
        }
        Err(e) => return Err(io_error(path, e)),
    }
    let stored = format::parse_header(&head, path)?;
    if stored != fingerprint {
        return Err(DataError::Cache {
            path: path.to_path_buf(),
            message: format!(
                "this cache file was built by a different input pipeline (its fingerprint is \
                 {stored:016x}, the pipeline before .cache() now has {fingerprint:016x}): the \
                 data, files or transformation arguments before the cache changed. Delete {} \
                 to rebuild the cache, or use a new cache prefix",
                path.display()
            ),
        });
    }
    Ok(Some(RecordReader::new(reader, path.to_path_buf(), len)))
}

/// The writer's lock file, removed when dropped.
struct Lock {
    path: PathBuf,
}

/// The value of a lock file's `<key> <value>` line.
fn lock_field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .map(str::trim)
}

/// The pid recorded in a lock file's text (`pid <n>` line).
fn lock_pid(text: &str) -> Option<u32> {
    lock_field(text, "pid").and_then(|p| p.parse().ok())
}

/// This machine's (or container's) name, from Linux's `/proc/sys/kernel/hostname`. Recorded
/// in lock files: a pid only means something on the host that wrote it, so a lock from another
/// host or container sharing the directory is never judged stale.
fn hostname() -> Option<String> {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

/// True when the lock's writer certainly no longer exists: the lock was written on this host
/// and Linux's `/proc` is mounted but has no `/proc/<pid>`. Otherwise we cannot tell, and
/// assume it is alive.
fn writer_is_gone(text: &str) -> bool {
    let (Some(pid), Some(host)) = (lock_pid(text), lock_field(text, "host")) else {
        return false;
    };
    hostname().as_deref() == Some(host)
        && Path::new("/proc/self").exists()
        && pid != std::process::id()
        && !Path::new(&format!("/proc/{pid}")).exists()
}

impl Lock {
    fn acquire(path: &Path) -> Result<Lock> {
        for attempt in 0..2 {
            match OpenOptions::new().write(true).create_new(true).open(path) {
                Ok(mut file) => {
                    let lock = Lock {
                        path: path.to_path_buf(),
                    };
                    let since = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    let text = format!(
                        "kiln-data cache lock\npid {}\nhost {}\ncreated at {since} (unix seconds)\n",
                        std::process::id(),
                        hostname().unwrap_or_else(|| "unknown".into())
                    );
                    file.write_all(text.as_bytes())
                        .map_err(|e| io_error(path, e))?;
                    return Ok(lock);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let text = fs::read_to_string(path).unwrap_or_default();
                    let pid = lock_pid(&text);
                    if attempt == 0 && writer_is_gone(&text) {
                        warn(&format!(
                            "removing the stale cache lock {} of process {}, which no longer \
                             exists",
                            path.display(),
                            pid.unwrap_or_default()
                        ));
                        match fs::remove_file(path) {
                            Ok(()) => continue,
                            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                            Err(e) => return Err(io_error(path, e)),
                        }
                    }
                    let holder = match pid {
                        Some(pid) if pid == std::process::id() => {
                            format!("another iterator of this process (pid {pid})")
                        }
                        Some(pid) => format!("process {pid}"),
                        None => "an unknown process".to_string(),
                    };
                    return Err(DataError::Cache {
                        path: path.to_path_buf(),
                        message: format!(
                            "there appears to be a concurrent caching iterator running: the \
                             lock file exists, held by {holder}. Only one iterator may write a \
                             cache; finish that one first. If you are sure nothing else is \
                             writing this cache, delete the lock file"
                        ),
                    });
                }
                Err(e) => return Err(io_error(path, e)),
            }
        }
        Err(DataError::Cache {
            path: path.to_path_buf(),
            message: "the lock file keeps reappearing; another process is writing this cache"
                .into(),
        })
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// The iteration that writes the cache: passes elements through, appending records to the
/// temp file; renames it into place at the end of the input.
struct Writer {
    input: BoxIter,
    /// `None` once writing stopped (finished, or abandoned after an error).
    out: Option<BufWriter<File>>,
    paths: Paths,
    lock: Option<Lock>,
    records: u64,
    /// Reused encoding buffer.
    record: Vec<u8>,
    /// An element to yield after a write error was yielded in its place.
    pending: Option<Element>,
    /// The input has ended.
    finished: bool,
}

impl Writer {
    /// Stops writing: removes the temp file and releases the lock.
    fn abandon(&mut self) {
        if self.out.take().is_some() {
            let _ = fs::remove_file(&self.paths.tmp);
        }
        self.lock = None;
    }

    /// Writes the footer and renames the temp file into place.
    fn complete(&mut self) -> Result<()> {
        let Some(mut out) = self.out.take() else {
            return Ok(());
        };
        let tmp = self.paths.tmp.clone();
        let result = out
            .write_all(&format::footer(self.records))
            .and_then(|()| out.into_inner().map_err(|e| e.into_error()))
            .and_then(|file| file.sync_all())
            .map_err(|e| io_error(&tmp, e))
            .and_then(|()| {
                fs::rename(&tmp, &self.paths.done).map_err(|e| io_error(&self.paths.done, e))
            });
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        self.lock = None;
        result
    }
}

impl Iterator for Writer {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        if let Some(element) = self.pending.take() {
            return Some(Ok(element));
        }
        if self.finished {
            return None;
        }
        match self.input.next() {
            Some(Ok(element)) => {
                if let Some(out) = &mut self.out {
                    self.record.clear();
                    format::encode_record(&element, &mut self.record);
                    if let Err(e) = out.write_all(&self.record) {
                        self.abandon();
                        self.pending = Some(element);
                        return Some(Err(io_error(&self.paths.tmp, e)));
                    }
                    self.records += 1;
                }
                Some(Ok(element))
            }
            Some(Err(err)) => {
                self.abandon(); // an iteration with an error is not a complete cache
                Some(Err(err))
            }
            None => {
                self.finished = true;
                self.complete().err().map(Err)
            }
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if self.out.is_some() {
            warn(&partial_warning(&format!(
                "cache file {}",
                self.paths.done.display()
            )));
            self.abandon();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::super::CacheTarget;
    use super::super::tests::changing;
    use super::*;
    use crate::Dataset;
    use crate::dataset::testutil::{collect, collect_results, range, values};

    fn temp_prefix(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("kiln-data-cache-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir.join("train")
    }

    fn file_cache(ds: Dataset, prefix: &Path) -> Dataset {
        ds.cache(CacheTarget::File(prefix.to_path_buf()))
    }

    fn cache_error(result: &Result<Vec<i64>>) -> (PathBuf, String) {
        match result {
            Err(DataError::Cache { path, message }) => (path.clone(), message.clone()),
            other => panic!("expected a Cache error, got {other:?}"),
        }
    }

    #[test]
    fn writes_once_then_replays_across_datasets() {
        let prefix = temp_prefix("replay");
        let paths = Paths::new(&prefix);
        let reads = Arc::new(AtomicI64::new(0));
        let ds = file_cache(changing(5, Arc::clone(&reads)), &prefix);
        assert_eq!(ds.cardinality(), Cardinality::Finite(5));
        assert_eq!(collect(&ds), vec![0, 1, 2, 3, 4]);
        assert!(paths.done.exists());
        assert!(!paths.tmp.exists() && !paths.lock.exists());
        assert_eq!(collect(&ds), vec![0, 1, 2, 3, 4], "replayed");
        // A new Dataset object with the same pipeline reads the file: the input never runs.
        let again = file_cache(changing(5, Arc::clone(&reads)), &prefix);
        assert_eq!(collect(&again), vec![0, 1, 2, 3, 4]);
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        // The file round-trips element structure too.
        let first = again.iter().next().unwrap().unwrap();
        assert_eq!(first.names().collect::<Vec<_>>(), vec!["x"]);
        fs::remove_dir_all(prefix.parent().unwrap()).unwrap();
    }

    #[test]
    fn an_incomplete_iteration_leaves_no_cache() {
        let prefix = temp_prefix("partial");
        let paths = Paths::new(&prefix);
        let reads = Arc::new(AtomicI64::new(0));
        let ds = file_cache(changing(4, Arc::clone(&reads)), &prefix);
        assert_eq!(collect(&ds.clone().take(2)), vec![0, 1]);
        assert!(!paths.done.exists() && !paths.tmp.exists() && !paths.lock.exists());
        assert_eq!(
            collect(&ds),
            vec![100, 101, 102, 103],
            "rebuilt from the input"
        );
        assert_eq!(collect(&ds), vec![100, 101, 102, 103]);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        fs::remove_dir_all(prefix.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_different_pipeline_is_refused() {
        let prefix = temp_prefix("fingerprint");
        assert_eq!(collect(&file_cache(range(5), &prefix)), vec![0, 1, 2, 3, 4]);
        let other = file_cache(range(6), &prefix);
        let results = collect_results(&other);
        assert_eq!(results.len(), 1);
        let (path, message) = cache_error(&results[0]);
        assert_eq!(path, Paths::new(&prefix).done);
        assert!(message.contains("different input pipeline"), "{message}");
        assert!(
            message.contains("Delete") && message.contains("new cache prefix"),
            "{message}"
        );
        // Arguments count too: batch(2) vs batch(3) before the cache.
        let batched = temp_prefix("fingerprint-batch");
        collect(&file_cache(range(5).batch(2, false), &batched));
        let results = collect_results(&file_cache(range(5).batch(3, false), &batched));
        assert!(
            cache_error(&results[0])
                .1
                .contains("different input pipeline")
        );
        fs::remove_dir_all(prefix.parent().unwrap()).unwrap();
        fs::remove_dir_all(batched.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_concurrent_writer_is_refused() {
        let prefix = temp_prefix("concurrent");
        let paths = Paths::new(&prefix);
        let ds = file_cache(range(3), &prefix);
        let mut writer = ds.iter();
        assert!(writer.next().unwrap().is_ok());
        let lock_text = fs::read_to_string(&paths.lock).unwrap();
        assert!(
            lock_text.contains(&format!("pid {}", std::process::id())),
            "{lock_text}"
        );
        let results = collect_results(&file_cache(range(3), &prefix));
        assert_eq!(results.len(), 1);
        let (path, message) = cache_error(&results[0]);
        assert_eq!(path, paths.lock);
        assert!(message.contains("concurrent caching iterator"), "{message}");
        assert!(message.contains("delete the lock file"), "{message}");
        // The first writer finishes normally and releases the lock.
        let rest: Vec<i64> = writer.map(|r| values(&r.unwrap())[0]).collect();
        assert_eq!(rest, vec![1, 2]);
        assert!(paths.done.exists() && !paths.lock.exists());
        assert_eq!(collect(&file_cache(range(3), &prefix)), vec![0, 1, 2]);
        fs::remove_dir_all(prefix.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_stale_lock_is_removed_and_a_foreign_one_is_not() {
        let prefix = temp_prefix("stale");
        let paths = Paths::new(&prefix);
        // Above Linux's largest pid (2^22), so certainly not running.
        let host = hostname().unwrap_or_default();
        let dead = format!("kiln-data cache lock\npid 999999999\nhost {host}\n");
        fs::write(&paths.lock, &dead).unwrap();
        if Path::new("/proc/self").exists() && !host.is_empty() {
            assert_eq!(collect(&file_cache(range(3), &prefix)), vec![0, 1, 2]);
            assert!(paths.done.exists() && !paths.lock.exists());
        }
        // A lock without a readable pid, or from another host, cannot be judged stale.
        let other = temp_prefix("foreign");
        let other_paths = Paths::new(&other);
        fs::write(&other_paths.lock, "something else").unwrap();
        let results = collect_results(&file_cache(range(3), &other));
        assert!(cache_error(&results[0]).1.contains("an unknown process"));
        assert!(other_paths.lock.exists(), "a foreign lock is left alone");
        let elsewhere = "kiln-data cache lock\npid 999999999\nhost some-other-machine\n";
        fs::write(&other_paths.lock, elsewhere).unwrap();
        let results = collect_results(&file_cache(range(3), &other));
        assert!(cache_error(&results[0]).1.contains("process 999999999"));
        assert!(other_paths.lock.exists());
        fs::remove_dir_all(prefix.parent().unwrap()).unwrap();
        fs::remove_dir_all(other.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_leftover_temp_file_is_discarded_not_read() {
        let prefix = temp_prefix("leftover");
        let paths = Paths::new(&prefix);
        // A partial cache of a *different* element: if it were read, 77 would appear.
        let mut partial = format::header(range(3).fingerprint()).to_vec();
        format::encode_record(&crate::dataset::testutil::scalar(77), &mut partial);
        fs::write(&paths.tmp, &partial).unwrap();
        let warnings = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let sink = Arc::clone(&warnings);
        crate::dataset::set_warning_hook(Some(Arc::new(move |m: &str| {
            sink.lock().unwrap().push(m.to_string())
        })));
        let got = collect(&file_cache(range(3), &prefix));
        crate::dataset::set_warning_hook(None);
        assert_eq!(got, vec![0, 1, 2]);
        assert!(paths.done.exists() && !paths.tmp.exists());
        assert_eq!(collect(&file_cache(range(3), &prefix)), vec![0, 1, 2]);
        let tmp = paths.tmp.display().to_string();
        assert!(
            warnings
                .lock()
                .unwrap()
                .iter()
                .any(|m| m.contains("discarding the partial cache file") && m.contains(&tmp)),
            "{:?}",
            warnings.lock().unwrap()
        );
        fs::remove_dir_all(prefix.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_corrupt_cache_is_an_error_with_offset() {
        let prefix = temp_prefix("corrupt");
        let paths = Paths::new(&prefix);
        collect(&file_cache(range(3), &prefix));
        let mut bytes = fs::read(&paths.done).unwrap();
        let mut one = Vec::new();
        format::encode_record(&crate::dataset::testutil::scalar(0), &mut one);
        let second = HEADER_LEN + one.len();
        bytes[second + 12] ^= 0xFF;
        fs::write(&paths.done, &bytes).unwrap();
        let results = collect_results(&file_cache(range(3), &prefix));
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].as_ref().unwrap(), &vec![0]);
        match &results[1] {
            Err(DataError::Format {
                offset, message, ..
            }) => {
                assert_eq!(*offset, second as u64);
                assert!(message.contains("corrupt record 1"), "{message}");
            }
            other => panic!("expected a Format error, got {other:?}"),
        }
        fs::remove_dir_all(prefix.parent().unwrap()).unwrap();
    }

    #[test]
    fn an_input_error_leaves_no_cache() {
        let prefix = temp_prefix("input-error");
        let paths = Paths::new(&prefix);
        let failing = range(3).filter(|e| {
            if crate::dataset::testutil::values(e)[0] == 1 {
                Err(DataError::Map("one".into()))
            } else {
                Ok(true)
            }
        });
        let results = collect_results(&file_cache(failing, &prefix));
        assert_eq!(results.len(), 3);
        assert!(results[1].is_err());
        assert_eq!(results[2].as_ref().unwrap(), &vec![2]);
        assert!(!paths.done.exists() && !paths.tmp.exists() && !paths.lock.exists());
        fs::remove_dir_all(prefix.parent().unwrap()).unwrap();
    }

    #[test]
    fn lock_file_parsing() {
        let text = "kiln-data cache lock\npid 42\nhost box-1\ncreated at 1\n";
        assert_eq!(lock_pid(text), Some(42));
        assert_eq!(lock_field(text, "host"), Some("box-1"));
        assert_eq!(lock_pid("pid x"), None);
        assert_eq!(lock_pid("pidfile 3"), None);
        let mine = format!(
            "pid {}\nhost {}\n",
            std::process::id(),
            hostname().unwrap_or_default()
        );
        assert!(!writer_is_gone(&mine), "this process is alive");
    }
}
