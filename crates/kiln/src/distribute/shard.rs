//! How `multi_worker_mirrored` splits the training input across workers
//! (`tf.data.experimental.AutoShardPolicy`; TensorFlow guide "Distributed input").
//!
//! - `file`: worker `r` of `N` reads files `r, r + N, …` of the training pipeline's sorted
//!   file list and batches them at its part of the global batch (`split_sizes(global, N)[r]`),
//!   so each worker reads and preprocesses only its files. A step's global batch is the union
//!   of the workers' batches (weighted by their sizes); a worker whose files run out steps
//!   with no examples until every worker's have, as TensorFlow does with uneven shards.
//! - `data`: every worker runs the whole pipeline and keeps its rows of each global batch
//!   (what a one-device run would train on, split as `MirroredStrategy` splits it).
//! - `auto` (default): `file` when the pipeline reads at least as many files as there are
//!   workers, `data` otherwise (IDX / NPY sources, too few files).

use crate::config::{AutoShardPolicy, RunConfig};
use crate::distribute::split_sizes;
use crate::distribute::world::World;
use crate::error::{KilnError, Result};
use crate::pipeline::{Shard, Split, shardable_files};

/// This worker's shard of the training input, or `None` for the `data` policy (or a job of
/// one, or a run without pipeline tables).
///
/// # Errors
/// [`KilnError::Config`] (`distribute.auto_shard_policy`) for `file` when the pipeline's
/// source cannot be split by file or has fewer files than workers; file errors as
/// [`shardable_files`].
pub fn input_shard(cfg: &RunConfig, world: World) -> Result<Option<Shard>> {
    let policy = cfg.distribute.auto_shard_policy.unwrap_or_default();
    if world.size <= 1 || policy == AutoShardPolicy::Data || !cfg.data.uses_pipelines() {
        return Ok(None);
    }
    let files = shardable_files(cfg, Split::Train)?;
    let enough = files.is_some_and(|n| n >= world.size);
    if !enough {
        if policy == AutoShardPolicy::File {
            return Err(KilnError::config(
                "distribute.auto_shard_policy",
                match files {
                    Some(n) => format!(
                        "\"file\" needs at least one file per worker, but data.train reads {n} \
                         file(s) for {} workers; split the data into more files, or use \
                         \"data\" (every worker reads everything)",
                        world.size
                    ),
                    None => "\"file\" needs a tfrecord, text or csv source (data.train's files \
                             hold one component each or are one folder); use \"data\" or \
                             \"auto\""
                        .to_string(),
                },
            ));
        }
        return Ok(None);
    }
    let global = cfg
        .data
        .train
        .as_ref()
        .and_then(|p| p.batch_size)
        .unwrap_or(cfg.fit.batch_size);
    Ok(Some(Shard {
        index: world.rank,
        count: world.size,
        batch_size: split_sizes(global, world.size)[world.rank].max(1),
    }))
}
