//! The logs a custom step returns: named scalars still on the device.

use burn::prelude::*;

use crate::error::KilnError;

/// Keys `fit` itself writes into the epoch's logs; a step's logs may not use them (nor the
/// `val_` prefix, which names validation values).
pub const RESERVED_LOGS: [&str; 11] = [
    "learning_rate",
    crate::logs::SAMPLES_PER_SECOND,
    crate::logs::INPUT_WAIT_SECONDS,
    crate::logs::LOSS_SCALE,
    crate::logs::SKIPPED_KEY,
    "skipped_records",
    "skipped_nan_steps",
    "communication_seconds",
    "train_seconds",
    "communication_wait_seconds",
    "all_reduce_seconds",
];

/// A step's logs: `(name, value)` pairs in the order given, each value a one-element tensor
/// (e.g. a loss), read back by `fit` when it reads the step.
#[derive(Debug, Default)]
pub struct StepLogs {
    values: Vec<(String, Tensor<1>)>,
}

impl StepLogs {
    /// No logs yet.
    pub fn new() -> StepLogs {
        StepLogs::default()
    }

    /// Adds `name` with `value` (a `[1]` tensor, detached from the graph here).
    pub fn with(mut self, name: impl Into<String>, value: Tensor<1>) -> StepLogs {
        self.values.push((name.into(), value.detach()));
        self
    }

    /// The names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.values.iter().map(|(n, _)| n.as_str())
    }

    /// Checks the names and shapes: `loss` present, no name twice, none reserved, every value
    /// one element.
    ///
    /// # Errors
    /// [`KilnError::TrainStep`] naming `step` and the key.
    pub fn check(&self, step: &str) -> Result<(), KilnError> {
        let bad = |key: &str, message: String| KilnError::TrainStep {
            step: step.to_string(),
            key: key.to_string(),
            message,
        };
        for (i, (name, value)) in self.values.iter().enumerate() {
            if name.is_empty() {
                return Err(bad(name, "a log needs a name".into()));
            }
            if self.values[..i].iter().any(|(n, _)| n == name) {
                return Err(bad(name, "returned twice in one step's logs".into()));
            }
            if name.starts_with("val_") || RESERVED_LOGS.contains(&name.as_str()) {
                return Err(bad(
                    name,
                    "is a name fit writes itself (and `val_` names validation values); \
                     rename the log"
                        .into(),
                ));
            }
            if value.dims()[0] != 1 {
                return Err(bad(
                    name,
                    format!(
                        "has {} values; a log is one value (take the mean of a per-example \
                         tensor)",
                        value.dims()[0]
                    ),
                ));
            }
        }
        if !self.values.iter().any(|(n, _)| n == "loss") {
            return Err(bad(
                "loss",
                "the step returned no `loss`: fit needs it (NaN checks, callbacks' \
                 monitor); add StepLogs::with(\"loss\", ...)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The logs of a global batch from its replicas' logs, each weighted by its share of the
    /// batch (`Σ share × value`, on the device of the first replica's): the mean over the
    /// global batch of values that are means over each replica's examples.
    ///
    /// # Errors
    /// A message when the replicas returned different names.
    pub fn weighted_sum(replicas: Vec<(StepLogs, f64)>) -> Result<StepLogs, String> {
        let mut replicas = replicas.into_iter();
        let Some((first, share)) = replicas.next() else {
            return Ok(StepLogs::new());
        };
        let mut sum: Vec<(String, Tensor<1>)> = first
            .values
            .into_iter()
            .map(|(n, v)| (n, v.mul_scalar(share)))
            .collect();
        for (r, (logs, share)) in replicas.enumerate() {
            let names: Vec<&str> = logs.names().collect();
            if names != sum.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>() {
                return Err(format!(
                    "replica {} returned the logs [{}], replica 0 [{}]; every replica must \
                     return the same names",
                    r + 1,
                    names.join(", "),
                    sum.iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            for ((_, total), (_, v)) in sum.iter_mut().zip(logs.values) {
                let v = v.mul_scalar(share).to_device(&total.device());
                *total = total.clone() + v;
            }
        }
        Ok(StepLogs { values: sum })
    }

    /// Logs of read-back `values`, as one-element tensors on `device`.
    pub fn from_values(values: &[(String, f64)], device: &Device) -> StepLogs {
        let values = values
            .iter()
            .map(|(n, v)| {
                let t = Tensor::<1>::from_data(TensorData::new(vec![*v as f32], [1]), device);
                (n.clone(), t)
            })
            .collect();
        StepLogs { values }
    }

    /// Reads every value back with one host read, in order.
    pub fn read(self) -> Vec<(String, f64)> {
        StepLogs::read_all(vec![self]).remove(0)
    }

    /// Reads the values of several steps' logs back with one host read, in order.
    pub fn read_all(steps: Vec<StepLogs>) -> Vec<Vec<(String, f64)>> {
        let widths: Vec<usize> = steps.iter().map(|l| l.values.len()).collect();
        let (mut names, mut values) = (Vec::new(), Vec::new());
        for l in steps {
            for (n, v) in l.values {
                names.push(n);
                values.push(v);
            }
        }
        let read = match values.is_empty() {
            true => Vec::new(),
            false => Tensor::cat(values, 0)
                .into_data()
                .convert::<f32>()
                .try_to_vec::<f32>()
                .expect("float logs"),
        };
        let mut all = names.into_iter().zip(read.into_iter().map(f64::from));
        widths
            .into_iter()
            .map(|w| all.by_ref().take(w).collect())
            .collect()
    }
}
