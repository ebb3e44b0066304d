//! Scaling on paper: what data parallelism over `N` workers would give, from a ring all-reduce
//! cost model (`kiln estimate --workers N --bandwidth 100Gbit`; docs/distribute.md).
//!
//! A synchronous data-parallel step is one worker's compute on its share of the global batch,
//! then an all-reduce of the gradients. The ring all-reduce (reduce-scatter then all-gather,
//! each `N - 1` rounds in which every worker sends `bytes / N` to its neighbour) takes
//!
//! ```text
//! T_allreduce(N) = 2 (N - 1) α + 2 (N - 1) / N × bytes / bandwidth
//! ```
//!
//! with `α` the latency of one message and `bandwidth` a worker's link bandwidth (bytes/s).
//! Source: P. Patarasuk and X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
//! workstations", J. Parallel Distrib. Comput. 69(2), 2009 (the bandwidth term is optimal);
//! A. Sergeev and M. Del Balso, "Horovod: fast and easy distributed deep learning in
//! TensorFlow", arXiv:1802.05799, 2018 (ring all-reduce for TensorFlow training). The model
//! assumes no overlap of communication with the backward pass (an upper bound on the step
//! time: Horovod and NCCL overlap part of it), that each worker keeps its batch size (weak
//! scaling, as `MirroredStrategy` users scale the global batch), and float32 gradients.
//!
//! With `sync_batch_norm`, each BatchNormalization layer adds two small all-reduces per step
//! (its `2 × channels + 1` statistics in the forward pass, their gradient in the backward
//! pass). Short messages are latency-bound, and MPI reduces them by recursive doubling,
//! `⌈log₂ N⌉` rounds of one message each (R. Thakur, R. Rabenseifner and W. Gropp,
//! "Optimization of collective communication operations in MPICH", IJHPCA 19(1), 2005):
//!
//! ```text
//! T_small(N) = ⌈log₂ N⌉ × (α + bytes / bandwidth)
//! ```

use crate::error::{KilnError, Result};

/// The ring all-reduce time of `bytes` over `workers` workers: `2(N−1)α + 2(N−1)/N ×
/// bytes / bandwidth`, seconds. `bandwidth_bits_per_s` in bits per second (a link's usual
/// unit), `latency_s` in seconds per message. 0 for one worker.
pub fn ring_allreduce_seconds(
    workers: usize,
    bytes: f64,
    bandwidth_bits_per_s: f64,
    latency_s: f64,
) -> f64 {
    if workers <= 1 {
        return 0.0;
    }
    let n = workers as f64;
    let rounds = 2.0 * (n - 1.0);
    rounds * latency_s + rounds / n * bytes * 8.0 / bandwidth_bits_per_s
}

/// The recursive-doubling all-reduce time of a short message of `bytes` over `workers`
/// workers: `⌈log₂ N⌉ × (α + bytes / bandwidth)`, seconds (units as
/// [`ring_allreduce_seconds`]). 0 for one worker.
pub fn small_allreduce_seconds(
    workers: usize,
    bytes: f64,
    bandwidth_bits_per_s: f64,
    latency_s: f64,
) -> f64 {
    if workers <= 1 {
        return 0.0;
    }
    let rounds = f64::from(usize::BITS - (workers - 1).leading_zeros());
    rounds * (latency_s + bytes * 8.0 / bandwidth_bits_per_s)
}

/// What one worker does alone: the inputs of a projection.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// A name for tables.
    pub name: String,
    /// Trainable parameters (gradient elements all-reduced per step).
    pub parameters: u64,
    /// Bytes per gradient element (4 for float32).
    pub bytes_per_parameter: f64,
    /// Examples per worker per step.
    pub batch_per_worker: usize,
    /// One worker's training throughput, examples per second.
    pub samples_per_second: f64,
    /// With `sync_batch_norm`: the channels of each BatchNormalization layer (two small
    /// all-reduces each per step); empty for per-replica statistics.
    pub sync_batch_norm_channels: Vec<usize>,
}

