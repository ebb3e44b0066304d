//! Layers declared through [`super::layer::Layer`], one file each: the file holds the layer's
//! Keras arguments and defaults, shapes, weights, forward pass and estimate figures. Adding a
//! layer is one file here and one line in `builtin_layers!` below.

/// The [`Layer`] methods of a layer whose `activation` follows an affine map (Dense,
/// Conv2D): a ReLU is fused (its gradient reads the output), other activations keep their
/// input, and a softmax hands its logits to the loss.
macro_rules! affine_activation {
    () => {
        fn keeps_output(&self) -> bool {
            self.activation == Activation::Relu
        }
        fn extra_kept(&self, _: &[&[usize]], output: &[usize]) -> f64 {
            super::activation_extra(self.activation, output)
        }
        fn ends_in_softmax(&self) -> bool {
            self.activation == Activation::Softmax
        }
    };
}

/// Declares the built-in layer files and their types: `file => [Type, ...]` gives `mod file`,
/// `pub use file::Type` and the type's registration in [`registrations`].
macro_rules! builtin_layers {
    ($($file:ident => [$($ty:ident),+]),* $(,)?) => {
        $(mod $file; $(pub use $file::$ty;)+)*

        /// The registrations of the built-in layer types (`super::registry` serves them).
        pub(super) fn registrations() -> Vec<Registration> {
            vec![$($(<$ty as LayerConfig>::registration()),+),*]
        }
    };
}

// One line per layer file.
builtin_layers! {
    dense => [Dense],
    conv2d => [Conv2D],
    pooling2d => [MaxPooling2D, AveragePooling2D],
    flatten => [Flatten],
    dropout => [Dropout],
    batch_normalization => [BatchNormalization],
    activation => [ActivationLayer],
    layer_normalization => [LayerNormalization],
    multi_head_attention => [MultiHeadAttention],
    transformer_encoder => [TransformerEncoder],
    add => [Add],
    average => [Average],
    concatenate => [Concatenate],
    cropping1d => [Cropping1D],
    cropping2d => [Cropping2D],
    embedding => [Embedding],
    global_average_pooling1d => [GlobalAveragePooling1D],
    global_average_pooling2d => [GlobalAveragePooling2D],
    global_max_pooling1d => [GlobalMaxPooling1D],
    global_max_pooling2d => [GlobalMaxPooling2D],
    maximum => [Maximum],
    minimum => [Minimum],
    multiply => [Multiply],
    permute => [Permute],
    position_embedding => [PositionEmbedding],
    repeat_vector => [RepeatVector],
    reshape => [Reshape],
    subtract => [Subtract],
    upsampling1d => [UpSampling1D],
    upsampling2d => [UpSampling2D],
    zero_padding1d => [ZeroPadding1D],
    zero_padding2d => [ZeroPadding2D],
    recurrent => [SimpleRNN, LSTM, GRU],
    bidirectional => [Bidirectional],
    masking => [Masking],
    dot => [Dot],
    time_distributed => [TimeDistributed],
    conv1d => [Conv1D],
    pooling1d => [MaxPooling1D, AveragePooling1D],
    conv_transpose => [Conv1DTranspose, Conv2DTranspose],
    depthwise_conv2d => [DepthwiseConv2D],
    separable_conv2d => [SeparableConv2D],
    relu => [ReLU],
    leaky_relu => [LeakyReLU],
    elu => [ELU],
    prelu => [PReLU],
    softmax => [Softmax],
    rescaling => [Rescaling],
    unit_normalization => [UnitNormalization],
    group_normalization => [GroupNormalization],
    spatial_dropout1d => [SpatialDropout1D],
    spatial_dropout2d => [SpatialDropout2D],
    gaussian_noise => [GaussianNoise],
    gaussian_dropout => [GaussianDropout],
    normalization => [Normalization],
    resizing => [Resizing],
    center_crop => [CenterCrop],
    random_crop => [RandomCrop],
    random_flip => [RandomFlip],
    random_rotation => [RandomRotation],
    random_zoom => [RandomZoom],
    random_translation => [RandomTranslation],
    random_contrast => [RandomContrast],
    random_brightness => [RandomBrightness],
    conv3d => [Conv3D],
    pooling3d => [MaxPooling3D, AveragePooling3D],
    global_average_pooling3d => [GlobalAveragePooling3D],
    global_max_pooling3d => [GlobalMaxPooling3D],
}

