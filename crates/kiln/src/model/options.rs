//! Keras' per-layer options that every layer takes: `trainable`, and for each of the layer's
//! weights `<weight>_initializer`, `<weight>_regularizer`, `<weight>_constraint`, plus
//! `activity_regularizer` (`keras/src/layers/layer.py`, `Dense(kernel_initializer=...)`).
//!
//! They are generic: a layer's weights come from [`layer_weights`] (Keras' names and shapes,
//! the same list `Network::init`, the weights files and `summary()` use), so a layer declared
//! through [`crate::model::Layer`] takes `<name>_initializer` for each weight it declares.
//! A weight inside a sublayer (`query/kernel` of a `MultiHeadAttention`,
//! `feedforward_output_dense/bias` of a `TransformerEncoder`) is addressed by its last name
//! part, so `kernel_initializer` applies to all of a layer's kernels, as Keras does.

use std::collections::BTreeMap;

use rand::Rng;

use super::constraints::Constraint;
use super::initializers::Initializer;
use super::layer::{WeightInit, WeightSpec};
pub(crate) use super::params::Slot;
use super::params::slots;
use super::regularizers::Regularizer;
use super::spec::LayerKind;
use crate::error::{KilnError, Result};

/// A layer's `trainable` flag and per-weight initializers, regularizers and constraints, keyed
/// by weight name (`"kernel"`, `"bias"`, `"gamma"`, `"embeddings"`).
///
/// ```
/// use kiln::model::{Activation, LayerOptions, ModelSpec};
/// use kiln::model::initializers::Initializer;
/// use kiln::model::layers::Dense;
/// use kiln::model::regularizers::Regularizer;
/// let dense = Dense::new(4).with_activation(Activation::Relu);
/// let options = LayerOptions::default()
///     .with_initializer("kernel", Initializer::HeNormal { seed: None })
///     .with_regularizer("kernel", Regularizer::L2 { l2: 1e-4 });
/// let spec = ModelSpec::builder(&[8]).add_with(dense, options).build().unwrap();
/// assert_eq!(spec.layers()[0].options.regularizers.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LayerOptions {
    /// `false` freezes the layer (Keras' `layer.trainable = False`): its weights get no
    /// gradient, no optimizer update, no regularization and no constraint, count as
    /// non-trainable, and a BatchNormalization normalizes with its moving statistics.
    pub trainable: bool,
    /// `<weight>_initializer`: how a weight starts (else the layer's default).
    pub initializers: BTreeMap<String, Initializer>,
    /// `<weight>_regularizer`: a penalty on a trainable weight added to the loss.
    pub regularizers: BTreeMap<String, Regularizer>,
    /// `<weight>_constraint`: a projection applied to a trainable weight after each update.
    pub constraints: BTreeMap<String, Constraint>,
    /// `activity_regularizer`: a penalty on the layer's output, divided by the batch size.
    pub activity_regularizer: Option<Regularizer>,
}

impl Default for LayerOptions {
    fn default() -> Self {
        LayerOptions {
            trainable: true,
            initializers: BTreeMap::new(),
            regularizers: BTreeMap::new(),
            constraints: BTreeMap::new(),
            activity_regularizer: None,
        }
    }
}

impl LayerOptions {
    /// With `trainable` set.
    pub fn with_trainable(mut self, trainable: bool) -> Self {
        self.trainable = trainable;
        self
    }

    /// With `<weight>_initializer`.
    pub fn with_initializer(mut self, weight: &str, init: Initializer) -> Self {
        self.initializers.insert(weight.into(), init);
        self
    }

    /// With `<weight>_regularizer`.
    pub fn with_regularizer(mut self, weight: &str, regularizer: Regularizer) -> Self {
        self.regularizers.insert(weight.into(), regularizer);
        self
    }

    /// With `<weight>_constraint`.
    pub fn with_constraint(mut self, weight: &str, constraint: Constraint) -> Self {
        self.constraints.insert(weight.into(), constraint);
        self
    }

    /// With `activity_regularizer`.
    pub fn with_activity_regularizer(mut self, regularizer: Regularizer) -> Self {
        self.activity_regularizer = Some(regularizer);
        self
    }

    /// The regularizer of weight `w` (a [`layer_weights`] entry), when the layer trains.
    pub(crate) fn regularizer_of(&self, w: &WeightSpec) -> Option<&Regularizer> {
        self.regularizers
            .get(short(&w.name))
            .filter(|_| self.trainable)
    }

    /// The constraint of weight `w`, when the layer trains.
    pub(crate) fn constraint_of(&self, w: &WeightSpec) -> Option<&Constraint> {
        self.constraints
            .get(short(&w.name))
            .filter(|_| self.trainable)
    }

