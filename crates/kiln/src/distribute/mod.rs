//! Distribution strategies (`tf.distribute`): how a training step's batch is spread over
//! replicas and how their gradients are combined.
//!
//! - [`Strategy::OneDevice`]: the step runs on the model's device (TensorFlow's
//!   `OneDeviceStrategy`, and the default strategy).
//! - [`Strategy::Mirrored`] ([`MirroredStrategy`]): synchronous data parallelism in one process
//!   (TensorFlow's `MirroredStrategy`). The dataset is batched at the *global* batch size; each
//!   step splits the batch across the replicas ([`split_sizes`]), each replica computes the
//!   gradients of its loss scaled by `1 / global_batch` (`tf.nn.compute_average_loss`), the
//!   replicas' gradients are summed (the all-reduce, [`ReduceOp::Sum`]), and one optimizer
//!   update with the sum — the gradient of the global batch's mean loss — is applied to the
//!   weights every replica reads. Metrics see the whole global batch (TensorFlow aggregates its
//!   metric variables across replicas, which gives the same values).
//! - [`Strategy::MultiWorkerMirrored`] ([`MultiWorkerMirroredStrategy`]): the same over
//!   processes started by `mpirun`, one replica each, gradients summed by one MPI all-reduce
//!   per step (TensorFlow's `MultiWorkerMirroredStrategy`; needs the cargo feature `mpi`).
//! - [`Strategy::Pipeline`] ([`PipelineStrategy`]): model parallelism. The layers are split
//!   into stages ([`balance`]), each stage's weights on its own device, and each batch runs as
//!   GPipe micro-batches; the gradients are those of one device.
//!
//! Semantics are those of `tf.distribute` (TensorFlow guide "Distributed training with
//! TensorFlow", `tensorflow/python/distribute/mirrored_strategy.py`, and
//! `tf.nn.compute_average_loss`); where kiln differs:
//! - BatchNormalization uses per-replica batch statistics (as TensorFlow without
//!   `SyncBatchNormalization`); the moving averages end as the mean of the replicas' updates,
//!   which is what tf.keras' `moving_mean` / `moving_variance` variables
//!   (`synchronization=ON_READ, aggregation=MEAN`) read as. With `sync_batch_norm` the
//!   statistics are the global batch's ([`sync_bn`]).
//! - Dropout draws its masks per replica, so a mirrored run with Dropout is not bitwise the
//!   one-device run (neither is TensorFlow's).
//! - Replicas run one after another on the host thread; each replica's kernels use the
//!   backend's own parallelism (Burn's flex CPU backend is multi-threaded). With replicas on
//!   several Burn devices ([`MirroredStrategy::on_devices`]) the weights are forked to each
//!   device, each replica's gradients are copied to the first device and summed there, and the
//!   update is applied once (TensorFlow's `ReductionToOneDevice`); every replica then reads the
//!   same updated weights.
//! - A custom train step ([`crate::step::custom`]) runs once per replica, in threads that take
//!   turns, each `apply_gradients` an all-reduce ([`train_step_replicated`]).

pub mod balance;
pub mod cost_model;
mod custom;
pub mod diagnosis;
mod mirrored;
mod multi_worker;
mod pipeline;
mod split;
pub mod sync_bn;
pub mod world;

pub use balance::{BalanceBy, Stages};
pub use custom::train_step_replicated;
pub use mirrored::MirroredStrategy;
pub use multi_worker::MultiWorkerMirroredStrategy;
pub use pipeline::PipelineStrategy;
pub use split::{even_sizes, split_batch, split_sizes};

/// Stages of `strategy = "pipeline"` without a `stages` key.
pub const DEFAULT_PIPELINE_STAGES: usize = 2;

use burn::optim::GradientsParams;

use crate::batch::DeviceBatch;
use crate::compile::Compiled;
use crate::logs::StepProfile;
use crate::model::{ModelSpec, Network};
use crate::step::{PendingOutput, compute_gradients_scaled};

/// How replicas' values are combined (`tf.distribute.ReduceOp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Element-wise sum (gradients of losses already scaled by `1 / global_batch`).
    Sum,
    /// Element-wise mean (BatchNormalization's moving statistics).
    Mean,
}

/// A distribution strategy, given to the trainer with [`crate::Model::set_strategy`].
#[derive(Debug, Clone, Default)]
pub enum Strategy {
    /// One replica on the model's device (`tf.distribute.OneDeviceStrategy`).
    #[default]
    OneDevice,
    /// Synchronous data parallelism over several replicas in one process
    /// (`tf.distribute.MirroredStrategy`).
    Mirrored(MirroredStrategy),
    /// Synchronous data parallelism over MPI processes, one replica each
    /// (`tf.distribute.MultiWorkerMirroredStrategy`).
    MultiWorkerMirrored(MultiWorkerMirroredStrategy),
    /// Pipeline model parallelism: the layers in stages, batches in micro-batches (GPipe).
    Pipeline(PipelineStrategy),
}