// Code the layer files share (not layers).
mod attention;
#[cfg(test)]
mod attention_tests;
pub mod batch_norm_sync;
mod conv;
#[cfg(test)]
mod conv3d_tests;
#[cfg(test)]
mod conv_tests;
mod global_pooling;
mod image_ops;
#[cfg(test)]
mod image_preprocessing_tests;
mod keras_order;
mod merge;
mod noise;
mod pointwise;
mod recurrent_onnx;
#[cfg(test)]
mod recurrent_state_tests;
#[cfg(test)]
mod recurrent_tests;
mod repeat;
#[cfg(test)]
mod shape_tests;
#[cfg(test)]
mod small_layers_tests;
mod tflite_ops;

pub use bidirectional::{MergeMode, Wrapped};
pub use conv::SpatialSize;
pub use conv_transpose::ConvTranspose;
pub use conv1d::Padding1D;
pub use image_ops::{Factor, FillMode, Interpolation};
pub use normalization::OneOrList;
pub use pooling1d::Pooling1D;
pub use pooling2d::Pooling2D;
pub use pooling3d::Pooling3D;
pub use random_flip::FlipAxes;
pub use recurrent::Recurrent;

use super::act::Act;
use super::args::{Activation, Padding, Pair, keras_shape};
use super::layer::{ForwardContext, LayerConfig, Registration};
use crate::onnx::{Layout, OnnxGraph, OnnxValue, float, int};

/// Why a layer that makes a mask (`Embedding(mask_zero)`, `Masking`) has no ONNX form.
const MASK_NOT_EXPORTED: &str = "the mask it makes is not carried by kiln's ONNX export (the \
     exported model would compute as if no step were padding); export with --format safetensors, \
     which kiln serve reads";

/// The end of an affine layer's forward pass (Conv3D, DepthwiseConv2D, Conv2DTranspose,
/// SeparableConv2D without a fused ReLU): `y` rounded to the compute dtype before a
/// non-linear activation, then the activation, unless the network takes the values before a
/// final softmax.
fn activate(y: Act, a: Activation, ctx: ForwardContext) -> Act {
    let y = ctx.round_before(y, a);
    if ctx.before_softmax {
        y
    } else {
        y.activated(a)
    }
}

/// The end of an affine layer whose convolution or product fused a ReLU exactly when
/// `a` is ReLU: `y` as it is then, else [`activate`].
fn finish_affine(y: Act, a: Activation, ctx: ForwardContext) -> Act {
    match a {
        Activation::Relu => y,
        _ => activate(y, a, ctx),
    }
}

/// The end of an affine layer whose kernel already rounded `y` to the compute dtype and fused
/// a ReLU exactly when `a` is ReLU ([`crate::ops::Epilogue`]): the activation, unless it was
/// fused or the network takes the values before a final softmax.
fn finish_rounded(y: Act, a: Activation, ctx: ForwardContext) -> Act {
    match a {
        Activation::Relu => y,
        _ if ctx.before_softmax => y,
        _ => y.activated(a),
    }
}

/// Whether an affine layer whose kernel rounds its output ([`finish_rounded`]) returns values
/// of the compute dtype: when its activation is the identity or the fused ReLU (a ReLU of a
/// 16-bit value is one).
fn rounded_by_kernel(a: Activation) -> bool {
    matches!(a, Activation::Relu | Activation::Linear)
}

/// `[steps, features]` of a rank-2 Keras input, or the message naming `class` and the shape.
fn steps_features(input: &[usize], class: &str) -> Result<[usize; 2], String> {
    match input {
        [s, f] => Ok([*s, *f]),
        _ => Err(format!(
            "{class} expects a 2-D input (steps, features), got shape {}",
            keras_shape(input)
        )),
    }
}

