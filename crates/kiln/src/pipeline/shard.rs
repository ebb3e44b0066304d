//! How `multi_worker_mirrored` splits the training input across workers
//! (`tf.data.experimental.AutoShardPolicy`; TensorFlow guide "Distributed input").
//!
//! - `file`: worker `r` of `N` reads files `r, r + N, …` of the training pipeline's sorted
//!   file list and batches them at its part of the global batch (`⌊B/N⌋` or `⌈B/N⌉`),
//!   so each worker reads and preprocesses only its files. A step's global batch is the union
//!   of the workers' batches (weighted by their sizes); a worker whose files run out steps
//!   with no examples until every worker's have, as TensorFlow does with uneven shards.
//! - `data`: every worker runs the whole pipeline and keeps its rows of each global batch
//!   (what a one-device run would train on, split as `MirroredStrategy` splits it).
//! - `auto` (default): `file` when the pipeline reads at least as many files as there are
//!   workers, `data` otherwise (IDX / NPY sources, too few files).

use super::{Shard, Split, shardable_files};
use crate::config::{AutoShardPolicy, RunConfig};
use crate::distribute::world::World;
use crate::error::{KilnError, Result};

/// What a worker reads: its shard (`None`: the whole input, the `data` policy) and a line
/// for the user saying which policy applies and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSharding {
    /// This worker's files and batch size, with the `file` policy.
    pub shard: Option<Shard>,
    /// What was chosen and why (printed by the chief).
    pub note: Option<String>,
}

/// This worker's part of the training input under `[distribute] auto_shard_policy`, for a
/// job of `world.size` workers.
///
/// `auto` shards by file when the training pipeline reads at least one file per worker, its
/// global batch has at least one example per worker, and it has no `skip` / `take` (they
/// would apply to each worker's files, not to the whole input: the usual way of holding out
/// validation rows would then leak them into training); otherwise every worker reads the
/// whole input (`data`), and the note says why.
///
/// # Errors
/// [`KilnError::Config`] (`distribute.auto_shard_policy`) for `file` when the source cannot
/// be split by file, has fewer files than workers, or the global batch is smaller than the
/// number of workers; file errors as [`shardable_files`].
pub fn input_shard(cfg: &RunConfig, world: World) -> Result<InputSharding> {
    let policy = cfg.distribute.auto_shard_policy.unwrap_or_default();
    let whole = |note: Option<String>| Ok(InputSharding { shard: None, note });
    if world.size <= 1 || policy == AutoShardPolicy::Data || !cfg.data.uses_pipelines() {
        return whole(None);
    }
    let n = world.size;
    let train = cfg.data.train.as_ref();
    let global = train
        .and_then(|p| p.batch_size)
        .unwrap_or(cfg.fit.batch_size);
    let files = shardable_files(cfg, Split::Train)?;
    let why_not = match files {
        None => Some(
            "data.train's source is not read file by file (IDX / NPY arrays hold one \
             component per file; an image folder is one directory)"
                .to_string(),
        ),
        Some(f) if f < n => Some(format!(
            "data.train reads {f} file{} for {n} workers (at least one file per worker is \
             needed)",
            if f == 1 { "" } else { "s" }
        )),
        Some(_) if global < n => Some(format!(
            "the global batch ({global}) is smaller than the number of workers ({n})"
        )),
        Some(_) if train.is_some_and(|p| p.skip.is_some() || p.take.is_some()) => Some(
            "data.train has skip / take, which would apply to each worker's files instead of \
             the whole input"
                .to_string(),
        ),
        Some(_) => None,
    };
    if let Some(reason) = why_not {
        if policy == AutoShardPolicy::File {
            return Err(KilnError::config(
                "distribute.auto_shard_policy",
                format!(
                    "\"file\" cannot split the input: {reason}; use \"data\" (every worker \
                     reads everything and keeps its rows of each batch) or \"auto\""
                ),
            ));
        }
        return whole(Some(format!(
            "Input not sharded by file (auto_shard_policy = \"auto\"): {reason}; every worker \
             reads the whole input and keeps its rows of each global batch"
        )));
    }
    // As even as possible, so that every worker has examples: TensorFlow's replica split
    // (`split_sizes`) would give 4 over 3 workers as 2 + 2 + 0, and a worker batching its own
    // files needs at least one per batch.
    let sizes = crate::distribute::even_sizes(global, n);
    Ok(InputSharding {
        shard: Some(Shard {
            index: world.rank,
            count: n,
            batch_size: sizes[world.rank],
        }),
        note: Some(format!(
            "Input sharded by file (auto_shard_policy): worker r of the {n} reads files r, \
             r + {n}, … of data.train and batches them at its part of the global batch of \
             {global} ({}); shuffle, cache and repeat apply to each worker's files",
            sizes
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(" + ")
        )),
    })
}

