//! A small builder of ONNX inference graphs (opset 17) that layers write their part of the
//! graph with ([`crate::model::Layer::onnx`]); `crate::export::onnx` walks a model with it.
//! It knows ONNX and nothing of kiln's models, so that both the layers and the export use it
//! without importing each other.
//!
//! Values between layers are float32 tensors with a leading batch axis, laid out as kiln's
//! forward pass lays them out ([`Layout`]): images are NCHW inside the graph.

use std::collections::{HashMap, HashSet};

pub mod proto;

use proto::{
    AttributeProto, DimValue, Dimension, NodeProto, TensorProto, TensorShapeProto, TypeProto,
    TypeProtoTensor, ValueInfoProto, attribute_type,
};

/// Symbolic name of the dynamic batch axis.
pub const BATCH_DIM: &str = "batch";

/// How a value is laid out, as kiln's [`crate::model::Act`]; it follows from the rank of the
/// Keras shape (without the batch axis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `[batch, features]` (Keras shape `(features,)`).
    Flat,
    /// `[batch, steps, features]` (Keras shape `(steps, features)`).
    Seq,
    /// `[batch, channels, height, width]` (Keras shape `(height, width, channels)`).
    Image,
    /// `[batch, channels, depth, height, width]` (Keras shape `(depth, height, width,
    /// channels)`).
    Volume,
}

impl Layout {
    /// The layout of a value of Keras shape `shape`.
    pub fn of(shape: &[usize]) -> Layout {
        match shape.len() {
            0 | 1 => Layout::Flat,
            2 => Layout::Seq,
            3 => Layout::Image,
            _ => Layout::Volume,
        }
    }

    /// The permutation from Keras' channels-last order to this layout (images and volumes).
    pub fn from_channels_last(self) -> Option<&'static [i64]> {
        match self {
            Layout::Flat | Layout::Seq => None,
            Layout::Image => Some(&[0, 3, 1, 2]),
            Layout::Volume => Some(&[0, 4, 1, 2, 3]),
        }
    }

    /// The permutation from this layout to Keras' channels-last order (images and volumes).
    pub fn to_channels_last(self) -> Option<&'static [i64]> {
        match self {
            Layout::Flat | Layout::Seq => None,
            Layout::Image => Some(&[0, 2, 3, 1]),
            Layout::Volume => Some(&[0, 2, 3, 4, 1]),
        }
    }

    /// The ONNX axis of the features (channels).
    pub fn feature_axis(self) -> i64 {
        match self {
            Layout::Flat | Layout::Image | Layout::Volume => 1,
            Layout::Seq => 2,
        }
    }
}

/// A value of the graph: its ONNX name and the Keras shape of one example.
#[derive(Debug, Clone, PartialEq)]
pub struct OnnxValue {
    /// The value's name in the graph.
    pub name: String,
    /// Keras shape without the batch axis (images `(height, width, channels)`, though the
    /// value itself is NCHW).
    pub shape: Vec<usize>,
}

impl OnnxValue {
    /// Its layout.
    pub fn layout(&self) -> Layout {
        Layout::of(&self.shape)
    }
}

/// An `ints` attribute.
pub fn ints(name: &str, values: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_type::INTS),
        ints: values.to_vec(),
        ..Default::default()
    }
}

/// An `int` attribute.
pub fn int(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_type::INT),
        i: Some(value),
        ..Default::default()
    }
}

/// A `float` attribute.
pub fn float(name: &str, value: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_type::FLOAT),
        f: Some(value),
        ..Default::default()
    }
}

/// A float32 value description `[batch, ...shape]` with a dynamic batch axis.
pub fn value_info(name: &str, shape: &[usize]) -> ValueInfoProto {
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
                elem_type: Some(proto::FLOAT),
                shape: Some(TensorShapeProto { dim }),
            }),
        }),
        doc_string: None,
    }
}

