//! Checkpoints keep loading across kiln versions: `tests/data/checkpoint_v1/` holds the network
//! record (`model.bpk`) and the Keras-layout weights (`weights.safetensors`) that kiln wrote at
//! commit 4f0039d, before Dense, Conv2D, BatchNormalization, LayerNormalization,
//! MultiHeadAttention and TransformerEncoder became `Layer` declarations (written by
//! `examples/checkpoint_fixture.rs`). Today's kiln must read the record into the same weights.

use std::path::PathBuf;

use burn::module::Module;
use burn::prelude::Device;
use burn::store::ModuleRecord;
use burn::tensor::Bytes;
use kiln::model::weights::{self, keras_weights};
use kiln::model::{ModelSpec, Network};

#[path = "../examples/checkpoint_fixture.rs"]
#[allow(dead_code)]
mod fixture;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/checkpoint_v1")
}

#[test]
fn a_checkpoint_from_before_the_layer_declarations_loads_into_the_same_weights() {
    let spec = ModelSpec::from_toml(&toml::from_str(fixture::MODEL).unwrap()).unwrap();
    let device = Device::flex();
    let bytes = std::fs::read(fixture_dir().join("model.bpk")).unwrap();
    let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(bytes)).unwrap();
    let fresh = Network::init(&spec, 99, &device);
    let old = weights::load(&spec, &fixture_dir().join("weights.safetensors"), &device).unwrap();
    assert_ne!(keras_weights(&spec, &fresh), keras_weights(&spec, &old));
    let loaded = fresh.try_load_record(record).unwrap();
    let got = keras_weights(&spec, &loaded);
    assert_eq!(got, keras_weights(&spec, &old));
    // Every weight kind of the old named fields and kernel lists is in the fixture.
    let names: Vec<&str> = got.iter().map(|(n, _, _)| n.as_str()).collect();
    for name in [
        "conv2d/kernel",
        "conv2d/bias",
        "batch_normalization/moving_variance",
        "image_head/kernel",
        "layer_normalization/gamma",
        "multi_head_attention/attention_output/kernel",
        "multi_head_attention/query/bias",
        "transformer_encoder/feedforward_layer_norm/beta",
        "token_head/kernel",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
}

#[test]
fn the_fixture_model_computes_the_same_outputs_after_loading() {
    // The old weights in today's forward pass agree with the record loaded into it: both
    // routes (record fields, Keras-named weights) give one network.
    let spec = ModelSpec::from_toml(&toml::from_str(fixture::MODEL).unwrap()).unwrap();
    let device = Device::flex();
    let bytes = std::fs::read(fixture_dir().join("model.bpk")).unwrap();
    let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(bytes)).unwrap();
    let loaded = Network::init(&spec, 1, &device)
        .try_load_record(record)
        .unwrap();
    let old = weights::load(&spec, &fixture_dir().join("weights.safetensors"), &device).unwrap();
    let inputs = || {
        use burn::prelude::*;
        let image: Vec<f32> = (0..2 * 64).map(|i| (i as f32 * 0.37).sin()).collect();
        let tokens: Vec<f32> = (0..2 * 32).map(|i| (i as f32 * 0.11).cos()).collect();
        vec![
            kiln::model::Act::Image(Tensor::from_data(
                TensorData::new(image, [2, 1, 8, 8]),
                &device,
            )),
            kiln::model::Act::Seq(Tensor::from_data(
                TensorData::new(tokens, [2, 4, 8]),
                &device,
            )),
        ]
    };
    let a = loaded.forward_graph(&spec, inputs(), false, &mut |_, _, _| {});
    let b = old.forward_graph(&spec, inputs(), false, &mut |_, _, _| {});
    assert_eq!(a.output.dims(), [2, 5]);
    a.output.into_data().assert_eq(&b.output.into_data(), true);
}
