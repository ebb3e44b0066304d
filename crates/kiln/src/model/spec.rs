//! Model specifications: Keras layers as data, read from TOML or built in Rust.
//!
//! A [`ModelSpec`] is a Keras `Sequential` stack: an `Input(shape)` followed by layers with Keras'
//! class names and arguments (`Conv2D(filters, kernel_size, strides, padding, activation)`, …).
//! Shapes follow Keras: they exclude the batch axis and images are `(height, width, channels)`.
//! Output shapes and parameter counts use Keras' formulas (`keras/src/layers/*`), checked
//! against TensorFlow 2 in the tests.

use serde::{Deserialize, Serialize};

use crate::error::{KilnError, Result};
use crate::precision::Precision;

pub use super::args::{Activation, Padding, Pads2, Pair, keras_shape, positions_of};
use super::layer::{DeclaredLayer, Layer};
use super::options::LayerOptions;
pub use super::registry::LAYER_TYPES;
use super::shared::{check_shared_weights, shared_call_name, shared_owner};

fn default_pool() -> Pair {
    Pair([2, 2])
}
fn default_true() -> bool {
    true
}
fn default_one() -> Pair {
    Pair([1, 1])
}
fn default_bn_momentum() -> f64 {
    0.99
}
fn default_bn_epsilon() -> f64 {
    1e-3
}

/// One layer: its Keras class and arguments. In TOML, `type` names the class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum LayerKind {
    /// `keras.Input(shape)`: the shape of one example, without the batch axis.
    Input {
        /// e.g. `[784]` or `[28, 28, 1]` (height, width, channels).
        shape: Vec<usize>,
    },
    /// `keras.layers.Dense(units, activation=None, use_bias=True)` on the last axis.
    Dense {
        /// Output features.
        units: usize,
        /// Applied after the affine map.
        #[serde(default)]
        activation: Activation,
        /// Adds a bias vector.
        #[serde(default = "default_true")]
        use_bias: bool,
    },
    /// `keras.layers.Conv2D(filters, kernel_size, strides=1, padding="valid", activation=None)`
    /// on `(height, width, channels)` inputs.
    Conv2D {
        /// Output channels.
        filters: usize,
        /// Window size, an integer or `[h, w]`.
        kernel_size: Pair,
        /// Step, an integer or `[h, w]`.
        #[serde(default = "default_one")]
        strides: Pair,
        /// `valid` or `same`.
        #[serde(default)]
        padding: Padding,
        /// Applied after the convolution.
        #[serde(default)]
        activation: Activation,
        /// Adds a bias per filter.
        #[serde(default = "default_true")]
        use_bias: bool,
    },
    /// `keras.layers.MaxPooling2D(pool_size=2, strides=None, padding="valid")`.
    MaxPooling2D {
        /// Window, an integer or `[h, w]`.
        #[serde(default = "default_pool")]
        pool_size: Pair,
        /// Step; `pool_size` when absent.
        #[serde(default)]
        strides: Option<Pair>,
        /// `valid` or `same`.
        #[serde(default)]
        padding: Padding,
    },
    /// `keras.layers.AveragePooling2D(pool_size=2, strides=None, padding="valid")`; with `same`
    /// padding the padded positions are not counted, as in TensorFlow.
    AveragePooling2D {
        /// Window, an integer or `[h, w]`.
        #[serde(default = "default_pool")]
        pool_size: Pair,
        /// Step; `pool_size` when absent.
        #[serde(default)]
        strides: Option<Pair>,
        /// `valid` or `same`.
        #[serde(default)]
        padding: Padding,
    },
    /// `keras.layers.Flatten()`, in Keras' (channels-last) order.
    Flatten {},
    /// `keras.layers.Dropout(rate)`: zeroes a fraction `rate` of inputs while training and
    /// scales the rest by `1 / (1 - rate)`.
    Dropout {
        /// Fraction dropped, in `[0, 1)`.
        rate: f64,
    },
    /// `keras.layers.BatchNormalization(momentum=0.99, epsilon=0.001)` over the last (channel)
    /// axis.
    BatchNormalization {
        /// Moving-average momentum: `moving = moving * momentum + batch * (1 - momentum)`.
        #[serde(default = "default_bn_momentum")]
        momentum: f64,
        /// Added to the variance before the square root.
        #[serde(default = "default_bn_epsilon")]
        epsilon: f64,
    },
    /// `keras.layers.Activation(activation)`.
    Activation {
        /// The function.
        activation: Activation,
    },
    /// `keras.layers.LayerNormalization(epsilon=0.001)` over the last axis, with `gamma` and
    /// `beta`.
    LayerNormalization {
        /// Added to the variance before the square root.
        #[serde(default = "default_bn_epsilon")]
        epsilon: f64,
    },
    /// `keras.layers.MultiHeadAttention(num_heads, key_dim, value_dim=None, use_bias=True)`
    /// called as `layer(query, value)` (`inputs = [query]` is self-attention,
    /// `inputs = [query, value]` uses `value` as key and value); no mask, no dropout. Output:
    /// the query's shape.
    MultiHeadAttention {
        /// Attention heads.
        num_heads: usize,
        /// Size of each head's query and key.
        key_dim: usize,
        /// Size of each head's value; `key_dim` when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value_dim: Option<usize>,
        /// Biases in the four projections.
        #[serde(default = "default_true")]
        use_bias: bool,
    },
    /// `keras_hub.layers.TransformerEncoder(intermediate_dim, num_heads, activation="relu",
    /// layer_norm_epsilon=1e-5, normalize_first=False)`, BERT's block: self-attention
    /// (`key_dim = features / num_heads`), add and LayerNormalization, then
    /// `Dense(intermediate_dim, activation)`, `Dense(features)`, add and LayerNormalization.
    /// No dropout, no mask.
    TransformerEncoder {
        /// Units of the feed-forward network's hidden layer.
        intermediate_dim: usize,
        /// Attention heads; must divide the feature size.
        num_heads: usize,
        /// The feed-forward activation.
        #[serde(default = "default_relu")]
        activation: Activation,
        /// Epsilon of both LayerNormalizations.
        #[serde(default = "default_ln_epsilon")]
        layer_norm_epsilon: f64,
    },
    /// A layer declared through [`crate::model::Layer`] (`crate::model::layers`, or a user's
    /// own registered with [`crate::model::register_layer`]). Build one with
    /// `LayerKind::from(layer)`.
    #[serde(skip)]
    Declared(DeclaredLayer),
}

