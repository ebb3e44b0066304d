//! A kiln model as an ONNX inference graph (opset 17).
//!
//! The graph takes the inputs as Keras users give them (`[batch, ...Input.shape]`, images
//! NHWC) and returns the model's output as Keras' `model.predict` does (`[batch, ...output
//! shape]`), with a dynamic batch axis named `batch`. A model with one `Input` names it
//! [`INPUT_NAME`] (as `kiln serve`'s signature does); a model with several names each after its
//! `Input` layer. Sequential stacks and functional graphs alike: the layers are written in
//! their order, each reading the values of its `inputs`. Inside, the graph follows kiln's
//! forward pass ([`crate::model::Network::forward`] in inference mode): images are transposed
//! to NCHW once after each input (ONNX `Conv` and pools are NCHW, as Burn's), `Flatten`
//! flattens in Keras' channels-last order, `Dropout` is the identity, `BatchNormalization` uses
//! the moving statistics. Every layer writes its own part ([`crate::model::Layer::onnx`], in
//! its file under `model/layers/`); a layer without a mapping (a custom layer that does not
//! implement it) is an error naming the layer and its class.
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
//! | `LayerNormalization` | `LayerNormalization(axis = -1)` (images: `Transpose` around it) |
//! | `MultiHeadAttention` | `MatMul` + `Add` projections, `Reshape`/`Transpose` into heads, `MatMul`, `Softmax`, `MatMul`, output projection |
//! | `TransformerEncoder` | attention as above, `Add`, `LayerNormalization`, two Dense maps, `Add`, `LayerNormalization` |
//! | `Add` | `Add` |
//! | `Concatenate` | `Concat` (images: Keras' axis in NCHW) |
//! | `Cropping1D` | `Slice` over the steps |
//! | `ZeroPadding2D` | `Pad` (constant zeros) |
//! | global pooling (`GlobalAveragePooling1D/2D`, `GlobalMaxPooling1D/2D`) | `ReduceMean`/`ReduceMax` (`keepdims`) |
//! | `Embedding` | `Clip` + `Cast` (int64) + `Gather` |
//! | `PositionEmbedding` | `Slice` of the table + `Expand` to the input's shape |

use prost::Message;

use super::onnx_proto::{
    GraphProto, ModelProto, OperatorSetIdProto, StringStringEntryProto, ValueInfoProto,
};
use crate::error::Result;
use crate::model::{LayerKind, ModelSpec};
use crate::onnx::{OnnxGraph, OnnxValue, value_info};

/// ONNX operator set version the graph uses.
pub const OPSET: i64 = 17;
/// ONNX IR version that goes with opset 17 (`onnx/onnx` docs/Versioning.md: IR 8 for opsets
/// 15 to 18).
pub const IR_VERSION: i64 = 8;
/// Name of the graph input of a one-input model (Keras 3 names the `Input` layer of a
/// Sequential model `input_layer`); a model with several inputs names each after its `Input`.
pub const INPUT_NAME: &str = "input_layer";
/// Name of the graph output (Keras 3's `model.export()` names a single output `output_0`).
pub const OUTPUT_NAME: &str = "output_0";
/// Symbolic name of the dynamic batch axis.
pub const BATCH_DIM: &str = crate::onnx::BATCH_DIM;

/// Writes layer `i` of `spec` reading `xs`; returns its output value's name or why it cannot.
fn layer_onnx(g: &mut OnnxGraph, spec: &ModelSpec, i: usize, xs: &[OnnxValue]) -> LayerResult {
    let layer = &spec.layers()[i];
    match &layer.kind {
        LayerKind::Input { .. } => Ok(xs[0].name.clone()),
        LayerKind::Declared(l) => l.onnx(g, xs, &layer.name),
    }
}

type LayerResult = std::result::Result<String, String>;

/// The graph inputs (`value_info`) and the values the layers read for them: images
/// transposed to NCHW.
fn graph_inputs(g: &mut OnnxGraph, spec: &ModelSpec) -> (Vec<ValueInfoProto>, Vec<OnnxValue>) {
    let one = spec.inputs().len() == 1;
    spec.inputs()
        .iter()
        .map(|(name, shape)| {
            let public = if one { INPUT_NAME } else { name.as_str() };
            let mut value = OnnxValue {
                name: public.to_string(),
                shape: shape.clone(),
            };
            if let Some(perm) = value.layout().from_channels_last() {
                value.name = g.transpose(public, public, perm);
            }
            (value_info(public, shape), value)
        })
        .unzip()
}

