//! Losses and metrics of one's own: the [`Loss`] and [`Metric`] traits that a user's Rust type
//! implements, and the registries that map their names to them, so that a TOML config can say
//! `loss = "my_loss"`, `loss = { type = "my_loss", gamma = 2.0 }` or
//! `metrics = ["accuracy", "my_metric"]` (see `examples/custom-layer`).
//!
//! As for layers ([`crate::model::layer`]), the type *is* its config: its fields are the
//! arguments (serde, with defaults), read from the TOML table without its `type`. A loss is
//! computed on Burn tensors inside the training step (it is differentiated); a metric on the
//! host from each batch's outputs, as the built-in accuracies are.
//!
//! Built once per distinct config, a loss or metric lives for the rest of the process (it is
//! small and configs are few), which keeps [`super::LossKind`] and [`super::MetricKind`]
//! `Copy`.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Mutex, RwLock};

use burn::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::loss::{Labels, LossKind, LossSpec};
use super::metrics::MetricSpec;
use crate::error::{KilnError, Result};

/// The form of labels a loss takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelKind {
    /// One integer class index per example: [`Labels::Sparse`] `[batch]`, each in
    /// `[0, units)`.
    Sparse,
    /// Targets with the output's shape: [`Labels::Dense`] `[batch, units]` (integer class
    /// labels are one-hot encoded, as for `categorical_crossentropy`).
    Dense,
}

/// A loss function. Implement it (and [`LossConfig`]) for your own loss and
/// [`register_loss`] it to use it by name in `compile.loss`.
pub trait Loss: Debug + Send + Sync + 'static {
    /// The name in TOML (`loss = "<name>"`), in logs and in the run directory's config.
    fn name(&self) -> &'static str;

    /// The arguments as a TOML table (without `type`), written to the run directory's config
    /// so that the run reads back the same loss. For a serde type:
    /// `kiln::model::config_table(self)`.
    fn config(&self) -> toml::Table;

    /// The labels the loss takes (kiln converts each batch's labels to this form).
    fn labels(&self) -> LabelKind;

    /// The loss of each example, `[batch]`, before reduction (kiln reduces as Keras'
    /// `sum_over_batch_size`: `Σ weight_i · loss_i / batch`).
    ///
    /// `output` is the model's output `[batch, units]`; `logits` the input of its final
    /// softmax when it ends with one (for numerically stable cross-entropies); `labels` has
    /// the form [`Loss::labels`] says. Use Burn operations only: kiln differentiates the result.
    fn per_example(
        &self,
        output: Tensor<2>,
        logits: Option<Tensor<2>>,
        labels: &Labels,
    ) -> Tensor<1>;
}

/// A loss type read from its TOML table (serde): its name and argument checks.
pub trait LossConfig: Loss + DeserializeOwned + Sized {
    /// The name in TOML.
    const NAME: &'static str;

    /// Checks argument ranges; the message names the argument.
    fn validate(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// One batch as a [`Metric`] sees it (host values, row-major).
#[derive(Debug, Clone, Copy)]
pub struct MetricBatch<'a> {
    /// The model's outputs `[batch, units]` (logits for a `from_logits` model).
    pub outputs: &'a [f32],
    /// Values per example in `outputs`.
    pub units: usize,
    /// The class index of each example (the argmax of dense targets).
    pub classes: &'a [i64],
    /// Dense targets `[batch, units]`; empty when the loss takes sparse labels.
    pub targets: &'a [f32],
}

impl<'a> MetricBatch<'a> {
    /// The output row of each example.
    pub fn rows(&self) -> std::slice::ChunksExact<'a, f32> {
        self.outputs.chunks_exact(self.units.max(1))
    }
}

/// A metric reported besides the loss. Implement it (and [`MetricConfig`]) for your own metric
/// and [`register_metric`] it to use it by name in `compile.metrics`.
pub trait Metric: Debug + Send + Sync + 'static {
    /// The name in TOML, and the key of its values in logs and `history.json` (`val_<name>`
    /// for validation).
    fn name(&self) -> &'static str;

    /// The sum over the batch's examples of the metric's value per example. kiln reports the
    /// sum over an epoch divided by the number of examples (the mean over examples, as Keras'
    /// accuracies; unweighted, as Keras 3's `compile(metrics=...)`), and keeps the running sum
    /// in checkpoints, so a resumed epoch continues it.
    fn update(&self, batch: &MetricBatch) -> f64;
}

