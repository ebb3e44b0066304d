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
    let bad_metric = minimal("").replace("[\"accuracy\"]", "[\"auroc\"]");
    let e = RunConfig::from_toml_str(&bad_metric)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("compile.metrics[0]: unknown metric \"auroc\""),
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
        "model.layers[1].activation: \"relux\" is not allowed; allowed: linear, relu, gelu, sigmoid, tanh, softmax, swish, elu, selu, softplus, softsign, hard_sigmoid, mish, exponential, silu"
    );
    let e = RunConfig::from_toml_str(&minimal("epochs = \"ten\""))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "line 10: invalid type: string \"ten\", expected a non-negative integer"
    );
}

/// A config in the pipeline form; `data` is the `[data]` part.
fn with_data(data: &str, extra_fit: &str) -> String {
    minimal(extra_fit).replace("[data]\n", data)
}

const TRAIN: &str = r#"[data]
[data.train]
source = "npy"
files = ["x.npy", "y.npy"]
"#;

#[test]
fn the_pipeline_example_parses_and_round_trips() {
    let cfg = RunConfig::load(&Path::new(EXAMPLES).join("cnn-pipeline.toml")).unwrap();
    assert!(cfg.data.uses_pipelines());
    assert_eq!(cfg.model.param_count(), (421_642, 0));
    let train = cfg.data.train.as_ref().unwrap();
    assert_eq!((train.x_name(), train.y_name()), ("image", "label"));
    assert_eq!(
        (train.take, cfg.data.validation.as_ref().unwrap().skip),
        (Some(54000), Some(54000))
    );
    assert_eq!(train.map.len(), 1);
    let text = cfg.to_toml();
    assert!(
        !text.contains("rescale ="),
        "no arrays-form key is written: {text}"
    );
    let again = RunConfig::from_toml_str(&text).unwrap();
    assert_eq!(again.data, cfg.data);
}

#[test]
fn pipeline_defaults() {
    let cfg = RunConfig::from_toml_str(&with_data(TRAIN, "")).unwrap();
    // Relative files are under data_dir, the current directory by default in this form.
    assert_eq!(cfg.data.data_dir, PathBuf::from("."));
    let p = cfg.data.train.as_ref().unwrap();
    assert_eq!((p.x_name(), p.y_name()), ("x", "y"));
    assert_eq!(p.component_names(), vec!["x", "y"]);
    assert_eq!(p.parallelism(), kiln_data::Parallelism::Autotune);
    let folder = with_data(
        "[data]\ndata_dir = \"/data\"\n[data.train]\nsource = \"image_folder\"\nfiles = \"flowers\"\n",
        "",
    );
    let cfg = RunConfig::from_toml_str(&folder).unwrap();
    let p = cfg.data.train.as_ref().unwrap();
    assert_eq!((p.x_name(), p.y_name()), ("image", "label"));
    assert_eq!(cfg.data.data_dir, PathBuf::from("/data"));
    // Random ops split the map list: what comes before runs before cache and shuffle.
    let ops = TRAIN.to_string()
        + "map = [{ op = \"cast\", dtype = \"float32\" }, { op = \"random_flip\" }, { op = \"rescale\", scale = 2.0 }]\n";
    let cfg = RunConfig::from_toml_str(&with_data(&ops, "")).unwrap();
    assert_eq!(cfg.data.train.as_ref().unwrap().random_from(), 1);
}

fn error(data: &str, fit: &str) -> String {
    RunConfig::from_toml_str(&with_data(data, fit))
        .unwrap_err()
        .to_string()
}

