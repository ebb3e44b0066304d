//! Every fast path against Burn's reference operation, forward and gradients, on a grid of
//! shapes, strides, paddings and batch sizes: norm-wise relative error below 1e-5 in f32.

use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::ops::{ConvOptions, MaxPoolOptions};

use super::Epilogue;

fn rel_err(ours: Tensor<4>, reference: Tensor<4>) -> f64 {
    rel(
        ours.into_data().try_to_vec::<f32>().unwrap(),
        reference.into_data().try_to_vec::<f32>().unwrap(),
    )
}

fn rel(a: Vec<f32>, b: Vec<f32>) -> f64 {
    assert_eq!(a.len(), b.len());
    let diff: f64 = a
        .iter()
        .zip(&b)
        .map(|(x, y)| ((x - y) as f64).powi(2))
        .sum();
    let norm: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (diff / norm.max(1e-30)).sqrt()
}

fn grad<const D: usize>(t: &Tensor<D>, g: &burn::tensor::Gradients) -> Vec<f32> {
    t.grad(g)
        .expect("tracked")
        .into_data()
        .try_to_vec::<f32>()
        .unwrap()
}

// The losses weight the outputs with positive values, so that bias gradients (sums over the
// batch and positions) do not cancel and float32 rounding in the *reference* stays far below the
// tolerance.

