//! `MultiWorkerMirroredStrategy`: synchronous data parallelism over processes, one replica
//! per process, gradients summed with one MPI all-reduce per step.

use std::time::Instant;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;

mod custom;

use super::split::{split_batch, split_sizes};
use super::world::{self, World};
use crate::batch::DeviceBatch;
use crate::compile::Compiled;
use crate::error::Result;
use crate::logs::StepProfile;
use crate::model::{ModelSpec, Network};
use crate::step::{HostLabels, Interrupt, PendingOutput, compute_gradients_scaled};

/// `tf.distribute.MultiWorkerMirroredStrategy` over MPI: `mpirun -np N kiln train CONFIG`
/// starts N processes (workers); each reads the same input pipeline, batched at the *global*
/// batch size, and keeps its rank's share of every batch ([`super::split_sizes`]: the
/// `MirroredStrategy` split, rank `r` being replica `r`).
///
/// Each step, every worker computes the gradients of its share's mean loss scaled by
/// `share / global_batch` (folded into the backward pass's loss factor) (so the sum over workers is the gradient of the global batch's mean
/// loss, `tf.nn.compute_average_loss`), and one `MPI_Allreduce` (`MPI_SUM`) of one flat `f32`
/// buffer per step combines, in this order:
///
/// | part | length | reduced value |
/// |---|---|---|
/// | the gradients, parameter by parameter (visit order), scaled | trainable elements | summed gradients |
/// | one flag per parameter: 1 where the worker has its gradient | parameters | > 0: the parameter is updated |
/// | BatchNormalization moving means and variances (workers with examples) | moving elements | their sum, divided by the count below |
/// | 1 when the worker had examples | 1 | workers with examples |
/// | the worker's mean loss × its share | 1 | the global batch's mean loss |
/// | 1 when a stop was requested on the worker (a signal), and its number | 2 | stop on every worker after this step |
/// | the worker's outputs at its rows of `[global_batch, units]`, zeros elsewhere | `global_batch × units` | the whole batch's outputs |
///
/// so every worker applies the identical optimizer update to identical weights, and computes
/// the same loss and metrics as one process training on the global batch. A worker whose
/// share is empty (a last batch smaller than the number of workers) contributes zeros. On the
/// first step, rank 0's weights are broadcast to every worker (`MPI_Bcast`), so the workers
/// start identical whatever their initialization.
///
/// With [`MultiWorkerMirroredStrategy::with_sync_batch_norm`], each BatchNormalization layer
/// adds two small all-reduces inside the forward and backward passes ([`super::sync_bn`]).
///
/// A stop request (SIGINT / SIGTERM through [`MultiWorkerMirroredStrategy::set_interrupts`])
/// is shared through the same buffer: every worker sees it after the same step, so they all
/// stop there and rank 0 writes the checkpoint.
#[derive(Debug, Clone)]
pub struct MultiWorkerMirroredStrategy {
    world: World,
    reduce_seconds: f64,
    /// Of `reduce_seconds`: waiting at a barrier for the slowest worker, and the all-reduce
    /// itself (the rest packs and unpacks the buffer).
    wait_seconds: f64,
    all_reduce_seconds: f64,
    synced: bool,
    /// Set by this process's signal handler.
    local_stop: Option<Interrupt>,
    /// What the training loop reads: set on every worker after the step in which any worker
    /// had a stop request.
    agreed_stop: Option<Interrupt>,
    /// Each worker reads its own shard of the input (`auto_shard_policy` "file"): its
    /// batches are its own, not its rows of a global batch.
    local_input: bool,
    /// This step's `(global batch, this worker's first row)`, agreed by [`Self::agree_input`].
    agreed_rows: Option<(usize, usize)>,
    /// BatchNormalization statistics over the global batch ([`super::sync_bn`]).
    sync_batch_norm: bool,
    /// The workers as a `sync_batch_norm` group, with the clock of its all-reduces.
    sync_group: std::sync::Arc<super::sync_bn::MpiReplicas>,
}

impl MultiWorkerMirroredStrategy {
    /// Joins the MPI job (initializing MPI in this process, [`world::init`]).
    ///
    /// # Errors
    /// [`crate::KilnError::Config`] (`distribute.strategy`) when kiln was built without the
    /// `mpi` feature or MPI cannot start.
    pub fn new() -> Result<MultiWorkerMirroredStrategy> {
        Ok(MultiWorkerMirroredStrategy {
            world: world::init()?,
            reduce_seconds: 0.0,
            wait_seconds: 0.0,
            all_reduce_seconds: 0.0,
            synced: false,
            local_stop: None,
            agreed_stop: None,
            local_input: false,
            agreed_rows: None,
            sync_batch_norm: false,
            sync_group: Default::default(),
        })
    }

