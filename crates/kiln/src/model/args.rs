//! The argument types Keras layers share: activations, padding modes, `[h, w]` pairs and 2-D
//! paddings as TOML accepts them, and Keras' way of printing shapes. The bottom of `model`:
//! it imports nothing from it.

use serde::{Deserialize, Serialize};

/// Element-wise activations (Keras' `activation=` names, `keras/src/activations/
/// activations.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// Identity (Keras' default, `activation=None`).
    #[default]
    Linear,
    /// `max(x, 0)`.
    Relu,
    /// Gaussian error linear unit, exact (erf) form as Keras' `gelu(approximate=False)`.
    Gelu,
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// Hyperbolic tangent.
    Tanh,
    /// Softmax over the last axis.
    Softmax,
    /// `x * sigmoid(x)` (Keras' `silu`, also named `swish`).
    #[serde(alias = "silu")]
    Swish,
    /// `x` for `x > 0`, `exp(x) - 1` otherwise (`alpha = 1`).
    Elu,
    /// `scale * elu(x, alpha)` with Klambauer et al.'s `alpha ≈ 1.6733`, `scale ≈ 1.0507`.
    Selu,
    /// `log(1 + exp(x))`.
    Softplus,
    /// `x / (1 + |x|)`.
    Softsign,
    /// Keras 3's `relu6(x + 3) / 6`: 0 below -3, 1 above 3, linear between.
    #[serde(rename = "hard_sigmoid")]
    HardSigmoid,
    /// `x * tanh(softplus(x))`.
    Mish,
    /// `exp(x)`.
    Exponential,
}

impl Activation {
    /// Every activation, in declaration order.
    pub const ALL: [Activation; 14] = [
        Activation::Linear,
        Activation::Relu,
        Activation::Gelu,
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::Softmax,
        Activation::Swish,
        Activation::Elu,
        Activation::Selu,
        Activation::Softplus,
        Activation::Softsign,
        Activation::HardSigmoid,
        Activation::Mish,
        Activation::Exponential,
    ];

    /// The Keras name.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Linear => "linear",
            Activation::Relu => "relu",
            Activation::Gelu => "gelu",
            Activation::Sigmoid => "sigmoid",
            Activation::Tanh => "tanh",
            Activation::Softmax => "softmax",
            Activation::Swish => "swish",
            Activation::Elu => "elu",
            Activation::Selu => "selu",
            Activation::Softplus => "softplus",
            Activation::Softsign => "softsign",
            Activation::HardSigmoid => "hard_sigmoid",
            Activation::Mish => "mish",
            Activation::Exponential => "exponential",
        }
    }

    /// Every name a config may use: [`Activation::name`]s and the alias `silu`.
    pub fn names() -> Vec<&'static str> {
        let mut names: Vec<&str> = Activation::ALL.iter().map(|a| a.name()).collect();
        names.push("silu");
        names
    }
}

/// One of `choices` by its name, in any case (Keras lowercases `padding`), or an error that
/// lists the names and shows what was given (`padding = 3`).
pub(crate) fn one_of<'de, D: serde::Deserializer<'de>, T: Copy>(
    d: D,
    choices: &[(&str, T)],
) -> std::result::Result<T, D::Error> {
    let value = toml::Value::deserialize(d)?;
    let name = value.as_str().map(str::to_ascii_lowercase);
    if let Some((_, t)) = choices.iter().find(|(c, _)| Some(*c) == name.as_deref()) {
        return Ok(*t);
    }
    let names: Vec<String> = choices.iter().map(|(c, _)| format!("\"{c}\"")).collect();
    Err(serde::de::Error::custom(format!(
        "expected {}, got {value}",
        names.join(" or ")
    )))
}

/// Convolution and pooling padding, as Keras' `padding=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Padding {
    /// No padding: `out = floor((in - k) / s) + 1`.
    #[default]
    Valid,
    /// Zero padding so that `out = ceil(in / s)`; the extra row/column goes at the end
    /// (bottom/right), as TensorFlow does.
    Same,
}

impl<'de> Deserialize<'de> for Padding {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        one_of(d, &[("valid", Padding::Valid), ("same", Padding::Same)])
    }
}

