//! Where data files are read from: local paths, `file://` URLs and `s3://bucket/key` objects.
//!
//! File sources ([`Dataset::tfrecord`](crate::Dataset::tfrecord),
//! [`Dataset::text_line_dataset`](crate::Dataset::text_line_dataset),
//! [`Dataset::csv_dataset`](crate::Dataset::csv_dataset),
//! [`Dataset::make_csv_dataset`](crate::Dataset::make_csv_dataset),
//! [`Dataset::list_files`](crate::Dataset::list_files), [`crate::idx::read_idx`],
//! [`crate::npy::read_npy`]) take their file names as paths and open them through [`open`],
//! so each name may be:
//!
//! | form | example | read with |
//! |---|---|---|
//! | a plain path | `data/train.csv` | `std::fs::File`, exactly as before |
//! | a `file://` URL (RFC 8089) | `file:///data/train%201.csv` | the decoded local path |
//! | an S3 URL | `s3://bucket/data/train.csv` | [`ObjectReader`]: ranged GETs with read-ahead, through the [`object_store`] crate |
//!
//! S3 is configured by the standard `AWS_*` environment variables, or by
//! [`set_s3_options`] ([`S3Options`] lists them): credentials, region, `AWS_ENDPOINT_URL` for
//! S3-compatible servers (MinIO, Ceph, moto; plain `http://` is allowed on loopback). Other
//! URL schemes (`gs://`, `hdfs://`, `http://`) are refused with a message saying what is
//! supported.
//!
//! Blocking over async: `object_store` is async; kiln drives it from one process-wide
//! current-thread tokio runtime on a dedicated thread (`runtime.rs` explains the choice), so
//! sources stay plain iterators and read-ahead downloads while the consumer parses.
//!
//! Errors: everything here reports [`DataError::Io`] whose `path` is the location as given
//! (the URL for objects) and whose message says what to set or check — `no AWS credentials:
//! set AWS_ACCESS_KEY_ID and …`, `no such key in bucket …`, `no such bucket …`,
//! `cannot reach S3 (endpoint …)`.

mod reader;
mod runtime;
mod s3;
mod url;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

pub use reader::ObjectReader;
pub use s3::{DEFAULT_CHUNK_SIZE, DEFAULT_READ_AHEAD, S3Options, s3_options, set_s3_options};
pub use url::{Location, scheme};

use crate::error::{DataError, Result};

/// A data file opened for streaming: a local [`File`] or an [`ObjectReader`].
pub type SourceReader = Box<dyn Read + Send>;

