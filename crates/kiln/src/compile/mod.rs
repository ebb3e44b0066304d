//! `compile`: optimizer, loss and metrics, with Keras' names and defaults.

mod adam;
mod clipping;
mod custom;
mod gradients;
mod loss;
mod metrics;
mod optimizer;

pub use adam::KerasAdam;
pub use clipping::{Clipping, global_norm};
pub use custom::{
    CustomLoss, CustomMetric, LabelKind, Loss, LossConfig, Metric, MetricBatch, MetricConfig,
    register_loss, register_metric,
};
pub use gradients::GradientOptions;
pub use loss::{EPSILON, Labels, LossKind, LossSpec};
pub use metrics::{MetricKind, MetricSpec, argmax, correct};
pub use optimizer::OptimizerSpec;

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
    /// The loss.
    pub loss: LossSpec,
    /// Metrics reported besides the loss.
    pub metrics: Vec<MetricSpec>,
    /// Clipping and gradient accumulation (Keras' optimizer arguments `clipnorm`, `clipvalue`,
    /// `global_clipnorm`, `gradient_accumulation_steps`); none by default.
    pub gradients: GradientOptions,
    /// Dynamic loss scaling (Keras' `LossScaleOptimizer` around the optimizer): set by
    /// [`Compiled::new`] when the model's precision is `mixed_float16`, as Keras' `compile`
    /// does; [`Compiled::with_loss_scale`] changes it.
    pub loss_scale: Option<crate::precision::LossScaleOptions>,
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
        // Any rank: the losses and metrics work on rows of the last axis (one per position).
        let units = model.output_units();
        if matches!(
            loss.kind,
            LossKind::SparseCategoricalCrossentropy | LossKind::CategoricalCrossentropy
        ) && units < 2
        {
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
            .map(|(i, m)| MetricSpec::parse(m, i, loss.kind, units))
            .collect::<Result<Vec<_>>>()?;
        Ok(Compiled {
            optimizer,
            loss,
            metrics,
            gradients: GradientOptions::default(),
            loss_scale: model.precision().default_loss_scale(),
        })
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
