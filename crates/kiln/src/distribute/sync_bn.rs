//! `sync_batch_norm`: BatchNormalization statistics over the whole global batch instead of
//! each replica's share (Keras 3's `BatchNormalization(synchronized=True)`, TensorFlow's
//! `tf.keras.layers.experimental.SyncBatchNormalization`).
//!
//! Each replica sums its share per channel, `Σx` and `Σx²`, with its element count, and one
//! all-reduce (`SUM`) of the `2 × channels + 1` values gives every replica the global batch's
//! `mean = Σx / n` and `variance = max(Σx² / n - mean², 0)`, as Keras' `_moments` with
//! `synchronized=True` computes them (`keras/src/backend/tensorflow/nn.py`,
//! `_compute_moments_sync`). The all-reduce is a differentiable operation
//! ([`crate::ops::cross_replica_sum`]): its backward pass all-reduces the gradient (a sum is
//! its own adjoint), so each replica's input gradient carries what the other replicas' losses
//! owe to the shared statistics, and the summed gradients equal one device's on the global
//! batch.
//!
//! The replicas of a step are given by a [`CrossReplica`] group, made current on the thread
//! that runs the step's forward and backward passes with [`scope`]; BatchNormalization in
//! training mode synchronizes while a scope is current ([`active`]), and uses its own batch
//! otherwise. Every replica must run the same network, so that the all-reduces (one per
//! BatchNormalization layer in the forward pass, one in the backward pass) happen in the same
//! order everywhere; a replica without examples runs a one-example placeholder batch whose
//! sums it does not contribute (`contributes = false`).

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex};

use burn::prelude::*;

/// A group of replicas that sum buffers together.
pub trait CrossReplica: Send + Sync + std::fmt::Debug {
    /// Replaces `values` with the element-wise sum of every replica's `values` (the same
    /// length everywhere). Every replica of the group calls it the same number of times, in
    /// the same order.
    fn all_reduce_sum(&self, values: &mut Vec<f32>);
}

/// The processes of the MPI job (`MPI_COMM_WORLD`, [`super::world::all_reduce_sum`]), with
/// a clock of the time spent in its all-reduces (waiting for the other workers included).
#[derive(Debug, Default)]
pub struct MpiReplicas {
    seconds: Mutex<f64>,
}

