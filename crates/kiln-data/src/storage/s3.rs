//! `s3://` locations: configuration, clients, metadata, listing and error messages.
//!
//! Clients are `object_store`'s S3 client, one per bucket and configuration, built on first use
//! and kept for the process (they hold the HTTP connection pool).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjPath;
use object_store::{BackoffConfig, ObjectMeta, ObjectStore, ObjectStoreExt, RetryConfig};

use super::runtime;
use super::url::{glob_prefix, s3_url};

/// Default bytes per ranged GET of [`ObjectReader`](super::ObjectReader): 8 MiB.
pub const DEFAULT_CHUNK_SIZE: usize = 8 * 1024 * 1024;
/// Default chunks requested ahead of the one being read: 1.
pub const DEFAULT_READ_AHEAD: usize = 1;

/// Variables that hold secrets: shown as `<redacted>` by `Debug`.
const SECRETS: [&str; 3] = [
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SSE_CUSTOMER_KEY_BASE64",
];

/// How kiln reaches `s3://` locations: AWS settings by their environment-variable names, plus
/// kiln's read-ahead and retry settings.
///
/// [`S3Options::from_env`] (what sources use unless [`set_s3_options`] says otherwise) takes
/// every `AWS_*` variable of the environment. The ones that matter most:
///
/// | variable | meaning |
/// |---|---|
/// | `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` | static credentials (both needed) |
/// | `AWS_SESSION_TOKEN` | with them, for temporary credentials |
/// | `AWS_REGION`, else `AWS_DEFAULT_REGION` | the bucket's region (default `us-east-1`) |
/// | `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT_URL_S3`, which wins) | an S3-compatible server (MinIO, Ceph, moto, …); requests use path-style URLs (`endpoint/bucket/key`) unless `AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true` |
/// | `AWS_ALLOW_HTTP=true` | plain `http://` to a non-loopback endpoint (loopback endpoints — `127.0.0.1`, `localhost`, `[::1]` — are always allowed) |
/// | `AWS_SKIP_SIGNATURE=true` | anonymous requests, for public buckets |
/// | `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN` | web-identity credentials (EKS) |
/// | `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` | ECS task credentials |
/// | `AWS_EC2_METADATA_DISABLED=false` | EC2 instance-profile credentials from the instance-metadata service |
///
/// Other `AWS_*` names that `object_store`'s `AmazonS3ConfigKey` knows (e.g.
/// `AWS_VIRTUAL_HOSTED_STYLE_REQUEST`, `AWS_SERVER_SIDE_ENCRYPTION`) are passed on; unknown
/// ones (`AWS_PROFILE`) are ignored: kiln does not read `~/.aws/credentials`.
///
/// Without any credential source kiln stops with an error saying what to set, rather than
/// silently waiting on the EC2 instance-metadata service (which only answers on EC2).
///
/// `Debug` hides the secret key and session token.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct S3Options {
    vars: BTreeMap<String, String>,
    chunk_size: usize,
    read_ahead: usize,
    max_retries: usize,
    retry_timeout: Duration,
}

impl Default for S3Options {
    fn default() -> S3Options {
        S3Options::new()
    }
}

impl fmt::Debug for S3Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vars: BTreeMap<&str, &str> = self
            .vars
            .iter()
            .map(|(k, v)| {
                let shown = if SECRETS.contains(&k.as_str()) {
                    "<redacted>"
                } else {
                    v.as_str()
                };
                (k.as_str(), shown)
            })
            .collect();
        f.debug_struct("S3Options")
            .field("vars", &vars)
            .field("chunk_size", &self.chunk_size)
            .field("read_ahead", &self.read_ahead)
            .field("max_retries", &self.max_retries)
            .field("retry_timeout", &self.retry_timeout)
            .finish()
    }
}

impl S3Options {
    /// No AWS settings (nothing read from the environment), 8 MiB chunks
    /// ([`DEFAULT_CHUNK_SIZE`]), one chunk of read-ahead ([`DEFAULT_READ_AHEAD`]), and
    /// `object_store`'s retry defaults (10 retries within 3 minutes, exponential backoff).
    pub fn new() -> S3Options {
        let retry = RetryConfig::default();
        S3Options {
            vars: BTreeMap::new(),
            chunk_size: DEFAULT_CHUNK_SIZE,
            read_ahead: DEFAULT_READ_AHEAD,
            max_retries: retry.max_retries,
            retry_timeout: retry.retry_timeout,
        }
    }

