//! `fit`, `evaluate` and `predict` (Keras' `Model` training API) on a compiled model.

mod accumulate;
mod callback;
mod class_weight;
mod control;
mod custom_step;
mod epoch_iterator;
mod epoch_metrics;
mod grad_norms;
mod input_cursor;
pub mod nan_report;
mod oom;
mod options;
mod resume;
mod skips;
mod train_loop;
mod window;

pub use crate::logs::{
    History, INPUT_WAIT_SECONDS, LOSS_SCALE, Logs, SAMPLES_PER_SECOND, StepProfile,
};
pub use crate::step::{
    HostLabels, Interrupt, PendingOutput, StepOutput, apply_gradients, compute_gradients,
    compute_gradients_scaled, eval_step, train_step,
};
pub use accumulate::GradientAccumulation;
pub use callback::{Callback, FitContext, ManualContext, NamedWeight, WeightsSnapshot};
pub use class_weight::ClassWeight;
pub use grad_norms::{GradNormSample, GradNormTrend};
pub use oom::{INJECT_ENV as OOM_INJECT_ENV, is_out_of_memory};
pub use options::{Backup, FitOptions, OnNan, SaveFreq};
pub use skips::{SKIPPED_RECORDS, SkippedInput};

use std::path::Path;

use burn::optim::ModuleOptimizer;
use burn::prelude::*;
use kiln_data::Dataset;

use crate::batch::to_device_guarded;
use crate::compile::Compiled;
use crate::error::Result;
use crate::guards::{CheckNumerics, DataSplit, NumericsGuard};
use crate::model::{ModelSpec, Network, summary, weights};
use control::Control;
use epoch_metrics::{Accumulator, BatchLabels};

/// A compiled Keras-style model: spec, parameters, loss/metrics and optimizer state.
///
/// Datasets given to [`Model::fit`], [`Model::evaluate`] and [`Model::predict`] yield batches
/// with a `x` component (`[batch, ...]`, channels-last for images) and, except for `predict`, a
/// `y` component (class indices `[batch]` or targets `[batch, units]`). An optional
/// `sample_weight` component (`[batch]`) weights each example's loss, as Keras' `sample_weight`
/// ([`crate::batch::SAMPLE_WEIGHT`]; [`ClassWeight::apply`] makes one from `class_weight`).
/// The optimizer's `gradient_accumulation_steps` and clipping apply in `fit`
/// ([`GradientAccumulation`]).
pub struct Model {
    name: String,
    spec: ModelSpec,
    compiled: Compiled,
    net: Network,
    optim: ModuleOptimizer,
    device: Device,
    /// Seed of the initial weights, and with the step count, of dropout masks.
    seed: u64,
    profiling: bool,
    check_numerics: CheckNumerics,
    /// Test hook: the training batch whose first attempt fails as out of memory.
    oom_test_step: Option<u64>,
    strategy: crate::distribute::Strategy,
    /// The networks a custom train step uses besides the main one.
    parts: Vec<crate::step::custom::Part>,
    /// Keras' `train_step` override (`None`: the compiled step).
    train_step: Option<std::sync::Arc<dyn crate::step::custom::TrainStep>>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("spec", &self.spec)
            .finish()
    }
}

impl Model {
    /// Builds and compiles a model with freshly initialized weights on `device` (CPU or GPU,
    /// without autodiff: training enables it internally). `seed` fixes the initial weights and
    /// dropout masks.
    pub fn new(
        name: impl Into<String>,
        spec: ModelSpec,
        compiled: Compiled,
        seed: u64,
        device: Device,
    ) -> Model {
        device.seed(seed);
        let net = Network::init(&spec, seed, &device.clone().autodiff());
        Model::assemble(name.into(), spec, compiled, net, device, seed)
    }

    fn assemble(
        name: String,
        spec: ModelSpec,
        compiled: Compiled,
        net: Network,
        device: Device,
        seed: u64,
    ) -> Model {
        let optim = compiled.optimizer.build();
        Model {
            name,
            spec,
            compiled,
            net,
            optim,
            device,
            seed,
            profiling: false,
            check_numerics: CheckNumerics::default(),
            oom_test_step: None,
            strategy: crate::distribute::Strategy::OneDevice,
            parts: Vec::new(),
            train_step: None,
        }
    }

    /// Builds a model whose weights come from a safetensors file written by
    /// [`Model::save_weights`].
    ///
    /// # Errors
    /// [`crate::KilnError::Weights`] / [`crate::KilnError::Io`] as [`weights::load`].
    pub fn from_weights(
        name: impl Into<String>,
        spec: ModelSpec,
        compiled: Compiled,
        path: &Path,
        device: Device,
    ) -> Result<Model> {
        let net = weights::load(&spec, path, &device.clone().autodiff())?;
        Ok(Model::assemble(name.into(), spec, compiled, net, device, 0))
    }

