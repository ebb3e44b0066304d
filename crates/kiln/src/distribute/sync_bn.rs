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

use std::sync::Mutex;

pub use crate::model::layers::batch_norm_sync::batch_norm_sync;
pub use crate::replica::{CrossReplica, SyncScope, ThreadReplicas, active, scope};

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
