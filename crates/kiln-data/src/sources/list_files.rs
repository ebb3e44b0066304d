//! [`Dataset::list_files`] and [`matching_files`]: `tf.data.Dataset.list_files` and
//! `tf.io.matching_files`.

use std::path::PathBuf;

use super::path_bytes;
use crate::dataset::Dataset;
use crate::element::{Array, Buffer, Element};
use crate::error::{DataError, Result};

/// Component name of [`Dataset::list_files`]'s elements.
pub const LIST_FILES_COMPONENT: &str = "filename";

/// `tf.io.matching_files(pattern)`: every path matching the glob `pattern`, sorted by the
/// bytes of the path (TensorFlow's `GetMatchingPaths` sorts too), so the result is the same
/// on every run. Hidden files and folders are left out: [`matching_files_with`] with
/// `include_hidden = false`.
///
/// Patterns use the [`glob`] crate's syntax, a superset of TensorFlow's: `*` and `?` match
/// within one path component, `[abc]` / `[!abc]` match one character, `**` matches any
/// number of directories. Relative patterns are resolved against the current directory.
/// Directories that match are listed too, as in TensorFlow.
///
/// The pattern may also be a URL ([`crate::storage`]): `file:///dir/*.csv` globs the local
/// directory and returns `file://` URLs; `s3://bucket/dir/*.tfrecord` lists the keys under the
/// literal prefix (`dir/`) and returns the `s3://` URLs of those matching the glob, `*`, `?`
/// and `[…]` staying within one `/`-separated component and `**` crossing them, as locally.
///
/// # Errors
/// [`DataError::InvalidArgument`] for a malformed pattern, or — with tf.data's wording —
/// `No files matched pattern: <pattern>` when nothing matches (saying so when hidden files
/// would have); [`DataError::Io`] when a directory on the way cannot be read, or (naming the
/// pattern) when a bucket cannot be listed: credentials, bucket, endpoint, as
/// [`crate::storage::open`] reports them.
pub fn matching_files(pattern: &str) -> Result<Vec<PathBuf>> {
    matching_files_with(pattern, false)
}

/// [`matching_files`], choosing whether hidden files and folders match.
///
/// With `include_hidden = false` (what [`matching_files`] does), a path component whose name
/// starts with `.` matches only a pattern component that starts with a literal `.`, as in
/// the shell and Python's `glob.glob(include_hidden=False)`: `data/*.csv` leaves out
/// `data/._a.csv` (a macOS companion file) and `data/**/*.csv` does not descend into
/// `data/.cache/`, while `data/.*.csv` matches hidden files on purpose. With `true`, `*`,
/// `?`, `[…]` and `**` match leading dots too, as TensorFlow's globs do.
///
/// # Errors
/// As [`matching_files`].
pub fn matching_files_with(pattern: &str, include_hidden: bool) -> Result<Vec<PathBuf>> {
    let files = matches(pattern, include_hidden)?;
    if !files.is_empty() {
        return Ok(files);
    }
    let hidden = if include_hidden {
        0
    } else {
        matches(pattern, true)?.len()
    };
    let mut message = format!("No files matched pattern: {pattern}");
    if hidden > 0 {
        message += &format!(
            " ({hidden} hidden files match it, names starting with '.': they are left out \
             unless include_hidden = true)"
        );
    } else if crate::storage::scheme(pattern) == Some("s3") {
        message += " (check the bucket, the key prefix and the glob; * does not cross /, ** does)";
    } else {
        message += " (check the directory and the glob; relative patterns start at the current \
                     directory)";
    }
    Err(DataError::InvalidArgument(message))
}

/// The paths matching `pattern` (a local pattern or URL), sorted; empty when none does.
fn matches(pattern: &str, include_hidden: bool) -> Result<Vec<PathBuf>> {
    if crate::storage::scheme(pattern).is_some() {
        crate::storage::matching_urls(pattern, include_hidden, local_matching_files)
    } else {
        local_matching_files(pattern, include_hidden)
    }
}

/// The local paths matching the plain local `pattern`, sorted (empty when none does).
fn local_matching_files(pattern: &str, include_hidden: bool) -> Result<Vec<PathBuf>> {
    let options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: false,
        require_literal_leading_dot: !include_hidden,
    };
    let entries = glob::glob_with(pattern, options).map_err(|e| {
        DataError::InvalidArgument(format!(
            "invalid file pattern {pattern:?}: {} at character {}",
            e.msg, e.pos
        ))
    })?;
    let mut files = Vec::new();
    for entry in entries {
        match entry {
            Ok(path) => files.push(path),
            Err(e) => {
                let path = e.path().to_path_buf();
                return Err(DataError::Io {
                    path,
                    source: e.into(),
                });
            }
        }
    }
    files.sort_by(|a, b| {
        a.as_os_str()
            .as_encoded_bytes()
            .cmp(b.as_os_str().as_encoded_bytes())
    });
    Ok(files)
}

