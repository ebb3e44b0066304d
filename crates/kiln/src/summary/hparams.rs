//! TensorBoard's HParams plugin summaries: the hyperparameters of one training session
//! (`session_start_info`) and how it ended (`session_end_info`), as
//! `tensorboard/plugins/hparams/summary_v2.py::hparams` and `summary.py::session_end_pb`
//! write them (what Keras' `hp.KerasCallback` writes at train begin and end).
//!
//! Protobufs (`tensorboard/plugins/hparams/plugin_data.proto`, `api.proto`, proto3, and
//! `google/protobuf/struct.proto`):
//!
//! ```text
//! message HParamsPluginData {
//!   int32 version = 1;
//!   oneof data { Experiment experiment = 2; SessionStartInfo session_start_info = 3;
//!                SessionEndInfo session_end_info = 4; }
//! }
//! message SessionStartInfo {
//!   map<string, google.protobuf.Value> hparams = 1; string model_uri = 2;
//!   string monitor_url = 3; string group_name = 4; double start_time_secs = 5;
//! }
//! message SessionEndInfo { Status status = 1; double end_time_secs = 2; }
//! enum Status { STATUS_UNKNOWN = 0; STATUS_SUCCESS = 1; STATUS_FAILURE = 2; STATUS_RUNNING = 3; }
//! message Value { oneof kind { NullValue null_value = 1; double number_value = 2;
//!                 string string_value = 3; bool bool_value = 4; ... } }
//! ```
//!
//! Each is one `Summary.Value` at step 0: tag `_hparams_/session_start_info` or
//! `_hparams_/session_end_info`, `plugin_name = "hparams"`, `content` = the serialized
//! `HParamsPluginData` (version 0), and TensorBoard's `NULL_TENSOR` (an empty `DT_FLOAT`
//! vector of shape `[0]`). A session is the run directory holding these events; the dashboard
//! finds its metrics in the scalar series of that directory's sub-runs (`train`,
//! `validation`).

use std::collections::BTreeMap;

use prost::Message;
use serde::{Deserialize, Serialize};

use super::EventWriter;
use super::proto::{
    DT_FLOAT, Dim, Event, PluginData, Summary, SummaryMetadata, TensorProto, TensorShapeProto,
    Value, ValueKind, What,
};
use super::writer::now;
use crate::error::Result;

/// `metadata.PLUGIN_NAME` of the HParams plugin.
pub const HPARAMS_PLUGIN: &str = "hparams";
/// `metadata.SESSION_START_INFO_TAG`.
pub const SESSION_START_INFO_TAG: &str = "_hparams_/session_start_info";
/// `metadata.SESSION_END_INFO_TAG`.
pub const SESSION_END_INFO_TAG: &str = "_hparams_/session_end_info";

/// One hyperparameter value, as the HParams plugin stores it (`google.protobuf.Value`):
/// integers and floats both become `number_value` (a double), as `summary_v2.hparams_pb` does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HParamValue {
    /// `bool_value`.
    Bool(bool),
    /// `number_value` (exact up to 2^53).
    Int(i64),
    /// `number_value`.
    Float(f64),
    /// `string_value`.
    Str(String),
}

/// `tensorboard.hparams.Status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionStatus {
    /// `STATUS_SUCCESS = 1`: training ended normally (what Keras' callback writes).
    Success = 1,
    /// `STATUS_FAILURE = 2`.
    Failure = 2,
    /// `STATUS_RUNNING = 3`.
    Running = 3,
}

/// `tensorboard.hparams.HParamsPluginData`, the two kinds kiln writes.
#[derive(Clone, PartialEq, Message)]
pub struct HParamsPluginData {
    /// Field 1: `PLUGIN_DATA_VERSION` = 0.
    #[prost(int32, tag = "1")]
    pub version: i32,
    /// The `data` oneof.
    #[prost(oneof = "PluginDataKind", tags = "3, 4")]
    pub data: Option<PluginDataKind>,
}

