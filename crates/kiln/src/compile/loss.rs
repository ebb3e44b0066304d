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
    /// A loss registered with [`super::register_loss`], by its name.
    #[serde(untagged)]
    Custom(super::CustomLoss),
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
        Self::from_toml_at(value, "compile.loss")
    }

    /// [`LossSpec::from_toml`] of the value at `key` (e.g. `compile.loss.value`).
    ///
    /// # Errors
    /// As [`LossSpec::from_toml`], naming `key`.
    pub fn from_toml_at(value: &toml::Value, key: &str) -> Result<LossSpec> {
        let (mut table, ty) = super::named_table(value, key, NAMES)?;
        if let Some(custom) = super::custom::loss_spec(&ty, &table, key)? {
            return Ok(custom);
        }
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
                format!(
                    "unknown loss \"{ty}\"; allowed: {NAMES}{}",
                    super::custom::registered_losses()
                ),
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
            LossKind::Custom(c) => c.name(),
        }
    }

    /// True for the cross-entropies over classes, which need at least 2 output units.
    pub fn needs_classes(&self) -> bool {
        matches!(
            self.kind,
            LossKind::SparseCategoricalCrossentropy | LossKind::CategoricalCrossentropy
        )
    }

    /// True when the labels are integer class indices `[batch]`.
    pub fn sparse_labels(&self) -> bool {
        match self.kind {
            LossKind::Custom(c) => c.labels() == super::LabelKind::Sparse,
            kind => kind == LossKind::SparseCategoricalCrossentropy,
        }
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
        self.compute_weighted(output, logits, labels, None)
    }

    /// The loss of a batch with optional per-example weights `sample_weight` (`[batch]`), a
    /// `[1]` tensor: Keras' default reduction `sum_over_batch_size`,
    /// `Σ_i weight_i * loss_i / batch` (`keras/src/losses/loss.py`, `reduce_weighted_values`):
    /// the sum is divided by the batch size, not by the sum of the weights. Without weights,
    /// the mean of the per-example losses.
    pub fn compute_weighted(
        &self,
        output: Tensor<2>,
        logits: Option<Tensor<2>>,
        labels: &Labels,
        sample_weight: Option<&Tensor<1>>,
    ) -> Tensor<1> {
        let per_example = self.per_example(output, logits, labels);
        match sample_weight {
            Some(w) => (per_example * w.clone()).mean(),
            None => per_example.mean(),
        }
    }

    /// The loss of each example, `[batch]` (Keras' loss functions before reduction: the
    /// cross-entropy of each example; for `binary_crossentropy` and `mean_squared_error` the
    /// mean over the output units). Arguments as [`Self::compute`].
    pub fn per_example(
        &self,
        output: Tensor<2>,
        logits: Option<Tensor<2>>,
        labels: &Labels,
    ) -> Tensor<1> {
        if let LossKind::Custom(c) = self.kind {
            return c.per_example(output, logits, labels);
        }
        let [b, _] = output.dims();
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
        let per_row: Tensor<2> = match (self.kind, labels) {
            (LossKind::SparseCategoricalCrossentropy, Labels::Sparse(y)) => {
                let lp = log_probs(output);
                lp.gather(1, y.clone().reshape([b, 1])).neg()
            }
            (LossKind::CategoricalCrossentropy, Labels::Dense(y)) => {
                (log_probs(output) * y.clone()).sum_dim(1).neg()
            }
            (LossKind::BinaryCrossentropy, Labels::Dense(y)) => {
                let (log_p, log_not_p) = if self.from_logits {
                    (log_sigmoid(output.clone()), log_sigmoid(output.neg()))
                } else {
                    let p = output.clamp(EPSILON, 1.0 - EPSILON);
                    (p.clone().log(), p.neg().add_scalar(1.0).log())
                };
                let ll = y.clone() * log_p + y.clone().neg().add_scalar(1.0) * log_not_p;
                ll.mean_dim(1).neg()
            }
            (LossKind::MeanSquaredError, Labels::Dense(y)) => {
                (output - y.clone()).square().mean_dim(1)
            }
            (kind, _) => panic!("labels were prepared for another loss than {kind:?}"),
        };
        per_row.reshape([b])
    }
}

/// Labels on the device, in the form the loss needs.
#[derive(Debug, Clone)]
pub enum Labels {
    /// Class indices, `[batch]`.
    Sparse(Tensor<1, Int>),
    /// Targets, `[batch, units]`.
    Dense(Tensor<2>),
    /// One entry per output of a model with several, in `[model] outputs` order.
    Outputs(Vec<Labels>),
}

