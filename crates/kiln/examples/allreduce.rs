//! Measures `MPI_Allreduce` (sum of `f32`) between the processes of an `mpirun` job: the
//! latency α and bandwidth of the ring cost model of `kiln estimate`
//! (`kiln::distribute::cost_model`):
//!
//! `T(N, bytes) = 2 (N − 1) α + 2 (N − 1) / N × bytes / bandwidth`
//!
//! α is fitted from 4-byte messages (`T / (2 (N − 1))`), the bandwidth from each larger size
//! (`2 (N − 1) / N × bytes / (T − 2 (N − 1) α)`). Each size is timed as the median of 30 calls
//! after 5 warm-up calls, every call preceded by a barrier.
//!
//! ```sh
//! mpirun -np 2 --bind-to none target/release/examples/allreduce [BYTES...]
//! ```
//! Rank 0 prints one JSON line per size: `{"bytes": .., "seconds": .., "alpha_s": ..,
//! "bandwidth_gbit_s": ..}`. Default sizes: 4 B, 64 KiB, 1 MiB, 2,678,824 B (the benchmark
//! MLP's gradients: 669,706 float32 parameters), 16 MiB.

use std::time::Instant;

use kiln::distribute::world;

fn median_seconds(bytes: usize) -> f64 {
    let mut buf = vec![1.0f32; (bytes / 4).max(1)];
    let mut times = Vec::new();
    for i in 0..35 {
        world::barrier();
        let clock = Instant::now();
        world::all_reduce_sum(&mut buf);
        if i >= 5 {
            times.push(clock.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    let w = world::init().expect("MPI starts (run under mpirun; scripts/setup.sh installs it)");
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("sizes are byte counts"))
        .collect();
    if sizes.is_empty() {
        sizes = vec![4, 64 << 10, 1 << 20, 669_706 * 4, 16 << 20];
    }
    let n = w.size as f64;
    let rounds = 2.0 * (n - 1.0);
    let alpha = median_seconds(4) / rounds.max(1.0);
    for bytes in sizes {
        let t = median_seconds(bytes);
        let moved = rounds / n * bytes as f64;
        // A 4-byte message measures the latency; no bandwidth is fitted from it.
        let bandwidth = if bytes > 4 {
            format!("{:.3}", moved * 8.0 / (t - rounds * alpha).max(1e-12) / 1e9)
        } else {
            "null".into()
        };
        if w.rank == 0 {
            println!(
                "{{\"processes\": {}, \"bytes\": {bytes}, \"seconds\": {t:.9}, \"alpha_s\": {alpha:.9}, \"bandwidth_gbit_s\": {bandwidth}}}",
                w.size
            );
        }
    }
    world::finalize();
}
