//! Times kiln's CPU kernels against Burn's flex operations on the benchmark CNN's shapes
//! (batch 128): `cargo run --release -p kiln --example kernel_timing`.

use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::ops::{ConvOptions, MaxPoolOptions};

fn time<T>(label: &str, reps: usize, mut f: impl FnMut() -> T) {
    f();
    // The fastest repetition: the least disturbed by whatever else the machine runs.
    let best = (0..reps)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    println!("{label:<44} {:>8.2} ms (best of {reps})", best * 1000.0);
}

/// A stride-1 "same" convolution with bias (`pad` 1 on every side for the 3x3 kernels here) on
/// kiln's kernels (`fast`, no epilogue) or on Burn's.
fn conv_same(fast: bool, x: Tensor<4>, w: Tensor<4>, b: Tensor<1>) -> Tensor<4> {
    let pad = [(1, 1), (1, 1)];
    match fast {
        true => kiln::ops::conv2d(x, w, Some(b), [1, 1], pad, Default::default()),
        false => burn::tensor::module::conv2d(
            x,
            w,
            Some(b),
            ConvOptions::new_with_padding([1, 1], pad, [1, 1], 1),
        ),
    }
}

fn raw_kernels() {
    use kiln::kernels::{Conv2dGeometry, conv2d};
    for (name, c, hw, o) in [("conv1", 1, 28, 32), ("conv2", 32, 14, 64)] {
        let g = Conv2dGeometry {
            batch: 128,
            in_channels: c,
            height: hw,
            width: hw,
            out_channels: o,
            kernel: [3, 3],
            stride: [1, 1],
            padding: [(1, 1), (1, 1)],
        };
        let x: Vec<f32> = (0..128 * c * hw * hw)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let w: Vec<f32> = (0..o * c * 9)
            .map(|i| (i as f32 * 0.91).cos() * 0.1)
            .collect();
        let dy: Vec<f32> = (0..128 * o * hw * hw)
            .map(|i| (i as f32 * 0.13).sin())
            .collect();
        time(&format!("{name} kernel forward"), 10, || {
            conv2d::forward(&x, &w, None, &g, Default::default())
        });
        time(&format!("{name} kernel backward (dw, db)"), 10, || {
            conv2d::backward(&x, &w, &dy, None, &g, false)
        });
        time(&format!("{name} kernel backward (dx, dw, db)"), 10, || {
            conv2d::backward(&x, &w, &dy, None, &g, true)
        });
    }
}

fn raw_pool() {
    use kiln::kernels::{PoolGeometry, pool};
    let g = PoolGeometry {
        planes: 128 * 32,
        height: 28,
        width: 28,
        kernel: [2, 2],
        stride: [2, 2],
        padding: [(0, 0), (0, 0)],
    };
    let x: Vec<f32> = (0..128 * 32 * 784)
        .map(|i| (i as f32 * 0.37).sin())
        .collect();
    let dy: Vec<f32> = (0..128 * 32 * 196)
        .map(|i| (i as f32 * 0.13).sin())
        .collect();
    time("pool 2x2 kernel forward 128x32x28x28", 10, || {
        pool::max_forward(&x, &g)
    });
    time("pool 2x2 kernel backward 128x32x28x28", 10, || {
        pool::max_backward(&x, &dy, &g)
    });
}

