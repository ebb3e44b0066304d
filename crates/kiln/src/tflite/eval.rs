//! A float32 reference run of a [`TfliteGraph`] on a batch, for calibration: every tensor's
//! values as TFLite's builtin kernels define them (NHWC; `SAME` padding puts the extra row and
//! column at the end; average pooling divides by the window's cells inside the image).

use super::{Options, Padding, TensorDef, TfliteGraph, op};

/// A tensor's batch-first shape with the batch axis `n`.
fn dims(t: &TensorDef, n: usize) -> Vec<usize> {
    let mut d: Vec<usize> = t.shape.iter().map(|&x| x.max(0) as usize).collect();
    if t.batched {
        d[0] = n;
    }
    d
}

/// `(output size, padding before)` of a window of `k` with stride `s` over `n` cells.
fn window(n: usize, k: usize, s: usize, padding: Padding) -> (usize, usize) {
    match padding {
        Padding::Valid => ((n.saturating_sub(k)) / s + 1, 0),
        Padding::Same => {
            let out = n.div_ceil(s);
            let total = ((out - 1) * s + k).saturating_sub(n);
            (out, total / 2)
        }
    }
}

/// Runs `g` on `inputs` (`(tensor index, values)`, batch `n`); every tensor's values, `None` for
/// tensors no operator wrote (int32 shapes).
///
/// # Errors
/// An operator kiln's reference run does not have.
pub fn run(
    g: &TfliteGraph,
    inputs: &[(i32, Vec<f32>)],
    n: usize,
) -> Result<Vec<Option<Vec<f32>>>, String> {
    let mut v: Vec<Option<Vec<f32>>> = g
        .tensors
        .iter()
        .map(|t| (t.dtype == 0 && t.data.is_some()).then(|| t.f32_values()))
        .collect();
    for (i, x) in inputs {
        v[*i as usize] = Some(x.clone());
    }
    for o in &g.ops {
        let get = |k: usize| v[o.inputs[k] as usize].clone().unwrap_or_default();
        let shape = |k: usize| dims(&g.tensors[o.inputs[k] as usize], n);
        let out_shape = dims(&g.tensors[o.outputs[0] as usize], n);
        let y = match (o.code, &o.options) {
            (
                op::CONV_2D,
                Options::Conv2D {
                    padding,
                    strides,
                    act,
                },
            ) => {
                let y = conv(
                    &get(0),
                    &shape(0),
                    &get(1),
                    &shape(1),
                    &get(2),
                    *padding,
                    *strides,
                );
                relu_if(y, *act)
            }
            (op::FULLY_CONNECTED, Options::FullyConnected { act, .. }) => {
                let w_shape = shape(1);
                let (units, cin) = (w_shape[0], w_shape[1]);
                let (x, w) = (get(0), get(1));
                let b = (o.inputs[2] >= 0).then(|| get(2));
                let rows = x.len() / cin;
                let mut y = vec![0f32; rows * units];
                for r in 0..rows {
                    for u in 0..units {
                        let dot: f32 = (0..cin).map(|c| x[r * cin + c] * w[u * cin + c]).sum();
                        y[r * units + u] = dot + b.as_ref().map_or(0.0, |b| b[u]);
                    }
                }
                relu_if(y, *act)
            }
            (
                op::MAX_POOL_2D | op::AVERAGE_POOL_2D,
                Options::Pool2D {
                    padding,
                    strides,
                    filter,
                },
            ) => pool(
                &get(0),
                &shape(0),
                *padding,
                *strides,
                *filter,
                o.code == op::MAX_POOL_2D,
            ),
            (op::RESHAPE, _) => get(0),
            (op::RELU, _) => get(0).iter().map(|x| x.max(0.0)).collect(),
            (op::LOGISTIC, _) => get(0).iter().map(|x| 1.0 / (1.0 + (-x).exp())).collect(),
            (op::TANH, _) => get(0).iter().map(|x| x.tanh()).collect(),
            (op::SOFTMAX, _) => softmax(&get(0), *out_shape.last().unwrap_or(&1)),
            (op::ADD | op::MUL, _) => {
                let (a, b) = (get(0), get(1));
                a.iter()
                    .enumerate()
                    .map(|(i, x)| {
                        let y = b[i % b.len()];
                        if o.code == op::ADD { x + y } else { x * y }
                    })
                    .collect()
            }
            (code, _) => return Err(format!("operator {code} has no reference run in kiln")),
        };
        v[o.outputs[0] as usize] = Some(y);
    }
    Ok(v)
}

