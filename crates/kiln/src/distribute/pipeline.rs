//! Pipeline model parallelism (GPipe): the model's layers split into stages, each stage's
//! weights on its own device, each global batch run as micro-batches.

use std::ops::Range;
use std::time::Instant;

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::prelude::*;

use super::balance::{self, BalanceBy, Stages};
use super::split::{split_batch, split_sizes};
use crate::batch::DeviceBatch;
use crate::compile::Compiled;
use crate::error::{KilnError, Result};
use crate::logs::StepProfile;
use crate::model::{ModelSpec, Network, StateUpdate, thousands};
use crate::step::PendingOutput;

/// GPipe-style pipeline model parallelism (Huang et al. 2019, "GPipe: Efficient Training of
/// Giant Neural Networks using Pipeline Parallelism"; the API follows torchgpipe's
/// `GPipe(model, balance, chunks)`).
///
/// - **Stages**: consecutive runs of the model's layers ([`balance::plan`]): a number of
///   stages balanced by parameters or forward FLOPs, or each stage's layer count.
/// - **Devices**: stage `s`'s weights (and so its gradients and optimizer state) live on
///   `devices[s]`; an activation crossing a stage boundary is copied to the next stage's
///   device, and its gradient copied back by autodiff. Without devices every stage stays on
///   the model's device (the schedule and its results are the same).
/// - **Micro-batches**: each global batch is split into `num_micro_batches` micro-batches
///   ([`super::split_sizes`], TensorFlow's split: `ceil(batch / m)` each, the last ones
///   smaller). All micro-batches run forward, then one backward pass over the sum of their
///   losses, each weighted by its share of the global batch (GPipe's synchronous schedule:
///   the gradients are those of the global batch's mean loss, as on one device, and the
///   weights are updated once per global batch).
///
/// Where the result differs from one device: BatchNormalization normalizes each micro-batch
/// with its own statistics (as GPipe does; use `num_micro_batches = 1` for the one-device
/// result) and its moving averages take the mean of the micro-batches' statistics; Dropout
/// draws its masks per micro-batch.
///
/// Stages run one after another on the host thread: on the CPU the stages share the same
/// cores, so the pipeline saves memory per device, not time; on GPUs each device's kernels
/// are queued asynchronously and run while the host moves on.
#[derive(Debug, Clone)]
pub struct PipelineStrategy {
    stages: Stages,
    balance_by: BalanceBy,
    devices: Vec<Device>,
    num_micro_batches: usize,
    /// The layer ranges, computed from the model at the first step (or by [`Self::plan`]).
    plan: Option<Vec<Range<usize>>>,
    transfer_seconds: f64,
}

impl PipelineStrategy {
    /// `stages` on the model's device, each global batch in `num_micro_batches`
    /// micro-batches.
    ///
    /// # Errors
    /// [`KilnError::Config`] (`distribute.stages`, `distribute.num_micro_batches`) for zero
    /// stages or micro-batches.
    pub fn new(
        stages: Stages,
        balance_by: BalanceBy,
        num_micro_batches: usize,
    ) -> Result<PipelineStrategy> {
        if stages.is_empty() {
            return Err(KilnError::config(
                "distribute.stages",
                "must be at least 1 (a number of stages, or each stage's number of layers)",
            ));
        }
        if num_micro_batches == 0 {
            return Err(KilnError::config(
                "distribute.num_micro_batches",
                "must be at least 1 (the number of micro-batches each global batch is split into)",
            ));
        }
        Ok(PipelineStrategy {
            stages,
            balance_by,
            devices: Vec::new(),
            num_micro_batches,
            plan: None,
            transfer_seconds: 0.0,
        })
    }

    /// The same with stage `s` on `devices[s]` (without autodiff: training enables it).
    ///
    /// # Errors
    /// [`KilnError::Config`] (`distribute.devices`) when there is not one device per stage.
    pub fn on_devices(mut self, devices: Vec<Device>) -> Result<PipelineStrategy> {
        if devices.len() != self.stages.len() {
            return Err(KilnError::config(
                "distribute.devices",
                format!(
                    "lists {} device{} for {} stage{}: give one device per stage",
                    devices.len(),
                    if devices.len() == 1 { "" } else { "s" },
                    self.stages.len(),
                    if self.stages.len() == 1 { "" } else { "s" },
                ),
            ));
        }
        self.devices = devices;
        Ok(self)
    }

