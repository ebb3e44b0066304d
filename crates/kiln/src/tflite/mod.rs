//! TensorFlow Lite models: a graph of TFLite's builtin operators ([`TfliteGraph`], which each
//! layer extends through `Layer::tflite`) and its `.tflite` flatbuffer ([`flatbuffer`]), per
//! TensorFlow's schema (`tensorflow/compiler/mlir/lite/schema/schema.fbs`, schema version 3).
//!
//! Tensors are NHWC like Keras; a model's batch axis is 1 in `shape` and -1 in
//! `shape_signature`, so interpreters resize it (`resize_tensor_input`). Weights are stored in
//! TFLite's layouts: a Dense kernel `[units, in]` (FULLY_CONNECTED), a Conv2D kernel `[out, kh,
//! kw, in]` (OHWI).

pub mod eval;
mod flatbuffer;
pub mod quantize;

pub use flatbuffer::to_bytes;

/// TFLite's builtin operator codes (schema.fbs `BuiltinOperator`) that kiln writes.
#[allow(missing_docs)]
pub mod op {
    pub const ADD: i32 = 0;
    pub const AVERAGE_POOL_2D: i32 = 1;
    pub const CONCATENATION: i32 = 2;
    pub const CONV_2D: i32 = 3;
    pub const FULLY_CONNECTED: i32 = 9;
    pub const LOGISTIC: i32 = 14;
    pub const MAX_POOL_2D: i32 = 17;
    pub const MUL: i32 = 18;
    pub const RELU: i32 = 19;
    pub const RESHAPE: i32 = 22;
    pub const SOFTMAX: i32 = 25;
    pub const TANH: i32 = 28;
    pub const MEAN: i32 = 40;
}

/// A model's inputs or outputs: `(name, tensor index)`.
pub type Named = Vec<(String, i32)>;

/// A fused activation (schema.fbs `ActivationFunctionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fused {
    /// None.
    None = 0,
    /// max(x, 0).
    Relu = 1,
}

/// `SAME` or `VALID` (schema.fbs `Padding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// Keras' `"same"`.
    Same = 0,
    /// Keras' `"valid"`.
    Valid = 1,
}

/// An operator's builtin options.
#[derive(Debug, Clone, PartialEq)]
pub enum Options {
    /// No options table.
    None,
    /// `Conv2DOptions`.
    Conv2D {
        /// Padding.
        padding: Padding,
        /// `[stride_h, stride_w]`.
        strides: [usize; 2],
        /// Fused activation.
        act: Fused,
    },
    /// `Pool2DOptions`.
    Pool2D {
        /// Padding.
        padding: Padding,
        /// `[stride_h, stride_w]`.
        strides: [usize; 2],
        /// `[filter_height, filter_width]`.
        filter: [usize; 2],
    },
    /// `FullyConnectedOptions`.
    FullyConnected {
        /// Fused activation.
        act: Fused,
        /// Keep the input's leading axes (a Dense on sequences).
        keep_num_dims: bool,
    },
    /// `SoftmaxOptions` (beta 1).
    Softmax,
    /// `ConcatenationOptions`.
    Concatenation {
        /// The axis, of the NHWC tensor.
        axis: i32,
    },
    /// `AddOptions` / `MulOptions` (no fused activation).
    Elementwise,
    /// `ReshapeOptions`.
    Reshape {
        /// The new shape (batch -1).
        new_shape: Vec<i32>,
    },
    /// `ReducerOptions`.
    Reducer {
        /// Keep the reduced axes.
        keep_dims: bool,
    },
}

/// Quantization parameters of an int8 tensor: `real = scale * (q - zero_point)`, per tensor
/// or per slice of `dimension`.
#[derive(Debug, Clone, PartialEq)]
pub struct Quant {
    /// One scale per tensor, or per slice.
    pub scale: Vec<f32>,
    /// One zero point per scale.
    pub zero_point: Vec<i64>,
    /// The axis the scales run along (0 for a whole tensor).
    pub dimension: i32,
}