/// The [`DataError::Io`] for `path` with `source`.
fn io_error(path: &Path, source: std::io::Error) -> DataError {
    DataError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Opens the data file at `location` (a path, `file://` URL or `s3://` URL, see the module
/// docs) for reading front to back. Local files are not buffered (wrap the reader in a
/// `BufReader`); objects are read in [`S3Options::chunk_size`] chunks with read-ahead,
/// configured by [`s3_options`].
///
/// # Errors
/// [`DataError::Io`] naming `location`: the operating system's error for local files; for
/// objects, missing credentials, no such bucket or key, access denied, an unreachable
/// endpoint — each saying what to set or check; an unsupported URL scheme.
pub fn open(location: &Path) -> Result<SourceReader> {
    match Location::from_path(location).map_err(|e| io_error(location, e))? {
        Location::Local(path) => File::open(&path)
            .map(|f| Box::new(f) as SourceReader)
            .map_err(|e| io_error(location, e)),
        Location::S3 { bucket, key } => ObjectReader::open(&bucket, &key, &s3_options())
            .map(|r| Box::new(r) as SourceReader)
            .map_err(|e| io_error(location, e)),
    }
}

/// True for the names that mean standard input: `-` and `/dev/stdin`.
pub fn is_stdin(location: &Path) -> bool {
    location == Path::new("-") || location == Path::new("/dev/stdin")
}

/// Opens `location` as [`open`] does, with its size when it has one: `Some` for a regular
/// file or an object, `None` for a pipe, a character device or standard input (`-` and
/// `/dev/stdin`), which are read front to back once, never reopened.
///
/// # Errors
/// As [`open`]; a directory is an error too ("is a directory, not a file").
pub fn open_sized(location: &Path) -> Result<(SourceReader, Option<u64>)> {
    if is_stdin(location) {
        return Ok((Box::new(std::io::stdin()), None));
    }
    match Location::from_path(location).map_err(|e| io_error(location, e))? {
        Location::Local(path) => {
            let file = File::open(&path).map_err(|e| io_error(location, e))?;
            let meta = file.metadata().map_err(|e| io_error(location, e))?;
            if meta.is_dir() {
                let source = std::io::Error::other("is a directory, not a file");
                return Err(io_error(location, source));
            }
            let len = meta.is_file().then_some(meta.len());
            Ok((Box::new(file), len))
        }
        Location::S3 { bucket, key } => {
            let reader = ObjectReader::open(&bucket, &key, &s3_options())
                .map_err(|e| io_error(location, e))?;
            let len = reader.size();
            Ok((Box::new(reader), Some(len)))
        }
    }
}

/// Reads the whole data file at `location` (as [`open`]) into memory.
///
/// # Errors
/// As [`open`], and [`DataError::Io`] for a failed read.
pub fn read(location: &Path) -> Result<Vec<u8>> {
    match Location::from_path(location).map_err(|e| io_error(location, e))? {
        Location::Local(path) => std::fs::read(&path).map_err(|e| io_error(location, e)),
        Location::S3 { bucket, key } => {
            let mut reader = ObjectReader::open(&bucket, &key, &s3_options())
                .map_err(|e| io_error(location, e))?;
            let mut bytes = Vec::with_capacity(usize::try_from(reader.size()).unwrap_or(0));
            reader
                .read_to_end(&mut bytes)
                .map_err(|e| io_error(location, e))?;
            Ok(bytes)
        }
    }
}

/// The objects under an `s3://bucket/prefix` "directory": their keys relative to the prefix
/// (`class/img.png`), sorted by bytes, with the directory's URL without a trailing `/`.
/// `Ok(None)` for a local path or `file://` URL (list it with `std::fs`).
///
/// # Errors
/// [`DataError::Io`] naming `location` for listing failures (credentials, bucket, endpoint)
/// and unsupported URL schemes.
pub(crate) fn list_directory(location: &Path) -> Result<Option<(String, Vec<String>)>> {
    match Location::from_path(location).map_err(|e| io_error(location, e))? {
        Location::Local(_) => Ok(None),
        Location::S3 { bucket, key } => {
            let prefix = key.trim_end_matches('/');
            let keys = s3::list_folder(&bucket, prefix, &s3_options())
                .map_err(|e| io_error(location, e))?;
            let strip = if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            };
            let relative = keys
                .into_iter()
                .filter_map(|k| k.strip_prefix(&strip).map(str::to_string))
                .collect();
            Ok(Some((url::s3_url(&bucket, prefix), relative)))
        }
    }
}

/// The bucket and key of an `s3://` URL, for writers that upload a finished local file;
/// `Ok(None)` when `location` is local (a plain path or `file://` URL: see [`local_path`]).
///
/// # Errors
/// [`DataError::Io`] naming `location` for unsupported URL schemes.
pub(crate) fn object_target(location: &Path) -> Result<Option<(String, String)>> {
    match Location::from_path(location).map_err(|e| io_error(location, e))? {
        Location::Local(_) => Ok(None),
        Location::S3 { bucket, key } => Ok(Some((bucket, key))),
    }
}

/// The local path of a plain path or `file://` URL (`location` itself for an `s3://` URL).
///
/// # Errors
/// [`DataError::Io`] naming `location` for malformed URLs and unsupported schemes.
pub(crate) fn local_path(location: &Path) -> Result<PathBuf> {
    match Location::from_path(location).map_err(|e| io_error(location, e))? {
        Location::Local(path) => Ok(path),
        Location::S3 { .. } => Ok(location.to_path_buf()),
    }
}

/// Uploads the finished local file `local` to the object `s3://bucket/key`, in one request or
/// a multipart upload; the object appears only when complete.
///
/// # Errors
/// [`DataError::Io`] naming the URL: credentials, bucket, endpoint, or reading `local`.
pub(crate) fn upload(local: &Path, bucket: &str, key: &str) -> Result<()> {
    s3::upload(bucket, key, local, &s3_options())
        .map_err(|e| io_error(Path::new(&url::s3_url(bucket, key)), e))
}

/// The identity of the file at `location` for [`crate::Dataset::fingerprint`]: its size and a
/// version tag — the modification time (nanoseconds since the Unix epoch, as a decimal string)
/// for local files; the ETag, else the last-modified time, for objects. `None` when it
/// cannot be read (reading the file will report why).
pub(crate) fn identity(location: &Path) -> Option<(u64, String)> {
    match Location::from_path(location).ok()? {
        Location::Local(path) => {
            let meta = std::fs::metadata(path).ok()?;
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            Some((meta.len(), mtime.to_string()))
        }
        Location::S3 { bucket, key } => {
            let (_, _, meta) = s3::head(&bucket, &key, &s3_options()).ok()?;
            let version = match &meta.e_tag {
                Some(etag) => format!("etag {etag}"),
                None => format!("modified {}", meta.last_modified.to_rfc3339()),
            };
            Some((meta.size, version))
        }
    }
}

/// `tf.io.matching_files` for a URL pattern (`s3://bucket/glob`, `file:///glob`): the matching
/// locations, sorted, in the pattern's form (`s3://` URLs for S3, `file://` URLs for
/// `file://`); empty when nothing matches. `local` globs a plain local pattern; hidden
/// names (a component starting with `.`) match only a literal `.` unless `include_hidden`
/// (see [`crate::sources::matching_files_with`]).
///
/// # Errors
/// [`DataError::InvalidArgument`] for a malformed pattern; [`DataError::Io`] naming the
/// pattern for listing failures (credentials, bucket, endpoint) and unsupported schemes.
pub(crate) fn matching_urls(
    pattern: &str,
    include_hidden: bool,
    local: impl Fn(&str, bool) -> Result<Vec<PathBuf>>,
) -> Result<Vec<PathBuf>> {
    let io = |e: std::io::Error| io_error(Path::new(pattern), e);
    match Location::parse(pattern).map_err(io)? {
        Location::Local(path) => {
            let Some(local_pattern) = path.to_str() else {
                return Err(DataError::InvalidArgument(format!(
                    "file pattern {pattern:?} decodes to a path that is not UTF-8"
                )));
            };
            let found = local(local_pattern, include_hidden)?;
            Ok(found
                .into_iter()
                .map(|p| url::file_url(&p).map_or(p, PathBuf::from))
                .collect())
        }
        Location::S3 { bucket, key } => {
            let glob = glob::Pattern::new(&key).map_err(|e| {
                DataError::InvalidArgument(format!(
                    "invalid file pattern {pattern:?}: {} at character {} of the key",
                    e.msg, e.pos
                ))
            })?;
            let urls =
                s3::matching(&bucket, &key, &glob, include_hidden, &s3_options()).map_err(io)?;
            Ok(urls.into_iter().map(PathBuf::from).collect())
        }
    }
}

#[cfg(test)]
mod tests;