impl Labels {
    /// Rows (label rows: examples × output positions) held.
    pub fn rows(&self) -> usize {
        match self {
            Labels::Sparse(t) => t.dims()[0],
            Labels::Dense(t) => t.dims()[0],
            Labels::Outputs(all) => all.first().map_or(0, Labels::rows),
        }
    }

    /// Rows `start..start + rows` (each output's, for [`Labels::Outputs`]).
    pub fn narrow(&self, start: usize, rows: usize) -> Labels {
        match self {
            Labels::Sparse(t) => Labels::Sparse(t.clone().narrow(0, start, rows)),
            Labels::Dense(t) => Labels::Dense(t.clone().narrow(0, start, rows)),
            Labels::Outputs(all) => {
                Labels::Outputs(all.iter().map(|l| l.narrow(start, rows)).collect())
            }
        }
    }

    /// The labels on `device` (themselves when already there).
    pub fn to_device(self, device: &Device) -> Labels {
        match self {
            Labels::Sparse(t) => Labels::Sparse(t.to_device(device)),
            Labels::Dense(t) => Labels::Dense(t.to_device(device)),
            Labels::Outputs(all) => {
                Labels::Outputs(all.into_iter().map(|l| l.to_device(device)).collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Keras 3.15 answers from tests/reference/gradient_reference.py ("losses with
    // sample_weight"): `keras.losses.<Loss>(from_logits=...)(y, logits, sample_weight=sw)`.
    const LOGITS: [f32; 12] = [
        2.0, -1.0, 0.5, 0.1, 0.2, 0.3, -1.5, 3.0, 0.0, 1.0, 1.0, -2.0,
    ];
    const CLASSES: [i64; 4] = [0, 2, 1, 1];
    const SW: [f32; 4] = [1.0, 2.0, 0.5, 0.0];
    const BIN_LOGITS: [f32; 8] = [0.3, -1.2, 2.0, 0.1, -0.4, -0.9, 1.5, -2.5];
    const BIN_Y: [f32; 8] = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0];

    fn t2(v: &[f32], shape: [usize; 2]) -> Tensor<2> {
        Tensor::from_data(TensorData::new(v.to_vec(), shape), &Device::flex())
    }
    fn t1(v: &[f32]) -> Tensor<1> {
        Tensor::from_data(TensorData::new(v.to_vec(), [v.len()]), &Device::flex())
    }
    fn spec(kind: LossKind) -> LossSpec {
        LossSpec {
            kind,
            from_logits: true,
        }
    }
    fn loss(kind: LossKind, out: Tensor<2>, labels: &Labels, w: Option<&[f32]>) -> f64 {
        let w = w.map(t1);
        spec(kind)
            .compute_weighted(out, None, labels, w.as_ref())
            .into_scalar::<f32>() as f64
    }
    fn assert_close(got: f64, want: f64) {
        assert!((got - want).abs() <= 1e-6, "{got} vs Keras {want}");
    }

    #[test]
    #[allow(clippy::excessive_precision)]
    fn sample_weights_reduce_over_the_batch_size_as_keras() {
        let sparse = Labels::Sparse(Tensor::from_data(
            TensorData::new(CLASSES.to_vec(), [4]),
            &Device::flex(),
        ));
        let logits = t2(&LOGITS, [4, 3]);
        let scce = LossKind::SparseCategoricalCrossentropy;
        assert_close(
            loss(scce, logits.clone(), &sparse, None),
            0.5050259828567505,
        );
        assert_close(
            loss(scce, logits.clone(), &sparse, Some(&SW)),
            0.5686885118484497,
        );
        // Not Σ w·l / Σ w (that would be 0.5686885 * 4 / 3.5).
        let mut onehot = [0.0f32; 12];
        for (i, &c) in CLASSES.iter().enumerate() {
            onehot[i * 3 + c as usize] = 1.0;
        }
        let dense = Labels::Dense(t2(&onehot, [4, 3]));
        assert_close(
            loss(
                LossKind::CategoricalCrossentropy,
                logits.clone(),
                &dense,
                Some(&SW),
            ),
            0.5686885118484497,
        );
        let bin = Labels::Dense(t2(&BIN_Y, [4, 2]));
        assert_close(
            loss(
                LossKind::BinaryCrossentropy,
                t2(&BIN_LOGITS, [4, 2]),
                &bin,
                Some(&SW),
            ),
            0.34842145442962646,
        );
        assert_close(
            loss(
                LossKind::MeanSquaredError,
                t2(&BIN_LOGITS, [4, 2]),
                &bin,
                Some(&SW),
            ),
            0.7543750405311584,
        );
        // class_weight {0: 1, 2: 3} as Keras' adapter turns it into sample weights [1, 3, 1, 1].
        assert_close(
            loss(scce, logits, &sparse, Some(&[1.0, 3.0, 1.0, 1.0])),
            1.0059974193572998,
        );
    }
}
