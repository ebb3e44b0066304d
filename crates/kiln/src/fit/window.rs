//! Deferred reads (Keras' `steps_per_execution`): the steps run since the last host read of
//! their losses and outputs.
//!
//! With `compile.steps_per_execution = N > 1` the loop runs up to `N` steps (Keras' one
//! "execution", steps `[kN, (k+1)N)` of an epoch) without reading anything back, each step's
//! loss and outputs staying on the device ([`PendingOutput`]). At the window's end (or the
//! epoch's) one read brings them all back, the metrics are added step by step in order (the
//! same sums as with `N = 1`), and the batch-level callbacks run once: `on_train_batch_begin`
//! with the window's first step, `on_train_batch_end` with its last, as Keras calls them.
//! Checkpoints and stop requests fall on window ends.
//!
//! A non-finite loss is still caught at the step it happened, with the NaN policy's meaning
//! unchanged: when the NaN policy guards (`on_nan` other than `"continue"`), the window's
//! start is kept (the network, the optimizer state and the step counter, which share their
//! tensors with the live ones until the first update), and when the read finds a non-finite
//! loss the window is run again from there one step at a time, as with `N = 1` (the same
//! batches and dropout seeds, so the same weights), which lets the policy act at that step.
//!
//! Deferred reads need a step whose update does not depend on a host answer: they are off
//! (with a note) under a dynamic loss scale (`mixed_float16`), whose skip decision reads each
//! step's overflow flag, and with `multi_worker_mirrored`; with a guarding NaN policy they
//! also need `gradient_accumulation_steps = 1` (a window's start then holds no partial sum).

use burn::optim::ModuleOptimizer;
use kiln_data::Element;

use crate::batch::DeviceBatch;
use crate::distribute::Strategy;
use crate::model::Network;
use crate::step::custom::{Part, StepLogs};
use crate::step::{HostLabels, PendingOutput, StepOutput};

/// A step's batch facts that its metrics need once its outputs are read.
pub(super) struct StepFacts {
    /// The epoch's step.
    pub(super) step: u64,
    /// The batch's own labels (of a model with one output).
    pub(super) own: HostLabels,
    /// Each output's labels (a model with several).
    pub(super) outputs: Vec<HostLabels>,
    /// Examples in the batch.
    pub(super) size: usize,
}

impl StepFacts {
    /// The facts of `batch`, step `step` of the epoch.
    pub(super) fn of(step: u64, batch: &DeviceBatch) -> StepFacts {
        StepFacts {
            step,
            own: HostLabels::of(batch),
            outputs: batch.outputs.clone(),
            size: batch.size,
        }
    }
}

/// A step whose loss and outputs are read back.
pub(super) struct Done {
    pub(super) facts: StepFacts,
    pub(super) out: StepOutput,
}

/// A step run but not read back yet.
pub(super) struct Deferred {
    pub(super) facts: StepFacts,
    pub(super) pending: PendingOutput,
    /// The batch again (device and host copies), kept to run the step again after a
    /// non-finite loss (only when the NaN policy guards).
    pub(super) rerun: Option<(DeviceBatch, Element)>,
}

/// What a window's start was: enough to run its steps again.
pub(super) struct Start {
    pub(super) net: Network,
    pub(super) optim: ModuleOptimizer,
    /// The optimizer's iterations (the dropout seeds and the learning rate follow it).
    pub(super) iterations: u64,
    /// A custom step's extra parts (empty otherwise).
    pub(super) parts: Vec<Part>,
}

/// A custom step run but not read back yet.
pub(super) struct CustomDeferred {
    /// The epoch's step.
    pub(super) step: u64,
    /// Its logs, checked, on the device.
    pub(super) logs: StepLogs,
    /// Examples in its batch.
    pub(super) size: usize,
    /// The batch again, as [`Deferred::rerun`].
    pub(super) rerun: Option<(DeviceBatch, Element)>,
}

/// The steps since the last read.
pub(super) struct Window {
    /// Steps per read (`steps_per_execution`, or 1 where reads cannot be deferred).
    pub(super) every: u64,
    pub(super) steps: Vec<Deferred>,
    /// A custom step's steps (the model trains with one or the other).
    pub(super) custom: Vec<CustomDeferred>,
    pub(super) start: Option<Start>,
}

/// Why reads cannot be deferred under these settings (`None`: they can).
pub(super) fn why_not_deferred(
    loss_scale: bool,
    strategy: &Strategy,
    guarded: bool,
    accumulation_steps: usize,
) -> Option<&'static str> {
    if loss_scale {
        Some("the dynamic loss scale (mixed_float16) reads each step's overflow flag")
    } else if matches!(strategy, Strategy::MultiWorkerMirrored(_)) {
        Some("multi_worker_mirrored workers decide each step together")
    } else if guarded && accumulation_steps > 1 {
        Some(
            "with gradient_accumulation_steps > 1 the NaN policy needs each step's loss (set \
             fit.on_nan = \"continue\" to defer)",
        )
    } else {
        None
    }
}

impl Window {
    /// A window of `every` steps.
    pub(super) fn new(every: u64) -> Window {
        Window {
            every: every.max(1),
            steps: Vec::new(),
            custom: Vec::new(),
            start: None,
        }
    }

    /// Whether reads are deferred at all.
    pub(super) fn defers(&self) -> bool {
        self.every > 1
    }

    /// Whether step `step` of the epoch ends a window.
    pub(super) fn ends_at(&self, step: u64) -> bool {
        (step + 1).is_multiple_of(self.every)
    }

    /// Takes the window's steps: their facts, their pending outputs and their reruns.
    pub(super) fn take(&mut self) -> Taken {
        let mut taken = Taken::default();
        for d in std::mem::take(&mut self.steps) {
            taken.pending.push(d.pending);
            taken.rerun.push((d.facts, d.rerun));
        }
        taken.start = self.start.take();
        taken
    }
}

/// A window's steps, taken out to be read.
#[derive(Default)]
pub(super) struct Taken {
    pub(super) pending: Vec<PendingOutput>,
    pub(super) rerun: Vec<(StepFacts, Option<(DeviceBatch, Element)>)>,
    pub(super) start: Option<Start>,
}
