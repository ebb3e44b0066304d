//! [`Dataset::image_dataset_from_directory`]: Keras' `image_dataset_from_directory` with
//! `labels="inferred"`, `label_mode="int"`, unbatched.
//!
//! Directory layout and ordering follow `keras/src/utils/dataset_utils.py`
//! (`index_directory`): one class per subdirectory of `directory` (hidden ones, named `.…`,
//! excepted, as Keras does), classes numbered in sorted name order, the images of a class
//! found recursively and listed by sorted directory, then sorted file name. Decoding uses the
//! [`image`] crate (PNG, JPEG, GIF's first frame, BMP — Keras' allowed formats).
//!
//! Unlike Keras, hidden files and folders inside the class folders (names starting with `.`,
//! such as the `._photo.jpg` companions macOS writes on non-Apple disks, or
//! `.ipynb_checkpoints/`) are left out unless [`ImageFolderOptions::include_hidden`] is set:
//! Keras lists them and then fails to decode them.
//!
//! The directory may also be an `s3://bucket/prefix` URL ([`crate::storage`]): the objects
//! under the prefix are listed once, each key's first `/`-separated component below the
//! prefix is its class "folder", and the ordering rules are the same (keys sorted by
//! "directory", then name).

use std::fs;
use std::path::{Path, PathBuf};

use image::DynamicImage;

use super::{SkipCounter, path_bytes, path_from_bytes};
use crate::dataset::{AUTOTUNE, Dataset, Parallelism};
use crate::element::{Array, Buffer, Element};
use crate::error::{DataError, Result};

/// File extensions (lower-cased) that count as images: Keras' `ALLOWLIST_FORMATS`.
const IMAGE_EXTENSIONS: [&str; 5] = ["bmp", "gif", "jpeg", "jpg", "png"];

/// Channels of the decoded images — Keras' `color_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorMode {
    /// 1 channel: ITU-R BT.601 luma `0.299 R + 0.587 G + 0.114 B` (the weights of
    /// TensorFlow's PNG and JPEG decoders), rounded to the nearest integer.
    Grayscale,
    /// 3 channels; alpha is dropped, gray is repeated (the default).
    Rgb,
    /// 4 channels; images without alpha get 255.
    Rgba,
}

impl ColorMode {
    /// Number of channels: 1, 3 or 4.
    pub fn channels(self) -> usize {
        match self {
            ColorMode::Grayscale => 1,
            ColorMode::Rgb => 3,
            ColorMode::Rgba => 4,
        }
    }
}

/// Options of [`Dataset::image_dataset_from_directory`].
#[derive(Debug, Clone)]
pub struct ImageFolderOptions {
    /// Classes to use, in label order; each must be a subdirectory. Default: every
    /// subdirectory, sorted by name.
    pub class_names: Option<Vec<String>>,
    /// Channels of the output images (default [`ColorMode::Rgb`]).
    pub color_mode: ColorMode,
    /// Resize every image to `(height, width)` with bilinear interpolation (TensorFlow's
    /// `tf.image.resize` with half-pixel centers and no antialiasing), rounded to `uint8`.
    /// Default `None`: keep each image's size (Keras always resizes, to `(256, 256)` by
    /// default; images of different sizes cannot be batched without it).
    pub image_size: Option<(usize, usize)>,
    /// Shuffle the files each epoch (default `true`; the whole list, seeded).
    pub shuffle: bool,
    /// Shuffle seed; `None` draws one at random.
    pub seed: Option<u64>,
    /// Descend into symbolic links to directories inside class folders (default `false`).
    pub follow_links: bool,
    /// Decoding threads (default [`AUTOTUNE`]: one per core; order is kept).
    pub num_parallel_calls: Parallelism,
    /// Skip files that cannot be read or decoded, counting them in `skipped` and in the
    /// iteration's [`crate::DatasetIter::skip_stats`] (default `false`: they are yielded as
    /// errors).
    pub ignore_errors: bool,
    /// Read hidden files and folders inside the class folders: names starting with `.`
    /// (default `false`: left out, and never opened). Hidden top-level folders are never
    /// classes, as in Keras.
    pub include_hidden: bool,
    /// Where skipped files are counted; keep a clone to read the count.
    pub skipped: SkipCounter,
}

impl Default for ImageFolderOptions {
    fn default() -> ImageFolderOptions {
        ImageFolderOptions {
            class_names: None,
            color_mode: ColorMode::Rgb,
            image_size: None,
            shuffle: true,
            seed: None,
            follow_links: false,
            num_parallel_calls: AUTOTUNE,
            ignore_errors: false,
            include_hidden: false,
            skipped: SkipCounter::new(),
        }
    }
}

