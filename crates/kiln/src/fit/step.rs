//! One training step and one evaluation step.
//!
//! Training: forward (dropout on, batch statistics), loss in float32, backward, optimizer update,
//! then BatchNormalization's moving averages.

use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::prelude::*;

use std::time::Instant;

use super::profile::StepProfile;
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

/// Runs one optimizer step on `batch` and returns the updated network. With `profile`, adds the
/// time of each stage to it.
pub fn train_step(
    net: Network,
    optim: &mut ModuleOptimizer,
    spec: &ModelSpec,
    compiled: &Compiled,
    batch: DeviceBatch,
    learning_rate: f64,
    mut profile: Option<&mut StepProfile>,
) -> (Network, StepOutput) {
    let mut clock = Instant::now();
    let mut lap = |slot: fn(&mut StepProfile) -> &mut f64,
                   profile: &mut Option<&mut StepProfile>| {
        if let Some(p) = profile.as_deref_mut() {
            *slot(p) += clock.elapsed().as_secs_f64();
        }
        clock = Instant::now();
    };
    let labels = batch.labels.expect("training batches carry labels");
    let fwd = match profile.as_deref_mut() {
        Some(p) => net.forward_timed(spec, batch.x, true, &mut |i, d| {
            p.add_layer(i, &spec.layers()[i].name, d)
        }),
        None => net.forward(spec, batch.x, true),
    };
    lap(|p| &mut p.forward_s, &mut profile);
    let outputs = fwd.output.clone().detach();
    let loss = compiled.loss.compute(fwd.output, fwd.logits, &labels);
    lap(|p| &mut p.loss_s, &mut profile);
    let grads = GradientsParams::from_grads(loss.backward(), &net);
    lap(|p| &mut p.backward_s, &mut profile);
    let net = optim.step(learning_rate, net, grads);
    let net = net.update_moving_stats(spec, fwd.batch_stats);
    lap(|p| &mut p.optimizer_s, &mut profile);
    let loss = loss.into_scalar::<f32>() as f64;
    let out = StepOutput {
        loss,
        outputs: read(outputs),
    };
    lap(|p| &mut p.metrics_s, &mut profile);
    if let Some(p) = profile {
        p.steps += 1;
    }
    (net, out)
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