    /// [`S3Options::new`] with every `AWS_*` variable of the process environment.
    pub fn from_env() -> S3Options {
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| k.starts_with("AWS_"))
            .fold(S3Options::new(), |o, (k, v)| o.with(&k, v))
    }

    /// Sets an AWS setting by its environment-variable name (`"AWS_ENDPOINT_URL"`, …; case
    /// does not matter), overriding the environment's value.
    pub fn with(mut self, name: &str, value: impl Into<String>) -> S3Options {
        self.vars.insert(name.to_ascii_uppercase(), value.into());
        self
    }

    /// The value of an AWS setting, by its environment-variable name.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .get(&name.to_ascii_uppercase())
            .map(String::as_str)
    }

    /// Bytes per ranged GET while streaming an object (at least 1; default 8 MiB).
    pub fn with_chunk_size(mut self, bytes: usize) -> S3Options {
        self.chunk_size = bytes.max(1);
        self
    }

    /// Chunks requested ahead of the one being read (default 1: the next chunk downloads
    /// while the current one is consumed; 0 disables read-ahead). A reader holds at most
    /// `read_ahead + 1` chunks in memory.
    pub fn with_read_ahead(mut self, chunks: usize) -> S3Options {
        self.read_ahead = chunks;
        self
    }

    /// Retries of a failed request (throttling, server errors, dropped connections) and the
    /// time after which no retry starts.
    pub fn with_retries(mut self, max_retries: usize, timeout: Duration) -> S3Options {
        self.max_retries = max_retries;
        self.retry_timeout = timeout;
        self
    }

    /// Bytes per ranged GET.
    pub fn chunk_size(&self) -> usize {
        self.chunk_size
    }

    /// Chunks requested ahead.
    pub fn read_ahead(&self) -> usize {
        self.read_ahead
    }

    /// The endpoint: `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`, else `AWS_ENDPOINT`.
    fn endpoint(&self) -> Option<&str> {
        ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
            .iter()
            .find_map(|k| self.get(k))
    }

    /// `"endpoint X, region Y"`, for error messages.
    fn target(&self) -> String {
        let endpoint = self.endpoint().unwrap_or("AWS S3");
        let region = self
            .get("AWS_REGION")
            .or(self.get("AWS_DEFAULT_REGION"))
            .unwrap_or("us-east-1 (default)");
        format!("endpoint {endpoint}, region {region}")
    }

    fn flag(&self, name: &str) -> Option<bool> {
        self.get(name)
            .map(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
    }

    /// Checks that some credential source is configured.
    fn check_credentials(&self) -> Result<(), String> {
        let key = self.get("AWS_ACCESS_KEY_ID").is_some();
        let secret = self.get("AWS_SECRET_ACCESS_KEY").is_some();
        match (key, secret) {
            (true, true) => return Ok(()),
            (true, false) => {
                return Err(
                    "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not: set both".into(),
                );
            }
            (false, true) => {
                return Err(
                    "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not: set both".into(),
                );
            }
            (false, false) => {}
        }
        let other_source = self.flag("AWS_SKIP_SIGNATURE") == Some(true)
            || (self.get("AWS_WEB_IDENTITY_TOKEN_FILE").is_some()
                && self.get("AWS_ROLE_ARN").is_some())
            || self.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some()
            || self.get("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some()
            || self.flag("AWS_EC2_METADATA_DISABLED") == Some(false);
        if other_source {
            Ok(())
        } else {
            Err(
                "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (plus \
                 AWS_SESSION_TOKEN for temporary credentials), or AWS_SKIP_SIGNATURE=true for a \
                 public bucket; on EC2, AWS_EC2_METADATA_DISABLED=false uses the instance profile"
                    .into(),
            )
        }
    }

    /// Whether plain HTTP must be enabled for the endpoint: `Ok(true)` for a loopback
    /// `http://` endpoint, an error for another `http://` endpoint without `AWS_ALLOW_HTTP`.
    fn http_endpoint(&self) -> Result<bool, String> {
        let Some(endpoint) = self.endpoint() else {
            return Ok(false);
        };
        let Some(rest) = endpoint.strip_prefix("http://") else {
            return Ok(false);
        };
        let authority = rest.split('/').next().unwrap_or_default();
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => authority.split(':').next().unwrap_or_default(),
        };
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if loopback {
            Ok(true)
        } else if self.flag("AWS_ALLOW_HTTP") == Some(true) {
            Ok(false)
        } else {
            Err(format!(
                "the endpoint {endpoint} is plain http and not on this machine: use https, or set \
                 AWS_ALLOW_HTTP=true if the network is trusted"
            ))
        }
    }

    /// Builds a client for `bucket`.
    fn build(&self, bucket: &str) -> Result<Arc<dyn ObjectStore>, String> {
        self.check_credentials()?;
        let loopback_http = self.http_endpoint()?;
        let mut builder = AmazonS3Builder::new();
        for (name, value) in &self.vars {
            if let Ok(key) = name.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
                builder = builder.with_config(key, value);
            }
        }
        if loopback_http {
            builder = builder.with_allow_http(true);
        }
        let store = builder
            .with_bucket_name(bucket)
            .with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: self.max_retries,
                retry_timeout: self.retry_timeout,
            })
            .build()
            .map_err(|e| format!("invalid S3 configuration ({}): {e}", self.target()))?;
        Ok(Arc::new(store))
    }
}

