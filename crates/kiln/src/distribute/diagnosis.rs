//! The epoch's time split (TensorFlow's distributed-training FAQ: several devices can be slower
//! than one when waiting for input or communication dominates): compute, communication and
//! input wait, and which one bounds the run.
//!
//! The training loop is synchronous — wait for a batch, compute, reduce across replicas — so
//! the three add up to the epoch's training time. A part *bounds* the run when removing it
//! would speed the run up most among the parts that can be removed: input wait (a faster
//! pipeline) or communication (a larger batch per replica, fewer replicas, overlap). Either is
//! named when it takes more than [`BOUND_SHARE`] of the time (the threshold of the CLI's
//! input-bound hint); otherwise the run is compute-bound, which is where a well-fed,
//! well-scaled run should be.

use crate::logs::Logs;

/// Epoch logs key: seconds spent combining replicas (gradient reduction and device copies)
/// in the epoch's training loop; set when training with more than one replica.
pub const COMMUNICATION_SECONDS: &str = "communication_seconds";
/// Epoch logs key: seconds of the epoch's training loop (input wait included, validation
/// excluded); set with [`COMMUNICATION_SECONDS`].
pub const TRAIN_SECONDS: &str = "train_seconds";

/// Epoch logs key (multi-worker runs): of [`COMMUNICATION_SECONDS`], the seconds spent
/// waiting for the slowest worker before each all-reduce.
pub const WAIT_SECONDS: &str = "communication_wait_seconds";
/// Epoch logs key (multi-worker runs): of [`COMMUNICATION_SECONDS`], the seconds in the
/// `MPI_Allreduce` calls themselves (what the ring model of [`super::cost_model`] predicts).
pub const ALL_REDUCE_SECONDS: &str = "all_reduce_seconds";

/// The share of the epoch above which input wait or communication is named as the bound.
pub const BOUND_SHARE: f64 = 0.2;

/// What limits the run's speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The model's forward, backward and update.
    Compute,
    /// Combining the replicas' gradients.
    Communication,
    /// Waiting for the input pipeline.
    Input,
}

/// An epoch's training time, split. Seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTimes {
    /// Forward, backward, update, metrics: what is neither of the others.
    pub compute_s: f64,
    /// Reduction across replicas.
    pub communication_s: f64,
    /// Blocked on the input pipeline.
    pub input_wait_s: f64,
}

impl StepTimes {
    /// The split of `total_s` seconds of training loop of which `input_wait_s` waited for
    /// input and `communication_s` combined replicas; compute is the rest (at least 0).
    pub fn from_total(total_s: f64, input_wait_s: f64, communication_s: f64) -> StepTimes {
        StepTimes {
            compute_s: (total_s - input_wait_s - communication_s).max(0.0),
            communication_s,
            input_wait_s,
        }
    }

    /// The split from epoch logs ([`TRAIN_SECONDS`], [`COMMUNICATION_SECONDS`],
    /// [`crate::logs::INPUT_WAIT_SECONDS`]); `None` when the epoch was not trained with
    /// replicas (no [`COMMUNICATION_SECONDS`]). Without [`TRAIN_SECONDS`], `elapsed_s` is the
    /// total.
    pub fn from_logs(logs: &Logs, elapsed_s: f64) -> Option<StepTimes> {
        let communication = logs.get(COMMUNICATION_SECONDS)?;
        let total = logs.get(TRAIN_SECONDS).unwrap_or(elapsed_s);
        let wait = logs.get(crate::logs::INPUT_WAIT_SECONDS).unwrap_or(0.0);
        Some(StepTimes::from_total(total, wait, communication))
    }

    /// The sum of the parts, seconds.
    pub fn total_s(&self) -> f64 {
        self.compute_s + self.communication_s + self.input_wait_s
    }

    /// Which part bounds the run: input wait or communication when it exceeds [`BOUND_SHARE`]
    /// of the total (the larger of the two when both do), else compute. An empty split is
    /// compute-bound.
    pub fn bound(&self) -> Bound {
        let total = self.total_s();
        if total <= 0.0 {
            return Bound::Compute;
        }
        let over = |s: f64| s > BOUND_SHARE * total;
        match (over(self.input_wait_s), over(self.communication_s)) {
            (true, true) if self.communication_s > self.input_wait_s => Bound::Communication,
            (true, _) => Bound::Input,
            (false, true) => Bound::Communication,
            (false, false) => Bound::Compute,
        }
    }

