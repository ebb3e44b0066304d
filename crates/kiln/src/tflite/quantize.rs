//! Full-integer int8 models (TFLite's "full integer quantization" with a float interface):
//! every activation int8 with a scale and zero point from its range over a representative
//! set ([`super::eval`]), kernels int8 symmetric (per output channel for CONV_2D, per tensor
//! for FULLY_CONNECTED), biases int32 at `input scale × kernel scale`, the other constants
//! int8 per tensor; a QUANTIZE after each float input and a DEQUANTIZE before each float
//! output, as TensorFlow's converter writes them by default.
//!
//! Fixed output ranges, as TFLite's int8 kernels require: SOFTMAX and LOGISTIC `1/256, -128`,
//! TANH `1/128, 0`; pooling and RESHAPE keep their input's parameters.

use std::collections::BTreeMap;

use super::{Named, OpDef, Options, Quant, TfliteGraph, op, quantize_symmetric};

const QUANTIZE: i32 = 114;
const DEQUANTIZE: i32 = 6;

/// `(scale, zero point)` of an int8 tensor over `[lo, hi]` (widened to hold 0).
fn affine(lo: f32, hi: f32) -> (f32, i64) {
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    let scale = if hi > lo { (hi - lo) / 255.0 } else { 1e-8 };
    let zero = (-128.0 - lo / scale).round().clamp(-128.0, 127.0) as i64;
    (scale, zero)
}

fn range(values: &[f32]) -> (f32, f32) {
    values
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        })
}

fn per_tensor(scale: f32, zero: i64) -> Quant {
    Quant {
        scale: vec![scale],
        zero_point: vec![zero],
        dimension: 0,
    }
}

/// The activations' parameters, in operator order (fixed ranges and pass-through operators
/// as the module docs say, the others from `calibration`).
fn activation_params(
    g: &TfliteGraph,
    calibration: &[Option<Vec<f32>>],
) -> BTreeMap<i32, (f32, i64)> {
    let from = |i: i32| {
        let v = calibration[i as usize].as_deref().unwrap_or(&[0.0]);
        let (lo, hi) = range(v);
        affine(lo, hi)
    };
    let mut params = BTreeMap::new();
    for (i, t) in g.tensors.iter().enumerate() {
        if t.batched {
            params.insert(i as i32, from(i as i32));
        }
    }
    for o in &g.ops {
        let out = o.outputs[0];
        let fixed = match o.code {
            op::SOFTMAX | op::LOGISTIC => Some((1.0 / 256.0, -128)),
            op::TANH => Some((1.0 / 128.0, 0)),
            op::MAX_POOL_2D | op::AVERAGE_POOL_2D | op::RESHAPE => {
                params.get(&o.inputs[0]).copied()
            }
            _ => None,
        };
        if let Some(p) = fixed {
            params.insert(out, p);
        }
    }
    params
}

/// Requantizes constant `k` of op `o` (its kernel, bias or other operand) in `q`.
fn constant(q: &mut TfliteGraph, o: &OpDef, k: usize, params: &BTreeMap<i32, (f32, i64)>) {
    let index = o.inputs[k];
    if index < 0 || q.tensors[index as usize].dtype != 0 {
        return;
    }
    let t = &q.tensors[index as usize];
    let values = t.f32_values();
    let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
    let kernel = matches!(o.code, op::CONV_2D | op::FULLY_CONNECTED);
    let new = match (kernel, k) {
        (true, 1) => {
            let (bytes, quant) = quantize_symmetric(&values, &shape, o.code == op::CONV_2D);
            (9, bytes, quant)
        }
        (true, 2) => {
            let s_in = params[&o.inputs[0]].0;
            let w = q.tensors[o.inputs[1] as usize]
                .quant
                .clone()
                .expect("kernel first");
            // One scale per kernel scale: per channel for CONV_2D, one for FULLY_CONNECTED.
            let scales: Vec<f32> = w.scale.iter().map(|s| s_in * s).collect();
            let bytes = values
                .iter()
                .enumerate()
                .flat_map(|(c, v)| {
                    let s = scales[if scales.len() == 1 { 0 } else { c }];
                    ((v / s).round() as i32).to_le_bytes()
                })
                .collect();
            let quant = Quant {
                zero_point: vec![0; scales.len()],
                scale: scales,
                dimension: 0,
            };
            (2, bytes, quant)
        }
        _ => {
            let (lo, hi) = range(&values);
            let (scale, zero) = affine(lo, hi);
            let bytes = values
                .iter()
                .map(|v| ((v / scale).round() as i64 + zero).clamp(-128, 127) as i8 as u8)
                .collect();
            (9, bytes, per_tensor(scale, zero))
        }
    };
    let t = &mut q.tensors[index as usize];
    (t.dtype, t.data, t.quant) = (new.0, Some(new.1), Some(new.2));
}

/// For each int8 model input (`code` QUANTIZE) or output (DEQUANTIZE) of `named`: a float
/// copy of its tensor in `q` (`<name>_float`) and the op between the two; returns the ops and
/// the float tensors by name.
fn float_interface(
    q: &mut TfliteGraph,
    g: &TfliteGraph,
    named: &[(String, i32)],
    code: i32,
) -> (Vec<OpDef>, Named) {
    let mut ops = Vec::new();
    let mut floats = Vec::new();
    for (name, i) in named {
        let mut t = g.tensors[*i as usize].clone();
        t.name = format!("{name}_float");
        q.tensors.push(t);
        let f = q.tensors.len() as i32 - 1;
        let (from, to) = if code == QUANTIZE { (f, *i) } else { (*i, f) };
        ops.push(OpDef {
            code,
            inputs: vec![from],
            outputs: vec![to],
            options: Options::None,
        });
        floats.push((name.clone(), f));
    }
    (ops, floats)
}

/// The full-integer graph of float graph `g`, its activations calibrated by `calibration`
/// (every tensor's values over a representative set, [`super::eval::run`]); returns the
/// graph and its float interface's `(inputs, outputs)`.
pub fn full_integer(
    g: &TfliteGraph,
    inputs: &[(String, i32)],
    outputs: &[(String, i32)],
    calibration: &[Option<Vec<f32>>],
) -> (TfliteGraph, Named, Named) {
    let params = activation_params(g, calibration);
    let mut q = TfliteGraph {
        tensors: g.tensors.clone(),
        ops: Vec::new(),
        quantization: g.quantization,
        weights: BTreeMap::new(),
    };
    for (&i, &(scale, zero)) in &params {
        let t = &mut q.tensors[i as usize];
        (t.dtype, t.quant) = (9, Some(per_tensor(scale, zero)));
    }
    for o in &g.ops {
        for k in 0..o.inputs.len() {
            constant(&mut q, o, k, &params);
        }
    }
    // The float interface: QUANTIZE in, DEQUANTIZE out.
    let (quantize, new_inputs) = float_interface(&mut q, g, inputs, QUANTIZE);
    let (dequantize, new_outputs) = float_interface(&mut q, g, outputs, DEQUANTIZE);
    let ops = quantize
        .into_iter()
        .chain(g.ops.iter().cloned())
        .chain(dequantize)
        .collect();
    q.ops = ops;
    (q, new_inputs, new_outputs)
}
