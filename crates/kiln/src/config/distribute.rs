//! `[distribute]`: the distribution strategy (TensorFlow's `tf.distribute` strategies).
//!
//! ```toml
//! [distribute]
//! strategy = "mirrored"   # "one_device" (default) | "mirrored" | "multi_worker_mirrored"
//!                         # | "pipeline"
//! num_replicas = 2        # mirrored: replicas on the training device (--device)
//! # devices = ["cpu", "cpu"]   # or one replica per listed device: "cpu", "gpu" / "gpu:0"
//! sync_batch_norm = false # BatchNormalization statistics per replica (default) or over
//!                         # the global batch (true; mirrored and multi_worker_mirrored)
//! ```
//!
//! `multi_worker_mirrored` takes `auto_shard_policy = "auto" | "file" | "data"` (how the
//! training input is split across workers) and `sync_batch_norm`; the workers are the
//! processes `mpirun -np N` starts (docs/distribute.md).
//!
//! ```toml
//! [distribute]
//! strategy = "pipeline"
//! stages = 2                  # balanced automatically, or layers per stage: [3, 2]
//! balance_by = "parameters"   # or "flops" (automatic balancing only)
//! num_micro_batches = 4       # GPipe micro-batches per global batch (default 1)
//! # devices = ["gpu", "gpu"]  # one device per stage (default: all on the training device)
//! ```
//!
//! `fit.batch_size` is the *global* batch size, split across the replicas (see
//! [`crate::distribute`]).

use serde::{Deserialize, Serialize};

use crate::distribute::{BalanceBy, MirroredStrategy, PipelineStrategy, Stages, Strategy};
use crate::error::{KilnError, Result};

/// `[distribute] strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StrategyKind {
    /// `tf.distribute.OneDeviceStrategy` (default).
    #[default]
    OneDevice,
    /// `tf.distribute.MirroredStrategy`: replicas in one process.
    Mirrored,
    /// `tf.distribute.MultiWorkerMirroredStrategy`: one process per worker under `mpirun`.
    MultiWorkerMirrored,
    /// Pipeline model parallelism (GPipe, [`crate::distribute::PipelineStrategy`]).
    Pipeline,
}

impl StrategyKind {
    /// The TOML / `--strategy` name.
    pub fn name(self) -> &'static str {
        match self {
            StrategyKind::OneDevice => "one_device",
            StrategyKind::Mirrored => "mirrored",
            StrategyKind::MultiWorkerMirrored => "multi_worker_mirrored",
            StrategyKind::Pipeline => "pipeline",
        }
    }
}

impl std::str::FromStr for StrategyKind {
    type Err = KilnError;
    fn from_str(s: &str) -> Result<StrategyKind> {
        [
            StrategyKind::OneDevice,
            StrategyKind::Mirrored,
            StrategyKind::MultiWorkerMirrored,
            StrategyKind::Pipeline,
        ]
        .into_iter()
        .find(|k| k.name() == s)
        .ok_or_else(|| {
            KilnError::config(
                "--strategy",
                format!(
                    "unknown strategy \"{s}\"; allowed: one_device, mirrored, \
                     multi_worker_mirrored, pipeline"
                ),
            )
        })
    }
}

/// `[distribute]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistributeConfig {
    /// Which strategy.
    #[serde(default)]
    pub strategy: StrategyKind,
    /// `mirrored`: replicas on the training device (default 1, as TensorFlow's
    /// `MirroredStrategy()` on a machine without GPUs). Exclusive with `devices`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_replicas: Option<usize>,
    /// `mirrored`: one replica per device: `"cpu"`, `"gpu"` or `"gpu:0"` (the GPU backend
    /// compiled in). Exclusive with `num_replicas`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// `pipeline`: a number of stages (balanced by `balance_by`) or each stage's number of
    /// layers (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<Stages>,
    /// `pipeline` with a number of `stages`: what the stages are balanced by (default
    /// parameters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance_by: Option<BalanceBy>,
    /// `pipeline`: micro-batches per global batch (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_micro_batches: Option<usize>,
    /// `multi_worker_mirrored`: how the training input is split across workers (default
    /// `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_shard_policy: Option<AutoShardPolicy>,
    /// `mirrored` and `multi_worker_mirrored`: BatchNormalization batch statistics over the
    /// whole global batch (Keras' `BatchNormalization(synchronized=True)`) instead of each
    /// replica's share (default false). `one_device` has one replica: nothing to synchronize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_batch_norm: Option<bool>,
}