    /// True when the stages are placed on devices ([`Self::on_devices`]).
    pub fn has_devices(&self) -> bool {
        !self.devices.is_empty()
    }

    /// Micro-batches per global batch.
    pub fn num_micro_batches(&self) -> usize {
        self.num_micro_batches
    }

    /// Each stage's layer range for `spec` (computed once, then kept).
    ///
    /// # Errors
    /// As [`balance::plan`].
    pub fn plan(&mut self, spec: &ModelSpec) -> Result<&[Range<usize>]> {
        if self.plan.is_none() {
            self.plan = Some(balance::plan(spec, &self.stages, self.balance_by)?);
        }
        Ok(self.plan.as_deref().expect("just set"))
    }

    /// One line per stage: its layers, parameters and device, for the start of a run.
    ///
    /// # Errors
    /// As [`balance::plan`].
    pub fn describe(&mut self, spec: &ModelSpec) -> Result<String> {
        let devices = self.devices.clone();
        let micro = self.num_micro_batches;
        let by = self.balance_by;
        let auto = matches!(self.stages, Stages::Count(_));
        let plan = self.plan(spec)?.to_vec();
        let costs = balance::layer_costs(spec, BalanceBy::Flops);
        let mut out = format!(
            "Pipeline: {} stage{}{}, {micro} micro-batch{} per batch\n",
            plan.len(),
            if plan.len() == 1 { "" } else { "s" },
            if auto {
                format!(
                    " balanced by {}",
                    match by {
                        BalanceBy::Parameters => "parameters",
                        BalanceBy::Flops => "FLOPs",
                    }
                )
            } else {
                String::new()
            },
            if micro == 1 { "" } else { "es" }
        );
        for (s, r) in plan.iter().enumerate() {
            let names = &spec.layers()[r.clone()];
            let params: usize = r
                .clone()
                .map(|i| {
                    let (a, b) = spec.layer_params(i);
                    a + b
                })
                .sum();
            let flops: f64 = costs[r.clone()].iter().sum();
            let device = devices
                .get(s)
                .map_or("the training device", crate::device::name);
            out.push_str(&format!(
                "  stage {s}: {} ({} layer{}), {} parameters, {} forward FLOPs/example, on {device}\n",
                if names.len() == 1 {
                    names[0].name.clone()
                } else {
                    format!("{} … {}", names[0].name, names[names.len() - 1].name)
                },
                names.len(),
                if names.len() == 1 { "" } else { "s" },
                thousands(params),
                thousands(flops as usize),
            ));
        }
        Ok(out)
    }

    /// Seconds spent copying activations between stage devices since the last call (the
    /// communication time of [`super::diagnosis`]); 0 without devices.
    pub fn take_transfer_seconds(&mut self) -> f64 {
        std::mem::take(&mut self.transfer_seconds)
    }

    /// The device (with autodiff) of each layer, when stages are placed on devices.
    fn layer_devices(&mut self, spec: &ModelSpec) -> Option<Vec<Device>> {
        if self.devices.is_empty() {
            return None;
        }
        let devices: Vec<Device> = self.devices.iter().map(|d| d.clone().autodiff()).collect();
        let plan = self
            .plan(spec)
            .expect("the plan is checked before training");
        let mut per_layer = Vec::with_capacity(spec.layers().len());
        for (s, r) in plan.iter().enumerate() {
            per_layer.extend(r.clone().map(|_| devices[s].clone()));
        }
        Some(per_layer)
    }

