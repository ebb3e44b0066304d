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

/// One layer: its Keras class and arguments. In TOML, `type` names the class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum LayerKind {
    /// `keras.Input(shape)`: the shape of one example, without the batch axis.
    Input {
        /// e.g. `[784]` or `[28, 28, 1]` (height, width, channels).
        shape: Vec<usize>,
    },
    /// Every layer: a [`crate::model::Layer`] declaration (`crate::model::layers`, or a
    /// user's own registered with [`crate::model::register_layer`]). Build one with
    /// `LayerKind::from(layer)`, e.g. `LayerKind::from(Dense::new(10))`.
    #[serde(skip)]
    Declared(DeclaredLayer),
}

impl<L: Layer> From<L> for LayerKind {
    fn from(layer: L) -> LayerKind {
        LayerKind::Declared(DeclaredLayer(std::sync::Arc::new(layer)))
    }
}

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
    class: &str,
) -> Result<LayerKind> {
    bounded_geometry(&table, key, class)?;
    if let Some(reg) = declared {
        table.remove("type");
        return (reg.build)(table.clone())
            .map(|l| LayerKind::Declared(DeclaredLayer(l)))
            .map_err(|m| match refused_argument(&table, reg, &m) {
                Some(arg) => KilnError::config(format!("{key}.{arg}"), format!("{class}: {m}")),
                None => KilnError::config(format!("{key} ({class})"), m),
            });
    }
    toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| {
            KilnError::config(
                format!("{key} ({class})"),
                crate::error::humanize(e.message()),
            )
        })
}

/// The arguments that size windows, strides and paddings, whatever the layer.
const GEOMETRY_ARGUMENTS: [&str; 8] = [
    "kernel_size",
    "strides",
    "dilation_rate",
    "pool_size",
    "size",
    "padding",
    "cropping",
    "output_padding",
];

/// The largest value a geometry argument takes: [`MAX_ELEMENTS`], which no dimension of an
/// activation can exceed anyway. Beyond it the shape arithmetic (`(out - 1) * stride +
/// kernel`, `h + 2 * padding`, `h * size`) could wrap around instead of failing.
const MAX_GEOMETRY_ARGUMENT: i64 = MAX_ELEMENTS as i64;

/// Refuses a [`GEOMETRY_ARGUMENTS`] integer (alone or in nested arrays) over
/// [`MAX_GEOMETRY_ARGUMENT`], under its key.
fn bounded_geometry(table: &toml::Table, key: &str, class: &str) -> Result<()> {
    fn largest(v: &toml::Value) -> i64 {
        match v {
            toml::Value::Integer(i) => *i,
            toml::Value::Array(a) => a.iter().map(largest).max().unwrap_or(0),
            _ => 0,
        }
    }
    for arg in GEOMETRY_ARGUMENTS {
        let Some(v) = table.get(arg) else { continue };
        let big = largest(v);
        if big > MAX_GEOMETRY_ARGUMENT {
            return Err(KilnError::config(
                format!("{key}.{arg}"),
                format!(
                    "{class}: {big} is too large; a size, stride or padding is at most {MAX_GEOMETRY_ARGUMENT} (2^31)"
                ),
            ));
        }
    }
    Ok(())
}

