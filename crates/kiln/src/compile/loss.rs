//! Losses with Keras' names, definitions and reduction (mean over the batch,
//! `keras/src/losses/losses.py`).

use burn::prelude::*;
use burn::tensor::activation::{log_sigmoid, log_softmax};
use serde::{Deserialize, Serialize};

use crate::error::{KilnError, Result};

/// Keras clips probabilities to `[EPSILON, 1 - EPSILON]` before taking logs
/// (`keras.config.epsilon()`).
pub const EPSILON: f64 = 1e-7;

/// Which loss. TOML: `loss = "sparse_categorical_crossentropy"` or
/// `loss = { type = "sparse_categorical_crossentropy", from_logits = true }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossKind {
    /// Integer class labels `[batch]` against `[batch, classes]` outputs.
    SparseCategoricalCrossentropy,
    /// One-hot (or probability) labels `[batch, classes]`; integer labels are one-hot encoded.
    CategoricalCrossentropy,
    /// Labels in `{0, 1}` (or `[0, 1]`), `[batch, units]`, averaged over units then batch.
    BinaryCrossentropy,
    /// `mean((y - p)^2)` over the last axis, then over the batch.
    MeanSquaredError,
}

/// A loss and its `from_logits` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LossSpec {
    /// The loss function.
    #[serde(rename = "type")]
    pub kind: LossKind,
    /// Outputs are unnormalized logits (Keras' `from_logits=True`).
    #[serde(default)]
    pub from_logits: bool,
}

const NAMES: &str = "sparse_categorical_crossentropy, categorical_crossentropy, binary_crossentropy, mean_squared_error (alias mse)";

impl LossSpec {
    /// Reads `compile.loss`.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `compile.loss` and the allowed names.
    pub fn from_toml(value: &toml::Value) -> Result<LossSpec> {
        let key = "compile.loss";
        let (mut table, ty) = super::named_table(value, key, NAMES)?;
        let canonical = match ty.as_str() {
            "mse" => "mean_squared_error",
            other => other,
        };
        if ![
            "sparse_categorical_crossentropy",
            "categorical_crossentropy",
            "binary_crossentropy",
            "mean_squared_error",
        ]
        .contains(&canonical)
        {
            return Err(KilnError::config(
                format!("{key}.type"),
                format!("unknown loss \"{ty}\"; allowed: {NAMES}"),
            ));
        }
        table.insert("type".into(), toml::Value::String(canonical.into()));
        toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| {
                KilnError::config(key, crate::error::humanize(e.message()))
            })
    }

    /// The Keras name.
    pub fn name(&self) -> &'static str {
        match self.kind {
            LossKind::SparseCategoricalCrossentropy => "sparse_categorical_crossentropy",
            LossKind::CategoricalCrossentropy => "categorical_crossentropy",
            LossKind::BinaryCrossentropy => "binary_crossentropy",
            LossKind::MeanSquaredError => "mean_squared_error",
        }
    }

    /// True when the labels are integer class indices `[batch]`.
    pub fn sparse_labels(&self) -> bool {
        self.kind == LossKind::SparseCategoricalCrossentropy
    }

    /// The mean loss over the batch, a `[1]` tensor.
    ///
    /// `output` is the model's output `[batch, units]`; `logits` the input of its final softmax
    /// when it has one (then, as Keras' TensorFlow backend does, the cross-entropies use the
    /// logits for stability). `labels` is [`Labels::Sparse`] for the sparse loss and
    /// [`Labels::Dense`] (`[batch, units]`) otherwise.
    pub fn compute(
        &self,
        output: Tensor<2>,
        logits: Option<Tensor<2>>,
        labels: &Labels,
    ) -> Tensor<1> {
        let log_probs = |output: Tensor<2>| -> Tensor<2> {
            if self.from_logits {
                log_softmax(output, 1)
            } else if let Some(l) = logits.clone() {
                log_softmax(l, 1)
            } else {
                // Keras: normalize to sum 1, clip, log.
                let p = output.clone() / output.sum_dim(1);
                p.clamp(EPSILON, 1.0 - EPSILON).log()
            }
        };
        match (self.kind, labels) {
            (LossKind::SparseCategoricalCrossentropy, Labels::Sparse(y)) => {
                let [b] = y.dims();
                let lp = log_probs(output);
                lp.gather(1, y.clone().reshape([b, 1])).mean().neg()
            }
            (LossKind::CategoricalCrossentropy, Labels::Dense(y)) => {
                (log_probs(output) * y.clone()).sum_dim(1).mean().neg()
            }
            (LossKind::BinaryCrossentropy, Labels::Dense(y)) => {
                let (log_p, log_not_p) = if self.from_logits {
                    (log_sigmoid(output.clone()), log_sigmoid(output.neg()))
                } else {
                    let p = output.clamp(EPSILON, 1.0 - EPSILON);
                    (p.clone().log(), p.neg().add_scalar(1.0).log())
                };
                let ll = y.clone() * log_p + y.clone().neg().add_scalar(1.0) * log_not_p;
                ll.mean_dim(1).mean().neg()
            }
            (LossKind::MeanSquaredError, Labels::Dense(y)) => {
                (output - y.clone()).square().mean_dim(1).mean()
            }
            (kind, _) => panic!("labels were prepared for another loss than {kind:?}"),
        }
    }
}

/// Labels on the device, in the form the loss needs.
#[derive(Debug, Clone)]
pub enum Labels {
    /// Class indices, `[batch]`.
    Sparse(Tensor<1, Int>),
    /// Targets, `[batch, units]`.
    Dense(Tensor<2>),
}
