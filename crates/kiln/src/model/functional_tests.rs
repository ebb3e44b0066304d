//! Functional models and the layers of ResNet-50 and BERT: parameter counts against Keras
//! (`tests/reference/estimate_models.py`, TensorFlow 2.21 / Keras 3.15, whose printed numbers
//! are copied here), graph checks, and forward + backward through every new layer.

use burn::prelude::*;
use kiln_data::{Array, Buffer, Dataset, Element};

use super::*;
use crate::batch::{FEATURES, LABELS};
use crate::compile::{Compiled, LossKind, LossSpec, OptimizerSpec};
use crate::config::RunConfig;
use crate::fit::Model;

fn example(path: &str) -> RunConfig {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(path);
    RunConfig::load(&p).unwrap()
}

fn count(kind: LayerKind, inputs: &[&[usize]]) -> (usize, usize) {
    kind.param_count_of(inputs)
}

#[test]
fn resnet50_has_keras_parameter_count_without_allocating() {
    // keras.applications.ResNet50(weights=None).count_params() == 25,636,712, of which
    // 53,120 are BatchNormalization moving statistics.
    let cfg = example("resnet50.toml");
    let spec = &cfg.model;
    assert_eq!(spec.param_count(), (25_636_712 - 53_120, 53_120));
    assert_eq!(spec.output_shape(), &[1000]);
    assert_eq!(spec.layers().len(), 176); // 177 Keras layers with the InputLayer
    assert!(!spec.is_sequential());
    let summary = summary("resnet50", spec);
    assert!(summary.contains("Total params: 25,636,712"), "{summary}");
    // conv1_pad (ZeroPadding2D 3) -> conv1_conv (7x7 stride 2, valid): 230 -> 112.
    assert_eq!(spec.shape_after(0), &[230, 230, 3]);
    assert_eq!(spec.shape_after(1), &[112, 112, 64]);
    let gap = spec
        .layers()
        .iter()
        .position(|l| l.name == "avg_pool")
        .unwrap();
    assert_eq!(spec.shape_before(gap), &[7, 7, 2048]);
    assert_eq!(spec.shape_after(gap), &[2048]);
}

#[test]
fn bert_large_has_keras_hub_parameter_count_from_the_spec() {
    // keras_hub BertBackbone (bert_large_en_uncased): 335,141,888; + Dense(2) head: 2,050.
    let cfg = example("bert-large.toml");
    let spec = &cfg.model;
    assert_eq!(spec.param_count(), (335_143_938, 0));
    assert_eq!(spec.inputs().len(), 2);
    assert_eq!(spec.output_shape(), &[2]);
    let encoder = spec
        .layers()
        .iter()
        .position(|l| l.name == "transformer_layer_0")
        .unwrap();
    assert_eq!(spec.layer_params(encoder), (12_596_224, 0));
}

#[test]
fn single_layer_parameter_counts_match_keras() {
    let seq: &[usize] = &[128, 1024];
    let emb = LayerKind::from(layers::Embedding {
        input_dim: 30522,
        output_dim: 1024,
        mask_zero: false,
    });
    assert_eq!(count(emb.clone(), &[&[128]]), (31_254_528, 0));
    assert_eq!(emb.output_shape(&[128]).unwrap(), vec![128, 1024]);
    let ln = LayerKind::from(crate::model::layers::LayerNormalization { epsilon: 1e-3 });
    assert_eq!(count(ln, &[seq]), (2048, 0));
    let mha = |heads, key_dim| {
        LayerKind::from(crate::model::layers::MultiHeadAttention {
            num_heads: heads,
            key_dim,
            value_dim: None,
            dropout: 0.0,
            use_causal_mask: false,
            use_bias: true,
        })
    };
    assert_eq!(count(mha(16, 64), &[seq, seq]), (4_198_400, 0));
    assert_eq!(count(mha(16, 64), &[seq]), (4_198_400, 0));
    assert_eq!(count(mha(2, 3), &[&[5, 8]]), (218, 0));
    let enc = LayerKind::from(crate::model::layers::TransformerEncoder {
        intermediate_dim: 4096,
        num_heads: 16,
        activation: Activation::Gelu,
        layer_norm_epsilon: 1e-12,
        dropout: 0.0,
    });
    assert_eq!(count(enc, &[seq]), (12_596_224, 0));
    let pad = LayerKind::from(layers::ZeroPadding2D {
        padding: Pads2([[3, 3], [3, 3]]),
    });
    assert_eq!(pad.output_shape(&[224, 224, 3]).unwrap(), vec![230, 230, 3]);
    let gap = LayerKind::from(layers::GlobalAveragePooling2D::default());
    assert_eq!(gap.output_shape(&[7, 7, 2048]).unwrap(), vec![2048]);
}