fn main() {
    raw_kernels();
    raw_pool();
    let d = Device::flex();
    let ad = Device::flex().autodiff();
    for (name, c, hw, o) in [
        ("conv1 1->32 28x28", 1, 28, 32),
        ("conv2 32->64 14x14", 32, 14, 64),
    ] {
        let x = Tensor::<4>::random([128, c, hw, hw], Distribution::Normal(0.0, 1.0), &d);
        let w = Tensor::<4>::random([o, c, 3, 3], Distribution::Normal(0.0, 0.1), &d);
        let b = Tensor::<1>::zeros([o], &d);
        time(&format!("{name} forward, burn"), 10, || {
            conv_same(false, x.clone(), w.clone(), b.clone()).into_data()
        });
        time(&format!("{name} forward, kiln"), 10, || {
            conv_same(true, x.clone(), w.clone(), b.clone()).into_data()
        });
        for fast in [false, true] {
            let label = format!("{name} fwd+bwd, {}", if fast { "kiln" } else { "burn" });
            time(&label, 5, || {
                let x = x.clone().to_device(&ad).autodiff().require_grad();
                let w = w.clone().to_device(&ad).autodiff().require_grad();
                let b = b.clone().to_device(&ad).autodiff().require_grad();
                let y = conv_same(fast, x.clone(), w.clone(), b.clone());
                let g = y.sum().backward();
                w.grad(&g).unwrap().into_data()
            });
        }
    }
    // As in training: a fresh input batch from host data each step, weights tracked, relu.
    let host: Vec<f32> = (0..128 * 784).map(|i| (i % 255) as f32 / 255.0).collect();
    let w1 = Tensor::<4>::random([32, 1, 3, 3], Distribution::Normal(0.0, 0.1), &ad).require_grad();
    let b1 = Tensor::<1>::zeros([32], &ad).require_grad();
    for fast in [false, true] {
        time(
            &format!(
                "conv1+relu training forward, {}",
                if fast { "kiln" } else { "burn" }
            ),
            10,
            || {
                let x =
                    Tensor::<4>::from_data(TensorData::new(host.clone(), [128, 1, 28, 28]), &ad);
                let y = conv_same(fast, x, w1.clone(), b1.clone());
                burn::tensor::activation::relu(y)
            },
        );
    }
    let xa = Tensor::<4>::from_data(TensorData::new(host.clone(), [128, 1, 28, 28]), &ad);
    time("conv1 tracked w, no relu, kiln", 10, || {
        conv_same(true, xa.clone(), w1.clone(), b1.clone())
    });
    let y = conv_same(true, xa.clone(), w1.clone(), b1.clone());
    time("relu on a tracked 128x32x28x28", 10, || {
        burn::tensor::activation::relu(y.clone())
    });
    let yd = y.clone().detach();
    time("relu on an untracked autodiff 128x32x28x28", 10, || {
        burn::tensor::activation::relu(yd.clone())
    });
    let yp = Tensor::<4>::from_data(yd.clone().into_data(), &d);
    time("relu on a plain 128x32x28x28", 10, || {
        burn::tensor::activation::relu(yp.clone())
    });
    time("relu on a plain 128x32x28x28 + read", 10, || {
        burn::tensor::activation::relu(yp.clone()).into_data()
    });
    let base = Tensor::<4>::random([128, 32, 28, 28], Distribution::Normal(0.0, 1.0), &d);
    time("identity fwd+bwd (autodiff overhead)", 10, || {
        let x = base.clone().to_device(&ad).autodiff().require_grad();
        let g = (x.clone() * 1.0).sum().backward();
        x.grad(&g).unwrap().into_data()
    });
    time("relu fwd+bwd 128x32x28x28", 10, || {
        let x = base.clone().to_device(&ad).autodiff().require_grad();
        let g = burn::tensor::activation::relu(x.clone()).sum().backward();
        x.grad(&g).unwrap().into_data()
    });
    time("kiln maxpool fwd+bwd 128x32x28x28", 10, || {
        let x = base.clone().to_device(&ad).autodiff().require_grad();
        let g = kiln::ops::max_pool2d(x.clone(), [2, 2], [2, 2], [(0, 0), (0, 0)])
            .sum()
            .backward();
        x.grad(&g).unwrap().into_data()
    });
    let x = Tensor::<4>::random([128, 32, 28, 28], Distribution::Normal(0.0, 1.0), &d);
    time("maxpool 2x2 128x32x28x28 forward, burn", 10, || {
        burn::tensor::module::max_pool2d(x.clone(), MaxPoolOptions::new([2, 2]).with_stride([2, 2]))
            .into_data()
    });
    time("maxpool 2x2 128x32x28x28 forward, kiln", 10, || {
        kiln::ops::max_pool2d(x.clone(), [2, 2], [2, 2], [(0, 0), (0, 0)]).into_data()
    });
    time("relu 128x32x28x28, burn", 10, || {
        burn::tensor::activation::relu(x.clone()).into_data()
    });
}