/// `[distribute] auto_shard_policy`: how `multi_worker_mirrored` splits the training input
/// across workers (`tf.data.experimental.AutoShardPolicy`, lowercased).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoShardPolicy {
    /// `file` when the training pipeline reads at least as many files as there are workers
    /// (`tfrecord`, `text` and `csv` sources), `data` otherwise (TensorFlow's `AUTO`).
    #[default]
    Auto,
    /// Each worker reads every N-th file and batches it at its part of the global batch.
    File,
    /// Every worker reads the whole input and keeps its rows of each global batch.
    Data,
}

impl<'de> Deserialize<'de> for AutoShardPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<AutoShardPolicy, D::Error> {
        let name = String::deserialize(d).ok();
        match name.as_deref() {
            Some("auto") => Ok(AutoShardPolicy::Auto),
            Some("file") => Ok(AutoShardPolicy::File),
            Some("data") => Ok(AutoShardPolicy::Data),
            _ => Err(serde::de::Error::custom(format!(
                "distribute.auto_shard_policy: {} is not a policy; use \"auto\", \"file\" or \
                 \"data\" (tf.data's AutoShardPolicy names in lower case; OFF, where every \
                 worker trains on all the data, is not offered)",
                name.map_or("this value".to_string(), |n| format!("{n:?}"))
            ))),
        }
    }
}

pub use crate::distribute::DEFAULT_PIPELINE_STAGES;

impl DistributeConfig {
    /// True for the default (`one_device`, nothing else set): the resolved config then
    /// omits the table.
    pub fn is_default(&self) -> bool {
        *self == DistributeConfig::default()
    }