/// Component names of [`Dataset::image_dataset_from_directory`]'s elements.
pub const IMAGE_COMPONENT: &str = "image";
/// See [`IMAGE_COMPONENT`].
pub const LABEL_COMPONENT: &str = "label";

pub(crate) fn io_error(path: &Path, source: std::io::Error) -> DataError {
    DataError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The class names of `directory`: its subdirectories (following links) whose names do not
/// start with `.`, sorted by name — Keras' `class_names` attribute. Label `i` of [`Dataset::image_dataset_from_directory`]
/// (without explicit `class_names`) is entry `i`.
///
/// # Errors
/// [`DataError::Io`] when the directory cannot be read; [`DataError::InvalidArgument`] for
/// a subdirectory name that is not UTF-8.
pub fn image_class_names(directory: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(directory).map_err(|e| io_error(directory, e))? {
        let entry = entry.map_err(|e| io_error(directory, e))?;
        if entry.path().is_dir() && !is_hidden(&entry.file_name().to_string_lossy()) {
            let name = entry.file_name().into_string().map_err(|name| {
                DataError::InvalidArgument(format!(
                    "class folder name {name:?} in {} is not UTF-8; rename it",
                    directory.display()
                ))
            })?;
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Whether a file or folder name is hidden: it starts with `.`.
pub(crate) fn is_hidden(name: &str) -> bool {
    name.starts_with('.')
}

/// Whether a file name counts as an image (by extension, any case).
fn is_image_name(name: &str) -> bool {
    name.to_lowercase()
        .rsplit_once('.')
        .is_some_and(|(_, ext)| IMAGE_EXTENSIONS.contains(&ext))
}

/// The class folders and image files of an `s3://` image folder: `keys` are the object keys
/// relative to the directory (`cat/sub/a.png`). Classes are the first components of keys
/// with a `/` (sorted, hidden ones left out); each class's images are its keys with an image
/// extension (without a hidden component unless `include_hidden`), ordered by (directory,
/// file name) as [`image_files`] orders local files.
fn object_classes(
    keys: &[String],
    include_hidden: bool,
) -> (Vec<String>, Vec<(String, String, String)>) {
    let mut classes: Vec<String> = keys
        .iter()
        .filter_map(|k| k.split_once('/').map(|(class, _)| class.to_string()))
        .filter(|c| !c.is_empty() && !is_hidden(c))
        .collect();
    classes.dedup(); // keys are sorted, so a class's keys are adjacent
    classes.sort();
    classes.dedup();
    // (class, directory, name) of each image below a class.
    let mut files: Vec<(String, String, String)> = keys
        .iter()
        .filter_map(|k| {
            let (class, rest) = k.split_once('/')?;
            if is_hidden(class) || (!include_hidden && rest.split('/').any(is_hidden)) {
                return None;
            }
            let (dir, name) = match rest.rsplit_once('/') {
                Some((d, n)) => (format!("{class}/{d}"), n),
                None => (class.to_string(), rest),
            };
            is_image_name(name).then(|| (class.to_string(), dir, name.to_string()))
        })
        .collect();
    files.sort();
    (classes, files)
}

/// Image files under `dir`, recursively, ordered by (directory, file name) like Keras'
/// `iter_valid_files` over `os.walk`; hidden files and folders are left out (not entered)
/// unless `include_hidden`.
fn image_files(dir: &Path, follow_links: bool, include_hidden: bool) -> Result<Vec<PathBuf>> {
    class_files(dir, follow_links, include_hidden, is_image_name)
}

/// Files under `dir` whose names `accept` takes, recursively, in [`image_files`]' order and
/// with its rules for hidden names and links (shared with the text-folder source).
pub(crate) fn class_files(
    dir: &Path,
    follow_links: bool,
    include_hidden: bool,
    accept: fn(&str) -> bool,
) -> Result<Vec<PathBuf>> {
    let mut found: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in fs::read_dir(&current).map_err(|e| io_error(&current, e))? {
            let entry = entry.map_err(|e| io_error(&current, e))?;
            let name = entry.file_name();
            if !include_hidden && is_hidden(&name.to_string_lossy()) {
                continue;
            }
            let path = entry.path();
            let file_type = entry.file_type().map_err(|e| io_error(&path, e))?;
            // Links are followed to see what they point at (os.walk lists a linked file as a
            // file); a linked directory is entered only with follow_links.
            let is_dir = if file_type.is_symlink() {
                let is_dir = path.is_dir();
                if is_dir && !follow_links {
                    continue;
                }
                is_dir
            } else {
                file_type.is_dir()
            };
            if is_dir {
                pending.push(path);
            } else {
                if accept(&name.to_string_lossy()) {
                    found.push((path_bytes(&current), name.as_encoded_bytes().to_vec()));
                }
            }
        }
    }
    found.sort();
    Ok(found
        .into_iter()
        .map(|(d, n)| path_from_bytes(&d).join(path_from_bytes(&n)))
        .collect())
}

impl Dataset {
    /// `keras.utils.image_dataset_from_directory(directory, labels="inferred",
    /// label_mode="int", ...)`, unbatched: one element per image file under the class
    /// subdirectories of `directory`, `{"image": uint8 [height, width, channels], "label":
    /// int64 []}` ([`IMAGE_COMPONENT`], [`LABEL_COMPONENT`]), the label being the index of
    /// the image's class in the sorted subdirectory names ([`image_class_names`]) or in
    /// `options.class_names`.
    ///
    /// Files count as images by extension (`.bmp`, `.gif`, `.jpeg`, `.jpg`, `.png`, any
    /// case); other files are ignored, and so are hidden files and folders (names starting
    /// with `.`) unless `options.include_hidden`. The directory is listed once, here; images are read
    /// and decoded during iteration, on `num_parallel_calls` threads, in the file order
    /// (sorted per class, classes in label order), shuffled each epoch when
    /// `options.shuffle`. Unlike Keras, images are not converted to `float32` nor resized
    /// unless `image_size` is set, and `validation_split` is not supported (split with
    /// `take` / `skip` on an unshuffled, then shuffled, dataset). Cardinality: the number of
    /// files (unknown with `ignore_errors`).
    ///
    /// `directory` may be an `s3://bucket/prefix` URL: the objects under it are listed once
    /// (see the module docs) and read during iteration like local files.
    ///
    /// # Errors
    /// Returned now: [`DataError::Io`] when a directory cannot be listed;
    /// [`DataError::InvalidArgument`] when a `class_names` entry is not a subdirectory,
    /// `image_size` has a zero side, or no image is found. Yielded during iteration:
    /// [`DataError::Io`] for an unreadable file and [`DataError::Decode`] naming a file the
    /// decoder rejects — or, with `ignore_errors`, both skipped and counted in
    /// `options.skipped` and the iteration's [`crate::DatasetIter::skip_stats`].
    pub fn image_dataset_from_directory(
        directory: impl AsRef<Path>,
        options: ImageFolderOptions,
    ) -> Result<Dataset> {
        let listing = crate::storage::list_directory(directory.as_ref())?;
        // A file:// URL lists as its local path.
        let local = crate::storage::local_path(directory.as_ref())?;
        let directory = local.as_path();
        let subdirs = match &listing {
            Some((_, keys)) => object_classes(keys, options.include_hidden).0,
            None => image_class_names(directory)?,
        };
        let classes = match &options.class_names {
            Some(names) => {
                if let Some(bad) = names.iter().find(|n| !subdirs.contains(n)) {
                    return Err(DataError::InvalidArgument(format!(
                        "image_dataset_from_directory: class_names names {bad:?}, which is not \
                         a subdirectory of {}; subdirectories: {subdirs:?}",
                        directory.display()
                    )));
                }
                names.clone()
            }
            None => subdirs,
        };
        if let Some((h, w)) = options.image_size
            && (h == 0 || w == 0)
        {
            return Err(DataError::InvalidArgument(format!(
                "image_dataset_from_directory: image_size ({h}, {w}) must be positive"
            )));
        }
        let mut paths = Vec::new();
        let mut labels = Vec::new();
        match &listing {
            Some((url, keys)) => {
                let (_, files) = object_classes(keys, options.include_hidden);
                for (label, class) in classes.iter().enumerate() {
                    for (_, dir, name) in files.iter().filter(|(c, _, _)| c == class) {
                        paths.push(format!("{url}/{dir}/{name}").into_bytes());
                        labels.push(label as i64);
                    }
                }
            }
            None => {
                for (label, class) in classes.iter().enumerate() {
                    let class_dir = directory.join(class);
                    for file in
                        image_files(&class_dir, options.follow_links, options.include_hidden)?
                    {
                        paths.push(path_bytes(&file));
                        labels.push(label as i64);
                    }
                }
            }
        }
        let n = paths.len();
        if n == 0 {
            return Err(DataError::InvalidArgument(format!(
                "image_dataset_from_directory: no images found in {} (classes {classes:?}); \
                 expected class subdirectories holding .bmp, .gif, .jpeg, .jpg or .png files",
                directory.display()
            )));
        }
        let mut ds = Dataset::from_tensor_slices(
            Element::new()
                .with("path", Array::new(vec![n], Buffer::String(paths))?)
                .with(LABEL_COMPONENT, Array::new(vec![n], Buffer::I64(labels))?),
        )?;
        if options.shuffle {
            ds = ds.shuffle(n, options.seed, true);
        }
        let (mode, size) = (options.color_mode, options.image_size);
        let fix = if options.ignore_errors {
            "remove or replace the file"
        } else {
            "remove or replace the file, or set ignore_errors = true to skip such files"
        };
        let ds = ds.map(
            move |e| {
                let path = e
                    .require("path")?
                    .data()
                    .as_strings()
                    .and_then(|s| s.first());
                let path = path_from_bytes(path.ok_or_else(|| {
                    DataError::Shape("image_dataset_from_directory: path is not a string".into())
                })?);
                let image = load_image(&path, mode, size, fix)?;
                let label = e.require(LABEL_COMPONENT)?.clone();
                Ok(Element::new()
                    .with(IMAGE_COMPONENT, image)
                    .with(LABEL_COMPONENT, label))
            },
            options.num_parallel_calls,
        );
        Ok(if options.ignore_errors {
            ds.ignore_errors_counted(options.skipped)
        } else {
            ds
        })
    }
}

/// Reads and decodes the image at `path` into `uint8 [height, width, channels]`; `fix` ends
/// the message of a decoding error.
fn load_image(
    path: &Path,
    mode: ColorMode,
    size: Option<(usize, usize)>,
    fix: &str,
) -> Result<Array> {
    let bytes = crate::storage::read(path)?;
    let image = decode_image(&bytes, path, fix)?;
    let (w, h) = (image.width() as usize, image.height() as usize);
    let pixels = convert(image, mode);
    let c = mode.channels();
    let (h, w, pixels) = match size {
        Some((oh, ow)) if (oh, ow) != (h, w) => {
            (oh, ow, resize_bilinear(&pixels, [h, w, c], [oh, ow]))
        }
        _ => (h, w, pixels),
    };
    Array::new(vec![h, w, c], Buffer::U8(pixels))
}

/// The widest or tallest image decoded: a few bytes of header can claim 100000 × 100000
/// pixels, which would be allocated before a single pixel is read.
pub(crate) const MAX_IMAGE_SIDE: u32 = 16384;

/// The most bytes a decoded image may take (RGBA, 16 bits a channel included).
const MAX_IMAGE_BYTES: u64 = 1 << 30;

/// Decodes the image file `bytes` (PNG, JPEG, GIF, BMP) read from `path`, refusing one whose
/// header claims more than [`MAX_IMAGE_SIDE`] pixels a side (or [`MAX_IMAGE_BYTES`] decoded)
/// before anything is allocated for its pixels; `fix` ends the message of a decoding error.
///
/// # Errors
/// [`DataError::Decode`] naming the file: an unknown or corrupt format, or a size above the
/// limits (with the size the header claims).
pub(crate) fn decode_image(bytes: &[u8], path: &Path, fix: &str) -> Result<DynamicImage> {
    let decode_error = |e: &dyn std::fmt::Display| DataError::Decode {
        path: path.to_path_buf(),
        message: format!("{e}; {fix}"),
    };
    let reader = || {
        image::ImageReader::new(std::io::Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| decode_error(&e))
    };
    let (w, h) = reader()?.into_dimensions().map_err(|e| decode_error(&e))?;
    if w > MAX_IMAGE_SIDE || h > MAX_IMAGE_SIDE {
        return Err(DataError::Decode {
            path: path.to_path_buf(),
            message: format!(
                "the image header claims {w} x {h} pixels, more than kiln decodes \
                 ({MAX_IMAGE_SIDE} a side): the file is corrupt, or resize it first"
            ),
        });
    }
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(MAX_IMAGE_SIDE);
    limits.max_image_height = Some(MAX_IMAGE_SIDE);
    limits.max_alloc = Some(MAX_IMAGE_BYTES);
    let mut reader = reader()?;
    reader.limits(limits);
    reader.decode().map_err(|e| decode_error(&e))
}

/// The pixels of `image` as interleaved `uint8` with `mode`'s channels.
fn convert(image: DynamicImage, mode: ColorMode) -> Vec<u8> {
    match mode {
        ColorMode::Rgb => image.into_rgb8().into_raw(),
        ColorMode::Rgba => image.into_rgba8().into_raw(),
        ColorMode::Grayscale => {
            if !image.color().has_color() {
                // Already gray: keep the values (no RGB round trip).
                return image.into_luma8().into_raw();
            }
            image
                .into_rgb8()
                .into_raw()
                .chunks_exact(3)
                .map(|p| {
                    let y =
                        0.299 * f32::from(p[0]) + 0.587 * f32::from(p[1]) + 0.114 * f32::from(p[2]);
                    y.round().clamp(0.0, 255.0) as u8
                })
                .collect()
        }
    }
}

/// Bilinear resize of `uint8 [h, w, c]` to `[oh, ow, c]`, as `tf.image.resize(...,
/// "bilinear")`: half-pixel centers (`in = (out + 0.5) * in_size / out_size - 0.5`, clamped
/// to the image), no antialiasing, rounded to the nearest integer.
fn resize_bilinear(src: &[u8], [h, w, c]: [usize; 3], [oh, ow]: [usize; 2]) -> Vec<u8> {
    /// `(lower, upper, weight of upper)` along one axis.
    fn taps(out: usize, input: usize) -> Vec<(usize, usize, f32)> {
        let scale = input as f32 / out as f32;
        (0..out)
            .map(|o| {
                let x = ((o as f32 + 0.5) * scale - 0.5).max(0.0);
                let lo = (x.floor() as usize).min(input - 1);
                let hi = (lo + 1).min(input - 1);
                (lo, hi, x - x.floor())
            })
            .collect()
    }
    let (ys, xs) = (taps(oh, h), taps(ow, w));
    let mut out = Vec::with_capacity(oh * ow * c);
    for &(y0, y1, dy) in &ys {
        for &(x0, x1, dx) in &xs {
            for ch in 0..c {
                let at = |y: usize, x: usize| f32::from(src[(y * w + x) * c + ch]);
                let top = at(y0, x0) + (at(y0, x1) - at(y0, x0)) * dx;
                let bottom = at(y1, x0) + (at(y1, x1) - at(y1, x0)) * dx;
                let v = top + (bottom - top) * dy;
                out.push(v.round().clamp(0.0, 255.0) as u8);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::Cardinality;
    use image::{ImageFormat, Rgb, RgbImage, Rgba, RgbaImage};

    /// A `w x h` RGB image whose pixel (x, y) is (10x + 1, 10y + 2, seed).
    fn rgb(w: u32, h: u32, seed: u8) -> RgbImage {
        RgbImage::from_fn(w, h, |x, y| Rgb([10 * x as u8 + 1, 10 * y as u8 + 2, seed]))
    }

    fn save(img: &DynamicImage, path: &Path, format: ImageFormat) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        img.save_with_format(path, format).unwrap();
    }

    /// PNG's CRC-32 (ISO-HDLC), bit by bit.
    pub(crate) fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
            }
        }
        !crc
    }

    #[test]
    fn an_image_claiming_huge_dimensions_is_refused_before_decoding() {
        // A valid 1 x 1 PNG whose IHDR is rewritten to claim 100000 x 100000 pixels (CRC
        // fixed, so only the size is wrong).
        let mut png = Vec::new();
        DynamicImage::ImageRgb8(rgb(1, 1, 0))
            .write_to(&mut std::io::Cursor::new(&mut png), ImageFormat::Png)
            .unwrap();
        png[16..20].copy_from_slice(&100_000u32.to_be_bytes());
        png[20..24].copy_from_slice(&100_000u32.to_be_bytes());
        let crc = crc32(&png[12..29]);
        png[29..33].copy_from_slice(&crc.to_be_bytes());
        let err = decode_image(&png, Path::new("cats/huge.png"), "fix it").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(
                "cannot decode cats/huge.png: the image header claims 100000 x 100000 pixels"
            ),
            "{text}"
        );
    }

    #[test]
    fn fuzz_image() {
        let image = DynamicImage::ImageRgb8(rgb(5, 4, 9));
        let seeds: Vec<Vec<u8>> = [
            ImageFormat::Png,
            ImageFormat::Jpeg,
            ImageFormat::Gif,
            ImageFormat::Bmp,
        ]
        .into_iter()
        .map(|format| {
            let mut bytes = Vec::new();
            image
                .write_to(&mut std::io::Cursor::new(&mut bytes), format)
                .unwrap();
            bytes
        })
        .collect();
        let report = kiln_fuzz::fuzz("image", seeds, kiln_fuzz::Limits::new(3_000), |bytes| {
            decode_image(bytes, Path::new("fuzz.png"), "fix").map(|i| convert(i, ColorMode::Rgb))
        });
        assert!(report.accepted > 0 && report.refused > 0, "{report:?}");
    }

    fn unshuffled() -> ImageFolderOptions {
        ImageFolderOptions {
            shuffle: false,
            num_parallel_calls: Parallelism::Fixed(2),
            ..ImageFolderOptions::default()
        }
    }

    fn elements(ds: &Dataset) -> Vec<(Vec<usize>, Vec<u8>, i64)> {
        ds.iter()
            .map(|e| {
                let e = e.unwrap();
                let image = e.get(IMAGE_COMPONENT).unwrap();
                let Buffer::U8(px) = image.data() else {
                    panic!("not uint8")
                };
                let label = e.get(LABEL_COMPONENT).unwrap().data().to_i64()[0];
                assert_eq!(e.get(LABEL_COMPONENT).unwrap().shape(), &[] as &[usize]);
                (image.shape().to_vec(), px.clone(), label)
            })
            .collect()
    }

    /// The `s3://` listing rules: classes are the first key components (a top-level object is
    /// not a class), images are found at any depth, by extension, ordered by (directory, name)
    /// as `os.walk` orders a local folder (`cat/a.png` before `cat/sub/0.png`).
    #[test]
    fn object_keys_group_into_classes_like_folders() {
        let mut keys: Vec<String> = [
            ".hidden/a.png",
            "cat/._a.png",
            "cat/.cache/b.png",
            "stray.png",
            "dog/b.JPG",
            "cat/sub/0.png",
            "cat/z.png",
            "cat/notes.txt",
            "cat/a.png",
            "bird/readme",
        ]
        .iter()
        .map(|k| k.to_string())
        .collect();
        keys.sort();
        let (classes, with_hidden) = object_classes(&keys, true);
        assert_eq!(
            classes,
            ["bird", "cat", "dog"],
            "hidden folders are never classes"
        );
        assert_eq!(with_hidden.len(), 6, "{with_hidden:?}");
        let (classes, files) = object_classes(&keys, false);
        assert_eq!(classes, ["bird", "cat", "dog"]);
        let names: Vec<String> = files
            .iter()
            .map(|(c, d, n)| format!("{c}|{d}|{n}"))
            .collect();
        assert_eq!(
            names,
            [
                "cat|cat|a.png",
                "cat|cat|z.png",
                "cat|cat/sub|0.png",
                "dog|dog|b.JPG"
            ]
        );
    }

    #[test]
    fn classes_by_sorted_folder_and_exact_png_pixels() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        save(
            &DynamicImage::ImageRgb8(rgb(2, 3, 7)),
            &root.join("dog/b.png"),
            ImageFormat::Png,
        );
        save(
            &DynamicImage::ImageRgb8(rgb(1, 1, 8)),
            &root.join("dog/A.PNG"),
            ImageFormat::Png,
        );
        save(
            &DynamicImage::ImageRgb8(rgb(1, 1, 9)),
            &root.join("cat/x/deep.png"),
            ImageFormat::Png,
        );
        save(
            &DynamicImage::ImageRgb8(rgb(1, 1, 6)),
            &root.join("cat/z.png"),
            ImageFormat::Png,
        );
        fs::write(root.join("cat/notes.txt"), b"not an image").unwrap();
        fs::write(root.join("stray.png"), b"top-level files are not classes").unwrap();
        assert_eq!(image_class_names(root).unwrap(), ["cat", "dog"]);
        let ds = Dataset::image_dataset_from_directory(root, unshuffled()).unwrap();
        assert_eq!(ds.cardinality(), Cardinality::Finite(4));
        let got = elements(&ds);
        // cat (0): z.png in cat/ before cat/x/deep.png (directory order); dog (1): A.PNG, b.png.
        let seeds: Vec<(u8, i64)> = got.iter().map(|(_, px, l)| (px[2], *l)).collect();
        assert_eq!(seeds, vec![(6, 0), (9, 0), (8, 1), (7, 1)]);
        let (shape, px, _) = &got[3];
        assert_eq!(shape, &[3, 2, 3]);
        // Row-major [height, width, channels]: pixel (x=1, y=2) is (11, 22, 7).
        assert_eq!(&px[(2 * 2 + 1) * 3..(2 * 2 + 2) * 3], &[11, 22, 7]);
        assert_eq!(px.len(), 18);
        // Explicit class_names reorder labels.
        let options = ImageFolderOptions {
            class_names: Some(vec!["dog".into(), "cat".into()]),
            ..unshuffled()
        };
        let ds = Dataset::image_dataset_from_directory(root, options).unwrap();
        let labels: Vec<i64> = elements(&ds).iter().map(|e| e.2).collect();
        assert_eq!(labels, vec![0, 0, 1, 1]);
    }

    #[test]
    fn jpeg_color_modes_and_resize() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let flat = RgbImage::from_pixel(4, 4, Rgb([200, 100, 50]));
        save(
            &DynamicImage::ImageRgb8(flat),
            &root.join("a/flat.jpg"),
            ImageFormat::Jpeg,
        );
        let rgba = RgbaImage::from_pixel(2, 2, Rgba([10, 20, 30, 40]));
        save(
            &DynamicImage::ImageRgba8(rgba),
            &root.join("b/alpha.png"),
            ImageFormat::Png,
        );
        let gray = |mode| {
            let options = ImageFolderOptions {
                color_mode: mode,
                ..unshuffled()
            };
            elements(&Dataset::image_dataset_from_directory(root, options).unwrap())
        };
        let rgb = gray(ColorMode::Rgb);
        assert_eq!(rgb[0].0, vec![4, 4, 3]);
        // JPEG is lossy: a flat color comes back within a few levels.
        for p in rgb[0].1.chunks(3) {
            assert!(
                (i32::from(p[0]) - 200).abs() <= 3 && (i32::from(p[1]) - 100).abs() <= 3,
                "{p:?}"
            );
        }
        assert_eq!(rgb[1].1, [10, 20, 30].repeat(4), "alpha dropped");
        let g = gray(ColorMode::Grayscale);
        assert_eq!(g[1].0, vec![2, 2, 1]);
        // 0.299*10 + 0.587*20 + 0.114*30 = 18.15 -> 18.
        assert_eq!(g[1].1, vec![18; 4]);
        let rgba = gray(ColorMode::Rgba);
        assert_eq!(rgba[1].1, [10, 20, 30, 40].repeat(4));
        assert_eq!(&rgba[0].1[3..4], &[255], "opaque alpha added");

        let options = ImageFolderOptions {
            image_size: Some((2, 3)),
            ..unshuffled()
        };
        let resized = elements(&Dataset::image_dataset_from_directory(root, options).unwrap());
        assert_eq!(resized[0].0, vec![2, 3, 3]);
        assert_eq!(resized[1].1, [10, 20, 30].repeat(6));
    }

    #[test]
    fn bilinear_resize_matches_tf_half_pixel_centers() {
        // tf.image.resize([[[0],[10],[20],[30]]] (1x4), (1, 2), "bilinear") = [[5], [25]]:
        // output x=0 samples input 0.5, x=1 samples 2.5.
        assert_eq!(
            resize_bilinear(&[0, 10, 20, 30], [1, 4, 1], [1, 2]),
            vec![5, 25]
        );
        // Upsampling 1x2 [0, 100] to 1x4: samples -0.25 (clamped to 0), 0.25, 0.75, 1.25 -> 1.
        assert_eq!(
            resize_bilinear(&[0, 100], [1, 2, 1], [1, 4]),
            vec![0, 25, 75, 100]
        );
    }

    #[test]
    fn undecodable_files_are_errors_naming_them_or_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        save(
            &DynamicImage::ImageRgb8(rgb(1, 1, 1)),
            &root.join("c/good.png"),
            ImageFormat::Png,
        );
        fs::write(root.join("c/broken.jpg"), b"\xff\xd8\xff not really a jpeg").unwrap();
        let results: Vec<_> = Dataset::image_dataset_from_directory(root, unshuffled())
            .unwrap()
            .iter()
            .collect();
        assert_eq!(results.len(), 2);
        match &results[0] {
            Err(DataError::Decode { path, .. }) => assert_eq!(path, &root.join("c/broken.jpg")),
            other => panic!("expected a Decode error, got {other:?}"),
        }
        assert!(
            results[0]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("broken.jpg")
        );
        assert!(results[1].is_ok());

        assert!(
            results[0]
                .as_ref()
                .unwrap_err()
                .to_string()
                .ends_with("or set ignore_errors = true to skip such files"),
            "{:?}",
            results[0]
        );

        let counter = SkipCounter::new();
        let options = ImageFolderOptions {
            ignore_errors: true,
            skipped: counter.clone(),
            ..unshuffled()
        };
        let ds = Dataset::image_dataset_from_directory(root, options).unwrap();
        assert_eq!(ds.cardinality(), Cardinality::Unknown);
        let mut it = ds.iter();
        assert_eq!(it.by_ref().filter(|e| e.is_ok()).count(), 1);
        assert_eq!(counter.count(), 1);
        assert!(counter.last_error().unwrap().contains("broken.jpg"));
        let skipped = it.skip_stats().unwrap();
        assert_eq!(skipped.count, 1);
        let record = &skipped.first[0];
        assert_eq!(record.index, 0, "c/broken.jpg sorts before c/good.png");
        assert_eq!(
            record.path.as_deref(),
            Some(root.join("c/broken.jpg").as_path())
        );
        assert!(record.error.starts_with(&format!(
            "cannot decode {}",
            root.join("c/broken.jpg").display()
        )));
        assert!(!record.error.contains("ignore_errors"), "{}", record.error);
    }

    /// Hidden files and folders (names starting with `.`) are neither listed nor opened:
    /// the hidden entries here are links to nowhere, which fail when read. Hidden top-level
    /// folders are never classes (as in Keras), whatever `include_hidden` says.
    #[cfg(unix)]
    #[test]
    fn hidden_files_and_folders_are_left_out_unless_included() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        save(
            &DynamicImage::ImageRgb8(rgb(1, 1, 5)),
            &root.join("c/x.jpg"),
            ImageFormat::Png,
        );
        let nowhere = root.join("nowhere");
        std::os::unix::fs::symlink(&nowhere, root.join("c/._x.jpg")).unwrap();
        fs::create_dir_all(root.join("c/.thumbs")).unwrap();
        std::os::unix::fs::symlink(&nowhere, root.join("c/.thumbs/x.jpg")).unwrap();
        fs::create_dir_all(root.join(".ipynb_checkpoints")).unwrap();
        std::os::unix::fs::symlink(&nowhere, root.join(".ipynb_checkpoints/y.png")).unwrap();
        assert_eq!(image_class_names(root).unwrap(), ["c"]);
        let ds = Dataset::image_dataset_from_directory(root, unshuffled()).unwrap();
        assert_eq!(ds.cardinality(), Cardinality::Finite(1));
        let got = elements(&ds);
        assert_eq!((got[0].1[2], got[0].2), (5, 0));

        let options = ImageFolderOptions {
            include_hidden: true,
            ..unshuffled()
        };
        let ds = Dataset::image_dataset_from_directory(root, options).unwrap();
        assert_eq!(ds.cardinality(), Cardinality::Finite(3));
        let failed: Vec<PathBuf> = ds
            .iter()
            .filter_map(|r| r.err())
            .map(|e| e.path().unwrap().to_path_buf())
            .collect();
        assert_eq!(
            failed,
            vec![root.join("c/._x.jpg"), root.join("c/.thumbs/x.jpg")]
        );
    }

    #[test]
    fn shuffle_is_seeded_and_bad_arguments_fail_early() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for i in 0..12u8 {
            let class = if i % 2 == 0 { "even" } else { "odd" };
            let img = DynamicImage::ImageRgb8(rgb(1, 1, i));
            save(
                &img,
                &root.join(format!("{class}/{i:02}.png")),
                ImageFormat::Png,
            );
        }
        let order = |seed| {
            let options = ImageFolderOptions {
                seed: Some(seed),
                ..ImageFolderOptions::default()
            };
            let ds = Dataset::image_dataset_from_directory(root, options).unwrap();
            elements(&ds)
                .into_iter()
                .map(|(_, px, label)| {
                    assert_eq!(i64::from(px[2] % 2), label, "label follows its image");
                    px[2]
                })
                .collect::<Vec<u8>>()
        };
        let a = order(3);
        assert_eq!(a, order(3));
        assert_ne!(a, order(4));
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..12).collect::<Vec<u8>>());

        let err = |options| {
            Dataset::image_dataset_from_directory(root, options)
                .unwrap_err()
                .to_string()
        };
        let bad_class = ImageFolderOptions {
            class_names: Some(vec!["even".into(), "none".into()]),
            ..ImageFolderOptions::default()
        };
        assert!(err(bad_class).contains("\"none\""));
        let empty = tempfile::tempdir().unwrap();
        fs::create_dir(empty.path().join("k")).unwrap();
        let e = Dataset::image_dataset_from_directory(empty.path(), ImageFolderOptions::default());
        assert!(e.unwrap_err().to_string().contains("no images found"));
        let missing =
            Dataset::image_dataset_from_directory(root.join("nope"), ImageFolderOptions::default());
        assert!(matches!(missing, Err(DataError::Io { .. })));
    }
}
