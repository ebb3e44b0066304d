//! Synchronized BatchNormalization over threads against one device on the whole batch.

use std::sync::Arc;

use burn::prelude::*;
use burn::tensor::TensorData;
use burn::tensor::module::batch_norm_train;

use super::batch_norm_sync;
use crate::replica::{CrossReplica, ThreadReplicas, scope};

const SHAPE: [usize; 4] = [8, 3, 2, 2];

fn vec4(t: Tensor<4>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

fn vec1(t: Tensor<1>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

fn rel(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let diff: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let norm: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (diff / norm.max(1e-30)).sqrt()
}

/// What one replica (or the single device) computes: the output, the input gradient, the
/// gradients of gamma and beta, and the batch mean and variance.
#[derive(Debug)]
struct Replica {
    y: Vec<f32>,
    dx: Vec<f32>,
    dgamma: Vec<f32>,
    dbeta: Vec<f32>,
    mean: Vec<f32>,
    var: Vec<f32>,
}

/// The input, the loss weights (`loss = Σ y · w`, so every output has its own gradient), gamma
/// and beta: drawn once.
struct Problem {
    x: TensorData,
    w: TensorData,
    gamma: TensorData,
    beta: TensorData,
}

fn problem() -> Problem {
    // A local generator: the device's global one is shared with tests running in parallel.
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut draw = |shape: Vec<usize>, lo: f32, hi: f32| {
        let n = shape.iter().product::<usize>();
        let values: Vec<f32> = (0..n).map(|_| rng.random_range(lo..hi)).collect();
        TensorData::new(values, shape)
    };
    Problem {
        // An offset mean and a spread per channel, so the statistics matter.
        x: draw(SHAPE.to_vec(), 1.0, 4.0),
        w: draw(SHAPE.to_vec(), -1.0, 1.0),
        gamma: draw(vec![SHAPE[1]], 0.5, 1.5),
        beta: draw(vec![SHAPE[1]], -0.5, 0.5),
    }
}

/// Rows `rows` of the problem through BatchNormalization, synchronized when `sync`, with the
/// loss weighted by `factor` (0 for a placeholder replica).
fn run(p: &Problem, rows: std::ops::Range<usize>, sync: bool, factor: f32) -> Replica {
    let device = Device::flex().autodiff();
    let take = |d: &TensorData| {
        Tensor::<4>::from_data(d.clone(), &device).slice([rows.clone(), 0..3, 0..2, 0..2])
    };
    let x = take(&p.x).detach().require_grad();
    let w = take(&p.w);
    let gamma = Tensor::<1>::from_data(p.gamma.clone(), &device).require_grad();
    let beta = Tensor::<1>::from_data(p.beta.clone(), &device).require_grad();
    let (y, mean, var) = if sync {
        let shift = Tensor::<1>::from_floats([2.0, 2.5, 3.0], &device);
        batch_norm_sync(x.clone(), gamma.clone(), beta.clone(), shift, 1e-3)
    } else {
        let out = batch_norm_train(x.clone(), gamma.clone(), beta.clone(), 1e-3);
        (out.output, out.mean, out.variance)
    };
    let loss = y.clone().mul(w).sum().mul_scalar(factor);
    let grads = loss.backward();
    Replica {
        y: vec4(y.detach()),
        dx: vec4(x.grad(&grads).unwrap()),
        dgamma: vec1(gamma.grad(&grads).unwrap()),
        dbeta: vec1(beta.grad(&grads).unwrap()),
        mean: vec1(mean),
        var: vec1(var),
    }
}

/// Each `(rows, contributes)` on its own thread, all in one synchronized group.
fn replicas(p: &Problem, parts: &[(std::ops::Range<usize>, bool)]) -> Vec<Replica> {
    let group: Arc<dyn CrossReplica> = Arc::new(ThreadReplicas::new(parts.len()));
    std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter()
            .map(|(rows, contributes)| {
                let group = group.clone();
                s.spawn(move || {
                    let _sync = scope(group, *contributes);
                    run(p, rows.clone(), true, if *contributes { 1.0 } else { 0.0 })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn sum(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

fn check_against_one_device(parts: &[Replica], one: &Replica) {
    let y: Vec<f32> = parts[0].y.iter().chain(&parts[1].y).copied().collect();
    let dx: Vec<f32> = parts[0].dx.iter().chain(&parts[1].dx).copied().collect();
    assert!(rel(&y, &one.y) < 1e-5, "outputs {}", rel(&y, &one.y));
    assert!(
        rel(&dx, &one.dx) < 1e-5,
        "input gradients {}",
        rel(&dx, &one.dx)
    );
    let dgamma = sum(&parts[0].dgamma, &parts[1].dgamma);
    let dbeta = sum(&parts[0].dbeta, &parts[1].dbeta);
    assert!(
        rel(&dgamma, &one.dgamma) < 1e-5,
        "{dgamma:?} vs {:?}",
        one.dgamma
    );
    assert!(
        rel(&dbeta, &one.dbeta) < 1e-5,
        "{dbeta:?} vs {:?}",
        one.dbeta
    );
    for r in parts {
        assert!(
            rel(&r.mean, &one.mean) < 1e-6,
            "{:?} vs {:?}",
            r.mean,
            one.mean
        );
        assert!(rel(&r.var, &one.var) < 1e-5, "{:?} vs {:?}", r.var, one.var);
    }
}

#[test]
fn without_a_group_it_is_plain_batch_normalization() {
    let p = problem();
    let plain = run(&p, 0..8, false, 1.0);
    let sync = run(&p, 0..8, true, 1.0);
    assert!(rel(&sync.y, &plain.y) < 1e-5);
    assert!(rel(&sync.dx, &plain.dx) < 1e-5);
    assert!(rel(&sync.dgamma, &plain.dgamma) < 1e-5);
}

#[test]
fn two_synchronized_replicas_compute_one_device_on_the_whole_batch() {
    let p = problem();
    let one = run(&p, 0..8, false, 1.0);
    let two = replicas(&p, &[(0..4, true), (4..8, true)]);
    check_against_one_device(&two, &one);
    // Per-replica statistics (no synchronization) give other outputs and gradients: the
    // comparison above can fail.
    let own = [run(&p, 0..4, false, 1.0), run(&p, 4..8, false, 1.0)];
    let dx: Vec<f32> = own[0].dx.iter().chain(&own[1].dx).copied().collect();
    assert!(rel(&dx, &one.dx) > 1e-2, "{}", rel(&dx, &one.dx));
}

#[test]
fn a_replica_without_examples_takes_part_and_changes_nothing() {
    let p = problem();
    let one = run(&p, 0..8, false, 1.0);
    // The third replica's placeholder (one row it does not contribute) runs every all-reduce.
    let three = replicas(&p, &[(0..4, true), (4..8, true), (0..1, false)]);
    check_against_one_device(&three[..2], &one);
    let placeholder = &three[2];
    assert!(
        placeholder.dx.iter().all(|g| *g == 0.0),
        "{:?}",
        placeholder.dx
    );
    assert!(placeholder.dgamma.iter().all(|g| *g == 0.0));
}
