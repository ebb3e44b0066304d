//! A layer of one's own, as Keras' "Simple custom layer example: Antirectifier"
//! (keras.io/examples/keras_recipes/antirectifier) writes it, in Rust: the layer is one type
//! that implements [`kiln::model::Layer`], registered under its Keras class name so that a
//! TOML config can say `{ type = "Antirectifier" }`. Likewise a loss of one's own
//! ([`SparseFocalCrossentropy`], a [`kiln::compile::Loss`]) and a metric
//! ([`Top2Accuracy`], a [`kiln::compile::Metric`]), used by name in `[compile]`.

use burn::prelude::*;
use burn::tensor::activation::{log_softmax, relu};
use kiln::compile::{
    EPSILON, LabelKind, Labels, Loss, LossConfig, Metric, MetricBatch, MetricConfig,
};
use kiln::model::{Act, ForwardContext, Layer, LayerConfig, WeightInit, WeightSpec, Weights};
use serde::{Deserialize, Serialize};

/// `Antirectifier()`: centres each example's features, then concatenates their positive and
/// negative parts (`relu(x)`, `relu(-x)`) and mixes them back to the input's size with a
/// trainable `kernel [2 * features, features]`.
///
/// # Shapes
/// - input: `(features,)`
/// - output: `(features,)`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Antirectifier {}

impl Layer for Antirectifier {
    kiln::serde_layer!();

    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        match inputs[0] {
            [f] => Ok(vec![*f]),
            other => Err(format!(
                "Antirectifier expects a 1-D input (features,), got shape {}",
                kiln::model::keras_shape(other)
            )),
        }
    }

    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let f = inputs[0][0];
        vec![WeightSpec::new(
            "kernel",
            vec![2 * f, f],
            WeightInit::GlorotUniform,
        )]
    }

    fn forward(&self, mut inputs: Vec<Act>, w: &Weights, _: ForwardContext) -> Act {
        let x = inputs.remove(0).into_flat();
        let x = x.clone() - x.mean_dim(1);
        let both = Tensor::cat(vec![relu(x.clone()), relu(x.neg())], 1);
        Act::Flat(both.matmul(w.get::<2>("kernel")))
    }

    fn extra_kept(&self, _: &[&[usize]], output: &[usize]) -> f64 {
        // The centred input and the concatenation: 3 values per feature.
        3.0 * output[0] as f64
    }
}

impl LayerConfig for Antirectifier {
    const CLASS_NAME: &'static str = "Antirectifier";
}

/// `sparse_focal_crossentropy`: the focal loss of Lin et al. (2017, "Focal Loss for Dense
/// Object Detection") on integer class labels, exactly Keras' `CategoricalFocalCrossentropy`
/// (`keras/src/losses/losses.py`) applied to the one-hot labels:
///
/// `loss_i = -alpha * (1 - p_i)^gamma * log(p_i)`, where `p_i` is the probability the model
/// gives example `i`'s class, clipped to `[1e-7, 1 - 1e-7]` as Keras clips it.
///
/// `gamma = 0`, `alpha = 1` is `sparse_categorical_crossentropy`; a larger `gamma` lowers the
/// loss of examples the model already gets right. Known answers:
/// `tests/reference/focal_reference.py`.
///
/// TOML: `loss = { type = "sparse_focal_crossentropy", gamma = 2.0, from_logits = true }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SparseFocalCrossentropy {
    /// Weight of every example's loss (Keras' default 0.25).
    pub alpha: f64,
    /// Focusing exponent, `>= 0` (Keras' default 2).
    pub gamma: f64,
    /// The outputs are logits rather than probabilities.
    pub from_logits: bool,
}

impl Default for SparseFocalCrossentropy {
    fn default() -> Self {
        SparseFocalCrossentropy {
            alpha: 0.25,
            gamma: 2.0,
            from_logits: false,
        }
    }
}

impl Loss for SparseFocalCrossentropy {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn config(&self) -> toml::Table {
        kiln::model::config_table(self)
    }

    fn labels(&self) -> LabelKind {
        LabelKind::Sparse
    }

    fn per_example(
        &self,
        output: Tensor<2>,
        logits: Option<Tensor<2>>,
        labels: &Labels,
    ) -> Tensor<1> {
        let Labels::Sparse(classes) = labels else {
            panic!("kiln hands a loss the labels its `labels()` asks for")
        };
        let [batch, _] = output.dims();
        let (lo, hi) = (EPSILON, 1.0 - EPSILON);
        // log p of each example's class, clipped as Keras clips p.
        let log_p = match (self.from_logits, logits) {
            (true, _) => log_softmax(output, 1).clamp(lo.ln(), hi.ln()),
            (false, Some(logits)) => log_softmax(logits, 1).clamp(lo.ln(), hi.ln()),
            (false, None) => (output.clone() / output.sum_dim(1)).clamp(lo, hi).log(),
        };
        let log_p = log_p.gather(1, classes.clone().reshape([batch, 1]));
        let modulating = log_p
            .clone()
            .exp()
            .neg()
            .add_scalar(1.0)
            .powf_scalar(self.gamma);
        (modulating * log_p)
            .mul_scalar(-self.alpha)
            .reshape([batch])
    }
}

impl LossConfig for SparseFocalCrossentropy {
    const NAME: &'static str = "sparse_focal_crossentropy";

    fn validate(&self) -> Result<(), String> {
        if !self.gamma.is_finite() || self.gamma < 0.0 {
            return Err(format!(
                "gamma must be a finite number >= 0, got {}",
                self.gamma
            ));
        }
        if !self.alpha.is_finite() {
            return Err(format!("alpha must be finite, got {}", self.alpha));
        }
        Ok(())
    }
}

/// `top2_accuracy`: the share of examples whose class is among the model's two largest
/// outputs (Keras' `SparseTopKCategoricalAccuracy(k=2)`, with `in_top_k`'s rule: the class
/// counts when fewer than 2 outputs are larger than its own).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Top2Accuracy {}

impl Metric for Top2Accuracy {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn update(&self, batch: &MetricBatch) -> f64 {
        batch
            .rows()
            .zip(batch.classes)
            .filter(|&(row, &class)| {
                row.get(class as usize)
                    .is_some_and(|&own| row.iter().filter(|&&v| v > own).count() < 2)
            })
            .count() as f64
    }
}

impl MetricConfig for Top2Accuracy {
    const NAME: &'static str = "top2_accuracy";
}

/// Registers this crate's layer, loss and metric (call once, before reading a config).
///
/// # Errors
/// When one of the same name is already registered.
pub fn register() -> kiln::Result<()> {
    kiln::model::register_layer::<Antirectifier>()?;
    kiln::compile::register_loss::<SparseFocalCrossentropy>()?;
    kiln::compile::register_metric::<Top2Accuracy>()
}