/// `HParamsPluginData.data`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum PluginDataKind {
    /// Field 3.
    #[prost(message, tag = "3")]
    SessionStartInfo(SessionStartInfo),
    /// Field 4.
    #[prost(message, tag = "4")]
    SessionEndInfo(SessionEndInfo),
}

/// `tensorboard.hparams.SessionStartInfo`.
#[derive(Clone, PartialEq, Message)]
pub struct SessionStartInfo {
    /// Field 1: hyperparameter name → value.
    #[prost(btree_map = "string, message", tag = "1")]
    pub hparams: BTreeMap<String, ProtoValue>,
    /// Field 4: sessions with the same group name are one group (repeated trials).
    #[prost(string, tag = "4")]
    pub group_name: String,
    /// Field 5: seconds since the Unix epoch.
    #[prost(double, tag = "5")]
    pub start_time_secs: f64,
}

/// `tensorboard.hparams.SessionEndInfo`.
#[derive(Clone, PartialEq, Message)]
pub struct SessionEndInfo {
    /// Field 1: a [`SessionStatus`].
    #[prost(int32, tag = "1")]
    pub status: i32,
    /// Field 2: seconds since the Unix epoch.
    #[prost(double, tag = "2")]
    pub end_time_secs: f64,
}

/// `google.protobuf.Value`, the kinds hyperparameters use.
#[derive(Clone, PartialEq, Message)]
pub struct ProtoValue {
    /// The `kind` oneof.
    #[prost(oneof = "ProtoValueKind", tags = "2, 3, 4")]
    pub kind: Option<ProtoValueKind>,
}

/// `google.protobuf.Value.kind`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ProtoValueKind {
    /// Field 2.
    #[prost(double, tag = "2")]
    NumberValue(f64),
    /// Field 3.
    #[prost(string, tag = "3")]
    StringValue(String),
    /// Field 4.
    #[prost(bool, tag = "4")]
    BoolValue(bool),
}

impl From<&HParamValue> for ProtoValue {
    fn from(v: &HParamValue) -> ProtoValue {
        let kind = match v {
            HParamValue::Bool(b) => ProtoValueKind::BoolValue(*b),
            HParamValue::Int(i) => ProtoValueKind::NumberValue(*i as f64),
            HParamValue::Float(f) => ProtoValueKind::NumberValue(*f),
            HParamValue::Str(s) => ProtoValueKind::StringValue(s.clone()),
        };
        ProtoValue { kind: Some(kind) }
    }
}

