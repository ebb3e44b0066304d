//! The tuning rules: when a stage grows or shrinks its knob, from one window of measurements.
//! Pure functions of a [`Sample`], so they are tested without clocks; the module docs of
//! `autotune` explain them.

use std::time::{Duration, Instant};

use super::stats::Stage;

/// Length of a tuning window, on the consumer's clock.
pub(crate) const PERIOD: Duration = Duration::from_millis(20);
/// The consumer is *starved* when it waited more than this share of a window.
pub(crate) const GROW_WAIT: f64 = 0.10;
/// ... and *satisfied* when it waited less than this share.
pub(crate) const SHRINK_WAIT: f64 = 0.02;
/// Adding a worker needs the current ones to be at least this busy on average.
pub(crate) const GROW_UTILIZATION: f64 = 0.5;
/// Removing one needs the work to fit in one fewer worker at most this busy.
pub(crate) const SHRINK_UTILIZATION: f64 = 0.6;
/// Largest buffer an autotuned prefetch grows to (the RAM budget usually binds first).
pub(crate) const MAX_PREFETCH: usize = 1024;

/// What one window measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sample {
    /// The window's wall time.
    pub wall: Duration,
    /// Time the consumer was blocked waiting for the stage.
    pub waited: Duration,
    /// Producing time summed over the stage's threads.
    pub busy: Duration,
    /// Time a producer was blocked because the buffer was full.
    pub stalled: Duration,
}

impl Sample {
    fn share(&self, d: Duration) -> f64 {
        let wall = self.wall.as_secs_f64();
        if wall > 0.0 {
            d.as_secs_f64() / wall
        } else {
            0.0
        }
    }
}

/// A parallelism decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Grow,
    Shrink,
    Keep,
}

/// One window's decision for a stage with `workers` threads: grow when the consumer was
/// starved while the workers were busy (more of them would produce more); shrink when the
/// consumer was satisfied and the work would have fitted in one fewer worker.
pub(crate) fn parallelism_step(s: &Sample, workers: usize) -> Step {
    if s.wall.is_zero() {
        return Step::Keep; // nothing measured
    }
    let starved = s.share(s.waited);
    let busy = s.share(s.busy); // in workers' worth
    if starved > GROW_WAIT && busy >= GROW_UTILIZATION * workers as f64 {
        Step::Grow
    } else if workers > 1
        && starved < SHRINK_WAIT
        && busy < SHRINK_UTILIZATION * (workers - 1) as f64
    {
        Step::Shrink
    } else {
        Step::Keep
    }
}

/// One window's decision for a prefetch buffer of `capacity`: double it when the consumer was
/// starved although the producer `filled` the buffer recently (was stalled on it in this
/// window or the previous one — tf.data's `PrefetchAutotuner` rule: a deeper buffer only
/// helps a producer that is fast enough on average but bursty). Then clamp to
/// `[1, min(ram_capacity, MAX_PREFETCH)]`.
pub(crate) fn buffer_size(s: &Sample, filled: bool, capacity: usize, ram_capacity: usize) -> usize {
    let starved = s.share(s.waited);
    let wanted = if starved > GROW_WAIT && filled {
        capacity.saturating_mul(2)
    } else {
        capacity
    };
    wanted.min(ram_capacity).clamp(1, MAX_PREFETCH)
}

/// A parallel map hands its workers jobs of several consecutive elements so that each job
/// takes about this long: handing a job to a thread and its result back costs a few
/// microseconds (more on a busy machine, where it means a context switch), which would
/// dominate maps of cheap functions on small elements if every element were its own job.
pub(crate) const TARGET_JOB: Duration = Duration::from_micros(200);
/// The most elements in one job.
pub(crate) const MAX_JOB: usize = 64;

/// Elements per job of a parallel map whose function takes `cost` per element (measured;
/// `None` before the first job returns): enough for a job of [`TARGET_JOB`], at most
/// [`MAX_JOB`] and at most `ram_limit` (the elements the RAM budget lets one job of the
/// in-flight window hold); never below 1. One element per job until something is measured.
pub(crate) fn elements_per_job(cost: Option<Duration>, ram_limit: usize) -> usize {
    let Some(cost) = cost else { return 1 };
    let wanted = if cost.is_zero() {
        MAX_JOB
    } else {
        (TARGET_JOB.as_secs_f64() / cost.as_secs_f64()).ceil() as usize
    };
    wanted.min(MAX_JOB).min(ram_limit).max(1)
}

/// The start of the current tuning window: the clock and the stage's cumulative times.
pub(crate) struct Window {
    start: Instant,
    times: (u64, u64, u64),
}

impl Window {
    pub(crate) fn new(stage: &Stage) -> Window {
        Window {
            start: Instant::now(),
            times: stage.times(),
        }
    }

