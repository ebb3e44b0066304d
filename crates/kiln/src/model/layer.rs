//! One declaration per layer: the [`Layer`] trait that a layer type implements once (built in
//! or a user's own), and the registry that maps Keras class names (and aliases) to it.
//!
//! A layer type is one Rust type holding its Keras arguments (its config: serde, Keras' names
//! and defaults). From that one declaration kiln gets
//! - the TOML form (`{ type = "Embedding", input_dim = 1000, output_dim = 64 }`) through the
//!   registry (`super::registry`), and the Rust builder form (`LayerKind::from(..)`);
//! - the output shape ([`Layer::output_shape`], Keras shapes without the batch axis), the
//!   weights with their Keras names, shapes, initializers and trainability ([`Layer::weights`]),
//!   hence `summary()`, parameter counts, weights files and checkpoints;
//! - the forward pass on Burn tensors ([`Layer::forward`]);
//! - what `kiln estimate` needs ([`Layer::saves_input`], [`Layer::extra_kept`],
//!   [`Layer::flops`]) and its part of an ONNX graph ([`Layer::onnx`], or why it has none).
//!
//! This follows Burn's `Config -> init -> Module` (`burn-nn/src/modules/linear.rs`): the config
//! is the layer value itself, `init` is [`Layer::weights`] (kiln owns the storage so that every
//! layer's weights are saved, loaded, averaged across replicas and rounded under a precision
//! policy alike), and the module's `forward` is [`Layer::forward`].
//!
//! # Storage
//! A weight of rank 2 is stored as a `[rows, cols]` parameter in the layer's `kernels`, any
//! other rank flattened in its `vectors` (in the order [`Layer::weights`] lists them), always in
//! Keras' layout: [`Weights::get`] hands it back with its Keras shape.

use std::fmt::Debug;
use std::sync::Arc;

use burn::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::act::Act;
use super::params::LayerParams;
pub use super::params::{Field, Storage, WeightInit, WeightSpec};
use crate::onnx::{OnnxGraph, OnnxValue};
use crate::tflite::{TfliteGraph, TfliteValue};

/// What a forward pass knows besides the inputs.
#[derive(Debug, Clone, Copy)]
pub struct ForwardContext {
    /// Training (Dropout drops, batch statistics are used) rather than inference.
    pub training: bool,
    /// The layer's `trainable` option: a frozen BatchNormalization normalizes with its moving
    /// statistics even while training, as in Keras 3.
    pub trainable: bool,
    /// The 16-bit type the layer computes in under a mixed-precision policy (`None`: float32);
    /// a layer whose activation follows an affine map rounds the map's output to it first,
    /// as Keras computes in the compute dtype.
    pub compute: Option<burn::tensor::FloatDType>,
    /// Return the values before a final softmax ([`Layer::ends_in_softmax`]): the layer is a
    /// model output whose loss uses the logits, and kiln applies the softmax itself.
    pub before_softmax: bool,
}

impl ForwardContext {
    /// A context for a float32 layer that trains: `training` as given.
    pub fn new(training: bool) -> ForwardContext {
        ForwardContext {
            training,
            trainable: true,
            compute: None,
            before_softmax: false,
        }
    }

    /// `x` rounded to the compute dtype when the layer computes in 16 bits and `activation`
    /// is not the identity (what a non-linear activation after an affine map sees).
    pub fn round_before(&self, x: Act, activation: super::args::Activation) -> Act {
        match self.compute {
            Some(dt) if activation != super::args::Activation::Linear => {
                super::round::round_act(x, dt)
            }
            _ => x,
        }
    }
}

/// A layer's weights during a forward pass, by the names its [`Layer::weights`] gave.
pub struct Weights<'a> {
    pub(crate) specs: Vec<WeightSpec>,
    /// Where each of `specs` is held (computed once per call, not per `get`).
    slots: Vec<super::params::Slot>,
    pub(crate) params: &'a LayerParams,
    pub(crate) updates: std::cell::RefCell<Vec<(String, Tensor<1>)>>,
    /// Values assigned by earlier calls of the same (shared) layer in this pass: a later call
    /// reads them, as Keras' calls run their assignments in order.
    pub(crate) earlier: Vec<(String, Tensor<1>)>,
}

impl<'a> Weights<'a> {
    pub(crate) fn new(specs: Vec<WeightSpec>, params: &'a LayerParams) -> Self {
        Weights {
            slots: super::params::slots(&specs),
            specs,
            params,
            updates: std::cell::RefCell::new(Vec::new()),
            earlier: Vec::new(),
        }
    }