impl<L: Layer> From<L> for LayerKind {
    fn from(layer: L) -> LayerKind {
        LayerKind::Declared(DeclaredLayer(std::sync::Arc::new(layer)))
    }
}

fn default_relu() -> Activation {
    Activation::Relu
}
fn default_ln_epsilon() -> f64 {
    1e-5
}

/// Keras' other names for the layers kept in [`LayerKind`]'s own variants.
const LEGACY_ALIASES: &[(&str, &str)] = &[
    ("MaxPool2D", "MaxPooling2D"),
    ("AvgPool2D", "AveragePooling2D"),
    ("Convolution2D", "Conv2D"),
];

/// Every layer type name a config may use: [`LAYER_TYPES`], then the declared and registered
/// ones ([`crate::model::Layer`]).
pub fn known_layer_types() -> Vec<String> {
    let mut names: Vec<String> = LAYER_TYPES.iter().map(|s| s.to_string()).collect();
    names.extend(super::registry::declared_names());
    names
}

/// A layer's arguments (`type` included; `name`, `inputs`, `dtype` removed) as a
/// [`LayerKind`]: through its registration when it is declared, serde otherwise. `key` names
/// the layer in errors (`model.layers[3] (Dense)`).
fn parse_kind(
    mut table: toml::Table,
    declared: Option<super::layer::Registration>,
    key: &str,
) -> Result<LayerKind> {
    if let Some(reg) = declared {
        table.remove("type");
        return (reg.build)(table)
            .map(|l| LayerKind::Declared(DeclaredLayer(l)))
            .map_err(|m| KilnError::config(key, m));
    }
    toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| KilnError::config(key, crate::error::humanize(e.message())))
}

impl LayerKind {
    /// The layer's arguments as a TOML table with its `type`, as a config writes it.
    pub fn to_table(&self) -> toml::Table {
        match self {
            LayerKind::Declared(l) => {
                let mut t = toml::Table::new();
                t.insert("type".into(), toml::Value::String(l.class_name().into()));
                t.extend(l.config());
                t
            }
            other => match toml::Value::try_from(other) {
                Ok(toml::Value::Table(t)) => t,
                _ => unreachable!("layer specs serialize to tables"),
            },
        }
    }