/// `[height, width, channels]` of a rank-3 Keras input, or the message naming `class`.
fn image_shape(input: &[usize], class: &str) -> Result<[usize; 3], String> {
    match input {
        [h, w, c] => Ok([*h, *w, *c]),
        _ => Err(format!(
            "{class} expects a 3-D input (height, width, channels), got shape {}",
            keras_shape(input)
        )),
    }
}

/// `[depth, height, width, channels]` of a rank-4 Keras input, or the message naming `class`.
fn volume_shape(input: &[usize], class: &str) -> Result<[usize; 4], String> {
    match input {
        [d, h, w, c] => Ok([*d, *h, *w, *c]),
        _ => Err(format!(
            "{class} expects a 4-D input (depth, height, width, channels), got shape {}",
            keras_shape(input)
        )),
    }
}

/// A positive size argument.
fn positive(name: &str, v: usize) -> Result<(), String> {
    if v == 0 {
        Err(format!("`{name}` must be positive, got 0"))
    } else {
        Ok(())
    }
}

/// A rate argument in `[0, 1)` (dropout).
fn rate(name: &str, v: f64) -> Result<(), String> {
    if (0.0..1.0).contains(&v) {
        Ok(())
    } else {
        Err(format!("`{name}` must be in [0, 1), got {v}"))
    }
}

/// Whether an `f64` argument is 0 (its default, left out of the written config).
fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// A positive `epsilon`-like argument.
fn positive_epsilon(name: &str, v: f64) -> Result<(), String> {
    if v > 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err(format!(
            "`{name}` must be a positive finite number, got {v}"
        ))
    }
}

fn default_true() -> bool {
    true
}
fn default_one() -> Pair {
    Pair([1, 1])
}
fn default_pool() -> Pair {
    Pair([2, 2])
}

/// Values in a tensor of `shape` (per example).
fn size(shape: &[usize]) -> f64 {
    shape.iter().map(|&d| d as f64).product()
}

/// The largest of `inputs` and `output`, in values per example.
fn largest(inputs: &[&[usize]], output: &[usize]) -> f64 {
    inputs.iter().map(|s| size(s)).fold(size(output), f64::max)
}

/// Output length of a window of `k` with stride `s` over `input` values, or why it does not
/// fit.
fn window(padding: Padding, input: usize, k: usize, s: usize) -> Result<usize, String> {
    padding
        .resolve(input, k, s)
        .map(|(out, _)| out)
        .ok_or_else(|| {
            format!("window {k} is larger than the input ({input}) with padding \"valid\"")
        })
}

/// `[(top, bottom), (left, right)]` padding of a window `k` with stride `s` over `[h, w]`.
fn pads2(
    padding: Padding,
    [h, w]: [usize; 2],
    k: [usize; 2],
    s: [usize; 2],
) -> [(usize, usize); 2] {
    let (_, ph) = padding.resolve(h, k[0], s[0]).expect("shape checked");
    let (_, pw) = padding.resolve(w, k[1], s[1]).expect("shape checked");
    [ph, pw]
}

/// Values per example of the zero-padded copy some layers make of their input first (average
/// pooling with `same` padding, Conv1D's `causal` padding): `dims` (the input's axes before its
/// channels) each grown by its `pads`, times `channels`. Their [`Layer::largest_tensor`] is
/// the larger of this and [`largest`]. In f64: a window far wider than its input makes that
/// copy huge, and `kiln estimate` and the CPU's memory check must see it (a pooling window of
/// 65,536 over a 28x28 image pads it to 65,563 x 65,563).
fn padded_copy(dims: &[usize], pads: &[(usize, usize)], channels: usize) -> f64 {
    let padded: f64 = dims
        .iter()
        .zip(pads)
        .map(|(&d, &(b, e))| d as f64 + b as f64 + e as f64)
        .product();
    padded * channels as f64
}

