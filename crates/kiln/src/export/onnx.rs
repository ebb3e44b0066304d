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
//! the moving statistics. Layers declared through [`crate::model::Layer`] write their own part
//! ([`crate::model::Layer::onnx`]); a layer without a mapping (a custom layer that does not
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
//! | `GlobalAveragePooling2D` | `GlobalAveragePool` + `Flatten` |
//! | `Embedding` | `Clip` + `Cast` (int64) + `Gather` |
//! | `PositionEmbedding` | `Slice` of the table + `Expand` to the input's shape |

use prost::Message;

use super::onnx_proto::{
    GraphProto, ModelProto, OperatorSetIdProto, StringStringEntryProto, ValueInfoProto,
};
use crate::error::{KilnError, Result};
use crate::model::weights::hwio_to_oihw;
use crate::model::{Activation, LayerKind, ModelSpec, NodeRef, Padding, Pair};
use crate::onnx::{Layout, OnnxGraph, OnnxValue, float, int, ints, value_info};

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

fn activation(g: &mut OnnxGraph, layer: &str, x: String, a: Activation, layout: Layout) -> String {
    match a {
        Activation::Linear => x,
        Activation::Relu => g.node(layer, "Relu", &[&x], vec![]),
        Activation::Sigmoid => g.node(layer, "Sigmoid", &[&x], vec![]),
        Activation::Tanh => g.node(layer, "Tanh", &[&x], vec![]),
        // kiln's softmax runs over the feature (channel) axis.
        Activation::Softmax => g.node(
            layer,
            "Softmax",
            &[&x],
            vec![int("axis", layout.feature_axis())],
        ),
        Activation::Gelu => {
            // Exact GELU (Keras' `gelu(approximate=False)`): x * 0.5 * (1 + erf(x / sqrt 2)).
            let sqrt2 = g.scalar(layer, std::f32::consts::SQRT_2);
            let one = g.scalar(layer, 1.0);
            let half = g.scalar(layer, 0.5);
            let d = g.node(layer, "Div", &[&x, &sqrt2], vec![]);
            let e = g.node(layer, "Erf", &[&d], vec![]);
            let p = g.node(layer, "Add", &[&e, &one], vec![]);
            let m = g.node(layer, "Mul", &[&x, &p], vec![]);
            g.node(layer, "Mul", &[&m, &half], vec![])
        }
    }
}

/// Runs `f` on `x` in channels-last order when `x` is an NCHW image (a map over the last axis).
fn channels_last(
    g: &mut OnnxGraph,
    layer: &str,
    x: &OnnxValue,
    f: impl FnOnce(&mut OnnxGraph, &str) -> std::result::Result<String, String>,
) -> std::result::Result<String, String> {
    if x.layout() != Layout::Image {
        return f(g, &x.name);
    }
    let t = g.transpose(layer, &x.name, &[0, 2, 3, 1]);
    let y = f(g, &t)?;
    Ok(g.transpose(layer, &y, &[0, 3, 1, 2]))
}

/// `[top, left, bottom, right]` padding of a window over an NCHW value of spatial size `hw`.
fn pads(padding: Padding, hw: &[usize], k: [usize; 2], s: [usize; 2]) -> Vec<i64> {
    let (_, (t, b)) = padding.resolve(hw[0], k[0], s[0]).expect("shape checked");
    let (_, (l, r)) = padding.resolve(hw[1], k[1], s[1]).expect("shape checked");
    vec![t as i64, l as i64, b as i64, r as i64]
}

fn pair(v: [usize; 2]) -> Vec<i64> {
    vec![v[0] as i64, v[1] as i64]
}

type LayerResult = std::result::Result<String, String>;