/// The nodes and initializers of a graph being built, and the model's weights (Keras names
/// and shapes) that [`OnnxGraph::weight`] turns into initializers. Values are named `v0`,
/// `v1`, …; constants `<layer>/c<n>`.
pub struct OnnxGraph {
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    added: HashSet<String>,
    weights: HashMap<String, (Vec<usize>, Vec<f32>)>,
    next: usize,
}

impl OnnxGraph {
    /// An empty graph over `weights` (`(Keras name, Keras shape, values)`).
    pub fn new(weights: &[(String, Vec<usize>, Vec<f32>)]) -> OnnxGraph {
        OnnxGraph {
            nodes: Vec::new(),
            initializers: Vec::new(),
            added: HashSet::new(),
            weights: weights
                .iter()
                .map(|(n, s, v)| (n.clone(), (s.clone(), v.clone())))
                .collect(),
            next: 0,
        }
    }

    /// The nodes (in order) and initializers built so far.
    pub fn into_parts(self) -> (Vec<NodeProto>, Vec<TensorProto>) {
        (self.nodes, self.initializers)
    }

    /// Appends `op(inputs)` with `attributes`, its node named after `layer`; returns its
    /// output value.
    pub fn node(
        &mut self,
        layer: &str,
        op: &str,
        inputs: &[&str],
        attributes: Vec<AttributeProto>,
    ) -> String {
        let out = format!("v{}", self.next);
        self.push(layer, op, inputs, attributes, &out);
        out
    }

    /// Appends `op(inputs)` writing the value `output` (a graph output's name).
    pub fn node_into(&mut self, layer: &str, op: &str, inputs: &[&str], output: &str) {
        self.push(layer, op, inputs, Vec::new(), output);
    }