#[test]
fn pipeline_errors_name_the_key() {
    // Arrays-form keys next to pipeline tables, even at their default value.
    let e = error(&TRAIN.replace("[data]\n", "[data]\nrescale = 1.0\n"), "");
    assert!(
        e.starts_with("data.rescale: cannot be combined with [data.train]"),
        "{e}"
    );
    assert!(e.contains("{ op = \"rescale\""), "{e}");
    let e = error(
        &TRAIN.replace("[data]\n", "[data]\nshuffle_buffer_size = 10\n"),
        "",
    );
    assert!(
        e.starts_with("data.shuffle_buffer_size: cannot be combined"),
        "{e}"
    );
    // Keys of another source, unknown keys, ops and op arguments.
    let e = error(&(TRAIN.to_string() + "header = true\n"), "");
    assert_eq!(
        e,
        "data.train.header: applies to source = \"csv\" only, not \"npy\""
    );
    let e = error(&(TRAIN.to_string() + "batchsize = 3\n"), "");
    assert!(e.contains("unknown field `batchsize`"), "{e}");
    let e = error(&(TRAIN.to_string() + "map = [{ op = \"rotate\" }]\n"), "");
    assert!(
        e.contains("unknown variant `rotate`, expected one of `rescale`"),
        "{e}"
    );
    let e = error(
        &(TRAIN.to_string() + "map = [{ op = \"rescale\", scale = 1.0, factor = 2 }]\n"),
        "",
    );
    assert!(e.contains("unknown field `factor`"), "{e}");
    let e = error(
        &(TRAIN.to_string() + "map = [{ op = \"normalize\" }]\n"),
        "",
    );
    assert!(
        e.starts_with("data.train.map[0].mean: normalize needs mean and one of variance or std"),
        "{e}"
    );
    let e = error(
        &(TRAIN.to_string()
            + "map = [{ op = \"normalize\", mean = 1.0, std = [1.0, 2.0], variance = 1.0 }]\n"),
        "",
    );
    assert!(e.starts_with("data.train.map[0].mean"), "{e}");
    let e = error(
        &(TRAIN.to_string() + "map = [{ op = \"cast\", dtype = \"float16\" }]\n"),
        "",
    );
    assert!(
        e.starts_with("data.train.map[0].dtype: unknown dtype \"float16\""),
        "{e}"
    );
    let e = error(
        &(TRAIN.to_string() + "map = [{ op = \"decode_raw\", out_type = \"string\" }]\n"),
        "",
    );
    assert!(
        e.starts_with("data.train.map[0].out_type: unknown dtype \"string\""),
        "{e}"
    );
    let e = error(
        &(TRAIN.to_string() + "map = [{ op = \"random_flip\", mode = \"diagonal\" }]\n"),
        "",
    );
    assert!(
        e.starts_with("data.train.map[0].mode: unknown flip mode"),
        "{e}"
    );
    let e = error(&(TRAIN.to_string() + "components = [\"a\"]\n"), "");
    assert!(
        e.starts_with("data.train.components: 1 names for 2 files"),
        "{e}"
    );
    let e = error(&(TRAIN.to_string() + "shuffle = { buffer_size = 0 }\n"), "");
    assert_eq!(e, "data.train.shuffle.buffer_size: must be at least 1");
    let tf = "[data]\n[data.train]\nsource = \"tfrecord\"\nfiles = \"a.tfrecord\"\n";
    let e = error(tf, "");
    assert!(
        e.starts_with("data.train.features: source = \"tfrecord\" needs a features table"),
        "{e}"
    );
    let e = error(
        &(tf.to_string() + "features.x = { dtype = \"float64\" }\n"),
        "",
    );
    assert!(
        e.starts_with("data.train.features.x: unknown dtype \"float64\""),
        "{e}"
    );
    // The form's ties to [fit].
    let e = error(&TRAIN.replace("[data.train]", "[data.test]"), "");
    assert!(
        e.starts_with("data.train: the pipeline form needs a [data.train] table"),
        "{e}"
    );
    let e = error(TRAIN, "validation_split = 0.2");
    assert!(
        e.starts_with("fit.validation_split: cannot split a [data.train] pipeline"),
        "{e}"
    );
    let e = error(TRAIN, "validation_data = \"test\"");
    assert_eq!(e, "fit.validation_data: \"test\" needs a [data.test] table");
}

#[test]
fn gradient_options_and_class_weight_parse_and_round_trip() {
    let text = minimal("class_weight = { \"0\" = 1.0, \"2\" = 2.5 }").replace(
        "optimizer = \"sgd\"",
        "optimizer = { type = \"AdamW\", learning_rate = 1e-3, global_clipnorm = 1.0, \
         gradient_accumulation_steps = 4 }",
    );
    let cfg = RunConfig::from_toml_str(&text).unwrap();
    assert_eq!(cfg.compile.gradients.global_clipnorm, Some(1.0));
    assert_eq!(cfg.compile.gradients.gradient_accumulation_steps, 4);
    assert_eq!(cfg.compile.optimizer.learning_rate(), 1e-3);
    assert_eq!(cfg.fit.class_weight.get("2"), Some(&2.5));
    let again = RunConfig::from_toml_str(&cfg.to_toml()).unwrap();
    assert_eq!(again.compile, cfg.compile);
    assert_eq!(again.fit, cfg.fit);
    // Defaults write no gradient key.
    let plain = RunConfig::from_toml_str(&minimal("")).unwrap().to_toml();
    assert!(
        !plain.contains("clip") && !plain.contains("accumulation"),
        "{plain}"
    );
}