    /// Replaces the weights by those of `path` (Keras' `model.load_weights`): a safetensors
    /// file in kiln's layout (a run's `model.safetensors`) or a Keras `.keras` file whose model
    /// has the same layers (`kiln import` writes such a pair).
    ///
    /// # Errors
    /// [`crate::KilnError::Weights`] when a weight is missing or has another shape;
    /// [`crate::KilnError::KerasFile`] for an unreadable `.keras` file.
    pub fn load_weights(&mut self, path: &Path) -> Result<()> {
        if !path.is_file() {
            return Err(crate::KilnError::Weights {
                path: path.into(),
                message: "no such file: give the path of a weights file (a run's \
                          model.safetensors, a .keras or .h5 model file)"
                    .into(),
            });
        }
        let device = self.device.clone().autodiff();
        self.net = if path.extension().is_some_and(|e| e == "keras" || e == "h5") {
            crate::keras_file::read(path)?.network_for(&self.spec, &device)?
        } else {
            weights::load(&self.spec, path, &device)?
        };
        Ok(())
    }

    /// Times each stage of the training step (and each layer's forward pass); `fit` returns
    /// the profile of its last epoch in [`History::profile`].
    pub fn set_profiling(&mut self, on: bool) {
        self.profiling = on;
    }

    /// What `fit`, `evaluate` and `predict` do with NaN / ±Inf in a batch (`[fit]
    /// check_numerics`, see [`crate::guards`]; default raise).
    pub fn set_check_numerics(&mut self, mode: CheckNumerics) {
        self.check_numerics = mode;
    }

    /// Test hook of the out-of-memory recovery: the first attempt of training batch `step`
    /// (0-based, counted from the start of each `fit` call) fails as if it ran out of memory
    /// and is retried in two parts (the environment variable `KILN_TEST_OOM_AT_STEP` does the
    /// same for `kiln train`). `None` turns it off.
    pub fn inject_oom_at_step(&mut self, step: Option<u64>) {
        self.oom_test_step = step;
    }

    /// The distribution strategy `fit` trains with (`[distribute]`, see [`crate::distribute`];
    /// default one device). Batches are global batches, split across the replicas.
    pub fn set_strategy(&mut self, strategy: crate::distribute::Strategy) {
        self.strategy = strategy;
    }

    /// The model's layer spec.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// The compile settings.
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// The network's parameters (on the training device).
    pub fn network(&self) -> &Network {
        &self.net
    }

    /// Keras' `model.summary()` table; for a model trained by a custom step, one more table
    /// per extra part (titled `<model>/<part>`).
    pub fn summary(&self) -> String {
        let mut text = summary(&self.name, &self.spec);
        for p in &self.parts {
            text.push('\n');
            text.push_str(&summary(&format!("{}/{}", self.name, p.name()), p.spec()));
        }
        text
    }

    /// Saves the weights (safetensors, Keras names and layouts).
    ///
    /// # Errors
    /// [`crate::KilnError::Io`] when the file cannot be written.
    pub fn save_weights(&self, path: &Path) -> Result<()> {
        weights::save(&self.spec, &self.net, path)
    }

    /// Trains for `epochs` passes over `train` (each pass a new iteration, so a shuffling
    /// dataset reshuffles), evaluating on `validation` after each epoch. Values are reported to
    /// `callbacks` with Keras' hooks and returned as a [`History`]. Same as [`Model::fit_with`]
    /// with [`FitOptions::epochs`].
    ///
    /// # Errors
    /// As [`Model::fit_with`].
    pub fn fit(
        &mut self,
        train: &Dataset,
        validation: Option<&Dataset>,
        epochs: usize,
        callbacks: &mut [&mut dyn Callback],
    ) -> Result<History> {
        self.fit_with(train, validation, &FitOptions::epochs(epochs), callbacks)
    }

    /// Keras' `model.fit` with its options ([`FitOptions`]: `initial_epoch`,
    /// `steps_per_epoch`, `validation_freq`), BackupAndRestore checkpoints and resume, the NaN
    /// policy, and an external stop request.
    ///
    /// Determinism: dropout is reseeded before every step from the model's seed and the step
    /// count, and the input's random stages are seeded per iteration, so a run resumed from a
    /// checkpoint continues bit for bit as the uninterrupted run (on the CPU, same thread
    /// count).
    ///
    /// # Errors
    /// Data errors from the pipeline, [`crate::KilnError::Shape`] when a batch does not fit
    /// the model, [`crate::KilnError::Interrupted`] after a stop request,
    /// [`crate::KilnError::NonFinite`] for a NaN / Inf in a batch (see
    /// [`Model::set_check_numerics`]), [`crate::KilnError::NanLoss`] when a NaN loss stops the run, I/O errors writing
    /// checkpoints. Work done before the error stays in the model.
    pub fn fit_with(
        &mut self,
        train: &Dataset,
        validation: Option<&Dataset>,
        opts: &FitOptions,
        callbacks: &mut [&mut dyn Callback],
    ) -> Result<History> {
        train_loop::FitLoop::new(self, train, opts, callbacks)?.run(validation)
    }