#[test]
pub(crate) fn conv2d_matches_burn_forward_and_gradients() {
    let device = Device::flex().autodiff();
    device.seed(11);
    let mut checked = 0;
    // The last shape takes the direct route with several filter panels (AVX-512's two-panel
    // tiles) for the output and the input gradient.
    let shapes = [
        (1, 1, 7, 7, 3),
        (4, 3, 9, 8, 5),
        (16, 8, 14, 14, 16),
        (2, 32, 6, 7, 40),
    ];
    for &(n, c, h, w, o) in &shapes {
        for &(k, s) in &[
            ([3, 3], [1, 1]),
            ([3, 3], [2, 2]),
            ([1, 1], [1, 1]),
            ([2, 5], [2, 1]),
        ] {
            for (&pad, relu) in [[(0, 0), (0, 0)], [(1, 1), (1, 1)], [(0, 1), (2, 1)]]
                .iter()
                .flat_map(|p| [(p, false), (p, true)])
            {
                if h + pad[0].0 + pad[0].1 < k[0] || w + pad[1].0 + pad[1].1 < k[1] {
                    continue;
                }
                // The same inputs for both paths: drawn once.
                let x = Tensor::<4>::random([n, c, h, w], Distribution::Normal(0.0, 1.0), &device);
                let wt = Tensor::<4>::random(
                    [o, c, k[0], k[1]],
                    Distribution::Normal(0.0, 0.3),
                    &device,
                );
                let b = Tensor::<1>::random([o], Distribution::Normal(0.0, 0.3), &device);
                let out = |fast: bool| {
                    let (x, wt, b) = (
                        x.clone().detach().require_grad(),
                        wt.clone().detach().require_grad(),
                        b.clone().detach().require_grad(),
                    );
                    let y = if fast {
                        super::conv2d(
                            x.clone(),
                            wt.clone(),
                            Some(b.clone()),
                            s,
                            pad,
                            Epilogue::with_relu(relu),
                        )
                    } else {
                        let y = burn::tensor::module::conv2d(
                            x.clone(),
                            wt.clone(),
                            Some(b.clone()),
                            ConvOptions::new_with_padding(s, pad, [1, 1], 1),
                        );
                        if relu {
                            burn::tensor::activation::relu(y)
                        } else {
                            y
                        }
                    };
                    let weights = Tensor::<4>::from_data(
                        TensorData::new(
                            (0..y.dims().iter().product::<usize>())
                                .map(|i| 1.0 + 0.5 * ((i as f32) * 0.37).sin())
                                .collect::<Vec<_>>(),
                            y.dims(),
                        ),
                        &device,
                    );
                    let g = (y.clone() * weights).sum().backward();
                    (y.detach(), grad(&x, &g), grad(&wt, &g), grad(&b, &g))
                };
                let (y1, dx1, dw1, db1) = out(true);
                let (y0, dx0, dw0, db0) = out(false);
                let what = format!(
                    "n={n} c={c} h={h} w={w} o={o} k={k:?} s={s:?} pad={pad:?} relu={relu}"
                );
                assert!(rel_err(y1, y0) < 1e-5, "forward {what}");
                assert!(rel(dx1, dx0) < 1e-5, "dx {what}");
                assert!(rel(dw1, dw0) < 1e-5, "dw {what}");
                assert!(rel(db1, db0) < 1e-5, "db {what}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 60, "{checked}");
}

#[test]
pub(crate) fn max_pool2d_matches_burn_forward_and_gradients() {
    let device = Device::flex().autodiff();
    device.seed(12);
    let mut checked = 0;
    for &(n, c, h, w) in &[(1, 1, 6, 6), (3, 4, 7, 9), (32, 16, 28, 28)] {
        for &(k, s, pad) in &[
            ([2, 2], [2, 2], [(0, 0), (0, 0)]),
            ([3, 3], [2, 2], [(1, 1), (1, 1)]),
            ([2, 2], [1, 1], [(0, 1), (0, 1)]),
            ([3, 2], [1, 2], [(1, 0), (0, 1)]),
        ] {
            let x = Tensor::<4>::random([n, c, h, w], Distribution::Normal(0.0, 1.0), &device);
            let out = |fast: bool| {
                let x = x.clone().detach().require_grad();
                let y = if fast {
                    super::max_pool2d(x.clone(), k, s, pad)
                } else {
                    burn::tensor::module::max_pool2d(
                        x.clone(),
                        MaxPoolOptions::new(k)
                            .with_stride(s)
                            .with_padding_pairs(pad),
                    )
                };
                let weights = Tensor::<4>::from_data(
                    TensorData::new(
                        (0..y.dims().iter().product::<usize>())
                            .map(|i| ((i as f32) * 0.61).cos())
                            .collect::<Vec<_>>(),
                        y.dims(),
                    ),
                    &device,
                );
                let g = (y.clone() * weights).sum().backward();
                (y.detach(), grad(&x, &g))
            };
            let (y1, dx1) = out(true);
            let (y0, dx0) = out(false);
            let what = format!("n={n} c={c} h={h} w={w} k={k:?} s={s:?} pad={pad:?}");
            assert_eq!(y1.dims(), y0.dims(), "{what}");
            assert!(rel_err(y1, y0) < 1e-5, "forward {what}");
            assert!(rel(dx1, dx0) < 1e-5, "dx {what}");
            checked += 1;
        }
    }
    assert_eq!(checked, 12);
}

#[test]
fn the_fast_path_serves_flex_float32_only() {
    assert!(super::fast_path(&Device::flex(), burn::tensor::DType::F32));
    assert!(super::fast_path(
        &Device::flex().autodiff(),
        burn::tensor::DType::F32
    ));
    assert!(!super::fast_path(&Device::flex(), burn::tensor::DType::F16));
}

#[test]
pub(crate) fn dense_matches_burn_forward_and_gradients() {
    let device = Device::flex().autodiff();
    device.seed(13);
    for &(n, i, u) in &[(1, 1, 1), (5, 7, 3), (128, 784, 64), (33, 20, 10)] {
        let x = Tensor::<2>::random([n, i], Distribution::Normal(0.0, 1.0), &device);
        let w = Tensor::<2>::random([i, u], Distribution::Normal(0.0, 0.3), &device);
        let b = Tensor::<1>::random([u], Distribution::Normal(0.0, 0.3), &device);
        for relu in [false, true] {
            let out = |fast: bool| {
                let (x, w, b) = (
                    x.clone().detach().require_grad(),
                    w.clone().detach().require_grad(),
                    b.clone().detach().require_grad(),
                );
                let y = if fast {
                    super::dense(
                        x.clone(),
                        w.clone(),
                        Some(b.clone()),
                        Epilogue::with_relu(relu),
                    )
                } else {
                    let y = x.clone().matmul(w.clone()) + b.clone().unsqueeze::<2>();
                    if relu {
                        burn::tensor::activation::relu(y)
                    } else {
                        y
                    }
                };
                let weights = Tensor::<2>::from_data(
                    TensorData::new(
                        (0..n * u)
                            .map(|k| 1.0 + 0.5 * ((k as f32) * 0.37).sin())
                            .collect::<Vec<_>>(),
                        [n, u],
                    ),
                    &device,
                );
                let g = (y.clone() * weights).sum().backward();
                (
                    y.detach().into_data().try_to_vec::<f32>().unwrap(),
                    grad(&x, &g),
                    grad(&w, &g),
                    grad(&b, &g),
                )
            };
            let (y1, dx1, dw1, db1) = out(true);
            let (y0, dx0, dw0, db0) = out(false);
            let what = format!("n={n} i={i} u={u} relu={relu}");
            assert!(rel(y1, y0) < 1e-5, "forward {what}");
            assert!(rel(dx1, dx0) < 1e-5, "dx {what}");
            assert!(rel(dw1, dw0) < 1e-5, "dw {what}");
            assert!(rel(db1, db0) < 1e-5, "db {what}");
        }
    }
}

/// kiln's batch normalization in training against Burn's `batch_norm_train`: output, mean,
/// variance and the gradients of the input, `gamma` and `beta`, for images, flat features and
/// a 3-D tensor (norm-wise relative error below 1e-5).
#[test]
fn batch_norm_train_matches_burn_forward_and_gradients() {
    let device = Device::flex().autodiff();
    device.seed(17);
    for shape in [
        vec![8, 5, 6, 7],
        vec![32, 12],
        vec![3, 4, 9],
        vec![1, 3, 2, 2],
    ] {
        let c = shape[1];
        let x = Tensor::<1>::random(
            [shape.iter().product::<usize>()],
            Distribution::Normal(0.5, 2.0),
            &device,
        );
        let gamma = Tensor::<1>::random([c], Distribution::Normal(1.0, 0.5), &device);
        let beta = Tensor::<1>::random([c], Distribution::Normal(0.0, 0.5), &device);
        let n = x.dims()[0];
        let r = Tensor::<1>::random([n], Distribution::Uniform(0.1, 1.0), &device);
        let run = |fast: bool| {
            let (x, g, b) = (
                x.clone().detach().require_grad(),
                gamma.clone().detach().require_grad(),
                beta.clone().detach().require_grad(),
            );
            let xs: Tensor<4> = match shape.len() {
                4 => x.clone().reshape([shape[0], shape[1], shape[2], shape[3]]),
                3 => x.clone().reshape([shape[0], shape[1], shape[2], 1]),
                _ => x.clone().reshape([shape[0], shape[1], 1, 1]),
            };
            let (y, mean, var) = if fast {
                super::batch_norm_train(xs, g.clone(), b.clone(), 1e-3)
            } else {
                let o = burn::tensor::module::batch_norm_train(xs, g.clone(), b.clone(), 1e-3);
                (o.output, o.mean, o.variance)
            };
            let y: Tensor<1> = y.reshape([n]);
            let grads = (y.clone() * r.clone()).sum().backward();
            let v = |t: Tensor<1>| t.into_data().try_to_vec::<f32>().unwrap();
            [
                v(y),
                v(mean),
                v(var),
                grad(&x, &grads),
                grad(&g, &grads),
                grad(&b, &grads),
            ]
        };
        for (k, (ours, theirs)) in run(true).into_iter().zip(run(false)).enumerate() {
            let e = rel(ours, theirs);
            assert!(e < 1e-5, "{shape:?} result {k}: relative error {e}");
        }
    }
}

/// kiln's attention against Burn's operations: context and the gradients of the queries, keys
/// and values, with no mask, a mask per batch row and a mask per query (some rows fully
/// masked).
#[test]
pub(crate) fn attention_matches_burn_forward_and_gradients() {
    let device = Device::flex().autodiff();
    device.seed(23);
    for &(n, sq, sv, heads, kd, vd, mask_rows) in &[
        (2, 5, 5, 2, 4, 4, 0),
        (3, 4, 7, 3, 5, 2, 1),
        (2, 6, 6, 1, 8, 8, 6),
        (16, 28, 28, 4, 16, 16, 0),
        (1, 1, 1, 1, 1, 1, 0),
    ] {
        let q = Tensor::<3>::random([n, sq, heads * kd], Distribution::Normal(0.0, 1.0), &device);
        let k = Tensor::<3>::random([n, sv, heads * kd], Distribution::Normal(0.0, 1.0), &device);
        let v = Tensor::<3>::random([n, sv, heads * vd], Distribution::Normal(0.0, 1.0), &device);
        let mask = (mask_rows > 0).then(|| {
            let m: Vec<f32> = (0..n * mask_rows * sv)
                .map(|i| f32::from(i % 4 != 1 && i >= sv))
                .collect();
            Tensor::<3>::from_data(TensorData::new(m, [n, mask_rows, sv]), &device)
        });
        let r = Tensor::<3>::random(
            [n, sq, heads * vd],
            Distribution::Uniform(0.1, 1.0),
            &device,
        );
        let run = |fast: bool| {
            let (q, k, v) = (
                q.clone().detach().require_grad(),
                k.clone().detach().require_grad(),
                v.clone().detach().require_grad(),
            );
            let (qq, kk, vv, m) = (q.clone(), k.clone(), v.clone(), mask.clone());
            let y = if fast {
                super::attention(qq, kk, vv, heads, m)
            } else {
                super::attention_context(super::attention_weights(qq, kk, heads, m), vv)
            };
            let g = (y.clone() * r.clone()).sum().backward();
            [
                y.detach().into_data().try_to_vec::<f32>().unwrap(),
                grad(&q, &g),
                grad(&k, &g),
                grad(&v, &g),
            ]
        };
        for (i, (ours, theirs)) in run(true).into_iter().zip(run(false)).enumerate() {
            let e = rel(ours, theirs);
            assert!(
                e < 1e-5,
                "n={n} sq={sq} sv={sv} heads={heads} mask_rows={mask_rows} result {i}: {e}"
            );
        }
    }
}

/// kiln's layer normalization against Burn's `layer_norm`: output and the gradients of the
/// input, `gamma` and `beta`, on rows of several lengths and a permuted (strided) input.
#[test]
pub(crate) fn layer_norm_matches_burn_forward_and_gradients() {
    let device = Device::flex().autodiff();
    device.seed(29);
    for (shape, permuted) in [
        ([4, 7, 28, 64], false),
        ([2, 3, 5, 9], false),
        ([3, 4, 6, 5], true),
        ([1, 1, 1, 1], false),
        ([64, 1, 1, 3], false),
    ] {
        let x = Tensor::<4>::random(shape, Distribution::Normal(0.5, 2.0), &device);
        let f = if permuted { shape[1] } else { shape[3] };
        let gamma = Tensor::<1>::random([f], Distribution::Normal(1.0, 0.5), &device);
        let beta = Tensor::<1>::random([f], Distribution::Normal(0.0, 0.5), &device);
        let out_shape = if permuted {
            [shape[0], shape[2], shape[3], shape[1]]
        } else {
            shape
        };
        let r = Tensor::<4>::random(out_shape, Distribution::Uniform(0.1, 1.0), &device);
        let run = |fast: bool| {
            let (x, g, b) = (
                x.clone().detach().require_grad(),
                gamma.clone().detach().require_grad(),
                beta.clone().detach().require_grad(),
            );
            let input = if permuted {
                x.clone().permute([0, 2, 3, 1])
            } else {
                x.clone()
            };
            let y = if fast {
                super::layer_norm(input, g.clone(), b.clone(), 1e-3)
            } else {
                burn::tensor::module::layer_norm(input, g.clone(), Some(b.clone()), 1e-3)
            };
            let grads = (y.clone() * r.clone()).sum().backward();
            [
                y.detach().into_data().try_to_vec::<f32>().unwrap(),
                grad(&x, &grads),
                grad(&g, &grads),
                grad(&b, &grads),
            ]
        };
        for (k, (ours, theirs)) in run(true).into_iter().zip(run(false)).enumerate() {
            let e = rel(ours, theirs);
            assert!(e < 1e-5, "{shape:?} permuted={permuted} result {k}: {e}");
        }
    }
}

/// The rounding fused into [`super::conv2d`] and [`super::dense`] ([`Epilogue::round`]) gives
/// bit for bit what rounding after the operation gives ([`super::round_half`]): the output,
/// and the gradients, whose output gradient is rounded the same way.
#[test]
fn fused_rounding_equals_rounding_after_the_operation() {
    use burn::tensor::FloatDType;
    let device = Device::flex().autodiff();
    device.seed(17);
    let x = Tensor::<4>::random([3, 4, 9, 7], Distribution::Normal(0.0, 1.0), &device);
    let wc = Tensor::<4>::random([8, 4, 3, 3], Distribution::Normal(0.0, 0.3), &device);
    let xd = Tensor::<2>::random([33, 40], Distribution::Normal(0.0, 1.0), &device);
    let wd = Tensor::<2>::random([40, 20], Distribution::Normal(0.0, 0.3), &device);
    let bc = Tensor::<1>::random([8], Distribution::Normal(0.0, 0.3), &device);
    let bd = Tensor::<1>::random([20], Distribution::Normal(0.0, 0.3), &device);
    let pads = [(1, 1), (0, 2)];
    for dtype in [FloatDType::BF16, FloatDType::F16] {
        for relu in [false, true] {
            let fused = Epilogue::new(relu, Some(dtype));
            assert_eq!(fused.round, Some(dtype == FloatDType::BF16));
            let plain = Epilogue::with_relu(relu);
            let conv = |x, w, b, e| super::conv2d(x, w, Some(b), [1, 1], pads, e);
            assert_eq!(
                rounded_run(fused, [&x, &wc], &bc, conv),
                rounded_run(plain, [&x, &wc], &bc, |x, w, b, e| {
                    super::round_half(conv(x, w, b, e), dtype)
                }),
                "conv {dtype:?} relu={relu}"
            );
            let dense = |x, w, b, e| super::dense(x, w, Some(b), e);
            assert_eq!(
                rounded_run(fused, [&xd, &wd], &bd, dense),
                rounded_run(plain, [&xd, &wd], &bd, |x, w, b, e| {
                    super::round_half(dense(x, w, b, e), dtype)
                }),
                "dense {dtype:?} relu={relu}"
            );
        }
    }
}

/// `op(x, w, b, epilogue)` on tracked copies of its inputs, for
/// [`fused_rounding_equals_rounding_after_the_operation`]: the output and the gradients of `x`,
/// `w` and `b` under the loss `Σ y · cos(y)`.
fn rounded_run<const D: usize>(
    epilogue: Epilogue,
    [x, w]: [&Tensor<D>; 2],
    b: &Tensor<1>,
    op: impl Fn(Tensor<D>, Tensor<D>, Tensor<1>, Epilogue) -> Tensor<D>,
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let (x, w, b) = (
        x.clone().require_grad(),
        w.clone().require_grad(),
        b.clone().require_grad(),
    );
    let y = op(x.clone(), w.clone(), b.clone(), epilogue);
    let g = (y.clone() * y.clone().detach().cos()).sum().backward();
    let y = y.detach().into_data().try_to_vec::<f32>().unwrap();
    (y, grad(&x, &g), grad(&w, &g), grad(&b, &g))
}
