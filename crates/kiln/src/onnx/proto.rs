//! The ONNX protocol buffers kiln writes, transcribed by hand for `prost` (no `protoc`, no build
//! script). Only the messages and fields an inference graph needs are declared; a decoder skips
//! the others, as protobuf requires, so models written by other tools decode too.
//!
//! Source: `onnx/onnx.proto` of the ONNX repository (https://github.com/onnx/onnx, proto2,
//! package `onnx`), whose field numbers are:
//!
//! ```text
//! message ModelProto {
//!   optional int64 ir_version = 1;  repeated OperatorSetIdProto opset_import = 8;
//!   optional string producer_name = 2;  optional string producer_version = 3;
//!   optional string domain = 4;  optional int64 model_version = 5;  optional string doc_string = 6;
//!   optional GraphProto graph = 7;  repeated StringStringEntryProto metadata_props = 14;
//! }
//! message OperatorSetIdProto { optional string domain = 1; optional int64 version = 2; }
//! message StringStringEntryProto { optional string key = 1; optional string value = 2; }
//! message GraphProto {
//!   repeated NodeProto node = 1;  optional string name = 2;  repeated TensorProto initializer = 5;
//!   optional string doc_string = 10;  repeated ValueInfoProto input = 11;
//!   repeated ValueInfoProto output = 12;  repeated ValueInfoProto value_info = 13;
//! }
//! message NodeProto {
//!   repeated string input = 1;  repeated string output = 2;  optional string name = 3;
//!   optional string op_type = 4;  optional string domain = 7;
//!   repeated AttributeProto attribute = 5;  optional string doc_string = 6;
//! }
//! message AttributeProto {
//!   optional string name = 1;  optional AttributeType type = 20;  optional float f = 2;
//!   optional int64 i = 3;  optional bytes s = 4;  optional TensorProto t = 5;
//!   repeated float floats = 7;  repeated int64 ints = 8;
//! }   // AttributeType: FLOAT = 1, INT = 2, STRING = 3, TENSOR = 4, FLOATS = 6, INTS = 7
//! message TensorProto {
//!   repeated int64 dims = 1;  optional int32 data_type = 2;
//!   repeated float float_data = 4 [packed = true];  repeated int64 int64_data = 7 [packed = true];
//!   optional string name = 8;  optional bytes raw_data = 9;
//! }   // DataType: FLOAT = 1, INT64 = 7
//! message ValueInfoProto { optional string name = 1; optional TypeProto type = 2; optional string doc_string = 3; }
//! message TypeProto { oneof value { Tensor tensor_type = 1; ... } optional string denotation = 6; }
//! message TypeProto.Tensor { optional int32 elem_type = 1; optional TensorShapeProto shape = 2; }
//! message TensorShapeProto { repeated Dimension dim = 1; }
//! message TensorShapeProto.Dimension { oneof value { int64 dim_value = 1; string dim_param = 2; } }
//! ```
//!
//! Scalars are `Option`s (proto2 `optional`): a field that is set is written even when it holds
//! the default value.

/// `TensorProto.DataType.FLOAT`.
pub const FLOAT: i32 = 1;
/// `TensorProto.DataType.INT64`.
pub const INT64: i32 = 7;

/// `AttributeProto.AttributeType` values used by kiln.
pub mod attribute_type {
    /// A single float (`f`).
    pub const FLOAT: i32 = 1;
    /// A single int64 (`i`).
    pub const INT: i32 = 2;
    /// A UTF-8 string (`s`).
    pub const STRING: i32 = 3;
    /// A list of int64 (`ints`).
    pub const INTS: i32 = 7;
}