/// Options set by [`set_s3_options`]; `None`: the environment's.
static OPTIONS: RwLock<Option<S3Options>> = RwLock::new(None);

/// Sets the [`S3Options`] that file sources use for `s3://` locations in this process, or
/// (`None`) goes back to reading the environment ([`S3Options::from_env`]) at each open —
/// for programs that configure storage from their own settings instead of `AWS_*` variables.
pub fn set_s3_options(options: Option<S3Options>) {
    *OPTIONS.write().unwrap_or_else(|p| p.into_inner()) = options;
}

/// The [`S3Options`] that file sources use now: those of [`set_s3_options`], else the
/// environment's.
pub fn s3_options() -> S3Options {
    OPTIONS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_else(S3Options::from_env)
}

/// The client for `bucket` with `options`, built on first use.
///
/// # Errors
/// `InvalidInput` (missing credentials, disallowed http endpoint, invalid settings), saying
/// what to set.
pub(crate) fn store(bucket: &str, options: &S3Options) -> io::Result<Arc<dyn ObjectStore>> {
    type Stores = Mutex<HashMap<(String, S3Options), Arc<dyn ObjectStore>>>;
    static STORES: std::sync::OnceLock<Stores> = std::sync::OnceLock::new();
    let stores = STORES.get_or_init(Default::default);
    let key = (bucket.to_string(), options.clone());
    if let Some(store) = stores.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(Arc::clone(store));
    }
    let store = options
        .build(bucket)
        .map_err(|message| io::Error::new(io::ErrorKind::InvalidInput, message))?;
    stores
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, Arc::clone(&store));
    Ok(store)
}

/// The object path of an S3 key.
///
/// # Errors
/// `InvalidInput` for an empty key or one `object_store` cannot address (empty segments as in
/// `a//b`, `.` or `..` segments).
pub(crate) fn object_path(key: &str) -> io::Result<ObjPath> {
    if key.is_empty() || key.ends_with('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the URL names a bucket or a folder, not an object: add the object's key",
        ));
    }
    ObjPath::parse(key).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the key {key:?} cannot be read by kiln: {e}"),
        )
    })
}