    /// One line: the three parts in seconds and shares, the bound and what to do about it,
    /// e.g. `step time: compute 1.2s (60%), communication 0.6s (30%), input wait 0.2s (10%);
    /// communication-bound: …`.
    pub fn line(&self) -> String {
        let total = self.total_s().max(1e-12);
        let part = |s: f64| format!("{s:.1}s ({:.0}%)", 100.0 * s / total);
        let advice = match self.bound() {
            Bound::Compute => {
                "compute-bound: faster devices (or more replicas, for data parallelism) would help"
            }
            Bound::Communication => {
                "communication-bound: use a larger batch per replica (a larger global \
                 batch_size), fewer replicas, or fewer, larger gradient buckets"
            }
            Bound::Input => {
                "input-bound: raise num_parallel_calls / prefetch (\"AUTOTUNE\") or cache \
                 decoded data (kiln data bench CONFIG shows each stage's time)"
            }
        };
        format!(
            "step time: compute {}, communication {}, input wait {}; {advice}",
            part(self.compute_s),
            part(self.communication_s),
            part(self.input_wait_s)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_is_the_rest_of_the_total() {
        let t = StepTimes::from_total(10.0, 1.5, 2.5);
        assert_eq!(t.compute_s, 6.0);
        assert_eq!(t.total_s(), 10.0);
        // Clock skew never makes compute negative.
        assert_eq!(StepTimes::from_total(1.0, 0.8, 0.4).compute_s, 0.0);
    }

    #[test]
    fn the_bound_is_the_removable_part_over_a_fifth_else_compute() {
        let b = |total, wait, comm| StepTimes::from_total(total, wait, comm).bound();
        assert_eq!(b(10.0, 1.0, 1.0), Bound::Compute);
        assert_eq!(
            b(10.0, 2.0, 2.0),
            Bound::Compute,
            "exactly a fifth is not over"
        );
        assert_eq!(b(10.0, 2.1, 0.5), Bound::Input);
        assert_eq!(b(10.0, 0.5, 2.1), Bound::Communication);
        assert_eq!(
            b(10.0, 3.0, 4.0),
            Bound::Communication,
            "both over: the larger"
        );
        assert_eq!(b(10.0, 4.0, 3.0), Bound::Input);
        assert_eq!(b(10.0, 3.0, 3.0), Bound::Input, "a tie goes to the input");
        // A tiny model whose step is mostly reduction.
        assert_eq!(b(1.0, 0.05, 0.7), Bound::Communication);
        assert_eq!(b(0.0, 0.0, 0.0), Bound::Compute);
    }

    #[test]
    fn the_line_names_parts_shares_and_advice() {
        let line = StepTimes::from_total(10.0, 1.0, 3.0).line();
        assert_eq!(
            line,
            "step time: compute 6.0s (60%), communication 3.0s (30%), input wait 1.0s (10%); \
             communication-bound: use a larger batch per replica (a larger global batch_size), \
             fewer replicas, or fewer, larger gradient buckets"
        );
        assert!(
            StepTimes::from_total(10.0, 5.0, 0.0)
                .line()
                .contains("; input-bound: raise")
        );
        assert!(
            StepTimes::from_total(10.0, 0.0, 0.0)
                .line()
                .contains("; compute-bound")
        );
    }

    #[test]
    fn logs_without_communication_give_no_split() {
        let mut logs = Logs::default();
        logs.set(crate::logs::INPUT_WAIT_SECONDS, 1.0);
        assert_eq!(StepTimes::from_logs(&logs, 10.0), None);
        logs.set(COMMUNICATION_SECONDS, 2.0);
        assert_eq!(
            StepTimes::from_logs(&logs, 10.0),
            Some(StepTimes::from_total(10.0, 1.0, 2.0))
        );
        logs.set(TRAIN_SECONDS, 8.0);
        assert_eq!(StepTimes::from_logs(&logs, 10.0).unwrap().compute_s, 5.0);
    }
}