/// Makes `value` the graph output `name` (images back to NHWC); returns its description.
/// The output gets its public name through an `Identity`, so that every graph (even one
/// whose layers are all identities at inference) has distinct input and output values.
fn graph_output(g: &mut OnnxGraph, value: &OnnxValue, name: &str) -> ValueInfoProto {
    let mut v = value.name.clone();
    if let Some(perm) = value.layout().to_channels_last() {
        v = g.transpose(name, &v, perm);
    }
    g.node_into(name, "Identity", &[&v], name);
    value_info(name, &value.shape)
}

/// The ONNX values of every layer of `spec`, in order, after `inputs`' values.
fn layer_values(
    g: &mut OnnxGraph,
    spec: &ModelSpec,
    inputs: &[OnnxValue],
) -> Result<Vec<OnnxValue>> {
    let unwritten = "; export with --format safetensors";
    super::layer_values(spec, inputs, "ONNX", unwritten, |i, xs| {
        Ok(OnnxValue {
            name: layer_onnx(g, spec, i, &xs)?,
            shape: spec.shape_after(i).to_vec(),
        })
    })
}

/// `weights` plus, for each call of a shared layer (`shares`), the owner's weights under the
/// call's name, so that every node finds its weights by its own layer name (the file then
/// holds a shared layer's weights once per call).
fn with_shared_weights(
    spec: &ModelSpec,
    weights: &[(String, Vec<usize>, Vec<f32>)],
) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut all = weights.to_vec();
    for layer in spec.layers() {
        let Some(owner) = layer.shares else { continue };
        let prefix = format!("{}/", spec.layers()[owner].name);
        for (name, shape, values) in weights {
            if let Some(rest) = name.strip_prefix(&prefix) {
                all.push((
                    format!("{}/{rest}", layer.name),
                    shape.clone(),
                    values.clone(),
                ));
            }
        }
    }
    all
}

/// Builds the ONNX graph of `spec` with `weights` (Keras names and layouts, as
/// [`crate::model::weights::keras_weights`] returns them) as a `ModelProto`.
///
/// # Errors
/// [`crate::KilnError::Config`] at `model.layers[k]`, naming the layer and its class, when a layer
/// cannot be exported (a custom layer without an ONNX mapping, or whose mapping asks for a
/// weight it does not have).
pub fn model_proto(
    name: &str,
    spec: &ModelSpec,
    weights: &[(String, Vec<usize>, Vec<f32>)],
    model_version: i64,
) -> Result<ModelProto> {
    let weights = with_shared_weights(spec, weights);
    let mut g = OnnxGraph::new(&weights);
    let (input, input_values) = graph_inputs(&mut g, spec);
    let values = layer_values(&mut g, spec, &input_values)?;
    // One output keeps the public name `output_0`; several are named after their layers.
    let output = match spec.output_layers() {
        [one] => vec![graph_output(&mut g, &values[*one], OUTPUT_NAME)],
        several => several
            .iter()
            .map(|&o| graph_output(&mut g, &values[o], &spec.layers()[o].name))
            .collect(),
    };
    let described: Vec<String> = input
        .iter()
        .zip(spec.inputs())
        .map(|(v, (_, shape))| {
            let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            format!(
                "{} [batch, {}]",
                v.name.as_deref().unwrap_or(""),
                dims.join(", ")
            )
        })
        .collect();
    let outputs: Vec<&str> = output
        .iter()
        .map(|v| v.name.as_deref().unwrap_or(""))
        .collect();
    let doc_outputs = outputs.join(", ");
    let (node, initializer) = g.into_parts();
    let graph = GraphProto {
        node,
        name: Some(name.to_string()),
        initializer,
        doc_string: Some(format!("kiln model {name}")),
        input,
        output,
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
            "{name}: exported by kiln from a Keras-style model; input {} (channels-last), \
             output {}",
            described.join(", "),
            doc_outputs
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