    fn push(
        &mut self,
        layer: &str,
        op: &str,
        inputs: &[&str],
        attribute: Vec<AttributeProto>,
        output: &str,
    ) {
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.to_string()],
            name: Some(format!("{layer}/{op}_{}", self.next)),
            op_type: Some(op.into()),
            domain: None,
            attribute,
            doc_string: None,
        });
        self.next += 1;
    }

    /// `Transpose(x, perm)`.
    pub fn transpose(&mut self, layer: &str, x: &str, perm: &[i64]) -> String {
        self.node(layer, "Transpose", &[x], vec![ints("perm", perm)])
    }

    fn initializer(&mut self, tensor: TensorProto) -> String {
        let name = tensor.name.clone().unwrap_or_default();
        if self.added.insert(name.clone()) {
            self.initializers.push(tensor);
        }
        name
    }

    fn const_name(&mut self, layer: &str) -> String {
        self.next += 1;
        format!("{layer}/c{}", self.next)
    }

    /// A float32 constant of shape `dims`.
    pub fn constant(&mut self, layer: &str, dims: &[usize], values: &[f32]) -> String {
        let name = self.const_name(layer);
        self.named_constant(&name, dims, values)
    }

    /// A float32 scalar constant.
    pub fn scalar(&mut self, layer: &str, value: f32) -> String {
        self.constant(layer, &[], &[value])
    }

    /// A 1-D int64 constant (shapes, axes, pads).
    pub fn int64s(&mut self, layer: &str, values: &[i64]) -> String {
        let name = self.const_name(layer);
        self.initializer(TensorProto {
            dims: vec![values.len() as i64],
            data_type: Some(proto::INT64),
            name: Some(name),
            raw_data: Some(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
            ..Default::default()
        })
    }

    /// The values of the model's weight `key` (Keras name, e.g. `dense/kernel`), checked to
    /// have the Keras shape `shape`.
    ///
    /// # Errors
    /// A message naming the weight when it is missing or has another shape.
    pub fn weight_values(&self, key: &str, shape: &[usize]) -> Result<&[f32], String> {
        match self.weights.get(key) {
            Some((s, v)) if s == shape => Ok(v),
            Some((s, _)) => Err(format!(
                "weight `{key}` has shape {s:?}, the model needs {shape:?}"
            )),
            None => Err(format!("weight `{key}` is missing from the weights")),
        }
    }

    /// The model's weight `key` of Keras shape `shape` as an initializer of shape `dims` (the
    /// same values row-major, e.g. an attention kernel `[f, heads, key_dim]` as `[f, heads *
    /// key_dim]`), named `key`; returns its name.
    ///
    /// # Errors
    /// As [`OnnxGraph::weight_values`].
    pub fn weight(&mut self, key: &str, shape: &[usize], dims: &[usize]) -> Result<String, String> {
        let values = self.weight_values(key, shape)?.to_vec();
        Ok(self.named_constant(key, dims, &values))
    }

    /// A float32 constant named `name` (a weight in another layout than Keras').
    pub fn named_constant(&mut self, name: &str, dims: &[usize], values: &[f32]) -> String {
        self.initializer(TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: Some(proto::FLOAT),
            name: Some(name.into()),
            raw_data: Some(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
            ..Default::default()
        })
    }

    /// `x · w + b` on the last axis (`MatMul`, `Add`).
    pub fn matmul_bias(&mut self, layer: &str, x: &str, w: &str, b: Option<&str>) -> String {
        let y = self.node(layer, "MatMul", &[x, w], vec![]);
        match b {
            Some(b) => self.node(layer, "Add", &[&y, b], vec![]),
            None => y,
        }
    }

    /// A Keras Dense map `[.., inputs] -> [.., units]` on the last axis with the weights
    /// `<prefix>kernel [inputs, units]` and, when `bias`, `<prefix>bias [units]`.
    ///
    /// # Errors
    /// As [`OnnxGraph::weight`].
    pub fn dense(
        &mut self,
        prefix: &str,
        x: &str,
        [inputs, units]: [usize; 2],
        bias: bool,
    ) -> Result<String, String> {
        let w = self.weight(
            &format!("{prefix}kernel"),
            &[inputs, units],
            &[inputs, units],
        )?;
        let b = match bias {
            true => Some(self.weight(&format!("{prefix}bias"), &[units], &[units])?),
            false => None,
        };
        Ok(self.matmul_bias(prefix.trim_end_matches('/'), x, &w, b.as_deref()))
    }

    /// Keras' LayerNormalization over the last axis (ONNX `LayerNormalization`, opset 17) with
    /// `<prefix>gamma` and `<prefix>beta` of `[features]`.
    ///
    /// # Errors
    /// As [`OnnxGraph::weight`].
    pub fn layer_norm(
        &mut self,
        prefix: &str,
        x: &str,
        features: usize,
        epsilon: f64,
    ) -> Result<String, String> {
        let gamma = self.weight(&format!("{prefix}gamma"), &[features], &[features])?;
        let beta = self.weight(&format!("{prefix}beta"), &[features], &[features])?;
        let attrs = vec![int("axis", -1), float("epsilon", epsilon as f32)];
        let layer = prefix.trim_end_matches('/');
        Ok(self.node(layer, "LayerNormalization", &[x, &gamma, &beta], attrs))
    }

    /// `x[.., start..end, ..]` along `axis` (`Slice`).
    pub fn slice(&mut self, layer: &str, x: &str, axis: i64, start: usize, end: usize) -> String {
        let starts = self.int64s(layer, &[start as i64]);
        let ends = self.int64s(layer, &[end as i64]);
        let axes = self.int64s(layer, &[axis]);
        self.node(layer, "Slice", &[x, &starts, &ends, &axes], vec![])
    }

    /// `Reshape(x, shape)` (`0` keeps that axis, as the batch).
    pub fn reshape(&mut self, layer: &str, x: &str, shape: &[i64]) -> String {
        let shape = self.int64s(layer, shape);
        self.node(layer, "Reshape", &[x, &shape], vec![])
    }
}