/// Values an activation after an affine map keeps for backward, per example: none for the
/// identity and a fused ReLU, the pre-activation for sigmoid, tanh and GELU, two tensors for
/// softmax.
fn activation_extra(a: Activation, output: &[usize]) -> f64 {
    match a {
        Activation::Linear | Activation::Relu => 0.0,
        Activation::Softmax => 2.0 * size(output),
        _ => size(output),
    }
}

/// The ONNX nodes of activation `a` on value `x` (laid out as `layout`): `Relu`, `Sigmoid`,
/// `Tanh`, `Elu`, `Selu`, `Softplus`, `Softsign`, `HardSigmoid`, `Exp`, `Softmax` over the
/// feature (channel) axis, swish and mish composed, and exact GELU as `x * 0.5 * (1 + Erf(x /
/// sqrt 2))` (ONNX's `Gelu` needs opset 20).
fn activation_onnx(
    g: &mut OnnxGraph,
    layer: &str,
    x: String,
    a: Activation,
    layout: Layout,
) -> String {
    match a {
        Activation::Linear => x,
        Activation::Relu => g.node(layer, "Relu", &[&x], vec![]),
        Activation::Sigmoid => g.node(layer, "Sigmoid", &[&x], vec![]),
        Activation::Tanh => g.node(layer, "Tanh", &[&x], vec![]),
        Activation::Softmax => g.node(
            layer,
            "Softmax",
            &[&x],
            vec![int("axis", layout.feature_axis())],
        ),
        Activation::Swish => {
            let s = g.node(layer, "Sigmoid", &[&x], vec![]);
            g.node(layer, "Mul", &[&x, &s], vec![])
        }
        Activation::Elu => g.node(layer, "Elu", &[&x], vec![float("alpha", 1.0)]),
        // ONNX's default alpha and gamma are SELU's constants.
        Activation::Selu => g.node(layer, "Selu", &[&x], vec![]),
        Activation::Softplus => g.node(layer, "Softplus", &[&x], vec![]),
        Activation::Softsign => g.node(layer, "Softsign", &[&x], vec![]),
        Activation::HardSigmoid => {
            let attrs = vec![float("alpha", 1.0 / 6.0), float("beta", 0.5)];
            g.node(layer, "HardSigmoid", &[&x], attrs)
        }
        // ONNX's `Mish` needs opset 18: x * tanh(softplus(x)).
        Activation::Mish => {
            let sp = g.node(layer, "Softplus", &[&x], vec![]);
            let t = g.node(layer, "Tanh", &[&sp], vec![]);
            g.node(layer, "Mul", &[&x, &t], vec![])
        }
        Activation::Exponential => g.node(layer, "Exp", &[&x], vec![]),
        Activation::Gelu => {
            let sqrt2 = g.scalar(layer, std::f32::consts::SQRT_2);
            let one = g.scalar(layer, 1.0);
            let half = g.scalar(layer, 0.5);
            let d = g.node(layer, "Div", &[&x, &sqrt2], vec![]);
            let e = g.node(layer, "Erf", &[&d], vec![]);
            let p = g.node(layer, "Add", &[&e, &one], vec![]);
            let m = g.node(layer, "Mul", &[&x, &p], vec![]);
            g.node(layer, "Mul", &[&m, &half], vec![])
        }
    }
}

/// Runs `f` on `x` in channels-last order when `x` is an NCHW image or an NCDHW volume (a map
/// over the last axis), in an ONNX graph.
fn channels_last(
    g: &mut OnnxGraph,
    layer: &str,
    x: &OnnxValue,
    f: impl FnOnce(&mut OnnxGraph, &str) -> Result<String, String>,
) -> Result<String, String> {
    let layout = x.layout();
    let (Some(to), Some(back)) = (layout.to_channels_last(), layout.from_channels_last()) else {
        return f(g, &x.name);
    };
    let t = g.transpose(layer, &x.name, to);
    let y = f(g, &t)?;
    Ok(g.transpose(layer, &y, back))
}