impl Dataset {
    /// `tf.data.Dataset.list_files(pattern, shuffle, seed)`: the paths matching the glob
    /// `pattern` ([`matching_files`]), one element `{"filename": string []}`
    /// ([`LIST_FILES_COMPONENT`]) per path.
    ///
    /// With `shuffle = false` the order is sorted and the same every time. With
    /// `shuffle = true` the dataset is, as in TensorFlow, the sorted list followed by
    /// `shuffle(number_of_files, seed, reshuffle_each_iteration = true)`: every epoch a new
    /// order, the same sequence of orders for the same `seed`, a random one for `None`
    /// (tf.data's default `shuffle=None` means `true`). The glob runs once, here, not per
    /// epoch. Cardinality: the number of files.
    ///
    /// # Errors
    /// As [`matching_files`]: `No files matched pattern: <pattern>`, a malformed pattern, or
    /// an unreadable directory.
    pub fn list_files(pattern: &str, shuffle: bool, seed: Option<u64>) -> Result<Dataset> {
        let files = matching_files(pattern)?;
        let n = files.len();
        let names = Buffer::String(files.iter().map(|p| path_bytes(p)).collect());
        let ds = Dataset::from_tensor_slices(
            Element::new().with(LIST_FILES_COMPONENT, Array::new(vec![n], names)?),
        )?;
        Ok(if shuffle {
            ds.shuffle(n, seed, true)
        } else {
            ds
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::Cardinality;
    use crate::sources::testutil::{strings, write};

    fn names(ds: &Dataset, dir: &std::path::Path) -> Vec<String> {
        let prefix = format!("{}/", dir.display());
        strings(ds, LIST_FILES_COMPONENT)
            .into_iter()
            .map(|p| p.strip_prefix(&prefix).unwrap().to_string())
            .collect()
    }

    #[test]
    fn unshuffled_is_sorted_and_filters_by_the_glob() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.csv", "a.csv", "c.txt", "a-1.csv", "sub/d.csv", "B.csv"] {
            write(dir.path(), name, b"x");
        }
        let pattern = format!("{}/*.csv", dir.path().display());
        let ds = Dataset::list_files(&pattern, false, None).unwrap();
        assert_eq!(ds.cardinality(), Cardinality::Finite(4));
        let expected = vec!["B.csv", "a-1.csv", "a.csv", "b.csv"];
        assert_eq!(names(&ds, dir.path()), expected);
        assert_eq!(names(&ds, dir.path()), expected, "same order every epoch");
        let deep = format!("{}/**/*.csv", dir.path().display());
        let all = Dataset::list_files(&deep, false, None).unwrap();
        assert_eq!(
            names(&all, dir.path()),
            vec!["B.csv", "a-1.csv", "a.csv", "b.csv", "sub/d.csv"]
        );
        let files = matching_files(&format!("{}/?.csv", dir.path().display())).unwrap();
        assert_eq!(
            files,
            vec![
                dir.path().join("B.csv"),
                dir.path().join("a.csv"),
                dir.path().join("b.csv")
            ]
        );
    }

    #[test]
    fn shuffled_is_a_seeded_permutation_that_changes_per_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let mut sorted: Vec<String> = (0..20).map(|i| format!("f{i:02}.txt")).collect();
        for name in &sorted {
            write(dir.path(), name, b"");
        }
        let pattern = format!("{}/f*.txt", dir.path().display());
        let ds = Dataset::list_files(&pattern, true, Some(7)).unwrap();
        let epoch1 = names(&ds, dir.path());
        let epoch2 = names(&ds, dir.path());
        assert_ne!(epoch1, sorted, "shuffled");
        assert_ne!(epoch1, epoch2, "reshuffled each epoch");
        // Rebuilding with the same seed replays the same orders.
        let again = Dataset::list_files(&pattern, true, Some(7)).unwrap();
        assert_eq!(names(&again, dir.path()), epoch1);
        assert_eq!(names(&again, dir.path()), epoch2);
        let other = Dataset::list_files(&pattern, true, Some(8)).unwrap();
        assert_ne!(names(&other, dir.path()), epoch1);
        // A permutation: nothing lost or duplicated.
        let mut got = epoch1.clone();
        got.sort();
        sorted.sort();
        assert_eq!(got, sorted);
    }

    #[test]
    fn no_match_and_bad_patterns_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = format!("{}/*.nothing", dir.path().display());
        let err = Dataset::list_files(&pattern, false, None).unwrap_err();
        assert!(matches!(err, DataError::InvalidArgument(_)));
        assert!(
            err.to_string()
                .contains(&format!("No files matched pattern: {pattern}")),
            "{err}"
        );
        let err = matching_files("data/[.csv").unwrap_err();
        assert!(matches!(err, DataError::InvalidArgument(_)));
        assert!(err.to_string().contains("\"data/[.csv\""), "{err}");
    }
}