impl Strategy {
    /// `num_replicas_in_sync`: 1 for [`Strategy::OneDevice`].
    pub fn num_replicas_in_sync(&self) -> usize {
        match self {
            Strategy::OneDevice => 1,
            Strategy::Mirrored(m) => m.num_replicas(),
            Strategy::MultiWorkerMirrored(m) => m.num_replicas(),
            Strategy::Pipeline(_) => 1,
        }
    }

    /// For [`Strategy::MultiWorkerMirrored`] across processes: the seconds since the last call
    /// spent waiting for the slowest worker and in the all-reduce itself (parts of
    /// [`Strategy::take_reduce_seconds`]); `None` for the other strategies.
    pub fn take_wait_and_all_reduce_seconds(&mut self) -> Option<(f64, f64)> {
        match self {
            Strategy::MultiWorkerMirrored(m) if m.num_replicas() > 1 => {
                Some(m.take_wait_and_all_reduce_seconds())
            }
            _ => None,
        }
    }

    /// True when the step moves data between replicas or devices (several replicas, or
    /// pipeline stages on devices): the epoch then reports its communication time.
    pub fn communicates(&self) -> bool {
        match self {
            Strategy::Pipeline(p) => p.has_devices(),
            other => other.num_replicas_in_sync() > 1,
        }
    }

    /// True when each worker of a [`Strategy::MultiWorkerMirrored`] job reads its own input
    /// shard (see [`MultiWorkerMirroredStrategy::set_local_input`]).
    pub fn shards_input(&self) -> bool {
        matches!(self, Strategy::MultiWorkerMirrored(m) if m.local_input())
    }

    /// With sharded input, the step's global batch size agreed from each worker's `local`
    /// one (0: every shard is exhausted); otherwise `local`.
    pub fn agree_input(&mut self, local: usize) -> usize {
        match self {
            Strategy::MultiWorkerMirrored(m) => m.agree_input(local),
            _ => local,
        }
    }

    /// `value` summed over the workers of a [`Strategy::MultiWorkerMirrored`] job (one
    /// all-reduce; every worker must call it); `value` itself otherwise.
    pub fn sum_over_workers(&mut self, value: f64) -> f64 {
        match self {
            Strategy::MultiWorkerMirrored(m) if m.num_replicas() > 1 => {
                let mut v = vec![value as f32];
                world::all_reduce_sum(&mut v);
                f64::from(v[0])
            }
            _ => value,
        }
    }

    /// False on the workers of a [`Strategy::MultiWorkerMirrored`] job other than rank 0:
    /// they write nothing to the run directory and print nothing. True otherwise.
    pub fn is_chief(&self) -> bool {
        match self {
            Strategy::MultiWorkerMirrored(m) => m.is_chief(),
            _ => true,
        }
    }

    /// The gradients of `batch` (the global batch) for `net`'s parameters, combined across
    /// replicas: the gradient of the global batch's mean loss (Keras' `sum_over_batch_size`,
    /// weighted by the batch's `sample_weight`). Returns the network (BatchNormalization's
    /// moving statistics updated), the gradients on the network's device and the pending
    /// global-batch loss and outputs (`[global_batch, units]`, in batch order). With
    /// [`Strategy::OneDevice`] this is [`compute_gradients_scaled`]. The gradients are those
    /// of the loss times `loss_factor` (a loss scale and/or a part's share of the batch; 1.0
    /// for plain training); the pending loss is unscaled.
    pub fn compute_gradients(
        &mut self,
        net: Network,
        spec: &ModelSpec,
        compiled: &Compiled,
        batch: DeviceBatch,
        loss_factor: f64,
        profile: Option<&mut StepProfile>,
    ) -> (Network, GradientsParams, PendingOutput) {
        match self {
            Strategy::OneDevice => {
                compute_gradients_scaled(net, spec, compiled, batch, loss_factor, profile)
            }
            Strategy::Mirrored(m) => {
                m.compute_gradients(net, spec, compiled, batch, loss_factor, profile)
            }
            Strategy::MultiWorkerMirrored(m) => {
                m.compute_gradients(net, spec, compiled, batch, loss_factor, profile)
            }
            Strategy::Pipeline(p) => {
                p.compute_gradients(net, spec, compiled, batch, loss_factor, profile)
            }
        }
    }

    /// Seconds spent combining replicas (gradient reduction, device copies, moving-statistics
    /// averaging) or copying activations between pipeline stages since the last call; 0 for
    /// [`Strategy::OneDevice`]. The epoch's communication time of [`diagnosis`].
    pub fn take_reduce_seconds(&mut self) -> f64 {
        match self {
            Strategy::OneDevice => 0.0,
            Strategy::Mirrored(m) => m.take_reduce_seconds(),
            Strategy::MultiWorkerMirrored(m) => m.take_reduce_seconds(),
            Strategy::Pipeline(p) => p.take_transfer_seconds(),
        }
    }
}

#[cfg(test)]
mod pipeline_tests;
#[cfg(test)]
mod tests;