/// A metric type read from serde (from an empty table: metrics are given by name, so their
/// arguments take their defaults).
pub trait MetricConfig: Metric + DeserializeOwned + Sized {
    /// The name in TOML.
    const NAME: &'static str;
}

/// Builds a registered type from its TOML arguments, or says what is wrong with them.
type Build<T> = fn(toml::Table) -> std::result::Result<Box<T>, String>;

/// Names mapped to builders, and the values built so far (one per name and arguments).
struct Registry<T: ?Sized + 'static> {
    what: &'static str,
    builders: RwLock<BTreeMap<&'static str, Build<T>>>,
    built: Mutex<Vec<(&'static str, toml::Table, &'static T)>>,
}

impl<T: ?Sized + Send + Sync + 'static> Registry<T> {
    const fn new(what: &'static str) -> Self {
        Registry {
            what,
            builders: RwLock::new(BTreeMap::new()),
            built: Mutex::new(Vec::new()),
        }
    }

    /// Adds `name`; `builtin` says whether the config readers accept it (a built-in name, or
    /// one registered already).
    fn register(&self, name: &'static str, build: Build<T>, builtin: bool) -> Result<()> {
        let mut map = self.builders.write().unwrap_or_else(|e| e.into_inner());
        let taken = match (map.contains_key(name), builtin) {
            (true, _) => "",
            (false, true) => " (built in)",
            (false, false) => {
                map.insert(name, build);
                return Ok(());
            }
        };
        Err(KilnError::config(
            format!("{} registration", self.what),
            format!(
                "a {} named \"{name}\" is already registered{taken}; give yours another name",
                self.what
            ),
        ))
    }

    /// The registered names, comma-separated after a leading ", " (empty when none).
    fn listed(&self) -> String {
        let map = self.builders.read().unwrap_or_else(|e| e.into_inner());
        map.keys().map(|n| format!(", {n}")).collect()
    }

    /// The value for `name` and `args`: `None` when `name` is not registered.
    fn get(
        &self,
        name: &str,
        args: toml::Table,
    ) -> Option<std::result::Result<&'static T, String>> {
        let (name, build) = {
            let map = self.builders.read().unwrap_or_else(|e| e.into_inner());
            let (&name, &build) = map.get_key_value(name)?;
            (name, build)
        };
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, value)) = built.iter().find(|(n, a, _)| *n == name && *a == args) {
            return Some(Ok(*value));
        }
        Some(build(args.clone()).map(|value| {
            let value: &'static T = Box::leak(value);
            built.push((name, args, value));
            value
        }))
    }
}

static LOSSES: Registry<dyn Loss> = Registry::new("loss");
static METRICS: Registry<dyn Metric> = Registry::new("metric");

fn deserialize<C: DeserializeOwned>(table: toml::Table) -> std::result::Result<C, String> {
    toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| crate::error::humanize(e.message()))
}

fn build_loss<L: LossConfig>(table: toml::Table) -> std::result::Result<Box<dyn Loss>, String> {
    let loss: L = deserialize(table)?;
    loss.validate()?;
    Ok(Box::new(loss))
}

fn build_metric<M: MetricConfig>(
    table: toml::Table,
) -> std::result::Result<Box<dyn Metric>, String> {
    Ok(Box::new(deserialize::<M>(table)?))
}

/// Registers a user's loss `L` under `L::NAME` for every config read afterwards in this
/// process.
///
/// # Errors
/// [`KilnError::Config`] when a built-in loss (or alias) or an earlier registration has the
/// name.
pub fn register_loss<L: LossConfig>() -> Result<()> {
    let builtin = LossSpec::from_toml(&toml::Value::from(L::NAME)).is_ok();
    LOSSES.register(L::NAME, build_loss::<L>, builtin)
}

