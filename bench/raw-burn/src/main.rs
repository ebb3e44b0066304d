//! A raw Burn training loop: the benchmark's reference for what the same kernels give without
//! kiln's pipeline, `fit`, metrics and callbacks. Same models, data, batch size, optimizer,
//! allocator and CPU kernels as `kiln train bench/configs/*.toml` (kiln's fused convolution,
//! pooling and Dense ops, and its Keras AdamW as a Burn optimizer); the module, the loss, the
//! backward pass and the optimizer driver are plain Burn.
//!
//! `kiln-bench-raw-burn mlp|cnn [epochs]` prints one JSON line with training samples/s over
//! epochs 2.. (the first is excluded).

use std::path::Path;
use std::time::Instant;

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d};
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use rand::SeedableRng;
use rand::seq::SliceRandom;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Module, Debug)]
struct Mlp {
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
}

#[derive(Module, Debug)]
struct Cnn {
    conv1: Conv2d,
    conv2: Conv2d,
    fc1: Linear,
    fc2: Linear,
}

/// `Dense(activation=relu)` (or linear) with kiln's fused op: Burn's `Linear` stores its weight
/// `[in, out]`, the layout the op takes.
fn dense(fc: &Linear, x: Tensor<2>, relu: bool) -> Tensor<2> {
    kiln::ops::dense(
        x,
        fc.weight.val(),
        fc.bias.as_ref().map(|b| b.val()),
        kiln::ops::Epilogue::with_relu(relu),
    )
}

/// `Conv2D(padding="same", activation="relu")` then `MaxPooling2D(2)` with kiln's kernels
/// (the ReLU fused into the convolution, as kiln does).
fn conv_relu_pool(conv: &Conv2d, x: Tensor<4>) -> Tensor<4> {
    let bias = conv.bias.as_ref().map(|b| b.val());
    let y = kiln::ops::conv2d(
        x,
        conv.weight.val(),
        bias,
        [1, 1],
        [(1, 1), (1, 1)],
        kiln::ops::Epilogue::with_relu(true),
    );
    kiln::ops::max_pool2d(y, [2, 2], [2, 2], [(0, 0), (0, 0)])
}

trait Net: Module {
    fn logits(&self, x: Tensor<4>) -> Tensor<2>;
}

impl Net for Mlp {
    fn logits(&self, x: Tensor<4>) -> Tensor<2> {
        let x = x.flatten(1, 3);
        let x = dense(&self.fc1, x, true);
        let x = dense(&self.fc2, x, true);
        dense(&self.fc3, x, false)
    }
}

impl Net for Cnn {
    fn logits(&self, x: Tensor<4>) -> Tensor<2> {
        let x = conv_relu_pool(&self.conv1, x);
        let x = conv_relu_pool(&self.conv2, x);
        let x = dense(&self.fc1, x.flatten(1, 3), true);
        dense(&self.fc2, x, false)
    }
}

fn train<M: Net>(
    mut net: M,
    images: &[f32],
    labels: &[i64],
    epochs: usize,
    device: &Device,
) -> Vec<f64> {
    let n = labels.len();
    let batch = 128;
    // Keras' AdamW defaults (weight_decay 0.004, epsilon 1e-7), kiln's fused update.
    let mut optim = ModuleOptimizer::from(kiln::compile::KerasAdam {
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: 1e-7,
        weight_decay: 0.004,
        amsgrad: false,
    });
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut order: Vec<usize> = (0..n).collect();
    let mut times = Vec::new();
    for _ in 0..epochs {
        order.shuffle(&mut rng);
        let started = Instant::now();
        let mut last = None;
        for chunk in order.chunks(batch) {
            let b = chunk.len();
            let mut x = Vec::with_capacity(b * 784);
            let y: Vec<i64> = chunk.iter().map(|&i| labels[i]).collect();
            for &i in chunk {
                x.extend_from_slice(&images[i * 784..(i + 1) * 784]);
            }
            let x = Tensor::<4>::from_data(TensorData::new(x, [b, 1, 28, 28]), device);
            let y = Tensor::<1, Int>::from_data(TensorData::new(y, [b]), device);
            let logits = net.logits(x);
            let loss = log_softmax(logits, 1)
                .gather(1, y.reshape([b, 1]))
                .mean()
                .neg();
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optim.step(1e-3, net, grads);
            last = Some(loss);
        }
        // Read the last loss, as a Keras progress bar would, to force completion.
        let _ = last.map(|l| l.into_scalar::<f32>());
        times.push(n as f64 / started.elapsed().as_secs_f64());
    }
    times
}

fn main() {
    // The same allocator setting as the `kiln` binary (crates/kiln-cli/src/main.rs): freed
    // memory stays committed (mimalloc's `mi_option_purge_delay`, option 15, set to -1).
    // SAFETY: sets an integer option.
    unsafe { libmimalloc_sys::mi_option_set(15, -1) };
    let mut args = std::env::args().skip(1);
    let model = args.next().unwrap_or_else(|| "cnn".into());
    let epochs: usize = args.next().map(|e| e.parse().expect("epochs")).unwrap_or(3);
    let dir = std::env::var("KILN_DATA_DIR")
        .unwrap_or_else(|_| "/usr/share/datasets/fashion-mnist".into());
    let images = kiln_data::idx::read_idx(&Path::new(&dir).join("train-images-idx3-ubyte.gz"))
        .expect("images");
    let labels = kiln_data::idx::read_idx(&Path::new(&dir).join("train-labels-idx1-ubyte.gz"))
        .expect("labels");
    let images: Vec<f32> = images.to_f32_scaled(1.0 / 255.0).data().to_f32();
    let labels = labels.data().to_i64();
    let device = Device::flex().autodiff();
    device.seed(1);
    let sps = match model.as_str() {
        "mlp" => train(
            Mlp {
                fc1: LinearConfig::new(784, 512).init(&device),
                fc2: LinearConfig::new(512, 512).init(&device),
                fc3: LinearConfig::new(512, 10).init(&device),
            },
            &images,
            &labels,
            epochs,
            &device,
        ),
        "cnn" => train(
            Cnn {
                conv1: Conv2dConfig::new([1, 32], [3, 3])
                    .with_padding(PaddingConfig2d::Same)
                    .init(&device),
                conv2: Conv2dConfig::new([32, 64], [3, 3])
                    .with_padding(PaddingConfig2d::Same)
                    .init(&device),
                fc1: LinearConfig::new(64 * 7 * 7, 128).init(&device),
                fc2: LinearConfig::new(128, 10).init(&device),
            },
            &images,
            &labels,
            epochs,
            &device,
        ),
        other => panic!("unknown model {other}: use mlp or cnn"),
    };
    let timed = &sps[1.min(sps.len() - 1)..];
    println!(
        "{{\"framework\": \"burn-raw\", \"version\": \"0.23.0-pre.1\", \"model\": \"{model}\", \"samples_per_second\": {}, \"epochs_timed\": {}}}",
        timed.iter().sum::<f64>() / timed.len() as f64,
        timed.len()
    );
}