fn conv2d(g: &mut OnnxGraph, spec: &ModelSpec, i: usize, x: &OnnxValue) -> LayerResult {
    let n = spec.layers()[i].name.as_str();
    let LayerKind::Conv2D {
        filters,
        kernel_size,
        strides,
        padding,
        activation: act,
        use_bias,
    } = &spec.layers()[i].kind
    else {
        unreachable!("called for Conv2D")
    };
    let ([kh, kw], cin) = (kernel_size.0, x.shape[2]);
    let hwio = g.weight_values(&format!("{n}/kernel"), &[kh, kw, cin, *filters])?;
    let oihw = hwio_to_oihw(hwio, [kh, kw, cin, *filters]);
    let w = g.named_constant(&format!("{n}/kernel"), &[*filters, cin, kh, kw], &oihw);
    let mut inputs = vec![x.name.clone(), w];
    if *use_bias {
        inputs.push(g.weight(&format!("{n}/bias"), &[*filters], &[*filters])?);
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let attrs = vec![
        ints("kernel_shape", &pair(kernel_size.0)),
        ints("strides", &pair(strides.0)),
        ints("pads", &pads(*padding, &x.shape, kernel_size.0, strides.0)),
        ints("dilations", &[1, 1]),
        int("group", 1),
    ];
    let y = g.node(n, "Conv", &refs, attrs);
    Ok(activation(g, n, y, *act, Layout::Image))
}

/// `MaxPool` or `AveragePool` (`op`) of window `pool` with `strides` (`pool` when absent).
fn pool(
    g: &mut OnnxGraph,
    n: &str,
    op: &str,
    (pool, strides, padding): (&Pair, &Option<Pair>, &Padding),
    x: &OnnxValue,
) -> String {
    let s = strides.unwrap_or(*pool).0;
    let mut attrs = vec![
        ints("kernel_shape", &pair(pool.0)),
        ints("strides", &pair(s)),
        ints("pads", &pads(*padding, &x.shape, pool.0, s)),
    ];
    if op == "AveragePool" {
        // TensorFlow does not count padded positions in the average.
        attrs.push(int("count_include_pad", 0));
    }
    g.node(n, op, &[&x.name], attrs)
}

fn flatten(g: &mut OnnxGraph, n: &str, x: &OnnxValue) -> String {
    let flat = |g: &mut OnnxGraph, v: &str| g.node(n, "Flatten", &[v], vec![int("axis", 1)]);
    match x.layout() {
        Layout::Flat => x.name.clone(),
        Layout::Seq => flat(g, &x.name),
        Layout::Image => {
            let t = g.transpose(n, &x.name, &[0, 2, 3, 1]);
            flat(g, &t)
        }
    }
}

fn batch_norm(g: &mut OnnxGraph, n: &str, epsilon: f64, x: &OnnxValue) -> LayerResult {
    let c = x.shape.last().copied().unwrap_or(0);
    let mut inputs = vec![x.name.clone()];
    for part in ["gamma", "beta", "moving_mean", "moving_variance"] {
        inputs.push(g.weight(&format!("{n}/{part}"), &[c], &[c])?);
    }
    let attrs = vec![float("epsilon", epsilon as f32)];
    if x.layout() != Layout::Seq {
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        return Ok(g.node(n, "BatchNormalization", &refs, attrs));
    }
    // ONNX normalizes axis 1: [n, s, f] -> [n, f, s] and back.
    inputs[0] = g.transpose(n, &x.name, &[0, 2, 1]);
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let y = g.node(n, "BatchNormalization", &refs, attrs);
    Ok(g.transpose(n, &y, &[0, 2, 1]))
}

/// Writes layer `i` of `spec` reading `xs`; returns its output value's name or why it cannot.
fn layer_onnx(g: &mut OnnxGraph, spec: &ModelSpec, i: usize, xs: &[OnnxValue]) -> LayerResult {
    let layer = &spec.layers()[i];
    let (n, x) = (layer.name.as_str(), &xs[0]);
    let cin = x.shape.last().copied().unwrap_or(0);
    Ok(match &layer.kind {
        LayerKind::Input { .. } | LayerKind::Dropout { .. } => x.name.clone(),
        LayerKind::Dense {
            units,
            activation: act,
            use_bias,
        } => {
            let prefix = format!("{n}/");
            let y = channels_last(g, n, x, |g, v| {
                g.dense(&prefix, v, [cin, *units], *use_bias)
            })?;
            activation(g, n, y, *act, x.layout())
        }
        LayerKind::Conv2D { .. } => conv2d(g, spec, i, x)?,
        LayerKind::MaxPooling2D {
            pool_size: p,
            strides: s,
            padding,
        } => pool(g, n, "MaxPool", (p, s, padding), x),
        LayerKind::AveragePooling2D {
            pool_size: p,
            strides: s,
            padding,
        } => pool(g, n, "AveragePool", (p, s, padding), x),
        LayerKind::Flatten {} => flatten(g, n, x),
        LayerKind::BatchNormalization { epsilon, .. } => batch_norm(g, n, *epsilon, x)?,
        LayerKind::Activation { activation: act } => {
            activation(g, n, x.name.clone(), *act, x.layout())
        }
        LayerKind::LayerNormalization { epsilon } => {
            let prefix = format!("{n}/");
            channels_last(g, n, x, |g, v| g.layer_norm(&prefix, v, cin, *epsilon))?
        }
        LayerKind::MultiHeadAttention { .. } | LayerKind::TransformerEncoder { .. } => {
            super::onnx_transformer::layer(g, n, &layer.kind, xs, activation)?
        }
        LayerKind::Declared(l) => l.onnx(g, xs, n)?,
    })
}

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
            if value.layout() == Layout::Image {
                value.name = g.transpose(public, public, &[0, 3, 1, 2]);
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
    if value.layout() == Layout::Image {
        v = g.transpose(name, &v, &[0, 2, 3, 1]);
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
    let mut values: Vec<OnnxValue> = Vec::with_capacity(spec.layers().len());
    for (i, layer) in spec.layers().iter().enumerate() {
        let xs: Vec<OnnxValue> = layer
            .inputs
            .iter()
            .map(|r| match *r {
                NodeRef::Input(k) => inputs[k].clone(),
                NodeRef::Layer(j) => values[j].clone(),
            })
            .collect();
        let name = layer_onnx(g, spec, i, &xs).map_err(|why| {
            KilnError::config(
                format!("model.layers[{}]", i + spec.inputs().len()),
                format!(
                    "layer `{}` ({}) cannot be exported to ONNX because {why}",
                    layer.name,
                    layer.kind.class_name()
                ),
            )
        })?;
        values.push(OnnxValue {
            name,
            shape: spec.shape_after(i).to_vec(),
        });
    }
    Ok(values)
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
/// [`KilnError::Config`] at `model.layers[k]`, naming the layer and its class, when a layer
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