/// Turns an `object_store` error about an object or listing in `bucket` into an `io::Error`
/// whose message says what went wrong and what to check or set. (The message does not repeat
/// the URL: kiln's sources report it as the [`crate::DataError::Io`] path.)
pub(crate) fn describe(err: object_store::Error, bucket: &str, options: &S3Options) -> io::Error {
    use io::ErrorKind;
    let target = options.target();
    let text = error_chain(&err);
    let (kind, message) = match &err {
        object_store::Error::NotFound { .. } => {
            if text.contains("NoSuchBucket") {
                (
                    ErrorKind::NotFound,
                    format!(
                        "no such bucket {bucket:?} ({target}): check the bucket name, \
                         AWS_ENDPOINT_URL and AWS_REGION"
                    ),
                )
            } else {
                (
                    ErrorKind::NotFound,
                    format!(
                        "no such key in bucket {bucket:?} ({target}): check the key \
                         (list the bucket with Dataset::list_files(\"s3://{bucket}/*\"))"
                    ),
                )
            }
        }
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => (
            ErrorKind::PermissionDenied,
            format!(
                "access denied ({target}): check AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), AWS_REGION, and the bucket's \
                 policy: {text}"
            ),
        ),
        _ if text.contains("NoSuchBucket") => (
            ErrorKind::NotFound,
            format!(
                "no such bucket {bucket:?} ({target}): check the bucket name, \
                 AWS_ENDPOINT_URL and AWS_REGION"
            ),
        ),
        _ if is_connection_error(&text) => (
            ErrorKind::ConnectionRefused,
            format!(
                "cannot reach S3 ({target}): is the server running and the address \
                 right? Set AWS_ENDPOINT_URL for an S3-compatible server. ({text})"
            ),
        ),
        _ => (ErrorKind::Other, format!("{text} ({target})")),
    };
    io::Error::new(kind, message)
}

/// The error and its sources, joined by `": "`.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

fn is_connection_error(text: &str) -> bool {
    [
        "error sending request",
        "connect",
        "Connection refused",
        "dns error",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// The metadata of `s3://bucket/key`, with the client that read it.
///
/// # Errors
/// As [`store`] and [`describe`].
pub(crate) fn head(
    bucket: &str,
    key: &str,
    options: &S3Options,
) -> io::Result<(Arc<dyn ObjectStore>, ObjPath, ObjectMeta)> {
    let path = object_path(key)?;
    let store = store(bucket, options)?;
    let (s, p) = (Arc::clone(&store), path.clone());
    let meta = runtime::block_on(async move {
        match s.head(&p).await {
            // A HEAD answer has no body to tell a missing key from a missing bucket: a listing
            // of the key's own prefix (one short page) says "NoSuchBucket" when the bucket is
            // what is missing.
            Err(err @ object_store::Error::NotFound { .. }) => {
                match s.list(Some(&p)).next().await {
                    Some(Err(probe)) if error_chain(&probe).contains("NoSuchBucket") => Err(probe),
                    _ => Err(err),
                }
            }
            other => other,
        }
    })?
    .map_err(|e| describe(e, bucket, options))?;
    Ok((store, path, meta))
}

/// `tf.io.matching_files` for an S3 glob `s3://bucket/key_pattern` (`pattern` is `key_pattern`
/// compiled): the URLs of the objects whose keys match, sorted by bytes (a key component
/// starting with `.` only where the pattern has a literal `.`, unless `include_hidden`).
/// Lists the keys under the pattern's literal prefix
/// ([`glob_prefix`]) and matches them with the [`glob`] crate (`*`, `?` and `[…]` within one
/// `/`-separated component, `**` across components). A pattern without glob characters
/// matches the object of that exact key.
///
/// # Errors
/// As [`store`] and [`describe`] for the listing; `InvalidInput` for a prefix `object_store`
/// cannot address (`a//b*`).
pub(crate) fn matching(
    bucket: &str,
    key_pattern: &str,
    pattern: &glob::Pattern,
    include_hidden: bool,
    options: &S3Options,
) -> io::Result<Vec<String>> {
    let (prefix, _) = glob_prefix(key_pattern);
    // object_store lists whole path segments under a prefix: list the prefix's folder.
    let folder = match prefix.rfind('/') {
        Some(i) => Some(ObjPath::parse(&prefix[..i]).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the prefix {prefix:?} cannot be listed by kiln: {e}"),
            )
        })?),
        None => None,
    };
    let store = store(bucket, options)?;
    let keys = runtime::block_on(async move {
        let mut stream = store.list(folder.as_ref());
        let mut keys = Vec::new();
        while let Some(meta) = stream.next().await {
            keys.push(meta?.location.to_string());
        }
        Ok::<_, object_store::Error>(keys)
    })?
    .map_err(|e| describe(e, bucket, options))?;
    let match_options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: !include_hidden,
    };
    let mut urls: Vec<String> = keys
        .into_iter()
        .filter(|k| pattern.matches_with(k, match_options))
        .map(|k| s3_url(bucket, &k))
        .collect();
    urls.sort();
    Ok(urls)
}

