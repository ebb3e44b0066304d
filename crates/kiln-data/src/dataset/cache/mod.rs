//! [`Dataset::cache`]: record the elements of the first complete iteration, replay them after.
//!
//! Semantics follow tf.data's `CacheDataset` (`cache_dataset_ops.cc`):
//!
//! * The first iteration reads the input and records its elements; once it has run to the
//!   end, later iterations replay the records without touching the input (so the order is
//!   the same every epoch: shuffle *after* `cache`).
//! * A cache is complete only when an iteration reached the end of the input. An iteration
//!   dropped early (e.g. `ds.cache(..).take(k)`) discards what it recorded, with tf.data's
//!   warning (see [`crate::dataset::set_warning_hook`]); the next iteration starts over. An
//!   iteration in which the input yields an error is not recorded either (the error is
//!   yielded; the next iteration starts over).
//! * [`CacheTarget::File`] persists across datasets and processes: if `<prefix>.kcache`
//!   exists, even the first iteration reads it. The file is written as `<prefix>.kcache.tmp`
//!   and renamed only when complete, so a crash never leaves a file that looks complete; a
//!   leftover temp file is discarded with a warning. A lock file `<prefix>.lock` (created
//!   exclusively, holding the writer's pid and host name) keeps a second writer — in this
//!   process or another — out with [`crate::DataError::Cache`]. A lock written on this host
//!   by a process that no longer exists (no `/proc/<pid>`, Linux) is stale: it is removed
//!   with a warning. A lock from another host or container, without `/proc`, or whose pid is
//!   alive (even a finished writer's pid reused by another process) must be deleted by hand,
//!   as the error says.
//! * The file stores the [`Dataset::fingerprint`] of the pipeline before `cache`; a file built
//!   by a different pipeline is refused with [`crate::DataError::Cache`]. Map, filter and
//!   interleave functions are not part of the fingerprint: after changing one, delete the
//!   cache file or use a new prefix — as TensorFlow documents for its own cache ("changing the
//!   input pipeline before the call to `.cache()` will have no effect until the cache file is
//!   removed or the filename is changed").
//!
//! The file format is described in `format.rs`: magic `KILNCACH`, version, fingerprint, then
//! length-prefixed, CRC-32C-checked records of (name, dtype, shape, little-endian values), and
//! a counted footer. A damaged file is a [`crate::DataError::Format`] naming the byte offset of
//! the damaged record.

mod file;
mod format;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::{BoxIter, Cardinality, Dataset, Node, warn};
use crate::element::Element;
use crate::error::Result;

/// Where [`Dataset::cache`] keeps its elements (tf.data's `filename` argument).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheTarget {
    /// In memory, for the lifetime of this dataset (and its clones): tf.data's
    /// `cache(filename="")`.
    Memory,
    /// On disk: `<prefix>.kcache`, shared by every dataset and process using the same prefix
    /// and pipeline. Missing parent directories are created.
    File(PathBuf),
}

impl Dataset {
    /// `tf.data.Dataset.cache(filename)`: the first iteration that runs to the end records the
    /// input's elements in memory or in a file; every later iteration replays them instead of
    /// running the input. See the module docs for the rules (incomplete iterations, temp and
    /// lock files, fingerprint check).
    ///
    /// Errors while iterating: [`crate::DataError::Cache`] when the cache file was built by a
    /// different pipeline or another writer holds the lock; [`crate::DataError::Format`]
    /// (with the byte offset) for a damaged cache file; [`crate::DataError::Io`] when the
    /// files cannot be read or written (a write failure is yielded once, then the iteration
    /// carries on uncached). `CacheTarget::File` with an empty path yields one
    /// [`crate::DataError::InvalidArgument`]. Cardinality: the input's.
    pub fn cache(self, target: CacheTarget) -> Dataset {
        match target {
            CacheTarget::Memory => Dataset::from_node(MemoryCacheNode {
                input: self.node,
                cached: Arc::new(Mutex::new(None)),
            }),
            CacheTarget::File(prefix) if prefix.as_os_str().is_empty() => Dataset::invalid(
                "cache: the file prefix is empty (use CacheTarget::Memory for an in-memory cache)"
                    .into(),
            ),
            CacheTarget::File(prefix) => {
                Dataset::from_node(file::FileCacheNode::new(self.node, prefix))
            }
        }
    }
}

/// tf.data's warning for a discarded partial cache (`cache_dataset_ops.cc`), naming `what`.
fn partial_warning(what: &str) -> String {
    format!(
        "the calling iterator did not fully read the dataset being cached ({what}). In order to \
         avoid unexpected truncation of the dataset, the partially cached contents of the \
         dataset will be discarded. This can happen if you have an input pipeline similar to \
         `dataset.cache().take(k).repeat()`. You should use `dataset.take(k).cache().repeat()` \
         instead."
    )
}

type Shared = Arc<Mutex<Option<Arc<Vec<Element>>>>>;

struct MemoryCacheNode {
    input: Arc<dyn Node>,
    /// The complete recording, once an iteration has finished.
    cached: Shared,
}

impl Node for MemoryCacheNode {
    fn iter(&self) -> BoxIter {
        let complete = self
            .cached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match complete {
            Some(elements) => Box::new((0..elements.len()).map(move |i| Ok(elements[i].clone()))),
            None => Box::new(MemoryWriter {
                input: self.input.iter(),
                recorded: Vec::new(),
                spoiled: false,
                finished: false,
                target: Arc::clone(&self.cached),
            }),
        }
    }