    /// BatchNormalization layers compute their batch statistics over the whole global batch,
    /// all-reduced across the workers in the forward and backward passes (`[distribute]
    /// sync_batch_norm`, [`super::sync_bn`]), instead of over each worker's share.
    pub fn with_sync_batch_norm(mut self, on: bool) -> MultiWorkerMirroredStrategy {
        self.sync_batch_norm = on;
        self
    }

    /// True when BatchNormalization statistics are synchronized across the workers.
    pub fn sync_batch_norm(&self) -> bool {
        self.sync_batch_norm
    }

    /// Each worker trains on the batches of its own input shard (tf.data's
    /// `AutoShardPolicy.FILE`: the worker reads every N-th file) instead of its rows of a
    /// global batch that every worker reads. Before each step the workers agree on their
    /// batch sizes ([`Self::agree_input`]); the step's global batch is their union, each
    /// worker's gradients weighted by its share of it.
    pub fn set_local_input(&mut self, on: bool) {
        self.local_input = on;
    }

    /// True when each worker reads its own shard ([`Self::set_local_input`]).
    pub fn local_input(&self) -> bool {
        self.local_input && self.world.size > 1
    }

    /// With local input: every worker gives its batch size for the next step (0 when its
    /// shard is exhausted) and gets the step's global batch size (one `MPI_Allreduce` of one
    /// count per worker); 0 means every shard is exhausted and the epoch ends. Without local
    /// input, `local` itself.
    pub fn agree_input(&mut self, local: usize) -> usize {
        if !self.local_input() {
            return local;
        }
        let mut counts = vec![0.0f32; self.world.size];
        counts[self.world.rank] = local as f32;
        world::all_reduce_sum(&mut counts);
        let counts: Vec<usize> = counts.iter().map(|&c| c as usize).collect();
        let start = counts[..self.world.rank].iter().sum();
        let global = counts.iter().sum();
        self.agreed_rows = Some((global, start));
        global
    }

    /// This worker's rank and the number of workers.
    pub fn world(&self) -> World {
        self.world
    }

    /// True on rank 0, the chief: the one worker that writes the run directory, checkpoints
    /// and TensorBoard files, and prints progress.
    pub fn is_chief(&self) -> bool {
        self.world.rank == 0
    }

    /// `num_replicas_in_sync`: the number of workers.
    pub fn num_replicas(&self) -> usize {
        self.world.size
    }

    /// Stop requests: `local` is set by this process's signal handler; `agreed` (the one to
    /// give the training loop) is set on every worker after the step in which any worker's
    /// `local` was set, so that all stop after the same step.
    pub fn set_interrupts(&mut self, local: Interrupt, agreed: Interrupt) {
        self.local_stop = Some(local);
        self.agreed_stop = Some(agreed);
    }

    /// Seconds spent communicating since the last call: packing the buffer, the all-reduce
    /// (which includes waiting for the slowest worker) and unpacking.
    pub fn take_reduce_seconds(&mut self) -> f64 {
        std::mem::take(&mut self.reduce_seconds)
    }

    /// Of the communication since the last call: seconds waiting for the slowest worker (a
    /// barrier before each all-reduce) and seconds in the `MPI_Allreduce` itself; the rest of
    /// [`Self::take_reduce_seconds`] is packing and unpacking the buffer.
    pub fn take_wait_and_all_reduce_seconds(&mut self) -> (f64, f64) {
        (
            std::mem::take(&mut self.wait_seconds),
            std::mem::take(&mut self.all_reduce_seconds),
        )
    }

