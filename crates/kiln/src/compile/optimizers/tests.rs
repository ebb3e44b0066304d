//! Each optimizer against Keras 3.15: from fixed weights, three fixed gradients, with
//! non-default arguments; the weights after every step, printed by
//! `tests/reference/optimizers_reference.py`.

// The Keras answers keep all the digits Python printed (float32 values as float64 text).
#![allow(clippy::excessive_precision)]

use burn::optim::Optimizer;
use burn::prelude::*;

use super::*;
use crate::compile::KerasAdam;

const W0: [f32; 4] = [0.5, -1.25, 2.0, 0.0];
const GRADS: [[f32; 4]; 3] = [
    [0.1, -0.2, 0.3, 0.0],
    [-0.05, 0.4, 0.1, 1e-3],
    [0.2, 0.2, -0.3, -2.0],
];

fn tensor(values: [f32; 4]) -> Tensor<2> {
    Tensor::from_data(TensorData::new(values.to_vec(), [2, 2]), &Device::flex())
}

/// Runs `opt` for the three gradients at rate `lr` and compares the weights after each step
/// with Keras' to 1e-6 relative to the weight plus the rate: a weight that steps cancelled
/// (Nadam's last, 0.00135 after steps of ±0.02) keeps float32's error of the steps, not of
/// itself. Returns the state.
fn assert_keras<O: Optimizer>(opt: O, lr: f64, keras: &[[f32; 4]; 3]) -> O::State<2> {
    let (mut w, mut state) = (tensor(W0), None);
    for (step, (g, want)) in GRADS.iter().zip(keras).enumerate() {
        (w, state) = opt.step(lr, w, tensor(*g), state);
        let got = w.clone().into_data().try_to_vec::<f32>().unwrap();
        for (a, e) in got.iter().zip(want) {
            assert!(
                f64::from((a - e).abs()) <= 1e-6 * (f64::from(e.abs()) + lr),
                "step {}: {got:?} vs Keras {want:?}",
                step + 1
            );
        }
    }
    state.unwrap()
}

const RMSPROP_CENTERED_MOMENTUM: [[f32; 4]; 3] = [
    [
        0.4750078022480011,
        -1.2250019311904907,
        1.9750008583068848,
        0.0,
    ],
    [
        0.4735146760940552,
        -1.2335563898086548,
        1.9532865285873413,
        -0.00928476732224226,
    ],
    [
        0.4499373435974121,
        -1.2489149570465088,
        1.9594436883926392,
        0.011070325039327145,
    ],
];

const RMSPROP_PLAIN: [[f32; 4]; 3] = [
    [
        0.48174288868904114,
        -1.2317426204681396,
        1.9817426204681396,
        0.0,
    ],
    [
        0.49110859632492065,
        -1.2485857009887695,
        1.9749852418899536,
        -0.015811387449502945,
    ],
    [
        0.47420254349708557,
        -1.2574005126953125,
        1.9895665645599365,
        0.002446027472615242,
    ],
];

const ADAGRAD: [[f32; 4]; 3] = [
    [
        0.48908913135528564,
        -1.2295876741409302,
        1.9721457958221436,
        0.0,
    ],
    [
        0.4945123791694641,
        -1.2612104415893555,
        1.9630171060562134,
        -0.00011180284491274506,
    ],
    [
        0.47461166977882385,
        -1.276286005973816,
        1.9870363473892212,
        0.04868319258093834,
    ],
];

const ADADELTA: [[f32; 4]; 3] = [
    [
        0.496839314699173,
        -1.246838092803955,
        1.996837854385376,
        0.0,
    ],
    [
        0.49892303347587585,
        -1.2508783340454102,
        1.995355486869812,
        -0.0009534627315588295,
    ],
    [
        0.4946180582046509,
        -1.2534334659576416,
        1.998686671257019,
        0.0023494239430874586,
    ],
];

const ADAMAX: [[f32; 4]; 3] = [
    [
        0.48000019788742065,
        -1.2300001382827759,
        1.9800000190734863,
        0.0,
    ],
    [
        0.476633220911026,
        -1.2366667985916138,
        1.9672802686691284,
        -0.011100011877715588,
    ],
    [
        0.4674529433250427,
        -1.2447806596755981,
        1.9680452346801758,
        -0.0029065730050206184,
    ],
];

const NADAM: [[f32; 4]; 3] = [
    [
        0.47827595472335815,
        -1.2282758951187134,
        1.9782757759094238,
        0.0,
    ],
    [
        0.4861837923526764,
        -1.2465771436691284,
        1.969685435295105,
        -0.021353943273425102,
    ],
    [
        0.46597400307655334,
        -1.2569588422775269,
        1.9835476875305176,
        0.0013542361557483673,
    ],
];

const LION: [[f32; 4]; 3] = [
    [
        0.49000000953674316,
        -1.2400000095367432,
        1.9900000095367432,
        0.0,
    ],
    [0.5, -1.25, 1.9800000190734863, -0.009999999776482582],
    [
        0.49000000953674316,
        -1.2599999904632568,
        1.9900000095367432,
        0.0,
    ],
];