    /// The Keras class name (`"Conv2D"`).
    pub fn class_name(&self) -> &'static str {
        match self {
            LayerKind::Input { .. } => "Input",
            LayerKind::Dense { .. } => "Dense",
            LayerKind::Conv2D { .. } => "Conv2D",
            LayerKind::MaxPooling2D { .. } => "MaxPooling2D",
            LayerKind::AveragePooling2D { .. } => "AveragePooling2D",
            LayerKind::Flatten {} => "Flatten",
            LayerKind::Dropout { .. } => "Dropout",
            LayerKind::BatchNormalization { .. } => "BatchNormalization",
            LayerKind::Activation { .. } => "Activation",
            LayerKind::LayerNormalization { .. } => "LayerNormalization",
            LayerKind::MultiHeadAttention { .. } => "MultiHeadAttention",
            LayerKind::TransformerEncoder { .. } => "TransformerEncoder",
            LayerKind::Declared(l) => l.class_name(),
        }
    }

    /// Keras' automatic name prefix (`conv2d`, `max_pooling2d`, …).
    fn default_prefix(&self) -> String {
        if let LayerKind::Declared(l) = self {
            return l.name_prefix();
        }
        match self {
            LayerKind::Input { .. } => "input_layer",
            LayerKind::Dense { .. } => "dense",
            LayerKind::Conv2D { .. } => "conv2d",
            LayerKind::MaxPooling2D { .. } => "max_pooling2d",
            LayerKind::AveragePooling2D { .. } => "average_pooling2d",
            LayerKind::Flatten {} => "flatten",
            LayerKind::Dropout { .. } => "dropout",
            LayerKind::BatchNormalization { .. } => "batch_normalization",
            LayerKind::Activation { .. } => "activation",
            LayerKind::LayerNormalization { .. } => "layer_normalization",
            LayerKind::MultiHeadAttention { .. } => "multi_head_attention",
            LayerKind::TransformerEncoder { .. } => "transformer_encoder",
            LayerKind::Declared(_) => unreachable!("returned above"),
        }
        .to_string()
    }

    /// How many inputs the layer takes: `(least, most)`.
    pub fn arity(&self) -> (usize, usize) {
        match self {
            LayerKind::Input { .. } => (0, 0),
            LayerKind::MultiHeadAttention { .. } => (1, 2),
            LayerKind::Declared(l) => l.arity(),
            _ => (1, 1),
        }
    }

    /// Output shape for an input of `input` (Keras shapes, no batch axis), or a message saying
    /// why the layer cannot take that input.
    pub fn output_shape(&self, input: &[usize]) -> std::result::Result<Vec<usize>, String> {
        self.output_shape_of(&[input])
    }

    /// Output shape for the inputs `inputs` (one per inbound layer, Keras shapes), or a message
    /// saying why the layer cannot take them.
    pub fn output_shape_of(&self, inputs: &[&[usize]]) -> std::result::Result<Vec<usize>, String> {
        let input = inputs.first().copied().unwrap_or(&[]);
        if let Some(out) = super::spec_ext::output_shape(self, inputs) {
            return out;
        }
        if let LayerKind::Declared(l) = self {
            return l.output_shape(inputs);
        }
        match self {
            LayerKind::Input { shape } => Ok(shape.clone()),
            LayerKind::Dense { units, .. } => {
                if input.is_empty() {
                    return Err("Dense needs an input with at least one axis".into());
                }
                let mut out = input.to_vec();
                *out.last_mut().unwrap() = *units;
                Ok(out)
            }
            LayerKind::Conv2D {
                filters,
                kernel_size,
                strides,
                padding,
                ..
            } => {
                let [h, w] = image_hw(input, "Conv2D")?;
                let oh = window(*padding, h, kernel_size.0[0], strides.0[0])?;
                let ow = window(*padding, w, kernel_size.0[1], strides.0[1])?;
                Ok(vec![oh, ow, *filters])
            }
            LayerKind::MaxPooling2D {
                pool_size,
                strides,
                padding,
            }
            | LayerKind::AveragePooling2D {
                pool_size,
                strides,
                padding,
            } => {
                let [h, w] = image_hw(input, self.class_name())?;
                let s = strides.unwrap_or(*pool_size).0;
                let oh = window(*padding, h, pool_size.0[0], s[0])?;
                let ow = window(*padding, w, pool_size.0[1], s[1])?;
                Ok(vec![oh, ow, input[2]])
            }
            LayerKind::Flatten {} => Ok(vec![input.iter().product()]),
            LayerKind::Dropout { .. }
            | LayerKind::Activation { .. }
            | LayerKind::BatchNormalization { .. } => Ok(input.to_vec()),
            _ => unreachable!("handled by spec_ext::output_shape"),
        }
    }

    /// `(trainable, non_trainable)` parameter counts for an input of `input`, as Keras counts
    /// them (BatchNormalization's moving mean and variance are non-trainable).
    pub fn param_count(&self, input: &[usize]) -> (usize, usize) {
        self.param_count_of(&[input])
    }

    /// [`LayerKind::param_count`] for a layer with several inputs (MultiHeadAttention's
    /// `value` sets the key and value projections' input size).
    pub fn param_count_of(&self, inputs: &[&[usize]]) -> (usize, usize) {
        let input = inputs.first().copied().unwrap_or(&[]);
        let last = input.last().copied().unwrap_or(0);
        if let Some(n) = super::spec_ext::param_count(self, inputs) {
            return (n, 0);
        }
        if let LayerKind::Declared(l) = self {
            return l.weights(inputs).iter().fold((0, 0), |(t, f), w| {
                if w.trainable {
                    (t + w.size(), f)
                } else {
                    (t, f + w.size())
                }
            });
        }
        match self {
            LayerKind::Dense {
                units, use_bias, ..
            } => (last * units + if *use_bias { *units } else { 0 }, 0),
            LayerKind::Conv2D {
                filters,
                kernel_size,
                use_bias,
                ..
            } => (
                kernel_size.0[0] * kernel_size.0[1] * last * filters
                    + if *use_bias { *filters } else { 0 },
                0,
            ),
            LayerKind::BatchNormalization { .. } => (2 * last, 2 * last),
            _ => (0, 0),
        }
    }

    /// Checks argument ranges (positive sizes, rates in `[0, 1)`), naming the bad argument.
    fn validate(&self) -> std::result::Result<(), String> {
        let positive = |name: &str, v: usize| {
            if v == 0 {
                Err(format!("`{name}` must be positive, got 0"))
            } else {
                Ok(())
            }
        };
        match self {
            LayerKind::Input { shape } => {
                if shape.is_empty() || shape.len() > 3 || shape.contains(&0) {
                    return Err(format!(
                        "`shape` must have 1 to 3 positive dimensions \
                         (e.g. [784] or [28, 28, 1]), got {shape:?}"
                    ));
                }
                Ok(())
            }
            LayerKind::Dense { units, .. } => positive("units", *units),
            LayerKind::Conv2D {
                filters,
                kernel_size,
                strides,
                ..
            } => {
                positive("filters", *filters)?;
                kernel_size
                    .0
                    .iter()
                    .try_for_each(|&v| positive("kernel_size", v))?;
                strides.0.iter().try_for_each(|&v| positive("strides", v))
            }
            LayerKind::MaxPooling2D {
                pool_size, strides, ..
            }
            | LayerKind::AveragePooling2D {
                pool_size, strides, ..
            } => {
                pool_size
                    .0
                    .iter()
                    .try_for_each(|&v| positive("pool_size", v))?;
                strides
                    .unwrap_or(*pool_size)
                    .0
                    .iter()
                    .try_for_each(|&v| positive("strides", v))
            }
            LayerKind::Dropout { rate } => {
                if (0.0..1.0).contains(rate) {
                    Ok(())
                } else {
                    Err(format!("`rate` must be in [0, 1), got {rate}"))
                }
            }
            LayerKind::BatchNormalization { momentum, epsilon } => {
                if !(0.0..=1.0).contains(momentum) {
                    return Err(format!("`momentum` must be in [0, 1], got {momentum}"));
                }
                if *epsilon <= 0.0 {
                    return Err(format!("`epsilon` must be positive, got {epsilon}"));
                }
                Ok(())
            }
            LayerKind::Flatten {} | LayerKind::Activation { .. } => Ok(()),
            other => super::spec_ext::validate(other),
        }
    }
}

fn image_hw(input: &[usize], class: &str) -> std::result::Result<[usize; 2], String> {
    match input {
        [h, w, _c] => Ok([*h, *w]),
        _ => Err(format!(
            "{class} expects a 3-D input (height, width, channels), got shape {}",
            keras_shape(input)
        )),
    }
}

fn window(
    padding: Padding,
    input: usize,
    k: usize,
    s: usize,
) -> std::result::Result<usize, String> {
    padding
        .resolve(input, k, s)
        .map(|(out, _)| out)
        .ok_or_else(|| {
            format!("window {k} is larger than the input ({input}) with padding \"valid\"")
        })
}

/// Most parameters in one layer, and most values per example in one activation: 2^31
/// (8 GiB of float32). Larger sizes are almost always a typo.
pub const MAX_ELEMENTS: u128 = 1 << 31;

/// Rejects layers whose parameter count would exceed [`MAX_ELEMENTS`] (computed without
/// overflow, before anything is allocated).
fn check_size(kind: &LayerKind, inputs: &[&[usize]]) -> std::result::Result<(), String> {
    let input = inputs.first().copied().unwrap_or(&[]);
    let last = input.last().copied().unwrap_or(0) as u128;
    let params = match kind {
        LayerKind::Dense { units, .. } => (last + 1) * *units as u128,
        LayerKind::Conv2D {
            filters,
            kernel_size,
            ..
        } => (kernel_size.0[0] as u128 * kernel_size.0[1] as u128 * last + 1) * *filters as u128,
        LayerKind::Declared(l) => l
            .weights(inputs)
            .iter()
            .map(|w| w.shape.iter().map(|&d| d as u128).product::<u128>())
            .sum(),
        other => super::spec_ext::param_count_u128(other, inputs).unwrap_or(0),
    };
    if params > MAX_ELEMENTS {
        return Err(format!(
            "{params} parameters ({:.1} GB as float32) is too large; kiln's limit is {MAX_ELEMENTS} per layer",
            params as f64 * 4.0 / 1e9
        ));
    }
    Ok(())
}