/// `onnx.ModelProto`: the file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    /// IR version of the format (8 goes with opset 17).
    #[prost(int64, optional, tag = "1")]
    pub ir_version: Option<i64>,
    /// Operator sets the graph uses.
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    /// The tool that wrote the model.
    #[prost(string, optional, tag = "2")]
    pub producer_name: Option<String>,
    /// Its version.
    #[prost(string, optional, tag = "3")]
    pub producer_version: Option<String>,
    /// Reverse-domain name space of the model.
    #[prost(string, optional, tag = "4")]
    pub domain: Option<String>,
    /// The model's version.
    #[prost(int64, optional, tag = "5")]
    pub model_version: Option<i64>,
    /// Free text.
    #[prost(string, optional, tag = "6")]
    pub doc_string: Option<String>,
    /// The computation.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    /// Named metadata.
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// `onnx.OperatorSetIdProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    /// `""` is the default ONNX domain.
    #[prost(string, optional, tag = "1")]
    pub domain: Option<String>,
    /// Opset version.
    #[prost(int64, optional, tag = "2")]
    pub version: Option<i64>,
}

/// `onnx.StringStringEntryProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    /// Key.
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    /// Value.
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

/// `onnx.GraphProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    /// Nodes, in topological order.
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    /// Graph name.
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    /// Constant tensors (the weights).
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    /// Free text.
    #[prost(string, optional, tag = "10")]
    pub doc_string: Option<String>,
    /// Graph inputs.
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    /// Graph outputs.
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    /// Types of intermediate values (optional).
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
}

/// `onnx.NodeProto`: one operator application.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    /// Input value names.
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    /// Output value names.
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    /// Node name.
    #[prost(string, optional, tag = "3")]
    pub name: Option<String>,
    /// Operator (`Conv`, `MatMul`, …).
    #[prost(string, optional, tag = "4")]
    pub op_type: Option<String>,
    /// Operator set domain (`""`: ONNX).
    #[prost(string, optional, tag = "7")]
    pub domain: Option<String>,
    /// Attributes.
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    /// Free text.
    #[prost(string, optional, tag = "6")]
    pub doc_string: Option<String>,
}

/// `onnx.AttributeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    /// Attribute name.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// Which value field is set ([`attribute_type`]).
    #[prost(int32, optional, tag = "20")]
    pub r#type: Option<i32>,
    /// A float.
    #[prost(float, optional, tag = "2")]
    pub f: Option<f32>,
    /// An int64.
    #[prost(int64, optional, tag = "3")]
    pub i: Option<i64>,
    /// A string.
    #[prost(bytes = "vec", optional, tag = "4")]
    pub s: Option<Vec<u8>>,
    /// A tensor.
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    /// Floats.
    #[prost(float, repeated, tag = "7")]
    pub floats: Vec<f32>,
    /// Int64s.
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
}

/// `onnx.TensorProto`: a constant tensor, row-major.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// Shape.
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    /// Element type ([`FLOAT`], [`INT64`]).
    #[prost(int32, optional, tag = "2")]
    pub data_type: Option<i32>,
    /// Float values (when not in `raw_data`).
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    /// Int64 values (when not in `raw_data`).
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    /// Name (the value name nodes refer to).
    #[prost(string, optional, tag = "8")]
    pub name: Option<String>,
    /// Little-endian fixed-width values.
    #[prost(bytes = "vec", optional, tag = "9")]
    pub raw_data: Option<Vec<u8>>,
}

/// `onnx.ValueInfoProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    /// Value name.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// Its type.
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
    /// Free text.
    #[prost(string, optional, tag = "3")]
    pub doc_string: Option<String>,
}

/// `onnx.TypeProto` (tensor types only).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    /// A tensor type.
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TypeProtoTensor>,
}

/// `onnx.TypeProto.Tensor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProtoTensor {
    /// Element type ([`FLOAT`]).
    #[prost(int32, optional, tag = "1")]
    pub elem_type: Option<i32>,
    /// Shape.
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

/// `onnx.TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    /// Dimensions.
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<Dimension>,
}

/// `onnx.TensorShapeProto.Dimension`: a size or a symbolic name (a dynamic axis).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dimension {
    /// The size or the symbol.
    #[prost(oneof = "DimValue", tags = "1, 2")]
    pub value: Option<DimValue>,
}

/// `TensorShapeProto.Dimension.value`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum DimValue {
    /// A fixed size.
    #[prost(int64, tag = "1")]
    DimValue(i64),
    /// A symbolic (dynamic) size, e.g. `"batch"`.
    #[prost(string, tag = "2")]
    DimParam(String),
}
