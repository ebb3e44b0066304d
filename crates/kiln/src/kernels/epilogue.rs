//! What an affine kernel (convolution, Dense) does to its output after the bias, while the
//! output is still in cache: a ReLU, then rounding to the values of a 16-bit type, which is how
//! a layer under a mixed-precision policy returns its compute dtype's values (Keras' layers
//! return float16/bfloat16 tensors; kiln keeps them float32, [`super::round`]).

use super::round;

/// A ReLU and a rounding fused into an affine kernel's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Epilogue {
    /// `max(y, 0)` after the bias (NaN kept).
    pub relu: bool,
    /// Rounding to bfloat16 (`Some(true)`) or float16 (`Some(false)`) values, after the ReLU.
    pub round: Option<bool>,
}

impl Epilogue {
    /// A ReLU when `relu`, no rounding.
    pub fn with_relu(relu: bool) -> Epilogue {
        Epilogue { relu, round: None }
    }

    /// The epilogue as one number (custom operations take plain data): bit 0 the ReLU, bit 1
    /// rounding to bfloat16, bit 2 rounding to float16.
    pub fn code(self) -> usize {
        let round = match self.round {
            Some(true) => 2,
            Some(false) => 4,
            None => 0,
        };
        usize::from(self.relu) | round
    }

    /// The epilogue back from [`Epilogue::code`].
    pub fn from_code(code: usize) -> Epilogue {
        let round = match code & 6 {
            2 => Some(true),
            4 => Some(false),
            _ => None,
        };
        Epilogue {
            relu: code & 1 == 1,
            round,
        }
    }

    /// The rounding of this epilogue on a block of outputs, on the calling thread (the ReLU
    /// and the bias are the kernel's, in its own loop).
    pub(super) fn round_block(self, values: &mut [f32]) {
        if let Some(bfloat16) = self.round {
            round::round_block(values, bfloat16);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for relu in [false, true] {
            for round in [None, Some(true), Some(false)] {
                let e = Epilogue { relu, round };
                assert_eq!(Epilogue::from_code(e.code()), e);
            }
        }
        assert_eq!(Epilogue::with_relu(true).code(), 1);
        assert_eq!(Epilogue::default().code(), 0);
    }
}
