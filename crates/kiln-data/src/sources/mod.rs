//! File and generator sources for [`Dataset`](crate::Dataset), with tf.data's names.
//!
//! | kiln | tf.data / Keras | elements |
//! |---|---|---|
//! | [`Dataset::range`](crate::Dataset::range) (`range.rs`) | `tf.data.Dataset.range` | `{"value": int64 []}` |
//! | [`Dataset::text_line_dataset`](crate::Dataset::text_line_dataset) (`text_line.rs`) | `tf.data.TextLineDataset` | `{"line": string []}` |
//! | [`Dataset::csv_dataset`](crate::Dataset::csv_dataset) (`csv_dataset.rs`) | `tf.data.experimental.CsvDataset` | one scalar per selected column |
//! | [`Dataset::make_csv_dataset`](crate::Dataset::make_csv_dataset) (`make_csv.rs`) | `tf.data.experimental.make_csv_dataset` | batches: features by column name, then the label |
//! | [`Dataset::list_files`](crate::Dataset::list_files), [`matching_files`] (`list_files.rs`) | `tf.data.Dataset.list_files`, `tf.io.matching_files` | `{"filename": string []}` |
//! | [`Dataset::timeseries_dataset_from_array`](crate::Dataset::timeseries_dataset_from_array) (`timeseries.rs`) | `keras.utils.timeseries_dataset_from_array` | windows `[sequence_length, …]` and their targets |
//! | [`Dataset::image_dataset_from_directory`](crate::Dataset::image_dataset_from_directory) (`image_folder.rs`) | `keras.utils.image_dataset_from_directory` | `{"image": uint8 [h, w, c], "label": int64 []}` |
//!
//! File names may be local paths, `file://` URLs or `s3://bucket/key` URLs
//! ([`crate::storage`]); [`Dataset::list_files`](crate::Dataset::list_files) globs all three.
//! File sources are lazy: nothing is opened until iteration, files are read in the order
//! given, one at a time, and every [`Dataset::iter`](crate::Dataset::iter) reads them again.
//! A file that cannot be opened or read yields one [`DataError::Io`] and iteration goes on
//! with the next file (the consumer decides whether to stop, as everywhere in kiln-data).
//!
//! Sources that can skip bad records (`ignore_errors`) count what they skip in a
//! [`SkipCounter`] the caller keeps a clone of, and in the iteration's statistics
//! ([`crate::DatasetIter::skip_stats`]), as [`Dataset::ignore_errors`](crate::Dataset::ignore_errors)
//! does for any dataset.

mod csv_dataset;
mod image_folder;
mod list_files;
mod make_csv;
mod range;
mod text_folder;
mod text_line;
mod timeseries;

use std::path::Path;

use crate::error::Result;

pub use crate::dataset::SkipCounter;
pub use csv_dataset::{CsvOptions, RecordDefault};
pub use image_folder::{
    ColorMode, IMAGE_COMPONENT, ImageFolderOptions, LABEL_COMPONENT, image_class_names,
};
pub use list_files::{LIST_FILES_COMPONENT, matching_files, matching_files_with};
pub use make_csv::MakeCsvOptions;
pub(crate) use make_csv::infer_type;
pub use range::RANGE_COMPONENT;
pub use text_folder::{LabelMode, TEXT_COMPONENT, TextFolderOptions};
pub use text_line::TEXT_LINE_COMPONENT;
pub use timeseries::TimeseriesOptions;

/// Opens `path` — a local path, `file://` URL or `s3://` URL ([`crate::storage`]) — for
/// reading, mapping failure to [`DataError::Io`].
pub(crate) fn open(path: &Path) -> Result<crate::storage::SourceReader> {
    crate::storage::open(path)
}

/// The bytes of a path, for `string` components (lossless on Unix; other platforms'
/// non-UTF-8 paths are converted lossily).
pub(crate) fn path_bytes(path: &Path) -> Vec<u8> {
    path.as_os_str().as_encoded_bytes().to_vec()
}

/// A path from the bytes of a `string` component (the inverse of [`path_bytes`] for paths
/// this process produced).
pub(crate) fn path_from_bytes(bytes: &[u8]) -> std::path::PathBuf {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        std::path::PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
    }
    #[cfg(not(unix))]
    {
        std::path::PathBuf::from(String::from_utf8_lossy(bytes).into_owned())
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use std::path::{Path, PathBuf};

    /// Writes `contents` to `dir/name` and returns the path.
    pub fn write(dir: &Path, name: &str, contents: &[u8]) -> PathBuf {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, contents).unwrap();
        path
    }

    /// The text of every `string` scalar component `name` of one iteration (panics on errors).
    pub fn strings(ds: &crate::Dataset, name: &str) -> Vec<String> {
        ds.iter()
            .map(|e| {
                let e = e.unwrap();
                let v = e.get(name).unwrap().data().as_strings().unwrap().to_vec();
                v.into_iter()
                    .map(|b| String::from_utf8(b).unwrap())
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
            .concat()
    }
}
