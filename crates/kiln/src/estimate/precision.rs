//! The precision a run computes in, as far as memory is concerned.

use crate::error::{KilnError, Result};

/// Keras' mixed-precision policy names (`keras.mixed_precision.Policy`), with Lightning's
/// `"32-true"`, `"16-mixed"` and `"bf16-mixed"` accepted as aliases.
///
/// For the estimate, a mixed policy keeps float32 master weights and optimizer state (4 bytes
/// per value), and adds a 2-byte compute copy of the weights; activations and gradients are
/// 2 bytes (Micikevicius et al. 2018, "Mixed Precision Training"; Rajbhandari et al. 2020,
/// "ZeRO", section 3.1: 2 + 2 + 4 + 4 + 4 = 16 bytes per parameter with Adam).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// Everything in float32.
    #[default]
    Float32,
    /// float16 compute, float32 variables.
    MixedFloat16,
    /// bfloat16 compute, float32 variables.
    MixedBfloat16,
}

impl Precision {
    /// Keras' name (`"mixed_float16"`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::Float32 => "float32",
            Precision::MixedFloat16 => "mixed_float16",
            Precision::MixedBfloat16 => "mixed_bfloat16",
        }
    }

    /// Bytes of one activation or gradient value.
    pub fn compute_bytes(self) -> u64 {
        match self {
            Precision::Float32 => 4,
            _ => 2,
        }
    }

    /// Bytes of the low-precision weight copy per parameter (0 in float32).
    pub fn weight_copy_bytes(self) -> u64 {
        match self {
            Precision::Float32 => 0,
            _ => 2,
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = KilnError;

    /// # Errors
    /// [`KilnError::Config`] (key `precision`) for other names, listing the allowed ones.
    fn from_str(s: &str) -> Result<Precision> {
        match s {
            "float32" | "32" | "32-true" => Ok(Precision::Float32),
            "mixed_float16" | "16-mixed" => Ok(Precision::MixedFloat16),
            "mixed_bfloat16" | "bf16-mixed" => Ok(Precision::MixedBfloat16),
            other => Err(KilnError::config(
                "precision",
                format!(
                    "\"{other}\" is not a precision; allowed: float32, mixed_float16, \
                     mixed_bfloat16 (or Lightning's 32-true, 16-mixed, bf16-mixed)"
                ),
            )),
        }
    }
}
