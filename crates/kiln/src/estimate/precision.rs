//! The precision a run computes in, as far as memory is concerned: the bytes per value that
//! [`Precision`] (the run's dtype policy, [`crate::precision`]) implies.
//!
//! A mixed policy keeps float32 master weights and optimizer state (4 bytes per value), and
//! adds a compute copy of the weights; on a GPU activations, gradients and that copy are 2 bytes
//! (Micikevicius et al. 2018, "Mixed Precision Training"; Rajbhandari et al. 2020, "ZeRO",
//! section 3.1: 2 + 2 + 4 + 4 + 4 = 16 bytes per parameter with Adam). On the CPU kiln keeps
//! them float32, holding 16-bit values (docs/precision.md): 4 bytes, so a mixed policy saves no
//! memory there and its weight copy adds 4 bytes per parameter.

pub use crate::precision::Precision;

use crate::device::DeviceKind;

impl Precision {
    /// Bytes of one activation or gradient value on `device`.
    pub fn compute_bytes(self, device: DeviceKind) -> u64 {
        match (self, device) {
            (Precision::Float32, _) | (_, DeviceKind::Cpu) => 4,
            _ => 2,
        }
    }

    /// Bytes of the weights' compute copy per parameter on `device` (0 in float32).
    pub fn weight_copy_bytes(self, device: DeviceKind) -> u64 {
        match self {
            Precision::Float32 => 0,
            _ => self.compute_bytes(device),
        }
    }
}
