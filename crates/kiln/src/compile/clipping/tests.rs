//! Clipping against TensorFlow / Keras 3 answers, computed once by
//! `tests/reference/gradient_reference.py` (TensorFlow 2.21, Keras 3.15) and pasted here.

// The reference values keep all the digits Python printed (float32 values as float64 text).
#![allow(clippy::excessive_precision)]

use super::*;

/// Three parameters of ranks 2, 1 and 1, like a small model's kernel, bias and vector.
#[derive(Module, Debug)]
struct Three {
    kernel: Param<Tensor<2>>,
    bias: Param<Tensor<1>>,
    vector: Param<Tensor<1>>,
}

const KERNEL: [f32; 6] = [0.5, -1.25, 2.0, 0.0, 3.5, -0.75];
const BIAS: [f32; 3] = [0.1, -0.2, 4.0];
const VECTOR: [f32; 2] = [-2.5, 1.5];

fn module(device: &Device) -> Three {
    Three {
        kernel: Param::from_tensor(Tensor::zeros([2, 3], device)),
        bias: Param::from_tensor(Tensor::zeros([3], device)),
        vector: Param::from_tensor(Tensor::zeros([2], device)),
    }
}

fn grads(m: &Three, device: &Device, kernel: [f32; 6], bias: [f32; 3]) -> GradientsParams {
    let mut g = GradientsParams::new();
    g.register(
        m.kernel.id,
        Tensor::<2>::from_data(TensorData::new(kernel.to_vec(), [2, 3]), device),
    );
    g.register(
        m.bias.id,
        Tensor::<1>::from_data(TensorData::new(bias.to_vec(), [3]), device),
    );
    g.register(
        m.vector.id,
        Tensor::<1>::from_data(TensorData::new(VECTOR.to_vec(), [2]), device),
    );
    g
}

fn values(m: &Three, g: &GradientsParams) -> [Vec<f32>; 3] {
    let read = |t: TensorData| t.try_to_vec::<f32>().unwrap();
    [
        read(g.get::<2>(m.kernel.id).unwrap().into_data()),
        read(g.get::<1>(m.bias.id).unwrap().into_data()),
        read(g.get::<1>(m.vector.id).unwrap().into_data()),
    ]
}

fn assert_close(got: &[Vec<f32>; 3], want: [&[f64]; 3]) {
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.len(), w.len());
        for (a, e) in g.iter().zip(w) {
            assert!(
                (*a as f64 - e).abs() <= 1e-6 * (1.0 + e.abs()),
                "{got:?} vs {want:?}"
            );
        }
    }
}

fn clipped(rule: Clipping, kernel: [f32; 6], bias: [f32; 3]) -> [Vec<f32>; 3] {
    let device = Device::flex();
    let m = module(&device);
    let g = rule.apply(&m, grads(&m, &device, kernel, bias));
    values(&m, &g)
}

#[test]
fn global_clipnorm_matches_tf_clip_by_global_norm() {
    let device = Device::flex();
    let m = module(&device);
    let g = grads(&m, &device, KERNEL, BIAS);
    // tf.clip_by_global_norm(grads, 1.0) -> global_norm 6.570768356323242.
    let norm = global_norm(&m, &g).unwrap().into_scalar::<f32>();
    assert!((norm as f64 - 6.570768356323242).abs() < 1e-6, "{norm}");
    assert_close(
        &clipped(Clipping::GlobalNorm(1.0), KERNEL, BIAS),
        [
            &[
                0.0760946050286293,
                -0.19023650884628296,
                0.3043784201145172,
                0.0,
                0.5326622128486633,
                -0.11414191126823425,
            ],
            &[
                0.01521892100572586,
                -0.03043784201145172,
                0.6087568402290344,
            ],
            &[-0.3804730176925659, 0.2282838225364685],
        ],
    );
    // Keras SGD(global_clipnorm=2.0)._clip_gradients(grads).
    assert_close(
        &clipped(Clipping::GlobalNorm(2.0), KERNEL, BIAS),
        [
            &[
                0.1521892100572586,
                -0.3804730176925659,
                0.6087568402290344,
                0.0,
                1.0653244256973267,
                -0.2282838225364685,
            ],
            &[
                0.03043784201145172,
                -0.06087568402290344,
                1.2175136804580688,
            ],
            &[-0.7609460353851318, 0.456567645072937],
        ],
    );
}

