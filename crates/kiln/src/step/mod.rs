//! One training step and one evaluation step: the layer between the model and compile
//! below and the strategies ([`crate::distribute`]) and the loop ([`crate::fit`]) above.
//!
//! Training, in stages that [`crate::fit::GradientAccumulation`] can drive separately:
//! [`compute_gradients`] (forward with dropout on and batch statistics, loss in float32,
//! backward, BatchNormalization's moving averages), then [`apply_gradients`] (clipping, one
//! optimizer update). [`train_step`] is both in one call.

use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::prelude::*;

use std::time::Instant;

pub mod custom;
mod interrupt;

pub use interrupt::Interrupt;

use crate::batch::DeviceBatch;
use crate::compile::{Clipping, Compiled};
use crate::logs::StepProfile;
use crate::model::{ModelSpec, Network};

/// What a step reports to the metrics.
#[derive(Debug)]
pub struct StepOutput {
    /// The batch's loss: the mean over its examples (Keras' `sum_over_batch_size`, weighted by
    /// the batch's `sample_weight` when it has one).
    pub loss: f64,
    /// For a model with several outputs, each output's own loss (unweighted, without
    /// regularization), in `outputs` order; empty otherwise.
    pub output_losses: Vec<f64>,
    /// Model outputs `[batch, units]`, row-major.
    pub outputs: Vec<f32>,
    /// The labels of the batch the outputs belong to, when they are not the step's own batch's
    /// (a multi-worker step on sharded input returns the whole global batch's).
    pub labels: Option<HostLabels>,
}

pub use crate::batch::HostLabels;

impl HostLabels {
    /// The host copies of `batch`'s labels (of a model with one output).
    pub fn of(batch: &DeviceBatch) -> HostLabels {
        HostLabels {
            classes: batch.classes.clone(),
            targets: batch.targets.clone(),
        }
    }
}

fn read<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("float outputs")
}

/// Runs one optimizer step on `batch` and returns the updated network: [`compute_gradients`],
/// then [`apply_gradients`] with `compiled`'s clipping, then the outputs read back. With
/// `profile`, adds the time of each stage to it. (`Model::fit` goes through
/// [`crate::fit::GradientAccumulation`], which does the same when it does not accumulate.)
pub fn train_step(
    net: Network,
    optim: &mut ModuleOptimizer,
    spec: &ModelSpec,
    compiled: &Compiled,
    batch: DeviceBatch,
    learning_rate: f64,
    mut profile: Option<&mut StepProfile>,
) -> (Network, StepOutput) {
    let (net, grads, pending) =
        compute_gradients(net, spec, compiled, batch, profile.as_deref_mut());
    let net = apply_gradients(
        net,
        optim,
        spec,
        grads,
        compiled.gradients.clipping(),
        learning_rate,
        profile.as_deref_mut(),
    );
    (net, pending.read(profile))
}

/// The loss and outputs of a batch, not yet read back from the device (reading forces a device
/// sync, so the step reads them after the optimizer update has been queued).
#[derive(Debug)]
pub struct PendingOutput {
    /// `[1]`, or for a model with several outputs `[1 + outputs]`: the total, then each
    /// output's own loss.
    loss: Tensor<1>,
    outputs: Tensor<2>,
    labels: Option<HostLabels>,
}

impl PendingOutput {
    /// The output of a batch computed in parts (`(part, its share of the batch's examples)`,
    /// in order): the loss is the shares' weighted sum (the batch's mean, as the losses are
    /// means over their parts), the outputs the parts' rows one after the other.
    pub fn combine(parts: Vec<(PendingOutput, f64)>) -> PendingOutput {
        let mut loss: Option<Tensor<1>> = None;
        let mut outputs = Vec::with_capacity(parts.len());
        for (p, share) in parts {
            let l = p.loss.mul_scalar(share);
            loss = Some(match loss {
                Some(acc) => acc + l,
                None => l,
            });
            outputs.push(p.outputs);
        }
        PendingOutput {
            loss: loss.expect("at least one part"),
            outputs: Tensor::cat(outputs, 0),
            labels: None,
        }
    }

