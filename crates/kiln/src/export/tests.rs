use std::path::{Path, PathBuf};

use burn::prelude::Device;
use prost::Message;

use super::onnx_proto::{DimValue, ModelProto};
use super::*;

/// A run directory with `config.toml` (the `[model]` layers given) and seeded weights.
fn run_dir(tag: &str, layers: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-export-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = format!(
        "name = \"tiny-{tag}\"\n[data]\n[model]\nlayers = {layers}\n[compile]\noptimizer = \"sgd\"\n\
         loss = {{ type = \"sparse_categorical_crossentropy\", from_logits = true }}\n"
    );
    let cfg = RunConfig::from_toml_str(&text).unwrap();
    let model = crate::Model::new(
        "t",
        cfg.model.clone(),
        cfg.compile.clone(),
        7,
        Device::flex(),
    );
    model.save_weights(&dir.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("config.toml"), cfg.to_toml()).unwrap();
    dir
}

const CNN: &str = r#"[
  { type = "Input", shape = [6, 5, 2] },
  { type = "Conv2D", filters = 3, kernel_size = 3, padding = "same", activation = "relu" },
  { type = "BatchNormalization" },
  { type = "MaxPooling2D", pool_size = 2, padding = "same" },
  { type = "AveragePooling2D", pool_size = 2, strides = 1 },
  { type = "Dropout", rate = 0.5 },
  { type = "Flatten" },
  { type = "Dense", units = 4, activation = "gelu" },
  { type = "Dense", units = 3, activation = "softmax" },
]"#;

fn ops(model: &ModelProto) -> Vec<String> {
    model
        .graph
        .as_ref()
        .unwrap()
        .node
        .iter()
        .map(|n| n.op_type.clone().unwrap())
        .collect()
}

