//! The replicas of one training step and their cross-replica sums, for the operations that
//! synchronize inside a step's forward and backward passes (BatchNormalization's
//! `synchronized=True`, see [`crate::distribute::sync_bn`]).
//!
//! The replicas of a step are given by a [`CrossReplica`] group, made current on the thread
//! that runs the step's forward and backward passes with [`scope`]; an operation asks
//! [`active`] whether one is current and sums buffers with [`sum_across_replicas`]. Every
//! replica must run the same network, so that the sums happen in the same order everywhere; a
//! replica without examples runs a one-example placeholder batch whose values it does not
//! contribute (`contributes = false`).
//!
//! Low in the crate's layers (below [`crate::ops`] and [`crate::model`]): the strategies of
//! [`crate::distribute`] make the groups, the layers only read the current one.

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex};

/// A group of replicas that sum buffers together.
pub trait CrossReplica: Send + Sync + std::fmt::Debug {
    /// Replaces `values` with the element-wise sum of every replica's `values` (the same
    /// length everywhere). Every replica of the group calls it the same number of times, in
    /// the same order.
    fn all_reduce_sum(&self, values: &mut Vec<f32>);
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