/// Where a layer's input comes from: one of the model's `Input`s or an earlier layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRef {
    /// The model's `k`-th `Input`.
    Input(usize),
    /// The output of layer `i` (an index into [`ModelSpec::layers`]).
    Layer(usize),
}

/// A named layer.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSpec {
    /// Unique name (Keras' automatic names `conv2d`, `conv2d_1`, … when not given).
    pub name: String,
    /// Class and arguments.
    pub kind: LayerKind,
    /// Where its inputs come from, in call order (Keras' inbound layers); always earlier in
    /// the model, so layers run in their listed order.
    pub inputs: Vec<NodeRef>,
    /// `trainable` and per-weight initializers, regularizers and constraints.
    pub options: LayerOptions,
    /// `Some(j)`: this entry calls layer `j` again (a shared layer, `shares = "name"` in
    /// TOML): `kind` is layer `j`'s, it has no weights or options of its own and runs on
    /// layer `j`'s weights.
    pub shares: Option<usize>,
}

/// A model: one or more `Input`s and layers, as a Keras `Sequential` stack (each layer takes
/// the previous one's output) or a Keras functional graph (layers name their `inputs`, for
/// residual connections and several inputs). Built with [`ModelSpec::builder`] or read from
/// the `[model]` table of a config ([`ModelSpec::from_toml`]); both give the same type, which
/// [`crate::model::Network`] runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    inputs: Vec<(String, Vec<usize>)>,
    layers: Vec<LayerSpec>,
    shapes: Vec<Vec<usize>>,
    /// The global dtype policy (see [`crate::precision`]).
    precision: Precision,
    /// Per-layer dtype policies (Keras' `dtype=` layer argument), by layer name.
    layer_dtypes: std::collections::BTreeMap<String, Precision>,
    /// The output layers, in the order of `[model] outputs` (Keras' `outputs=[...]`).
    outputs: Vec<usize>,
}

/// Builds a [`ModelSpec`] in Rust, as `keras.Sequential([...])`.
///
/// ```
/// use kiln::model::{Activation, LayerKind, ModelSpec};
/// let spec = ModelSpec::builder(&[784])
///     .add(LayerKind::Dense { units: 10, activation: Activation::Softmax, use_bias: true })
///     .build()
///     .unwrap();
/// assert_eq!(spec.output_shape(), &[10]);
/// ```
#[derive(Debug, Clone)]
pub struct SequentialBuilder {
    input_shape: Vec<usize>,
    layers: Vec<(Option<String>, LayerKind, LayerOptions)>,
}

impl SequentialBuilder {
    /// Appends a layer with an automatic name (Keras' `model.add`).
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, kind: LayerKind) -> Self {
        self.layers.push((None, kind, LayerOptions::default()));
        self
    }

    /// Appends a layer with an automatic name and its options (Keras'
    /// `Dense(4, kernel_initializer=..., trainable=False)`).
    pub fn add_with(mut self, kind: LayerKind, options: LayerOptions) -> Self {
        self.layers.push((None, kind, options));
        self
    }

    /// Appends a layer with an explicit name.
    pub fn add_named(mut self, name: impl Into<String>, kind: LayerKind) -> Self {
        self.layers
            .push((Some(name.into()), kind, LayerOptions::default()));
        self
    }

    /// Checks arguments and shapes.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `model.layers[i]` when a layer's arguments are out of range
    /// or it cannot take its input's shape.
    pub fn build(self) -> Result<ModelSpec> {
        let mut nodes = vec![RawNode {
            name: None,
            kind: LayerKind::Input {
                shape: self.input_shape,
            },
            inputs: None,
            options: LayerOptions::default(),
            shares: None,
        }];
        nodes.extend(
            self.layers
                .into_iter()
                .map(|(name, kind, options)| RawNode {
                    name,
                    kind,
                    inputs: None,
                    options,
                    shares: None,
                }),
        );
        ModelSpec::from_nodes(nodes, &[])
    }
}

/// One entry of `[model] layers` before names are resolved: `inputs` names earlier entries
/// (`None`: the previous entry, as in a Sequential stack).
#[derive(Debug, Clone)]
pub struct RawNode {
    /// Explicit name.
    pub name: Option<String>,
    /// Class and arguments (`Input` included).
    pub kind: LayerKind,
    /// Names of the inbound entries.
    pub inputs: Option<Vec<String>>,
    /// `trainable` and per-weight options.
    pub options: LayerOptions,
    /// The name of an earlier layer to call again on this entry's `inputs`, with that layer's
    /// class, arguments and weights (Keras' shared layers). `kind` is then ignored (see
    /// [`RawNode::sharing`]) and `options` must be the default.
    pub shares: Option<String>,
}

impl RawNode {
    /// An entry that calls the earlier layer `owner` again on `inputs` (Keras' `tower(b)`
    /// after `tower = Dense(4); tower(a)`), sharing its weights; `name` names this call.
    pub fn sharing(name: Option<String>, owner: &str, inputs: Vec<String>) -> RawNode {
        RawNode {
            name,
            // Ignored: from_nodes takes the owner's class and arguments.
            kind: LayerKind::Flatten {},
            inputs: Some(inputs),
            options: LayerOptions::default(),
            shares: Some(owner.to_string()),
        }
    }
}

impl ModelSpec {
    /// Starts a Sequential model whose examples have `input_shape` (no batch axis).
    pub fn builder(input_shape: &[usize]) -> SequentialBuilder {
        SequentialBuilder {
            input_shape: input_shape.to_vec(),
            layers: Vec::new(),
        }
    }