/// Every object key under the folder `prefix` (`""`: the whole bucket), recursively, sorted
/// by bytes — the listing behind `s3://` image folders.
///
/// # Errors
/// As [`store`] and [`describe`]; `InvalidInput` for a prefix `object_store` cannot address.
pub(crate) fn list_folder(
    bucket: &str,
    prefix: &str,
    options: &S3Options,
) -> io::Result<Vec<String>> {
    let prefix = prefix.trim_end_matches('/');
    let folder = if prefix.is_empty() {
        None
    } else {
        Some(ObjPath::parse(prefix).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the prefix {prefix:?} cannot be listed by kiln: {e}"),
            )
        })?)
    };
    let store = store(bucket, options)?;
    let mut keys = runtime::block_on(async move {
        let mut stream = store.list(folder.as_ref());
        let mut keys = Vec::new();
        while let Some(meta) = stream.next().await {
            keys.push(meta?.location.to_string());
        }
        Ok::<_, object_store::Error>(keys)
    })?
    .map_err(|e| describe(e, bucket, options))?;
    keys.sort();
    Ok(keys)
}

/// Objects up to this size are uploaded with one `PutObject`; larger ones with a multipart
/// upload in [`UPLOAD_PART_SIZE`] parts (S3 allows at most 5 GiB in one `PutObject`).
pub(crate) const SINGLE_PUT_LIMIT: u64 = 64 << 20;

/// Part size of multipart uploads: 16 MiB (S3: at least 5 MiB except the last part, at most
/// 10,000 parts, so objects up to about 156 GiB).
pub(crate) const UPLOAD_PART_SIZE: usize = 16 << 20;

/// Uploads the local file `local` as the object `key` of `bucket`. S3 makes the object
/// visible only once the whole upload has completed, so readers never see a partial file; a
/// failed multipart upload is aborted.
///
/// # Errors
/// As [`store`] and [`describe`]; the local file's read errors.
pub(crate) fn upload(
    bucket: &str,
    key: &str,
    local: &std::path::Path,
    options: &S3Options,
) -> io::Result<()> {
    upload_with_limit(bucket, key, local, options, SINGLE_PUT_LIMIT)
}

