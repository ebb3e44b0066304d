//! `MirroredStrategy`: synchronous data parallelism over replicas in one process.

use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;

use super::split::{split_batch, split_sizes};
use crate::batch::DeviceBatch;
use crate::compile::Compiled;
use crate::error::{KilnError, Result};
use crate::logs::StepProfile;
use crate::model::{ModelSpec, Network};
use crate::step::{PendingOutput, compute_gradients_scaled};

/// Where the replicas live.
#[derive(Debug, Clone)]
enum Replicas {
    /// `n` replicas sharing the model's device (CPU replicas; tests and many-core hosts).
    OnModelDevice(usize),
    /// One replica per device, in order (the first device should be the model's).
    Devices(Vec<Device>),
}

/// `tf.distribute.MirroredStrategy`: each step's global batch is split across the replicas
/// ([`super::split_sizes`]), each replica's gradients are those of its loss scaled by
/// `replica_examples / global_batch` — the gradient of `sum(per-example loss) / global_batch`,
/// as `tf.nn.compute_average_loss` — and the replicas' gradients are summed, so the update
/// equals the global-batch mean's. See the [module documentation](super) for BatchNormalization
/// and Dropout.
#[derive(Debug, Clone)]
pub struct MirroredStrategy {
    replicas: Replicas,
    reduce_seconds: f64,
    sync_batch_norm: bool,
}

/// The most replicas `num_replicas` accepts (each in-process replica copies the model).
pub const MAX_REPLICAS: usize = 4096;

impl MirroredStrategy {
    /// `num_replicas` replicas on the model's device (`[distribute] num_replicas`).
    ///
    /// # Errors
    /// [`KilnError::Config`] (`distribute.num_replicas`) when `num_replicas` is 0 or over
    /// [`MAX_REPLICAS`].
    pub fn new(num_replicas: usize) -> Result<MirroredStrategy> {
        if num_replicas == 0 {
            return Err(KilnError::config(
                "distribute.num_replicas",
                "must be at least 1 (the number of replicas the global batch is split across)",
            ));
        }
        if num_replicas > MAX_REPLICAS {
            return Err(KilnError::config(
                "distribute.num_replicas",
                format!(
                    "is {num_replicas}, over {MAX_REPLICAS}: replicas on the model's device each \
                     hold a copy of the model; use a number up to the global batch size"
                ),
            ));
        }
        Ok(MirroredStrategy {
            replicas: Replicas::OnModelDevice(num_replicas),
            reduce_seconds: 0.0,
            sync_batch_norm: false,
        })
    }

    /// One replica on each of `devices` (TensorFlow's `MirroredStrategy(devices=[...])`),
    /// without autodiff (training enables it). Gradients are reduced on the model's device.
    ///
    /// # Errors
    /// [`KilnError::Config`] (`distribute.devices`) when `devices` is empty.
    pub fn on_devices(devices: Vec<Device>) -> Result<MirroredStrategy> {
        if devices.is_empty() {
            return Err(KilnError::config(
                "distribute.devices",
                "is empty: list at least one device, or use num_replicas",
            ));
        }
        Ok(MirroredStrategy {
            replicas: Replicas::Devices(devices),
            reduce_seconds: 0.0,
            sync_batch_norm: false,
        })
    }

    /// BatchNormalization statistics over the whole global batch (`[distribute]
    /// sync_batch_norm`, [`super::sync_bn`]) instead of each replica's share. Replicas that
    /// share the model's device then compute exactly what one replica computes on the global
    /// batch, so the step runs as one: the same statistics, the same summed gradients, without
    /// the split.
    ///
    /// # Errors
    /// [`KilnError::Config`] (`distribute.sync_batch_norm`) for replicas on several devices:
    /// in-process replicas run one after another, and synchronized statistics need them to
    /// run together (use `multi_worker_mirrored`, one process per device).
    pub fn with_sync_batch_norm(mut self, on: bool) -> Result<MirroredStrategy> {
        if let Replicas::Devices(d) = &self.replicas
            && on
            && d.iter().any(|x| *x != d[0])
        {
            return Err(KilnError::config(
                "distribute.sync_batch_norm",
                "is not supported with replicas on several devices (`devices`): kiln runs \
                 in-process replicas one after another, and synchronized statistics need them \
                 side by side; use strategy = \"multi_worker_mirrored\" with one process per \
                 device, or per-replica statistics (sync_batch_norm = false)",
            ));
        }
        self.sync_batch_norm = on;
        Ok(self)
    }

    /// True when BatchNormalization statistics are synchronized across the replicas.
    pub fn sync_batch_norm(&self) -> bool {
        self.sync_batch_norm
    }

    /// True when every replica is on the model's device (`num_replicas`, or `devices` naming
    /// one device).
    pub fn on_one_device(&self) -> bool {
        match &self.replicas {
            Replicas::OnModelDevice(_) => true,
            Replicas::Devices(d) => d.iter().all(|x| *x == d[0]),
        }
    }

    /// `num_replicas_in_sync`.
    pub fn num_replicas(&self) -> usize {
        match &self.replicas {
            Replicas::OnModelDevice(n) => *n,
            Replicas::Devices(d) => d.len(),
        }
    }

    /// Seconds spent combining replicas since the last call (see
    /// [`super::Strategy::take_reduce_seconds`]).
    pub fn take_reduce_seconds(&mut self) -> f64 {
        std::mem::take(&mut self.reduce_seconds)
    }

    /// Adds `seconds` spent combining replicas (a custom step's all-reduces).
    pub(super) fn add_reduce_seconds(&mut self, seconds: f64) {
        self.reduce_seconds += seconds;
    }

