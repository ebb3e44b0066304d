//! A custom train step ([`crate::step::custom`]) under a distribution strategy.
//!
//! As in TensorFlow, the step runs once per replica on the replica's share of the global
//! batch ([`super::split_sizes`]). Inside it, [`Parts::apply_gradients`] scales the replica's
//! gradients by its share of the global batch, sums them over the replicas (the all-reduce),
//! and every replica applies the same update to its copy of the weights, so the replicas stay
//! identical and a GAN's second update sees the first one everywhere. The step's logs are the
//! share-weighted sum of the replicas' (means over the global batch), and BatchNormalization
//! moving statistics of every part end as the replicas' mean.
//!
//! - `mirrored`: the replicas run in threads that take turns in a fixed order (replica 0 until
//!   its first all-reduce, then replica 1, …), so the backend's random generator is drawn in
//!   the same order on every run. They take turns rather than run at once: the sums are
//!   exact and in a fixed order, but in-process replicas of a custom step bring no speedup.
//! - `multi_worker_mirrored`: each worker runs the step on its rows; the all-reduce is one
//!   `MPI_Allreduce` per `apply_gradients` (after a small one that checks that every worker
//!   names the same parts), and the logs, moving statistics and stop requests share one more
//!   at the step's end.
//!
//! Random draws ([`Parts::start_draws`]): replica (or worker) `r` seeds the generator from the
//! step's seed and `r`, and again after each `apply_gradients` from the number of calls so
//! far. Replica 0 draws what one device draws, replicas draw different noise (as
//! TensorFlow's do), worker `r` of an MPI job draws what in-process replica `r` draws, and a
//! resumed run repeats the uninterrupted one.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::prelude::*;

use super::Strategy;
use super::mirrored::{ScaleAdd, mean_moving_stats};
use super::split::{split_batch, split_sizes};
use crate::batch::DeviceBatch;
use crate::model::Network;
use crate::step::custom::{CrossReplica, Parts, StepContext, StepLogs, TrainStep, run_guarded};

/// Runs `step` on `batch` (the global batch) under `strategy`, `seed` being the step's seed
/// (already set on the device for replica 0). Returns the parts (replica 0's copy) and the
/// global batch's logs.
pub fn train_step_replicated(
    strategy: &mut Strategy,
    step: &dyn TrainStep,
    mut parts: Parts,
    batch: DeviceBatch,
    ctx: &StepContext,
    seed: u64,
) -> (Parts, Result<StepLogs, String>) {
    match strategy {
        Strategy::Mirrored(m)
            if m.num_replicas() > 1
                && batch.size > 1
                && !(m.sync_batch_norm() && has_batch_norm(&parts)) =>
        {
            let (parts, logs, seconds) =
                in_process(m.num_replicas(), step, parts, batch, ctx, seed);
            m.add_reduce_seconds(seconds);
            (parts, logs)
        }
        Strategy::MultiWorkerMirrored(m) => m.custom_step(step, parts, batch, ctx, seed),
        // One replica (or synchronized statistics on one device, which is one replica on the
        // global batch): the step as it is.
        _ => {
            parts.start_draws(seed, 0, &batch.x.device());
            let logs = run_guarded(step, &mut parts, batch, ctx);
            (parts, logs)
        }
    }
}

/// True when a part has BatchNormalization moving statistics.
fn has_batch_norm(parts: &Parts) -> bool {
    parts
        .all()
        .iter()
        .any(|p| p.network().layers.iter().any(|l| l.moving_mean.is_some()))
}

