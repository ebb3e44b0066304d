//! `compile` for a model with several outputs: Keras' per-output `loss`, `loss_weights` and
//! `metrics` (dicts keyed by output name, or lists in `outputs` order), and the total loss
//! `Σ loss_weight_k × loss_k` (`keras/src/trainers/compile_utils.py`, `CompileLoss`).

use burn::prelude::*;

use super::{Labels, LossSpec, MetricSpec};
use crate::error::{KilnError, Result};
use crate::model::ModelSpec;

/// What `compile` fixes for one output of a model with several.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputHead {
    /// The output layer's name: the prefix of its log keys (`class_loss`, `class_accuracy`)
    /// and the batch component its labels come from.
    pub name: String,
    /// Its loss.
    pub loss: LossSpec,
    /// Its weight in the total loss (Keras' `loss_weights`, default 1).
    pub weight: f64,
    /// Its metrics, logged as `<name>_<metric>`.
    pub metrics: Vec<MetricSpec>,
    /// The size of its last axis: its columns in the network's side-by-side output rows.
    pub units: usize,
}

/// The `compile` table's per-output keys, as written.
pub struct RawOutputs<'a> {
    /// `compile.loss`: one loss for every output, or a dict keyed by output name.
    pub loss: &'a toml::Value,
    /// `compile.loss_weights`: a dict keyed by output name or a list in `outputs` order.
    pub loss_weights: Option<&'a toml::Value>,
    /// `compile.metrics`: one list for every output, a dict keyed by output name, or a list
    /// of lists in `outputs` order.
    pub metrics: Option<&'a toml::Value>,
}

/// True when `loss` is a dict keyed by output names rather than one loss written as a table
/// (which has a `type`).
pub fn is_per_output(loss: &toml::Value) -> bool {
    matches!(loss, toml::Value::Table(t) if !t.contains_key("type"))
}

/// Each output's head, in `model`'s `outputs` order.
///
/// # Errors
/// [`KilnError::Config`] naming the key (`compile.loss.value`, `compile.loss_weights[1]`,
/// `compile.metrics.class[0]`) for an unknown output name, a missing loss, a bad weight or
/// an unknown loss or metric.
pub fn heads(model: &ModelSpec, raw: &RawOutputs) -> Result<Vec<OutputHead>> {
    let names = model.output_names();
    let losses = per_output(&names, raw.loss, "compile.loss", true)?;
    let weights = match raw.loss_weights {
        Some(v) => per_output(&names, v, "compile.loss_weights", false)?,
        None => vec![None; names.len()],
    };
    let metrics = match raw.metrics {
        Some(v) => per_output(&names, v, "compile.metrics", false)?,
        None => vec![None; names.len()],
    };
    let mut heads = Vec::with_capacity(names.len());
    for (k, name) in names.iter().enumerate() {
        let (loss_key, loss) = losses[k].clone().expect("losses are required");
        let loss = LossSpec::from_toml_at(&loss, &loss_key)?;
        let units = model.units_of_output(k);
        if loss.needs_classes() && units < 2 {
            return Err(KilnError::config(
                loss_key,
                format!(
                    "{} needs at least 2 units on output \"{name}\", which has {units}",
                    loss.name()
                ),
            ));
        }
        let weight = match &weights[k] {
            Some((key, v)) => weight(v, key)?,
            None => 1.0,
        };
        let metrics = match &metrics[k] {
            Some((key, v)) => metric_list(v, key, &loss, units)?,
            None => Vec::new(),
        };
        heads.push(OutputHead {
            name: name.clone(),
            loss,
            weight,
            metrics,
            units,
        });
    }
    Ok(heads)
}

