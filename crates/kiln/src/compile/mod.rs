//! `compile`: optimizer, loss and metrics, with Keras' names and defaults.

mod adam;
mod clipping;
mod custom;
mod gradients;
mod loss;
mod metrics;
mod optimizer;
mod optimizers;
mod outputs;
mod schedules;

pub use adam::KerasAdam;
pub use clipping::{Clipping, global_norm};
pub use custom::{
    CustomLoss, CustomMetric, LabelKind, Loss, LossConfig, Metric, MetricBatch, MetricConfig,
    register_loss, register_metric,
};
pub use gradients::GradientOptions;
pub use loss::{Builtin, EPSILON, Family, LOSSES, Labels, LossArgs, LossDef, LossKind, LossSpec};
pub use metrics::{MetricKind, MetricSpec, argmax, batch_sums, correct};
pub use optimizer::OptimizerSpec;
pub use optimizers::{
    KerasAdadelta, KerasAdagrad, KerasAdamax, KerasLion, KerasNadam, KerasRmsProp, SlotState,
};
pub use outputs::{OutputHead, RawOutputs, is_per_output};
pub use schedules::{LearningRate, Schedule};

use crate::error::{KilnError, Result};

/// Reads a `compile` value given as a name (`"adamw"`) or as a table with a `type`
/// (`{ type = "AdamW", learning_rate = 0.01 }`). Returns the table (with `type`) and the type name.
///
/// # Errors
/// [`KilnError::Config`] naming `key` when the value is neither, listing `allowed`.
fn named_table(value: &toml::Value, key: &str, allowed: &str) -> Result<(toml::Table, String)> {
    let table = match value {
        toml::Value::String(s) => {
            toml::Table::from_iter([("type".to_string(), toml::Value::String(s.clone()))])
        }
        toml::Value::Table(t) => t.clone(),
        other => {
            return Err(KilnError::config(
                key,
                format!("expected a name or a table, got {other}; allowed: {allowed}"),
            ));
        }
    };
    let ty = table
        .get("type")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    Ok((table, ty))
}
use crate::model::ModelSpec;

/// What `model.compile(optimizer, loss, metrics)` fixes.
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled {
    /// The optimizer and its hyperparameters.
    pub optimizer: OptimizerSpec,
    /// The loss (for a model with several outputs, the first output's; see `outputs`).
    pub loss: LossSpec,
    /// Metrics reported besides the loss (empty for a model with several outputs, whose
    /// metrics are per output).
    pub metrics: Vec<MetricSpec>,
    /// For a model with several outputs, each output's loss, loss weight and metrics, in
    /// `[model] outputs` order; empty for a model with one output.
    pub outputs: Vec<OutputHead>,
    /// Clipping and gradient accumulation (Keras' optimizer arguments `clipnorm`, `clipvalue`,
    /// `global_clipnorm`, `gradient_accumulation_steps`); none by default.
    pub gradients: GradientOptions,
    /// Dynamic loss scaling (Keras' `LossScaleOptimizer` around the optimizer): set by
    /// [`Compiled::new`] when the model's precision is `mixed_float16`, as Keras' `compile`
    /// does; [`Compiled::with_loss_scale`] changes it.
    pub loss_scale: Option<crate::precision::LossScaleOptions>,
    /// Keras' `compile(steps_per_execution=N)`: training steps run between two host reads of
    /// the loss and outputs (default 1). With `N > 1` the steps' losses and outputs stay on the
    /// device until every `N`-th step (and the epoch's end), where they are read back in one
    /// go; batch-level callbacks are called once per `N` steps, as in Keras. See
    /// [`crate::fit`]'s "Reading back" docs.
    pub steps_per_execution: u64,
}

impl Compiled {
    /// Checks that the loss fits the model: categorical losses need at least 2 units on the
    /// output's last axis. Outputs of any rank are taken as rows of their last axis
    /// (`(steps, classes)` gives `steps` rows per example), as Keras' losses reduce them.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `compile.loss`.
    pub fn new(
        model: &ModelSpec,
        optimizer: OptimizerSpec,
        loss: LossSpec,
        metrics: &[String],
    ) -> Result<Compiled> {
        let metrics: Vec<toml::Value> = metrics.iter().map(|m| m.as_str().into()).collect();
        Self::with_metric_values(model, optimizer, loss, &metrics)
    }

