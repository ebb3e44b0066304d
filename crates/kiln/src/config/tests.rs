use super::*;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/fashion-mnist");

fn minimal(extra_fit: &str) -> String {
    format!(
        r#"name = "t"
[data]
[model]
layers = [{{ type = "Input", shape = [4] }}, {{ type = "Dense", units = 3 }}]
[compile]
optimizer = "sgd"
loss = "sparse_categorical_crossentropy"
metrics = ["accuracy"]
[fit]
{extra_fit}
"#
    )
}

#[test]
fn the_examples_parse() {
    for name in ["cnn.toml", "mlp.toml"] {
        let cfg = RunConfig::load(&Path::new(EXAMPLES).join(name)).unwrap();
        assert_eq!(cfg.fit.batch_size, 128);
        assert_eq!(cfg.model.output_shape(), &[10]);
    }
    let cnn = RunConfig::load(&Path::new(EXAMPLES).join("cnn.toml")).unwrap();
    // Keras: 320 + 18,496 + 401,536 + 1,290 for this CNN.
    assert_eq!(cnn.model.param_count(), (421_642, 0));
}

#[test]
fn defaults_are_keras_defaults() {
    let cfg = RunConfig::from_toml_str(&minimal("")).unwrap();
    assert_eq!(
        (cfg.fit.epochs, cfg.fit.batch_size, cfg.fit.shuffle),
        (1, 32, true)
    );
    assert_eq!(cfg.compile.optimizer.learning_rate(), 0.01);
    assert_eq!(cfg.model.layers()[0].name, "dense");
}

#[test]
fn resolved_config_round_trips() {
    let cfg = RunConfig::load(&Path::new(EXAMPLES).join("cnn.toml")).unwrap();
    let again = RunConfig::from_toml_str(&cfg.to_toml()).unwrap();
    assert_eq!(again.model, cfg.model);
    assert_eq!(again.compile, cfg.compile);
    assert_eq!(again.fit, cfg.fit);
    assert_eq!(again.data, cfg.data);
    assert_eq!(again.seed, cfg.seed);
}

#[test]
fn errors_name_the_key_and_the_allowed_values() {
    let e = RunConfig::from_toml_str(&minimal("epoch = 3"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("line 10: unknown field `epoch`, expected one of `epochs`"),
        "{e}"
    );
    let e = RunConfig::from_toml_str(&minimal("batch_size = 0"))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "fit.batch_size: must be at least 1");
    let e = RunConfig::from_toml_str(&minimal("validation_split = 1.5"))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "fit.validation_split: must be in [0, 1), got 1.5");
    let bad_layer = minimal("").replace("\"Dense\"", "\"Dense3D\"");
    let e = RunConfig::from_toml_str(&bad_layer)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "model.layers[1].type: unknown layer type \"Dense3D\"; allowed: Input, Dense, Conv2D"
        ),
        "{e}"
    );
    let conv_on_vector = minimal("").replace(
        "type = \"Dense\", units = 3",
        "type = \"Conv2D\", filters = 3, kernel_size = 3",
    );
    let e = RunConfig::from_toml_str(&conv_on_vector)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "model.layers[1] (Conv2D): Conv2D expects a 3-D input (height, width, channels), got shape (None, 4)"
    );
    let bad_metric = minimal("").replace("[\"accuracy\"]", "[\"auc\"]");
    let e = RunConfig::from_toml_str(&bad_metric)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("compile.metrics[0]: unknown metric \"auc\""),
        "{e}"
    );
}

#[test]
fn sizes_names_and_enum_values_are_checked_before_allocating() {
    let huge = minimal("").replace("units = 3", "units = 100000000000");
    let e = RunConfig::from_toml_str(&huge).unwrap_err().to_string();
    assert!(
        e.starts_with(
            "model.layers[1] (Dense): 500000000000 parameters (2000.0 GB as float32) is too large"
        ),
        "{e}"
    );
    let slash = minimal("").replace("units = 3", "units = 3, name = \"a/b\"");
    let e = RunConfig::from_toml_str(&slash).unwrap_err().to_string();
    assert!(
        e.starts_with("model.layers[1].name: \"a/b\" is not a valid layer name"),
        "{e}"
    );
    let act = minimal("").replace("units = 3", "units = 3, activation = \"relux\"");
    let e = RunConfig::from_toml_str(&act).unwrap_err().to_string();
    assert_eq!(
        e,
        "model.layers[1].activation: \"relux\" is not allowed; allowed: linear, relu, gelu, sigmoid, tanh, softmax"
    );
    let e = RunConfig::from_toml_str(&minimal("epochs = \"ten\""))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "line 10: invalid type: string \"ten\", expected a non-negative integer"
    );
}