    /// The gradients of the global `batch` (see [`super::Strategy::compute_gradients`]): its
    /// micro-batches forward through the stages, one backward pass over the sum of their
    /// losses weighted by their shares (times `loss_factor`).
    pub fn compute_gradients(
        &mut self,
        mut net: Network,
        spec: &ModelSpec,
        compiled: &Compiled,
        batch: DeviceBatch,
        loss_factor: f64,
        mut profile: Option<&mut StepProfile>,
    ) -> (Network, GradientsParams, PendingOutput) {
        let home = batch.x.device();
        let placement = self.layer_devices(spec);
        if let Some(devices) = &placement {
            let clock = Instant::now();
            net = place(net, devices);
            self.transfer_seconds += clock.elapsed().as_secs_f64();
        }
        let global = batch.size.max(1) as f64;
        let sizes = split_sizes(batch.size, self.num_micro_batches.min(batch.size.max(1)));
        let mut clock = Instant::now();
        let mut lap = |slot: fn(&mut StepProfile) -> &mut f64,
                       profile: &mut Option<&mut StepProfile>| {
            if let Some(p) = profile.as_deref_mut() {
                *slot(p) += clock.elapsed().as_secs_f64();
            }
            clock = Instant::now();
        };
        let mut objective: Option<Tensor<1>> = None;
        let (mut losses, mut outputs, mut stats) = (Vec::new(), Vec::new(), Vec::new());
        for part in split_batch(batch, &sizes) {
            let share = part.size as f64 / global;
            let labels = part.labels.expect("training batches carry labels");
            let at = placement.as_ref().map(|d| move |i: usize| d[i].clone());
            let mut layer_times = Vec::new();
            let fwd = net.forward_placed(
                spec,
                vec![part.x],
                true,
                &mut |i, d, _| layer_times.push((i, d)),
                at.as_ref().map(|f| f as &dyn Fn(usize) -> Device),
            );
            if let Some(p) = profile.as_deref_mut() {
                for (i, d) in layer_times {
                    p.add_layer(i, &spec.layers()[i].name, d);
                }
            }
            lap(|p| &mut p.forward_s, &mut profile);
            let out_device = fwd.output.device();
            let (loss, _) = compiled.losses(
                fwd.output.clone(),
                fwd.logits,
                &labels.to_device(&out_device),
                part.sample_weight
                    .map(|w| w.to_device(&out_device))
                    .as_ref(),
            );
            let loss = net.regularized(spec, loss, fwd.activity_loss);
            outputs.push(fwd.output.detach().to_device(&home));
            losses.push(loss.clone().detach().mul_scalar(share).to_device(&home));
            let term = loss.mul_scalar(share * loss_factor);
            objective = Some(match objective.take() {
                Some(acc) => acc + term,
                None => term,
            });
            stats.push(fwd.updates);
            lap(|p| &mut p.loss_s, &mut profile);
        }
        let objective = objective.expect("a batch has at least one micro-batch");
        let grads = GradientsParams::from_grads(objective.backward(), &net);
        lap(|p| &mut p.backward_s, &mut profile);
        let net = net.apply_updates(spec, mean_updates(stats));
        let loss = losses
            .into_iter()
            .reduce(|a, b| a + b)
            .expect("at least one micro-batch");
        let pending = PendingOutput::new(loss, Tensor::cat(outputs, 0));
        lap(|p| &mut p.optimizer_s, &mut profile);
        (net, grads, pending)
    }
}

/// `net` with layer `i`'s parameters on `devices[i]` (forked, so they stay trainable; a
/// layer already there is left as it is).
fn place(mut net: Network, devices: &[Device]) -> Network {
    let layers = std::mem::take(&mut net.layers);
    net.layers = layers
        .into_iter()
        .zip(devices)
        .map(|(layer, d)| {
            if layer.devices().iter().all(|have| have == d) {
                layer
            } else {
                layer.fork(d)
            }
        })
        .collect();
    net
}

/// The mean over the micro-batches of each new moving statistic: BatchNormalization's
/// update is linear in the batch statistics, so this is the update the mean statistics give.
fn mean_updates(per_micro: Vec<Vec<StateUpdate>>) -> Vec<StateUpdate> {
    let k = per_micro.len();
    let mut sum: Vec<StateUpdate> = Vec::new();
    for updates in per_micro {
        for (j, (layer, name, value)) in updates.into_iter().enumerate() {
            match sum.get_mut(j) {
                Some((_, _, total)) => *total = total.clone() + value.detach(),
                None => sum.push((layer, name, value.detach())),
            }
        }
    }
    if k <= 1 {
        return sum;
    }
    sum.into_iter()
        .map(|(l, n, v)| (l, n, v.div_scalar(k as f64)))
        .collect()
}
