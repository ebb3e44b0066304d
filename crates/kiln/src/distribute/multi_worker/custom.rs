//! A custom train step on the workers of a `multi_worker_mirrored` job (see
//! [`crate::distribute::train_step_replicated`]): each worker runs the step on its rows, each
//! `apply_gradients` sums the named parts' gradients with one `MPI_Allreduce`, and one more
//! at the step's end combines the logs, the parts' moving statistics and stop requests.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::prelude::*;

use super::super::custom::describe;
use super::super::split::split_batch;
use super::{MultiWorkerMirroredStrategy, Pack, Unpack, broadcast_weights, moving_statistics};
use super::{set_moving_mean, to_vec, world};
use crate::batch::DeviceBatch;
use crate::model::Network;
use crate::step::custom::{CrossReplica, Parts, StepContext, StepLogs, TrainStep, run_guarded};

impl MultiWorkerMirroredStrategy {
    /// Runs `step` on this worker's rows of `batch` (see the module documentation).
    pub(in crate::distribute) fn custom_step(
        &mut self,
        step: &dyn TrainStep,
        mut parts: Parts,
        batch: DeviceBatch,
        ctx: &StepContext,
        seed: u64,
    ) -> (Parts, Result<StepLogs, String>) {
        if self.world.size == 1 {
            self.share_stop(self.local_signal(), 0.0, 0.0);
            parts.start_draws(seed, 0, &batch.x.device());
            let logs = run_guarded(step, &mut parts, batch, ctx);
            return (parts, logs);
        }
        let clock = Instant::now();
        if !self.synced {
            // Every worker starts from rank 0's weights, every part's.
            self.synced = true;
            for part in parts.all_mut() {
                part.map_network(broadcast_weights);
            }
        }
        let home = batch.x.device();
        let (global, mine, start) = self.rows_of(batch.size);
        let rows = self.own_rows(batch, global, mine, start);
        self.reduce_seconds += clock.elapsed().as_secs_f64();
        parts.start_draws(seed, self.world.rank, &home);
        let clocks = Arc::new(Mutex::new(Clocks::default()));
        parts.set_cross_replica(Some(Box::new(Worker {
            rank: self.world.rank,
            share: mine as f64 / global.max(1) as f64,
            clocks: clocks.clone(),
        })));
        let logs = run_guarded(step, &mut parts, rows, ctx);
        parts.set_cross_replica(None);
        let c = *clocks.lock().unwrap_or_else(|p| p.into_inner());
        self.wait_seconds += c.wait;
        self.all_reduce_seconds += c.all_reduce;
        self.reduce_seconds += c.total;
        let logs = match logs {
            Ok(l) => l,
            Err(e) => return (parts, Err(e)),
        };
        let clock = Instant::now();
        let share = mine as f64 / global.max(1) as f64;
        let logs = self.end_step(&mut parts, logs, mine > 0, share, &home);
        self.reduce_seconds += clock.elapsed().as_secs_f64();
        (parts, logs)
    }

    /// The rows this worker trains on: its share of a global batch, or its own batch with
    /// local input. A worker without examples runs the step on one row (the global batch's
    /// first, or a placeholder), with its share, and so its gradients and logs, at 0.
    fn own_rows(
        &self,
        batch: DeviceBatch,
        global: usize,
        mine: usize,
        start: usize,
    ) -> DeviceBatch {
        if self.local_input() || batch.size == 0 {
            return batch;
        }
        let sizes = match mine {
            0 => vec![1, batch.size - 1],
            _ => vec![start, mine, global - start - mine],
        };
        // `split_batch` skips empty parts: this worker's is the first or the second.
        let index = usize::from(mine > 0 && start > 0);
        split_batch(batch, &sizes)
            .into_iter()
            .nth(index)
            .expect("a worker's rows are a part of the batch")
    }

