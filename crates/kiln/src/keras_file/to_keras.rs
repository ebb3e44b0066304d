//! kiln's model spec as Keras 3's `config.json` (`serialize_keras_object(model)`): a
//! `Sequential` when the spec is a plain stack, else a `Functional` graph whose layers carry
//! their `inbound_nodes` (`__keras_tensor__` with `keras_history`), as
//! `keras/src/models/functional.py` (`get_config`, `serialize_node`) writes them.

use serde_json::{Map, Value, json};

use crate::model::{ModelSpec, NodeRef};

/// Keras' serialized dtype policy `name` (`float32`, `mixed_bfloat16`, …).
fn policy(name: &str) -> Value {
    json!({"module": "keras", "class_name": "DTypePolicy", "config": {"name": name},
           "registered_name": null})
}

/// A batch shape `[null, …]`.
fn batch_shape(shape: &[usize]) -> Value {
    std::iter::once(Value::Null)
        .chain(shape.iter().map(|&d| json!(d)))
        .collect()
}

/// A TOML value as JSON; a table with a `class_name` (an initializer, regularizer or
/// constraint as kiln writes it) or a `type` (a wrapper's layer) becomes Keras'
/// `{module, class_name, config}` object.
fn json_of(v: &toml::Value, module: &str) -> Value {
    match v {
        toml::Value::String(s) => json!(s),
        toml::Value::Integer(i) => json!(i),
        toml::Value::Float(f) => json!(f),
        toml::Value::Boolean(b) => json!(b),
        toml::Value::Datetime(d) => json!(d.to_string()),
        toml::Value::Array(a) => a.iter().map(|x| json_of(x, module)).collect(),
        toml::Value::Table(t) => {
            let mut config: Map<String, Value> = t
                .iter()
                .map(|(k, x)| (k.clone(), json_of(x, module)))
                .collect();
            if let Some(class) = config.remove("class_name") {
                return json!({"module": module, "class_name": class, "config": config,
                              "registered_name": null});
            }
            match config.remove("type") {
                Some(class) => json!({"module": "keras.layers", "class_name": class,
                                      "config": config, "registered_name": null}),
                None => Value::Object(config),
            }
        }
    }
}

/// The module Keras files an option under (`kernel_initializer` → `keras.initializers`).
fn option_module(key: &str) -> &'static str {
    if key.ends_with("_initializer") {
        "keras.initializers"
    } else if key.ends_with("_constraint") {
        "keras.constraints"
    } else if key.ends_with("_regularizer") {
        "keras.regularizers"
    } else {
        "keras.layers"
    }
}

/// The `InputLayer` entry of input `k`.
fn input_layer(name: &str, shape: &[usize], functional: bool) -> Value {
    let mut v = json!({"module": "keras.layers", "class_name": "InputLayer",
        "config": {"batch_shape": batch_shape(shape), "dtype": "float32", "sparse": false,
                   "ragged": false, "name": name},
        "registered_name": null});
    if functional {
        v["name"] = json!(name);
        v["inbound_nodes"] = json!([]);
    }
    v
}

/// The `__keras_tensor__` of node `r`.
fn keras_tensor(spec: &ModelSpec, r: NodeRef) -> Value {
    let (layer, index) = match r {
        NodeRef::Input(k) => (spec.inputs()[k].0.clone(), 0),
        NodeRef::Layer(j) => (spec.layers()[j].name.clone(), 0),
        NodeRef::State(j, k) => (spec.layers()[j].name.clone(), k),
    };
    json!({"class_name": "__keras_tensor__", "config": {"shape": batch_shape(spec.node_shape(r)),
           "dtype": "float32", "keras_history": [layer, 0, index]}})
}

/// Layer `i` as Keras serializes it.
fn layer(spec: &ModelSpec, i: usize, functional: bool) -> Result<Value, String> {
    let l = &spec.layers()[i];
    let class = l.kind.class_name();
    if l.shares.is_some() {
        return Err(format!(
            "layer \"{}\" calls a shared layer again; kiln does not write shared layers to \
             .keras files yet",
            l.name
        ));
    }
    let mut table = l.kind.to_table();
    table.remove("type");
    l.options.write_toml(&mut table);
    let mut config: Map<String, Value> = table
        .iter()
        .map(|(k, v)| (k.clone(), json_of(v, option_module(k))))
        .collect();
    config.insert("name".into(), json!(l.name));
    config.insert("trainable".into(), json!(l.options.trainable));
    config.insert("dtype".into(), policy(spec.layer_precision(i).name()));
    let mut v = json!({"module": "keras.layers", "class_name": class, "config": config,
                       "registered_name": null});
    if functional {
        let tensors: Vec<Value> = l.inputs.iter().map(|&r| keras_tensor(spec, r)).collect();
        // Merge layers take one list; MultiHeadAttention takes query, value (, key).
        let args = match tensors.len() {
            1 => tensors,
            _ if class == "MultiHeadAttention" => tensors,
            _ => vec![Value::Array(tensors)],
        };
        v["name"] = json!(l.name);
        v["inbound_nodes"] = json!([{"args": args, "kwargs": {}}]);
    }
    Ok(v)
}

/// `[name, 0, 0]` of each node, unwrapped when there is one (as Keras writes it).
fn node_list(names: Vec<String>) -> Value {
    let mut list: Vec<Value> = names.into_iter().map(|n| json!([n, 0, 0])).collect();
    match list.len() {
        1 => list.remove(0),
        _ => Value::Array(list),
    }
}

/// The whole `config.json` of `spec`, the model named `name`.
///
/// # Errors
/// The layer that Keras cannot be given (a shared layer).
pub(super) fn model_config(spec: &ModelSpec, name: &str) -> Result<Value, String> {
    let functional = !spec.is_sequential();
    let mut layers: Vec<Value> = spec
        .inputs()
        .iter()
        .map(|(n, s)| input_layer(n, s, functional))
        .collect();
    for i in 0..spec.layers().len() {
        layers.push(layer(spec, i, functional)?);
    }
    let precision = policy(spec.precision().name());
    if !functional {
        return Ok(json!({"module": "keras", "class_name": "Sequential",
            "config": {"name": name, "trainable": true, "dtype": precision, "layers": layers},
            "registered_name": null,
            "build_config": {"input_shape": batch_shape(spec.input_shape())}}));
    }
    let inputs = spec.inputs().iter().map(|(n, _)| n.clone()).collect();
    Ok(
        json!({"module": "keras.src.models.functional", "class_name": "Functional",
        "config": {"name": name, "trainable": true, "layers": layers,
                   "input_layers": node_list(inputs),
                   "output_layers": node_list(spec.output_names())},
        "registered_name": "Functional", "build_config": {"input_shape": null}}),
    )
}
