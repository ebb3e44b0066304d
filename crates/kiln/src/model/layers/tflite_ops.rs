//! Helpers of the layers' TensorFlow Lite mappings (`Layer::tflite`): activations as TFLite
//! operators or fused activations, weight layouts.

use crate::model::args::Activation;
use crate::tflite::{Fused, Options, TfliteGraph, TfliteValue, op};

/// The fused form of `act` (RELU, or none) and what is left to apply after the operator
/// (TFLite's FULLY_CONNECTED and CONV_2D fuse only the ReLU family).
pub(super) fn fused(act: Activation) -> (Fused, Activation) {
    match act {
        Activation::Relu => (Fused::Relu, Activation::Linear),
        other => (Fused::None, other),
    }
}

/// `act` applied to `x` as its own operator (none for linear).
///
/// # Errors
/// An activation TFLite's builtin operators do not have here.
pub(super) fn activate(
    g: &mut TfliteGraph,
    name: &str,
    x: TfliteValue,
    act: Activation,
) -> Result<TfliteValue, String> {
    let code = match act {
        Activation::Linear => return Ok(x),
        Activation::Relu => op::RELU,
        Activation::Sigmoid => op::LOGISTIC,
        Activation::Tanh => op::TANH,
        Activation::Softmax => op::SOFTMAX,
        other => {
            return Err(format!(
                "activation {other:?} has no TensorFlow Lite mapping in kiln yet"
            ));
        }
    };
    let options = match act {
        Activation::Softmax => Options::Softmax,
        _ => Options::None,
    };
    let shape = x.shape.clone();
    Ok(g.op(
        &format!("{name}/activation"),
        code,
        &[x.index],
        &shape,
        options,
    ))
}

/// A row-major `[rows, cols]` matrix transposed.
pub(super) fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

/// Keras' padding as TFLite's (the same rule: `same` puts the extra row/column at the end).
pub(super) fn padding(p: crate::model::args::Padding) -> crate::tflite::Padding {
    match p {
        crate::model::args::Padding::Same => crate::tflite::Padding::Same,
        crate::model::args::Padding::Valid => crate::tflite::Padding::Valid,
    }
}