/// `cfg` with each pipeline's `cache` file made this worker's own (`<prefix>.worker<r>`), for
/// a job of more than one worker: the workers would otherwise write the same cache files.
pub fn per_worker_caches(cfg: &RunConfig, world: World) -> RunConfig {
    let mut out = cfg.clone();
    if world.size <= 1 {
        return out;
    }
    for p in [
        out.data.train.as_mut(),
        out.data.validation.as_mut(),
        out.data.test.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        if let Some(c) = p.cache.as_mut()
            && c != "memory"
        {
            *c = format!("{c}.worker{}", world.rank);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three CSV files in a fresh directory and a config reading them with `extra` keys in
    /// `[data.train]` and `[distribute]`.
    fn config(name: &str, train: &str, distribute: &str) -> RunConfig {
        let dir = std::env::temp_dir().join(format!("kiln-shard-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["p0.csv", "p1.csv", "p2.csv"] {
            std::fs::write(dir.join(f), "v,label\n1,0\n2,1\n").unwrap();
        }
        let text = format!(
            "name = \"t\"\n[data]\ndata_dir = {:?}\n[data.train]\nsource = \"csv\"\nfiles = \"p*.csv\"\nlabel_name = \"label\"\nx = \"v\"\nbatch_size = 4\n{train}\n[model]\nlayers = [{{ type = \"Input\", shape = [1] }}, {{ type = \"Dense\", units = 2 }}]\n[compile]\noptimizer = \"sgd\"\nloss = \"sparse_categorical_crossentropy\"\n[distribute]\nstrategy = \"multi_worker_mirrored\"\n{distribute}\n",
            dir.display().to_string()
        );
        RunConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    fn world(rank: usize, size: usize) -> World {
        World { rank, size }
    }

    #[test]
    fn auto_shards_by_file_with_a_file_per_worker() {
        let cfg = config("auto", "", "");
        let s = input_shard(&cfg, world(1, 3)).unwrap();
        // Batch 4 over 3 workers: 2 + 1 + 1 (TensorFlow's split), worker 1 gets 1.
        assert_eq!(
            s.shard,
            Some(Shard {
                index: 1,
                count: 3,
                batch_size: 1
            })
        );
        assert!(s.note.unwrap().contains("(2 + 1 + 1)"));
        // A job of one, or the data policy: the whole input, nothing to say.
        assert_eq!(input_shard(&cfg, world(0, 1)).unwrap().shard, None);
        let data = config("data", "", "auto_shard_policy = \"data\"");
        assert_eq!(input_shard(&data, world(0, 2)).unwrap().note, None);
    }

    /// `auto` falls back to the whole input, saying why: too few files, a batch smaller than
    /// the number of workers, skip / take on the files; `file` refuses the same cases.
    #[test]
    fn auto_falls_back_and_file_refuses_when_files_cannot_be_split() {
        for (name, train, workers, why) in [
            ("few", "", 4, "reads 3 files for 4 workers"),
            ("small", "", 5, "reads 3 files for 5 workers"),
            ("take", "take = 4", 2, "skip / take"),
        ] {
            let auto = config(name, train, "");
            let s = input_shard(&auto, world(0, workers)).unwrap();
            assert_eq!(s.shard, None, "{name}");
            let note = s.note.unwrap();
            assert!(
                note.contains("Input not sharded") && note.contains(why),
                "{note}"
            );
            let file = config(name, train, "auto_shard_policy = \"file\"");
            let err = input_shard(&file, world(0, workers))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("distribute.auto_shard_policy") && err.contains(why),
                "{err}"
            );
        }
        let tiny = config("tiny", "", "");
        let mut tiny = tiny;
        tiny.data.train.as_mut().unwrap().batch_size = Some(2);
        let note = input_shard(&tiny, world(0, 3)).unwrap().note.unwrap();
        assert!(note.contains("global batch (2) is smaller"), "{note}");
    }

    #[test]
    fn caches_become_each_workers_own() {
        let cfg = config("cache", "cache = \"/tmp/c\"", "");
        let w = per_worker_caches(&cfg, world(1, 2));
        assert_eq!(
            w.data.train.unwrap().cache.as_deref(),
            Some("/tmp/c.worker1")
        );
        let one = per_worker_caches(&cfg, world(0, 1));
        assert_eq!(one.data.train.unwrap().cache.as_deref(), Some("/tmp/c"));
    }
}