#[test]
fn resnet_small_matches_keras_and_round_trips_through_toml() {
    let cfg = example("fashion-mnist/resnet-small.toml");
    let (t, n) = cfg.model.param_count();
    assert_eq!(t + n, 19_994);
    let again = ModelSpec::from_toml(&cfg.model.to_toml()).unwrap();
    assert_eq!(again, cfg.model);
}

#[test]
fn sequential_specs_write_the_same_toml_as_before() {
    let spec = ModelSpec::builder(&[4])
        .add(LayerKind::from(crate::model::layers::Dense {
            units: 3,
            activation: Activation::Relu,
            use_bias: true,
        }))
        .build()
        .unwrap();
    assert!(spec.is_sequential());
    let t = spec.to_toml();
    assert!(!t.contains_key("outputs"));
    let text = toml::to_string(&t).unwrap();
    assert!(!text.contains("inputs"), "{text}");
    assert!(!text.contains("input_layer"), "{text}");
}

fn parse(text: &str) -> crate::error::Result<ModelSpec> {
    ModelSpec::from_toml(&toml::from_str(text).unwrap())
}

#[test]
fn graph_errors_name_the_layer_and_the_fix() {
    let e = parse(
        r#"layers = [{ type = "Input", shape = [4] }, { type = "Dense", units = 2, inputs = ["nope"] }]"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("model.layers[1].inputs") && e.contains("\"nope\""),
        "{e}"
    );
    let e = parse(
        r#"layers = [{ type = "Input", name = "a", shape = [4] }, { type = "Dense", name = "d", units = 2 },
           { type = "Dense", name = "e", units = 3, inputs = ["a"] }, { type = "Add", inputs = ["d", "e"] }]"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("Add needs inputs of one shape"), "{e}");
    let e = parse(
        r#"layers = [{ type = "Input", name = "a", shape = [4] }, { type = "Dense", name = "d", units = 2 },
           { type = "Dense", name = "e", units = 2, inputs = ["a"] }]"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("\"d\" does not lead to the model's output"),
        "{e}"
    );
    let e = parse(r#"layers = [{ type = "Input", shape = [4] }, { type = "Add" }]"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("Add takes 2 or more input(s), got 1"), "{e}");
}

#[test]
fn argument_type_errors_name_the_argument() {
    let layer = |args: &str| {
        parse(&format!(
            r#"layers = [{{ type = "Input", shape = [8, 8, 1] }}, {args}]"#
        ))
        .unwrap_err()
        .to_string()
    };
    for (args, want) in [
        (
            r#"{ type = "Dense", units = -3 }"#,
            "model.layers[1].units: Dense: invalid value: integer `-3`, expected a non-negative integer",
        ),
        (
            r#"{ type = "Dense", units = 4.5, use_bias = false }"#,
            "model.layers[1].units: Dense: invalid type: floating point `4.5`",
        ),
        (
            r#"{ type = "Conv2D", filters = 2, kernel_size = [3] }"#,
            "model.layers[1].kernel_size: Conv2D: expected a positive integer or a [height, width] pair",
        ),
        (
            r#"{ type = "GlobalMaxPooling2D", keepdims = "yes" }"#,
            "model.layers[1].keepdims: GlobalMaxPooling2D: invalid type: string \"yes\"",
        ),
        // Messages that name their argument keep the layer's key.
        (
            r#"{ type = "Dense", units = 0 }"#,
            "model.layers[1] (Dense): `units` must be positive, got 0",
        ),
        (
            r#"{ type = 3, units = 4 }"#,
            "model.layers[1].type: must be a layer type name in quotes, got 3; allowed: Input, Dense",
        ),
    ] {
        let e = layer(args);
        assert!(e.contains(want), "{args}: {e}");
    }
}

/// A small transformer classifier on token ids, with every sequence layer.
fn tiny_transformer() -> ModelSpec {
    parse(
        r#"
        layers = [
          { type = "Input", name = "ids", shape = [6] },
          { type = "Embedding", name = "tok", input_dim = 5, output_dim = 8 },
          { type = "PositionEmbedding", name = "pos", sequence_length = 10 },
          { type = "Add", name = "emb", inputs = ["tok", "pos"] },
          { type = "LayerNormalization", name = "ln" },
          { type = "MultiHeadAttention", name = "mha", num_heads = 2, key_dim = 3 },
          { type = "Add", name = "res", inputs = ["ln", "mha"] },
          { type = "TransformerEncoder", name = "enc", intermediate_dim = 16, num_heads = 2, activation = "gelu" },
          { type = "Cropping1D", name = "first", cropping = [0, 5] },
          { type = "Flatten" },
          { type = "Dense", name = "out", units = 2 },
        ]"#,
    )
    .unwrap()
}

