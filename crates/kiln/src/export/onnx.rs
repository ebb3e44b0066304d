//! A kiln model as an ONNX inference graph (opset 17).
//!
//! The graph takes the input as Keras users give it (`[batch, ...Input.shape]`, images NHWC)
//! and returns the model's output as Keras' `model.predict` does (`[batch, ...output shape]`),
//! with a dynamic batch axis named `batch`. Inside, it follows kiln's forward pass
//! ([`crate::model::Network::forward`] in inference mode): images are transposed to NCHW once
//! after the input (ONNX `Conv` and pools are NCHW, as Burn's), `Flatten` flattens in Keras'
//! channels-last order, `Dropout` is the identity, `BatchNormalization` uses the moving
//! statistics.
//!
//! | kiln layer | ONNX operators (https://onnx.ai/onnx/operators/) |
//! |---|---|
//! | `Dense` | `MatMul` + `Add` (images: `Transpose` around them) |
//! | `Conv2D` | `Conv` (kernel `[out, in, kh, kw]`, `pads` = TensorFlow's `same` split) |
//! | `MaxPooling2D` | `MaxPool` |
//! | `AveragePooling2D` | `AveragePool` with `count_include_pad = 0` |
//! | `Flatten` | `Flatten(axis = 1)` (images: `Transpose` to NHWC first) |
//! | `Dropout` | nothing |
//! | `BatchNormalization` | `BatchNormalization` (3-D inputs: `Transpose` around it) |
//! | activations | `Relu`, `Sigmoid`, `Tanh`, `Softmax` (channel axis), and GELU as `x * 0.5 * (1 + Erf(x / √2))` (ONNX's `Gelu` needs opset 20) |

use std::collections::HashMap;

use prost::Message;

use super::onnx_proto::{
    AttributeProto, DimValue, Dimension, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto, TypeProtoTensor,
    ValueInfoProto, attribute_type,
};
use crate::error::{KilnError, Result};
use crate::model::weights::hwio_to_oihw;
use crate::model::{Activation, LayerKind, ModelSpec, Padding};

/// ONNX operator set version the graph uses.
pub const OPSET: i64 = 17;
/// ONNX IR version that goes with opset 17 (`onnx/onnx` docs/Versioning.md: IR 8 for opsets
/// 15 to 18).
pub const IR_VERSION: i64 = 8;
/// Name of the graph input (Keras 3 names the `Input` layer of a Sequential model
/// `input_layer`).
pub const INPUT_NAME: &str = "input_layer";
/// Name of the graph output (Keras 3's `model.export()` names a single output `output_0`).
pub const OUTPUT_NAME: &str = "output_0";
/// Symbolic name of the dynamic batch axis.
pub const BATCH_DIM: &str = "batch";

/// How the current value is laid out, as kiln's [`crate::model::Act`].
#[derive(Debug, Clone, Copy, PartialEq)]
enum Layout {
    /// `[batch, features]`.
    Flat,
    /// `[batch, steps, features]`.
    Seq,
    /// `[batch, channels, height, width]`.
    Image,
}

/// Builds the node list, naming values `v0`, `v1`, ….
struct Builder {
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    next: usize,
}

fn ints(name: &str, values: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_type::INTS),
        ints: values.to_vec(),
        ..Default::default()
    }
}

fn int(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_type::INT),
        i: Some(value),
        ..Default::default()
    }
}

fn float(name: &str, value: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_type::FLOAT),
        f: Some(value),
        ..Default::default()
    }
}

/// A float32 tensor stored as little-endian `raw_data`.
fn tensor(name: &str, dims: &[usize], values: &[f32]) -> TensorProto {
    TensorProto {
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: Some(super::onnx_proto::FLOAT),
        name: Some(name.into()),
        raw_data: Some(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
        ..Default::default()
    }
}

/// A float tensor value description with a dynamic first axis.
fn value_info(name: &str, shape: &[usize]) -> ValueInfoProto {
    let mut dim = vec![Dimension {
        value: Some(DimValue::DimParam(BATCH_DIM.into())),
    }];
    dim.extend(shape.iter().map(|&d| Dimension {
        value: Some(DimValue::DimValue(d as i64)),
    }));
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: Some(super::onnx_proto::FLOAT),
                shape: Some(TensorShapeProto { dim }),
            }),
        }),
        doc_string: None,
    }
}