/// Registers a user's metric `M` under `M::NAME` for every config read afterwards in this
/// process.
///
/// # Errors
/// [`KilnError::Config`] when a built-in metric (or alias) or an earlier registration has the
/// name.
pub fn register_metric<M: MetricConfig>() -> Result<()> {
    let builtin = MetricSpec::parse(M::NAME, 0, LossKind::SparseCategoricalCrossentropy, 2).is_ok();
    METRICS.register(M::NAME, build_metric::<M>, builtin)
}

/// The registered loss names, each after ", " (for "allowed: ..." lists).
pub(super) fn registered_losses() -> String {
    LOSSES.listed()
}

/// The registered metric names, each after ", ".
pub(super) fn registered_metrics() -> String {
    METRICS.listed()
}

/// `compile.loss` for a registered loss `ty` with `table` (its TOML table, `type` included);
/// `None` when no loss named `ty` is registered.
///
/// # Errors
/// [`KilnError::Config`] naming `key` and the loss when its arguments are wrong.
pub(super) fn loss_spec(ty: &str, table: &toml::Table, key: &str) -> Result<Option<LossSpec>> {
    let mut args = table.clone();
    args.remove("type");
    match LOSSES.get(ty, args) {
        None => Ok(None),
        Some(Err(e)) => Err(KilnError::config(format!("{key} ({ty})"), e)),
        Some(Ok(loss)) => Ok(Some(LossSpec {
            kind: LossKind::Custom(CustomLoss(loss)),
            // What `kiln predict` and the NaN report read: the loss's own `from_logits`.
            from_logits: loss
                .config()
                .get("from_logits")
                .and_then(toml::Value::as_bool)
                .unwrap_or(false),
        })),
    }
}

/// The registered metric `name`, if any.
///
/// # Errors
/// The metric's own message when it cannot be built from its defaults.
pub(super) fn metric(name: &str) -> Option<std::result::Result<CustomMetric, String>> {
    METRICS
        .get(name, toml::Table::new())
        .map(|m| m.map(CustomMetric))
}

impl LossSpec {
    /// The loss as the TOML value `compile.loss` that reads it back: `{ type, from_logits }`
    /// for a built-in loss, `{ type, <its arguments> }` for a registered one.
    pub fn to_toml(&self) -> toml::Value {
        match self.kind {
            LossKind::Custom(c) => {
                let mut t = toml::Table::new();
                t.insert("type".into(), c.name().into());
                t.extend(c.config());
                toml::Value::Table(t)
            }
            LossKind::Builtin(b) => {
                toml::Value::Table(LossSpec::builtin_toml(&b, self.from_logits))
            }
        }
    }
}

/// A registered loss in a [`LossSpec`] ([`LossKind::Custom`]): equal when name and arguments
/// are.
#[derive(Clone, Copy)]
pub struct CustomLoss(pub &'static dyn Loss);

/// A registered metric in a [`MetricSpec`] ([`super::MetricKind::Custom`]).
#[derive(Clone, Copy)]
pub struct CustomMetric(pub &'static dyn Metric);

impl std::ops::Deref for CustomLoss {
    type Target = dyn Loss;
    fn deref(&self) -> &dyn Loss {
        self.0
    }
}

impl std::ops::Deref for CustomMetric {
    type Target = dyn Metric;
    fn deref(&self) -> &dyn Metric {
        self.0
    }
}

impl Debug for CustomLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Debug for CustomMetric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for CustomLoss {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name() && self.config() == other.config()
    }
}
impl Eq for CustomLoss {}

impl PartialEq for CustomMetric {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}
impl Eq for CustomMetric {}

impl Serialize for CustomLoss {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl Serialize for CustomMetric {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A registered name with default arguments.
fn by_name<T: ?Sized + Send + Sync, E: serde::de::Error>(
    registry: &Registry<T>,
    name: &str,
) -> std::result::Result<&'static T, E> {
    match registry.get(name, toml::Table::new()) {
        Some(r) => r.map_err(E::custom),
        None => Err(E::custom(format!(
            "no {} named \"{name}\" is registered",
            registry.what
        ))),
    }
}

impl<'de> Deserialize<'de> for CustomLoss {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        by_name(&LOSSES, &name).map(CustomLoss)
    }
}

impl<'de> Deserialize<'de> for CustomMetric {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        by_name(&METRICS, &name).map(CustomMetric)
    }
}

#[cfg(test)]
mod tests;
