//! One training step and one evaluation step.
//!
//! Training: forward (dropout on, batch statistics), loss in float32, backward, optimizer update,
//! then BatchNormalization's moving averages.

use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::prelude::*;

use crate::batch::DeviceBatch;
use crate::compile::Compiled;
use crate::model::{ModelSpec, Network};

/// What a step reports to the metrics.
#[derive(Debug)]
pub struct StepOutput {
    /// Mean loss over the batch.
    pub loss: f64,
    /// Model outputs `[batch, units]`, row-major.
    pub outputs: Vec<f32>,
}

fn read(t: Tensor<2>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("float outputs")
}

/// Runs one optimizer step on `batch` and returns the updated network.
pub fn train_step(
    net: Network,
    optim: &mut ModuleOptimizer,
    spec: &ModelSpec,
    compiled: &Compiled,
    batch: DeviceBatch,
    learning_rate: f64,
) -> (Network, StepOutput) {
    let labels = batch.labels.expect("training batches carry labels");
    let fwd = net.forward(spec, batch.x, true);
    let outputs = fwd.output.clone().detach();
    let loss = compiled.loss.compute(fwd.output, fwd.logits, &labels);
    let grads = GradientsParams::from_grads(loss.backward(), &net);
    let net = optim.step(learning_rate, net, grads);
    let net = net.update_moving_stats(spec, fwd.batch_stats);
    let loss = loss.into_scalar::<f32>() as f64;
    (
        net,
        StepOutput {
            loss,
            outputs: read(outputs),
        },
    )
}

/// Forward pass in inference mode (no dropout, moving statistics); the loss when the batch
/// has labels.
pub fn eval_step(
    net: &Network,
    spec: &ModelSpec,
    compiled: &Compiled,
    batch: DeviceBatch,
) -> StepOutput {
    let fwd = net.forward(spec, batch.x, false);
    let loss = match &batch.labels {
        Some(labels) => compiled
            .loss
            .compute(fwd.output.clone(), fwd.logits, labels)
            .into_scalar::<f32>() as f64,
        None => f64::NAN,
    };
    StepOutput {
        loss,
        outputs: read(fwd.output),
    }
}
