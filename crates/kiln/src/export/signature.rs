//! The signature of an exported model: input and output names, dtypes and shapes, as a
//! TensorFlow SavedModel's `serving_default` signature.
//!
//! The JSON is the proto3 JSON mapping of TensorFlow's `SignatureDefMap`
//! (`tensorflow/core/protobuf/meta_graph.proto`: `SignatureDef { map<string, TensorInfo>
//! inputs = 1; map<string, TensorInfo> outputs = 2; string method_name = 3; }`, `TensorInfo {
//! string name = 1; DataType dtype = 2; TensorShapeProto tensor_shape = 3; }`), which is what
//! TF Serving's `GET /v1/models/<name>/metadata` returns under `metadata.signature_def`:
//!
//! ```json
//! {"signature_def": {"serving_default": {
//!   "inputs": {"input_layer": {"dtype": "DT_FLOAT", "name": "serving_default_input_layer:0",
//!     "tensor_shape": {"dim": [{"size": "-1", "name": ""}, {"size": "784", "name": ""}],
//!                      "unknown_rank": false}}},
//!   "outputs": {"output_0": {...}},
//!   "method_name": "tensorflow/serving/predict"}}}
//! ```
//!
//! Sizes are strings (proto3 JSON writes int64 as strings); `-1` is the dynamic batch axis.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::onnx::{INPUT_NAME, OUTPUT_NAME};
use crate::model::ModelSpec;

/// The signature key TF Serving uses when a request names none.
pub const DEFAULT_SIGNATURE: &str = "serving_default";
/// `SignatureDef.method_name` of a predict signature (`tensorflow/cc/saved_model/
/// signature_constants.h`: `kPredictMethodName`).
pub const PREDICT_METHOD: &str = "tensorflow/serving/predict";

/// `TensorShapeProto.Dim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dim {
    /// The size as a decimal string; `"-1"` for the dynamic batch axis.
    pub size: String,
    /// Optional axis name (empty).
    #[serde(default)]
    pub name: String,
}

/// `TensorShapeProto`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorShape {
    /// Axes, batch first.
    pub dim: Vec<Dim>,
    /// Always false: kiln's shapes are known.
    #[serde(default)]
    pub unknown_rank: bool,
}

/// `TensorInfo`: one input or output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorInfo {
    /// `DT_FLOAT` (float32) for every kiln model.
    pub dtype: String,
    /// Shape with the batch axis (`-1`).
    pub tensor_shape: TensorShape,
    /// The graph tensor's name (`serving_default_input_layer:0`, as a SavedModel names it).
    pub name: String,
}

impl TensorInfo {
    /// A float32 tensor `[batch, ...shape]`.
    pub fn float(tensor: &str, shape: &[usize]) -> TensorInfo {
        let mut dim = vec![Dim {
            size: "-1".into(),
            name: String::new(),
        }];
        dim.extend(shape.iter().map(|d| Dim {
            size: d.to_string(),
            name: String::new(),
        }));
        TensorInfo {
            dtype: "DT_FLOAT".into(),
            tensor_shape: TensorShape {
                dim,
                unknown_rank: false,
            },
            name: tensor.into(),
        }
    }

    /// The shape without the batch axis, or `None` when a size is not a positive integer.
    pub fn example_shape(&self) -> Option<Vec<usize>> {
        self.tensor_shape
            .dim
            .iter()
            .skip(1)
            .map(|d| d.size.parse::<usize>().ok().filter(|&v| v > 0))
            .collect()
    }
}

/// `SignatureDef`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignatureDef {
    /// Inputs by name.
    pub inputs: BTreeMap<String, TensorInfo>,
    /// Outputs by name.
    pub outputs: BTreeMap<String, TensorInfo>,
    /// [`PREDICT_METHOD`].
    pub method_name: String,
}

/// `SignatureDefMap`: the content of `signature.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignatureDefMap {
    /// Signatures by key ([`DEFAULT_SIGNATURE`]).
    pub signature_def: BTreeMap<String, SignatureDef>,
}

impl SignatureDefMap {
    /// The `serving_default` signature of `spec`: input [`INPUT_NAME`] `[-1, ...input shape]`,
    /// output [`OUTPUT_NAME`] `[-1, ...output shape]`, float32.
    pub fn for_spec(spec: &ModelSpec) -> SignatureDefMap {
        let def = SignatureDef {
            inputs: BTreeMap::from([(
                INPUT_NAME.to_string(),
                TensorInfo::float(
                    &format!("{DEFAULT_SIGNATURE}_{INPUT_NAME}:0"),
                    spec.input_shape(),
                ),
            )]),
            outputs: outputs(spec),
            method_name: PREDICT_METHOD.into(),
        };
        SignatureDefMap {
            signature_def: BTreeMap::from([(DEFAULT_SIGNATURE.to_string(), def)]),
        }
    }
}

/// The signature's outputs: [`OUTPUT_NAME`] for a model with one output; for a model with
/// several, each under its layer name (`StatefulPartitionedCall:<k>`, as a SavedModel of a
/// Keras model with dict outputs lists them).
fn outputs(spec: &ModelSpec) -> BTreeMap<String, TensorInfo> {
    if !spec.has_several_outputs() {
        let info = TensorInfo::float("StatefulPartitionedCall:0", spec.output_shape());
        return BTreeMap::from([(OUTPUT_NAME.to_string(), info)]);
    }
    spec.output_layers()
        .iter()
        .enumerate()
        .map(|(k, &o)| {
            let info =
                TensorInfo::float(&format!("StatefulPartitionedCall:{k}"), spec.shape_after(o));
            (spec.layers()[o].name.clone(), info)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Activation, LayerKind};

    #[test]
    fn signature_json_has_tf_servings_layout() {
        let spec = ModelSpec::builder(&[28, 28, 1])
            .add(LayerKind::from(crate::model::layers::Flatten {}))
            .add(LayerKind::from(crate::model::layers::Dense {
                units: 10,
                activation: Activation::Softmax,
                use_bias: true,
            }))
            .build()
            .unwrap();
        let sig = SignatureDefMap::for_spec(&spec);
        let json = serde_json::to_value(&sig).unwrap();
        let input = &json["signature_def"]["serving_default"]["inputs"]["input_layer"];
        assert_eq!(input["dtype"], "DT_FLOAT");
        let sizes: Vec<&str> = input["tensor_shape"]["dim"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["size"].as_str().unwrap())
            .collect();
        assert_eq!(sizes, ["-1", "28", "28", "1"]);
        assert_eq!(
            json["signature_def"]["serving_default"]["outputs"]["output_0"]["tensor_shape"]["dim"]
                [1]["size"],
            "10"
        );
        assert_eq!(
            json["signature_def"]["serving_default"]["method_name"],
            "tensorflow/serving/predict"
        );
        let back: SignatureDefMap = serde_json::from_value(json).unwrap();
        assert_eq!(back, sig);
        assert_eq!(
            back.signature_def["serving_default"].inputs["input_layer"].example_shape(),
            Some(vec![28, 28, 1])
        );
    }
}
