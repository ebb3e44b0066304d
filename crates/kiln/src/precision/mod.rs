//! Mixed precision: Keras' dtype policies and its `LossScaleOptimizer`.
//!
//! A [`Precision`] is Keras' global dtype policy (`keras.mixed_precision.set_global_policy`,
//! `keras/src/dtype_policies/dtype_policy.py`): `float32`, `mixed_float16` or
//! `mixed_bfloat16`. Under a mixed policy the *variables* (weights, optimizer state,
//! BatchNormalization's moving statistics) stay float32 and each layer *computes* in the
//! policy's 16-bit type; softmax, the loss and BatchNormalization's statistics stay float32. A
//! layer may override the policy (Keras' `Dense(10, dtype="float32")`, kiln's per-layer
//! `dtype` key, [`crate::model::ModelSpec::with_layer_dtype`]).
//!
//! How kiln computes "in float16" ([`round`]): every layer's inputs, the compute copy of its
//! weights and its outputs are rounded to the 16-bit type (a cast there and back, which Burn's
//! autodiff differentiates as a cast of the gradient), so values and gradients take only
//! 16-bit values (overflow to ±Inf above 65504 and underflow below 6e-8 in float16, 8 bits
//! of mantissa in bfloat16), while the arithmetic inside a layer runs on kiln's float32
//! kernels, as tensor cores accumulate float16 products in float32. This gives mixed
//! precision's numerics (and needs loss scaling exactly when the real thing does) on every
//! backend, at some cost in speed instead of a gain; see `docs/precision.md` for why.
//!
//! On a GPU whose backend has arithmetic in the 16-bit type ([`computes_natively`]: CUDA's
//! float16 and bfloat16, Vulkan's float16) the layers that can ([`crate::model::Layer::
//! computes_in_half`]: Dense, Conv2D, pooling, merges, Flatten, activations) compute in it
//! for real: their inputs and the compute copy of their weights are cast to it and stay
//! there, so matrix products and convolutions run on the GPU's 16-bit (tensor-core) kernels
//! and the activations they keep for the backward pass take half the memory. The other
//! layers (BatchNormalization, LayerNormalization, recurrent and attention layers, your own)
//! get float32 inputs holding 16-bit values and work as above. The environment variable
//! `KILN_MIXED_COMPUTE` (`native` or `emulated`) overrides the choice, so the native route
//! can be tested on the CPU (whose float16 arithmetic is Burn's, not kiln's kernels).
//!
//! [`LossScale`] is `keras.optimizers.LossScaleOptimizer`'s dynamic loss scale
//! (`keras/src/optimizers/loss_scale_optimizer.py`), used with `mixed_float16` as Keras'
//! `compile` does.

mod loss_scale;
pub mod round;

pub use loss_scale::{LossScale, LossScaleOptions, ScaleUpdate, unscale};

use burn::tensor::FloatDType;
use serde::{Deserialize, Serialize};

use crate::error::{KilnError, Result};

/// A dtype policy: the type layers compute in. Variables are always float32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Precision {
    /// Everything in float32 (Keras' default policy).
    #[default]
    Float32,
    /// Layers compute in float16 (1 sign, 5 exponent, 10 mantissa bits; largest 65504);
    /// `compile` adds a [`LossScale`] as Keras does.
    MixedFloat16,
    /// Layers compute in bfloat16 (float32's 8 exponent bits, 7 mantissa bits); no loss scale.
    MixedBFloat16,
}

/// Whether layers under a mixed policy compute in `dtype` itself on `device` (module docs):
/// on a device other than the CPU whose backend has arithmetic in `dtype`, unless
/// `KILN_MIXED_COMPUTE` says `native` (always) or `emulated` (never). On the CPU kiln's
/// float32 kernels with rounded values are faster than 16-bit arithmetic, which Burn's CPU
/// backend runs in float32 or without SIMD kernels.
pub fn computes_natively(device: &burn::prelude::Device, dtype: FloatDType) -> bool {
    static FORCED: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| match std::env::var("KILN_MIXED_COMPUTE").as_deref() {
        Ok("native") => Some(true),
        Ok("emulated") => Some(false),
        _ => None,
    });
    match NATIVE_ON_THIS_THREAD.get().or(*forced) {
        Some(native) => native,
        None => {
            device.clone().inner() != burn::prelude::Device::flex() && device.supports_dtype(dtype)
        }
    }
}

