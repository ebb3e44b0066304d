//! The precision a run computes in, as far as memory is concerned: the bytes per value that
//! [`Precision`] (the run's dtype policy, [`crate::precision`]) implies.
//!
//! A mixed policy keeps float32 master weights and optimizer state (4 bytes per value), and
//! adds a 2-byte compute copy of the weights; activations and gradients are 2 bytes
//! (Micikevicius et al. 2018, "Mixed Precision Training"; Rajbhandari et al. 2020, "ZeRO",
//! section 3.1: 2 + 2 + 4 + 4 + 4 = 16 bytes per parameter with Adam).

pub use crate::precision::Precision;

impl Precision {
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