/// Spreads `value` over the outputs: a dict keyed by output name, a list with one entry per
/// output in `outputs` order (see [`is_list_per_output`]), or one value for all. Each entry
/// comes with the key that names it in errors. `required`: every output needs one.
fn per_output(
    names: &[String],
    value: &toml::Value,
    key: &str,
    required: bool,
) -> Result<Vec<Option<(String, toml::Value)>>> {
    let spread = match value {
        toml::Value::Table(t) if !t.contains_key("type") => {
            if let Some(unknown) = t.keys().find(|k| !names.contains(k)) {
                return Err(KilnError::config(
                    format!("{key}.{unknown}"),
                    format!("the model has no output \"{unknown}\"; its outputs are {names:?}"),
                ));
            }
            names
                .iter()
                .map(|n| t.get(n).map(|v| (format!("{key}.{n}"), v.clone())))
                .collect()
        }
        toml::Value::Array(a) if is_list_per_output(key, a) => {
            if a.len() != names.len() {
                return Err(KilnError::config(
                    key,
                    format!(
                        "a list gives one entry per output in `outputs` order: the model has {} \
                         outputs {names:?}, the list {} entries; or use a table keyed by output \
                         name",
                        names.len(),
                        a.len()
                    ),
                ));
            }
            a.iter()
                .enumerate()
                .map(|(k, v)| Some((format!("{key}[{k}]"), v.clone())))
                .collect()
        }
        one => names
            .iter()
            .map(|_| Some((key.to_string(), one.clone())))
            .collect(),
    };
    let spread: Vec<Option<(String, toml::Value)>> = spread;
    if required && let Some(k) = spread.iter().position(Option::is_none) {
        return Err(KilnError::config(
            format!("{key}.{}", names[k]),
            format!(
                "missing: output \"{}\" needs a loss (Keras trains every output); give one per \
                 output, or one loss for all",
                names[k]
            ),
        ));
    }
    Ok(spread)
}

/// A list means one entry per output for `loss` and `loss_weights`, and for `metrics` when
/// its entries are lists; a flat list of metric names applies to every output.
fn is_list_per_output(key: &str, a: &[toml::Value]) -> bool {
    !key.ends_with("metrics") || !a.is_empty() && a.iter().all(toml::Value::is_array)
}

fn weight(v: &toml::Value, key: &str) -> Result<f64> {
    let w = match v {
        toml::Value::Float(f) => *f,
        toml::Value::Integer(i) => *i as f64,
        other => {
            return Err(KilnError::config(
                key,
                format!("expected a number, got {other}"),
            ));
        }
    };
    if !w.is_finite() || w < 0.0 {
        return Err(KilnError::config(
            key,
            format!("a loss weight must be a finite number >= 0, got {w}"),
        ));
    }
    Ok(w)
}

fn metric_list(
    v: &toml::Value,
    key: &str,
    loss: &LossSpec,
    units: usize,
) -> Result<Vec<MetricSpec>> {
    let metrics: Vec<&toml::Value> = match v {
        toml::Value::Array(a) => a.iter().collect(),
        one => vec![one],
    };
    metrics
        .iter()
        .enumerate()
        .map(|(i, m)| MetricSpec::from_toml_at(m, &format!("{key}[{i}]"), loss.kind, units))
        .collect()
}

