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

/// Keras' `Adam(learning_rate)` with its defaults.
#[allow(dead_code)] // not every test crate uses every fixture
pub fn adam(learning_rate: f64) -> OptimizerSpec {
    OptimizerSpec::Adam {
        learning_rate: learning_rate.into(),
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: 1e-7,
        amsgrad: false,
    }
}

/// 64 points of a 2-class problem in 2-D (`x` `[64, 2]`, `y` the class of `x0 + x1 > 0`), in
/// batches of 16 (4 steps an epoch).
#[allow(dead_code)] // not every test crate uses every fixture
pub fn two_class_points() -> kiln_data::Dataset {
    use kiln_data::{Array, Buffer, Dataset, Element};
    let x: Vec<f32> = (0..128)
        .map(|i| ((i * 37) % 17) as f32 / 8.0 - 1.0)
        .collect();
    let y: Vec<i64> = (0..64)
        .map(|i| i64::from(x[2 * i] + x[2 * i + 1] > 0.0))
        .collect();
    let el = Element::new()
        .with("x", Array::new(vec![64, 2], Buffer::F32(x)).unwrap())
        .with("y", Array::new(vec![64], Buffer::I64(y)).unwrap());
    Dataset::from_tensor_slices(el).unwrap().batch(16, false)
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
        adam(0.01),
        LossSpec {
            kind: LossKind::SparseCategoricalCrossentropy,
            from_logits: true,
        },
        &["accuracy".to_string()],
    )
    .unwrap();
    (spec, compiled)
}