/// The session group name for `hparams`: FNV-1a (64-bit, hex) of their canonical JSON (keys
/// sorted). TensorBoard's `_derive_session_group_name` uses SHA-256 of Python's JSON; the name
/// only groups sessions with equal hyperparameters, which this does too.
pub fn group_name(hparams: &BTreeMap<String, HParamValue>) -> String {
    let json = serde_json::to_string(hparams).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in json.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Writes one HParams summary (`tag`, `data`) at step 0, as `summary_v2._summary_pb`.
fn write(writer: &mut EventWriter, tag: &str, data: PluginDataKind) -> Result<()> {
    let content = HParamsPluginData {
        version: 0,
        data: Some(data),
    }
    .encode_to_vec();
    let value = Value {
        tag: tag.to_string(),
        metadata: Some(SummaryMetadata {
            plugin_data: Some(PluginData {
                plugin_name: HPARAMS_PLUGIN.to_string(),
                content,
            }),
            display_name: String::new(),
            summary_description: String::new(),
            data_class: 0,
        }),
        // metadata.NULL_TENSOR: DT_FLOAT, shape [0], no values.
        value: Some(ValueKind::Tensor(TensorProto {
            dtype: DT_FLOAT,
            tensor_shape: Some(TensorShapeProto {
                dim: vec![Dim { size: 0 }],
            }),
            tensor_content: Vec::new(),
            float_val: Vec::new(),
            double_val: Vec::new(),
        })),
    };
    writer.write_event(&Event {
        wall_time: now(),
        step: 0,
        what: Some(What::Summary(Summary { value: vec![value] })),
        source_metadata: None,
    })
}

impl EventWriter {
    /// Writes the HParams `session_start_info` for `hparams` (group name from
    /// [`group_name`], start time now), as `summary_v2.hparams(hparams)`.
    ///
    /// # Errors
    /// [`crate::KilnError::Io`] when writing fails.
    pub fn add_hparams_session_start(
        &mut self,
        hparams: &BTreeMap<String, HParamValue>,
    ) -> Result<()> {
        let info = SessionStartInfo {
            hparams: hparams
                .iter()
                .map(|(k, v)| (k.clone(), ProtoValue::from(v)))
                .collect(),
            group_name: group_name(hparams),
            start_time_secs: now(),
        };
        write(
            self,
            SESSION_START_INFO_TAG,
            PluginDataKind::SessionStartInfo(info),
        )
    }

    /// Writes the HParams `session_end_info` with `status` (end time now), as
    /// `summary.session_end_pb(status)`.
    ///
    /// # Errors
    /// [`crate::KilnError::Io`] when writing fails.
    pub fn add_hparams_session_end(&mut self, status: SessionStatus) -> Result<()> {
        let info = SessionEndInfo {
            status: status as i32,
            end_time_secs: now(),
        };
        write(
            self,
            SESSION_END_INFO_TAG,
            PluginDataKind::SessionEndInfo(info),
        )
    }
}

impl Value {
    /// The HParams plugin data of this value, when it is an HParams summary.
    pub fn as_hparams(&self) -> Option<HParamsPluginData> {
        let data = self.metadata.as_ref()?.plugin_data.as_ref()?;
        if data.plugin_name != HPARAMS_PLUGIN {
            return None;
        }
        HParamsPluginData::decode(data.content.as_slice()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::read_events;

    #[test]
    fn session_start_and_end_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        let hparams: BTreeMap<String, HParamValue> = [
            ("learning_rate".to_string(), HParamValue::Float(1e-3)),
            ("units".to_string(), HParamValue::Int(64)),
            ("optimizer".to_string(), HParamValue::Str("adam".into())),
            ("bias".to_string(), HParamValue::Bool(true)),
        ]
        .into();
        w.add_hparams_session_start(&hparams).unwrap();
        w.add_hparams_session_end(SessionStatus::Success).unwrap();
        let path = w.path().to_path_buf();
        w.close().unwrap();
        let events = read_events(&path).unwrap();
        let values: Vec<&Value> = events.iter().flat_map(|e| e.values()).collect();
        assert_eq!(values.len(), 2);
        assert_eq!(values[0].tag, SESSION_START_INFO_TAG);
        let Some(PluginDataKind::SessionStartInfo(start)) = values[0].as_hparams().unwrap().data
        else {
            panic!("no session_start_info");
        };
        assert_eq!(
            start.hparams["units"].kind,
            Some(ProtoValueKind::NumberValue(64.0))
        );
        assert_eq!(
            start.hparams["optimizer"].kind,
            Some(ProtoValueKind::StringValue("adam".into()))
        );
        assert_eq!(start.hparams.len(), 4);
        assert_eq!(start.group_name, group_name(&hparams));
        assert!(start.start_time_secs > 1.6e9);
        let Some(PluginDataKind::SessionEndInfo(end)) = values[1].as_hparams().unwrap().data else {
            panic!("no session_end_info");
        };
        assert_eq!(end.status, 1);
        // Different values, different group.
        let mut other = hparams.clone();
        other.insert("units".into(), HParamValue::Int(65));
        assert_ne!(group_name(&other), group_name(&hparams));
    }
}