    /// When a window's [`PERIOD`] has passed: its sample, starting the next window.
    pub(crate) fn sample_if_due(&mut self, stage: &Stage) -> Option<Sample> {
        let now = Instant::now();
        let wall = now.duration_since(self.start);
        if wall < PERIOD {
            return None;
        }
        let times = stage.times();
        let delta = |a: u64, b: u64| Duration::from_nanos(a.saturating_sub(b));
        let sample = Sample {
            wall,
            busy: delta(times.0, self.times.0),
            waited: delta(times.1, self.times.1),
            stalled: delta(times.2, self.times.2),
        };
        *self = Window { start: now, times };
        Some(sample)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// `buffer_size` with `filled` taken from this window's stalls.
    fn buffer(s: &Sample, capacity: usize, ram_capacity: usize) -> usize {
        buffer_size(s, s.stalled > Duration::ZERO, capacity, ram_capacity)
    }

    fn sample(waited: u64, busy: u64, stalled: u64) -> Sample {
        Sample {
            wall: ms(100),
            waited: ms(waited),
            busy: ms(busy),
            stalled: ms(stalled),
        }
    }

    #[test]
    fn starved_consumer_with_busy_workers_grows() {
        // 2 workers busy 90% each, consumer waited 50%.
        assert_eq!(parallelism_step(&sample(50, 180, 0), 2), Step::Grow);
        // Same wait but workers mostly idle (the input is the bottleneck): keep.
        assert_eq!(parallelism_step(&sample(50, 60, 0), 2), Step::Keep);
        // Waiting just at the threshold does not grow.
        assert_eq!(parallelism_step(&sample(10, 200, 0), 2), Step::Keep);
    }

    #[test]
    fn satisfied_consumer_with_idle_workers_shrinks() {
        // 4 workers doing 1.2 workers' worth: fits in 3 at 40%.
        assert_eq!(parallelism_step(&sample(0, 120, 0), 4), Step::Shrink);
        // 2.0 workers' worth would put 3 workers at 67%: keep.
        assert_eq!(parallelism_step(&sample(0, 200, 0), 4), Step::Keep);
        // Never below one worker.
        assert_eq!(parallelism_step(&sample(0, 0, 0), 1), Step::Keep);
        // A consumer that still waits a little (5%) keeps its workers.
        assert_eq!(parallelism_step(&sample(5, 10, 0), 4), Step::Keep);
    }

    #[test]
    fn buffer_doubles_only_for_a_starved_consumer_of_a_filling_producer() {
        assert_eq!(buffer(&sample(40, 0, 5), 4, usize::MAX), 8);
        // Producer never filled the buffer (too slow on average): a deeper one cannot help.
        assert_eq!(buffer(&sample(40, 0, 0), 4, usize::MAX), 4);
        // Consumer not starved.
        assert_eq!(buffer(&sample(5, 0, 50), 4, usize::MAX), 4);
        // RAM bounds it, and can shrink it; never below 1.
        assert_eq!(buffer(&sample(40, 0, 5), 4, 6), 6);
        assert_eq!(buffer(&sample(0, 0, 0), 4, 3), 3);
        assert_eq!(buffer(&sample(0, 0, 0), 4, 0), 1);
        assert_eq!(buffer(&sample(90, 0, 5), 1000, usize::MAX), MAX_PREFETCH);
        // A stall in the previous window counts.
        assert_eq!(buffer_size(&sample(40, 0, 0), true, 4, usize::MAX), 8);
    }

    #[test]
    fn jobs_hold_about_200_microseconds_of_work() {
        let us = Duration::from_micros;
        assert_eq!(
            elements_per_job(None, usize::MAX),
            1,
            "nothing measured yet"
        );
        assert_eq!(elements_per_job(Some(us(10)), usize::MAX), 20);
        assert_eq!(elements_per_job(Some(us(30)), usize::MAX), 7); // ceil(6.67)
        assert_eq!(elements_per_job(Some(us(500)), usize::MAX), 1);
        assert_eq!(
            elements_per_job(Some(Duration::from_nanos(100)), usize::MAX),
            MAX_JOB
        );
        assert_eq!(elements_per_job(Some(Duration::ZERO), usize::MAX), MAX_JOB);
        // The RAM budget bounds a job; never below one element.
        assert_eq!(elements_per_job(Some(us(1)), 5), 5);
        assert_eq!(elements_per_job(Some(us(1)), 0), 1);
    }

    #[test]
    fn zero_length_window_keeps_everything() {
        let s = Sample {
            wall: Duration::ZERO,
            waited: Duration::ZERO,
            busy: Duration::ZERO,
            stalled: Duration::ZERO,
        };
        assert_eq!(parallelism_step(&s, 3), Step::Keep);
        assert_eq!(buffer(&s, 3, usize::MAX), 3);
    }
}
