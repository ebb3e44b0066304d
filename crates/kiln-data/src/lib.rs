//! # kiln-data
//!
//! tf.data-style input pipelines on host arrays, for the kiln training system. Nothing here
//! depends on Burn: pipelines produce [`Element`]s of plain [`Array`]s, which `kiln` turns into
//! device tensors at the training step.
//!
//! * [`Dataset`] mirrors `tf.data.Dataset`: [`Dataset::from_tensor_slices`], then
//!   [`map`](Dataset::map) (parallel, order preserving), [`shuffle`](Dataset::shuffle) (tf.data's
//!   buffered algorithm, seeded), [`batch`](Dataset::batch), [`repeat`](Dataset::repeat),
//!   [`take`](Dataset::take), [`skip`](Dataset::skip) and [`prefetch`](Dataset::prefetch)
//!   (background thread). Every [`Dataset::iter`] call starts a new epoch.
//! * [`sources`] adds tf.data's file and generator sources: [`Dataset::range`],
//!   [`Dataset::text_line_dataset`], [`Dataset::csv_dataset`], [`Dataset::make_csv_dataset`],
//!   [`Dataset::list_files`] and Keras' [`Dataset::image_dataset_from_directory`].
//! * More tf.data transformations: [`filter`](Dataset::filter), [`shard`](Dataset::shard),
//!   [`unbatch`](Dataset::unbatch), [`padded_batch`](Dataset::padded_batch),
//!   [`zip`](Dataset::zip), [`concatenate`](Dataset::concatenate),
//!   [`enumerate`](Dataset::enumerate), [`interleave`](Dataset::interleave) (parallel,
//!   deterministic or not) and [`cache`](Dataset::cache) (memory or file, with tf.data's
//!   partial-cache rule and a pipeline [`fingerprint`](Dataset::fingerprint) check).
//! * [`AUTOTUNE`] adapts `map` / `interleave` parallelism and `prefetch(AUTOTUNE)` depth at
//!   run time within CPU and RAM budgets ([`AutotuneOptions`], [`Dataset::with_autotune`]);
//!   [`DatasetIter::stats`] reports each stage's elements, busy and waited time.
//! * [`idx`] reads and writes the IDX files of MNIST / Fashion-MNIST (gzip or raw).
//! * [`npy`] reads and writes NumPy `.npy` files.
//! * [`inspect`] summarises a TFRecord, CSV, IDX or NPY file (first records, record count,
//!   TFRecord checksums): `kiln data inspect`.
//! * [`preprocess`] has Keras' preprocessing layers as map functions on one component
//!   (rescale, normalize with `adapt`, one-hot, cast, reshape, random flip and crop, resize),
//!   run by [`Dataset::preprocess`]; [`Dataset::map_with_rng`] makes random maps reproducible.
//! * [`tfrecord`] reads and writes TFRecord files ([`Dataset::tfrecord`]) and parses
//!   `tf.train.Example` records ([`Dataset::parse_example`]); [`Compression`] is tf.data's
//!   `compression_type`.
//! * [`storage`]: file sources read local paths, `file://` URLs and `s3://bucket/key` objects
//!   (through `object_store`, with read-ahead; configured by the `AWS_*` variables).
//!
//! ```
//! use kiln_data::{Array, Buffer, Dataset, Element, AUTOTUNE};
//!
//! let x = Array::new(vec![6, 2], Buffer::F32((0..12).map(|v| v as f32).collect())).unwrap();
//! let y = Array::new(vec![6], Buffer::I64((0..6).collect())).unwrap();
//! let ds = Dataset::from_tensor_slices(Element::new().with("x", x).with("y", y))
//!     .unwrap()
//!     .shuffle(6, Some(42), true)
//!     .batch(4, false)
//!     .prefetch(AUTOTUNE);
//! let shapes: Vec<Vec<usize>> = ds
//!     .iter()
//!     .map(|b| b.unwrap().get("x").unwrap().shape().to_vec())
//!     .collect();
//! assert_eq!(shapes, vec![vec![4, 2], vec![2, 2]]);
//! ```

#![warn(missing_docs)]

pub mod alloc;
pub mod array_file;
mod bounded;
pub mod compression;
pub mod dataset;
pub mod element;
pub mod error;
pub mod idx;
pub mod inspect;
pub mod npy;
pub mod preprocess;
pub mod sources;
pub mod storage;
pub mod system;
pub mod tfrecord;

pub use compression::Compression;
pub use dataset::{
    AUTOTUNE, AutotuneOptions, BufferSize, CacheTarget, Cardinality, Dataset, DatasetIter,
    MAX_LISTED_SKIPS, PaddedShapes, Parallelism, PipelineStats, SkipStats, SkippedRecord,
    StageStats, WarningHook, set_warning_hook,
};
pub use element::{Array, Buffer, DType, Element};
pub use error::{DataError, Result};
pub use preprocess::{Normalization, Preprocess};
pub use sources::{
    ColorMode, CsvOptions, ImageFolderOptions, MakeCsvOptions, RecordDefault, SkipCounter,
};