impl Workload {
    /// Gradient bytes all-reduced per step.
    pub fn gradient_bytes(&self) -> f64 {
        self.parameters as f64 * self.bytes_per_parameter
    }

    /// One worker's step time, seconds: `batch_per_worker / samples_per_second`.
    pub fn compute_seconds(&self) -> f64 {
        self.batch_per_worker as f64 / self.samples_per_second
    }

    /// The synchronized BatchNormalization all-reduces of one step, seconds: two per layer
    /// of `(2 × channels + 1)` float32 values ([`small_allreduce_seconds`]).
    pub fn sync_batch_norm_seconds(
        &self,
        workers: usize,
        bandwidth_bits_per_s: f64,
        latency_s: f64,
    ) -> f64 {
        self.sync_batch_norm_channels
            .iter()
            .map(|&c| {
                let bytes = (2 * c + 1) as f64 * 4.0;
                2.0 * small_allreduce_seconds(workers, bytes, bandwidth_bits_per_s, latency_s)
            })
            .sum()
    }

    /// The projection for `workers` workers on links of `bandwidth_bits_per_s` with
    /// `latency_s` per message.
    pub fn project(&self, workers: usize, bandwidth_bits_per_s: f64, latency_s: f64) -> Projection {
        let compute_s = self.compute_seconds();
        let communication_s =
            ring_allreduce_seconds(
                workers,
                self.gradient_bytes(),
                bandwidth_bits_per_s,
                latency_s,
            ) + self.sync_batch_norm_seconds(workers, bandwidth_bits_per_s, latency_s);
        let step_s = compute_s + communication_s;
        let samples_per_second = (workers * self.batch_per_worker) as f64 / step_s;
        Projection {
            workers,
            compute_s,
            communication_s,
            samples_per_second,
            efficiency: samples_per_second / (workers as f64 * self.samples_per_second),
        }
    }
}

/// A projected step for `workers` workers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Projection {
    /// Workers (replicas), one per device.
    pub workers: usize,
    /// Compute per step, seconds (one worker's, unchanged by `N`).
    pub compute_s: f64,
    /// All-reduce per step, seconds.
    pub communication_s: f64,
    /// Global throughput, examples per second.
    pub samples_per_second: f64,
    /// Scaling efficiency: throughput over `N ×` one worker's (1 = linear scaling).
    pub efficiency: f64,
}

/// The workloads of the issue's table, with their parameter counts (Keras `count_params()` of
/// `keras.applications.ResNet50()` trainable weights; BERT-large from Devlin et al. 2019,
/// 340M; kiln's Fashion-MNIST CNN, `examples/fashion-mnist/cnn.toml`) and one worker's
/// throughput: measured here for the CNN (README, 2-core CPU), assumed for the others (one
/// NVIDIA A100 in mixed precision, order of NVIDIA's published DeepLearningExamples numbers:
/// ResNet-50 at batch 256 about 2,500 images/s, BERT-large pre-training at sequence length 128
/// and batch 64 about 400 sequences/s). Override with `--samples-per-second`.
pub fn presets() -> Vec<Workload> {
    vec![
        Workload {
            name: "fashion-cnn".into(),
            parameters: 421_642,
            bytes_per_parameter: 4.0,
            batch_per_worker: 128,
            samples_per_second: 2_009.0,
            sync_batch_norm_channels: Vec::new(),
        },
        Workload {
            name: "resnet50".into(),
            parameters: 25_583_592,
            bytes_per_parameter: 4.0,
            batch_per_worker: 256,
            samples_per_second: 2_500.0,
            sync_batch_norm_channels: Vec::new(),
        },
        Workload {
            name: "bert-large".into(),
            parameters: 340_000_000,
            bytes_per_parameter: 4.0,
            batch_per_worker: 64,
            samples_per_second: 400.0,
            sync_batch_norm_channels: Vec::new(),
        },
    ]
}