    /// Builds a model from `[model] layers` entries in order (entry 0 must be an `Input`),
    /// with `outputs` naming the output layers (the last entry when empty).
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `model.layers[i]` (or `model.outputs`) for bad arguments,
    /// shapes, names or inputs.
    pub fn from_nodes(nodes: Vec<RawNode>, outputs: &[String]) -> Result<ModelSpec> {
        let key = |i: usize, kind: &LayerKind| format!("model.layers[{i}] ({})", kind.class_name());
        let mut counts = std::collections::HashMap::<String, usize>::new();
        // Every entry (inputs too) by name -> node.
        let mut by_name = std::collections::HashMap::<String, NodeRef>::new();
        let mut inputs: Vec<(String, Vec<usize>)> = Vec::new();
        let mut layers: Vec<LayerSpec> = Vec::new();
        let mut shapes: Vec<Vec<usize>> = Vec::new();
        let mut previous: Option<NodeRef> = None;
        if !matches!(
            nodes.first().map(|n| &n.kind),
            Some(LayerKind::Input { .. })
        ) {
            return Err(KilnError::config(
                "model.layers[0]",
                "the first layer must be `{ type = \"Input\", shape = [...] }`",
            ));
        }
        for (i, node) in nodes.into_iter().enumerate() {
            let RawNode {
                name,
                kind,
                inputs: wanted,
                options,
                shares,
            } = node;
            let shares = match shares {
                None => None,
                Some(owner) => Some(shared_owner(i, &owner, &by_name, &layers, &options)?),
            };
            let kind = match shares {
                Some(o) => layers[o].kind.clone(),
                None => kind,
            };
            kind.validate()
                .map_err(|m| KilnError::config(key(i, &kind), m))?;
            let name = match (name, shares) {
                (Some(n), _) => n,
                // Calls of a shared layer do not take the next automatic layer name.
                (None, Some(o)) => shared_call_name(&layers[o].name, &by_name),
                (None, None) => {
                    let prefix = kind.default_prefix();
                    let n = counts.entry(prefix.clone()).or_insert(0);
                    let name = if *n == 0 {
                        prefix.to_string()
                    } else {
                        format!("{prefix}_{n}")
                    };
                    *n += 1;
                    name
                }
            };
            if name.is_empty() || name.contains(['/', ' ']) {
                return Err(KilnError::config(
                    format!("model.layers[{i}].name"),
                    format!(
                        "\"{name}\" is not a valid layer name: use letters, digits, '_' or '-' (no '/', which separates layer and weight names)"
                    ),
                ));
            }
            if by_name.contains_key(&name) {
                return Err(KilnError::config(
                    format!("model.layers[{i}].name"),
                    format!("layer name \"{name}\" is used twice; names must be unique"),
                ));
            }
            if let LayerKind::Input { shape } = &kind {
                if options != LayerOptions::default() {
                    return Err(KilnError::config(
                        format!("model.layers[{i}]"),
                        "an `Input` has no weights and computes nothing: it takes no \
                         `trainable`, initializer, regularizer or constraint options",
                    ));
                }
                if wanted.is_some() {
                    return Err(KilnError::config(
                        format!("model.layers[{i}].inputs"),
                        "an `Input` takes no inputs",
                    ));
                }
                let node = NodeRef::Input(inputs.len());
                inputs.push((name.clone(), shape.clone()));
                by_name.insert(name, node);
                previous = Some(node);
                continue;
            }
            let refs: Vec<NodeRef> = match wanted {
                None => vec![previous.expect("entry 0 is an Input")],
                Some(names) => names
                    .iter()
                    .map(|n| {
                        by_name.get(n).copied().ok_or_else(|| {
                            KilnError::config(
                                format!("model.layers[{i}].inputs"),
                                format!(
                                    "\"{n}\" is not the name of an earlier layer; list layers so \
                                     that each comes after its inputs"
                                ),
                            )
                        })
                    })
                    .collect::<Result<_>>()?,
            };
            let (least, most) = kind.arity();
            if refs.len() < least || refs.len() > most {
                return Err(KilnError::config(
                    format!("model.layers[{i}].inputs"),
                    format!(
                        "{} takes {} input(s), got {}",
                        kind.class_name(),
                        if most == usize::MAX {
                            format!("{least} or more")
                        } else if least == most {
                            least.to_string()
                        } else {
                            format!("{least} to {most}")
                        },
                        refs.len()
                    ),
                ));
            }
            let in_shapes: Vec<&[usize]> = refs
                .iter()
                .map(|r| match r {
                    NodeRef::Input(k) => inputs[*k].1.as_slice(),
                    NodeRef::Layer(j) => shapes[*j].as_slice(),
                })
                .collect();
            if let Some(o) = shares {
                let owner_shapes: Vec<&[usize]> = layers[o]
                    .inputs
                    .iter()
                    .map(|r| match r {
                        NodeRef::Input(k) => inputs[*k].1.as_slice(),
                        NodeRef::Layer(j) => shapes[*j].as_slice(),
                    })
                    .collect();
                check_shared_weights(&kind, &layers[o].name, &owner_shapes, &in_shapes)
                    .map_err(|m| KilnError::config(format!("model.layers[{i}].shares"), m))?;
            }
            check_size(&kind, &in_shapes).map_err(|m| KilnError::config(key(i, &kind), m))?;
            options.check(&kind, &in_shapes, &format!("model.layers[{i}]"))?;
            let shape = kind
                .output_shape_of(&in_shapes)
                .map_err(|m| KilnError::config(key(i, &kind), m))?;
            let elements: u128 = shape.iter().map(|&d| d as u128).product();
            if elements > MAX_ELEMENTS {
                return Err(KilnError::config(
                    key(i, &kind),
                    format!(
                        "its output {} has {elements} values per example; kiln's limit is {MAX_ELEMENTS}",
                        keras_shape(&shape)
                    ),
                ));
            }
            let node = NodeRef::Layer(layers.len());
            by_name.insert(name.clone(), node);
            previous = Some(node);
            layers.push(LayerSpec {
                name,
                kind,
                inputs: refs,
                options,
                shares,
            });
            shapes.push(shape);
        }
        if layers.is_empty() {
            return Err(KilnError::config(
                "model.layers",
                "the model has no layers after `Input`; add at least one (e.g. Dense)",
            ));
        }
        let outputs = output_layers(outputs, &by_name, layers.len())?;
        check_output_positions(&outputs, &layers, &shapes)?;
        let spec = ModelSpec {
            inputs,
            layers,
            shapes,
            outputs,
            precision: Precision::default(),
            layer_dtypes: Default::default(),
        };
        spec.check_connected()?;
        Ok(spec)
    }