    /// The weight `name` with its Keras shape and layout, as a rank-`D` tensor tracked by
    /// autodiff.
    ///
    /// # Panics
    /// When the layer declared no weight `name` or declared it with another rank: a defect
    /// of the layer's code, not of user input.
    pub fn get<const D: usize>(&self, name: &str) -> Tensor<D> {
        let (spec, _) = self.find(name);
        assert_eq!(
            spec.shape.len(),
            D,
            "weight `{name}` has rank {}",
            spec.shape.len()
        );
        let shape: [usize; D] = spec.shape.clone().try_into().expect("rank checked");
        self.get_flat(name).reshape(shape)
    }

    /// The weight `name` flattened in Keras' row-major layout (panics as [`Weights::get`]).
    pub fn get_flat(&self, name: &str) -> Tensor<1> {
        let (spec, slot) = self.find(name);
        if let Some((_, v)) = self.earlier.iter().rev().find(|(n, _)| n == name) {
            return v.clone();
        }
        self.params.keras_flat(slot, spec)
    }

    fn find(&self, name: &str) -> (&WeightSpec, super::params::Slot) {
        self.specs
            .iter()
            .zip(&self.slots)
            .find(|(s, _)| s.name == name)
            .map(|(s, slot)| (s, *slot))
            .unwrap_or_else(|| panic!("the layer declared no weight `{name}`"))
    }

    /// Whether the layer has a weight `name` (e.g. a `bias` with `use_bias = true`).
    pub fn has(&self, name: &str) -> bool {
        self.specs.iter().any(|s| s.name == name)
    }

    /// Gives the non-trainable weight `name` (a moving statistic) the value `value` (flat, in
    /// Keras' layout) after the step: Keras' `variable.assign` inside `call`. Replicas and
    /// micro-batches average their assignments.
    pub fn assign(&self, name: &str, value: Tensor<1>) {
        self.updates
            .borrow_mut()
            .push((name.to_string(), value.detach()));
    }
}

/// The compute figure of a layer without a better one (pipeline balancing's rule): two
/// operations per trainable parameter and output position, or one per output value for a
/// layer without trainable parameters.
pub fn default_flops(trainable: usize, output: &[usize]) -> f64 {
    let elements: f64 = output.iter().map(|&d| d as f64).product();
    if trainable == 0 {
        return elements;
    }
    let features = output.last().copied().unwrap_or(1).max(1) as f64;
    2.0 * trainable as f64 * elements / features
}

