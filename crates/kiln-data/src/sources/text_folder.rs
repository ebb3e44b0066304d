//! [`Dataset::text_dataset_from_directory`]: Keras' `text_dataset_from_directory` with
//! `labels="inferred"`, unbatched.
//!
//! One class per subdirectory of the directory (sorted names, hidden ones excepted), the
//! `.txt` files of a class found recursively, in the order and with the hidden-file rules of
//! the image-folder source ([`super::image_folder`]). Local directories only.

use std::path::Path;

use super::image_folder::{class_files, image_class_names, io_error};
use super::{LABEL_COMPONENT, path_bytes, path_from_bytes};
use crate::dataset::Dataset;
use crate::element::{Array, Buffer, Element};
use crate::error::{DataError, Result};

/// The text component of [`Dataset::text_dataset_from_directory`]'s elements.
pub const TEXT_COMPONENT: &str = "text";

/// Keras' `label_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LabelMode {
    /// The class index, `int64 []` (Keras: `int32`).
    #[default]
    Int,
    /// A one-hot `float32 [num_classes]` vector.
    Categorical,
    /// `float32 [1]`, 0 or 1 (exactly two classes).
    Binary,
}

impl std::str::FromStr for LabelMode {
    type Err = DataError;

    fn from_str(s: &str) -> Result<LabelMode> {
        Ok(match s {
            "int" => LabelMode::Int,
            "categorical" => LabelMode::Categorical,
            "binary" => LabelMode::Binary,
            other => {
                return Err(DataError::InvalidArgument(format!(
                    "unknown label_mode \"{other}\"; allowed: \"int\", \"categorical\", \
                     \"binary\""
                )));
            }
        })
    }
}

/// Options of [`Dataset::text_dataset_from_directory`].
#[derive(Debug, Clone, Default)]
pub struct TextFolderOptions {
    /// Classes in label order (default: the sorted subdirectories).
    pub class_names: Option<Vec<String>>,
    /// How labels are encoded (default [`LabelMode::Int`]).
    pub label_mode: LabelMode,
    /// Keep at most this many bytes of each file (`tf.strings.substr(text, 0, max_length)`).
    pub max_length: Option<usize>,
    /// Descend into linked directories inside class folders.
    pub follow_links: bool,
    /// Read hidden files and folders (names starting with `.`) inside class folders.
    pub include_hidden: bool,
}

fn is_text_name(name: &str) -> bool {
    name.to_lowercase().ends_with(".txt")
}

impl Dataset {
    /// `keras.utils.text_dataset_from_directory(directory, labels="inferred", label_mode,
    /// class_names, max_length, shuffle=False)`, unbatched: one element per `.txt` file,
    /// `{"text": string [], "label": ...}` ([`TEXT_COMPONENT`], [`LABEL_COMPONENT`]), the
    /// label encoded by `options.label_mode` from the index of the file's class. Files are
    /// listed now and read during iteration.
    ///
    /// # Errors
    /// Now: [`DataError::Io`] for an unreadable directory; [`DataError::InvalidArgument`] for a
    /// `class_names` entry that is not a subdirectory, `binary` labels without exactly two
    /// classes, or no `.txt` file. During iteration: [`DataError::Io`] for an unreadable file.
    pub fn text_dataset_from_directory(
        directory: impl AsRef<Path>,
        options: TextFolderOptions,
    ) -> Result<Dataset> {
        let directory = directory.as_ref();
        let subdirs = image_class_names(directory)?;
        let classes = match &options.class_names {
            Some(names) => {
                if let Some(bad) = names.iter().find(|n| !subdirs.contains(n)) {
                    return Err(DataError::InvalidArgument(format!(
                        "text_dataset_from_directory: class_names names {bad:?}, which is not a \
                         subdirectory of {}; subdirectories: {subdirs:?}",
                        directory.display()
                    )));
                }
                names.clone()
            }
            None => subdirs,
        };
        if options.label_mode == LabelMode::Binary && classes.len() != 2 {
            return Err(DataError::InvalidArgument(format!(
                "text_dataset_from_directory: label_mode \"binary\" needs exactly 2 classes, \
                 found {} ({classes:?}); use \"int\" or \"categorical\"",
                classes.len()
            )));
        }
        let mut paths = Vec::new();
        let mut labels = Vec::new();
        for (label, class) in classes.iter().enumerate() {
            let dir = directory.join(class);
            for file in class_files(
                &dir,
                options.follow_links,
                options.include_hidden,
                is_text_name,
            )? {
                paths.push(path_bytes(&file));
                labels.push(label as i64);
            }
        }
        let n = paths.len();
        if n == 0 {
            return Err(DataError::InvalidArgument(format!(
                "text_dataset_from_directory: no .txt files found in {} (classes {classes:?}); \
                 expected one subdirectory of .txt files per class",
                directory.display()
            )));
        }
        let ds = Dataset::from_tensor_slices(
            Element::new()
                .with("path", Array::new(vec![n], Buffer::String(paths))?)
                .with(LABEL_COMPONENT, Array::new(vec![n], Buffer::I64(labels))?),
        )?;
        let (mode, max_length, num_classes) =
            (options.label_mode, options.max_length, classes.len());
        Ok(ds.map(
            move |e| {
                let path = e
                    .require("path")?
                    .data()
                    .as_strings()
                    .and_then(|s| s.first().cloned());
                let path = path_from_bytes(&path.unwrap_or_default());
                let mut text = std::fs::read(&path).map_err(|err| io_error(&path, err))?;
                if let Some(m) = max_length {
                    text.truncate(m);
                }
                let label = e.require(LABEL_COMPONENT)?.data().to_i64()[0];
                Ok(Element::new()
                    .with(TEXT_COMPONENT, Array::string_scalar(text))
                    .with(LABEL_COMPONENT, encode_label(label, mode, num_classes)?))
            },
            crate::dataset::Parallelism::Sequential,
        ))
    }
}