    /// [`Compiled::new`] with metrics as `compile.metrics` gives them: names or tables
    /// `{ type = "top_k_categorical_accuracy", k = 2, name = "top2" }`.
    ///
    /// # Errors
    /// As [`Compiled::new`]; [`KilnError::Config`] naming `compile.metrics[i]` for a bad
    /// metric.
    pub fn with_metric_values(
        model: &ModelSpec,
        optimizer: OptimizerSpec,
        loss: LossSpec,
        metrics: &[toml::Value],
    ) -> Result<Compiled> {
        // Any rank: the losses and metrics work on rows of the last axis (one per position).
        let units = model.output_units();
        if loss.needs_classes() && units < 2 {
            return Err(KilnError::config(
                "compile.loss",
                format!(
                    "{} needs at least 2 output units, the model has {units}",
                    loss.name()
                ),
            ));
        }
        let metrics = metrics
            .iter()
            .enumerate()
            .map(|(i, m)| {
                MetricSpec::from_toml_at(m, &format!("compile.metrics[{i}]"), loss.kind, units)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Compiled {
            optimizer,
            loss,
            metrics,
            outputs: Vec::new(),
            gradients: GradientOptions::default(),
            loss_scale: model.precision().default_loss_scale(),
            steps_per_execution: 1,
        })
    }

    /// `compile` of a model with several outputs (Keras' `compile(loss={...},
    /// loss_weights={...}, metrics={...})`, or lists in `outputs` order); a model with one
    /// output takes [`Compiled::new`]'s arguments.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming the key, as [`outputs::heads`].
    pub fn for_outputs(
        model: &ModelSpec,
        optimizer: OptimizerSpec,
        raw: &RawOutputs,
    ) -> Result<Compiled> {
        let outputs = outputs::heads(model, raw)?;
        Ok(Compiled {
            optimizer,
            loss: outputs[0].loss,
            metrics: Vec::new(),
            outputs,
            gradients: GradientOptions::default(),
            loss_scale: model.precision().default_loss_scale(),
            steps_per_execution: 1,
        })
    }

    /// The loss of output `k` (`loss` for a model with one output).
    pub fn loss_of_output(&self, k: usize) -> &LossSpec {
        self.outputs.get(k).map_or(&self.loss, |h| &h.loss)
    }

    /// The loss of a batch, a `[1]` tensor, and for a model with several outputs each
    /// output's own loss (Keras' `<output>_loss` logs; the total is `Σ loss_weight_k ×
    /// loss_k`). Arguments as [`crate::model::Forward`]'s `output` and `logits` and
    /// [`LossSpec::compute_weighted`].
    pub fn losses(
        &self,
        output: burn::prelude::Tensor<2>,
        mut logits: Vec<Option<burn::prelude::Tensor<2>>>,
        labels: &Labels,
        sample_weight: Option<&burn::prelude::Tensor<1>>,
    ) -> (burn::prelude::Tensor<1>, Vec<burn::prelude::Tensor<1>>) {
        if self.outputs.is_empty() {
            let logits = logits.pop().flatten();
            let loss = self
                .loss
                .compute_weighted(output, logits, labels, sample_weight);
            return (loss, Vec::new());
        }
        outputs::losses(&self.outputs, output, logits, labels, sample_weight)
    }

    /// Sets the loss scaling (Keras: `compile(optimizer=LossScaleOptimizer(inner,
    /// initial_scale, dynamic_growth_steps))`); `None` turns it off.
    ///
    /// # Errors
    /// [`KilnError::Config`] as [`crate::precision::LossScaleOptions::validate`].
    pub fn with_loss_scale(
        mut self,
        loss_scale: Option<crate::precision::LossScaleOptions>,
    ) -> Result<Compiled> {
        if let Some(o) = &loss_scale {
            o.validate()?;
        }
        self.loss_scale = loss_scale;
        Ok(self)
    }

    /// Sets Keras' `steps_per_execution` (see [`Compiled::steps_per_execution`]).
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `compile.steps_per_execution` when `steps` is 0.
    pub fn with_steps_per_execution(mut self, steps: u64) -> Result<Compiled> {
        if steps == 0 {
            return Err(KilnError::config(
                "compile.steps_per_execution",
                "must be at least 1 (1 reads the loss and outputs back after every step; N \
                 reads them every N steps)",
            ));
        }
        self.steps_per_execution = steps;
        Ok(self)
    }

    /// Sets the optimizer's gradient options (Keras: `clipnorm=`, `clipvalue=`,
    /// `global_clipnorm=`, `gradient_accumulation_steps=` of the optimizer).
    ///
    /// # Errors
    /// [`KilnError::Config`] as [`GradientOptions::validate`].
    pub fn with_gradients(mut self, gradients: GradientOptions) -> Result<Compiled> {
        gradients.validate()?;
        self.gradients = gradients;
        Ok(self)
    }
}