/// A layer type: its Keras arguments are the value itself. Implement it for your own layer
/// and register it ([`crate::model::register_layer`]) to use it by `type` name in a TOML config, or add it with
/// `LayerKind::from(layer)` in Rust. See `examples/custom-layer` for a complete one.
///
/// Shapes are Keras shapes without the batch axis: `(features,)`, `(steps, features)`,
/// `(height, width, channels)`. In [`Layer::forward`] the batches are [`Act`]s: `[batch,
/// features]`, `[batch, steps, features]`, or images as `[batch, channels, height, width]`
/// (use [`Act::into_keras_image`] and [`Act::from_keras_image`] for NHWC).
pub trait Layer: Debug + Send + Sync + 'static {
    /// Keras' class name (`"Embedding"`), the `type` in TOML.
    fn class_name(&self) -> &'static str;

    /// The arguments as a TOML table (without `type`, `name`, `inputs`), written to the run
    /// directory's config. For a serde type: `kiln::model::config_table(self)`.
    fn config(&self) -> toml::Table;

    /// Keras' automatic name prefix (`embedding`, `embedding_1`, ...): the class name in
    /// snake_case.
    fn name_prefix(&self) -> String {
        snake_case(self.class_name())
    }

    /// How many inputs the layer takes: `(least, most)`.
    fn arity(&self) -> (usize, usize) {
        (1, 1)
    }

    /// The output shape for `inputs` (one per inbound layer), or why the layer cannot take
    /// them (one line; kiln adds the layer's name and config key).
    fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String>;

    /// The weights for `inputs`, in storage order.
    fn weights(&self, inputs: &[&[usize]]) -> Vec<WeightSpec> {
        let _ = inputs;
        Vec::new()
    }

    /// The first values of `weight` (one of [`Layer::weights`]) when the layer's config fixes
    /// them, in Keras' layout: an adapted `Normalization`'s statistics, so that checkpoints and
    /// exports carry them. `None` (the default) draws them from the weight's initializer.
    fn fixed_values(&self, weight: &WeightSpec) -> Option<Vec<f32>> {
        let _ = weight;
        None
    }

    /// Runs the layer on a batch (`inputs` in call order).
    fn forward(&self, inputs: Vec<Act>, weights: &Weights, ctx: ForwardContext) -> Act;

    /// Runs the layer with the masks of its inputs (`[batch, steps]`, 1 keeps a step; `None`
    /// where an input has none): Keras' `call(inputs, mask=...)`. Layers that read a mask
    /// (recurrent layers, `GlobalAveragePooling1D`) override it; by default the masks are
    /// ignored and [`Layer::forward`] runs.
    fn forward_masked(
        &self,
        inputs: Vec<Act>,
        masks: &[Option<Tensor<2>>],
        weights: &Weights,
        ctx: ForwardContext,
    ) -> Act {
        let _ = masks;
        self.forward(inputs, weights, ctx)
    }

    /// The shapes of the tensors it returns after its output (Keras' `return_state`: a
    /// recurrent layer's final states), which later layers take as `"name:1"`, `"name:2"`, ...;
    /// none by default.
    fn state_shapes(&self, inputs: &[&[usize]]) -> Vec<Vec<usize>> {
        let _ = inputs;
        Vec::new()
    }

    /// Runs the layer and returns its output and the tensors of [`Layer::state_shapes`], in
    /// that order. By default [`Layer::forward_masked`] and no states.
    fn forward_states(
        &self,
        inputs: Vec<Act>,
        masks: &[Option<Tensor<2>>],
        weights: &Weights,
        ctx: ForwardContext,
    ) -> (Act, Vec<Act>) {
        (self.forward_masked(inputs, masks, weights, ctx), Vec::new())
    }

    /// Whether the layer passes a mask on (Keras' `supports_masking`): with the default
    /// [`Layer::compute_mask`], its output carries its first input's mask.
    fn supports_masking(&self) -> bool {
        false
    }

    /// The mask of its output (Keras' `compute_mask(inputs, previous_mask)`), from its inputs
    /// (before [`Layer::forward_masked`] runs) and their masks: by default the first input's
    /// mask when [`Layer::supports_masking`], else none (Keras drops the mask).
    fn compute_mask(&self, inputs: &[&Act], masks: &[Option<Tensor<2>>]) -> Option<Tensor<2>> {
        let _ = inputs;
        match self.supports_masking() {
            true => masks.first().cloned().flatten(),
            false => None,
        }
    }

    /// Whether its backward pass keeps its (first) input's values (for `kiln estimate`);
    /// true unless the gradient needs only shapes (padding, cropping, sums, lookups).
    fn saves_input(&self) -> bool {
        true
    }

    /// Whether its backward pass keeps its own output's values (a fused ReLU's gradient reads
    /// them), for `kiln estimate`.
    fn keeps_output(&self) -> bool {
        false
    }

    /// Values per example the layer keeps for backward besides its input and output (a
    /// dropout mask, a pre-activation, attention scores), for `kiln estimate`.
    fn extra_kept(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        let _ = (inputs, output);
        0.0
    }

    /// [`Layer::extra_kept`] on the CPU, where kiln runs some layers as fused operations that
    /// keep less (attention, LayerNormalization); the same by default.
    fn extra_kept_cpu(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        self.extra_kept(inputs, output)
    }

    /// The largest single tensor the layer creates, in values per example (its gradient is
    /// what the backward pass holds at once on top of the kept tensors); by default the
    /// largest of its inputs and output.
    fn largest_tensor(&self, inputs: &[&[usize]], output: &[usize]) -> f64 {
        let size = |s: &[usize]| s.iter().map(|&d| d as f64).product::<f64>();
        inputs.iter().map(|s| size(s)).fold(size(output), f64::max)
    }

    /// Whether its output ends in a softmax over the features: a model output of such a layer
    /// gives the loss its logits (see [`ForwardContext::before_softmax`]), and under a
    /// mixed-precision policy its output stays float32, as Keras keeps softmax outputs.
    fn ends_in_softmax(&self) -> bool {
        false
    }

    /// Whether its forward works on inputs and weights held in a 16-bit type (every tensor it
    /// makes itself takes its input's dtype, and it reads no float32 mask or statistic):
    /// under a mixed-precision policy on a device with 16-bit arithmetic
    /// ([`crate::precision::computes_natively`]) such a layer then computes in that type for
    /// real. Layers that do not get float32 inputs holding 16-bit values, as everywhere else
    /// (`crate::precision`). A layer ending in a softmax never does (Keras keeps softmax in
    /// float32).
    fn computes_in_half(&self) -> bool {
        false
    }

    /// Whether its output values are values of its input, moved or dropped but not computed
    /// (Flatten, MaxPooling2D, crops, a ReLU): under a mixed-precision policy they are not
    /// rounded again.
    fn passes_values(&self) -> bool {
        false
    }

    /// Whether, under a mixed-precision policy, its forward returns values already rounded to
    /// the compute dtype ([`ForwardContext::compute`]; Dense and the convolutions round in
    /// their kernel's epilogue, [`crate::ops::Epilogue`]): the network does not round them
    /// again.
    fn rounds_output(&self) -> bool {
        false
    }

    /// Whether the layer takes volumes, Keras inputs `(depth, height, width, channels)`
    /// ([`Act::Volume`] in [`Layer::forward`]). Layers that do not are refused such an input
    /// before [`Layer::output_shape`] is asked.
    fn takes_volumes(&self) -> bool {
        false
    }

    /// Checks the arguments' ranges (positive sizes, rates in `[0, 1)`); the message names the
    /// argument. Called for TOML configs and the Rust builder alike.
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }

    /// Floating-point operations per example of the forward pass (for `kiln estimate` and
    /// pipeline balancing); `trainable` is the layer's trainable parameter count.
    fn flops(&self, inputs: &[&[usize]], output: &[usize], trainable: usize) -> f64 {
        let _ = inputs;
        default_flops(trainable, output)
    }

    /// Writes the layer's inference pass into the ONNX graph `g` and returns the name of its
    /// output value. `inputs` are its inputs in call order (values laid out as in
    /// [`Layer::forward`]: images NCHW, see [`crate::onnx::Layout`]); `name` is the layer's
    /// name, its weights are `<name>/<weight name>` in `g` ([`OnnxGraph::weight`]). The output's
    /// layout is the one of the layer's output shape. The default says the layer has no
    /// mapping ([`Layer::onnx_unsupported`]).
    ///
    /// # Errors
    /// Why the layer cannot be exported (kiln's ONNX export names the layer and its class).
    fn onnx(&self, g: &mut OnnxGraph, inputs: &[OnnxValue], name: &str) -> Result<String, String> {
        let _ = (g, inputs, name);
        Err(self.onnx_unsupported())
    }

    /// Adds the layer to a TensorFlow Lite graph as TFLite builtin operators, at inference (no
    /// dropout, moving statistics): `inputs` are its input values (NHWC, Keras shapes), `name`
    /// the layer's name, its weights `<name>/<weight name>` in `g` ([`TfliteGraph::weight`]).
    /// The default says the layer has no mapping.
    ///
    /// # Errors
    /// Why the layer cannot be exported (kiln's export names the layer and its class).
    fn tflite(
        &self,
        g: &mut TfliteGraph,
        inputs: &[TfliteValue],
        name: &str,
    ) -> Result<TfliteValue, String> {
        let _ = (g, inputs, name);
        Err("it has no TensorFlow Lite mapping yet; export it with --format onnx or keras".into())
    }

    /// Why the layer has no ONNX mapping (kiln's ONNX export names the layer, its class and
    /// this reason).
    fn onnx_unsupported(&self) -> String {
        "it has no ONNX mapping (a layer gets one by implementing `Layer::onnx`); export with \
         --format safetensors, which kiln serve reads"
            .into()
    }
}