    /// One mirrored gradient computation on the global `batch` (see
    /// [`super::Strategy::compute_gradients`]).
    pub fn compute_gradients(
        &mut self,
        net: Network,
        spec: &ModelSpec,
        compiled: &Compiled,
        batch: DeviceBatch,
        loss_factor: f64,
        mut profile: Option<&mut StepProfile>,
    ) -> (Network, GradientsParams, PendingOutput) {
        let global = batch.size;
        let home = batch.x.device();
        let n = self.num_replicas();
        let synchronized = self.sync_batch_norm && !spec.batch_norm_channels().is_empty();
        if n == 1 || global == 0 || synchronized {
            return compute_gradients_scaled(net, spec, compiled, batch, loss_factor, profile);
        }
        let parts = split_batch(batch, &split_sizes(global, n));
        let mut sum: Option<GradientsParams> = None;
        let mut losses = Vec::with_capacity(parts.len());
        let mut outputs = Vec::with_capacity(parts.len());
        let mut replica_nets = Vec::with_capacity(parts.len());
        for (r, part) in parts.into_iter().enumerate() {
            let scale = part.size as f64 / global as f64;
            let clock = Instant::now();
            let (replica_net, part) = match self.device_of(r) {
                Some(d) if d != home => (net.clone().fork(&d), to_device(part, &d)),
                _ => (net.clone(), part),
            };
            self.reduce_seconds += clock.elapsed().as_secs_f64();
            let (replica_net, grads, pending) = compute_gradients_scaled(
                replica_net,
                spec,
                compiled,
                part,
                loss_factor,
                profile.as_deref_mut(),
            );
            // The all-reduce: scale by this replica's share of the global batch, copy to the
            // model's device, sum.
            let clock = Instant::now();
            let (loss, out) = pending.into_parts();
            losses.push(loss.mul_scalar(scale).to_device(&home));
            outputs.push(out.to_device(&home));
            let mut reduce = ScaleAdd {
                sum: sum.take().unwrap_or_default(),
                new: grads,
                scale,
                device: &home,
            };
            replica_net.visit(&mut reduce);
            sum = Some(reduce.sum);
            replica_nets.push(replica_net);
            self.reduce_seconds += clock.elapsed().as_secs_f64();
        }
        let clock = Instant::now();
        let net = mean_moving_stats(net, replica_nets, &home);
        let loss = losses
            .into_iter()
            .reduce(|a, b| a + b)
            .expect("a non-empty batch has a replica");
        let pending = PendingOutput::new(loss, Tensor::cat(outputs, 0));
        self.reduce_seconds += clock.elapsed().as_secs_f64();
        (net, sum.unwrap_or_default(), pending)
    }

    /// Replica `r`'s device with autodiff, when replicas are placed on devices.
    fn device_of(&self, r: usize) -> Option<Device> {
        match &self.replicas {
            Replicas::OnModelDevice(_) => None,
            Replicas::Devices(d) => d.get(r).map(|d| d.clone().autodiff()),
        }
    }
}

/// `batch` copied to `device` (host copies unchanged).
fn to_device(batch: DeviceBatch, device: &Device) -> DeviceBatch {
    DeviceBatch {
        x: batch.x.to_device(device),
        more: batch
            .more
            .into_iter()
            .map(|a| a.to_device(device))
            .collect(),
        labels: batch.labels.map(|l| l.to_device(device)),
        sample_weight: batch.sample_weight.map(|w| w.to_device(device)),
        ..batch
    }
}

/// `sum[p] += scale * new[p]` on `device`, for each parameter `p` of the visited module.
pub(super) struct ScaleAdd<'a> {
    pub(super) sum: GradientsParams,
    pub(super) new: GradientsParams,
    pub(super) scale: f64,
    pub(super) device: &'a Device,
}

impl ModuleVisitor for ScaleAdd<'_> {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        let Some(g) = self.new.remove::<D>(p.id) else {
            return;
        };
        let g = g.mul_scalar(self.scale).to_device(self.device);
        let total = match self.sum.remove::<D>(p.id) {
            Some(s) => s + g,
            None => g,
        };
        self.sum.register::<D>(p.id, total);
    }
}

/// `net` with each BatchNormalization moving statistic replaced by the mean of the replicas'
/// updated ones ([`super::ReduceOp::Mean`]): each replica folded its own batch statistics in
/// (`moving * momentum + batch * (1 - momentum)`), and the mean of those is the update with
/// the mean of the replicas' statistics.
pub(super) fn mean_moving_stats(
    mut net: Network,
    replicas: Vec<Network>,
    home: &Device,
) -> Network {
    let k = replicas.len();
    if k == 0 || !net.layers.iter().any(|l| l.moving_mean.is_some()) {
        return net;
    }
    for (i, layer) in net.layers.iter_mut().enumerate() {
        let mean_of = |get: fn(&crate::model::LayerParams) -> Option<&Param<Tensor<1>>>| {
            replicas
                .iter()
                .filter_map(|r| get(&r.layers[i]).map(|p| p.val().detach().to_device(home)))
                .reduce(|a, b| a + b)
                .map(|s| s.div_scalar(k as f64))
        };
        if let Some(m) = mean_of(|l| l.moving_mean.as_ref()) {
            layer.moving_mean = layer
                .moving_mean
                .take()
                .map(|p| p.map(|_| m.set_require_grad(false)));
        }
        if let Some(v) = mean_of(|l| l.moving_variance.as_ref()) {
            layer.moving_variance = layer
                .moving_variance
                .take()
                .map(|p| p.map(|_| v.set_require_grad(false)));
        }
    }
    net
}
