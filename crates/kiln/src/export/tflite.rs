//! A kiln model as a TensorFlow Lite flatbuffer (`model.tflite`): float32, or with int8
//! kernels (`--quantization dynamic_range`, TFLite's dynamic range quantization: Dense and
//! Conv2D kernels int8, symmetric, per output channel for convolutions; activations float32,
//! quantized on the fly by TFLite's hybrid kernels; about 4x smaller), or every tensor int8
//! (`--quantization full_integer`, activations calibrated on the run's own training examples,
//! float32 in and out: [`crate::tflite::quantize`]).
//!
//! Inputs and outputs as Keras users give and get them (`[batch, ...shape]`, images NHWC,
//! batch 1 resizable with `resize_tensor_input`); the model alone, at inference (Dropout the
//! identity, BatchNormalization with its moving statistics folded into a multiply and an add).
//! Every layer writes its own operators ([`crate::model::Layer::tflite`]); a layer without a
//! mapping is an error naming the layer and its class.
//!
//! | kiln layer | TFLite builtin operators |
//! |---|---|
//! | `Dense` | `FULLY_CONNECTED` (kernel `[units, in]`, RELU fused) |
//! | `Conv2D` | `CONV_2D` (kernel OHWI, RELU fused) |
//! | `MaxPooling2D`, `AveragePooling2D` | `MAX_POOL_2D`, `AVERAGE_POOL_2D` |
//! | `Flatten` | `RESHAPE` |
//! | `Dropout` | nothing |
//! | `BatchNormalization` | `MUL` + `ADD` (per-channel constants) |
//! | activations (`Activation`, `Softmax`, a layer's `activation`) | `RELU`, `LOGISTIC`, `TANH`, `SOFTMAX` |

use crate::error::{KilnError, Result};
use crate::model::{LayerKind, ModelSpec};
use crate::tflite::{Named, Quantization, TfliteGraph, TfliteValue};

/// The values of every layer of `spec`, in order, after `inputs`' values.
fn layer_values(
    g: &mut TfliteGraph,
    spec: &ModelSpec,
    inputs: &[TfliteValue],
) -> Result<Vec<TfliteValue>> {
    super::layer_values(spec, inputs, "TensorFlow Lite", "", |i, xs| {
        let layer = &spec.layers()[i];
        // A shared layer's call runs on its owner's weights.
        let owner = &spec.layers()[layer.shares.unwrap_or(i)].name;
        match &layer.kind {
            LayerKind::Input { .. } => Ok(xs[0].clone()),
            LayerKind::Declared(l) => l.tflite(g, &xs, owner),
        }
    })
}

/// The float32 TFLite graph of `spec` with `weights` (kernels stored as `quantization` says)
/// and its named inputs and outputs.
///
/// # Errors
/// As [`to_bytes`].
pub fn graph(
    spec: &ModelSpec,
    weights: &[(String, Vec<usize>, Vec<f32>)],
    quantization: Quantization,
) -> Result<(TfliteGraph, Named, Named)> {
    let mut g = TfliteGraph::new(weights);
    g.quantization = quantization;
    let inputs: Vec<TfliteValue> = spec
        .inputs()
        .iter()
        .map(|(n, shape)| g.activation(n, shape))
        .collect();
    let values = layer_values(&mut g, spec, &inputs)?;
    let named_inputs: Named = spec
        .inputs()
        .iter()
        .zip(&inputs)
        .map(|((n, _), v)| (n.clone(), v.index))
        .collect();
    let named_outputs: Named = spec
        .output_layers()
        .iter()
        .enumerate()
        .map(|(k, &o)| (format!("output_{k}"), values[o].index))
        .collect();
    if named_outputs
        .iter()
        .any(|(_, i)| named_inputs.iter().any(|(_, j)| i == j))
    {
        return Err(KilnError::config(
            "model",
            "the model computes nothing at inference (its output is its input); TensorFlow \
             Lite has no such model",
        ));
    }
    Ok((g, named_inputs, named_outputs))
}

/// The `.tflite` bytes of `spec` with `weights` (Keras names and layouts, as
/// [`crate::model::weights::keras_weights`] returns them), kernels stored as `quantization`
/// says; `representative` reads the examples (values in Keras' layout, count) a full-integer
/// model is calibrated on, after the graph is known to build.
///
/// # Errors
/// [`KilnError::Config`] at `model.layers[k]`, naming the layer and its class, when a layer has
/// no TensorFlow Lite mapping; at `--quantization` for a full-integer model without
/// representative examples.
pub fn to_bytes(
    name: &str,
    spec: &ModelSpec,
    weights: &[(String, Vec<usize>, Vec<f32>)],
    quantization: Quantization,
    representative: Option<impl FnOnce() -> Result<(Vec<f32>, usize)>>,
) -> Result<Vec<u8>> {
    let (g, named_inputs, named_outputs) = graph(spec, weights, quantization)?;
    let description = format!("{name}, exported by kiln {}", env!("CARGO_PKG_VERSION"));
    if quantization != Quantization::FullInteger {
        return Ok(crate::tflite::to_bytes(
            &g,
            &named_inputs,
            &named_outputs,
            &description,
        ));
    }
    let none = || {
        KilnError::config(
            "--quantization",
            "full_integer needs representative examples to calibrate on (the run's training \
             data); none were found",
        )
    };
    let (values, n) = representative.ok_or_else(none)?()?;
    if n == 0 {
        return Err(none());
    }
    let calibration = crate::tflite::eval::run(&g, &[(named_inputs[0].1, values)], n)
        .map_err(|m| KilnError::config("--quantization", m))?;
    let (q, ins, outs) =
        crate::tflite::quantize::full_integer(&g, &named_inputs, &named_outputs, &calibration);
    Ok(crate::tflite::to_bytes(&q, &ins, &outs, &description))
}