    /// The step's end, one all-reduce of: the logs times this worker's share (their sum: the
    /// global batch's), every part's moving statistics (this worker's when it had examples),
    /// the workers with examples, and stop requests.
    fn end_step(
        &mut self,
        parts: &mut Parts,
        logs: StepLogs,
        has_examples: bool,
        share: f64,
        home: &Device,
    ) -> Result<StepLogs, String> {
        let values = logs.read();
        let signal = self.local_signal();
        let mut buf: Vec<f32> = values.iter().map(|(_, v)| (v * share) as f32).collect();
        for part in parts.all() {
            for p in moving_statistics(part.network()) {
                let v = to_vec(p.val());
                buf.extend(v.into_iter().map(|x| if has_examples { x } else { 0.0 }));
            }
        }
        buf.extend([
            f32::from(has_examples),
            f32::from(signal != 0),
            signal as f32,
        ]);
        agree(self.world.rank, None, buf.len())?;
        world::all_reduce_sum(&mut buf);
        let n = buf.len();
        let (workers, requests, signals) = (buf[n - 3].max(1.0), buf[n - 2], buf[n - 1]);
        self.share_stop(signal, requests, signals);
        let mut offset = values.len();
        for part in parts.all_mut() {
            part.map_network(|net| set_moving_mean(net, &buf, &mut offset, workers));
        }
        let summed: Vec<(String, f64)> = values
            .into_iter()
            .zip(&buf)
            .map(|((name, _), v)| (name, f64::from(*v)))
            .collect();
        Ok(StepLogs::from_values(&summed, home))
    }
}

/// Seconds of one step's all-reduces: waiting for the slowest worker, the `MPI_Allreduce`,
/// and in all (packing included).
#[derive(Debug, Default, Clone, Copy)]
struct Clocks {
    wait: f64,
    all_reduce: f64,
    total: f64,
}

/// A worker's side of [`Parts::apply_gradients`].
struct Worker {
    rank: usize,
    share: f64,
    clocks: Arc<Mutex<Clocks>>,
}

impl CrossReplica for Worker {
    fn share(&self) -> f64 {
        self.share
    }

    fn all_reduce(
        &mut self,
        names: &[&str],
        nets: &[&Network],
        mut grads: Vec<GradientsParams>,
    ) -> Result<Vec<GradientsParams>, String> {
        let started = Instant::now();
        let (mut buf, mut flags) = (Vec::new(), Vec::new());
        for (net, g) in nets.iter().zip(grads.iter_mut()) {
            let mut pack = Pack {
                grads: g,
                buf: &mut buf,
                flags: Vec::new(),
            };
            net.visit(&mut pack);
            flags.extend(pack.flags);
        }
        let n_values = buf.len();
        buf.extend(flags);
        let clock = Instant::now();
        agree(self.rank, Some(&names.join(", ")), buf.len())?;
        let arrived = Instant::now();
        world::all_reduce_sum(&mut buf);
        let (values, flags) = buf.split_at(n_values);
        let mut unpack = Unpack {
            grads: GradientsParams::new(),
            values,
            flags,
            offset: 0,
            index: 0,
        };
        let mut out = Vec::with_capacity(nets.len());
        for net in nets {
            net.visit(&mut unpack);
            out.push(std::mem::take(&mut unpack.grads));
        }
        let mut c = self.clocks.lock().unwrap_or_else(|p| p.into_inner());
        c.wait += (arrived - clock).as_secs_f64();
        c.all_reduce += arrived.elapsed().as_secs_f64();
        c.total += started.elapsed().as_secs_f64();
        Ok(out)
    }
}

/// Checks that every worker is at the same collective as rank 0: `what` (the parts of an
/// `apply_gradients`, `None` at the step's end) with a buffer of `values` numbers. One
/// broadcast and one all-reduce of a few numbers, which also wait for the slowest worker;
/// without them, workers that disagree would sum buffers of different lengths, or wait for
/// each other forever.
fn agree(rank: usize, what: Option<&str>, values: usize) -> Result<(), String> {
    let mine = signature(what, values);
    let mut chief = mine;
    world::broadcast_from_chief(&mut chief);
    let mut differ = vec![f32::from(chief != mine)];
    world::all_reduce_sum(&mut differ);
    if differ[0] == 0.0 {
        return Ok(());
    }
    Err(format!(
        "{} of the workers did not do what worker 0 did; worker {rank} {}: every worker \
         must call apply_gradients the same times, with the same parts",
        differ[0],
        describe(what)
    ))
}

/// `what` and `values` hashed (FNV-1a, 64 bits) into four 16-bit numbers, each exact in an
/// `f32`.
fn signature(what: Option<&str>, values: usize) -> [f32; 4] {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let bytes = what
        .unwrap_or("\0end")
        .bytes()
        .chain((values as u64).to_le_bytes());
    for b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    std::array::from_fn(|i| ((h >> (16 * i)) & 0xffff) as f32)
}
