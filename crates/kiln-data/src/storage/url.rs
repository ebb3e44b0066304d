//! Parsing data locations: plain paths, `file://` URLs and `s3://bucket/key` URLs.

use std::io;
use std::path::{Path, PathBuf};

/// Where a data file (or a glob pattern) lives.
///
/// Made by [`Location::parse`] from the strings that file sources take: a plain path (relative
/// or absolute), a `file://` URL (RFC 8089; `file:///abs/path` or `file://localhost/abs/path`,
/// percent-encoded bytes decoded; `?` and `#` are part of the path), or an S3 URL `s3://bucket/key` (the key taken literally, as
/// TensorFlow's S3 file system does: no percent-decoding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A file on the local file system.
    Local(PathBuf),
    /// An object in an S3 (or S3-compatible) bucket.
    S3 {
        /// The bucket name.
        bucket: String,
        /// The object key: everything after the bucket's `/`, possibly empty (a whole-bucket
        /// glob), never starting with `/`.
        key: String,
    },
}

/// The URL scheme of `location` (`"s3"` for `s3://…`), if it starts with `scheme://`.
///
/// A scheme is a letter followed by letters, digits, `+`, `-` or `.` (RFC 3986 §3.1); one-letter
/// schemes are not recognised, so Windows drive paths (`C://data`) stay paths.
pub fn scheme(location: &str) -> Option<&str> {
    let (scheme, _) = location.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    let valid = first.is_ascii_alphabetic()
        && scheme.len() >= 2
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(scheme)
}

impl Location {
    /// Parses a location string (see [`Location`]).
    ///
    /// # Errors
    /// An [`io::Error`] of kind `InvalidInput` (sources report it as
    /// [`crate::DataError::Io`] naming the location) for an unsupported scheme (`gs://`,
    /// `hdfs://`, `http://`, …), an `s3://` URL without a bucket, or a `file://` URL that is
    /// not an absolute local path.
    pub fn parse(location: &str) -> io::Result<Location> {
        match scheme(location) {
            None => Ok(Location::Local(PathBuf::from(location))),
            Some(s) if s.eq_ignore_ascii_case("s3") => {
                let rest = &location[s.len() + 3..];
                let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(invalid(format!(
                        "{location} has no bucket name: write s3://BUCKET/KEY"
                    )));
                }
                Ok(Location::S3 {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                })
            }
            Some(s) if s.eq_ignore_ascii_case("file") => {
                file_url_path(location).map(Location::Local)
            }
            Some(s) => Err(invalid(format!(
                "unsupported URL scheme {s:?} in {location}: kiln reads local paths, file:// \
                 URLs and s3://bucket/key URLs (for S3-compatible servers such as MinIO or \
                 GCS's XML API, use s3:// with AWS_ENDPOINT_URL set to the server)"
            ))),
        }
    }

    /// Parses the location a source was given as a path (see [`Location::parse`]). Paths that
    /// are not valid UTF-8 are local paths.
    ///
    /// # Errors
    /// As [`Location::parse`].
    pub fn from_path(path: &Path) -> io::Result<Location> {
        match path.to_str() {
            Some(s) => Location::parse(s),
            None => Ok(Location::Local(path.to_path_buf())),
        }
    }

    /// The `s3://bucket/key` URL of an S3 location; the path, displayed, of a local one.
    pub fn url(&self) -> String {
        match self {
            Location::Local(path) => path.display().to_string(),
            Location::S3 { bucket, key } => s3_url(bucket, key),
        }
    }
}

/// `s3://bucket/key`.
pub(crate) fn s3_url(bucket: &str, key: &str) -> String {
    format!("s3://{bucket}/{key}")
}

/// The local path of a `file://` URL: everything after `file://` and an empty or `localhost`
/// host, percent-decoded (`%20` is a space). `?` and `#` are taken literally, not as a query or
/// fragment, so a `file://` glob pattern may use `?`.
fn file_url_path(location: &str) -> io::Result<PathBuf> {
    let rest = &location["file://".len()..];
    let path = if rest.starts_with('/') {
        rest
    } else if rest.len() >= 10 && rest[..10].eq_ignore_ascii_case("localhost/") {
        &rest[9..]
    } else {
        return Err(invalid(format!(
            "{location} is not a local file URL: write file:///absolute/path (an empty host or \
             localhost)"
        )));
    };
    let bytes = percent_decode(path.as_bytes())
        .ok_or_else(|| invalid(format!("{location}: a % is not followed by two hex digits")))?;
    Ok(path_from_bytes(bytes))
}

