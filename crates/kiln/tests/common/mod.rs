//! Shared fixtures of kiln's integration tests.

use burn::prelude::Device;
use kiln::Model;
use kiln::compile::{Compiled, LossKind, LossSpec, OptimizerSpec};
use kiln::model::{Activation, LayerKind, ModelSpec};

/// Dense(`hidden`, relu) → Dense(`classes`) logits on 2 features.
pub fn two_layer_spec(hidden: usize, classes: usize) -> ModelSpec {
    ModelSpec::builder(&[2])
        .add(LayerKind::from(kiln::model::layers::Dense {
            units: hidden,
            activation: Activation::Relu,
            use_bias: true,
        }))
        .add(LayerKind::from(kiln::model::layers::Dense {
            units: classes,
            activation: Activation::Linear,
            use_bias: true,
        }))
        .build()
        .unwrap()
}

/// A small classifier on 2 features: [`two_layer_spec`], Adam (lr 0.01), sparse categorical
/// cross-entropy from logits, accuracy; on the CPU.
#[allow(dead_code)] // not every test crate uses every fixture
pub fn two_layer_classifier(name: &str, hidden: usize, classes: usize, seed: u64) -> Model {
    let (spec, compiled) = two_layer_compiled(hidden, classes);
    Model::new(name, spec, compiled, seed, Device::flex())
}

/// The spec and compile settings of [`two_layer_classifier`].
#[allow(dead_code)] // not every test crate uses every fixture
pub fn two_layer_compiled(hidden: usize, classes: usize) -> (ModelSpec, Compiled) {
    let spec = two_layer_spec(hidden, classes);
    let compiled = Compiled::new(
        &spec,
        OptimizerSpec::Adam {
            learning_rate: 0.01.into(),
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
    (spec, compiled)
}