/// A small residual CNN with every image layer.
fn tiny_resnet() -> ModelSpec {
    parse(
        r#"
        layers = [
          { type = "Input", name = "img", shape = [6, 6, 2] },
          { type = "ZeroPadding2D", name = "pad", padding = 1 },
          { type = "Conv2D", name = "conv", filters = 4, kernel_size = 3, strides = 2, use_bias = false },
          { type = "BatchNormalization", name = "bn" },
          { type = "Activation", name = "relu", activation = "relu" },
          { type = "Conv2D", name = "conv2", filters = 4, kernel_size = 3, padding = "same" },
          { type = "Add", name = "add", inputs = ["relu", "conv2"] },
          { type = "GlobalAveragePooling2D", name = "gap" },
          { type = "Dense", name = "out", units = 3 },
        ]"#,
    )
    .unwrap()
}

#[test]
fn every_new_layer_gets_a_gradient_for_every_parameter() {
    let device = Device::flex().autodiff();
    for (spec, input) in [
        (
            tiny_transformer(),
            Act::Flat(Tensor::from_data(
                TensorData::new(
                    vec![0.0f32, 1., 2., 3., 4., 1., 4., 3., 2., 1., 0., 0.],
                    [2, 6],
                ),
                &device,
            )),
        ),
        (
            tiny_resnet(),
            Act::Image(Tensor::random(
                [2, 2, 6, 6],
                burn::tensor::Distribution::Normal(0.0, 1.0),
                &device,
            )),
        ),
    ] {
        let net = Network::init(&spec, 7, &device);
        let out = net.forward(&spec, input, true).output;
        assert_eq!(out.dims()[0], 2);
        let grads = (out.clone() * out).sum().backward();
        let names = weights::keras_weights(&spec, &net);
        let mut checked = 0;
        for (j, p) in net.layers.iter().enumerate() {
            let mut check = |g: Option<Tensor<2>>, what: &str| {
                let g =
                    g.unwrap_or_else(|| panic!("{} {what}: no gradient", spec.layers()[j].name));
                let norm = g.abs().sum().into_scalar::<f32>();
                assert!(
                    norm > 0.0,
                    "{} {what}: zero gradient",
                    spec.layers()[j].name
                );
                checked += 1;
            };
            for (k, w) in p.kernels.iter().enumerate() {
                check(w.val().grad(&grads), &format!("kernel {k}"));
            }
            for (k, v) in p.vectors.iter().chain(&p.gamma).chain(&p.beta).enumerate() {
                check(
                    v.val().grad(&grads).map(|g| g.unsqueeze()),
                    &format!("vector {k}"),
                );
            }
            for w in p.conv_kernel.iter() {
                check(
                    w.val()
                        .grad(&grads)
                        .map(|g| g.flatten::<1>(0, 3).unsqueeze::<2>()),
                    "conv",
                );
            }
            for w in p.dense_kernel.iter() {
                check(w.val().grad(&grads), "dense");
            }
        }
        let trainable = names
            .iter()
            .filter(|(n, _, _)| !n.ends_with("moving_mean") && !n.ends_with("moving_variance"))
            .count();
        // Dense/Conv biases are not checked above (zero-initialised biases still get
        // gradients, but some cancel under BatchNormalization).
        assert!(checked >= trainable - 3, "{checked} of {trainable}");
    }
}