#[test]
fn export_writes_a_version_directory_that_decodes_and_loads() {
    let run = run_dir("cnn", CNN);
    let out = run.join("out");
    let opts = ExportOptions {
        out: Some(out.clone()),
        ..Default::default()
    };
    let first = export(&run, &opts).unwrap();
    assert_eq!(first.version, 1);
    assert_eq!(first.dir, out.join("tiny-cnn").join("1"));
    let second = export(&run, &opts).unwrap();
    assert_eq!(second.version, 2, "the next number by default");
    let again = export(
        &run,
        &ExportOptions {
            version: Some(2),
            ..opts.clone()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(again.contains("already exists"), "{again}");
    // No temporary directory is left behind.
    let names: Vec<String> = std::fs::read_dir(out.join("tiny-cnn"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    let bytes = std::fs::read(first.dir.join(ONNX_FILE)).unwrap();
    let model = ModelProto::decode(bytes.as_slice()).unwrap();
    assert_eq!(model.ir_version, Some(8));
    assert_eq!(model.opset_import[0].version, Some(17));
    assert_eq!(
        ops(&model),
        [
            "Transpose", // NHWC -> NCHW
            "Conv",
            "Relu",
            "BatchNormalization",
            "MaxPool",
            "AveragePool",
            "Transpose", // Flatten in channels-last order
            "Flatten",
            "MatMul",
            "Add",
            "Div", // GELU
            "Erf",
            "Add",
            "Mul",
            "Mul",
            "MatMul",
            "Add",
            "Softmax",
            "Identity",
        ]
    );
    let graph = model.graph.unwrap();
    let dims: Vec<Option<DimValue>> = graph.input[0]
        .r#type
        .as_ref()
        .unwrap()
        .tensor_type
        .as_ref()
        .unwrap()
        .shape
        .as_ref()
        .unwrap()
        .dim
        .iter()
        .map(|d| d.value.clone())
        .collect();
    assert_eq!(
        dims,
        [
            Some(DimValue::DimParam("batch".into())),
            Some(DimValue::DimValue(6)),
            Some(DimValue::DimValue(5)),
            Some(DimValue::DimValue(2)),
        ]
    );
    assert_eq!(graph.input[0].name.as_deref(), Some("input_layer"));
    assert_eq!(graph.output[0].name.as_deref(), Some("output_0"));
    // TensorFlow's "same" padding of a 3x3 window: one on each side; a 2x2 pool with stride 2
    // over 6x5 pads the width by one at the end (right).
    let attr = |op: &str, name: &str| {
        graph
            .node
            .iter()
            .find(|n| n.op_type.as_deref() == Some(op))
            .unwrap()
            .attribute
            .iter()
            .find(|a| a.name.as_deref() == Some(name))
            .unwrap()
            .clone()
    };
    assert_eq!(attr("Conv", "pads").ints, [1, 1, 1, 1]);
    assert_eq!(attr("MaxPool", "pads").ints, [0, 0, 0, 1]);
    assert_eq!(attr("AveragePool", "count_include_pad").i, Some(0));
    // The conv kernel is stored [out, in, kh, kw].
    let kernel = graph
        .initializer
        .iter()
        .find(|t| t.name.as_deref() == Some("conv2d/kernel"))
        .unwrap();
    assert_eq!(kernel.dims, [3, 2, 3, 3]);
    assert_eq!(kernel.raw_data.as_ref().unwrap().len(), 3 * 2 * 3 * 3 * 4);

    // The servable loads, and its outputs are the run's model's outputs.
    let servable = Servable::load(&first.dir, Device::flex()).unwrap();
    assert_eq!(servable.name(), "tiny-cnn");
    assert_eq!(servable.input_shape(), &[6, 5, 2]);
    let x: Vec<f32> = (0..3 * 60).map(|i| ((i * 37) % 11) as f32 / 11.0).collect();
    let y = servable.predict(x.clone(), 3).unwrap();
    assert_eq!(y.len(), 9);
    let (cfg, model) =
        crate::run::load_run(&run, &crate::run::Overrides::default(), Device::flex()).unwrap();
    let ds = kiln_data::Dataset::from_tensor_slices(kiln_data::Element::new().with(
        "x",
        kiln_data::Array::new(vec![3, 6, 5, 2], kiln_data::Buffer::F32(x)).unwrap(),
    ))
    .unwrap()
    .batch(3, false);
    let (expected, units) = model.predict(&ds).unwrap();
    assert_eq!(units, 3);
    assert_eq!(cfg.name, "tiny-cnn");
    assert_eq!(y, expected);
    for row in y.chunks(3) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "softmax rows");
    }
}

/// Each example's output is the same whether it is predicted alone or in a batch with
/// others, bit for bit: what `kiln serve`'s request batching relies on.
#[test]
fn outputs_do_not_depend_on_the_batch() {
    let run = run_dir("batch", CNN);
    let e = export(
        &run,
        &ExportOptions {
            format: ExportFormat::Safetensors,
            out: Some(run.join("out")),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!e.dir.join(ONNX_FILE).exists());
    let s = Servable::load(&e.dir, Device::flex()).unwrap();
    let n = 70;
    let x: Vec<f32> = (0..n * 60)
        .map(|i| (((i * 7919) % 101) as f32 - 50.0) / 25.0)
        .collect();
    let all = s.predict(x.clone(), n).unwrap();
    for (i, chunk) in x.chunks(60).enumerate() {
        let alone = s.predict(chunk.to_vec(), 1).unwrap();
        assert_eq!(alone, all[i * 3..i * 3 + 3], "example {i}");
    }
    // A batch of 5 starting at 13 too.
    let part = s.predict(x[13 * 60..18 * 60].to_vec(), 5).unwrap();
    assert_eq!(part, all[13 * 3..18 * 3]);

    // The Fashion-MNIST MLP's shapes (wide Dense layers: GEMMs of many row counts).
    let mlp = r#"[{ type = "Input", shape = [28, 28] }, { type = "Flatten" },
        { type = "Dense", units = 512, activation = "relu" }, { type = "Dense", units = 10 }]"#;
    let run = run_dir("batch-mlp", mlp);
    let e = export(
        &run,
        &ExportOptions {
            out: Some(run.join("out")),
            ..Default::default()
        },
    )
    .unwrap();
    let s = Servable::load(&e.dir, Device::flex()).unwrap();
    let x: Vec<f32> = (0..n * 784)
        .map(|i| ((i * 31) % 255) as f32 / 255.0)
        .collect();
    let all = s.predict(x.clone(), n).unwrap();
    for (i, chunk) in x.chunks(784).enumerate() {
        let alone = s.predict(chunk.to_vec(), 1).unwrap();
        assert_eq!(alone, all[i * 10..i * 10 + 10], "MLP example {i}");
    }
}

#[test]
fn a_broken_version_directory_is_refused_with_the_file_named() {
    let run = run_dir("broken", CNN);
    let out = run.join("out");
    let e = export(
        &run,
        &ExportOptions {
            out: Some(out.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    let copy = |to: &str| -> PathBuf {
        let d = out.join(to);
        std::fs::create_dir_all(&d).unwrap();
        for f in [WEIGHTS_FILE, MODEL_SPEC_FILE, SIGNATURE_FILE] {
            std::fs::copy(e.dir.join(f), d.join(f)).unwrap();
        }
        d
    };
    let err = |d: &Path| Servable::load(d, Device::flex()).unwrap_err().to_string();

    let d = copy("missing");
    std::fs::remove_file(d.join(WEIGHTS_FILE)).unwrap();
    assert!(err(&d).contains("model.safetensors"), "{}", err(&d));

    let d = copy("truncated");
    let w = std::fs::read(d.join(WEIGHTS_FILE)).unwrap();
    std::fs::write(d.join(WEIGHTS_FILE), &w[..w.len() / 2]).unwrap();
    assert!(err(&d).contains("safetensors"), "{}", err(&d));

    let d = copy("signature");
    std::fs::write(d.join(SIGNATURE_FILE), "{\"signature_def\": {}}").unwrap();
    assert!(err(&d).contains("does not match"), "{}", err(&d));

    let d = copy("spec");
    std::fs::write(
        d.join(MODEL_SPEC_FILE),
        "name = \"x\"\n[model]\nlayers = 3\n",
    )
    .unwrap();
    assert!(err(&d).contains("model.toml"), "{}", err(&d));

    #[cfg(unix)]
    {
        let d = copy("link");
        std::fs::remove_file(d.join(WEIGHTS_FILE)).unwrap();
        std::os::unix::fs::symlink(e.dir.join(WEIGHTS_FILE), d.join(WEIGHTS_FILE)).unwrap();
        assert!(err(&d).contains("symbolic link"), "{}", err(&d));
    }
}

#[test]
fn names_and_versions_are_checked() {
    for ok in ["mnist", "a.b-c_1", "X"] {
        assert!(check_model_name(ok).is_ok(), "{ok}");
    }
    for bad in ["", ".", "..", "a..b", "a/b", "a b", "é", "a\\b", "../etc"] {
        assert!(check_model_name(bad).is_err(), "{bad:?}");
    }
    assert_eq!(parse_version("12"), Some(12));
    for bad in [
        "0",
        "012",
        "-1",
        "+1",
        "1a",
        "",
        ".tmp-1-2",
        "99999999999999999999",
    ] {
        assert_eq!(parse_version(bad), None, "{bad:?}");
    }
}

#[test]
fn an_export_into_a_run_directory_being_written_is_refused_one_elsewhere_is_not() {
    let run = run_dir("locked", CNN);
    let training = crate::run_dir::DirLock::acquire(&run, "kiln train", "elsewhere").unwrap();
    let err = export(&run, &ExportOptions::default()).unwrap_err();
    assert!(
        matches!(&err, KilnError::RunDirLocked { holder, .. }
            if holder.command.as_deref() == Some("kiln train")),
        "{err}"
    );
    assert!(err.to_string().contains("--out"), "{err}");
    assert!(!run.join("export").exists(), "nothing written");
    // Writing outside the run directory only reads it.
    let outside = run.with_extension("out");
    let e = export(
        &run,
        &ExportOptions {
            out: Some(outside.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(e.version, 1);
    // Once training is done, the default place works.
    drop(training);
    assert_eq!(export(&run, &ExportOptions::default()).unwrap().version, 1);
    std::fs::remove_dir_all(&outside).unwrap();
    std::fs::remove_dir_all(&run).unwrap();
}

/// A layer of one's own that declares no ONNX mapping.
#[derive(Debug)]
struct Halve;

impl crate::model::Layer for Halve {
    fn class_name(&self) -> &'static str {
        "Halve"
    }
    fn config(&self) -> toml::Table {
        toml::Table::new()
    }
    fn output_shape(&self, inputs: &[&[usize]]) -> std::result::Result<Vec<usize>, String> {
        Ok(inputs[0].to_vec())
    }
    fn forward(
        &self,
        mut inputs: Vec<crate::model::Act>,
        _: &crate::model::Weights,
        _: crate::model::ForwardContext,
    ) -> crate::model::Act {
        inputs.remove(0)
    }
}

fn dense2() -> crate::model::LayerKind {
    crate::model::LayerKind::from(crate::model::layers::Dense {
        units: 2,
        activation: crate::model::Activation::Linear,
        use_bias: true,
    })
}

#[test]
fn a_layer_without_an_onnx_mapping_is_refused_with_its_name_and_class() {
    use crate::model::{LayerKind, ModelSpec};
    let spec = ModelSpec::builder(&[4])
        .add_named("halve_it", LayerKind::from(Halve))
        .add(dense2())
        .build()
        .unwrap();
    let weights = vec![
        ("dense/kernel".to_string(), vec![4, 2], vec![0.5; 8]),
        ("dense/bias".to_string(), vec![2], vec![0.0; 2]),
    ];
    let err = onnx::model_proto("m", &spec, &weights, 1).unwrap_err();
    assert!(err.is_usage(), "exit code 2: {err}");
    let err = err.to_string();
    assert!(
        err.contains(
            "model.layers[1]: layer `halve_it` (Halve) cannot be exported to ONNX because it \
             has no ONNX mapping"
        ),
        "{err}"
    );
    assert!(
        err.contains("Layer::onnx") && err.contains("--format safetensors"),
        "{err}"
    );
    // A weight of the wrong shape names the layer and the weight.
    let spec = ModelSpec::builder(&[3]).add(dense2()).build().unwrap();
    let err = onnx::model_proto("m", &spec, &weights, 1)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("layer `dense` (Dense)") && err.contains("`dense/kernel` has shape [4, 2]"),
        "{err}"
    );
}

/// A two-input functional model: one graph input per `Input`, named after it, and every node
/// reads only graph inputs, weights and earlier nodes' values (a valid topological order).
#[test]
fn a_functional_model_exports_its_inputs_by_name_in_topological_order() {
    let layers = r#"[
      { type = "Input", shape = [6, 5, 2], name = "image" },
      { type = "Input", shape = [3], name = "extra" },
      { type = "Conv2D", filters = 2, kernel_size = 1, inputs = "image", name = "conv" },
      { type = "Concatenate", inputs = ["image", "conv"], name = "joined" },
      { type = "GlobalAveragePooling2D", inputs = "joined", name = "pool" },
      { type = "Concatenate", inputs = ["pool", "extra"], name = "both" },
      { type = "Dense", units = 3, inputs = "both", name = "logits" },
    ]"#;
    let text = format!(
        "name = \"f\"\n[data]\n[model]\nlayers = {layers}\noutputs = [\"logits\"]\n[compile]\n\
         optimizer = \"sgd\"\nloss = \"mean_squared_error\"\n"
    );
    let cfg = RunConfig::from_toml_str(&text).unwrap();
    let model = crate::Model::new("f", cfg.model.clone(), cfg.compile, 1, Device::flex());
    let w = crate::model::weights::keras_weights(model.spec(), model.network());
    let proto = onnx::model_proto("f", model.spec(), &w, 1).unwrap();
    let graph = proto.graph.unwrap();
    let names: Vec<_> = graph
        .input
        .iter()
        .map(|v| v.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["image", "extra"]);
    let mut known: std::collections::HashSet<String> = names.into_iter().collect();
    known.extend(graph.initializer.iter().map(|t| t.name.clone().unwrap()));
    for node in &graph.node {
        for input in &node.input {
            assert!(
                known.contains(input),
                "{:?} reads {input} before it exists",
                node.name
            );
        }
        known.extend(node.output.iter().cloned());
    }
    let concat_axes: Vec<Option<i64>> = graph
        .node
        .iter()
        .filter(|n| n.op_type.as_deref() == Some("Concat"))
        .map(|n| n.attribute[0].i)
        .collect();
    // Keras' channel axis -1 is NCHW's axis 1 for images, axis 1 for vectors.
    assert_eq!(concat_axes, [Some(1), Some(1)]);
    assert_eq!(graph.output[0].name.as_deref(), Some("output_0"));
}

/// A model whose mask ONNX would lose (`Masking`, `Embedding(mask_zero)`) is refused, naming
/// the layer and why.
#[test]
fn layers_that_make_masks_are_refused_by_the_onnx_export() {
    use crate::model::ModelSpec;
    for (layers, weights, class) in [
        (
            "{ type = \"Input\", shape = [3, 2] }, { type = \"Masking\" }",
            vec![],
            "(Masking)",
        ),
        (
            "{ type = \"Input\", shape = [3] }, { type = \"Embedding\", input_dim = 4, output_dim = 2, mask_zero = true }",
            vec![("embedding/embeddings".to_string(), vec![4, 2], vec![0.5; 8])],
            "(Embedding)",
        ),
    ] {
        let text = format!("layers = [{layers}]");
        let spec = ModelSpec::from_toml(&toml::from_str(&text).unwrap()).unwrap();
        let err = onnx::model_proto("m", &spec, &weights, 1).unwrap_err();
        assert!(err.is_usage(), "exit code 2: {err}");
        let err = err.to_string();
        assert!(
            err.contains(class) && err.contains("the mask it makes is not carried"),
            "{err}"
        );
    }
}

/// Every layer built into kiln is exported and run by onnxruntime in
/// `tests/interop/onnx_serving_interop.py` (but `Masking`, refused above): a layer added without a
/// model there fails here.
#[test]
fn the_onnx_interop_models_use_every_builtin_layer() {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/onnx_serving_interop.py");
    let text = std::fs::read_to_string(&script).unwrap();
    let missing: Vec<&str> = crate::model::registry::builtin_names()
        .into_iter()
        .filter(|class| *class != "Masking" && !text.contains(&format!("type = \"{class}\"")))
        .collect();
    assert!(
        missing.is_empty(),
        "{} uses no {missing:?}",
        script.display()
    );
}

const TFLITE_CNN: &str = r#"[
  { type = "Input", shape = [6, 5, 2] },
  { type = "Conv2D", filters = 3, kernel_size = 3, padding = "same", activation = "relu" },
  { type = "BatchNormalization" },
  { type = "MaxPooling2D", pool_size = 2, padding = "same" },
  { type = "Flatten" },
  { type = "Dense", units = 3, activation = "softmax" },
]"#;

fn tflite_export(
    run: &Path,
    version: u64,
    quantization: crate::tflite::Quantization,
) -> Result<Vec<u8>> {
    let opts = ExportOptions {
        format: ExportFormat::Tflite,
        version: Some(version),
        out: Some(run.join("out")),
        quantization,
        ..Default::default()
    };
    let e = export(run, &opts)?;
    Ok(std::fs::read(e.dir.join(TFLITE_FILE)).unwrap())
}

#[test]
fn tflite_exports_are_tflite_flatbuffers_and_unmapped_layers_are_named() {
    let run = run_dir("tflite", TFLITE_CNN);
    let float = tflite_export(&run, 1, crate::tflite::Quantization::None).unwrap();
    let int8 = tflite_export(&run, 2, crate::tflite::Quantization::DynamicRange).unwrap();
    // The root table's offset, then schema.fbs' file identifier.
    assert_eq!(&float[4..8], b"TFL3");
    assert_eq!(&int8[4..8], b"TFL3");
    // 99 kernel weights (3*3*2*3 + 15*3) lose 3 bytes each, less the scales added.
    assert!(
        float.len() > int8.len() + 200,
        "float {} int8 {}",
        float.len(),
        int8.len()
    );
    let _ = std::fs::remove_dir_all(&run);

    let lstm = r#"[
  { type = "Input", shape = [4, 3] },
  { type = "LSTM", units = 2 },
  { type = "Dense", units = 3 },
]"#;
    let run = run_dir("tflite-lstm", lstm);
    let err = tflite_export(&run, 1, crate::tflite::Quantization::None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`lstm` (LSTM)") && err.contains("TensorFlow Lite"),
        "{err}"
    );
    assert!(
        !run.join("out").join("tiny-tflite-lstm").join("1").exists(),
        "nothing written"
    );
    let _ = std::fs::remove_dir_all(&run);
}

#[test]
fn dynamic_range_kernels_are_symmetric_int8_per_output_channel() {
    // Two output channels of three weights: scales max|w| / 127.
    let w = [0.5, -1.0, 0.25, 0.0, 0.0, 0.0];
    let (q, quant) = crate::tflite::quantize_symmetric(&w, &[2, 3], true);
    assert_eq!(quant.scale, vec![1.0 / 127.0, 1.0]);
    assert_eq!(quant.zero_point, vec![0, 0]);
    let q: Vec<i8> = q.into_iter().map(|b| b as i8).collect();
    assert_eq!(q, vec![64, -127, 32, 0, 0, 0]);
    let (_, whole) = crate::tflite::quantize_symmetric(&w, &[2, 3], false);
    assert_eq!(whole.scale, vec![1.0 / 127.0]);
}

#[test]
fn the_tflite_reference_run_equals_kilns_forward_pass() {
    // The calibration of full-integer models runs the TFLite graph in float: it must compute
    // what kiln computes (convolutions with both paddings and strides, pools, BatchNormalization
    // folded, Dense, softmax).
    let layers = r#"[
  { type = "Input", shape = [7, 6, 2] },
  { type = "Conv2D", filters = 3, kernel_size = 3, padding = "same", activation = "relu" },
  { type = "BatchNormalization" },
  { type = "Conv2D", filters = 4, kernel_size = 2, strides = 2 },
  { type = "AveragePooling2D", pool_size = 2, strides = 1, padding = "same" },
  { type = "MaxPooling2D", pool_size = 2 },
  { type = "Flatten" },
  { type = "Dense", units = 5, activation = "tanh" },
  { type = "Dense", units = 3, activation = "softmax" },
]"#;
    let run = run_dir("tflite-eval", layers);
    let cfg = RunConfig::load(&run.join("config.toml")).unwrap();
    let device = Device::flex();
    let net =
        crate::model::weights::load(&cfg.model, &run.join("model.safetensors"), &device).unwrap();
    let keras = crate::model::weights::keras_weights(&cfg.model, &net);
    let (g, ins, outs) =
        tflite::graph(&cfg.model, &keras, crate::tflite::Quantization::None).unwrap();
    let n = 3;
    let x: Vec<f32> = (0..n * 7 * 6 * 2)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
        .collect();
    let values = crate::tflite::eval::run(&g, &[(ins[0].1, x.clone())], n).unwrap();
    let got = values[outs[0].1 as usize].clone().unwrap();
    let act = crate::model::Act::from_keras_image(burn::tensor::Tensor::from_data(
        burn::tensor::TensorData::new(x, [n, 7, 6, 2]),
        &device,
    ));
    let want = net
        .forward(&cfg.model, act, false)
        .output
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "reference run {g}, kiln {w}");
    }
    let _ = std::fs::remove_dir_all(&run);
}