/// How [`TfliteGraph::kernel`] stores weight matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Quantization {
    /// float32 (TFLite's float model).
    #[default]
    None,
    /// int8 kernels, symmetric (zero point 0), per output channel for convolutions and per
    /// tensor for FULLY_CONNECTED; activations stay float32 and TFLite's hybrid kernels
    /// quantize them on the fly (TFLite's "dynamic range quantization").
    DynamicRange,
    /// Every tensor int8, activations calibrated on a representative set, float32 in and out
    /// ([`quantize`]; TFLite's "full integer quantization").
    FullInteger,
}

/// A tensor of the graph.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDef {
    /// Its name.
    pub name: String,
    /// Its shape with the batch axis first (1 for activations).
    pub shape: Vec<i32>,
    /// True for activations (the batch axis is -1 in `shape_signature`).
    pub batched: bool,
    /// `TensorType`: 0 float32, 2 int32, 9 int8.
    pub dtype: i8,
    /// Constant data (little-endian), none for activations.
    pub data: Option<Vec<u8>>,
    /// Quantization of an int8 tensor.
    pub quant: Option<Quant>,
}

impl TensorDef {
    /// Its constant data read as little-endian float32 (empty for an activation).
    pub fn f32_values(&self) -> Vec<f32> {
        self.data
            .as_deref()
            .unwrap_or_default()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
}

/// An operator of the graph.
#[derive(Debug, Clone, PartialEq)]
pub struct OpDef {
    /// Builtin code ([`op`]).
    pub code: i32,
    /// Input tensor indices (-1: an absent optional input).
    pub inputs: Vec<i32>,
    /// Output tensor indices.
    pub outputs: Vec<i32>,
    /// Options.
    pub options: Options,
}

/// A value of the graph: a tensor index and its Keras shape (no batch axis).
#[derive(Debug, Clone, PartialEq)]
pub struct TfliteValue {
    /// Index into the graph's tensors.
    pub index: i32,
    /// Keras shape, without the batch axis.
    pub shape: Vec<usize>,
}

/// A TFLite graph under construction, with the model's weights in Keras' names and layouts.
#[derive(Debug, Default)]
pub struct TfliteGraph {
    /// Tensors.
    pub tensors: Vec<TensorDef>,
    /// Operators, in execution order.
    pub ops: Vec<OpDef>,
    /// How kernels are stored.
    pub quantization: Quantization,
    pub(crate) weights: std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)>,
}