    /// One step's gradients on this worker's share of the global `batch`, summed over the
    /// workers (see [`super::Strategy::compute_gradients`]).
    pub fn compute_gradients(
        &mut self,
        net: Network,
        spec: &ModelSpec,
        compiled: &Compiled,
        batch: DeviceBatch,
        loss_factor: f64,
        profile: Option<&mut StepProfile>,
    ) -> (Network, GradientsParams, PendingOutput) {
        if self.world.size == 1 {
            // A job of one: nothing to combine.
            self.share_stop(self.local_signal(), 0.0, 0.0);
            return compute_gradients_scaled(net, spec, compiled, batch, loss_factor, profile);
        }
        let clock = Instant::now();
        let net = if self.synced {
            net
        } else {
            self.synced = true;
            broadcast_weights(net)
        };
        self.reduce_seconds += clock.elapsed().as_secs_f64();
        let home = batch.x.device();
        let units: usize = spec.output_shape().iter().product();
        let (global, mine, start) = self.rows_of(batch.size);
        let part = batch;
        let labels = self.local_input().then(|| HostLabels::of(&part));
        // Synchronized BatchNormalization all-reduces inside the passes: every worker runs
        // them, one without examples on a placeholder row it does not contribute.
        let sync = self
            .sync_batch_norm
            .then(|| super::sync_bn::scope(self.sync_group.clone(), mine > 0));
        let (net, grads, local) = if mine == 0 {
            let net = match &sync {
                Some(_) => {
                    let placeholder = DeviceBatch::empty(spec, compiled, &home)
                        .expect("a placeholder batch of the model's own input shape");
                    compute_gradients_scaled(net, spec, compiled, placeholder, 0.0, None).0
                }
                None => net,
            };
            (net, GradientsParams::new(), None)
        } else {
            // With a global batch, the other workers' rows are dropped; `split_batch` skips
            // empty parts, so this worker's is the first or the second.
            let part = if self.local_input() {
                part
            } else {
                split_batch(part, &[start, mine, global - start - mine])
                    .into_iter()
                    .nth(usize::from(start > 0))
                    .expect("a worker with examples has its part")
            };
            // The share's scale folded into the loss factor: the gradients come out scaled.
            let factor = loss_factor * mine as f64 / global as f64;
            let (net, grads, pending) =
                compute_gradients_scaled(net, spec, compiled, part, factor, profile);
            (net, grads, Some(pending))
        };
        drop(sync);
        // The statistics' all-reduces ran inside the passes: communication, not compute
        // (waiting for the slowest worker included: there is no barrier before them).
        let in_sync = self.sync_group.take_seconds();
        self.reduce_seconds += in_sync;
        self.all_reduce_seconds += in_sync;
        let clock = Instant::now();
        let rows = Rows {
            global,
            mine,
            start,
            units,
        };
        let out = self.reduce(net, grads, local, labels, rows, &home);
        self.reduce_seconds += clock.elapsed().as_secs_f64();
        out
    }

    /// `(global, mine, start)`: the step's global batch size, this worker's examples in it and
    /// the first one's row, for a local batch of `local` examples (with local input, as the
    /// workers agreed; otherwise `local` is the global batch, split evenly).
    fn rows_of(&mut self, local: usize) -> (usize, usize, usize) {
        match self.agreed_rows.take() {
            Some((global, start)) if self.local_input() => (global, local, start),
            _ => {
                let sizes = split_sizes(local, self.world.size);
                let start: usize = sizes[..self.world.rank].iter().sum();
                (local, sizes[self.world.rank], start)
            }
        }
    }

    /// Packs, all-reduces and unpacks one step (the buffer of the type's documentation).
    fn reduce(
        &mut self,
        mut net: Network,
        mut grads: GradientsParams,
        local: Option<PendingOutput>,
        labels: Option<HostLabels>,
        rows: Rows,
        home: &Device,
    ) -> (Network, GradientsParams, PendingOutput) {
        let signal = self.local_signal();
        let (mut buf, layout) = pack(&net, &mut grads, local, labels.as_ref(), rows, signal);
        // The barrier separates waiting for the slowest worker from the transfer (the
        // all-reduce could not finish before the last worker arrives anyway).
        let clock = Instant::now();
        world::barrier();
        let arrived = Instant::now();
        world::all_reduce_sum(&mut buf);
        self.wait_seconds += (arrived - clock).as_secs_f64();
        self.all_reduce_seconds += arrived.elapsed().as_secs_f64();
        let grads = layout.unpack_into(&mut net, &buf);
        let scalars = &buf[layout.scalars..];
        self.share_stop(signal, scalars[2], scalars[3]);
        let pending = layout.pending(&buf, rows, labels.is_some(), home);
        (net, grads, pending)
    }
}

/// Where each part of a step's all-reduce buffer starts.
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// Gradient values `[0, n_grads)`, then one flag per parameter.
    n_grads: usize,
    n_params: usize,
    /// BatchNormalization moving statistics.
    moving_start: usize,
    /// Workers with examples, loss, stop flag, signal.
    scalars: usize,
    /// Outputs `[global, units]`.
    out_start: usize,
    /// With local input: class indices `[global]`, then dense targets `[global, units]`.
    labels_start: usize,
    dense: bool,
}