/// `EinsumDense` -> `einsum_dense`, `Conv2D` -> `conv2d` (Keras' `to_snake_case`: an
/// underscore before each capitalized word that follows a character, then between a lowercase
/// and an uppercase letter, then lowercase).
pub fn snake_case(class: &str) -> String {
    let c: Vec<char> = class
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    // re.sub("(.)([A-Z][a-z]+)", r"\1_\2"): non-overlapping matches, left to right.
    let mut words = Vec::with_capacity(c.len() + 4);
    let mut i = 0;
    while i < c.len() {
        words.push(c[i]);
        let capitalized = |k: usize| {
            c.get(k).is_some_and(|x| x.is_ascii_uppercase())
                && c.get(k + 1).is_some_and(|x| x.is_ascii_lowercase())
        };
        if capitalized(i + 1) {
            words.push('_');
            let mut k = i + 1;
            words.push(c[k]);
            k += 1;
            while c.get(k).is_some_and(|x| x.is_ascii_lowercase()) {
                words.push(c[k]);
                k += 1;
            }
            i = k;
        } else {
            i += 1;
        }
    }
    // re.sub("([a-z])([A-Z])", r"\1_\2"), then lower().
    let mut out = String::with_capacity(words.len() + 4);
    let mut k = 0;
    while k < words.len() {
        out.extend(words[k].to_lowercase());
        if words[k].is_ascii_lowercase() && words.get(k + 1).is_some_and(|x| x.is_ascii_uppercase())
        {
            out.push('_');
            out.extend(words[k + 1].to_lowercase());
            k += 2;
        } else {
            k += 1;
        }
    }
    out
}