/// Decodes `%XX` escapes; `None` for a malformed escape.
fn percent_decode(input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        if input[i] == b'%' {
            let hex = input.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(input[i]);
            i += 1;
        }
    }
    Some(out)
}

fn path_from_bytes(bytes: Vec<u8>) -> PathBuf {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        PathBuf::from(std::ffi::OsString::from_vec(bytes))
    }
    #[cfg(not(unix))]
    {
        PathBuf::from(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// A `file://` URL for an absolute local `path` (the inverse of [`Location::parse`] for
/// `file://` locations): bytes other than letters, digits, `/` and `-._~!$&'()*+,;=:@`
/// percent-encoded. `None` for a relative path.
pub(crate) fn file_url(path: &Path) -> Option<String> {
    if !path.is_absolute() {
        return None;
    }
    let mut url = String::from("file://");
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&b) {
            url.push(b as char);
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    Some(url)
}

/// Splits an S3 key glob into the listing prefix — the literal part up to the last `/` before
/// the first glob character (`*`, `?`, `[`) — and reports whether the pattern has glob
/// characters at all. `"data/train-*.tfrecord"` gives `("data/", true)`.
pub(crate) fn glob_prefix(key_pattern: &str) -> (&str, bool) {
    match key_pattern.find(['*', '?', '[']) {
        None => (key_pattern, false),
        Some(first) => {
            let cut = key_pattern[..first].rfind('/').map_or(0, |i| i + 1);
            (&key_pattern[..cut], true)
        }
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths_file_urls_and_s3_urls() {
        assert_eq!(
            Location::parse("data/train.csv").unwrap(),
            Location::Local(PathBuf::from("data/train.csv"))
        );
        assert_eq!(
            Location::parse("/abs/x.tfrecord").unwrap(),
            Location::Local(PathBuf::from("/abs/x.tfrecord"))
        );
        // A Windows drive letter is not a scheme.
        assert_eq!(
            Location::parse("C://data").unwrap(),
            Location::Local(PathBuf::from("C://data"))
        );
        assert_eq!(
            Location::parse("file:///tmp/a%20b/c.txt").unwrap(),
            Location::Local(PathBuf::from("/tmp/a b/c.txt"))
        );
        assert_eq!(
            Location::parse("file://localhost/tmp/c.txt").unwrap(),
            Location::Local(PathBuf::from("/tmp/c.txt"))
        );
        assert_eq!(
            Location::parse("file:///tmp/?.csv").unwrap(),
            Location::Local(PathBuf::from("/tmp/?.csv")),
            "? is a glob character, not a query"
        );
        assert_eq!(
            Location::parse("s3://my-bucket/dir/a b%20.csv").unwrap(),
            Location::S3 {
                bucket: "my-bucket".into(),
                key: "dir/a b%20.csv".into()
            }
        );
        assert_eq!(
            Location::parse("s3://my-bucket").unwrap(),
            Location::S3 {
                bucket: "my-bucket".into(),
                key: String::new()
            }
        );
        let loc = Location::parse("s3://b/k/x.csv").unwrap();
        assert_eq!(loc.url(), "s3://b/k/x.csv");
    }

    #[test]
    fn bad_urls_say_what_is_supported() {
        let err = Location::parse("gs://bucket/x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let text = err.to_string();
        assert!(
            text.contains("\"gs\"") && text.contains("gs://bucket/x"),
            "{text}"
        );
        assert!(text.contains("s3://"), "{text}");
        let err = Location::parse("s3:///key").unwrap_err();
        assert!(err.to_string().contains("no bucket name"), "{err}");
        let err = Location::parse("file://otherhost/x").unwrap_err();
        assert!(err.to_string().contains("file:///absolute/path"), "{err}");
        let err = Location::parse("file:///tmp/%zz").unwrap_err();
        assert!(err.to_string().contains("two hex digits"), "{err}");
    }

    #[test]
    fn file_urls_round_trip() {
        let path = Path::new("/tmp/a b/c#1.txt");
        let url = file_url(path).unwrap();
        assert_eq!(url, "file:///tmp/a%20b/c%231.txt");
        assert_eq!(Location::parse(&url).unwrap(), Location::Local(path.into()));
        assert_eq!(file_url(Path::new("relative")), None);
    }

    #[test]
    fn glob_prefixes() {
        assert_eq!(glob_prefix("data/train-*.tfrecord"), ("data/", true));
        assert_eq!(glob_prefix("data/sub/x?.csv"), ("data/sub/", true));
        assert_eq!(glob_prefix("*.csv"), ("", true));
        assert_eq!(glob_prefix("a/[bc]/d"), ("a/", true));
        assert_eq!(glob_prefix("a/b.csv"), ("a/b.csv", false));
    }
}