    /// Whether weight `w` is updated by the optimizer.
    pub(crate) fn trains(&self, w: &WeightSpec) -> bool {
        self.trainable && w.trainable
    }

    /// The first values of weight `w` in Keras' layout: its `<weight>_initializer` when given,
    /// else the layer's default ([`WeightInit`]), drawn from `rng`.
    pub(crate) fn initial_values(&self, w: &WeightSpec, rng: &mut impl Rng) -> Vec<f32> {
        match self.initializers.get(short(&w.name)) {
            Some(init) => init.sample(&w.shape, rng).expect(
                "initializers are checked against the weight's shape when the spec is built",
            ),
            None => default_values(w, rng),
        }
    }

    /// Removes the option keys (`trainable`, `*_initializer`, `*_regularizer`,
    /// `*_constraint`, `activity_regularizer`) from a layer's TOML table `table` at `key`
    /// (`model.layers[2]`) and reads them.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming the key for a value the modules refuse.
    pub(crate) fn take_from_toml(table: &mut toml::Table, key: &str) -> Result<LayerOptions> {
        // Keras names three kernels' options without `_kernel` (`recurrent_initializer` is
        // the recurrent kernel's, `depthwise_*` and `pointwise_*` a separable convolution's).
        let weight = |w: &str| match w {
            "recurrent" | "depthwise" | "pointwise" => format!("{w}_kernel"),
            other => other.to_string(),
        };
        let mut o = LayerOptions::default();
        let names: Vec<String> = table.keys().cloned().collect();
        for name in names {
            let at = format!("{key}.{name}");
            let take = |t: &mut toml::Table| t.remove(&name).expect("listed");
            if name == "trainable" {
                o.trainable = match take(table) {
                    toml::Value::Boolean(b) => b,
                    other => {
                        return Err(KilnError::config(
                            at,
                            format!("must be true or false, got {other}"),
                        ));
                    }
                };
            } else if name == "activity_regularizer" {
                o.activity_regularizer = Some(Regularizer::from_toml(&take(table), &at)?);
            } else if let Some(w) = name.strip_suffix("_initializer") {
                let init = Initializer::from_toml(&take(table), &at)?;
                o.initializers.insert(weight(w), init);
            } else if let Some(w) = name.strip_suffix("_regularizer") {
                let r = Regularizer::from_toml(&take(table), &at)?;
                o.regularizers.insert(weight(w), r);
            } else if let Some(w) = name.strip_suffix("_constraint") {
                let c = Constraint::from_toml(&take(table), &at)?;
                o.constraints.insert(weight(w), c);
            }
        }
        Ok(o)
    }

    /// Writes the options into a layer's TOML table, as [`LayerOptions::take_from_toml`]
    /// reads them (defaults left out).
    pub(crate) fn write_toml(&self, t: &mut toml::Table) {
        if !self.trainable {
            t.insert("trainable".into(), toml::Value::Boolean(false));
        }
        fn put<T: serde::Serialize>(t: &mut toml::Table, key: String, v: &T) {
            let v = toml::Value::try_from(v).expect("options serialize to TOML tables");
            // Keras' spelling: `recurrent_initializer` for the recurrent kernel's.
            let key = ["recurrent", "depthwise", "pointwise"]
                .iter()
                .find_map(|w| {
                    let rest = key.strip_prefix(&format!("{w}_kernel_"))?;
                    Some(format!("{w}_{rest}"))
                })
                .unwrap_or(key);
            t.insert(key, v);
        }
        for (w, v) in &self.initializers {
            put(t, format!("{w}_initializer"), v);
        }
        for (w, v) in &self.regularizers {
            put(t, format!("{w}_regularizer"), v);
        }
        for (w, v) in &self.constraints {
            put(t, format!("{w}_constraint"), v);
        }
        if let Some(r) = &self.activity_regularizer {
            put(t, "activity_regularizer".into(), r);
        }
    }