#[test]
fn global_clipnorm_under_the_norm_and_on_zeros_changes_nothing() {
    // tf.clip_by_global_norm(grads, 100.0): the gradients unchanged.
    let got = clipped(Clipping::GlobalNorm(100.0), KERNEL, BIAS);
    assert_eq!(got, [KERNEL.to_vec(), BIAS.to_vec(), VECTOR.to_vec()]);
    // tf.clip_by_global_norm(zeros, 1.0): global_norm 0.0, zeros (no 0/0).
    let device = Device::flex();
    let m = module(&device);
    let mut g = GradientsParams::new();
    g.register(m.kernel.id, Tensor::<2>::zeros([2, 3], &device));
    g.register(m.bias.id, Tensor::<1>::zeros([3], &device));
    assert_eq!(global_norm(&m, &g).unwrap().into_scalar::<f32>(), 0.0);
    let g = Clipping::GlobalNorm(1.0).apply(&m, g);
    assert_eq!(
        g.get::<2>(m.kernel.id)
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
        vec![0.0; 6]
    );
    assert_eq!(
        g.get::<1>(m.bias.id)
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
        vec![0.0; 3]
    );
    // No gradients at all: nothing to clip, no norm.
    assert!(global_norm(&m, &GradientsParams::new()).is_none());
}

#[test]
fn global_clipnorm_turns_an_infinite_gradient_into_nan_like_tf() {
    // tf.clip_by_global_norm with an inf in the bias: global_norm inf, every value NaN.
    let mut bias = BIAS;
    bias[0] = f32::INFINITY;
    let got = clipped(Clipping::GlobalNorm(1.0), KERNEL, bias);
    assert!(got.iter().flatten().all(|v| v.is_nan()), "{got:?}");
}

#[test]
fn clipnorm_matches_keras_per_tensor() {
    // Keras SGD(clipnorm=1.0)._clip_gradients(grads).
    assert_close(
        &clipped(Clipping::Norm(1.0), KERNEL, BIAS),
        [
            &[
                0.11585689336061478,
                -0.28964221477508545,
                0.4634275734424591,
                0.0,
                0.810998260974884,
                -0.17378534376621246,
            ],
            &[
                0.02496102824807167,
                -0.04992205649614334,
                0.9984411597251892,
            ],
            &[-0.857492983341217, 0.5144957900047302],
        ],
    );
    // clipnorm=3.0: the [2] vector (norm 2.915) is under the limit and unchanged.
    assert_close(
        &clipped(Clipping::Norm(3.0), KERNEL, BIAS),
        [
            &[
                0.3475706875324249,
                -0.8689267039299011,
                1.3902827501296997,
                0.0,
                2.4329946041107178,
                -0.5213559865951538,
            ],
            &[0.07488308846950531, -0.14976617693901062, 2.995323419570923],
            &[-2.5, 1.5],
        ],
    );
    // clipnorm=1.0 on zero gradients: zeros.
    let got = clipped(Clipping::Norm(1.0), [0.0; 6], [0.0; 3]);
    assert_eq!(got[0], vec![0.0; 6]);
    assert_eq!(got[1], vec![0.0; 3]);
}

#[test]
fn clipvalue_matches_keras() {
    // Keras SGD(clipvalue=1.0)._clip_gradients(grads).
    assert_close(
        &clipped(Clipping::Value(1.0), KERNEL, BIAS),
        [
            &[0.5, -1.0, 1.0, 0.0, 1.0, -0.75],
            &[0.10000000149011612, -0.20000000298023224, 1.0],
            &[-1.0, 1.0],
        ],
    );
}