    /// Every layer and input must lead to the output (Keras would silently drop the others;
    /// here they are almost always a wrong `inputs` name).
    fn check_connected(&self) -> Result<()> {
        let mut used = vec![false; self.layers.len()];
        let mut used_inputs = vec![false; self.inputs.len()];
        for &o in &self.outputs {
            used[o] = true;
        }
        for j in (0..self.layers.len()).rev() {
            if !used[j] {
                continue;
            }
            for r in &self.layers[j].inputs {
                match r {
                    NodeRef::Input(k) => used_inputs[*k] = true,
                    NodeRef::Layer(i) => used[*i] = true,
                }
            }
        }
        if let Some(j) = used.iter().position(|u| !u) {
            return Err(KilnError::config(
                "model.layers",
                format!(
                    "layer \"{}\" does not lead to the model's output(s) {:?}; fix the `inputs` \
                     that should name it, or remove it",
                    self.layers[j].name,
                    self.output_names()
                ),
            ));
        }
        if let Some(k) = used_inputs.iter().position(|u| !u) {
            return Err(KilnError::config(
                "model.layers",
                format!("Input \"{}\" is not used by any layer", self.inputs[k].0),
            ));
        }
        Ok(())
    }

    /// Reads `[model]` from a config: `layers = [{ type = "Input", shape = [...] }, ...]`, and
    /// for a functional model `inputs = ["name", ...]` on layers and `outputs = ["name"]`.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming the key (`model.layers[3].type`), the bad value and the
    /// allowed values.
    pub fn from_toml(model: &toml::Table) -> Result<ModelSpec> {
        if let Some(k) = model
            .keys()
            .find(|k| k.as_str() != "layers" && k.as_str() != "outputs")
        {
            return Err(KilnError::config(
                format!("model.{k}"),
                "unknown key; `[model]` takes `layers` and `outputs`",
            ));
        }
        let outputs = match model.get("outputs") {
            None => Vec::new(),
            Some(v) => string_list(v)
                .filter(|names| !names.is_empty())
                .ok_or_else(|| {
                    KilnError::config(
                        "model.outputs",
                        "must be a layer name or a list of layer names",
                    )
                })?,
        };
        let layers = model
            .get("layers")
            .and_then(|v| v.as_array())
            .ok_or_else(|| {
                KilnError::config(
                    "model.layers",
                    "missing: give an array of layers, the first `{ type = \"Input\", shape = [...] }`",
                )
            })?;
        let mut parsed = Vec::new();
        let mut dtypes = Vec::new();
        for (i, value) in layers.iter().enumerate() {
            let key = format!("model.layers[{i}]");
            let mut table = value.as_table().cloned().ok_or_else(|| {
                KilnError::config(&key, "each layer must be a table with a `type`")
            })?;
            if let Some(node) = super::shared::sharing_entry(&mut table, &key)? {
                parsed.push(node);
                dtypes.push(None);
                continue;
            }
            let type_name = table
                .get("type")
                .and_then(|t| t.as_str())
                .ok_or_else(|| {
                    KilnError::config(
                        format!("{key}.type"),
                        format!("missing; allowed: {}", known_layer_types().join(", ")),
                    )
                })?
                .to_string();
            let declared = super::registry::lookup(&type_name);
            let type_name = match LEGACY_ALIASES.iter().find(|(alias, _)| *alias == type_name) {
                Some((_, class)) => {
                    table.insert("type".into(), toml::Value::String(class.to_string()));
                    class.to_string()
                }
                None => type_name,
            };
            if declared.is_none() && !LAYER_TYPES.contains(&type_name.as_str()) {
                return Err(KilnError::config(
                    format!("{key}.type"),
                    format!(
                        "unknown layer type \"{type_name}\"; allowed: {}",
                        known_layer_types().join(", ")
                    ),
                ));
            }
            // Name the key for enum-valued arguments (serde's message does not).
            for (arg, allowed) in [
                (
                    "activation",
                    &["linear", "relu", "gelu", "sigmoid", "tanh", "softmax"][..],
                ),
                ("padding", &["valid", "same"][..]),
            ] {
                if declared.is_some() {
                    continue;
                }
                if let Some(v) = table.get(arg)
                    && !v.as_str().is_some_and(|s| allowed.contains(&s))
                {
                    return Err(KilnError::config(
                        format!("{key}.{arg}"),
                        format!("{v} is not allowed; allowed: {}", allowed.join(", ")),
                    ));
                }
            }
            let dtype = match table.remove("dtype") {
                Some(toml::Value::String(s)) => {
                    Some(Precision::parse(&s, &format!("{key}.dtype"))?)
                }
                Some(other) => {
                    return Err(KilnError::config(
                        format!("{key}.dtype"),
                        format!("must be a string such as \"float32\", got {other}"),
                    ));
                }
                None => None,
            };
            dtypes.push(dtype);
            let name = take_name(&mut table, &key)?;
            let inputs = take_inputs(&mut table, &key)?;
            let options = LayerOptions::take_from_toml(&mut table, &key)?;
            let kind = parse_kind(table, declared, &format!("{key} ({type_name})"))?;
            parsed.push(RawNode {
                name,
                kind,
                inputs,
                options,
                shares: None,
            });
        }
        // dtypes[i] belongs to parsed[i]; Inputs compute nothing, so only layers keep theirs.
        let layer_dtypes: Vec<Option<Precision>> = parsed
            .iter()
            .zip(dtypes)
            .filter(|(node, _)| !matches!(node.kind, LayerKind::Input { .. }))
            .map(|(_, d)| d)
            .collect();
        let mut spec = ModelSpec::from_nodes(parsed, &outputs)?;
        for (j, dtype) in layer_dtypes.into_iter().enumerate() {
            if let Some(d) = dtype {
                let name = spec.layers[j].name.clone();
                spec.layer_dtypes.insert(name, d);
            }
        }
        Ok(spec)
    }

