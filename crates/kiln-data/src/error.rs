//! The crate's error type.
//!
//! Every fallible operation in `kiln-data` returns [`Result`]. File readers ([`crate::idx`],
//! [`crate::npy`]) report [`DataError::Io`] when the file cannot be read and
//! [`DataError::Format`] — naming the file and the byte offset — when its contents are corrupt,
//! truncated or of an unsupported kind; CSV rows that cannot be parsed as [`DataError::Record`]
//! (`file:line`); TFRecord files report damaged records as [`DataError::TfRecord`] and
//! unparsable `tf.train.Example`s as [`DataError::Example`]. Pipeline transformations report
//! invalid arguments ([`DataError::InvalidArgument`]) and pass user map-function errors through
//! unchanged; the file cache reports [`DataError::Cache`] for a stale or locked cache file.

use std::path::PathBuf;

/// `std::result::Result` specialised to [`DataError`].
pub type Result<T> = std::result::Result<T, DataError>;

/// Everything that can go wrong while reading data files or running an input pipeline.
#[derive(thiserror::Error, Debug)]
pub enum DataError {
    /// The file could not be opened, read or written.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },

    /// The file's contents are corrupt, truncated or unsupported.
    #[error("{}: {message} at byte {offset}", path.display())]
    Format {
        /// The file involved.
        path: PathBuf,
        /// Byte offset of the problem (in the decompressed stream for gzip-compressed IDX files).
        offset: u64,
        /// What is wrong.
        message: String,
    },

    /// Array shapes or dtypes do not fit together (stacking, reshaping, building arrays).
    #[error("shape error: {0}")]
    Shape(String),

    /// An element lacks a component that a step needs.
    #[error("element has no component {name:?} (components present: {present:?})")]
    MissingComponent {
        /// The component looked for.
        name: String,
        /// The components the element does have, in order.
        present: Vec<String>,
    },

    /// An error raised by a user map function (or a panic inside one, turned into an error).
    #[error("map function failed: {0}")]
    Map(String),

    /// An argument out of range: `batch_size` 0, shuffle `buffer_size` 0, components with
    /// different first dimensions in `from_tensor_slices`, …
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A record of a text file (a CSV row) that cannot be parsed, at physical line `line`
    /// (1-based) of `path`. Displayed as `path:line: message`, the form editors jump to.
    #[error("{}:{line}: {message}", path.display())]
    Record {
        /// The file involved.
        path: PathBuf,
        /// 1-based line number of the record's first line (a quoted field may span lines).
        line: u64,
        /// What is wrong (column, value, expected type) and how to fix it.
        message: String,
    },

    /// A file (an image) whose contents cannot be decoded.
    #[error("cannot decode {}: {message}", path.display())]
    Decode {
        /// The file involved.
        path: PathBuf,
        /// The decoder's message.
        message: String,
    },

    /// A TFRecord file's framing is damaged: a record cut short (`"truncated record"`) or a
    /// checksum that does not match (`"corrupted record"`), as TensorFlow's `record_reader.cc`
    /// reports them. `offset` is where the damaged record starts (in the decompressed stream
    /// for GZIP / ZLIB files).
    #[error("{}: {message} at byte {offset} (record index {index}): {detail}", path.display())]
    TfRecord {
        /// The file involved.
        path: PathBuf,
        /// 0-based index of the damaged record in its file.
        index: u64,
        /// Byte offset of the start of the damaged record.
        offset: u64,
        /// `"truncated record"` or `"corrupted record"`.
        message: String,
        /// Which part is damaged, and how to fix it.
        detail: String,
    },

    /// A serialized `tf.train.Example` cannot be decoded, or does not match the parsing spec
    /// (missing feature without default, wrong type, wrong number of values).
    #[error("{}", example_error_text(.path.as_deref(), *.record, *.offset, .feature.as_deref(), .message))]
    Example {
        /// The TFRecord file the record came from, when known (parsing the records of
        /// [`crate::Dataset::tfrecord`] directly).
        path: Option<PathBuf>,
        /// Byte offset of the record's start in that file (in the decompressed stream for
        /// GZIP / ZLIB files), when known.
        offset: Option<u64>,
        /// 0-based index of the record: in its file when `path` is known, else in the dataset
        /// being parsed.
        record: u64,
        /// The feature involved, when the problem is one feature's.
        feature: Option<String>,
        /// What is wrong: expected vs found, and the fix.
        message: String,
    },

    /// A buffer larger than the memory this process can have: found before allocating
    /// ([`crate::alloc`]), or refused by the allocator. The message says what needed how much.
    #[error("out of memory: {0}")]
    Memory(String),

    /// A preprocessing op ([`crate::Preprocess`]) cannot handle a component's values.
    #[error("preprocessing op {op} on component {component:?}: {message}")]
    Preprocess {
        /// The op's name (`rescale`, `random_crop`, …).
        op: String,
        /// The component it was applied to.
        component: String,
        /// What is wrong and how to fix it.
        message: String,
    },

    /// A dataset cache file cannot be used: it was built by a different input pipeline, or
    /// another iterator holds its lock. The message says how to fix it (delete the file, or
    /// use another cache prefix).
    #[error("cache {}: {message}", path.display())]
    Cache {
        /// The cache or lock file involved.
        path: PathBuf,
        /// What is wrong and how to fix it.
        message: String,
    },
}

impl DataError {
    /// The file (or URL) the error is about, when it names one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            DataError::Io { path, .. }
            | DataError::Format { path, .. }
            | DataError::Record { path, .. }
            | DataError::Decode { path, .. }
            | DataError::TfRecord { path, .. }
            | DataError::Cache { path, .. } => Some(path),
            DataError::Example { path, .. } => path.as_deref(),
            DataError::Shape(_)
            | DataError::MissingComponent { .. }
            | DataError::Map(_)
            | DataError::Memory(_)
            | DataError::InvalidArgument(_)
            | DataError::Preprocess { .. } => None,
        }
    }
}

/// The text of [`DataError::Example`].
fn example_error_text(
    path: Option<&std::path::Path>,
    record: u64,
    offset: Option<u64>,
    feature: Option<&str>,
    message: &str,
) -> String {
    let mut place = match path {
        Some(path) => format!("{}: tf.train.Example record {record}", path.display()),
        None => format!("tf.train.Example record {record}"),
    };
    if let Some(offset) = offset {
        place.push_str(&format!(" (at byte {offset})"));
    }
    match feature {
        Some(name) => format!("{place}, feature {name:?}: {message}"),
        None => format!("{place}: {message}"),
    }
}

/// A [`DataError::Format`] at byte `offset` of `path`.
pub(crate) fn format_error(
    path: &std::path::Path,
    offset: usize,
    message: impl Into<String>,
) -> DataError {
    DataError::Format {
        path: path.to_path_buf(),
        offset: offset as u64,
        message: message.into(),
    }
}