#[test]
fn gradient_and_class_weight_errors_name_the_key() {
    let with_optimizer = |o: &str| minimal("").replace("optimizer = \"sgd\"", o);
    let e = RunConfig::from_toml_str(&with_optimizer(
        "optimizer = { type = \"sgd\", clipnorm = 1.0, global_clipnorm = 1.0 }",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("compile.optimizer: only one of clipnorm, clipvalue and global_clipnorm"),
        "{e}"
    );
    let e = RunConfig::from_toml_str(&with_optimizer(
        "optimizer = { type = \"adam\", clipvalue = -1.0 }",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("compile.optimizer.clipvalue: must be a positive number"),
        "{e}"
    );
    let e = RunConfig::from_toml_str(&with_optimizer(
        "optimizer = { type = \"adam\", gradient_accumulation_steps = 0 }",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("compile.optimizer.gradient_accumulation_steps: must be at least 1"),
        "{e}"
    );
    // The model has 3 output units: classes 0, 1, 2.
    let e = RunConfig::from_toml_str(&minimal("class_weight = { \"3\" = 2.0 }"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "fit.class_weight.\"3\": class 3 does not exist: the model has 3 output units"
        ),
        "{e}"
    );
}

/// `precision` (top level, as Keras' global policy), a layer's `dtype` and
/// `[compile] loss_scale`: parsed, defaulted as Keras' `compile` does, written back, and
/// refused with the key when wrong; `--precision` switches the loss scale with the policy.
#[test]
fn precision_keys_parse_round_trip_and_name_the_key() {
    use crate::precision::{LossScaleOptions, Precision};
    let text = minimal("").replacen("name = \"t\"", "name = \"t\"\nprecision = \"16-mixed\"", 1);
    let text = text.replace(
        "{ type = \"Dense\", units = 3 }",
        "{ type = \"Dense\", units = 3, dtype = \"float32\" }",
    );
    let cfg = RunConfig::from_toml_str(&text).unwrap();
    assert_eq!(cfg.model.precision(), Precision::MixedFloat16);
    assert_eq!(cfg.model.layer_precision(0), Precision::Float32);
    assert_eq!(cfg.compile.loss_scale, Some(LossScaleOptions::default()));
    let written = cfg.to_toml();
    assert!(
        written.contains("precision = \"mixed_float16\""),
        "{written}"
    );
    let again = RunConfig::from_toml_str(&written).unwrap();
    assert_eq!(again.model, cfg.model);
    assert_eq!(again.compile, cfg.compile);

    // bfloat16: no loss scale, unless the config asks for one.
    let bf16 = minimal("").replacen(
        "name = \"t\"",
        "name = \"t\"\nprecision = \"bf16-mixed\"",
        1,
    );
    let cfg = RunConfig::from_toml_str(&bf16).unwrap();
    assert_eq!(cfg.compile.loss_scale, None);
    let custom = bf16.replace(
        "metrics = [\"accuracy\"]",
        "metrics = [\"accuracy\"]\nloss_scale = { initial_scale = 1024.0 }",
    );
    let mut cfg = RunConfig::from_toml_str(&custom).unwrap();
    let ls = cfg.compile.loss_scale.unwrap();
    assert_eq!((ls.initial_scale, ls.dynamic_growth_steps), (1024.0, 2000));
    let again = RunConfig::from_toml_str(&cfg.to_toml()).unwrap();
    assert_eq!(again.compile, cfg.compile);
    // An explicit loss scale survives --precision; a policy's default follows it.
    cfg.set_precision(Precision::Float32);
    assert_eq!(cfg.compile.loss_scale.unwrap().initial_scale, 1024.0);
    let mut plain = RunConfig::from_toml_str(&minimal("")).unwrap();
    plain.set_precision(Precision::MixedFloat16);
    assert_eq!(plain.compile.loss_scale, Some(LossScaleOptions::default()));
    plain.set_precision(Precision::MixedBFloat16);
    assert_eq!(plain.compile.loss_scale, None);

    let bad = minimal("").replacen("name = \"t\"", "name = \"t\"\nprecision = \"fp8\"", 1);
    let e = RunConfig::from_toml_str(&bad).unwrap_err().to_string();
    assert!(e.starts_with("precision: unknown precision \"fp8\""), "{e}");
    let bad = text.replace("dtype = \"float32\"", "dtype = \"int8\"");
    let e = RunConfig::from_toml_str(&bad).unwrap_err().to_string();
    assert!(
        e.starts_with("model.layers[1].dtype: unknown precision"),
        "{e}"
    );
    let bad = custom.replace("initial_scale = 1024.0", "initial_scale = -1.0");
    let e = RunConfig::from_toml_str(&bad).unwrap_err().to_string();
    assert!(e.contains("compile.loss_scale.initial_scale"), "{e}");
}