/// Parses a bandwidth such as `100Gbit`, `25Gb/s`, `400Gbps`, `800Mbit`, `1.6Tbit` (bits)
/// or `12.5GB/s` (bytes), into bits per second. `flag` names the option in errors.
///
/// # Errors
/// [`KilnError::Config`] naming `flag` for a missing number, an unknown unit or a value that
/// is not positive.
pub fn parse_bandwidth(text: &str, flag: &str) -> Result<f64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let bad = |why: &str| {
        KilnError::config(
            flag,
            format!(
                "\"{text}\" {why}; write a number and a unit, e.g. 100Gbit, 25Gb/s, 400Gbps, \
                 800Mbit or 12.5GB/s"
            ),
        )
    };
    let value: f64 = number.parse().map_err(|_| bad("has no number"))?;
    let unit = unit.trim();
    let (prefix, rest) = unit.split_at(unit.chars().next().map_or(0, char::len_utf8));
    let scale = match prefix {
        "K" | "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        _ => return Err(bad("has an unknown unit")),
    };
    let per = match rest {
        "" | "bit" | "bit/s" | "b/s" | "bps" | "b" => 1.0,
        "B/s" | "Bps" | "B" => 8.0,
        _ => return Err(bad("has an unknown unit")),
    };
    let bits = value * scale * per;
    if !(bits.is_finite() && bits > 0.0) {
        return Err(bad("is not a positive bandwidth"));
    }
    Ok(bits)
}

/// Worker counts of a table up to `max`: powers of two, and `max` itself.
pub fn worker_counts(max: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |n| n.checked_mul(2))
        .take_while(|&n| n <= max)
        .collect();
    if max >= 1 && v.last() != Some(&max) {
        v.push(max);
    }
    v
}

