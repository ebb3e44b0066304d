//! [`ObjectReader`]: an S3 object as a blocking `std::io::Read` stream, with read-ahead.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path as ObjPath;
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore};

use super::runtime::{self, Pending};
use super::s3::{self, S3Options};
use super::url::s3_url;

/// What a chunk request brings back.
enum Fetched {
    Bytes(Bytes),
    /// The object's ETag is no longer the one it had when the reader opened it.
    Changed(Option<String>),
    Failed(object_store::Error),
}

/// One ranged GET in flight.
struct Request {
    range: Range<u64>,
    pending: Pending<Fetched>,
}

/// Streams an S3 object front to back: [`std::io::Read`] over ranged GETs of
/// [`S3Options::chunk_size`] bytes, with [`S3Options::read_ahead`] further chunks downloading
/// in the background (on kiln's I/O thread, see `storage/runtime.rs`) while the current one is
/// read — so parsing and network transfer overlap. With `read_ahead` 0 a chunk is requested
/// only when the previous one has been read to its end.
///
/// Opening sends a HEAD request: a missing bucket or key, or bad credentials, fail at
/// [`ObjectReader::open`], not at the first read. The object's ETag from that HEAD is checked
/// against every chunk's response: if the object is replaced while being read, the read
/// fails (`"object changed while reading"`) instead of mixing two versions' bytes.
///
/// Memory: at most `read_ahead + 1` chunks (default 2 × 8 MiB). Dropping the reader cancels
/// the requests in flight.
pub struct ObjectReader {
    url: String,
    bucket: String,
    options: S3Options,
    store: Arc<dyn ObjectStore>,
    path: ObjPath,
    meta: ObjectMeta,
    /// The unread rest of the current chunk.
    current: Bytes,
    /// Offset of `current`'s first byte in the object.
    position: u64,
    /// Requests in flight, in order.
    in_flight: VecDeque<Request>,
    /// First byte not yet requested.
    next_request: u64,
}

impl std::fmt::Debug for ObjectReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectReader")
            .field("url", &self.url)
            .field("size", &self.meta.size)
            .field("position", &self.position)
            .field("in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

impl ObjectReader {
    /// Opens `s3://bucket/key` with `options` and starts downloading its first chunks.
    ///
    /// # Errors
    /// An [`io::Error`] saying what to set or check (it does not repeat the URL, which the
    /// caller knows; kiln's sources report it as the [`crate::DataError::Io`] path): `InvalidInput` for missing
    /// credentials or an unusable key, `NotFound` for no such bucket or key,
    /// `PermissionDenied`, `ConnectionRefused` when the endpoint cannot be reached.
    pub fn open(bucket: &str, key: &str, options: &S3Options) -> io::Result<ObjectReader> {
        let (store, path, meta) = s3::head(bucket, key, options)?;
        let mut reader = ObjectReader {
            url: s3_url(bucket, key),
            bucket: bucket.to_string(),
            options: options.clone(),
            store,
            path,
            meta,
            current: Bytes::new(),
            position: 0,
            in_flight: VecDeque::new(),
            next_request: 0,
        };
        reader.top_up()?;
        Ok(reader)
    }

    /// The object's size in bytes (from the HEAD request).
    pub fn size(&self) -> u64 {
        self.meta.size
    }

    /// The object's metadata from the HEAD request: size, ETag, last-modified time.
    pub fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    /// The object's `s3://bucket/key` URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Chunk requests in flight and the first byte not yet requested.
    #[cfg(test)]
    pub(crate) fn requested(&self) -> (usize, u64) {
        (self.in_flight.len(), self.next_request)
    }

    /// Requests chunks until `read_ahead` are in flight or the whole object is requested.
    fn top_up(&mut self) -> io::Result<()> {
        while self.in_flight.len() < self.options.read_ahead() && self.request_next()? {}
        Ok(())
    }

    /// Requests the next chunk; `Ok(false)` when the whole object has been requested.
    fn request_next(&mut self) -> io::Result<bool> {
        if self.next_request >= self.meta.size {
            return Ok(false);
        }
        let chunk = self.options.chunk_size() as u64;
        let range = self.next_request..(self.next_request + chunk).min(self.meta.size);
        self.next_request = range.end;
        let store = Arc::clone(&self.store);
        let path = self.path.clone();
        let etag = self.meta.e_tag.clone();
        let get = GetOptions {
            range: Some(GetRange::Bounded(range.clone())),
            ..Default::default()
        };
        let pending = runtime::spawn(async move {
            let result = match store.get_opts(&path, get).await {
                Ok(result) => result,
                Err(e) => return Fetched::Failed(e),
            };
            if etag.is_some() && result.meta.e_tag.is_some() && result.meta.e_tag != etag {
                return Fetched::Changed(result.meta.e_tag);
            }
            match result.bytes().await {
                Ok(bytes) => Fetched::Bytes(bytes),
                Err(e) => Fetched::Failed(e),
            }
        })?;
        self.in_flight.push_back(Request { range, pending });
        Ok(true)
    }

    /// Makes the next chunk current; `Ok(false)` at the end of the object.
    fn advance(&mut self) -> io::Result<bool> {
        if self.in_flight.is_empty() {
            self.request_next()?;
        }
        let Some(request) = self.in_flight.pop_front() else {
            return Ok(false);
        };
        let Request { range, pending } = request;
        let bytes = match pending.wait()? {
            Fetched::Bytes(bytes) => bytes,
            Fetched::Changed(now) => {
                return Err(io::Error::other(format!(
                    "object changed while reading (ETag {} when opened, {} at byte {}): read it \
                     again",
                    self.meta.e_tag.as_deref().unwrap_or("?"),
                    now.as_deref().unwrap_or("?"),
                    range.start
                )));
            }
            Fetched::Failed(e) => {
                return Err(s3::describe(e, &self.bucket, &self.options));
            }
        };
        let expected = range.end - range.start;
        if bytes.len() as u64 != expected {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "asked for bytes {}..{} of a {}-byte object, got {} bytes: was it \
                     truncated while reading?",
                    range.start,
                    range.end,
                    self.meta.size,
                    bytes.len()
                ),
            ));
        }
        self.position = range.start;
        self.current = bytes;
        self.top_up()?;
        Ok(true)
    }
}

impl Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.current.is_empty() {
            if !self.advance()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        self.position += n as u64;
        Ok(n)
    }
}

impl Drop for ObjectReader {
    fn drop(&mut self) {
        for request in &self.in_flight {
            request.pending.abort();
        }
    }
}