const ADAM_AMSGRAD: [[f32; 4]; 3] = [
    [
        0.49000003933906555,
        -1.2400000095367432,
        1.9900000095367432,
        0.0,
    ],
    [
        0.4872940182685852,
        -1.243605136871338,
        1.9811017513275146,
        -0.007252467330545187,
    ],
    [
        0.48090511560440063,
        -1.2488023042678833,
        1.9806182384490967,
        -0.0011806362308561802,
    ],
];

const ADAMW_AMSGRAD: [[f32; 4]; 3] = [
    [
        0.4895000457763672,
        -1.2387499809265137,
        1.9880000352859497,
        0.0,
    ],
    [
        0.48630452156066895,
        -1.2411164045333862,
        1.9771137237548828,
        -0.007252467330545187,
    ],
    [
        0.47942930459976196,
        -1.2450724840164185,
        1.9746531248092651,
        -0.0011733835563063622,
    ],
];

#[test]
fn rmsprop_centered_momentum_matches_keras() {
    assert_keras(
        KerasRmsProp {
            rho: 0.8,
            momentum: 0.5,
            epsilon: 1e-6,
            centered: true,
        },
        0.01,
        &RMSPROP_CENTERED_MOMENTUM,
    );
}

#[test]
fn rmsprop_plain_matches_keras() {
    assert_keras(
        KerasRmsProp {
            rho: 0.7,
            momentum: 0.0,
            epsilon: 1e-7,
            centered: false,
        },
        0.01,
        &RMSPROP_PLAIN,
    );
}

#[test]
fn adagrad_matches_keras() {
    assert_keras(
        KerasAdagrad {
            initial_accumulator_value: 0.2,
            epsilon: 1e-6,
        },
        0.05,
        &ADAGRAD,
    );
}

#[test]
fn adadelta_matches_keras() {
    assert_keras(
        KerasAdadelta {
            rho: 0.9,
            epsilon: 1e-6,
        },
        1.0,
        &ADADELTA,
    );
}

#[test]
fn adamax_matches_keras() {
    assert_keras(
        KerasAdamax {
            beta_1: 0.8,
            beta_2: 0.99,
            epsilon: 1e-6,
        },
        0.02,
        &ADAMAX,
    );
}

#[test]
fn nadam_matches_keras() {
    assert_keras(
        KerasNadam {
            beta_1: 0.85,
            beta_2: 0.99,
            epsilon: 1e-6,
        },
        0.02,
        &NADAM,
    );
}

#[test]
fn lion_matches_keras() {
    assert_keras(
        KerasLion {
            beta_1: 0.8,
            beta_2: 0.95,
        },
        0.01,
        &LION,
    );
}

#[test]
fn adam_amsgrad_matches_keras() {
    assert_keras(
        KerasAdam {
            beta_1: 0.9,
            beta_2: 0.9,
            epsilon: 1e-7,
            weight_decay: 0.0,
            amsgrad: true,
        },
        0.01,
        &ADAM_AMSGRAD,
    );
}

#[test]
fn adamw_amsgrad_matches_keras() {
    assert_keras(
        KerasAdam {
            beta_1: 0.9,
            beta_2: 0.9,
            epsilon: 1e-7,
            weight_decay: 0.1,
            amsgrad: true,
        },
        0.01,
        &ADAMW_AMSGRAD,
    );
}

#[test]
fn slot_state_records_and_loads_only_its_present_slots() {
    use burn::optim::{RecordState, StateSink, StateSource};
    let rms = KerasRmsProp {
        rho: 0.8,
        momentum: 0.5,
        epsilon: 1e-6,
        centered: true,
    };
    let state = assert_keras(rms, 0.01, &RMSPROP_CENTERED_MOMENTUM);
    let mut sink = StateSink::default();
    state.state_flatten("p", &mut sink);
    let names: Vec<&str> = sink.tensors.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["p.first", "p.second", "p.third"]);
    let mut src = StateSource::new(Default::default());
    for (name, data) in sink.tensors {
        src.insert_tensor(name, data);
    }
    let back = SlotState::<2>::state_unflatten("p", &mut src, &Device::flex()).unwrap();
    let values = |t: Tensor<2>| t.into_data().try_to_vec::<f32>().unwrap();
    assert_eq!(values(back.first), values(state.first));
    assert_eq!(values(back.third.unwrap()), values(state.third.unwrap()));
    let plain = SlotState {
        first: tensor(W0),
        second: None,
        third: None,
    };
    let mut sink = StateSink::default();
    plain.state_flatten("q", &mut sink);
    assert_eq!(sink.tensors.len(), 1);
}

#[test]
fn nadam_u_product_is_the_running_product_of_the_momentum_schedule() {
    let nadam = KerasNadam {
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: 1e-7,
    };
    let mut product = 1.0;
    for t in 1..=1500 {
        product *= 0.9 * (1.0 - 0.5 * 0.96f64.powi(t));
        let got = nadam.u_product(t as usize);
        assert!(
            (got - product).abs() <= 1e-12 * product,
            "t = {t}: {got} vs {product}"
        );
    }
}