impl Padding {
    /// Output length and `(begin, end)` padding along one axis of length `input` for a window of
    /// `kernel` with stride `stride` (TensorFlow's `GetWindowedOutputSize`).
    pub fn resolve(
        self,
        input: usize,
        kernel: usize,
        stride: usize,
    ) -> Option<(usize, (usize, usize))> {
        match self {
            Padding::Valid => (input >= kernel).then(|| ((input - kernel) / stride + 1, (0, 0))),
            Padding::Same => {
                let out = input.div_ceil(stride);
                let total = ((out - 1) * stride + kernel).saturating_sub(input);
                Some((out, (total / 2, total - total / 2)))
            }
        }
    }
}

/// An integer or a 1-tuple (TOML `[2]`), as Keras' 1-D layers accept for `kernel_size`,
/// `strides`, `pool_size` and `dilation_rate` (`MaxPooling1D(pool_size=(2,))`). Use with
/// `#[serde(deserialize_with = "int_or_one")]`.
pub fn int_or_one<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<usize, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Int(usize),
        One([usize; 1]),
    }
    let value = toml::Value::deserialize(d)?;
    match Raw::deserialize(value) {
        Ok(Raw::Int(v) | Raw::One([v])) => Ok(v),
        Err(_) => Err(serde::de::Error::custom(
            "expected a positive integer or a 1-tuple such as `[2]`",
        )),
    }
}

/// [`int_or_one`] for an optional argument.
pub fn opt_int_or_one<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<usize>, D::Error> {
    int_or_one(d).map(Some)
}

/// An integer or a `[height, width]` pair, as Keras accepts for `kernel_size`, `strides`,
/// `pool_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair(pub [usize; 2]);

impl Serialize for Pair {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Pair {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            One(usize),
            Two([usize; 2]),
        }
        // Through a TOML value first, so that a missing argument is serde's "missing field".
        let value = toml::Value::deserialize(d)?;
        match Raw::deserialize(value) {
            Ok(Raw::One(v)) => Ok(Pair([v, v])),
            Ok(Raw::Two(v)) => Ok(Pair(v)),
            Err(_) => Err(serde::de::Error::custom(
                "expected a positive integer or a [height, width] pair of integers",
            )),
        }
    }
}

/// An integer or a `[depth, height, width]` triple, as Keras accepts for the 3-D layers'
/// `kernel_size`, `strides`, `pool_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Triple(pub [usize; 3]);

impl Serialize for Triple {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Triple {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        // Through a TOML value first, so that a missing argument is serde's "missing field".
        let value = toml::Value::deserialize(d)?;
        let sizes = match value {
            toml::Value::Integer(v) => usize::try_from(v).ok().map(|v| [v; 3]),
            other => Vec::<usize>::deserialize(other)
                .ok()
                .and_then(|v| v.try_into().ok()),
        };
        sizes.map(Triple).ok_or_else(|| {
            serde::de::Error::custom(
                "expected a positive integer or a [depth, height, width] triple of integers",
            )
        })
    }
}

/// `[[top, bottom], [left, right]]` zero padding; TOML accepts an integer, `[rows, cols]` or the
/// full form, as Keras' `ZeroPadding2D(padding=)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pads2(pub [[usize; 2]; 2]);

impl Serialize for Pads2 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Pads2 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            One(usize),
            Two([usize; 2]),
            Four([[usize; 2]; 2]),
        }
        // Through a TOML value first, so that a missing argument is serde's "missing field".
        let value = toml::Value::deserialize(d)?;
        match Raw::deserialize(value) {
            Ok(Raw::One(v)) => Ok(Pads2([[v, v], [v, v]])),
            Ok(Raw::Two([h, w])) => Ok(Pads2([[h, h], [w, w]])),
            Ok(Raw::Four(v)) => Ok(Pads2(v)),
            Err(_) => Err(serde::de::Error::custom(
                "expected an integer, [rows, cols] or [[top, bottom], [left, right]]",
            )),
        }
    }
}

/// Positions per example of an output of `shape` (no batch axis): the product of its axes but
/// the last (1 for a vector, `steps` for `(steps, classes)`, `h * w` for `(h, w, classes)`).
/// Losses and metrics see one row per position.
pub fn positions_of(shape: &[usize]) -> usize {
    shape[..shape.len().saturating_sub(1)].iter().product()
}

/// Formats a shape as Keras prints it: `(None, 28, 28, 1)`.
pub fn keras_shape(shape: &[usize]) -> String {
    let mut s = String::from("(None");
    for d in shape {
        s.push_str(&format!(", {d}"));
    }
    s.push(')');
    s
}