thread_local! {
    /// [`with_native_compute`]'s choice for the calls it wraps.
    static NATIVE_ON_THIS_THREAD: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with [`computes_natively`] answering `native` on this thread, whatever the device
/// and `KILN_MIXED_COMPUTE` say: compares the two routes in one process (tests).
pub fn with_native_compute<T>(native: bool, f: impl FnOnce() -> T) -> T {
    let before = NATIVE_ON_THIS_THREAD.replace(Some(native));
    let out = f();
    NATIVE_ON_THIS_THREAD.set(before);
    out
}

/// The accepted spellings, for error messages.
pub const PRECISION_NAMES: &str = "\"float32\" (or \"32\", \"32-true\"), \"mixed_float16\" \
     (or \"16-mixed\", \"float16\"), \"mixed_bfloat16\" (or \"bf16-mixed\", \"bfloat16\")";

impl Precision {
    /// Reads a policy name: Keras' (`float32`, `mixed_float16`, `mixed_bfloat16`), PyTorch
    /// Lightning's (`32`, `32-true`, `16-mixed`, `bf16-mixed`), or a bare compute dtype
    /// (`float16`, `bfloat16`: kiln keeps float32 variables under every policy, so these mean
    /// the mixed policies). Case-insensitive.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `key` and the accepted names.
    pub fn parse(name: &str, key: &str) -> Result<Precision> {
        match name.trim().to_ascii_lowercase().as_str() {
            "float32" | "32" | "32-true" | "fp32" => Ok(Precision::Float32),
            "mixed_float16" | "16-mixed" | "float16" | "16" => Ok(Precision::MixedFloat16),
            "mixed_bfloat16" | "bf16-mixed" | "bfloat16" | "bf16" => Ok(Precision::MixedBFloat16),
            _ => Err(KilnError::config(
                key,
                format!("unknown precision \"{name}\"; allowed: {PRECISION_NAMES}"),
            )),
        }
    }

    /// Keras' policy name (`"mixed_float16"`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::Float32 => "float32",
            Precision::MixedFloat16 => "mixed_float16",
            Precision::MixedBFloat16 => "mixed_bfloat16",
        }
    }

    /// The 16-bit type layers compute in, `None` for float32 (Keras' `policy.compute_dtype`).
    pub fn compute_dtype(self) -> Option<FloatDType> {
        match self {
            Precision::Float32 => None,
            Precision::MixedFloat16 => Some(FloatDType::F16),
            Precision::MixedBFloat16 => Some(FloatDType::BF16),
        }
    }

    /// The loss scale Keras' `compile` wraps the optimizer in under this policy: dynamic with
    /// Keras' defaults for `mixed_float16`, none otherwise
    /// (`keras/src/trainers/trainer.py`, `Trainer.compile`).
    pub fn default_loss_scale(self) -> Option<LossScaleOptions> {
        (self == Precision::MixedFloat16).then(LossScaleOptions::default)
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Precision {
    type Err = KilnError;
    fn from_str(s: &str) -> Result<Precision> {
        Precision::parse(s, "precision")
    }
}

impl Serialize for Precision {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Precision {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Precision::parse(&name, "precision").map_err(|_| {
            serde::de::Error::custom(format!(
                "unknown precision \"{name}\"; allowed: {PRECISION_NAMES}"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keras_and_lightning_names_parse() {
        for (name, p) in [
            ("float32", Precision::Float32),
            ("32", Precision::Float32),
            ("32-true", Precision::Float32),
            ("mixed_float16", Precision::MixedFloat16),
            ("16-mixed", Precision::MixedFloat16),
            ("Mixed_BFloat16", Precision::MixedBFloat16),
            ("bf16-mixed", Precision::MixedBFloat16),
        ] {
            assert_eq!(Precision::parse(name, "precision").unwrap(), p, "{name}");
        }
        let e = Precision::parse("float8", "precision").unwrap_err();
        assert!(
            e.to_string().contains("unknown precision \"float8\""),
            "{e}"
        );
        assert!(e.to_string().starts_with("precision:"), "{e}");
    }

    #[test]
    fn only_float16_gets_a_loss_scale() {
        assert_eq!(
            Precision::MixedFloat16.default_loss_scale(),
            Some(LossScaleOptions {
                initial_scale: 32768.0,
                dynamic_growth_steps: 2000
            })
        );
        assert_eq!(Precision::MixedBFloat16.default_loss_scale(), None);
        assert_eq!(Precision::Float32.default_loss_scale(), None);
        assert_eq!(
            Precision::MixedBFloat16.compute_dtype(),
            Some(FloatDType::BF16)
        );
    }

    #[test]
    fn serde_round_trip_uses_keras_names() {
        #[derive(Serialize, Deserialize)]
        struct T {
            p: Precision,
        }
        let s = toml::to_string(&T {
            p: Precision::MixedBFloat16,
        })
        .unwrap();
        assert_eq!(s.trim(), "p = \"mixed_bfloat16\"");
        let t: T = toml::from_str("p = \"16-mixed\"").unwrap();
        assert_eq!(t.p, Precision::MixedFloat16);
    }
}
