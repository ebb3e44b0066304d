//! A model trained by a custom step ([`crate::step::custom`]): its extra parts, the step, the
//! settings a custom step cannot use yet, and evaluation through the step's `test_step`.

use std::sync::Arc;

use burn::module::Module;
use burn::optim::ModuleOptimizer;

use super::epoch_metrics::Accumulator;
use super::{Logs, Model};
use crate::batch::DeviceBatch;
use crate::error::{KilnError, Result};
use crate::model::Network;
use crate::step::custom::{Part, PartSpec, Parts, StepLogs, TrainStep};

impl Model {
    /// Adds a network for a custom train step (Keras: another model the subclass holds,
    /// e.g. a GAN's generator), with fresh weights from the model's seed and its own
    /// optimizer. It is trained only by what the step applies to it, and saved and restored
    /// with the model in checkpoints.
    ///
    /// # Errors
    /// [`KilnError::Config`] on `parts.<name>` for the name `main` or a name used twice.
    pub fn add_part(&mut self, spec: PartSpec) -> Result<()> {
        let key = format!("parts.{}", spec.name);
        if spec.name == "main" || self.parts.iter().any(|p| p.name() == spec.name) {
            return Err(KilnError::config(
                key,
                "a part's name must be unique and not `main` (the compiled model)",
            ));
        }
        if spec.gradients.gradient_accumulation_steps > 1 {
            return Err(KilnError::config(
                format!("{key}.optimizer.gradient_accumulation_steps"),
                "a part's updates are the step's to apply; accumulate inside the step",
            ));
        }
        let seed = self.seed.wrapping_add(1 + self.parts.len() as u64);
        let part = Part::init(&spec, seed, &self.device);
        self.parts.push(part);
        Ok(())
    }

    /// Trains with `step` instead of the compiled step (Keras' `train_step` override).
    pub fn set_train_step(&mut self, step: Arc<dyn TrainStep>) {
        self.train_step = Some(step);
    }

    /// The extra part named `name`.
    pub fn part(&self, name: &str) -> Option<&Part> {
        self.parts.iter().find(|p| p.name() == name)
    }

    /// The extra parts, in the order they were added.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Saves part `name`'s weights (safetensors, Keras names and layouts).
    ///
    /// # Errors
    /// [`KilnError::Config`] for an unknown part; I/O errors.
    pub fn save_part_weights(&self, name: &str, path: &std::path::Path) -> Result<()> {
        let part = self.part(name).ok_or_else(|| unknown_part(name))?;
        crate::model::weights::save(part.spec(), part.network(), path)
    }

    /// Replaces part `name`'s weights with those of a safetensors file written by
    /// [`Model::save_part_weights`].
    ///
    /// # Errors
    /// [`KilnError::Config`] for an unknown part; weights and I/O errors.
    pub fn load_part_weights(&mut self, name: &str, path: &std::path::Path) -> Result<()> {
        let device = self.device.clone().autodiff();
        let part = self
            .parts
            .iter_mut()
            .find(|p| p.name() == name)
            .ok_or_else(|| unknown_part(name))?;
        let net = crate::model::weights::load(part.spec(), path, &device)?;
        let optim = part.spec_optimizer().build();
        part.set_state(net, optim);
        Ok(())
    }

    /// Whether the model trains with a custom step.
    pub fn has_train_step(&self) -> bool {
        self.train_step.is_some()
    }

    /// The main part's declaration: the compiled model's layers, optimizer and clipping.
    pub(super) fn main_part_spec(&self) -> PartSpec {
        PartSpec {
            name: "main".into(),
            model: self.spec.clone(),
            optimizer: self.compiled.optimizer.clone(),
            gradients: self.compiled.gradients,
        }
    }

    /// The parts for a step: the main network `net` with the model's optimizer state (taken
    /// out of the model) and the extra parts (taken too); [`Model::put_back`] returns them.
    pub(super) fn take_parts(&mut self, net: Network, rate: f64, iterations: u64) -> Parts {
        let optim = std::mem::replace(&mut self.optim, self.compiled.optimizer.build());
        let mut main = Part::new(&self.main_part_spec(), net, optim, iterations);
        main.set_rate(rate);
        let mut extra = std::mem::take(&mut self.parts);
        for p in &mut extra {
            p.set_rate(p.rate_at(iterations));
        }
        Parts::new(main, extra)
    }

    /// Puts the parts of [`Model::take_parts`] back.
    pub(super) fn put_back(&mut self, parts: Parts) {
        let (main, extra) = parts.into_parts();
        let (net, optim) = main.into_state();
        self.net = net;
        self.optim = optim;
        self.parts = extra;
    }

