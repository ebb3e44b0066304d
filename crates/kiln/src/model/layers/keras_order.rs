//! Values in Keras' element order. Inside kiln images are NCHW, but Keras' `Reshape` (like
//! `Flatten`) reads and writes values in channels-last order: these helpers turn any batch into
//! `[batch, values]` rows in Keras' order and back, on Burn tensors and in ONNX graphs.

use burn::prelude::*;

use crate::model::act::Act;
use crate::onnx::{Layout, OnnxGraph, OnnxValue};

/// The Keras shape (no batch axis) of a batch kiln runs.
pub(super) fn keras_shape_of(x: &Act) -> Vec<usize> {
    x.keras_shape()
}

/// `[batch, values]`, each example's values in Keras' (channels-last) order.
pub(super) fn into_rows(x: Act) -> Tensor<2> {
    match x {
        Act::Flat(t) => t,
        Act::Seq(t) => t.flatten(1, 2),
        image @ Act::Image(_) => image.into_keras_image().flatten(1, 3),
        volume @ Act::Volume(_) => volume.into_keras_volume().flatten(1, 4),
    }
}

/// The batch of Keras shape `shape` (1 to 3 axes, no batch axis) whose values in Keras' order
/// are `rows` (`[batch, values]`).
pub(super) fn from_rows(rows: Tensor<2>, shape: &[usize]) -> Act {
    let n = rows.dims()[0];
    match *shape {
        [_] => Act::Flat(rows),
        [s, f] => Act::Seq(rows.reshape([n, s, f])),
        [h, w, c] => Act::from_keras_image(rows.reshape([n, h, w, c])),
        [d, h, w, c] => Act::from_keras_volume(rows.reshape([n, d, h, w, c])),
        _ => panic!("shape checks allow 1 to 3 axes, got {shape:?}"),
    }
}

/// The ONNX value `x` reshaped to the Keras shape `shape` in Keras' element order (images go
/// through NHWC on both sides).
pub(super) fn onnx_reshape(
    g: &mut OnnxGraph,
    name: &str,
    x: &OnnxValue,
    shape: &[usize],
) -> String {
    let mut v = x.name.clone();
    if x.layout() == Layout::Image {
        v = g.transpose(name, &v, &[0, 2, 3, 1]);
    }
    let dims: Vec<i64> = std::iter::once(0)
        .chain(shape.iter().map(|&d| d as i64))
        .collect();
    v = g.reshape(name, &v, &dims);
    if Layout::of(shape) == Layout::Image {
        v = g.transpose(name, &v, &[0, 3, 1, 2]);
    }
    v
}