/// The total loss `Σ weight_k × loss_k` and each output's own (unweighted) loss, as `[1]`
/// tensors. `output` holds the outputs' rows side by side (columns in `heads` order), `logits`
/// each output's softmax input, `labels` a [`Labels::Outputs`].
pub fn losses(
    heads: &[OutputHead],
    output: Tensor<2>,
    logits: Vec<Option<Tensor<2>>>,
    labels: &Labels,
    sample_weight: Option<&Tensor<1>>,
) -> (Tensor<1>, Vec<Tensor<1>>) {
    let Labels::Outputs(labels) = labels else {
        panic!("a model with several outputs gets one set of labels per output");
    };
    let [rows, _] = output.dims();
    let mut start = 0;
    let mut each = Vec::with_capacity(heads.len());
    let mut total: Option<Tensor<1>> = None;
    for ((head, logits), labels) in heads.iter().zip(logits).zip(labels) {
        let part = output.clone().slice([0..rows, start..start + head.units]);
        start += head.units;
        let loss = head
            .loss
            .compute_weighted(part, logits, labels, sample_weight);
        let term = loss.clone().mul_scalar(head.weight);
        total = Some(match total {
            Some(t) => t + term,
            None => term,
        });
        each.push(loss);
    }
    (total.expect("at least two outputs"), each)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::{LossKind, MetricKind};

    fn model() -> ModelSpec {
        let t: toml::Table = toml::from_str(
            r#"layers = [
              { type = "Input", shape = [4] },
              { type = "Dense", name = "trunk", units = 8 },
              { type = "Dense", name = "class", units = 3, inputs = ["trunk"] },
              { type = "Dense", name = "value", units = 1, inputs = ["trunk"] },
            ]
            outputs = ["class", "value"]"#,
        )
        .unwrap();
        ModelSpec::from_toml(&t).unwrap()
    }

    fn heads_of(text: &str) -> Result<Vec<OutputHead>> {
        let t: toml::Table = toml::from_str(text).unwrap();
        heads(
            &model(),
            &RawOutputs {
                loss: &t["loss"],
                loss_weights: t.get("loss_weights"),
                metrics: t.get("metrics"),
            },
        )
    }

    fn err(text: &str) -> String {
        heads_of(text).unwrap_err().to_string()
    }

    #[test]
    fn dicts_lists_and_one_value_for_all_give_the_same_heads() {
        let dict = heads_of(
            r#"loss = { class = "sparse_categorical_crossentropy", value = "mse" }
            loss_weights = { value = 0.5 }
            metrics = { class = ["accuracy"], value = "mae" }"#,
        )
        .unwrap();
        let lists = heads_of(
            r#"loss = ["sparse_categorical_crossentropy", "mse"]
            loss_weights = [1, 0.5]
            metrics = [["accuracy"], ["mae"]]"#,
        )
        .unwrap();
        assert_eq!(dict, lists);
        assert_eq!(dict[0].loss.kind, LossKind::SparseCategoricalCrossentropy);
        assert_eq!((dict[0].weight, dict[1].weight), (1.0, 0.5));
        assert_eq!((dict[0].units, dict[1].units), (3, 1));
        assert_eq!(dict[0].metrics[0].kind, MetricKind::CategoricalAccuracy);
        assert_eq!(dict[1].metrics[0].kind, MetricKind::MeanAbsoluteError);
        // One loss (and one flat metric list) for every output, as Keras applies them.
        let one = heads_of(
            r#"loss = { type = "mse" }
            metrics = ["mae"]"#,
        )
        .unwrap();
        assert!(
            one.iter()
                .all(|h| h.loss.kind == LossKind::MeanSquaredError)
        );
        assert!(one.iter().all(|h| h.metrics.len() == 1 && h.weight == 1.0));
    }

    #[test]
    fn bad_per_output_values_name_their_key() {
        let e = err(r#"loss = { class = "mse", valu = "mse" }"#);
        assert!(
            e.starts_with("compile.loss.valu: the model has no output \"valu\""),
            "{e}"
        );
        let e = err(r#"loss = { class = "mse" }"#);
        assert!(
            e.starts_with("compile.loss.value: missing: output \"value\" needs a loss"),
            "{e}"
        );
        let e = err(r#"loss = ["mse"]"#);
        assert!(
            e.starts_with("compile.loss: a list gives one entry per output"),
            "{e}"
        );
        let e = err("loss = \"mse\"\nloss_weights = [1.0]");
        assert!(
            e.starts_with("compile.loss_weights: a list gives one entry"),
            "{e}"
        );
        let e = err("loss = \"mse\"\nloss_weights = { value = -1.0 }");
        assert!(
            e.starts_with("compile.loss_weights.value: a loss weight must be"),
            "{e}"
        );
        let e = err("loss = \"mse\"\nloss_weights = { value = \"big\" }");
        assert!(
            e.starts_with("compile.loss_weights.value: expected a number"),
            "{e}"
        );
        let e = err(r#"loss = "sparse_categorical_crossentropy""#);
        assert!(e.starts_with("compile.loss: sparse_categorical_crossentropy needs at least 2 units on output \"value\""), "{e}");
        let e = err(r#"loss = { class = "hinje", value = "mse" }"#);
        assert!(
            e.starts_with("compile.loss.class.type: unknown loss \"hinje\""),
            "{e}"
        );
        let e = err("loss = \"mse\"\nmetrics = { value = [\"f1\"] }");
        assert!(
            e.starts_with("compile.metrics.value[0]: unknown metric \"f1\""),
            "{e}"
        );
    }
}