    /// A pending loss (`[1]`) and outputs (`[batch, units]`), e.g. combined across replicas
    /// (`crate::distribute`).
    pub fn new(loss: Tensor<1>, outputs: Tensor<2>) -> PendingOutput {
        PendingOutput {
            loss,
            outputs,
            labels: None,
        }
    }

    /// The same, for a batch other than the step's own: `labels` are its labels (see
    /// [`StepOutput::labels`]).
    pub fn with_labels(mut self, labels: HostLabels) -> PendingOutput {
        self.labels = Some(labels);
        self
    }

    /// The loss (`[1]`) and outputs (`[batch, units]`), not read back.
    pub fn into_parts(self) -> (Tensor<1>, Tensor<2>) {
        (self.loss, self.outputs)
    }

    /// Reads the loss and outputs back (time counted as `metrics_s` in `profile`).
    pub fn read(self, profile: Option<&mut StepProfile>) -> StepOutput {
        PendingOutput::read_all(vec![self], profile)
            .pop()
            .expect("one step read")
    }

    /// Reads back the losses and outputs of several steps, in order, with one host read of
    /// all their losses and one of all their outputs (time counted as `metrics_s` in
    /// `profile`, the steps as `steps`, the read as one of `host_reads`). Empty for none.
    pub fn read_all(
        steps: Vec<PendingOutput>,
        profile: Option<&mut StepProfile>,
    ) -> Vec<StepOutput> {
        if steps.is_empty() {
            return Vec::new();
        }
        let clock = Instant::now();
        let n = steps.len();
        let widths: Vec<(usize, usize)> = steps
            .iter()
            .map(|p| (p.loss.dims()[0], p.outputs.dims()[0] * p.outputs.dims()[1]))
            .collect();
        let (mut losses, mut outputs, mut labels) = (Vec::new(), Vec::new(), Vec::new());
        for p in steps {
            losses.push(p.loss);
            outputs.push(p.outputs);
            labels.push(p.labels);
        }
        let losses = read(Tensor::cat(losses, 0));
        let outputs = read(Tensor::cat(outputs, 0));
        let (mut l, mut o) = (&losses[..], &outputs[..]);
        let mut out = Vec::with_capacity(n);
        for ((lw, ow), labels) in widths.into_iter().zip(labels) {
            let (these, rest) = l.split_at(lw);
            l = rest;
            let (rows, rest) = o.split_at(ow);
            o = rest;
            out.push(StepOutput {
                loss: f64::from(these[0]),
                output_losses: these[1..].iter().map(|&v| f64::from(v)).collect(),
                outputs: rows.to_vec(),
                labels,
            });
        }
        if let Some(p) = profile {
            p.metrics_s += clock.elapsed().as_secs_f64();
            p.steps += n as u64;
            p.host_reads += 1;
        }
        out
    }
}

/// Forward (dropout on, batch statistics), the loss in float32 (weighted by the batch's
/// `sample_weight`, Keras' `sum_over_batch_size`), backward: the gradients of `net`'s
/// parameters for `batch`. BatchNormalization's moving averages are updated here, once per
/// batch (Keras updates them in every training forward pass, accumulating or not); they are
/// not trainable, so this commutes with the optimizer update.
///
/// Returns the network (its moving statistics updated), the gradients and the pending loss
/// and outputs.
pub fn compute_gradients(
    net: Network,
    spec: &ModelSpec,
    compiled: &Compiled,
    batch: DeviceBatch,
    profile: Option<&mut StepProfile>,
) -> (Network, GradientsParams, PendingOutput) {
    compute_gradients_scaled(net, spec, compiled, batch, 1.0, profile)
}

