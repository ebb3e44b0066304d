//! The protocol buffers of TensorBoard event files, written out by hand for `prost` (no
//! `protoc`, no build script). Only the fields kiln writes or reads are declared; a decoder
//! skips the others, as protobuf requires, so files written by TensorFlow decode too.
//!
//! Sources: `tensorflow/core/util/event.proto`, `tensorflow/core/framework/summary.proto`,
//! `tensor.proto`, `tensor_shape.proto` and `types.proto` (proto3, package `tensorflow`):
//!
//! ```text
//! message Event {
//!   double wall_time = 1;  int64 step = 2;
//!   oneof what {
//!     string file_version = 3; bytes graph_def = 4; Summary summary = 5;
//!     SessionLog session_log = 7; ...
//!   }
//!   SourceMetadata source_metadata = 10;
//! }
//! message SessionLog {
//!   enum SessionStatus { STATUS_UNSPECIFIED = 0; START = 1; STOP = 2; CHECKPOINT = 3; }
//!   SessionStatus status = 1; string checkpoint_path = 2; string msg = 3;
//! }
//! message SourceMetadata { string writer = 1; }
//! message Summary { repeated Value value = 1; }
//! message Summary.Value {
//!   string node_name = 7; string tag = 1; SummaryMetadata metadata = 9;
//!   oneof value { float simple_value = 2; ...; TensorProto tensor = 8; }
//! }
//! message SummaryMetadata {
//!   PluginData plugin_data = 1;  string display_name = 2;  string summary_description = 3;
//!   DataClass data_class = 4;
//! }
//! message SummaryMetadata.PluginData { string plugin_name = 1; bytes content = 2; }
//! message TensorProto {
//!   DataType dtype = 1; TensorShapeProto tensor_shape = 2; bytes tensor_content = 4;
//!   repeated float float_val = 5 [packed]; repeated double double_val = 6 [packed]; ...
//! }
//! message TensorShapeProto { repeated Dim dim = 2; bool unknown_rank = 3; }
//! message TensorShapeProto.Dim { int64 size = 1; string name = 2; }
//! ```

use prost::Message;

/// `DataType::DT_FLOAT` (`tensorflow/core/framework/types.proto`).
pub const DT_FLOAT: i32 = 1;
/// `DataType::DT_DOUBLE`.
pub const DT_DOUBLE: i32 = 2;
/// `SessionLog.SessionStatus.START`: a (re)start of training. TensorBoard drops every value
/// of the run directory at or after this event's step that it read before it (its restart
/// rule, see [`crate::summary::restart`]).
pub const SESSION_START: i32 = 1;

/// `tensorflow.Event`: one record of an event file.
#[derive(Clone, PartialEq, Message)]
pub struct Event {
    /// Field 1: seconds since the Unix epoch, when the event was written.
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    /// Field 2: the global step (the x axis of TensorBoard's charts).
    #[prost(int64, tag = "2")]
    pub step: i64,
    /// The `what` oneof.
    #[prost(oneof = "What", tags = "3, 4, 5, 7")]
    pub what: Option<What>,
    /// Field 10: which program wrote the file (TensorFlow writes it on the first event).
    #[prost(message, optional, tag = "10")]
    pub source_metadata: Option<SourceMetadata>,
}

/// `Event.what`, the kinds kiln writes or reads.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum What {
    /// Field 3: `"brain.Event:2"` on the first event of a file.
    #[prost(string, tag = "3")]
    FileVersion(String),
    /// Field 4: a serialized `GraphDef` (read only, never written by kiln).
    #[prost(bytes, tag = "4")]
    GraphDef(Vec<u8>),
    /// Field 5: summary values.
    #[prost(message, tag = "5")]
    Summary(Summary),
    /// Field 7: a session status; kiln writes [`SESSION_START`] when training (re)starts.
    #[prost(message, tag = "7")]
    SessionLog(SessionLog),
}

/// `tensorflow.SessionLog` (the fields kiln uses).
#[derive(Clone, PartialEq, Message)]
pub struct SessionLog {
    /// Field 1: `SessionStatus` ([`SESSION_START`] = 1).
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// `tensorflow.SourceMetadata`.
#[derive(Clone, PartialEq, Message)]
pub struct SourceMetadata {
    /// Field 1: the writer's name (`"kiln"`; TensorFlow writes
    /// `"tensorflow.core.util.events_writer"`).
    #[prost(string, tag = "1")]
    pub writer: String,
}

/// `tensorflow.Summary`: the values of one event.
#[derive(Clone, PartialEq, Message)]
pub struct Summary {
    /// Field 1.
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<Value>,
}

/// `tensorflow.Summary.Value`: one tagged value.
#[derive(Clone, PartialEq, Message)]
pub struct Value {
    /// Field 1: the series name (`epoch_loss`).
    #[prost(string, tag = "1")]
    pub tag: String,
    /// Field 9: which TensorBoard plugin reads it.
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<SummaryMetadata>,
    /// The `value` oneof.
    #[prost(oneof = "ValueKind", tags = "2, 8")]
    pub value: Option<ValueKind>,
}

/// `Summary.Value.value`, the kinds kiln writes or reads.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ValueKind {
    /// Field 2: TF1-style scalar (read only; kiln writes [`ValueKind::Tensor`] as TF2 does).
    #[prost(float, tag = "2")]
    SimpleValue(f32),
    /// Field 8: TF2-style value, interpreted by the plugin named in the metadata.
    #[prost(message, tag = "8")]
    Tensor(TensorProto),
}