    /// True when every layer takes the previous entry's output and the last layer is the
    /// output (a Keras `Sequential` stack).
    pub fn is_sequential(&self) -> bool {
        self.inputs.len() == 1
            && self.outputs == [self.layers.len() - 1]
            && self.layers.iter().enumerate().all(|(j, l)| {
                l.shares.is_none()
                    && l.inputs
                        == [if j == 0 {
                            NodeRef::Input(0)
                        } else {
                            NodeRef::Layer(j - 1)
                        }]
            })
    }

    /// The spec as the `[model]` TOML table (with resolved names), for the run directory.
    /// Sequential stacks are written without `inputs`, as before functional models existed.
    pub fn to_toml(&self) -> toml::Table {
        let sequential = self.is_sequential();
        let mut layers = Vec::new();
        for (k, (name, shape)) in self.inputs.iter().enumerate() {
            let mut v = toml::Value::try_from(LayerKind::Input {
                shape: shape.clone(),
            })
            .expect("layer specs serialize");
            if (!sequential || k > 0 || name != "input_layer")
                && let toml::Value::Table(t) = &mut v
            {
                t.insert("name".into(), toml::Value::String(name.clone()));
            }
            layers.push(v);
        }
        for layer in &self.layers {
            let mut v = toml::Value::Table(match layer.shares {
                Some(o) => super::shared::sharing_table(&self.layers[o].name),
                None => layer.kind.to_table(),
            });
            if let toml::Value::Table(t) = &mut v {
                t.insert("name".into(), toml::Value::String(layer.name.clone()));
                layer.options.write_toml(t);
                if let Some(d) = self.layer_dtypes.get(&layer.name) {
                    t.insert("dtype".into(), toml::Value::String(d.name().into()));
                }
                if !sequential {
                    let names = layer
                        .inputs
                        .iter()
                        .map(|r| toml::Value::String(self.node_name(*r).to_string()))
                        .collect();
                    t.insert("inputs".into(), toml::Value::Array(names));
                }
            }
            layers.push(v);
        }
        let mut t = toml::Table::new();
        t.insert("layers".into(), toml::Value::Array(layers));
        if !sequential {
            let names = self.output_names().into_iter().map(toml::Value::from);
            t.insert("outputs".into(), toml::Value::Array(names.collect()));
        }
        t
    }

    /// The model with the global dtype policy `precision` (Keras'
    /// `keras.mixed_precision.set_global_policy`): layers without their own `dtype` compute in
    /// its compute dtype. See [`crate::precision`].
    pub fn with_precision(mut self, precision: Precision) -> ModelSpec {
        self.precision = precision;
        self
    }

    /// The global dtype policy (default float32).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The model with layer `name`'s own dtype policy (Keras' `Dense(10, dtype="float32")`;
    /// TOML: `dtype = "float32"` in the layer's table), which wins over the global one.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `model.layers` when no layer has that name.
    pub fn with_layer_dtype(mut self, name: &str, dtype: Precision) -> Result<ModelSpec> {
        if !self.layers.iter().any(|l| l.name == name) {
            return Err(KilnError::config(
                "model.layers",
                format!("no layer is named \"{name}\" (dtype override)"),
            ));
        }
        self.not_a_call(name, "dtype")?;
        self.layer_dtypes.insert(name.to_string(), dtype);
        Ok(self)
    }

    /// The model with layer `name`'s options replaced by `options` (for a functional model
    /// built from [`RawNode`]s, options can also be given per node).
    ///
    /// # Errors
    /// [`KilnError::Config`] when no layer has that name or the options name a weight the
    /// layer does not have.
    pub fn with_layer_options(mut self, name: &str, options: LayerOptions) -> Result<ModelSpec> {
        let Some(i) = self.layers.iter().position(|l| l.name == name) else {
            return Err(KilnError::config(
                "model.layers",
                format!("no layer is named \"{name}\" (layer options)"),
            ));
        };
        self.not_a_call(name, "options")?;
        let at = format!("model.layers[{}]", i + self.inputs.len());
        options.check(&self.layers[i].kind, &self.shapes_before(i), &at)?;
        self.layers[i].options = options;
        Ok(self)
    }

    /// The dtype policy layer `i` (index into [`Self::layers`]) computes with: its own
    /// `dtype`, else the global policy.
    pub fn layer_precision(&self, i: usize) -> Precision {
        self.layer_dtypes
            .get(&self.layers[self.param_owner(i)].name)
            .copied()
            .unwrap_or(self.precision)
    }

    /// The name of an input or layer.
    pub fn node_name(&self, r: NodeRef) -> &str {
        match r {
            NodeRef::Input(k) => &self.inputs[k].0,
            NodeRef::Layer(j) => &self.layers[j].name,
        }
    }

    /// Shape of an input or of a layer's output (no batch axis).
    pub fn node_shape(&self, r: NodeRef) -> &[usize] {
        match r {
            NodeRef::Input(k) => &self.inputs[k].1,
            NodeRef::Layer(j) => &self.shapes[j],
        }
    }

    /// The model's `Input`s: `(name, shape of one example)`.
    pub fn inputs(&self) -> &[(String, Vec<usize>)] {
        &self.inputs
    }

    /// Shape of one example of the first input (no batch axis).
    pub fn input_shape(&self) -> &[usize] {
        &self.inputs[0].1
    }

    /// The layers after `Input`, in order.
    pub fn layers(&self) -> &[LayerSpec] {
        &self.layers
    }

    /// Output shape of layer `i` (no batch axis).
    pub fn shape_after(&self, i: usize) -> &[usize] {
        &self.shapes[i]
    }

    /// Input shape of layer `i` (its first input's).
    pub fn shape_before(&self, i: usize) -> &[usize] {
        self.node_shape(self.layers[i].inputs[0])
    }

    /// Shapes of all of layer `i`'s inputs, in call order.
    pub fn shapes_before(&self, i: usize) -> Vec<&[usize]> {
        self.layers[i]
            .inputs
            .iter()
            .map(|r| self.node_shape(*r))
            .collect()
    }

    /// Index of the (first) output layer.
    pub fn output_layer(&self) -> usize {
        self.outputs[0]
    }

    /// Indices of the output layers, in `[model] outputs` order.
    pub fn output_layers(&self) -> &[usize] {
        &self.outputs
    }

    /// Names of the output layers, in `[model] outputs` order (Keras' `model.output_names`).
    pub fn output_names(&self) -> Vec<String> {
        self.outputs
            .iter()
            .map(|&o| self.layers[o].name.clone())
            .collect()
    }