/// The TOML table type of [`Layer::config`] (so that [`crate::serde_layer`] works in crates
/// that do not depend on `toml` themselves).
pub type ConfigTable = toml::Table;

/// Writes the two [`Layer`] methods that every serde layer type writes alike, inside its
/// `impl Layer`: `class_name` (its [`LayerConfig::CLASS_NAME`]) and `config` (its fields,
/// through serde).
///
/// ```ignore
/// impl Layer for Add {
///     kiln::serde_layer!();
///     fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> { ... }
///     ...
/// }
/// ```
#[macro_export]
macro_rules! serde_layer {
    () => {
        fn class_name(&self) -> &'static str {
            <Self as $crate::model::LayerConfig>::CLASS_NAME
        }
        fn config(&self) -> $crate::model::layer::ConfigTable {
            $crate::model::config_table(self)
        }
    };
}

/// A serde value's fields as a TOML table (for [`Layer::config`]).
pub fn config_table<T: Serialize>(value: &T) -> toml::Table {
    match toml::Value::try_from(value) {
        Ok(toml::Value::Table(t)) => t,
        _ => toml::Table::new(),
    }
}

/// A layer value behind a shared pointer: the `LayerKind::Declared` case.
#[derive(Clone)]
pub struct DeclaredLayer(pub Arc<dyn Layer>);

impl Debug for DeclaredLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for DeclaredLayer {
    fn eq(&self, other: &Self) -> bool {
        self.0.class_name() == other.0.class_name() && self.0.config() == other.0.config()
    }
}

impl std::ops::Deref for DeclaredLayer {
    type Target = dyn Layer;
    fn deref(&self) -> &dyn Layer {
        self.0.as_ref()
    }
}

/// Builds a layer from its TOML arguments (`type`, `name`, `inputs`, `dtype` removed), or says
/// what is wrong with them (one line; kiln names the config key).
pub type BuildFn = fn(toml::Table) -> Result<Arc<dyn Layer>, String>;

/// One registered layer type.
#[derive(Clone, Copy)]
pub struct Registration {
    /// Keras' class name.
    pub class_name: &'static str,
    /// Other names TOML accepts (Keras' aliases such as `MaxPool2D`).
    pub aliases: &'static [&'static str],
    /// Reads the arguments.
    pub build: BuildFn,
}

/// A layer config that validates itself after deserializing (ranges, positivity).
pub trait LayerConfig: Layer + DeserializeOwned + Sized {
    /// Keras' class name.
    const CLASS_NAME: &'static str;
    /// Other accepted names.
    const ALIASES: &'static [&'static str] = &[];

    /// The registration of this type.
    fn registration() -> Registration {
        Registration {
            class_name: Self::CLASS_NAME,
            aliases: Self::ALIASES,
            build: build_from_toml::<Self>,
        }
    }
}

/// [`BuildFn`] of a serde layer type: unknown or misspelt arguments are errors when the type
/// says `#[serde(deny_unknown_fields)]`.
pub fn build_from_toml<L: LayerConfig>(table: toml::Table) -> Result<Arc<dyn Layer>, String> {
    let layer: L = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| crate::error::humanize(e.message()))?;
    Layer::validate(&layer)?;
    Ok(Arc::new(layer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case_matches_keras_automatic_names() {
        for (class, name) in [
            ("Dense", "dense"),
            ("Conv2D", "conv2d"),
            ("GlobalAveragePooling2D", "global_average_pooling2d"),
            ("ZeroPadding2D", "zero_padding2d"),
            ("Cropping1D", "cropping1d"),
            ("PositionEmbedding", "position_embedding"),
            ("MultiHeadAttention", "multi_head_attention"),
            ("Antirectifier", "antirectifier"),
            ("Concatenate", "concatenate"),
            ("ABCDef", "abc_def"),
            ("EinsumDense", "einsum_dense"),
            ("Conv2DTranspose", "conv2d_transpose"),
            ("LSTM", "lstm"),
            ("GRUCell", "gru_cell"),
        ] {
            assert_eq!(snake_case(class), name, "{class}");
        }
    }
}
