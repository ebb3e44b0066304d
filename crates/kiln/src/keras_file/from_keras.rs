//! Keras 3's `config.json` read into kiln's `[model]` and `[compile]` TOML tables, which kiln's
//! own config reader then checks exactly as if a user had written them.
//!
//! - `Sequential` → a stack; `Functional` → layers with `inputs` from each layer's
//!   `inbound_nodes` (`__keras_tensor__` `keras_history`, and Keras 2's `[name, node, index,
//!   kwargs]` lists) and `outputs` from `output_layers`.
//! - `InputLayer` → `Input` with `shape = batch_shape[1:]`.
//! - Arguments keep their Keras names; initializers, regularizers and constraints keep Keras'
//!   `{class_name, config}` form, which kiln reads (a wrapped layer's initializers are dropped:
//!   kiln keeps per-weight options on the wrapper, and the file's weights replace their draws).
//! - Arguments left at a Keras default kiln does not spell out (`data_format =
//!   "channels_last"`, `dilation_rate = 1`, `groups = 1`, any `null`) are dropped; any other
//!   argument kiln does not take is refused by kiln's reader, naming the layer and argument.
//! - Refused: a nested model, a shared layer (a layer called on several inbound nodes), a call
//!   with tensors as keyword arguments.

use serde_json::{Map, Value};

use crate::model::layer::snake_case;

/// `what` went wrong; the caller adds the file and the entry.
pub(super) type Refusal = String;

/// A JSON value as TOML (`null` has no TOML form: `None`).
fn toml_of(v: &Value) -> Option<toml::Value> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(a) => toml::Value::Array(a.iter().filter_map(toml_of).collect()),
        Value::Object(o) => toml::Value::Table(keras_object(o)),
    })
}

/// A serialized Keras object (`{module, class_name, config, registered_name}`) as the table
/// kiln reads: `class_name` and the config's non-null entries; other objects as they are.
fn keras_object(o: &Map<String, Value>) -> toml::Table {
    let mut t = toml::Table::new();
    let source = match (o.get("class_name"), o.get("config")) {
        (Some(Value::String(c)), Some(Value::Object(config))) => {
            t.insert("class_name".into(), toml::Value::String(c.clone()));
            config
        }
        _ => o,
    };
    for (k, v) in source {
        if matches!(
            k.as_str(),
            "module" | "registered_name" | "shared_object_id"
        ) {
            continue;
        }
        if let Some(v) = toml_of(v) {
            t.insert(k.clone(), v);
        }
    }
    t
}

/// Whether `value` is Keras' default for an argument kiln leaves unwritten.
fn is_unwritten_default(key: &str, value: &Value) -> bool {
    let all_ones = |v: &Value| match v {
        Value::Array(a) => a.iter().all(|x| x.as_i64() == Some(1)),
        other => other.as_i64() == Some(1),
    };
    let is_false = value == &Value::Bool(false);
    match key {
        "data_format" => value == "channels_last",
        "dilation_rate" => all_ones(value),
        "groups" => value.as_i64() == Some(1),
        // Recurrent layers, MultiHeadAttention, BatchNormalization, global pooling.
        "zero_output_for_mask"
        | "use_gate"
        | "synchronized"
        | "renorm"
        | "keepdims"
        | "rms_scaling" => is_false,
        // LayerNormalization and BatchNormalization: a shift and a scale, on the last axis.
        "center" | "scale" => value == &Value::Bool(true),
        "axis" => value.as_i64() == Some(-1) || value == &serde_json::json!([-1]),
        // Only read with `renorm = true`, which kiln refuses.
        "renorm_momentum" => true,
        // Keras' default for a sequence: attend over the steps.
        "attention_axes" => value == &serde_json::json!([1]) || value.is_null(),
        "trainable" | "name" | "dtype" | "build_config" => true,
        _ => value.is_null(),
    }
}

/// Whether `key` is an option (initializer, regularizer, constraint) of a weight the layer does
/// not create: Keras writes `bias_initializer` even with `use_bias = false` (and `beta_*`,
/// `gamma_*` with BatchNormalization's `center`/`scale` off).
fn absent_weight_option(key: &str, config: &Map<String, Value>) -> bool {
    let off = |flag: &str| config.get(flag) == Some(&Value::Bool(false));
    let option = ["_initializer", "_regularizer", "_constraint"]
        .iter()
        .find_map(|s| key.strip_suffix(s));
    match option {
        Some("bias") => off("use_bias"),
        Some("beta") => off("center"),
        Some("gamma") => off("scale"),
        _ => false,
    }
}