/// This worker's buffer: its gradients of `net` (taken from `grads`), moving statistics,
/// scalars, its rows of the outputs and (with local input) of the labels, zeros elsewhere.
fn pack(
    net: &Network,
    grads: &mut GradientsParams,
    local: Option<PendingOutput>,
    labels: Option<&HostLabels>,
    rows: Rows,
    signal: i32,
) -> (Vec<f32>, Layout) {
    let Rows {
        global,
        mine,
        start,
        units,
    } = rows;
    let mut buf = Vec::new();
    let mut pack = Pack {
        grads,
        buf: &mut buf,
        flags: Vec::new(),
    };
    net.visit(&mut pack);
    let flags = std::mem::take(&mut pack.flags);
    let (n_grads, n_params) = (buf.len(), flags.len());
    buf.extend(flags);
    let moving_start = buf.len();
    for p in moving_statistics(net) {
        let v = to_vec(p.val());
        buf.extend(v.into_iter().map(|x| if mine > 0 { x } else { 0.0 }));
    }
    let scalars = buf.len();
    let scale = mine as f32 / global.max(1) as f32;
    let (loss, outputs) = match local {
        Some(p) => {
            let (loss, out) = p.into_parts();
            (to_vec(loss)[0] * scale, to_vec(out))
        }
        None => (0.0, Vec::new()),
    };
    let stop = f32::from(signal != 0);
    buf.extend([f32::from(mine > 0), loss, stop, signal as f32]);
    let out_start = buf.len();
    buf.resize(out_start + global * units, 0.0);
    let rows = &mut buf[out_start + start * units..out_start + (start + mine) * units];
    // `[mine, units]`: the network's outputs are flattened to the product of the model's
    // output shape.
    assert_eq!(outputs.len(), rows.len(), "outputs of [examples, units]");
    rows.copy_from_slice(&outputs);
    let labels_start = buf.len();
    let dense = labels.is_some_and(|l| !l.targets.is_empty());
    if let Some(l) = labels {
        buf.resize(
            labels_start + global * (1 + if dense { units } else { 0 }),
            0.0,
        );
        for (i, c) in l.classes.iter().enumerate() {
            buf[labels_start + start + i] = *c as f32;
        }
        if dense {
            let t0 = labels_start + global + start * units;
            buf[t0..t0 + l.targets.len()].copy_from_slice(&l.targets);
        }
    }
    let layout = Layout {
        n_grads,
        n_params,
        moving_start,
        scalars,
        out_start,
        labels_start,
        dense,
    };
    (buf, layout)
}

/// The moving means and variances of `net`'s BatchNormalization layers, in order.
fn moving_statistics(net: &Network) -> impl Iterator<Item = &Param<Tensor<1>>> {
    net.layers
        .iter()
        .flat_map(|l| [&l.moving_mean, &l.moving_variance].into_iter().flatten())
}

impl Layout {
    /// The summed gradients of `net`'s parameters; `net`'s moving statistics set to the
    /// workers' mean.
    fn unpack_into(&self, net: &mut Network, buf: &[f32]) -> GradientsParams {
        let mut unpack = Unpack {
            grads: GradientsParams::new(),
            values: &buf[..self.n_grads],
            flags: &buf[self.n_grads..self.n_grads + self.n_params],
            offset: 0,
            index: 0,
        };
        net.visit(&mut unpack);
        let workers = buf[self.scalars].max(1.0);
        let mut offset = self.moving_start;
        let taken = std::mem::replace(net, Network { layers: Vec::new() });
        *net = set_moving_mean(taken, buf, &mut offset, workers);
        unpack.grads
    }

    /// The global batch's loss and outputs on `home`, with its labels when each worker read
    /// its own (`with_labels`).
    fn pending(&self, buf: &[f32], rows: Rows, with_labels: bool, home: &Device) -> PendingOutput {
        let (global, units) = (rows.global, rows.units);
        let loss = Tensor::<1>::from_data(TensorData::new(vec![buf[self.scalars + 1]], [1]), home);
        let outputs = Tensor::<2>::from_data(
            TensorData::new(
                buf[self.out_start..self.labels_start].to_vec(),
                [global, units],
            ),
            home,
        );
        let pending = PendingOutput::new(loss, outputs);
        if !with_labels {
            return pending;
        }
        let labels = &buf[self.labels_start..];
        pending.with_labels(HostLabels {
            classes: labels[..global].iter().map(|&c| c as i64).collect(),
            targets: match self.dense {
                true => labels[global..].to_vec(),
                false => Vec::new(),
            },
        })
    }
}