    /// Checks that every weight the options name is one of the layer's (`kind` on inputs of
    /// `inputs`), that regularizers and constraints name trainable weights, and that each
    /// initializer and constraint suits its weight's shape. `key` is the layer's config key
    /// (`model.layers[2]`).
    ///
    /// # Errors
    /// [`KilnError::Config`] at `key.<weight>_<option>` saying what the layer's weights are.
    pub(crate) fn check(&self, kind: &LayerKind, inputs: &[&[usize]], key: &str) -> Result<()> {
        let weights = layer_weights(kind, inputs);
        let class = kind.class_name();
        let named = |w: &str, option: &str| -> Result<Vec<&WeightSpec>> {
            let found: Vec<&WeightSpec> = weights.iter().filter(|s| short(&s.name) == w).collect();
            if found.is_empty() {
                let mut names: Vec<&str> = weights.iter().map(|s| short(&s.name)).collect();
                names.dedup();
                let names = if names.is_empty() {
                    "it has no weights".to_string()
                } else {
                    format!("its weights: {}", names.join(", "))
                };
                return Err(KilnError::config(
                    format!("{key}.{w}_{option}"),
                    format!("{class} has no weight \"{w}\"; {names}"),
                ));
            }
            if option != "initializer" && found.iter().any(|s| !s.trainable) {
                return Err(KilnError::config(
                    format!("{key}.{w}_{option}"),
                    format!(
                        "{class}'s weight \"{w}\" is not trainable (the optimizer does not \
                         update it); it takes an initializer only"
                    ),
                ));
            }
            Ok(found)
        };
        for (w, init) in &self.initializers {
            for s in named(w, "initializer")? {
                check_initializer(init, &s.shape, &format!("{key}.{w}_initializer"))?;
            }
        }
        for w in self.regularizers.keys() {
            named(w, "regularizer")?;
        }
        for (w, c) in &self.constraints {
            let at = format!("{key}.{w}_constraint");
            for s in named(w, "constraint")? {
                if s.shape.len() > 4 {
                    return Err(KilnError::config(
                        at,
                        format!(
                            "kiln constrains weights of rank 1 to 4; \"{w}\" has rank {}",
                            s.shape.len()
                        ),
                    ));
                }
                c.check_rank(s.shape.len(), &at)?;
            }
        }
        Ok(())
    }
}

/// The part of a weight name after the last `/` (`query/kernel` -> `kernel`): the name its
/// options use.
fn short(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// `orthogonal` needs rank 2 or more, `identity` rank 2 (as `Initializer::sample` refuses).
fn check_initializer(init: &Initializer, shape: &[usize], key: &str) -> Result<()> {
    let unfit = match init {
        Initializer::Orthogonal { .. } if shape.len() < 2 => "needs a weight of rank 2 or more",
        Initializer::Identity { .. } if shape.len() != 2 => "works on rank-2 weights only",
        _ => match init.unfit(shape) {
            Some(why) => return Err(KilnError::config(key, format!("{} {why}", init.name()))),
            None => return Ok(()),
        },
    };
    Err(KilnError::config(
        key,
        format!(
            "{} {unfit}; this weight has shape {shape:?}: choose another initializer",
            init.name()
        ),
    ))
}

/// The layer's own default first values of `w` (kiln's draws before options existed).
fn default_values(w: &WeightSpec, rng: &mut impl Rng) -> Vec<f32> {
    let n = w.size();
    match w.init {
        WeightInit::GlorotUniform => {
            let (fan_in, fan_out) = super::initializers::compute_fans(&w.shape);
            super::init::glorot_uniform(rng, n, fan_in, fan_out)
        }
        WeightInit::Zeros => vec![0.0; n],
        WeightInit::Ones => vec![1.0; n],
        WeightInit::RandomUniform(low, high) => {
            (0..n).map(|_| rng.random_range(low..=high)).collect()
        }
        WeightInit::Orthogonal => Initializer::Orthogonal {
            gain: 1.0,
            seed: None,
        }
        .sample(&w.shape, rng)
        .unwrap_or_else(|_| vec![0.0; n]),
        WeightInit::UnitForgetBias => (0..n)
            .map(|i| if i / (n / 4).max(1) == 1 { 1.0 } else { 0.0 })
            .collect(),
    }
}

/// Every weight of a layer of `kind` on inputs of `inputs`: Keras' name (after
/// `layer_name/`), Keras' shape and layout, the default initializer and whether the optimizer
/// updates it, in the order kiln draws their first values.
pub fn layer_weights(kind: &LayerKind, inputs: &[&[usize]]) -> Vec<WeightSpec> {
    stored_weights(kind, inputs)
        .into_iter()
        .map(|(w, _)| w)
        .collect()
}

/// [`layer_weights`] with where each is stored.
pub(crate) fn stored_weights(kind: &LayerKind, inputs: &[&[usize]]) -> Vec<(WeightSpec, Slot)> {
    match kind {
        LayerKind::Declared(l) => {
            let specs = l.weights(inputs);
            let slots = slots(&specs);
            specs.into_iter().zip(slots).collect()
        }
        LayerKind::Input { .. } => Vec::new(),
    }
}