    fn cardinality(&self) -> Cardinality {
        self.input.cardinality()
    }

    /// A cache yields its input's elements: the input's fingerprint.
    fn fingerprint(&self) -> u64 {
        self.input.fingerprint()
    }
}

/// The first iteration(s) of a memory cache: pass elements through, recording them.
struct MemoryWriter {
    input: BoxIter,
    recorded: Vec<Element>,
    /// The input yielded an error: this recording will not be kept.
    spoiled: bool,
    finished: bool,
    target: Shared,
}

impl Iterator for MemoryWriter {
    type Item = Result<Element>;

    fn next(&mut self) -> Option<Result<Element>> {
        if self.finished {
            return None;
        }
        match self.input.next() {
            Some(Ok(element)) => {
                if !self.spoiled {
                    self.recorded.push(element.clone());
                }
                Some(Ok(element))
            }
            Some(Err(err)) => {
                self.spoiled = true;
                self.recorded = Vec::new();
                Some(Err(err))
            }
            None => {
                self.finished = true;
                if !self.spoiled {
                    let recorded = std::mem::take(&mut self.recorded);
                    let mut slot = self.target.lock().unwrap_or_else(|p| p.into_inner());
                    // A concurrent iteration may have finished first: both recorded the same.
                    slot.get_or_insert_with(|| Arc::new(recorded));
                }
                None
            }
        }
    }
}

impl Drop for MemoryWriter {
    fn drop(&mut self) {
        if !self.finished && !self.spoiled {
            warn(&partial_warning("in-memory cache"));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;
    use crate::Parallelism;
    use crate::dataset::testutil::{collect, collect_results, range, scalar, values};
    use crate::error::DataError;

    /// `range(n)` mapped to `x + 100 * pass`, where `pass` counts how many times the input
    /// has been read from the start (so a re-read upstream yields different values).
    pub(super) fn changing(n: i64, reads: Arc<AtomicI64>) -> Dataset {
        range(n).map(
            move |e| {
                let x = values(&e)[0];
                if x == 0 {
                    reads.fetch_add(1, Ordering::SeqCst);
                }
                Ok(scalar(x + 100 * (reads.load(Ordering::SeqCst) - 1)))
            },
            Parallelism::Sequential,
        )
    }

    #[test]
    fn replays_the_first_complete_iteration() {
        let reads = Arc::new(AtomicI64::new(0));
        let ds = changing(4, Arc::clone(&reads)).cache(CacheTarget::Memory);
        assert_eq!(ds.cardinality(), Cardinality::Finite(4));
        assert_eq!(collect(&ds), vec![0, 1, 2, 3]);
        assert_eq!(collect(&ds), vec![0, 1, 2, 3], "replayed, not recomputed");
        assert_eq!(
            collect(&ds.clone().repeat(Some(2))),
            vec![0, 1, 2, 3, 0, 1, 2, 3]
        );
        assert_eq!(reads.load(Ordering::SeqCst), 1, "the input ran once");
        // Without the cache the input would have changed.
        let uncached = changing(2, Arc::new(AtomicI64::new(0)));
        assert_eq!(collect(&uncached), vec![0, 1]);
        assert_eq!(collect(&uncached), vec![100, 101]);
    }

    #[test]
    fn an_incomplete_iteration_is_rebuilt() {
        let reads = Arc::new(AtomicI64::new(0));
        let ds = changing(5, Arc::clone(&reads)).cache(CacheTarget::Memory);
        assert_eq!(collect(&ds.clone().take(2)), vec![0, 1]);
        // take(5) of 5 elements never asks for the end either: still incomplete.
        assert_eq!(collect(&ds.clone().take(5)), vec![100, 101, 102, 103, 104]);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        assert_eq!(
            collect(&ds),
            vec![200, 201, 202, 203, 204],
            "rebuilt from the input"
        );
        assert_eq!(collect(&ds), vec![200, 201, 202, 203, 204], "now complete");
        assert_eq!(collect(&ds.clone().take(2)), vec![200, 201]);
        assert_eq!(reads.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn an_iteration_with_an_error_is_not_kept() {
        let reads = Arc::new(AtomicI64::new(0));
        let r = Arc::clone(&reads);
        let ds = range(3)
            .map(
                move |e| {
                    let x = values(&e)[0];
                    if x == 0 {
                        r.fetch_add(1, Ordering::SeqCst);
                    }
                    if x == 1 && r.load(Ordering::SeqCst) == 1 {
                        return Err(DataError::Map("first pass fails".into()));
                    }
                    Ok(e)
                },
                Parallelism::Sequential,
            )
            .cache(CacheTarget::Memory);
        let first = collect_results(&ds);
        assert!(first[1].is_err());
        assert_eq!(collect(&ds), vec![0, 1, 2]);
        assert_eq!(collect(&ds), vec![0, 1, 2]);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        assert_eq!(ds.fingerprint(), ds.fingerprint());
    }

    #[test]
    fn empty_prefix_is_invalid() {
        let results = collect_results(&range(2).cache(CacheTarget::File(PathBuf::new())));
        assert_eq!(results.len(), 1);
        assert!(matches!(&results[0], Err(DataError::InvalidArgument(_))));
    }
}
