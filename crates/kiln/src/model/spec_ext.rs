//! Shapes, parameter counts and argument checks of the transformer layers not yet declared
//! through [`super::Layer`] (LayerNormalization, MultiHeadAttention, TransformerEncoder), with Keras'
//! formulas (`keras/src/layers/...`, `keras_hub/src/layers/modeling/...`); checked against
//! TensorFlow 2.21 / Keras 3.15 by `tests/reference/estimate_models.py`.

use super::spec::{LayerKind, keras_shape};

type Shape = std::result::Result<Vec<usize>, String>;

fn seq(input: &[usize], class: &str) -> std::result::Result<[usize; 2], String> {
    match input {
        [s, f] => Ok([*s, *f]),
        _ => Err(format!(
            "{class} expects a 2-D input (steps, features), got shape {}",
            keras_shape(input)
        )),
    }
}

/// Output shape of the layers this file covers (`None` for the others).
pub(super) fn output_shape(kind: &LayerKind, inputs: &[&[usize]]) -> Option<Shape> {
    let input = inputs.first().copied().unwrap_or(&[]);
    Some(match kind {
        LayerKind::LayerNormalization { .. } => Ok(input.to_vec()),
        LayerKind::MultiHeadAttention { .. } => {
            let q = seq(input, "MultiHeadAttention");
            match (q, inputs.get(1).map(|v| seq(v, "MultiHeadAttention"))) {
                (Err(e), _) | (_, Some(Err(e))) => Err(e),
                (Ok([s, f]), _) => Ok(vec![s, f]),
            }
        }
        LayerKind::TransformerEncoder { num_heads, .. } => seq(input, "TransformerEncoder")
            .and_then(|[s, f]| {
                if f % num_heads != 0 {
                    Err(format!(
                        "the feature size {f} is not a multiple of num_heads = {num_heads}"
                    ))
                } else {
                    Ok(vec![s, f])
                }
            }),
        _ => return None,
    })
}

/// Sizes of a multi-head attention's projections: `(features, value features, heads,
/// key_dim, value_dim)`.
pub fn attention_dims(kind: &LayerKind, inputs: &[&[usize]]) -> [usize; 5] {
    let f = inputs.first().and_then(|s| s.last()).copied().unwrap_or(0);
    match kind {
        LayerKind::MultiHeadAttention {
            num_heads,
            key_dim,
            value_dim,
            ..
        } => {
            let fv = inputs.get(1).and_then(|s| s.last()).copied().unwrap_or(f);
            [f, fv, *num_heads, *key_dim, value_dim.unwrap_or(*key_dim)]
        }
        LayerKind::TransformerEncoder { num_heads, .. } => {
            let kd = f / (*num_heads).max(1);
            [f, f, *num_heads, kd, kd]
        }
        _ => [0; 5],
    }
}

/// Trainable parameters of the layers this file covers (they have no non-trainable ones);
/// `None` for the others. In `u128`, so that absurd sizes are caught before they overflow.
pub(super) fn param_count_u128(kind: &LayerKind, inputs: &[&[usize]]) -> Option<u128> {
    let last = inputs.first().and_then(|s| s.last()).copied().unwrap_or(0) as u128;
    let attention = |inputs: &[&[usize]], bias: bool| {
        let [f, fv, h, kd, vd] = attention_dims(kind, inputs).map(|v| v as u128);
        let b = |n: u128| if bias { n } else { 0 };
        // query [f, h, kd] + key [fv, h, kd] + value [fv, h, vd] + output [h, vd, f], each with
        // a bias (keras/src/layers/attention/multi_head_attention.py).
        f * h * kd
            + b(h * kd)
            + fv * h * kd
            + b(h * kd)
            + fv * h * vd
            + b(h * vd)
            + h * vd * f
            + b(f)
    };
    Some(match kind {
        LayerKind::LayerNormalization { .. } => 2 * last,
        LayerKind::MultiHeadAttention { use_bias, .. } => attention(inputs, *use_bias),
        LayerKind::TransformerEncoder {
            intermediate_dim, ..
        } => {
            let i = *intermediate_dim as u128;
            // attention + 2 LayerNormalizations + Dense(f -> i) + Dense(i -> f)
            attention(inputs, true) + 4 * last + last * i + i + i * last + last
        }
        _ => return None,
    })
}

/// [`param_count_u128`] as `usize` (sizes were checked against kiln's limit when the spec was
/// built).
pub(super) fn param_count(kind: &LayerKind, inputs: &[&[usize]]) -> Option<usize> {
    param_count_u128(kind, inputs).map(|n| n as usize)
}

/// Argument checks of the layers this file covers.
pub(super) fn validate(kind: &LayerKind) -> std::result::Result<(), String> {
    let positive = |name: &str, v: usize| {
        if v == 0 {
            Err(format!("`{name}` must be positive, got 0"))
        } else {
            Ok(())
        }
    };
    let epsilon = |e: f64| {
        if e > 0.0 {
            Ok(())
        } else {
            Err(format!("`epsilon` must be positive, got {e}"))
        }
    };
    match kind {
        LayerKind::LayerNormalization { epsilon: e } => epsilon(*e),
        LayerKind::MultiHeadAttention {
            num_heads,
            key_dim,
            value_dim,
            ..
        } => {
            positive("num_heads", *num_heads)?;
            positive("key_dim", *key_dim)?;
            positive("value_dim", value_dim.unwrap_or(1))
        }
        LayerKind::TransformerEncoder {
            intermediate_dim,
            num_heads,
            layer_norm_epsilon,
            ..
        } => {
            positive("intermediate_dim", *intermediate_dim)?;
            positive("num_heads", *num_heads)?;
            epsilon(*layer_norm_epsilon)
        }
        _ => Ok(()),
    }
}