/// `net` with its moving statistics read from `buf` at `offset` (advanced), divided by
/// `workers`.
fn set_moving_mean(mut net: Network, buf: &[f32], offset: &mut usize, workers: f32) -> Network {
    for layer in &mut net.layers {
        for p in [&mut layer.moving_mean, &mut layer.moving_variance]
            .into_iter()
            .flatten()
        {
            let n = p.val().dims()[0];
            let mean: Vec<f32> = buf[*offset..*offset + n]
                .iter()
                .map(|x| x / workers)
                .collect();
            *offset += n;
            let t = Tensor::<1>::from_data(TensorData::new(mean, [n]), &p.val().device());
            *p = p.clone().map(|_| t.set_require_grad(false));
        }
    }
    net
}

/// Where a worker's examples sit in the step's global batch.
#[derive(Debug, Clone, Copy)]
struct Rows {
    /// Examples in the global batch.
    global: usize,
    /// This worker's.
    mine: usize,
    /// This worker's first row.
    start: usize,
    /// Output units per example.
    units: usize,
}

impl MultiWorkerMirroredStrategy {
    /// The signal of this process's stop request, 0 for none.
    fn local_signal(&self) -> i32 {
        self.local_stop
            .as_ref()
            .and_then(Interrupt::requested)
            .unwrap_or(0)
    }

    /// Sets the agreed stop when any worker asked (`requests` workers, their signal numbers
    /// summing to `signals`): this worker's own signal, or else the workers' mean one.
    fn share_stop(&self, own: i32, requests: f32, signals: f32) {
        let Some(agreed) = &self.agreed_stop else {
            return;
        };
        if own != 0 {
            agreed.request(own);
        } else if requests > 0.0 {
            agreed.request(((signals / requests).round() as i32).max(1));
        }
    }
}

/// A tensor's elements as `f32`.
fn to_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    to_vec_data(t.into_data())
}

fn to_vec_data(data: TensorData) -> Vec<f32> {
    data.convert::<f32>()
        .try_to_vec::<f32>()
        .expect("float tensors convert to f32")
}

/// Appends each parameter's gradient (zeros when absent) to `buf`, and a flag per parameter
/// (1.0 when present).
struct Pack<'a> {
    grads: &'a mut GradientsParams,
    buf: &'a mut Vec<f32>,
    flags: Vec<f32>,
}

impl ModuleVisitor for Pack<'_> {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        let n: usize = p.val().dims().iter().product();
        match self.grads.remove::<D>(p.id) {
            Some(g) => {
                // One copy, straight from the tensor's data (to_vec would copy twice).
                let data = g.into_data();
                match data.as_slice::<f32>() {
                    Ok(values) => self.buf.extend_from_slice(values),
                    Err(_) => self.buf.extend(to_vec_data(data)),
                }
                self.flags.push(1.0);
            }
            None => {
                self.buf.resize(self.buf.len() + n, 0.0);
                self.flags.push(0.0);
            }
        }
    }
}

/// The reduced gradients, registered for the parameters whose flag is positive.
struct Unpack<'a> {
    grads: GradientsParams,
    values: &'a [f32],
    flags: &'a [f32],
    offset: usize,
    index: usize,
}

impl ModuleVisitor for Unpack<'_> {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        let value = p.val();
        let dims = value.dims();
        let n: usize = dims.iter().product();
        if self.flags[self.index] > 0.0 {
            let data = TensorData::new(self.values[self.offset..self.offset + n].to_vec(), dims);
            let device = value.device().without_autodiff();
            self.grads
                .register::<D>(p.id, Tensor::<D>::from_data(data, &device));
        }
        self.offset += n;
        self.index += 1;
    }
}

/// `net` with every float parameter replaced by rank 0's (one `MPI_Bcast` of all of them).
fn broadcast_weights(net: Network) -> Network {
    struct Gather(Vec<f32>);
    impl ModuleVisitor for Gather {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            self.0.extend(to_vec(p.val()));
        }
    }
    struct Scatter(Vec<f32>, usize);
    impl ModuleMapper for Scatter {
        fn map_float<const D: usize>(&mut self, p: Param<Tensor<D>>) -> Param<Tensor<D>> {
            p.map(|t| {
                let dims = t.dims();
                let n: usize = dims.iter().product();
                let data = TensorData::new(self.0[self.1..self.1 + n].to_vec(), dims);
                self.1 += n;
                let grad = t.is_require_grad();
                Tensor::<D>::from_data(data, &t.device()).set_require_grad(grad)
            })
        }
    }
    let mut gather = Gather(Vec::new());
    net.visit(&mut gather);
    world::broadcast_from_chief(&mut gather.0);
    net.map(&mut Scatter(gather.0, 0))
}