/// The dtype policy name of a layer config (`float32` when absent).
fn policy_name(config: &Map<String, Value>) -> Option<String> {
    match config.get("dtype")? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o
            .get("config")
            .and_then(|c| c.get("name"))
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
    }
}

/// The class name and config of a serialized layer.
fn class_and_config(layer: &Value) -> Result<(String, Map<String, Value>), Refusal> {
    let class = layer["class_name"]
        .as_str()
        .ok_or("a layer without a \"class_name\"")?
        .to_string();
    let config = layer["config"]
        .as_object()
        .cloned()
        .ok_or_else(|| format!("layer of class {class} without a \"config\" object"))?;
    Ok((class, config))
}

/// The kiln table of one serialized layer (without `inputs`).
fn layer_table(layer: &Value) -> Result<toml::Table, Refusal> {
    let (class, config) = class_and_config(layer)?;
    let name = config
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut t = toml::Table::new();
    if class == "InputLayer" {
        let shape = config
            .get("batch_shape")
            .or_else(|| config.get("batch_input_shape"))
            .and_then(Value::as_array)
            .ok_or_else(|| format!("InputLayer \"{name}\" without a batch_shape"))?;
        let dims: Option<Vec<toml::Value>> = shape[1..]
            .iter()
            .map(|d| d.as_i64().map(toml::Value::Integer))
            .collect();
        let dims = dims.ok_or_else(|| {
            format!("InputLayer \"{name}\": every axis but the batch needs a size, got {shape:?}")
        })?;
        t.insert("type".into(), "Input".into());
        t.insert("shape".into(), toml::Value::Array(dims));
        t.insert("name".into(), name.into());
        return Ok(t);
    }
    if matches!(class.as_str(), "Sequential" | "Functional" | "Model") {
        return Err(format!(
            "layer \"{name}\" is a nested model ({class}); kiln imports one level of layers: \
             rebuild the model flat in Keras before saving"
        ));
    }
    if crate::model::registry::lookup(&class).is_none() {
        let what = match class.as_str() {
            "Lambda" => "a Lambda (Python code)".to_string(),
            _ => format!("the class {class}, which kiln does not have (a custom layer?)"),
        };
        return Err(format!(
            "layer \"{name}\" ({class}) is {what}; build it from kiln's layers \
             (docs/layers.md) or register a Rust layer of that class name \
             (examples/custom-layer)"
        ));
    }
    t.insert("type".into(), class.clone().into());
    if !name.is_empty() {
        t.insert("name".into(), name.into());
    }
    if config.get("trainable") == Some(&Value::Bool(false)) {
        t.insert("trainable".into(), false.into());
    }
    if let Some(p) = policy_name(&config).filter(|p| p != "float32") {
        t.insert("dtype".into(), p.into());
    }
    for (k, v) in &config {
        let skip = is_unwritten_default(k, v)
            || absent_weight_option(k, &config)
            || (k == "backward_layer" && mirrors(v, config.get("layer").unwrap_or(&Value::Null)));
        if skip {
            continue;
        }
        if matches!(k.as_str(), "layer" | "backward_layer") && v.get("class_name").is_some() {
            // A wrapper's layer (Bidirectional, TimeDistributed): `{ type = ..., … }`.
            let mut inner = layer_table(v)?;
            // kiln keeps per-weight options on the wrapper, not on the wrapped layer: the
            // wrapped layer's initializers go (the file's weights replace what they draw).
            // Bidirectional sets `zero_output_for_mask` on its layers itself (true when they
            // return sequences): not an argument of the wrapped layer in kiln.
            inner.remove("zero_output_for_mask");
            inner.retain(|k, _| {
                !matches!(k, "name" | "trainable" | "dtype") && !k.ends_with("_initializer")
            });
            t.insert(k.clone(), toml::Value::Table(inner));
        } else if let Some(v) = toml_of(v) {
            t.insert(k.clone(), v);
        }
    }
    Ok(t)
}

/// Whether a Bidirectional's `backward_layer` is the one Keras builds by default: its
/// `layer` run backwards (the same config but for `name` and `go_backwards`).
fn mirrors(backward: &Value, forward: &Value) -> bool {
    // Compared as kiln reads them: without `shared_object_id` and other bookkeeping.
    let strip = |v: &Value| {
        let mut c = keras_object(v["config"].as_object()?);
        c.remove("name");
        c.remove("go_backwards");
        Some((v["class_name"].clone(), c))
    };
    strip(backward) == strip(forward)
}