/// [`upload`] with the single-request limit as an argument (tests exercise the multipart path
/// on small files with 0).
pub(crate) fn upload_with_limit(
    bucket: &str,
    key: &str,
    local: &std::path::Path,
    options: &S3Options,
    single_put_limit: u64,
) -> io::Result<()> {
    use std::io::Read;
    let path = object_path(key)?;
    let store = store(bucket, options)?;
    let mut file = std::fs::File::open(local)?;
    let size = file.metadata()?.len();
    if size <= single_put_limit {
        let mut bytes = Vec::with_capacity(size as usize);
        file.read_to_end(&mut bytes)?;
        return runtime::block_on(async move {
            store
                .put(&path, object_store::PutPayload::from(bytes))
                .await
                .map(|_| ())
        })?
        .map_err(|e| describe(e, bucket, options));
    }
    let result = runtime::block_on(async move {
        let upload = store.put_multipart(&path).await.map_err(io::Error::other)?;
        let mut writer =
            object_store::WriteMultipart::new_with_chunk_size(upload, UPLOAD_PART_SIZE);
        let mut buf = vec![0u8; UPLOAD_PART_SIZE];
        loop {
            let n = match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    let _ = writer.abort().await;
                    return Err(e);
                }
            };
            if let Err(e) = writer.wait_for_capacity(4).await {
                let _ = writer.abort().await;
                return Err(io::Error::other(e));
            }
            writer.write(&buf[..n]);
        }
        writer.finish().await.map(|_| ()).map_err(io::Error::other)
    })?;
    result.map_err(|e| match e.into_inner() {
        Some(inner) => match inner.downcast::<object_store::Error>() {
            Ok(store_error) => describe(*store_error, bucket, options),
            Err(other) => io::Error::other(other),
        },
        None => io::Error::other("upload failed"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> S3Options {
        S3Options::new()
            .with("AWS_ACCESS_KEY_ID", "id")
            .with("aws_secret_access_key", "very-secret")
    }

    #[test]
    fn missing_credentials_say_what_to_set() {
        let err = store("b", &S3Options::new()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let text = err.to_string();
        assert!(text.starts_with("no AWS credentials"), "{text}");
        for var in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SKIP_SIGNATURE",
        ] {
            assert!(text.contains(var), "{text}");
        }
        let half = S3Options::new().with("AWS_ACCESS_KEY_ID", "id");
        let err = store("b", &half).unwrap_err();
        assert!(
            err.to_string()
                .contains("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"),
            "{err}"
        );
        // Other credential sources are accepted without static keys.
        for opts in [
            S3Options::new().with("AWS_SKIP_SIGNATURE", "true"),
            S3Options::new().with("AWS_EC2_METADATA_DISABLED", "false"),
            S3Options::new()
                .with("AWS_WEB_IDENTITY_TOKEN_FILE", "/tmp/t")
                .with("AWS_ROLE_ARN", "arn:aws:iam::1:role/r"),
        ] {
            assert!(opts.check_credentials().is_ok(), "{opts:?}");
        }
        assert!(keys().check_credentials().is_ok());
    }

    #[test]
    fn plain_http_only_to_loopback_unless_allowed() {
        for endpoint in [
            "http://127.0.0.1:5555",
            "http://localhost:9000/",
            "http://[::1]:80",
        ] {
            let opts = keys().with("AWS_ENDPOINT_URL", endpoint);
            assert_eq!(opts.http_endpoint(), Ok(true), "{endpoint}");
        }
        let remote = keys().with("AWS_ENDPOINT_URL", "http://minio.example:9000");
        let err = store("b", &remote).unwrap_err().to_string();
        assert!(err.contains("http://minio.example:9000"), "{err}");
        assert!(err.contains("AWS_ALLOW_HTTP=true"), "{err}");
        assert_eq!(
            remote
                .clone()
                .with("AWS_ALLOW_HTTP", "true")
                .http_endpoint(),
            Ok(false)
        );
        let tls = keys().with("AWS_ENDPOINT_URL", "https://minio.example");
        assert_eq!(tls.http_endpoint(), Ok(false));
        // AWS_ENDPOINT_URL_S3 takes precedence.
        let both = keys()
            .with("AWS_ENDPOINT_URL", "https://a.example")
            .with("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1");
        assert_eq!(both.endpoint(), Some("http://127.0.0.1:1"));
    }

    #[test]
    fn debug_hides_secrets_and_names_are_case_insensitive() {
        let opts = keys().with("AWS_SESSION_TOKEN", "tok-123");
        let shown = format!("{opts:?}");
        assert!(
            !shown.contains("very-secret") && !shown.contains("tok-123"),
            "{shown}"
        );
        assert!(
            shown.contains("AWS_ACCESS_KEY_ID") && shown.contains("\"id\""),
            "{shown}"
        );
        assert_eq!(opts.get("aws_secret_access_key"), Some("very-secret"));
        assert_eq!(opts.chunk_size(), DEFAULT_CHUNK_SIZE);
        assert_eq!(opts.read_ahead(), DEFAULT_READ_AHEAD);
        assert_eq!(opts.clone().with_chunk_size(0).chunk_size(), 1);
    }

    #[test]
    fn keys_that_cannot_be_objects() {
        let err = object_path("").unwrap_err();
        assert!(err.to_string().contains("not an object"), "{err}");
        let err = object_path("a//c").unwrap_err();
        assert!(err.to_string().contains("\"a//c\""), "{err}");
        assert_eq!(object_path("a/c.csv").unwrap().as_ref(), "a/c.csv");
    }

    #[test]
    fn an_unreachable_endpoint_is_named() {
        // Port 1 on loopback: nothing listens there; no retries keep the test fast.
        let opts = keys()
            .with("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
            .with_retries(0, Duration::from_secs(5));
        let err = head("bucket", "x.csv", &opts).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("cannot reach S3"), "{text}");
        assert!(text.contains("http://127.0.0.1:1"), "{text}");
        assert!(text.contains("AWS_ENDPOINT_URL"), "{text}");
    }
}