/// `mirrored` in one process: one thread per replica, taking turns. Also returns the
/// seconds spent combining the replicas (the all-reduces' sums and the step's end).
fn in_process(
    n: usize,
    step: &dyn TrainStep,
    parts: Parts,
    batch: DeviceBatch,
    ctx: &StepContext,
    seed: u64,
) -> (Parts, Result<StepLogs, String>, f64) {
    let (global, device) = (batch.size, batch.x.device());
    let shares = split_batch(batch, &split_sizes(global, n));
    let group = Arc::new(Group::new(shares.len()));
    let mut copies: Vec<Parts> = Vec::with_capacity(shares.len());
    let mut parts = Some(parts);
    for (r, share) in shares.iter().enumerate() {
        let handle = Box::new(Replica {
            group: group.clone(),
            index: r,
            share: share.size as f64 / global as f64,
            device: device.clone(),
        });
        copies.push(match parts.take() {
            Some(mut own) => {
                own.set_cross_replica(Some(handle));
                own
            }
            None => copies[0].replica(handle),
        });
    }
    let weights: Vec<f64> = shares
        .iter()
        .map(|s| s.size as f64 / global as f64)
        .collect();
    let ran: Vec<(Parts, Result<StepLogs, String>)> = std::thread::scope(|scope| {
        let threads: Vec<_> = copies
            .into_iter()
            .zip(shares)
            .enumerate()
            .map(|(r, (mut own, share))| {
                let (group, device) = (group.clone(), device.clone());
                scope.spawn(move || {
                    let logs = group.replica_step(r, || {
                        own.start_draws(seed, r, &device);
                        run_guarded(step, &mut own, share, ctx)
                    });
                    own.set_cross_replica(None);
                    (own, logs)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a replica's panics are caught"))
            .collect()
    });
    let clock = Instant::now();
    let (parts, logs) = combine(ran, &weights, &device);
    let summing = group.lock().seconds;
    (parts, logs, summing + clock.elapsed().as_secs_f64())
}

/// Replica 0's parts with the replicas' mean moving statistics, and the logs' weighted sum
/// (or the first replica's own error: the others only saw it fail).
fn combine(
    ran: Vec<(Parts, Result<StepLogs, String>)>,
    weights: &[f64],
    device: &Device,
) -> (Parts, Result<StepLogs, String>) {
    let mut logs = Vec::with_capacity(ran.len());
    let mut nets: Vec<Vec<Network>> = Vec::new();
    let mut first = None;
    let mut error: Option<String> = None;
    for ((parts, result), w) in ran.into_iter().zip(weights) {
        match result {
            Ok(l) => logs.push((l, *w)),
            Err(e) if e != OTHER_FAILED || error.is_none() => {
                if error.as_deref().is_none_or(|old| old == OTHER_FAILED) {
                    error = Some(e);
                }
            }
            Err(_) => {}
        }
        nets.push(parts.all().iter().map(|p| p.network().clone()).collect());
        first.get_or_insert(parts);
    }
    let mut parts = first.expect("at least one replica ran");
    if let Some(e) = error {
        return (parts, Err(e));
    }
    for (i, part) in parts.all_mut().iter_mut().enumerate() {
        let replicas: Vec<Network> = nets.iter().map(|n| n[i].clone()).collect();
        part.map_network(|net| mean_moving_stats(net, replicas, device));
    }
    (parts, StepLogs::weighted_sum(logs))
}

/// What a replica's step returns when another replica failed first.
const OTHER_FAILED: &str = "stopped: another replica's step failed";

/// Replicas in threads of one process, running one at a time in a fixed order.
struct Group {
    replicas: usize,
    state: Mutex<Round>,
    changed: Condvar,
}

/// The group's state: whose turn it is, and the all-reduce in progress.
#[derive(Default)]
struct Round {
    turn: usize,
    /// Completed collectives (all-reduces and the step's end).
    number: u64,
    /// What this collective is: `Some(names)` an all-reduce of the parts named, `None` the
    /// step's end.
    kind: Option<Option<String>>,
    /// The running sum of the replicas that arrived.
    sum: Vec<GradientsParams>,
    /// The last all-reduce's result.
    result: Vec<GradientsParams>,
    failed: Option<String>,
    /// Seconds the replicas spent adding their gradients to the sum.
    seconds: f64,
}

impl Group {
    fn new(replicas: usize) -> Group {
        Group {
            replicas,
            state: Mutex::new(Round::default()),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Round> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for replica `r`'s turn; `Err` when a replica failed.
    fn turn(&self, r: usize) -> Result<MutexGuard<'_, Round>, String> {
        let state = self
            .changed
            .wait_while(self.lock(), |s| s.turn != r && s.failed.is_none())
            .unwrap_or_else(|p| p.into_inner());
        match state.failed {
            Some(_) => Err(OTHER_FAILED.to_string()),
            None => Ok(state),
        }
    }

    /// Marks the group failed (every waiting replica stops) with `message`.
    fn fail(&self, message: &str) {
        let mut state = self.lock();
        state.failed.get_or_insert_with(|| message.to_string());
        self.changed.notify_all();
    }

    /// Replica `r`'s whole step: its turn, `run`, the step's end; on failure the others stop.
    fn replica_step(
        &self,
        r: usize,
        run: impl FnOnce() -> Result<StepLogs, String>,
    ) -> Result<StepLogs, String> {
        drop(self.turn(r)?);
        let logs = run();
        let end = match &logs {
            Ok(_) => self.arrive(r, None, &[], |_| Ok(())).map(|_| ()),
            Err(e) => Err(e.clone()),
        };
        if let Err(e) = &end {
            self.fail(e);
        }
        end.and(logs)
    }

    /// Replica `r` arrives at a collective of `kind` (the parts of an all-reduce, `None` at
    /// the step's end) and adds its contribution (`add`); the
    /// last to arrive completes it. Waits (all-reduces only) until it completes and it is
    /// `r`'s turn again, and returns a copy of the result for `nets`.
    fn arrive(
        &self,
        r: usize,
        kind: Option<String>,
        nets: &[&Network],
        add: impl FnOnce(&mut Vec<GradientsParams>) -> Result<(), String>,
    ) -> Result<Vec<GradientsParams>, String> {
        let mut state = self.turn(r)?;
        match &state.kind {
            Some(k) if *k != kind => {
                return Err(format!(
                    "replica {r} {} while replica 0 {}: every replica must call \
                     apply_gradients the same times, with the same parts",
                    describe(kind.as_deref()),
                    describe(k.as_deref())
                ));
            }
            _ => state.kind = Some(kind.clone()),
        }
        let clock = Instant::now();
        add(&mut state.sum)?;
        state.seconds += clock.elapsed().as_secs_f64();
        let number = state.number;
        if r + 1 < self.replicas {
            state.turn = r + 1;
        } else {
            state.result = std::mem::take(&mut state.sum);
            state.kind = None;
            state.number += 1;
            state.turn = 0;
        }
        self.changed.notify_all();
        if kind.is_none() {
            return Ok(Vec::new());
        }
        let state = self
            .changed
            .wait_while(state, |s| {
                (s.number == number || s.turn != r) && s.failed.is_none()
            })
            .unwrap_or_else(|p| p.into_inner());
        match state.failed {
            Some(_) => Err(OTHER_FAILED.to_string()),
            None => Ok(nets
                .iter()
                .zip(&state.result)
                .map(|(n, s)| copy(n, s))
                .collect()),
        }
    }
}

/// A collective, for errors.
pub(super) fn describe(kind: Option<&str>) -> String {
    match kind {
        Some(names) => format!("called apply_gradients on [{names}]"),
        None => "ended its step".to_string(),
    }
}

/// One in-process replica's side of [`Parts::apply_gradients`].
struct Replica {
    group: Arc<Group>,
    index: usize,
    share: f64,
    /// Where the sums are kept (the model's device).
    device: Device,
}

impl CrossReplica for Replica {
    fn share(&self) -> f64 {
        self.share
    }

    fn all_reduce(
        &mut self,
        names: &[&str],
        nets: &[&Network],
        grads: Vec<GradientsParams>,
    ) -> Result<Vec<GradientsParams>, String> {
        let home = self.device.clone();
        let add = |sum: &mut Vec<GradientsParams>| {
            if sum.is_empty() {
                sum.resize_with(grads.len(), GradientsParams::new);
            }
            for ((total, new), net) in sum.iter_mut().zip(grads).zip(nets) {
                let mut visit = ScaleAdd {
                    sum: std::mem::take(total),
                    new,
                    scale: 1.0,
                    device: &home,
                };
                net.visit(&mut visit);
                *total = visit.sum;
            }
            Ok(())
        };
        let sum = self
            .group
            .arrive(self.index, Some(names.join(", ")), nets, add);
        sum.inspect_err(|e| {
            if e != OTHER_FAILED {
                self.group.fail(e);
            }
        })
    }
}

/// A copy of `grads`' tensors for `net`'s parameters.
pub(super) fn copy(net: &Network, grads: &GradientsParams) -> GradientsParams {
    struct Copy<'a>(&'a GradientsParams, GradientsParams);
    impl burn::module::ModuleVisitor for Copy<'_> {
        fn visit_float<const D: usize>(&mut self, p: &burn::module::Param<Tensor<D>>) {
            if let Some(g) = self.0.get::<D>(p.id) {
                self.1.register::<D>(p.id, g);
            }
        }
    }
    let mut visit = Copy(grads, GradientsParams::new());
    net.visit(&mut visit);
    visit.1
}