/// A class index as `mode` encodes it.
fn encode_label(label: i64, mode: LabelMode, num_classes: usize) -> Result<Array> {
    match mode {
        LabelMode::Int => Array::scalar(Buffer::I64(vec![label])),
        LabelMode::Binary => Array::new(vec![1], Buffer::F32(vec![label as f32])),
        LabelMode::Categorical => {
            let mut v = vec![0.0f32; num_classes];
            v[label as usize] = 1.0;
            Array::new(vec![num_classes], Buffer::F32(v))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::testutil::write;

    #[test]
    fn reads_sorted_classes_skips_hidden_and_encodes_labels() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "pos/b.txt", b"Great movie!");
        write(dir.path(), "pos/a.txt", b"Loved it");
        write(dir.path(), "pos/.hidden.txt", b"never read");
        write(dir.path(), "neg/x.txt", b"Awful, truly awful");
        write(dir.path(), "neg/notes.md", b"not a .txt file");
        write(dir.path(), ".cache/z.txt", b"not a class");
        let read = |options: TextFolderOptions| -> Vec<(String, Vec<f32>)> {
            Dataset::text_dataset_from_directory(dir.path(), options)
                .unwrap()
                .iter()
                .map(|e| {
                    let e = e.unwrap();
                    let text = e
                        .require(TEXT_COMPONENT)
                        .unwrap()
                        .data()
                        .as_strings()
                        .unwrap()[0]
                        .clone();
                    let label = e.require(LABEL_COMPONENT).unwrap().data().to_f32();
                    (String::from_utf8(text).unwrap(), label)
                })
                .collect()
        };
        let got = read(TextFolderOptions::default());
        assert_eq!(
            got,
            [
                ("Awful, truly awful".to_string(), vec![0.0]),
                ("Loved it".to_string(), vec![1.0]),
                ("Great movie!".to_string(), vec![1.0]),
            ]
        );
        let got = read(TextFolderOptions {
            label_mode: LabelMode::Categorical,
            class_names: Some(vec!["pos".into(), "neg".into()]),
            max_length: Some(5),
            ..TextFolderOptions::default()
        });
        assert_eq!(got[0], ("Loved".to_string(), vec![1.0, 0.0]));
        assert_eq!(got[2], ("Awful".to_string(), vec![0.0, 1.0]));
        let got = read(TextFolderOptions {
            label_mode: LabelMode::Binary,
            ..TextFolderOptions::default()
        });
        assert_eq!(got[2].1, vec![1.0]);
        write(dir.path(), "third/t.txt", b"x");
        let err = Dataset::text_dataset_from_directory(
            dir.path(),
            TextFolderOptions {
                label_mode: LabelMode::Binary,
                ..TextFolderOptions::default()
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("exactly 2 classes"), "{err}");
    }
}
