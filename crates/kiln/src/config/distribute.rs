//! `[distribute]`: the distribution strategy (TensorFlow's `tf.distribute` strategies).
//!
//! ```toml
//! [distribute]
//! strategy = "mirrored"   # "one_device" (default) | "mirrored" | "multi_worker_mirrored"
//! num_replicas = 2        # mirrored: replicas on the training device (--device)
//! # devices = ["cpu", "cpu"]   # or one replica per listed device: "cpu", "gpu" / "gpu:0"
//! ```
//!
//! `multi_worker_mirrored` takes no other key: the workers are the processes `mpirun -np N`
//! starts (docs/distribute.md).
//!
//! `fit.batch_size` is the *global* batch size, split across the replicas (see
//! [`crate::distribute`]).

use serde::{Deserialize, Serialize};

use crate::distribute::{MirroredStrategy, Strategy};
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
    /// Pipeline model parallelism (GPipe): not built yet (refused).
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
}

impl DistributeConfig {
    /// True for the default (`one_device`, nothing else set): the resolved config then
    /// omits the table.
    pub fn is_default(&self) -> bool {
        *self == DistributeConfig::default()
    }

    /// Checks the keys together.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming the key: `num_replicas = 0`, both `num_replicas` and
    /// `devices`, replica keys without `strategy = "mirrored"`, or a strategy not built yet.
    pub fn validate(&self) -> Result<()> {
        match self.strategy {
            StrategyKind::Pipeline => {
                return Err(KilnError::config(
                    "distribute.strategy",
                    format!(
                        "\"{}\" is not available yet; use \"mirrored\" (replicas in one \
                         process), \"multi_worker_mirrored\" (processes under mpirun) or \
                         \"one_device\"",
                        self.strategy.name()
                    ),
                ));
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
        if self.num_replicas == Some(0) {
            return Err(KilnError::config(
                "distribute.num_replicas",
                "must be at least 1 (the number of replicas the global batch is split across)",
            ));
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
        match self.strategy {
            StrategyKind::MultiWorkerMirrored => {
                return Ok(Strategy::MultiWorkerMirrored(
                    crate::distribute::MultiWorkerMirroredStrategy::new()?,
                ));
            }
            StrategyKind::Mirrored => {}
            _ => return Ok(Strategy::OneDevice),
        }
        if self.devices.is_empty() {
            return Ok(Strategy::Mirrored(MirroredStrategy::new(
                self.num_replicas.unwrap_or(1),
            )?));
        }
        let devices = self
            .devices
            .iter()
            .map(|d| crate::device::resolve(device_kind(d).expect("validated")))
            .collect::<Result<Vec<_>>>()?;
        Ok(Strategy::Mirrored(MirroredStrategy::on_devices(devices)?))
    }
}

fn device_kind(name: &str) -> std::result::Result<crate::DeviceKind, String> {
    match name {
        "cpu" | "cpu:0" => Ok(crate::DeviceKind::Cpu),
        "gpu" | "gpu:0" => Ok(crate::DeviceKind::Gpu),
        other => Err(format!(
            "unknown device \"{other}\"; allowed: \"cpu\", \"gpu\" (= \"gpu:0\"); other GPU \
             indices are not addressable yet: list \"cpu\" several times for CPU replicas"
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
        let later = err("strategy = \"pipeline\"");
        assert!(later.contains("not available yet"), "{later}");
        assert!(err("strategy = \"ring\"").contains("mirrored"));
        assert!(err("replicas = 2").contains("replicas"));
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