/// The input names of a layer's call, from its `inbound_nodes`.
fn inbound(layer: &Value, name: &str) -> Result<Vec<String>, Refusal> {
    let nodes = layer["inbound_nodes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if nodes.len() > 1 {
        return Err(format!(
            "layer \"{name}\" is shared (called {} times); kiln does not import shared layers yet",
            nodes.len()
        ));
    }
    let Some(node) = nodes.first() else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    match node {
        // Keras 3: {"args": [...], "kwargs": {...}}.
        Value::Object(o) => {
            for a in o
                .get("args")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                collect_tensors(a, &mut names);
            }
            let mut kw = Vec::new();
            for v in o
                .get("kwargs")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                collect_tensors(v.1, &mut kw);
            }
            if !kw.is_empty() {
                return Err(format!(
                    "layer \"{name}\" is called with tensors as keyword arguments ({}); call it \
                     with positional arguments in Keras",
                    kw.join(", ")
                ));
            }
        }
        // Keras 2: [[name, node_index, tensor_index, kwargs], ...].
        Value::Array(list) => {
            for entry in list {
                if let Some(history) = entry.as_array() {
                    names.push(history_name(history));
                }
            }
        }
        _ => {}
    }
    Ok(names)
}

/// `name` or `name:k` for a `keras_history` `[name, node_index, tensor_index]`.
fn history_name(history: &[Value]) -> String {
    let layer = history.first().and_then(Value::as_str).unwrap_or_default();
    match history.get(2).and_then(Value::as_i64).unwrap_or(0) {
        0 => layer.to_string(),
        k => format!("{layer}:{k}"),
    }
}

/// The `__keras_tensor__` names in `v` (a tensor, or nested lists of them), in order.
fn collect_tensors(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Array(a) => a.iter().for_each(|x| collect_tensors(x, out)),
        Value::Object(o) if o.get("class_name") == Some(&Value::from("__keras_tensor__")) => {
            if let Some(h) = o.get("config").and_then(|c| c["keras_history"].as_array()) {
                out.push(history_name(h));
            }
        }
        _ => {}
    }
}