impl Builder {
    /// Appends `op(inputs)` with `attributes`, named after `layer`; returns its output value.
    fn node(
        &mut self,
        layer: &str,
        op: &str,
        inputs: &[&str],
        attributes: Vec<AttributeProto>,
    ) -> String {
        let out = format!("v{}", self.next);
        let name = format!("{layer}/{op}_{}", self.next);
        self.next += 1;
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![out.clone()],
            name: Some(name),
            op_type: Some(op.into()),
            domain: None,
            attribute: attributes,
            doc_string: None,
        });
        out
    }

    fn transpose(&mut self, layer: &str, x: &str, perm: &[i64]) -> String {
        self.node(layer, "Transpose", &[x], vec![ints("perm", perm)])
    }

    fn constant(&mut self, name: &str, dims: &[usize], values: &[f32]) -> String {
        self.initializers.push(tensor(name, dims, values));
        name.to_string()
    }

    /// `Dense` on the last axis of a `[batch, ..., features]` value.
    fn matmul_bias(&mut self, layer: &str, x: &str, w: &str, b: Option<&str>) -> String {
        let y = self.node(layer, "MatMul", &[x, w], vec![]);
        match b {
            Some(b) => self.node(layer, "Add", &[&y, b], vec![]),
            None => y,
        }
    }

    fn activation(&mut self, layer: &str, x: String, a: Activation, layout: Layout) -> String {
        match a {
            Activation::Linear => x,
            Activation::Relu => self.node(layer, "Relu", &[&x], vec![]),
            Activation::Sigmoid => self.node(layer, "Sigmoid", &[&x], vec![]),
            Activation::Tanh => self.node(layer, "Tanh", &[&x], vec![]),
            Activation::Softmax => {
                // kiln's softmax runs over the feature (channel) axis.
                let axis = match layout {
                    Layout::Flat | Layout::Image => 1,
                    Layout::Seq => 2,
                };
                self.node(layer, "Softmax", &[&x], vec![int("axis", axis)])
            }
            Activation::Gelu => {
                // Exact GELU (Keras' `gelu(approximate=False)`): x * 0.5 * (1 + erf(x / sqrt 2)).
                let sqrt2 = self.constant(
                    &format!("{layer}/gelu_sqrt2"),
                    &[],
                    &[std::f32::consts::SQRT_2],
                );
                let one = self.constant(&format!("{layer}/gelu_one"), &[], &[1.0]);
                let half = self.constant(&format!("{layer}/gelu_half"), &[], &[0.5]);
                let d = self.node(layer, "Div", &[&x, &sqrt2], vec![]);
                let e = self.node(layer, "Erf", &[&d], vec![]);
                let p = self.node(layer, "Add", &[&e, &one], vec![]);
                let m = self.node(layer, "Mul", &[&x, &p], vec![]);
                self.node(layer, "Mul", &[&m, &half], vec![])
            }
        }
    }
}

/// Looks up a weight of `name` with Keras shape `shape` in `weights`.
fn weight<'a>(
    weights: &'a HashMap<String, (Vec<usize>, Vec<f32>)>,
    name: &str,
    shape: &[usize],
) -> Result<&'a [f32]> {
    match weights.get(name) {
        Some((s, v)) if s == shape => Ok(v),
        Some((s, _)) => Err(KilnError::Shape(format!(
            "ONNX export: weight `{name}` has shape {s:?}, the model needs {shape:?}"
        ))),
        None => Err(KilnError::Shape(format!(
            "ONNX export: weight `{name}` is missing from the weights"
        ))),
    }
}

/// `[top, left, bottom, right]` padding of a window over an NCHW value of spatial size `hw`.
fn pads(padding: Padding, hw: [usize; 2], k: [usize; 2], s: [usize; 2]) -> Vec<i64> {
    let (_, (t, b)) = padding.resolve(hw[0], k[0], s[0]).expect("shape checked");
    let (_, (l, r)) = padding.resolve(hw[1], k[1], s[1]).expect("shape checked");
    vec![t as i64, l as i64, b as i64, r as i64]
}

fn pair(v: [usize; 2]) -> Vec<i64> {
    vec![v[0] as i64, v[1] as i64]
}