    /// Every part's state, for a rollback of one step (clones share their tensors).
    pub(super) fn snapshot(&self) -> (Network, ModuleOptimizer, Vec<Part>) {
        (self.net.clone(), self.optim.clone(), self.parts.clone())
    }

    /// Puts a [`Model::snapshot`] back.
    pub(super) fn restore(&mut self, (net, optim, parts): (Network, ModuleOptimizer, Vec<Part>)) {
        self.net = net;
        self.optim = optim;
        self.parts = parts;
    }

    /// Refuses the settings a custom step does not support yet, naming the key.
    pub(super) fn check_custom_step(&self, accumulation_steps: usize) -> Result<()> {
        let Some(step) = &self.train_step else {
            return Ok(());
        };
        let refuse = |key: &str, why: &str| KilnError::TrainStep {
            step: step.name().to_string(),
            key: key.to_string(),
            message: why.to_string(),
        };
        if !self.compiled.metrics.is_empty() {
            return Err(refuse(
                "compile.metrics",
                "a custom train step reports its own values in its logs; remove the metrics",
            ));
        }
        if self.spec.has_several_outputs() {
            return Err(refuse(
                "model.outputs",
                "a custom step trains models with one output",
            ));
        }
        if accumulation_steps > 1 {
            return Err(refuse(
                "compile.optimizer.gradient_accumulation_steps",
                "a custom step applies its own updates; accumulate inside the step",
            ));
        }
        for name in step.required_parts() {
            if self.part(name).is_none() {
                return Err(refuse(
                    &format!("parts.{name}"),
                    "the step needs this part; declare it in a [parts.<name>] table (or \
                     Model::add_part)",
                ));
            }
        }
        use crate::distribute::Strategy;
        match &self.strategy {
            Strategy::Pipeline(_) => Err(refuse(
                "distribute.strategy",
                "a custom step calls its parts itself, so kiln cannot split them into \
                 pipeline stages; use \"mirrored\" or \"multi_worker_mirrored\"",
            )),
            Strategy::Mirrored(m) if !m.on_one_device() => Err(refuse(
                "distribute.devices",
                "a custom step's replicas run on the model's device; list one device (or \
                 use num_replicas), or multi_worker_mirrored with one process per device",
            )),
            Strategy::MultiWorkerMirrored(m) if m.sync_batch_norm() && self.has_batch_norm() => {
                Err(refuse(
                    "distribute.sync_batch_norm",
                    "is not supported with a custom step under multi_worker_mirrored (its parts' \
                 BatchNormalization statistics are each worker's); set it to false",
                ))
            }
            _ => Ok(()),
        }
    }

    /// True when the model or a part has BatchNormalization layers.
    fn has_batch_norm(&self) -> bool {
        std::iter::once(&self.spec)
            .chain(self.parts.iter().map(Part::spec))
            .any(|m| !m.batch_norm_channels().is_empty())
    }

    /// `evaluate` through the custom step's `test_step`: `None` when there is no custom step
    /// or it has no `test_step` (the compiled loss and metrics then apply).
    pub(super) fn custom_evaluate(
        &self,
        batches: impl Iterator<Item = Result<DeviceBatch>>,
    ) -> Result<Option<Logs>> {
        let Some(step) = &self.train_step else {
            return Ok(None);
        };
        let spec = self.main_part_spec();
        let main = Part::new(&spec, self.net.valid(), self.optim.clone(), 0);
        let extra = self.parts.iter().map(Part::valid).collect();
        let mut parts = Parts::new(main, extra);
        let mut acc = Accumulator::default();
        for batch in batches {
            let batch = batch?;
            let Some(logs) = step.test_step(&mut parts, &batch) else {
                return Ok(None);
            };
            let logs = checked(step.name(), logs)?.read();
            acc.add_custom(&logs, batch.size);
        }
        Ok(Some(acc.logs(&self.compiled, self.spec.output_units())))
    }
}

/// The error for a part the model does not have.
fn unknown_part(name: &str) -> KilnError {
    KilnError::config(format!("parts.{name}"), "no such part")
}

/// A step's logs, checked (not read back).
///
/// # Errors
/// [`KilnError::TrainStep`] when the step failed or its logs are bad.
pub(super) fn checked(step: &str, logs: std::result::Result<StepLogs, String>) -> Result<StepLogs> {
    let logs = logs.map_err(|message| KilnError::TrainStep {
        step: step.to_string(),
        key: "step".into(),
        message,
    })?;
    logs.check(step)?;
    Ok(logs)
}