/// The `[model]` table of a serialized model (`config.json`'s top level).
///
/// # Errors
/// Why the model cannot be imported (the layer's name and class, what is missing).
pub(super) fn model_table(model: &Value) -> Result<toml::Table, Refusal> {
    let (class, config) = class_and_config(model)?;
    let layers = config
        .get("layers")
        .and_then(Value::as_array)
        .ok_or("the model config has no \"layers\" list")?;
    let mut entries = Vec::new();
    let mut t = toml::Table::new();
    match class.as_str() {
        "Sequential" => {
            let first_is_input = layers
                .first()
                .is_some_and(|l| l["class_name"] == "InputLayer");
            let mut layers = layers.clone();
            if !first_is_input {
                entries.push(sequential_input(model, layers.first_mut())?);
            }
            for l in &layers {
                entries.push(toml::Value::Table(layer_table(l)?));
            }
        }
        "Functional" | "Model" => {
            for l in layers {
                let mut table = layer_table(l)?;
                let name = table
                    .get("name")
                    .and_then(toml::Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let inputs = inbound(l, &name)?;
                if table["type"].as_str() != Some("Input") {
                    let list = inputs.into_iter().map(toml::Value::String).collect();
                    table.insert("inputs".into(), toml::Value::Array(list));
                }
                entries.push(toml::Value::Table(table));
            }
            let mut outs = Vec::new();
            let output_layers = config.get("output_layers").unwrap_or(&Value::Null);
            collect_outputs(output_layers, &mut outs);
            t.insert(
                "outputs".into(),
                toml::Value::Array(outs.into_iter().map(toml::Value::String).collect()),
            );
        }
        other => {
            return Err(format!(
                "the model's class is {other}; kiln imports Sequential and Functional models \
                 (a subclassed model has no layer graph to import)"
            ));
        }
    }
    t.insert("layers".into(), toml::Value::Array(entries));
    Ok(t)
}

/// The output layer names of `output_layers` (`[name, 0, 0]` or a list of them).
fn collect_outputs(v: &Value, out: &mut Vec<String>) {
    if let Some(a) = v.as_array() {
        match a.first() {
            Some(Value::String(_)) => out.push(history_name(a)),
            _ => a.iter().for_each(|x| collect_outputs(x, out)),
        }
    }
}

/// The `Input` of a Sequential model saved without an `InputLayer`: Keras 2's
/// `batch_input_shape` on the first layer (taken out of it), else the `build_config`.
fn sequential_input(model: &Value, first: Option<&mut Value>) -> Result<toml::Value, Refusal> {
    let from_layer = first
        .and_then(|l| l.get_mut("config"))
        .and_then(Value::as_object_mut)
        .and_then(|c| c.remove("batch_input_shape"));
    let from_build = model["build_config"]["input_shape"].clone();
    let shape = from_layer
        .as_ref()
        .unwrap_or(&from_build)
        .as_array()
        .filter(|s| s.len() > 1)
        .ok_or("the Sequential model has no InputLayer and no build_config input_shape")?;
    let dims: Option<Vec<toml::Value>> = shape[1..]
        .iter()
        .map(|d| d.as_i64().map(toml::Value::Integer))
        .collect();
    let dims = dims.ok_or("the model's input shape has an axis without a size")?;
    let mut t = toml::Table::new();
    t.insert("type".into(), "Input".into());
    t.insert("shape".into(), toml::Value::Array(dims));
    Ok(toml::Value::Table(t))
}

/// An optimizer, loss or metric of a compile config as kiln's TOML: a string as it is, an
/// object as `{ type = <name>, …arguments }` (`snake` turns the class name into kiln's
/// snake_case identifier, for losses and metrics).
fn compile_item(v: &Value, snake: bool, drop: &[&str]) -> Option<toml::Value> {
    // Keras 2 wraps a metric named by a string (`"accuracy"`) as a MeanMetricWrapper.
    if v["class_name"] == "MeanMetricWrapper" {
        return v["config"]["name"]
            .as_str()
            .map(|n| toml::Value::String(n.into()));
    }
    match v {
        Value::Object(o) => {
            let mut t = keras_object(o);
            let class = t.remove("class_name")?;
            let class = match class {
                toml::Value::String(c) if snake => toml::Value::String(snake_case(&c)),
                c => c,
            };
            for d in drop {
                t.remove(*d);
            }
            if t.is_empty() && snake {
                return Some(class);
            }
            t.insert("type".into(), class);
            Some(toml::Value::Table(t))
        }
        other => toml_of(other),
    }
}

/// The `[compile]` table of a `compile_config` (`None`: the model was saved uncompiled).
///
/// # Errors
/// A compile setting kiln does not have (weighted metrics, metrics per output as a nested
/// list).
pub(super) fn compile_table(compile: &Value) -> Result<Option<toml::Table>, Refusal> {
    if compile.as_object().is_none_or(|c| c.is_empty()) {
        return Ok(None);
    }
    let c = compile;
    let mut t = toml::Table::new();
    let optimizer_defaults = [
        "name",
        "use_ema",
        "ema_momentum",
        "ema_overwrite_frequency",
        "loss_scale_factor",
    ];
    let optimizer = compile_item(&c["optimizer"], false, &optimizer_defaults)
        .unwrap_or_else(|| "rmsprop".into());
    t.insert("optimizer".into(), optimizer);
    if let Some(loss) = compile_item(&c["loss"], true, &["name", "reduction"]) {
        t.insert("loss".into(), loss);
    }
    // Keras 2 writes one list per output: `[[...]]` for a single output.
    let metrics = match c["metrics"].as_array() {
        Some(m) if m.len() == 1 && m[0].is_array() => m[0].as_array(),
        other => other,
    };
    if let Some(m) = metrics {
        let items: Option<Vec<toml::Value>> = m
            .iter()
            .map(|x| compile_item(x, true, &["name", "dtype"]))
            .collect();
        let items = items.filter(|i| i.iter().all(|x| !x.is_array()));
        let items = items.ok_or("compile_config.metrics is not a flat list of metrics")?;
        t.insert("metrics".into(), toml::Value::Array(items));
    }
    if let Some(w) = toml_of(&c["loss_weights"]) {
        t.insert("loss_weights".into(), w);
    }
    if !c["weighted_metrics"].is_null() {
        return Err("compile_config.weighted_metrics: kiln has no weighted metrics".into());
    }
    Ok(Some(t))
}