    /// Checks the keys: [`DistributeConfig::validate_values`], then that each key belongs to
    /// the strategy in use.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming the key: as [`DistributeConfig::validate_values`]; replica
    /// keys without `strategy = "mirrored"`, pipeline keys without `strategy = "pipeline"`,
    /// `auto_shard_policy` without `"multi_worker_mirrored"`, not one device per pipeline
    /// stage.
    pub fn validate(&self) -> Result<()> {
        self.validate_values()?;
        let strategy = self.strategy.name();
        let wrong = |key: &str, of: &str| {
            KilnError::config(
                format!("distribute.{key}"),
                format!(
                    "is a key of strategy = \"{of}\", but the strategy is \"{strategy}\" \
                     ([distribute] strategy or --strategy); set strategy = \"{of}\", or \
                     remove the key"
                ),
            )
        };
        if self.auto_shard_policy.is_some() && self.strategy != StrategyKind::MultiWorkerMirrored {
            return Err(wrong("auto_shard_policy", "multi_worker_mirrored"));
        }
        if self.sync_batch_norm == Some(true) && self.strategy == StrategyKind::Pipeline {
            return Err(KilnError::config(
                "distribute.sync_batch_norm",
                "is for the data-parallel strategies (\"mirrored\", \"multi_worker_mirrored\"); \
                 a pipeline has one replica, and its micro-batches keep their own statistics \
                 (GPipe); remove the key, or set num_micro_batches = 1 for whole-batch \
                 statistics",
            ));
        }
        let pipeline_key = [
            ("stages", self.stages.is_some()),
            ("balance_by", self.balance_by.is_some()),
            ("num_micro_batches", self.num_micro_batches.is_some()),
        ]
        .into_iter()
        .find(|(_, set)| *set);
        if let Some((key, _)) = pipeline_key
            && self.strategy != StrategyKind::Pipeline
        {
            return Err(wrong(key, "pipeline"));
        }
        match self.strategy {
            StrategyKind::Pipeline => {
                if self.num_replicas.is_some() {
                    return Err(KilnError::config(
                        "distribute.num_replicas",
                        "(or --num-replicas) is for strategy = \"mirrored\"; a pipeline has \
                         one replica, split into `stages`",
                    ));
                }
                if !self.devices.is_empty() {
                    self.pipeline()?
                        .on_devices(vec![burn::prelude::Device::flex(); self.devices.len()])?;
                }
            }
            StrategyKind::OneDevice | StrategyKind::MultiWorkerMirrored
                if self.num_replicas.is_some() || !self.devices.is_empty() =>
            {
                return Err(KilnError::config(
                    "distribute.strategy",
                    "num_replicas and devices need strategy = \"mirrored\" (with \
                     \"multi_worker_mirrored\" the replicas are mpirun's processes: mpirun -np N)",
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// Checks the settings against the model: a pipeline's stages must fit its layers
    /// ([`crate::distribute::balance::plan`]).
    ///
    /// # Errors
    /// [`KilnError::Config`] (`distribute.stages`) as [`crate::distribute::balance::plan`].
    pub fn check_model(&self, spec: &crate::model::ModelSpec) -> Result<()> {
        self.pipeline_plan(spec).map(|_| ())
    }

    /// With `strategy = "pipeline"`, each stage's layer range for `spec`; `None` otherwise.
    ///
    /// # Errors
    /// As [`DistributeConfig::check_model`].
    pub fn pipeline_plan(
        &self,
        spec: &crate::model::ModelSpec,
    ) -> Result<Option<Vec<std::ops::Range<usize>>>> {
        if self.strategy != StrategyKind::Pipeline {
            return Ok(None);
        }
        Ok(Some(self.pipeline()?.plan(spec)?.to_vec()))
    }

    /// Checks each key's value on its own, whatever the strategy (what a config file is
    /// refused for when it is loaded, before `kiln train --strategy` may change the strategy).
    ///
    /// # Errors
    /// [`KilnError::Config`] naming the key: `num_replicas` 0 or over 4096, both `num_replicas` and
    /// `devices`, an unknown device, zero stages or micro-batches, a stage of 0 layers,
    /// `balance_by` with the stages' sizes given.
    pub fn validate_values(&self) -> Result<()> {
        if let Some(n) = self.num_replicas {
            // 0 or too many replicas.
            MirroredStrategy::new(n)?;
        }
        if self.num_replicas.is_some() && !self.devices.is_empty() {
            return Err(KilnError::config(
                "distribute.devices",
                "give either num_replicas or devices, not both",
            ));
        }
        for (i, d) in self.devices.iter().enumerate() {
            device_kind(d).map_err(|m| KilnError::config(format!("distribute.devices[{i}]"), m))?;
        }
        self.pipeline()?;
        if let Some(Stages::Sizes(sizes)) = &self.stages {
            if let Some(s) = sizes.iter().position(|&s| s == 0) {
                return Err(KilnError::config(
                    format!("distribute.stages[{s}]"),
                    "is 0: each stage runs at least one layer",
                ));
            }
            if self.balance_by.is_some() {
                return Err(KilnError::config(
                    "distribute.balance_by",
                    "applies when `stages` is a number; with each stage's layer count given \
                     there is nothing to balance",
                ));
            }
        }
        Ok(())
    }

    /// The strategy object for training on `device` (the `--device` one).
    ///
    /// # Errors
    /// As [`DistributeConfig::validate`]; [`KilnError::Device`] for `"gpu"` without a GPU
    /// backend; [`KilnError::Config`] (`distribute.strategy`) for `multi_worker_mirrored`
    /// when MPI cannot start, and for another strategy in a process that `mpirun` started
    /// among several.
    pub fn build(&self) -> Result<Strategy> {
        self.validate()?;
        if let Some(w) = crate::distribute::world::launched()
            && w.size > 1
            && self.strategy != StrategyKind::MultiWorkerMirrored
        {
            return Err(crate::distribute::world::not_multi_worker(
                w,
                self.strategy.name(),
            ));
        }
        let sync = self.sync_batch_norm.unwrap_or(false);
        match self.strategy {
            StrategyKind::MultiWorkerMirrored => {
                return Ok(Strategy::MultiWorkerMirrored(
                    crate::distribute::MultiWorkerMirroredStrategy::new()?
                        .with_sync_batch_norm(sync),
                ));
            }
            StrategyKind::Mirrored => {}
            StrategyKind::Pipeline => return self.build_pipeline().map(Strategy::Pipeline),
            StrategyKind::OneDevice => return Ok(Strategy::OneDevice),
        }
        let mirrored = if self.devices.is_empty() {
            MirroredStrategy::new(self.num_replicas.unwrap_or(1))?
        } else {
            MirroredStrategy::on_devices(self.resolve_devices()?)?
        };
        Ok(Strategy::Mirrored(mirrored.with_sync_batch_norm(sync)?))
    }
}

impl DistributeConfig {
    /// The pipeline's stages and micro-batches, its stages not yet placed on devices.
    fn pipeline(&self) -> Result<PipelineStrategy> {
        PipelineStrategy::new(
            self.stages
                .clone()
                .unwrap_or(Stages::Count(DEFAULT_PIPELINE_STAGES)),
            self.balance_by.unwrap_or_default(),
            self.num_micro_batches.unwrap_or(1),
        )
    }

    fn build_pipeline(&self) -> Result<PipelineStrategy> {
        let pipe = self.pipeline()?;
        if self.devices.is_empty() {
            return Ok(pipe);
        }
        pipe.on_devices(self.resolve_devices()?)
    }

    fn resolve_devices(&self) -> Result<Vec<burn::prelude::Device>> {
        self.devices
            .iter()
            .enumerate()
            .map(|(i, d)| {
                // The device's own reason (no GPU backend built in, or what a CUDA run
                // lacks), under the config key.
                crate::device::resolve(device_kind(d).expect("validated")).map_err(|e| {
                    KilnError::config(format!("distribute.devices[{i}]"), format!("\"{d}\": {e}"))
                })
            })
            .collect()
    }
}

fn device_kind(name: &str) -> std::result::Result<crate::DeviceKind, String> {
    match name {
        "cpu" | "cpu:0" => Ok(crate::DeviceKind::Cpu),
        "gpu" | "gpu:0" => Ok(crate::DeviceKind::Gpu),
        other => Err(format!(
            "unknown device \"{other}\"; allowed: \"cpu\", \"gpu\" (= \"gpu:0\"); other GPU \
             indices are not addressable yet (\"cpu\" may be listed several times)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<DistributeConfig> {
        let c: DistributeConfig = toml::from_str(text)
            .map_err(|e| KilnError::config("distribute", crate::error::humanize(e.message())))?;
        c.validate()?;
        Ok(c)
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn mirrored_with_replicas_builds_that_many() {
        let c = parse("strategy = \"mirrored\"\nnum_replicas = 2").unwrap();
        assert_eq!(c.build().unwrap().num_replicas_in_sync(), 2);
        let c = parse("strategy = \"mirrored\"\ndevices = [\"cpu\", \"cpu\", \"cpu\"]").unwrap();
        assert_eq!(c.build().unwrap().num_replicas_in_sync(), 3);
        let c = parse("strategy = \"mirrored\"").unwrap();
        assert_eq!(c.build().unwrap().num_replicas_in_sync(), 1);
        let c = parse("").unwrap();
        assert!(c.is_default());
        assert!(matches!(c.build().unwrap(), Strategy::OneDevice));
    }

    #[test]
    fn bad_settings_name_the_key() {
        assert!(
            err("strategy = \"mirrored\"\nnum_replicas = 0").contains("distribute.num_replicas")
        );
        let many = err("strategy = \"mirrored\"\nnum_replicas = 1000000000000");
        assert!(
            many.contains("distribute.num_replicas") && many.contains("over 4096"),
            "{many}"
        );
        let both = err("strategy = \"mirrored\"\nnum_replicas = 2\ndevices = [\"cpu\"]");
        assert!(
            both.contains("distribute.devices") && both.contains("not both"),
            "{both}"
        );
        let dev = err("strategy = \"mirrored\"\ndevices = [\"cpu\", \"tpu\"]");
        assert!(
            dev.contains("distribute.devices[1]") && dev.contains("tpu"),
            "{dev}"
        );
        assert!(err("num_replicas = 2").contains("need strategy = \"mirrored\""));
        let workers = err("strategy = \"multi_worker_mirrored\"\nnum_replicas = 2");
        assert!(workers.contains("mpirun -np N"), "{workers}");
        let stray = err("num_micro_batches = 4");
        assert!(
            stray.contains("distribute.num_micro_batches")
                && stray.contains("the strategy is \"one_device\"")
                && stray.contains("--strategy"),
            "{stray}"
        );
        let replicas = err("strategy = \"pipeline\"\nnum_replicas = 2");
        assert!(replicas.contains("distribute.num_replicas"), "{replicas}");
        let devices = err("strategy = \"pipeline\"\nstages = 3\ndevices = [\"cpu\", \"cpu\"]");
        assert!(devices.contains("2 devices for 3 stages"), "{devices}");
        let micro = err("strategy = \"pipeline\"\nnum_micro_batches = 0");
        assert!(micro.contains("distribute.num_micro_batches"), "{micro}");
        let nothing = err("strategy = \"pipeline\"\nstages = []");
        assert!(nothing.contains("distribute.stages"), "{nothing}");
        let both = err("strategy = \"pipeline\"\nstages = [1, 2]\nbalance_by = \"flops\"");
        assert!(both.contains("distribute.balance_by"), "{both}");
        let shard = err("strategy = \"mirrored\"\nauto_shard_policy = \"file\"");
        assert!(shard.contains("distribute.auto_shard_policy"), "{shard}");
        let policy = err("strategy = \"multi_worker_mirrored\"\nauto_shard_policy = \"off\"");
        assert!(
            policy.contains("auto") && policy.contains("file"),
            "{policy}"
        );
        let sync = err("strategy = \"pipeline\"\nsync_batch_norm = true");
        assert!(
            sync.contains("distribute.sync_batch_norm") && sync.contains("micro-batches"),
            "{sync}"
        );
        let by = err("strategy = \"pipeline\"\nbalance_by = \"memory\"");
        assert!(by.contains("parameters") && by.contains("flops"), "{by}");
        assert!(err("strategy = \"ring\"").contains("mirrored"));
        assert!(err("replicas = 2").contains("replicas"));
    }

    #[test]
    fn pipeline_keys_build_a_pipeline() {
        let c = parse(
            "strategy = \"pipeline\"\nstages = [2, 1]\nnum_micro_batches = 4\n\
             devices = [\"cpu\", \"cpu\"]",
        )
        .unwrap();
        let Strategy::Pipeline(p) = c.build().unwrap() else {
            panic!("a pipeline")
        };
        assert_eq!(p.num_micro_batches(), 4);
        assert!(p.has_devices());
        let c = parse("strategy = \"pipeline\"\nbalance_by = \"flops\"").unwrap();
        assert_eq!(c.balance_by, Some(BalanceBy::Flops));
        assert!(matches!(c.build().unwrap(), Strategy::Pipeline(_)));
        // Round trip through the resolved config's TOML.
        let text = toml::to_string(&c).unwrap();
        assert_eq!(toml::from_str::<DistributeConfig>(&text).unwrap(), c);
    }

    #[test]
    fn strategy_names_round_trip() {
        for name in [
            "one_device",
            "mirrored",
            "multi_worker_mirrored",
            "pipeline",
        ] {
            let k: StrategyKind = name.parse().unwrap();
            assert_eq!(k.name(), name);
        }
        assert!("Mirrored".parse::<StrategyKind>().is_err());
    }
}