    /// The step's driver for `fit`: accumulation, loss scaling, the strategy and the
    /// out-of-memory test hook, as compiled and set on the model.
    fn accumulation(&self) -> GradientAccumulation {
        let mut accumulation =
            GradientAccumulation::new(self.compiled.gradients.gradient_accumulation_steps)
                .with_loss_scale(self.compiled.loss_scale)
                .with_strategy(self.strategy.clone());
        accumulation.inject_oom_at(self.oom_test_step.or_else(oom::injection_from_env));
        accumulation
    }

    /// Loss and metrics over `data` in inference mode (Keras' `model.evaluate`).
    ///
    /// # Errors
    /// Data and shape errors as [`Model::fit`].
    pub fn evaluate(&self, data: &Dataset) -> Result<Logs> {
        let (mut logs, skipped) = self.evaluate_split(data, DataSplit::Test)?;
        if let Some(s) = skipped {
            logs.set(SKIPPED_RECORDS, s.count as f64);
        }
        Ok(logs)
    }

    /// [`Model::evaluate`], naming `split` in input errors; also what the input's
    /// `ignore_errors` stages dropped.
    fn evaluate_split(
        &self,
        data: &Dataset,
        split: DataSplit,
    ) -> Result<(Logs, Option<kiln_data::SkipStats>)> {
        let units = self.spec.output_units();
        if self.train_step.is_some() {
            let mut guard = NumericsGuard::new(self.check_numerics, split);
            let mut batches = data.iter();
            let custom = self.custom_evaluate(self.device_batches(&mut batches, &mut guard))?;
            if let Some(mut logs) = custom {
                guard.report(&mut logs);
                return Ok((logs, batches.skip_stats()));
            }
        }
        let net = self.net.valid();
        let mut acc = Accumulator::default();
        let mut guard = NumericsGuard::new(self.check_numerics, split);
        let mut batches = data.iter();
        for b in self.device_batches(&mut batches, &mut guard) {
            let b = b?;
            if b.labels.is_none()
                && let Some(step) = &self.train_step
            {
                return Err(crate::KilnError::TrainStep {
                    step: step.name().to_string(),
                    key: "test_step".into(),
                    message: "the step has no test_step, so evaluation uses the compiled loss, \
                              which needs labels, and this data has none: give it a y \
                              component, or give the step a test_step"
                        .into(),
                });
            }
            let (own, outputs, size) = (HostLabels::of(&b), b.outputs.clone(), b.size);
            let out = eval_step(&net, &self.spec, &self.compiled, b);
            let labels = BatchLabels {
                labels: &own,
                outputs: &outputs,
            };
            acc.add(&self.compiled, &out, labels, size, units);
        }
        let mut logs = acc.logs(&self.compiled, units);
        guard.report(&mut logs);
        Ok((logs, batches.skip_stats()))
    }

    /// `batches` as device batches, without those `guard` drops (non-finite examples).
    fn device_batches<'a, E>(
        &'a self,
        batches: &'a mut impl Iterator<Item = std::result::Result<kiln_data::Element, E>>,
        guard: &'a mut NumericsGuard,
    ) -> impl Iterator<Item = Result<crate::batch::DeviceBatch>> + 'a
    where
        crate::KilnError: From<E>,
    {
        std::iter::from_fn(move || {
            loop {
                let converted =
                    batches
                        .next()?
                        .map_err(crate::KilnError::from)
                        .and_then(|mut b| {
                            let (spec, loss, device) = (&self.spec, &self.compiled, &self.device);
                            to_device_guarded(&mut b, spec, loss, device, guard)
                        });
                match converted {
                    Ok(Some(b)) => return Some(Ok(b)),
                    Ok(None) => continue,
                    Err(e) => return Some(Err(e)),
                }
            }
        })
    }

    /// Model outputs for every example of `data` (Keras' `model.predict`): a row-major
    /// `[examples, units]` buffer and `units`. Labels in `data`, if any, are ignored.
    ///
    /// # Errors
    /// Data and shape errors as [`Model::fit`].
    pub fn predict(&self, data: &Dataset) -> Result<(Vec<f32>, usize)> {
        let net = self.net.valid();
        let units = self.spec.output_units();
        let mut all = Vec::new();
        // Predict never drops an example: in skip mode a non-finite one gets a non-finite output.
        let mut guard = NumericsGuard::new(self.check_numerics, DataSplit::Predict);
        for batch in data.iter() {
            let mut batch = batch?;
            for c in crate::batch::label_components(&self.spec) {
                batch.remove(&c);
            }
            let (loss, device) = (&self.compiled, &self.device);
            let b = to_device_guarded(&mut batch, &self.spec, loss, device, &mut guard)?
                .expect("predict keeps every example");
            all.extend(eval_step(&net, &self.spec, &self.compiled, b).outputs);
        }
        Ok((all, units))
    }
}