    /// True when the model has more than one output.
    pub fn has_several_outputs(&self) -> bool {
        self.outputs.len() > 1
    }

    /// The (first) output's shape.
    pub fn output_shape(&self) -> &[usize] {
        &self.shapes[self.outputs[0]]
    }

    /// The size of output `k`'s last axis (classes, units or channels).
    pub fn units_of_output(&self, k: usize) -> usize {
        self.shapes[self.outputs[k]].last().copied().unwrap_or(1)
    }

    /// The length of each row the losses and metrics see: the size of the output's last axis
    /// (classes, units or channels); for a model with several outputs, the sum over them (the
    /// network returns their rows side by side, in `outputs` order).
    pub fn output_units(&self) -> usize {
        (0..self.outputs.len())
            .map(|k| self.units_of_output(k))
            .sum()
    }

    /// Output positions per example: the product of the output's axes but the last (1 for a
    /// vector output, `steps` for `(steps, classes)`, `h * w` for `(h, w, classes)`).
    pub fn output_positions(&self) -> usize {
        positions_of(self.output_shape())
    }

    /// `(trainable, non_trainable)` parameters of layer `i`.
    /// A frozen layer's (`trainable = false`) are all non-trainable, as Keras counts them.
    pub fn layer_params(&self, i: usize) -> (usize, usize) {
        if self.layers[i].shares.is_some() {
            // Counted once, at the layer that holds the weights (as Keras counts them).
            return (0, 0);
        }
        let (t, n) = self.layers[i].kind.param_count_of(&self.shapes_before(i));
        if self.layers[i].options.trainable {
            (t, n)
        } else {
            (0, t + n)
        }
    }

    /// The layer whose weights and options layer `i` uses: `i`, or the layer it shares.
    pub fn param_owner(&self, i: usize) -> usize {
        self.layers[i].shares.unwrap_or(i)
    }

    /// `(trainable, non_trainable)` parameter totals, counted from the spec (nothing is
    /// allocated).
    pub fn param_count(&self) -> (usize, usize) {
        (0..self.layers.len())
            .map(|i| self.layer_params(i))
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
    }

    /// The channel count (the last axis, Keras' `axis=-1`) of each BatchNormalization layer,
    /// in layer order: what `sync_batch_norm` all-reduces per layer (`2 × channels + 1`
    /// values).
    pub fn batch_norm_channels(&self) -> Vec<usize> {
        (0..self.layers.len())
            .filter(|&i| matches!(self.layers[i].kind, LayerKind::BatchNormalization { .. }))
            .map(|i| self.shape_after(i).last().copied().unwrap_or(1))
            .collect()
    }

    /// True when the output layer ends in a softmax (its outputs are probabilities).
    pub fn ends_in_softmax(&self) -> bool {
        matches!(
            self.layers.get(self.outputs[0]).map(|l| &l.kind),
            Some(LayerKind::Dense {
                activation: Activation::Softmax,
                ..
            }) | Some(LayerKind::Activation {
                activation: Activation::Softmax
            }) | Some(LayerKind::Conv2D {
                activation: Activation::Softmax,
                ..
            })
        )
    }
}

/// The output layers `names` name (the last layer when none is named).
///
/// # Errors
/// [`KilnError::Config`] naming `model.outputs` for a name that is not a layer, or one given
/// twice.
fn output_layers(
    names: &[String],
    by_name: &std::collections::HashMap<String, NodeRef>,
    layers: usize,
) -> Result<Vec<usize>> {
    if names.is_empty() {
        return Ok(vec![layers - 1]);
    }
    let mut outputs = Vec::with_capacity(names.len());
    for n in names {
        let Some(NodeRef::Layer(j)) = by_name.get(n) else {
            return Err(KilnError::config(
                "model.outputs",
                format!("\"{n}\" is not the name of a layer of the model"),
            ));
        };
        if outputs.contains(j) {
            return Err(KilnError::config(
                "model.outputs",
                format!("\"{n}\" is named twice; each output once"),
            ));
        }
        outputs.push(*j);
    }
    Ok(outputs)
}

/// Several outputs must have as many positions per example (the product of the axes before
/// the last): the network returns their rows side by side.
///
/// # Errors
/// [`KilnError::Config`] naming `model.outputs` and the two shapes.
fn check_output_positions(
    outputs: &[usize],
    layers: &[LayerSpec],
    shapes: &[Vec<usize>],
) -> Result<()> {
    let positions = |o: usize| positions_of(&shapes[o]);
    let first = outputs[0];
    match outputs.iter().find(|&&o| positions(o) != positions(first)) {
        Some(&o) => Err(KilnError::config(
            "model.outputs",
            format!(
                "outputs \"{}\" {} and \"{}\" {} differ in their positions per example \
                 (all axes but the last); kiln trains several outputs when they have the same \
                 (e.g. two vector heads, or two per-timestep heads of one length)",
                layers[first].name,
                keras_shape(&shapes[first]),
                layers[o].name,
                keras_shape(&shapes[o])
            ),
        )),
        None => Ok(()),
    }
}

/// Removes a layer table's `name` (`key`: `model.layers[i]`).
pub(super) fn take_name(table: &mut toml::Table, key: &str) -> Result<Option<String>> {
    match table.remove("name") {
        Some(toml::Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(KilnError::config(
            format!("{key}.name"),
            format!("must be a string, got {other}"),
        )),
        None => Ok(None),
    }
}

/// Removes a layer table's `inputs` (a name or a list of names).
pub(super) fn take_inputs(table: &mut toml::Table, key: &str) -> Result<Option<Vec<String>>> {
    match table.remove("inputs") {
        None => Ok(None),
        Some(v) => string_list(&v).map(Some).ok_or_else(|| {
            KilnError::config(
                format!("{key}.inputs"),
                format!("must be a layer name or a list of names, got {v}"),
            )
        }),
    }
}

/// A string or an array of strings.
fn string_list(v: &toml::Value) -> Option<Vec<String>> {
    match v {
        toml::Value::String(s) => Some(vec![s.clone()]),
        toml::Value::Array(a) => a.iter().map(|x| x.as_str().map(String::from)).collect(),
        _ => None,
    }
}