/// `values` (slices along axis 0 of `shape`, one scale each when `per_slice`) as symmetric
/// int8: `q = round(v / scale)` with `scale = max|v| / 127` (1 for an all-zero slice).
pub fn quantize_symmetric(values: &[f32], shape: &[usize], per_slice: bool) -> (Vec<u8>, Quant) {
    let slices = if per_slice { shape[0].max(1) } else { 1 };
    let len = values.len() / slices.max(1);
    let mut bytes = Vec::with_capacity(values.len());
    let mut scale = Vec::with_capacity(slices);
    for chunk in values.chunks(len.max(1)) {
        let max = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
        let s = if max > 0.0 { max / 127.0 } else { 1.0 };
        bytes.extend(
            chunk
                .iter()
                .map(|v| (v / s).round().clamp(-127.0, 127.0) as i8 as u8),
        );
        scale.push(s);
    }
    let quant = Quant {
        zero_point: vec![0; scale.len()],
        scale,
        dimension: 0,
    };
    (bytes, quant)
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

impl TfliteGraph {
    /// A graph over `weights` (`(name, Keras shape, values)`, as `weights::keras_weights`).
    pub fn new(weights: &[(String, Vec<usize>, Vec<f32>)]) -> TfliteGraph {
        TfliteGraph {
            weights: weights
                .iter()
                .map(|(n, s, v)| (n.clone(), (s.clone(), v.clone())))
                .collect(),
            ..TfliteGraph::default()
        }
    }

    /// A new activation tensor of Keras shape `shape`.
    pub fn activation(&mut self, name: &str, shape: &[usize]) -> TfliteValue {
        let dims = std::iter::once(1)
            .chain(shape.iter().map(|&d| d as i32))
            .collect();
        self.tensors.push(TensorDef {
            name: name.into(),
            shape: dims,
            batched: true,
            dtype: 0,
            data: None,
            quant: None,
        });
        TfliteValue {
            index: self.tensors.len() as i32 - 1,
            shape: shape.to_vec(),
        }
    }

    /// A float32 constant of shape `shape`.
    pub fn constant(&mut self, name: &str, shape: &[usize], values: &[f32]) -> i32 {
        self.tensors.push(TensorDef {
            name: name.into(),
            shape: shape.iter().map(|&d| d as i32).collect(),
            batched: false,
            dtype: 0,
            data: Some(f32_bytes(values)),
            quant: None,
        });
        self.tensors.len() as i32 - 1
    }

    /// A weight matrix (`shape` in TFLite's layout, the output channels first), stored as the
    /// graph's [`Quantization`] says: float32, or int8 per output channel (`per_channel`, a
    /// convolution's filter) or per tensor (a FULLY_CONNECTED's weights).
    pub fn kernel(
        &mut self,
        name: &str,
        shape: &[usize],
        values: &[f32],
        per_channel: bool,
    ) -> i32 {
        if self.quantization != Quantization::DynamicRange {
            // Float, or full integer (quantized after calibration).
            return self.constant(name, shape, values);
        }
        let (bytes, quant) = quantize_symmetric(values, shape, per_channel);
        self.tensors.push(TensorDef {
            name: name.into(),
            shape: shape.iter().map(|&d| d as i32).collect(),
            batched: false,
            dtype: 9,
            data: Some(bytes),
            quant: Some(quant),
        });
        self.tensors.len() as i32 - 1
    }

    /// An int32 constant vector.
    pub fn int32s(&mut self, name: &str, values: &[i32]) -> i32 {
        self.tensors.push(TensorDef {
            name: name.into(),
            shape: vec![values.len() as i32],
            batched: false,
            dtype: 2,
            data: Some(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
            quant: None,
        });
        self.tensors.len() as i32 - 1
    }

    /// The values of weight `key` (`<layer>/<weight>`), checked against its Keras shape.
    ///
    /// # Errors
    /// A weight missing or of another shape.
    pub fn weight(&self, key: &str, shape: &[usize]) -> Result<&[f32], String> {
        match self.weights.get(key) {
            Some((s, v)) if s == shape => Ok(v),
            Some((s, _)) => Err(format!("weight {key} is {s:?}, expected {shape:?}")),
            None => Err(format!("weight {key} is missing")),
        }
    }

    /// Adds operator `code` on `inputs`, with a new output of Keras shape `shape`.
    pub fn op(
        &mut self,
        name: &str,
        code: i32,
        inputs: &[i32],
        shape: &[usize],
        options: Options,
    ) -> TfliteValue {
        let out = self.activation(name, shape);
        self.ops.push(OpDef {
            code,
            inputs: inputs.to_vec(),
            outputs: vec![out.index],
            options,
        });
        out
    }

    /// `x` reshaped to Keras shape `shape` (RESHAPE with the shape as a tensor and an option).
    pub fn reshape(&mut self, name: &str, x: &TfliteValue, shape: &[usize]) -> TfliteValue {
        let new_shape: Vec<i32> = std::iter::once(-1)
            .chain(shape.iter().map(|&d| d as i32))
            .collect();
        let s = self.int32s(&format!("{name}/shape"), &new_shape);
        self.op(
            name,
            op::RESHAPE,
            &[x.index, s],
            shape,
            Options::Reshape { new_shape },
        )
    }
}
