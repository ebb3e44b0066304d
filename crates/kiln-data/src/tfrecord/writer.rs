//! [`TfRecordWriter`]: `tf.io.TFRecordWriter`, writing to a temporary name until finished.
//! `s3://` outputs are written to a local temporary file and uploaded by `finish`.

use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicU64, Ordering};

use super::framing::write_record;
use crate::compression::{Compression, Encoder};
use crate::error::{DataError, Result};
use crate::storage;

/// Writes a TFRecord file (`tf.io.TFRecordWriter(path, options=compression_type)`).
///
/// Records go to a temporary file next to `path` (`.<name>.tmp-<pid>`, in the same directory
/// so the final rename is atomic); [`finish`](TfRecordWriter::finish) completes the
/// compressed stream, syncs the file to disk and renames it to `path`. A writer dropped
/// without `finish` (an error, a panic, a killed process) leaves `path` untouched — the last
/// complete file, or none — and removes its temporary file when it can.
///
/// `path` may also be a `file://` URL, or an `s3://bucket/key` URL ([`crate::storage`]):
/// then records go to a temporary file in [`std::env::temp_dir`] and `finish` uploads it (one
/// `PutObject` up to 64 MiB, a multipart upload above); S3 shows the object only once the
/// upload has completed, so an unfinished writer leaves the previous object, or none.
pub struct TfRecordWriter {
    /// The final location as given (a path or URL).
    path: PathBuf,
    temp: PathBuf,
    /// `Some((bucket, key))` for an `s3://` output.
    upload: Option<(String, String)>,
    out: Option<Encoder<BufWriter<File>>>,
    records: u64,
}

/// Numbers the temporary files of `s3://` writers within this process.
static UPLOADS: AtomicU64 = AtomicU64::new(0);

impl std::fmt::Debug for TfRecordWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TfRecordWriter")
            .field("path", &self.path)
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}

impl TfRecordWriter {
    /// Starts writing `path` with `compression` (the whole stream is compressed, as
    /// TensorFlow does).
    ///
    /// # Errors
    /// [`DataError::Io`] (naming the temporary file) when it cannot be created, e.g. the
    /// directory does not exist; [`DataError::Io`] naming `path` for an unsupported URL
    /// scheme; [`DataError::InvalidArgument`] for a path without a file name.
    pub fn create(path: impl AsRef<Path>, compression: Compression) -> Result<TfRecordWriter> {
        let given = path.as_ref().to_path_buf();
        let upload = storage::object_target(&given)?;
        let local = storage::local_path(&given)?;
        let name = local.file_name().ok_or_else(|| {
            DataError::InvalidArgument(format!(
                "TFRecord output path {} has no file name",
                given.display()
            ))
        })?;
        let temp = if upload.is_some() {
            std::env::temp_dir().join(format!(
                "kiln-tfrecord-upload-{}-{}.tmp",
                std::process::id(),
                UPLOADS.fetch_add(1, Ordering::Relaxed)
            ))
        } else {
            local.with_file_name(format!(
                ".{}.tmp-{}",
                name.to_string_lossy(),
                std::process::id()
            ))
        };
        let file = File::create(&temp).map_err(|source| DataError::Io {
            path: temp.clone(),
            source,
        })?;
        Ok(TfRecordWriter {
            path: if upload.is_some() { given } else { local },
            temp,
            upload,
            out: Some(compression.encoder(BufWriter::new(file))),
            records: 0,
        })
    }

    /// Appends one record holding `data`.
    ///
    /// # Errors
    /// [`DataError::Io`] when writing fails.
    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        let out = self.out.as_mut().expect("the encoder lives until finish");
        write_record(out, data).map_err(|source| DataError::Io {
            path: self.temp.clone(),
            source,
        })?;
        self.records += 1;
        Ok(())
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Completes the file: ends the compressed stream, flushes, syncs and renames the
    /// temporary file to the final path — or, for an `s3://` output, uploads it and removes
    /// it — and returns the final path (the URL for `s3://`; the decoded path for `file://`).
    ///
    /// # Errors
    /// [`DataError::Io`] when any of these steps fails (the final path or object is then
    /// untouched).
    pub fn finish(mut self) -> Result<PathBuf> {
        let out = self.out.take().expect("the encoder lives until finish");
        let result = match &self.upload {
            None => complete(out, &self.temp, &self.path),
            Some((bucket, key)) => {
                end_stream(out, &self.temp).and_then(|()| storage::upload(&self.temp, bucket, key))
            }
        };
        if result.is_err() || self.upload.is_some() {
            let _ = fs::remove_file(&self.temp);
        }
        result.map(|()| self.path.clone())
    }
}

/// Ends the stream and flushes `temp` (no sync: it is uploaded, then removed).
fn end_stream(out: Encoder<BufWriter<File>>, temp: &Path) -> Result<()> {
    let io = |source| DataError::Io {
        path: temp.to_path_buf(),
        source,
    };
    let buffered = out.finish().map_err(io)?;
    buffered.into_inner().map_err(|e| io(e.into_error()))?;
    Ok(())
}

/// Ends the stream, syncs `temp` and renames it to `path`.
fn complete(out: Encoder<BufWriter<File>>, temp: &Path, path: &Path) -> Result<()> {
    let io = |source| DataError::Io {
        path: temp.to_path_buf(),
        source,
    };
    let buffered = out.finish().map_err(io)?;
    let file = buffered.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    drop(file);
    fs::rename(temp, path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })
}

impl Drop for TfRecordWriter {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            // Not finished: the partial file must never look complete.
            let _ = fs::remove_file(&self.temp);
        }
    }
}