/// Builds the ONNX graph of `spec` with `weights` (Keras names and layouts, as
/// [`crate::model::weights::keras_weights`] returns them) as a `ModelProto`.
///
/// # Errors
/// [`KilnError::Shape`] when a weight is missing or has another shape than the spec needs.
pub fn model_proto(
    name: &str,
    spec: &ModelSpec,
    weights: &[(String, Vec<usize>, Vec<f32>)],
    model_version: i64,
) -> Result<ModelProto> {
    let weights: HashMap<String, (Vec<usize>, Vec<f32>)> = weights
        .iter()
        .map(|(n, s, v)| (n.clone(), (s.clone(), v.clone())))
        .collect();
    let mut g = Builder {
        nodes: Vec::new(),
        initializers: Vec::new(),
        next: 0,
    };
    if !spec.is_sequential() {
        return Err(KilnError::Shape(
            "ONNX export covers Sequential models; this model is a functional graph (layers \
             with `inputs`). Export it with --format safetensors, which kiln serve reads"
                .into(),
        ));
    }
    let input_shape = spec.input_shape();
    let (mut x, mut layout) = match input_shape.len() {
        1 => (INPUT_NAME.to_string(), Layout::Flat),
        2 => (INPUT_NAME.to_string(), Layout::Seq),
        _ => (
            g.transpose("input_layer", INPUT_NAME, &[0, 3, 1, 2]),
            Layout::Image,
        ),
    };
    for (i, layer) in spec.layers().iter().enumerate() {
        let n = layer.name.as_str();
        let before = spec.shape_before(i);
        let cin = before.last().copied().unwrap_or(0);
        match &layer.kind {
            LayerKind::Input { .. } => {}
            LayerKind::Dense {
                units,
                activation,
                use_bias,
            } => {
                let w = weight(&weights, &format!("{n}/kernel"), &[cin, *units])?;
                let w = g.constant(&format!("{n}/kernel"), &[cin, *units], w);
                let b = if *use_bias {
                    let v = weight(&weights, &format!("{n}/bias"), &[*units])?;
                    Some(g.constant(&format!("{n}/bias"), &[*units], v))
                } else {
                    None
                };
                x = if layout == Layout::Image {
                    let t = g.transpose(n, &x, &[0, 2, 3, 1]);
                    let y = g.matmul_bias(n, &t, &w, b.as_deref());
                    g.transpose(n, &y, &[0, 3, 1, 2])
                } else {
                    g.matmul_bias(n, &x, &w, b.as_deref())
                };
                x = g.activation(n, x, *activation, layout);
            }
            LayerKind::Conv2D {
                filters,
                kernel_size,
                strides,
                padding,
                activation,
                use_bias,
            } => {
                let [kh, kw] = kernel_size.0;
                let hwio = weight(&weights, &format!("{n}/kernel"), &[kh, kw, cin, *filters])?;
                let oihw = hwio_to_oihw(hwio, [kh, kw, cin, *filters]);
                let w = g.constant(&format!("{n}/kernel"), &[*filters, cin, kh, kw], &oihw);
                let mut inputs = vec![x.clone(), w];
                if *use_bias {
                    let v = weight(&weights, &format!("{n}/bias"), &[*filters])?;
                    inputs.push(g.constant(&format!("{n}/bias"), &[*filters], v));
                }
                let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
                let attrs = vec![
                    ints("kernel_shape", &pair(kernel_size.0)),
                    ints("strides", &pair(strides.0)),
                    ints(
                        "pads",
                        &pads(*padding, [before[0], before[1]], kernel_size.0, strides.0),
                    ),
                    ints("dilations", &[1, 1]),
                    int("group", 1),
                ];
                x = g.node(n, "Conv", &refs, attrs);
                x = g.activation(n, x, *activation, layout);
            }
            LayerKind::MaxPooling2D {
                pool_size,
                strides,
                padding,
            }
            | LayerKind::AveragePooling2D {
                pool_size,
                strides,
                padding,
            } => {
                let s = strides.unwrap_or(*pool_size).0;
                let mut attrs = vec![
                    ints("kernel_shape", &pair(pool_size.0)),
                    ints("strides", &pair(s)),
                    ints(
                        "pads",
                        &pads(*padding, [before[0], before[1]], pool_size.0, s),
                    ),
                ];
                let op = if matches!(layer.kind, LayerKind::MaxPooling2D { .. }) {
                    "MaxPool"
                } else {
                    // TensorFlow does not count padded positions in the average.
                    attrs.push(int("count_include_pad", 0));
                    "AveragePool"
                };
                x = g.node(n, op, &[&x], attrs);
            }
            LayerKind::Flatten {} => {
                match layout {
                    Layout::Flat => {}
                    Layout::Seq => x = g.node(n, "Flatten", &[&x], vec![int("axis", 1)]),
                    Layout::Image => {
                        let t = g.transpose(n, &x, &[0, 2, 3, 1]);
                        x = g.node(n, "Flatten", &[&t], vec![int("axis", 1)]);
                    }
                }
                layout = Layout::Flat;
            }
            LayerKind::Dropout { .. } => {}
            LayerKind::BatchNormalization { epsilon, .. } => {
                let mut inputs = Vec::new();
                for part in ["gamma", "beta", "moving_mean", "moving_variance"] {
                    let key = format!("{n}/{part}");
                    let v = weight(&weights, &key, &[cin])?;
                    inputs.push(g.constant(&key, &[cin], v));
                }
                let attrs = vec![float("epsilon", *epsilon as f32)];
                let norm = |g: &mut Builder, x: &str| {
                    let mut all = vec![x];
                    all.extend(inputs.iter().map(String::as_str));
                    g.node(n, "BatchNormalization", &all, attrs.clone())
                };
                x = if layout == Layout::Seq {
                    let t = g.transpose(n, &x, &[0, 2, 1]);
                    let y = norm(&mut g, &t);
                    g.transpose(n, &y, &[0, 2, 1])
                } else {
                    norm(&mut g, &x)
                };
            }
            LayerKind::Activation { activation } => {
                x = g.activation(n, x, *activation, layout);
            }
            other => {
                return Err(KilnError::Shape(format!(
                    "layer `{n}` ({}) has no ONNX export yet (kiln exports Dense, Conv2D, \
                     pooling, Flatten, Dropout, BatchNormalization and Activation); export \
                     with --format safetensors, which kiln serve reads",
                    other.class_name()
                )));
            }
        }
    }
    if layout == Layout::Image {
        x = g.transpose("output", &x, &[0, 2, 3, 1]);
    }
    // The output gets its public name through an Identity, so that every graph (even one
    // whose layers are all identities at inference) has distinct input and output values.
    g.nodes.push(NodeProto {
        input: vec![x],
        output: vec![OUTPUT_NAME.into()],
        name: Some("output/Identity".into()),
        op_type: Some("Identity".into()),
        ..Default::default()
    });
    let graph = GraphProto {
        node: g.nodes,
        name: Some(name.to_string()),
        initializer: g.initializers,
        doc_string: Some(format!("kiln model {name}")),
        input: vec![value_info(INPUT_NAME, input_shape)],
        output: vec![value_info(OUTPUT_NAME, spec.output_shape())],
        value_info: Vec::new(),
    };
    Ok(ModelProto {
        ir_version: Some(IR_VERSION),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(OPSET),
        }],
        producer_name: Some("kiln".into()),
        producer_version: Some(env!("CARGO_PKG_VERSION").into()),
        domain: None,
        model_version: Some(model_version),
        doc_string: Some(format!(
            "{name}: exported by kiln from a Keras-style model; input {INPUT_NAME} \
             [batch, {}] (channels-last), output {OUTPUT_NAME}",
            input_shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        graph: Some(graph),
        metadata_props: vec![StringStringEntryProto {
            key: Some("kiln.model".into()),
            value: Some(toml::to_string(&spec.to_toml()).expect("model specs serialize to TOML")),
        }],
    })
}

/// [`model_proto`] serialized to the bytes of a `.onnx` file.
///
/// # Errors
/// As [`model_proto`].
pub fn to_bytes(
    name: &str,
    spec: &ModelSpec,
    weights: &[(String, Vec<usize>, Vec<f32>)],
    model_version: i64,
) -> Result<Vec<u8>> {
    Ok(model_proto(name, spec, weights, model_version)?.encode_to_vec())
}