/// `tensorflow.SummaryMetadata`.
#[derive(Clone, PartialEq, Message)]
pub struct SummaryMetadata {
    /// Field 1.
    #[prost(message, optional, tag = "1")]
    pub plugin_data: Option<PluginData>,
    /// Field 2.
    #[prost(string, tag = "2")]
    pub display_name: String,
    /// Field 3.
    #[prost(string, tag = "3")]
    pub summary_description: String,
    /// Field 4: `DataClass` (`0` unknown, `1` scalar, `2` tensor, `3` blob sequence).
    /// TensorFlow's `tf.summary.scalar` leaves it unset; TensorBoard infers it from the plugin.
    #[prost(int32, tag = "4")]
    pub data_class: i32,
}

/// `tensorflow.SummaryMetadata.PluginData`.
#[derive(Clone, PartialEq, Message)]
pub struct PluginData {
    /// Field 1: `"scalars"`, `"histograms"`.
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    /// Field 2: the plugin's own metadata (empty for scalars and histograms at version 0).
    #[prost(bytes = "vec", tag = "2")]
    pub content: Vec<u8>,
}

/// `tensorflow.TensorProto`, the fields summaries use.
#[derive(Clone, PartialEq, Message)]
pub struct TensorProto {
    /// Field 1: [`DT_FLOAT`], [`DT_DOUBLE`], ...
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    /// Field 2: present and empty for a scalar (rank 0), as TensorFlow writes it.
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShapeProto>,
    /// Field 4: the values as little-endian bytes, row-major (what TensorFlow 2 writes).
    #[prost(bytes = "vec", tag = "4")]
    pub tensor_content: Vec<u8>,
    /// Field 5: float values (the other encoding readers accept; read only).
    #[prost(float, repeated, tag = "5")]
    pub float_val: Vec<f32>,
    /// Field 6: double values (read only).
    #[prost(double, repeated, tag = "6")]
    pub double_val: Vec<f64>,
}

/// `tensorflow.TensorShapeProto`.
#[derive(Clone, PartialEq, Message)]
pub struct TensorShapeProto {
    /// Field 2: the dimensions, outermost first.
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
}

/// `tensorflow.TensorShapeProto.Dim`.
#[derive(Clone, PartialEq, Message)]
pub struct Dim {
    /// Field 1.
    #[prost(int64, tag = "1")]
    pub size: i64,
}

impl TensorProto {
    /// The shape as sizes (`[]` for a scalar).
    pub fn shape(&self) -> Vec<i64> {
        self.tensor_shape
            .as_ref()
            .map(|s| s.dim.iter().map(|d| d.size).collect())
            .unwrap_or_default()
    }

    /// The values as `f64`, from `tensor_content` or `float_val` / `double_val`, for
    /// [`DT_FLOAT`] and [`DT_DOUBLE`] tensors; `None` for other dtypes or a content length that
    /// is not a whole number of values.
    pub fn values_f64(&self) -> Option<Vec<f64>> {
        match self.dtype {
            DT_FLOAT if !self.tensor_content.is_empty() => {
                let chunks = self.tensor_content.chunks_exact(4);
                (chunks.remainder().is_empty()).then(|| {
                    chunks
                        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")) as f64)
                        .collect()
                })
            }
            DT_FLOAT => Some(self.float_val.iter().map(|&v| v as f64).collect()),
            DT_DOUBLE if !self.tensor_content.is_empty() => {
                let chunks = self.tensor_content.chunks_exact(8);
                (chunks.remainder().is_empty()).then(|| {
                    chunks
                        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                        .collect()
                })
            }
            DT_DOUBLE => Some(self.double_val.clone()),
            _ => None,
        }
    }
}

impl Value {
    /// The plugin that reads this value (`"scalars"`), when the metadata names one.
    pub fn plugin_name(&self) -> Option<&str> {
        self.metadata
            .as_ref()
            .and_then(|m| m.plugin_data.as_ref())
            .map(|p| p.plugin_name.as_str())
    }

    /// The value as a scalar: a TF1 `simple_value`, or a TF2 rank-0 float tensor (TensorBoard's
    /// rule in `tensorboard/data_compat.py`). Other values give `None`.
    pub fn as_scalar(&self) -> Option<f32> {
        match &self.value {
            Some(ValueKind::SimpleValue(v)) => Some(*v),
            Some(ValueKind::Tensor(t)) if t.dtype == DT_FLOAT && t.shape().is_empty() => {
                match t.values_f64()?.as_slice() {
                    [v] => Some(*v as f32),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The value as TF2 histogram buckets `(left, right, count)`: a `[k, 3]` tensor.
    pub fn as_histogram(&self) -> Option<Vec<[f64; 3]>> {
        let Some(ValueKind::Tensor(t)) = &self.value else {
            return None;
        };
        let shape = t.shape();
        if shape.len() != 2 || shape[1] != 3 {
            return None;
        }
        let values = t.values_f64()?;
        if values.len() as i64 != shape[0] * 3 {
            return None;
        }
        Some(values.chunks_exact(3).map(|r| [r[0], r[1], r[2]]).collect())
    }
}

impl Event {
    /// The summary values of this event (none for a `file_version` event).
    pub fn values(&self) -> &[Value] {
        match &self.what {
            Some(What::Summary(s)) => &s.value,
            _ => &[],
        }
    }

    /// Whether this is a `session_log` event with status [`SESSION_START`].
    pub fn is_session_start(&self) -> bool {
        matches!(&self.what, Some(What::SessionLog(l)) if l.status == SESSION_START)
    }

    /// The serialized bytes (one TFRecord record of an event file).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.encode_to_vec()
    }
}