impl MpiReplicas {
    /// Seconds spent in all-reduces since the last call.
    pub fn take_seconds(&self) -> f64 {
        std::mem::take(&mut *self.seconds.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl CrossReplica for MpiReplicas {
    fn all_reduce_sum(&self, values: &mut Vec<f32>) {
        let clock = std::time::Instant::now();
        super::world::all_reduce_sum(values);
        *self.seconds.lock().unwrap_or_else(|p| p.into_inner()) += clock.elapsed().as_secs_f64();
    }
}

/// `n` threads of one process, each running one replica (a barrier per all-reduce).
#[derive(Debug)]
pub struct ThreadReplicas {
    n: usize,
    round: Mutex<Round>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct Round {
    sum: Vec<f32>,
    arrived: usize,
    generation: u64,
    result: Vec<f32>,
}

impl ThreadReplicas {
    /// A group of `n` threads (at least 1).
    pub fn new(n: usize) -> ThreadReplicas {
        ThreadReplicas {
            n: n.max(1),
            round: Mutex::new(Round::default()),
            done: Condvar::new(),
        }
    }
}

impl CrossReplica for ThreadReplicas {
    fn all_reduce_sum(&self, values: &mut Vec<f32>) {
        let mut r = self.round.lock().unwrap_or_else(|p| p.into_inner());
        if r.arrived == 0 {
            r.sum.clear();
            r.sum.extend_from_slice(values);
        } else {
            assert_eq!(r.sum.len(), values.len(), "replicas reduce equal lengths");
            r.sum
                .iter_mut()
                .zip(values.iter())
                .for_each(|(s, v)| *s += v);
        }
        r.arrived += 1;
        if r.arrived == self.n {
            r.arrived = 0;
            r.generation += 1;
            r.result = std::mem::take(&mut r.sum);
            self.done.notify_all();
        } else {
            let generation = r.generation;
            while r.generation == generation {
                r = self.done.wait(r).unwrap_or_else(|p| p.into_inner());
            }
        }
        values.clear();
        values.extend_from_slice(&r.result);
    }
}

#[derive(Debug, Clone)]
struct Current {
    group: Arc<dyn CrossReplica>,
    contributes: bool,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// While alive, BatchNormalization layers in training mode on this thread synchronize their
/// statistics over `group`; dropping it restores what was current before.
#[must_use = "synchronization ends when the scope is dropped"]
#[derive(Debug)]
pub struct SyncScope {
    previous: Option<Current>,
}

/// Makes `group` current on this thread (see [`SyncScope`]). A replica whose step has no
/// examples runs a placeholder batch with `contributes = false`: it takes part in every
/// all-reduce with zeros and its placeholder gets no gradient through the statistics.
pub fn scope(group: Arc<dyn CrossReplica>, contributes: bool) -> SyncScope {
    let previous = CURRENT.with(|c| c.replace(Some(Current { group, contributes })));
    SyncScope { previous }
}

impl Drop for SyncScope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// True while a [`scope`] is current on this thread.
pub fn active() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

/// The all-reduce behind [`crate::ops::cross_replica_sum`]: `values` summed over the current
/// group, or left as they are without one. A replica that does not contribute sends zeros and,
/// for the backward pass (`adjoint`), keeps none of the sum either (its input was multiplied
/// by zero).
pub(crate) fn sum_across_replicas(values: &mut Vec<f32>, adjoint: bool) {
    let Some(current) = CURRENT.with(|c| c.borrow().clone()) else {
        return;
    };
    if !current.contributes {
        values.fill(0.0);
    }
    current.group.all_reduce_sum(values);
    if adjoint && !current.contributes {
        values.fill(0.0);
    }
}

/// Batch normalization of `x [batch, channels, ...]` with the global batch's statistics
/// (training mode): `y = (x - mean) / sqrt(variance + epsilon) * gamma + beta`, per channel.
/// Returns `y` and the (detached) batch mean and biased variance `[channels]` for the moving
/// averages.
///
/// The sums are taken of `x - shift` (`shift [channels]`, a constant every replica holds
/// alike: the layer's moving mean), which keeps `Σx²/n - mean²` from cancelling when the
/// mean is large against the spread (the shifted-data algorithm; TensorFlow's
/// `tf.nn.sufficient_statistics` has the same `shift` argument). The result does not depend
/// on the shift but through rounding.
pub fn batch_norm_sync<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    shift: Tensor<1>,
    epsilon: f64,
) -> (Tensor<D>, Tensor<1>, Tensor<1>) {
    let dims = x.dims();
    let (batch, channels) = (dims[0], dims[1]);
    let positions: usize = dims[2..].iter().product();
    let shift = shift.detach();
    let centered = x
        .reshape([batch, channels, positions])
        .sub(shift.clone().reshape([1, channels, 1]));
    let device = centered.device();
    let sum = centered.clone().sum_dim(2).sum_dim(0).reshape([channels]);
    let squares = centered
        .clone()
        .mul(centered.clone())
        .sum_dim(2)
        .sum_dim(0)
        .reshape([channels]);
    let count = Tensor::<1>::from_floats([(batch * positions) as f32], &device);
    let global = crate::ops::cross_replica_sum(Tensor::cat(vec![sum, squares, count], 0));
    let n = global
        .clone()
        .slice(2 * channels..2 * channels + 1)
        .detach();
    let offset = global.clone().slice(0..channels).div(n.clone());
    let mean_sq = global.slice(channels..2 * channels).div(n);
    let variance = mean_sq
        .sub(offset.clone().mul(offset.clone()))
        .clamp_min(0.0);
    let scale = gamma.div(variance.clone().add_scalar(epsilon).sqrt());
    let y = centered
        .sub(offset.clone().reshape([1, channels, 1]))
        .mul(scale.reshape([1, channels, 1]))
        .add(beta.reshape([1, channels, 1]));
    let mean = offset.add(shift).detach();
    (y.reshape(dims), mean, variance.detach())
}

#[cfg(test)]
#[path = "sync_bn_tests.rs"]
mod tests;