/// A text table of projections of `workload` for each of `workers` at each bandwidth
/// (bits/s): workers, bandwidth, compute and all-reduce milliseconds per step, samples/s and
/// efficiency.
pub fn table(workload: &Workload, workers: &[usize], bandwidths: &[f64], latency_s: f64) -> String {
    let mut out = format!(
        "{}: {} parameters ({:.1} MB of float32 gradients), {} examples per worker, {:.0} \
         samples/s on one worker\n",
        workload.name,
        crate::model::thousands(workload.parameters as usize),
        workload.gradient_bytes() / 1e6,
        workload.batch_per_worker,
        workload.samples_per_second
    );
    out += &format!(
        "{:>7}  {:>9}  {:>10}  {:>13}  {:>12}  {:>10}\n",
        "workers", "bandwidth", "compute ms", "all-reduce ms", "samples/s", "efficiency"
    );
    for &bw in bandwidths {
        for &n in workers {
            let p = workload.project(n, bw, latency_s);
            out += &format!(
                "{:>7}  {:>9}  {:>10.2}  {:>13.2}  {:>12.0}  {:>9.1}%\n",
                n,
                format!("{}Gb/s", bw / 1e9),
                p.compute_s * 1e3,
                p.communication_s * 1e3,
                p.samples_per_second,
                100.0 * p.efficiency
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_cost_is_the_patarasuk_yuan_formula() {
        // 100 MB over 4 workers at 100 Gb/s (12.5 GB/s), 10 µs per message:
        // 2·3·10µs + 2·3/4 · 1e8 B / 12.5e9 B/s = 60 µs + 12 ms.
        let t = ring_allreduce_seconds(4, 1e8, 100e9, 10e-6);
        assert!((t - 0.01206).abs() < 1e-12, "{t}");
        assert_eq!(ring_allreduce_seconds(1, 1e8, 100e9, 10e-6), 0.0);
        // The bandwidth term tends to 2 × bytes / bandwidth as N grows.
        let big = ring_allreduce_seconds(1_000_000, 1e8, 100e9, 0.0);
        assert!((big - 0.016).abs() < 1e-7, "{big}");
    }

    #[test]
    fn projections_scale_throughput_by_workers_less_the_all_reduce() {
        let w = Workload {
            name: "t".into(),
            parameters: 25_000_000,
            bytes_per_parameter: 4.0,
            batch_per_worker: 100,
            samples_per_second: 1000.0,
            sync_batch_norm_channels: Vec::new(),
        };
        let one = w.project(1, 25e9, 1e-5);
        assert_eq!((one.samples_per_second, one.efficiency), (1000.0, 1.0));
        // 2 workers at 25 Gb/s: 2·1·10µs + 1 · 1e8 B / 3.125e9 B/s = 32.02 ms on top of 100 ms.
        let two = w.project(2, 25e9, 1e-5);
        assert!((two.communication_s - 0.03202).abs() < 1e-12);
        assert!((two.samples_per_second - 200.0 / 0.13202).abs() < 1e-9);
        assert!((two.efficiency - 0.1 / 0.13202).abs() < 1e-12);
        // More bandwidth, better efficiency; more workers, lower efficiency.
        assert!(w.project(2, 400e9, 1e-5).efficiency > two.efficiency);
        assert!(w.project(64, 25e9, 1e-5).efficiency < two.efficiency);
        // Synchronized BatchNormalization: two layers of 64 and 255 channels add, per step,
        // 2 × ⌈log₂ N⌉ × (10 µs + (2C + 1) × 4 B / 3.125e9 B/s) per layer: at N = 2,
        // 2 × (10 µs + 516 B / 3.125e9) + 2 × (10 µs + 2044 B / 3.125e9) = 41.6384 µs.
        let synced = Workload {
            sync_batch_norm_channels: vec![64, 255],
            ..w.clone()
        };
        let extra = synced.project(2, 25e9, 1e-5).communication_s - two.communication_s;
        assert!((extra - 41.6384e-6).abs() < 1e-12, "{extra}");
        // At N = 64, six rounds each.
        let at64 = synced.sync_batch_norm_seconds(64, 25e9, 1e-5);
        assert!((at64 - 6.0 * 41.6384e-6).abs() < 1e-12, "{at64}");
        assert_eq!(small_allreduce_seconds(1, 1e3, 25e9, 1e-5), 0.0);
        assert_eq!(small_allreduce_seconds(3, 0.0, 25e9, 1e-5), 2e-5);
    }

    #[test]
    fn bandwidths_parse_in_bits_or_bytes() {
        let p = |s| parse_bandwidth(s, "--bandwidth").unwrap();
        assert_eq!(p("100Gbit"), 100e9);
        assert_eq!(p("25Gb/s"), 25e9);
        assert_eq!(p("400Gbps"), 400e9);
        assert_eq!(p("800Mbit"), 800e6);
        assert_eq!(p("1.6Tbit"), 1.6e12);
        assert_eq!(p("12.5GB/s"), 100e9);
        assert_eq!(p(" 10G "), 10e9);
        for bad in ["fast", "100", "100Xbit", "0Gbit", "100Gbyte"] {
            let e = parse_bandwidth(bad, "--bandwidth").unwrap_err().to_string();
            assert!(e.starts_with("--bandwidth: "), "{e}");
            assert!(e.contains(bad.trim()), "{e}");
        }
    }

    #[test]
    fn tables_list_powers_of_two_and_the_maximum() {
        assert_eq!(worker_counts(64), [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(worker_counts(6), [1, 2, 4, 6]);
        assert_eq!(worker_counts(1), [1]);
        let presets = presets();
        let t = table(&presets[0], &[1, 2], &[25e9], 10e-6);
        assert!(
            t.starts_with("fashion-cnn: 421,642 parameters (1.7 MB"),
            "{t}"
        );
        assert_eq!(t.lines().count(), 4, "{t}");
        assert!(t.lines().nth(2).unwrap().ends_with("100.0%"), "{t}");
    }
}