/// The argument whose value made `reg` refuse `table` with the type error or unknown enum
/// value `message` (serde's messages do not name it): the one whose removal lets the layer build, or leaves it
/// missing. `None` for messages that name their argument already (unknown or missing
/// fields, range checks).
fn refused_argument(
    table: &toml::Table,
    reg: super::layer::Registration,
    message: &str,
) -> Option<String> {
    let type_error = ["invalid ", "expected ", "unknown variant "]
        .iter()
        .any(|start| message.starts_with(start));
    if !type_error {
        return None;
    }
    table.keys().find_map(|k| {
        let mut without = table.clone();
        without.remove(k);
        let missing = format!("missing field `{k}`");
        match (reg.build)(without) {
            Ok(_) => Some(k.clone()),
            Err(m) if m.contains(&missing) => Some(k.clone()),
            Err(_) => None,
        }
    })
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
            LayerKind::Declared(l) => l.class_name(),
        }
    }

    /// Keras' automatic name prefix (`conv2d`, `max_pooling2d`, …).
    fn default_prefix(&self) -> String {
        match self {
            LayerKind::Input { .. } => "input_layer".into(),
            LayerKind::Declared(l) => l.name_prefix(),
        }
    }

    /// How many inputs the layer takes: `(least, most)`.
    pub fn arity(&self) -> (usize, usize) {
        match self {
            LayerKind::Input { .. } => (0, 0),
            LayerKind::Declared(l) => l.arity(),
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
        match self {
            LayerKind::Input { shape } => Ok(shape.clone()),
            LayerKind::Declared(l) => {
                refuse_volumes(&**l, inputs)?;
                l.output_shape(inputs)
            }
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
        let LayerKind::Declared(l) = self else {
            return (0, 0);
        };
        l.weights(inputs).iter().fold((0, 0), |(t, f), w| {
            if w.trainable {
                (t + w.size(), f)
            } else {
                (t, f + w.size())
            }
        })
    }

    /// Checks argument ranges (positive sizes, rates in `[0, 1)`), naming the bad argument.
    fn validate(&self) -> std::result::Result<(), String> {
        match self {
            LayerKind::Input { shape } => {
                if shape.is_empty() || shape.len() > 4 || shape.contains(&0) {
                    return Err(format!(
                        "`shape` must have 1 to 4 positive dimensions \
                         (e.g. [784], [28, 28, 1] or [64, 128, 128, 1]), got {shape:?}"
                    ));
                }
                Ok(())
            }
            LayerKind::Declared(l) => l.validate(),
        }
    }
}

/// Most parameters in one layer, and most values per example in one activation: 2^31
/// (8 GiB of float32). Larger sizes are almost always a typo.
pub const MAX_ELEMENTS: u128 = 1 << 31;

/// Refuses a volume input `(depth, height, width, channels)` to a layer that does not take
/// volumes ([`Layer::takes_volumes`]), naming the layer's class.
fn refuse_volumes(l: &dyn Layer, inputs: &[&[usize]]) -> std::result::Result<(), String> {
    match inputs.iter().find(|s| s.len() == 4) {
        Some(shape) if !l.takes_volumes() => Err(format!(
            "{} does not take a 4-D (depth, height, width, channels) volume input, got shape \
             {}; volumes go into Conv3D, MaxPooling3D, AveragePooling3D, \
             GlobalAveragePooling3D, GlobalMaxPooling3D, BatchNormalization, Dropout, Dense and \
             Flatten",
            l.class_name(),
            keras_shape(shape)
        )),
        _ => Ok(()),
    }
}

/// Rejects layers whose parameter count would exceed [`MAX_ELEMENTS`] (computed without
/// overflow, before anything is allocated).
fn check_size(kind: &LayerKind, inputs: &[&[usize]]) -> std::result::Result<(), String> {
    let params: u128 = match kind {
        LayerKind::Input { .. } => 0,
        LayerKind::Declared(l) => l
            .weights(inputs)
            .iter()
            .map(|w| w.shape.iter().map(|&d| d as u128).product::<u128>())
            .sum(),
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
    /// The `k`-th extra tensor (`k >= 1`) of layer `i`: a recurrent layer's final state with
    /// `return_state = true`, named `"name:k"` in `inputs` (Keras' `outputs, h, c = lstm(x)`).
    State(usize, usize),
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
    /// Per layer, the shapes of its extra tensors ([`NodeRef::State`]); mostly empty.
    states: Vec<Vec<Vec<usize>>>,
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
/// use kiln::model::layers::Dense;
/// use kiln::model::{Activation, ModelSpec};
/// let spec = ModelSpec::builder(&[784])
///     .add(Dense::new(10).with_activation(Activation::Softmax))
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
    pub fn add(mut self, kind: impl Into<LayerKind>) -> Self {
        self.layers
            .push((None, kind.into(), LayerOptions::default()));
        self
    }

    /// Appends a layer with an automatic name and its options (Keras'
    /// `Dense(4, kernel_initializer=..., trainable=False)`).
    pub fn add_with(mut self, kind: impl Into<LayerKind>, options: LayerOptions) -> Self {
        self.layers.push((None, kind.into(), options));
        self
    }

    /// Appends a layer with an explicit name.
    pub fn add_named(mut self, name: impl Into<String>, kind: impl Into<LayerKind>) -> Self {
        self.layers
            .push((Some(name.into()), kind.into(), LayerOptions::default()));
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
            kind: LayerKind::from(super::layers::Flatten {}),
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
        let mut states: Vec<Vec<Vec<usize>>> = Vec::new();
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
            if name.is_empty() || name.contains(['/', ' ', ':']) {
                return Err(KilnError::config(
                    format!("model.layers[{i}].name"),
                    format!(
                        "\"{name}\" is not a valid layer name: use letters, digits, '_' or '-' (no '/', which separates layer and weight names, nor ':', which picks one of a layer's tensors)"
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
                None => {
                    let r = previous.expect("entry 0 is an Input");
                    let single = super::states::single_output(r, &layers, &states);
                    vec![single.map_err(|m| KilnError::config(format!("model.layers[{i}]"), m))?]
                }
                Some(names) => names
                    .iter()
                    .map(|n| {
                        super::states::resolve(n, &by_name, &layers, &states)
                            .map_err(|m| KilnError::config(format!("model.layers[{i}].inputs"), m))
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
            let shape_of = |r: &NodeRef| match *r {
                NodeRef::Input(k) => inputs[k].1.as_slice(),
                NodeRef::Layer(j) => shapes[j].as_slice(),
                NodeRef::State(j, k) => states[j][k - 1].as_slice(),
            };
            let in_shapes: Vec<&[usize]> = refs.iter().map(shape_of).collect();
            if let Some(o) = shares {
                let owner_shapes: Vec<&[usize]> = layers[o].inputs.iter().map(shape_of).collect();
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
            states.push(match &kind {
                LayerKind::Declared(l) => l.state_shapes(&in_shapes),
                LayerKind::Input { .. } => Vec::new(),
            });
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
        super::states::check_outputs(&outputs, &layers, &states)?;
        check_output_positions(&outputs, &layers, &shapes)?;
        let spec = ModelSpec {
            inputs,
            layers,
            shapes,
            states,
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
                    NodeRef::Layer(i) | NodeRef::State(i, _) => used[*i] = true,
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
                "unknown key; `[model]` takes `layers`, `outputs` and `weights`",
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
            let type_name = match table.get("type") {
                Some(toml::Value::String(t)) => t.clone(),
                other => {
                    let what = match other {
                        Some(v) => format!("must be a layer type name in quotes, got {v}"),
                        None => "missing".to_string(),
                    };
                    return Err(KilnError::config(
                        format!("{key}.type"),
                        format!("{what}; allowed: {}", known_layer_types().join(", ")),
                    ));
                }
            };
            let declared = super::registry::lookup(&type_name);
            if declared.is_none() && !LAYER_TYPES.contains(&type_name.as_str()) {
                return Err(KilnError::config(
                    format!("{key}.type"),
                    format!(
                        "unknown layer type \"{type_name}\"; allowed: {}",
                        known_layer_types().join(", ")
                    ),
                ));
            }
            if super::registry::is_builtin(&type_name) {
                check_enum_args(&table, &key, &type_name)?;
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
            let kind = parse_kind(table, declared, &key, &type_name)?;
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
            && self.states.iter().all(Vec::is_empty)
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
                        .map(|r| toml::Value::String(self.node_name(*r)))
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

    /// The model with layer `i`'s arguments replaced by `layer` of the same class and output
    /// shape (what `adapt` writes: statistics computed from the training data). Its calls
    /// (shared entries) take the new arguments too.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming the layer when `layer` is another class or changes the
    /// output shape.
    pub fn with_layer_replaced(mut self, i: usize, layer: LayerKind) -> Result<ModelSpec> {
        let at = format!("model.layers[{}]", i + self.inputs.len());
        let shape = layer.output_shape_of(&self.shapes_before(i)).ok();
        let same = layer.class_name() == self.layers[i].kind.class_name()
            && shape.as_ref() == Some(&self.shapes[i]);
        if !same {
            return Err(KilnError::config(
                at,
                "the replacement has another class or output shape",
            ));
        }
        for l in &mut self.layers {
            if l.shares == Some(i) {
                l.kind = layer.clone();
            }
        }
        self.layers[i].kind = layer;
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

    /// The name of an input or layer, as `inputs` writes it (`"lstm:1"` for a state).
    pub fn node_name(&self, r: NodeRef) -> String {
        match r {
            NodeRef::Input(k) => self.inputs[k].0.clone(),
            NodeRef::Layer(j) if self.states[j].is_empty() => self.layers[j].name.clone(),
            NodeRef::Layer(j) => format!("{}:0", self.layers[j].name),
            NodeRef::State(j, k) => format!("{}:{k}", self.layers[j].name),
        }
    }

    /// Shape of an input or of a layer's output or state (no batch axis).
    pub fn node_shape(&self, r: NodeRef) -> &[usize] {
        match r {
            NodeRef::Input(k) => &self.inputs[k].1,
            NodeRef::Layer(j) => &self.shapes[j],
            NodeRef::State(j, k) => &self.states[j][k - 1],
        }
    }

    /// How many extra tensors ([`NodeRef::State`]) layer `i` returns.
    pub fn state_count(&self, i: usize) -> usize {
        self.states[i].len()
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
            .filter(|&i| self.layers[i].kind.class_name() == "BatchNormalization")
            .map(|i| self.shape_after(i).last().copied().unwrap_or(1))
            .collect()
    }

    /// True when the output layer ends in a softmax (its outputs are probabilities).
    pub fn ends_in_softmax(&self) -> bool {
        matches!(
            self.layers.get(self.outputs[0]).map(|l| &l.kind),
            Some(LayerKind::Declared(l)) if l.ends_in_softmax()
        )
    }
}

/// Names the key of a built-in layer's enum-valued argument that is not one of its values
/// (serde's message does not): `activation`, and `padding` given as a string (Conv1D's may
/// also be `causal`).
fn check_enum_args(table: &toml::Table, key: &str, class: &str) -> Result<()> {
    let mut paddings = vec!["valid", "same"];
    if matches!(class, "Conv1D" | "Convolution1D") {
        paddings.push("causal");
    }
    for (arg, allowed) in [("activation", Activation::names()), ("padding", paddings)] {
        let Some(v) = table.get(arg) else { continue };
        let padding_size = arg == "padding" && !v.is_str();
        if !padding_size && !v.as_str().is_some_and(|s| allowed.contains(&s)) {
            return Err(KilnError::config(
                format!("{key}.{arg}"),
                format!("{v} is not allowed; allowed: {}", allowed.join(", ")),
            ));
        }
    }
    Ok(())
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