/// [`compute_gradients`] of the loss multiplied by `loss_factor` (a loss scale, and/or the
/// share of a part of a batch): the gradients are `loss_factor` times the loss's; the pending
/// loss is the batch's own, unscaled.
pub fn compute_gradients_scaled(
    net: Network,
    spec: &ModelSpec,
    compiled: &Compiled,
    batch: DeviceBatch,
    loss_factor: f64,
    mut profile: Option<&mut StepProfile>,
) -> (Network, GradientsParams, PendingOutput) {
    let mut clock = Instant::now();
    let mut lap = |slot: fn(&mut StepProfile) -> &mut f64,
                   profile: &mut Option<&mut StepProfile>| {
        if let Some(p) = profile.as_deref_mut() {
            *slot(p) += clock.elapsed().as_secs_f64();
        }
        clock = Instant::now();
    };
    let labels = batch.labels.expect("training batches carry labels");
    let inputs = DeviceBatch::inputs(batch.x, batch.more);
    let fwd = match profile.as_deref_mut() {
        Some(p) => net.forward_graph(spec, inputs, true, &mut |i, d, _| {
            p.add_layer(i, &spec.layers()[i].name, d)
        }),
        None => net.forward_graph(spec, inputs, true, &mut |_, _, _| {}),
    };
    lap(|p| &mut p.forward_s, &mut profile);
    let outputs = fwd.output.clone().detach();
    let (loss, each) = compiled.losses(
        fwd.output,
        fwd.logits,
        &labels,
        batch.sample_weight.as_ref(),
    );
    let loss = net.regularized(spec, loss, fwd.activity_loss);
    lap(|p| &mut p.loss_s, &mut profile);
    let scaled = if loss_factor == 1.0 {
        loss.clone()
    } else {
        loss.clone().mul_scalar(loss_factor)
    };
    let grads = GradientsParams::from_grads(scaled.backward(), &net);
    lap(|p| &mut p.backward_s, &mut profile);
    let net = net.apply_updates(spec, fwd.updates);
    lap(|p| &mut p.optimizer_s, &mut profile);
    let pending = PendingOutput {
        loss: with_output_losses(loss.detach(), each),
        outputs,
        labels: None,
    };
    (net, grads, pending)
}

/// The total loss `[1]` followed by each output's own (a model with several outputs), one
/// tensor so that one read brings them all back.
fn with_output_losses(total: Tensor<1>, each: Vec<Tensor<1>>) -> Tensor<1> {
    if each.is_empty() {
        return total;
    }
    let mut all = Vec::with_capacity(1 + each.len());
    all.push(total);
    all.extend(each.into_iter().map(Tensor::detach));
    Tensor::cat(all, 0)
}

/// Clips `grads` with `clipping` (Keras' `clipnorm` / `clipvalue` / `global_clipnorm`, see
/// [`crate::compile::Clipping`]), applies one optimizer update with `learning_rate`, then the
/// layers' weight constraints.
pub fn apply_gradients(
    net: Network,
    optim: &mut ModuleOptimizer,
    spec: &ModelSpec,
    grads: GradientsParams,
    clipping: Option<Clipping>,
    learning_rate: f64,
    profile: Option<&mut StepProfile>,
) -> Network {
    let clock = Instant::now();
    let grads = match clipping {
        Some(c) => c.apply(&net, grads),
        None => grads,
    };
    let net = optim
        .step(learning_rate, net, grads)
        .apply_constraints(spec);
    if let Some(p) = profile {
        p.optimizer_s += clock.elapsed().as_secs_f64();
    }
    net
}

/// Forward pass in inference mode (no dropout, moving statistics); the loss when the batch
/// has labels (weighted by its `sample_weight`, as Keras' `evaluate`).
pub fn eval_step(
    net: &Network,
    spec: &ModelSpec,
    compiled: &Compiled,
    batch: DeviceBatch,
) -> StepOutput {
    let inputs = DeviceBatch::inputs(batch.x, batch.more);
    let fwd = net.forward_graph(spec, inputs, false, &mut |_, _, _| {});
    let losses: Vec<f64> = match &batch.labels {
        Some(labels) => {
            let (loss, each) = compiled.losses(
                fwd.output.clone(),
                fwd.logits,
                labels,
                batch.sample_weight.as_ref(),
            );
            let loss = net.regularized(spec, loss, fwd.activity_loss);
            read(with_output_losses(loss, each))
                .into_iter()
                .map(f64::from)
                .collect()
        }
        None => vec![f64::NAN],
    };
    StepOutput {
        loss: losses[0],
        output_losses: losses[1..].to_vec(),
        outputs: read(fwd.output),
        labels: None,
    }
}