#[test]
fn weights_round_trip_through_keras_names() {
    let spec = tiny_transformer();
    let device = Device::flex();
    let net = Network::init(&spec, 3, &device);
    let saved = weights::keras_weights(&spec, &net);
    let names: Vec<&str> = saved.iter().map(|(n, _, _)| n.as_str()).collect();
    for want in [
        "tok/embeddings",
        "pos/embeddings",
        "ln/gamma",
        "mha/query/kernel",
        "mha/attention_output/bias",
        "enc/self_attention_layer/key/kernel",
        "enc/feedforward_layer_norm/beta",
        "out/kernel",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let q = saved
        .iter()
        .find(|(n, _, _)| n == "mha/query/kernel")
        .unwrap();
    assert_eq!(q.1, vec![8, 2, 3]);
    let map: std::collections::HashMap<_, _> = saved
        .iter()
        .map(|(n, s, v)| (n.clone(), (s.clone(), v.clone())))
        .collect();
    let loaded = weights::load_with(&spec, &device, &|n: &str, s: &[usize]| {
        let (shape, v) = map.get(n).unwrap();
        assert_eq!(shape, s, "{n}");
        Ok(v.clone())
    })
    .unwrap();
    assert_eq!(weights::keras_weights(&spec, &loaded), saved);
}

fn classifier(spec: ModelSpec, lr: f64) -> Model {
    let compiled = Compiled::new(
        &spec,
        OptimizerSpec::Adam {
            learning_rate: lr.into(),
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-7,
            amsgrad: false,
        },
        LossSpec {
            kind: LossKind::SparseCategoricalCrossentropy,
            from_logits: true,
        },
        &["accuracy".to_string()],
    )
    .unwrap();
    Model::new("functional", spec, compiled, 5, Device::flex())
}

#[test]
fn a_small_transformer_learns_which_token_comes_first() {
    // Label: whether the first token is 4; every example also holds other tokens.
    let mut x = Vec::new();
    let mut y = Vec::new();
    for i in 0..64u32 {
        let first = if i % 2 == 0 { 4.0 } else { (i % 4) as f32 };
        x.push(first);
        x.extend((1..6).map(|k| ((i * 7 + k * 3) % 5) as f32));
        y.push((i % 2 == 0) as i32);
    }
    let ds = Dataset::from_tensor_slices(
        Element::new()
            .with(FEATURES, Array::new(vec![64, 6], Buffer::F32(x)).unwrap())
            .with(LABELS, Array::new(vec![64], Buffer::I32(y)).unwrap()),
    )
    .unwrap()
    .batch(16, false);
    let mut model = classifier(tiny_transformer(), 0.01);
    let h = model.fit(&ds, None, 15, &mut []).unwrap();
    let loss = &h.history["loss"];
    assert!(loss[14] < 0.5 * loss[0], "{loss:?}");
    assert!(
        h.history["accuracy"][14] > 0.9,
        "{:?}",
        h.history["accuracy"]
    );
}

#[test]
fn resnet_small_trains_a_few_steps() {
    // examples/fashion-mnist/resnet-small.toml on 64 random 28x28 images whose label is
    // whether their mean brightness is above 0.5.
    let cfg = example("fashion-mnist/resnet-small.toml");
    let mut x = Vec::new();
    let mut y = Vec::new();
    let mut state = 1u32;
    for i in 0..64 {
        let bright = i % 2 == 0;
        for _ in 0..784 {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let u = (state >> 8) as f32 / (1u32 << 24) as f32;
            x.push(if bright { 0.4 + 0.6 * u } else { 0.6 * u });
        }
        y.push(bright as i32);
    }
    let ds = Dataset::from_tensor_slices(
        Element::new()
            .with(
                FEATURES,
                Array::new(vec![64, 28, 28, 1], Buffer::F32(x)).unwrap(),
            )
            .with(LABELS, Array::new(vec![64], Buffer::I32(y)).unwrap()),
    )
    .unwrap()
    .batch(32, false);
    let mut model = classifier(cfg.model.clone(), 0.01);
    let h = model.fit(&ds, None, 4, &mut []).unwrap();
    let loss = &h.history["loss"];
    assert!(loss[3] < loss[0], "{loss:?}");
}

#[test]
fn sequence_layers_match_keras() {
    // tests/reference/attention_reference.py: the same weights (by formula, per Keras name),
    // token ids [1, 4, 2], Keras 3.15's output.
    let spec = parse(
        r#"
        layers = [
          { type = "Input", name = "ids", shape = [3] },
          { type = "Embedding", name = "tok", input_dim = 5, output_dim = 4 },
          { type = "PositionEmbedding", name = "pos", sequence_length = 6 },
          { type = "Add", name = "emb", inputs = ["tok", "pos"] },
          { type = "MultiHeadAttention", name = "mha", num_heads = 2, key_dim = 2 },
          { type = "Add", name = "res", inputs = ["emb", "mha"] },
          { type = "LayerNormalization", name = "ln" },
          { type = "TransformerEncoder", name = "enc", intermediate_dim = 6, num_heads = 2, activation = "gelu" },
        ]"#,
    )
    .unwrap();
    let values = |name: &str, shape: &[usize]| -> crate::error::Result<Vec<f32>> {
        let n: usize = shape.iter().product();
        let seed: u32 = name.bytes().map(u32::from).sum();
        Ok((0..n)
            .map(|i| (0.5 * (0.37 * i as f64 + 0.11 * seed as f64).sin()) as f32)
            .collect())
    };
    let device = Device::flex();
    let net = weights::load_with(&spec, &device, &values).unwrap();
    let ids = Tensor::from_data(TensorData::new(vec![1.0f32, 4.0, 2.0], [1, 3]), &device);
    let out = net.forward(&spec, Act::Flat(ids), false).output;
    let got = out.into_data().try_to_vec::<f32>().unwrap();
    let want = [
        0.428692, 0.673046, 0.323670, -0.184659, 0.428672, 0.673340, 0.321339, -0.182475, 0.449500,
        0.343872, 0.310309, 1.047438,
    ];
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 2e-5, "{got:?} vs {want:?}");
    }
}
