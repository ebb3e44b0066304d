//! The batches of each epoch, as Keras' `EpochIterator` (`keras/src/trainers/epoch_iterator.py`)
//! hands them to `fit`: one full pass per epoch, or `steps_per_epoch` batches from an iterator
//! that continues across epochs; the resume position; the end-of-data rule; and the batch's
//! trip to the device through the `check_numerics` guard.
//!
//! End of data: without `steps_per_epoch` the epoch ends with the pass. With it, an iterator
//! that ends exactly at an epoch boundary starts a new pass (a dataset with `repeat` never
//! ends); one that ends inside an epoch ends that epoch early with a warning, and the next epoch
//! starts a new pass, as Keras 3 does ("Your input ran out of data; interrupting training"). A worker of `multi_worker_mirrored` that reads its
//! own shard keeps stepping with an empty batch while another worker still has data, and all
//! of them see the end at the same step ([`crate::distribute::Strategy::agree_input`]).

use std::time::Instant;

use burn::prelude::*;
use kiln_data::{Dataset, Element, SkipStats};

use super::input_cursor::InputCursor;
use crate::batch::{DeviceBatch, to_device_guarded};
use crate::checkpoint::InputPosition;
use crate::compile::Compiled;
use crate::distribute::Strategy;
use crate::error::Result;
use crate::guards::NumericsGuard;
use crate::model::ModelSpec;

/// What the batches are converted for: the model, its compile settings and the device.
pub(super) struct Target<'a> {
    pub(super) spec: &'a ModelSpec,
    pub(super) compiled: &'a Compiled,
    pub(super) device: &'a Device,
}

/// One step's input.
pub(super) struct StepInput {
    /// The batch as the pipeline yielded it (for the NaN report).
    pub(super) host: Element,
    /// The batch on the device (empty for a worker whose shard is exhausted).
    pub(super) batch: DeviceBatch,
    /// Seconds spent waiting for the pipeline.
    pub(super) waited: f64,
    /// Seconds spent converting it to device tensors.
    pub(super) converted: f64,
}

/// What [`EpochIterator::next`] found.
pub(super) enum Next {
    /// A batch to train on.
    Batch(Box<StepInput>),
    /// `check_numerics = "skip"` dropped every example of the step's batch: the step is
    /// skipped (it still counts towards `steps_per_epoch`).
    Emptied,
    /// The epoch's pass is over.
    End,
    /// The input ended before `steps_per_epoch` batches (a warning was printed): the epoch
    /// ends early and the next one starts a new pass, as in Keras 3.
    Short,
    /// Even a new pass of the input yields no batch (a warning was printed); training stops.
    RanOut,
}

/// The training input of one `fit` call.
pub(super) struct EpochIterator<'d> {
    cursor: InputCursor<'d>,
    guard: NumericsGuard,
    steps_per_epoch: Option<u64>,
    /// Each worker reads its own shard (`multi_worker_mirrored` with sharded input).
    sharded: bool,
    /// Seconds the loop waited for the pipeline in the current epoch.
    pub(super) input_wait: f64,
}

impl<'d> EpochIterator<'d> {
    /// The input of `train` at `position` (a resume's, or the start).
    ///
    /// # Errors
    /// Data errors from the batches replayed to reach `position`.
    pub(super) fn new(
        train: &'d Dataset,
        position: InputPosition,
        guard: NumericsGuard,
        steps_per_epoch: Option<u64>,
        sharded: bool,
    ) -> Result<EpochIterator<'d>> {
        Ok(EpochIterator {
            cursor: InputCursor::restore(train, position)?,
            guard,
            steps_per_epoch,
            sharded,
            input_wait: 0.0,
        })
    }

    /// The position a checkpoint records.
    pub(super) fn cursor(&self) -> &InputCursor<'d> {
        &self.cursor
    }

    /// The position, for a NaN rollback to move.
    pub(super) fn cursor_mut(&mut self) -> &mut InputCursor<'d> {
        &mut self.cursor
    }

    /// The guard, for the epoch's skipped-example count.
    pub(super) fn guard_mut(&mut self) -> &mut NumericsGuard {
        &mut self.guard
    }

    /// Starts epoch `epoch` at its batch `first_step` (not 0 when resuming inside it): a full
    /// pass per epoch starts a fresh iterator.
    pub(super) fn begin_epoch(&mut self, epoch: usize, first_step: u64) {
        self.guard.begin_epoch(epoch);
        self.input_wait = 0.0;
        if self.steps_per_epoch.is_none() && first_step == 0 && !self.cursor.at_start() {
            self.cursor.close();
        }
    }

    /// Ends the epoch: a full pass closes its iterator. Returns the records the input's
    /// `ignore_errors` stages dropped in the epoch.
    pub(super) fn end_epoch(&mut self) -> Option<SkipStats> {
        if self.steps_per_epoch.is_none() {
            self.cursor.close();
        }
        self.cursor.take_skips()
    }

    /// The batch of step `step` (0-based in epoch `epoch`) on `target`'s device.
    ///
    /// # Errors
    /// Data errors from the pipeline; shape errors and `check_numerics = "raise"` from the
    /// conversion.
    pub(super) fn next(
        &mut self,
        step: u64,
        epoch: usize,
        target: &Target,
        strategy: &mut Strategy,
    ) -> Result<Next> {
        let mut new_pass = false;
        loop {
            let clock = Instant::now();
            let fetched = match self.sharded {
                true => self.cursor.next_step_batch().transpose()?,
                false => self.cursor.next_batch().transpose()?,
            };
            let waited = clock.elapsed().as_secs_f64();
            self.input_wait += waited;
            let clock = Instant::now();
            let got = fetched.is_some();
            let mut host = fetched.unwrap_or_default();
            let local = match got {
                true => to_device_guarded(
                    &mut host,
                    target.spec,
                    target.compiled,
                    target.device,
                    &mut self.guard,
                )?,
                false => None,
            };
            let available = match self.sharded {
                // Every worker steps while any worker's shard has data.
                true => strategy.agree_input(local.as_ref().map_or(0, |b| b.size)) > 0,
                false => got,
            };
            if available {
                let batch = match local {
                    Some(b) => b,
                    // check_numerics = "skip" dropped every example: the step is skipped.
                    None if !self.sharded => return Ok(Next::Emptied),
                    None => DeviceBatch::empty(target.spec, target.compiled, target.device)?,
                };
                let converted = clock.elapsed().as_secs_f64();
                let input = StepInput {
                    host,
                    batch,
                    waited,
                    converted,
                };
                return Ok(Next::Batch(Box::new(input)));
            }
            self.cursor.close();
            if self.steps_per_epoch.is_some() && step == 0 && !new_pass {
                // The repeated pass ended exactly at an epoch boundary: start the next.
                new_pass = true;
                continue;
            }
            return Ok(self.ran_out(step, epoch));
        }
    }

    /// The end of the data at `step`: the pass's end, or (with `steps_per_epoch`) too early.
    fn ran_out(&self, step: u64, epoch: usize) -> Next {
        let Some(n) = self.steps_per_epoch else {
            return Next::End;
        };
        let what = match step {
            0 => "stopping training: the dataset yields no batch",
            _ => "ending the epoch early, as Keras does (the next epoch starts a new pass)",
        };
        eprintln!(
            "warning: the training input ran out of data after {step} of steps_per_epoch = {n} \
             batches in epoch {}; {what}. Make sure the dataset yields steps_per_epoch × \
             epochs batches (add `repeat` to the [data.train] pipeline).",
            epoch + 1
        );
        match step {
            0 => Next::RanOut,
            _ => Next::Short,
        }
    }
}