fn relu_if(y: Vec<f32>, act: super::Fused) -> Vec<f32> {
    match act {
        super::Fused::Relu => y.into_iter().map(|x| x.max(0.0)).collect(),
        super::Fused::None => y,
    }
}

fn softmax(x: &[f32], units: usize) -> Vec<f32> {
    x.chunks(units.max(1))
        .flat_map(|row| {
            let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let e: Vec<f32> = row.iter().map(|v| (v - m).exp()).collect();
            let s: f32 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect()
}

/// NHWC convolution with an OHWI filter.
fn conv(
    x: &[f32],
    xs: &[usize],
    w: &[f32],
    ws: &[usize],
    b: &[f32],
    padding: Padding,
    strides: [usize; 2],
) -> Vec<f32> {
    let (n, h, wd, c) = (xs[0], xs[1], xs[2], xs[3]);
    let (f, kh, kw) = (ws[0], ws[1], ws[2]);
    let (oh, ph) = window(h, kh, strides[0], padding);
    let (ow, pw) = window(wd, kw, strides[1], padding);
    let mut y = vec![0f32; n * oh * ow * f];
    for b_ in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for o in 0..f {
                    let mut acc = b.get(o).copied().unwrap_or(0.0);
                    for ky in 0..kh {
                        let iy = (oy * strides[0] + ky) as isize - ph as isize;
                        if iy < 0 || iy >= h as isize {
                            continue;
                        }
                        for kx in 0..kw {
                            let ix = (ox * strides[1] + kx) as isize - pw as isize;
                            if ix < 0 || ix >= wd as isize {
                                continue;
                            }
                            let xo = ((b_ * h + iy as usize) * wd + ix as usize) * c;
                            let wo = ((o * kh + ky) * kw + kx) * c;
                            acc += (0..c).map(|ci| x[xo + ci] * w[wo + ci]).sum::<f32>();
                        }
                    }
                    y[((b_ * oh + oy) * ow + ox) * f + o] = acc;
                }
            }
        }
    }
    y
}

/// NHWC max or average pooling (the average over the window's cells inside the image).
fn pool(
    x: &[f32],
    xs: &[usize],
    padding: Padding,
    strides: [usize; 2],
    filter: [usize; 2],
    max: bool,
) -> Vec<f32> {
    let (n, h, wd, c) = (xs[0], xs[1], xs[2], xs[3]);
    let (oh, ph) = window(h, filter[0], strides[0], padding);
    let (ow, pw) = window(wd, filter[1], strides[1], padding);
    let mut y = Vec::with_capacity(n * oh * ow * c);
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for ch in 0..c {
                    let (mut acc, mut count) = (if max { f32::NEG_INFINITY } else { 0.0 }, 0);
                    for ky in 0..filter[0] {
                        for kx in 0..filter[1] {
                            let iy = (oy * strides[0] + ky) as isize - ph as isize;
                            let ix = (ox * strides[1] + kx) as isize - pw as isize;
                            if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                continue;
                            }
                            let v = x[((b * h + iy as usize) * wd + ix as usize) * c + ch];
                            acc = if max { acc.max(v) } else { acc + v };
                            count += 1;
                        }
                    }
                    y.push(if max { acc } else { acc / count.max(1) as f32 });
                }
            }
        }
    }
    y
}
