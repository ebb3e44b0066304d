//! Every built-in loss's value and gradient w.r.t. the predictions against Keras 3.15 on fixed
//! inputs (`tests/reference/losses_reference.py`: the Keras class with its default reduction
//! `sum_over_batch_size`, the gradient by `tf.GradientTape`), and its bad arguments.

use burn::prelude::*;

use super::*;

#[allow(clippy::excessive_precision)]
mod keras {
    pub const PROBS: [f32; 12] = [
        0.20000000298023224,
        0.699999988079071,
        0.10000000149011612,
        0.5,
        0.30000001192092896,
        0.20000000298023224,
        0.05000000074505806,
        0.15000000596046448,
        0.800000011920929,
        0.4000000059604645,
        0.4000000059604645,
        0.20000000298023224,
    ];
    pub const LOGITS: [f32; 12] = [
        2.0,
        -1.0,
        0.5,
        0.10000000149011612,
        0.20000000298023224,
        0.30000001192092896,
        -1.5,
        3.0,
        0.0,
        1.0,
        1.0,
        -2.0,
    ];
    pub const ONEHOT: [f32; 12] = [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0];
    pub const BINARY: [f32; 12] = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0];
    pub const SIGNS: [f32; 12] = [
        1.0, -1.0, 1.0, -1.0, -1.0, 1.0, 1.0, 1.0, -1.0, -1.0, 1.0, -1.0,
    ];
    pub const SOFT: [f32; 12] = [
        0.10000000149011612,
        0.6000000238418579,
        0.30000001192092896,
        0.30000001192092896,
        0.30000001192092896,
        0.4000000059604645,
        0.05000000074505806,
        0.05000000074505806,
        0.8999999761581421,
        0.5,
        0.25,
        0.25,
    ];
    pub const REG_Y: [f32; 12] = [
        1.0,
        -0.5,
        2.0,
        0.30000001192092896,
        0.05000000074505806,
        -1.2000000476837158,
        2.5,
        1.0,
        0.4000000059604645,
        -0.699999988079071,
        0.8999999761581421,
        1.5,
    ];
    pub const REG_P: [f32; 12] = [
        0.800000011920929,
        0.10000000149011612,
        2.5999999046325684,
        0.20000000298023224,
        0.5,
        -3.0,
        0.5,
        1.100000023841858,
        0.699999988079071,
        -0.20000000298023224,
        2.4000000953674316,
        1.4500000476837158,
    ];
    pub const POS_Y: [f32; 12] = [
        1.0,
        0.0,
        2.0,
        0.5,
        3.0,
        1.0,
        4.0,
        0.20000000298023224,
        0.0,
        1.5,
        1.0,
        2.5,
    ];
    pub const POS_P: [f32; 12] = [
        0.800000011920929,
        0.30000001192092896,
        2.5,
        0.6000000238418579,
        2.0,
        1.399999976158142,
        3.0,
        0.10000000149011612,
        0.5,
        1.2000000476837158,
        1.100000023841858,
        2.0,
    ];
    pub const HINGE_P: [f32; 12] = [
        0.30000001192092896,
        -0.800000011920929,
        1.7000000476837158,
        -0.4000000059604645,
        0.6000000238418579,
        0.20000000298023224,
        2.0,
        0.44999998807907104,
        -1.100000023841858,
        -0.30000001192092896,
        0.8999999761581421,
        0.15000000596046448,
    ];
    pub struct Case {
        pub loss: &'static str,
        pub args: &'static str,
        pub y: &'static [f32; 12],
        pub p: &'static [f32; 12],
        pub rows: usize,
        pub value: f64,
        pub grad: &'static [f32],
    }
    pub const CASES: &[Case] = &[
        Case {
            loss: "mae",
            args: "",
            y: &REG_Y,
            p: &REG_P,
            rows: 4,
            value: 0.6833332777023315,
            grad: &[
                -0.0833333358168602,
                0.0833333358168602,
                0.0833333358168602,
                -0.0833333358168602,
                0.0833333358168602,
                -0.0833333358168602,
                -0.0833333358168602,
                0.0833333358168602,
                0.0833333358168602,
                0.0833333358168602,
                0.0833333358168602,
                -0.0833333358168602,
            ],
        },
        Case {
            loss: "mse",
            args: "",
            y: &REG_Y,
            p: &REG_P,
            rows: 4,
            value: 0.9012500643730164,
            grad: &[
                -0.03333333134651184,
                0.10000000894069672,
                0.09999998658895493,
                -0.01666666939854622,
                0.07500000298023224,
                -0.30000001192092896,
                -0.3333333432674408,
                0.016666671261191368,
                0.04999999701976776,
                0.0833333358168602,
                0.2500000298023224,
                -0.008333325386047363,
            ],
        },
        Case {
            loss: "mape",
            args: "",
            y: &REG_Y,
            p: &REG_P,
            rows: 4,
            value: 138.3134765625,
            grad: &[
                -8.333333015441895,
                16.66666603088379,
                4.166666507720947,
                -27.777774810791016,
                166.66665649414062,
                -6.944443702697754,
                -3.3333332538604736,
                8.333333015441895,
                20.833332061767578,
                11.90476131439209,
                9.259259223937988,
                -5.55555534362793,
            ],
        },
        Case {
            loss: "msle",
            args: "",
            y: &POS_Y,
            p: &POS_P,
            rows: 4,
            value: 0.0406763069331646,
            grad: &[
                -0.009755603037774563,
                0.033636424690485,
                0.0073405103757977486,
                0.006722765043377876,
                -0.015982337296009064,
                0.01266122329980135,
                -0.009297648444771767,
                -0.01318354345858097,
                0.04505166411399841,
                -0.009684345684945583,
                0.0038722301833331585,
                -0.008563922718167305,
            ],
        },
        Case {
            loss: "huber",
            args: "",
            y: &REG_Y,
            p: &REG_P,
            rows: 4,
            value: 0.37187501788139343,
            grad: &[
                -0.01666666567325592,
                0.05000000447034836,
                0.04999999329447746,
                -0.00833333469927311,
                0.03750000149011612,
                -0.0833333358168602,
                -0.0833333358168602,
                0.008333335630595684,
                0.02499999850988388,
                0.0416666679084301,
                0.0833333358168602,
                -0.004166662693023682,
            ],
        },
        Case {
            loss: "huber",
            args: "delta = 0.5",
            y: &REG_Y,
            p: &REG_P,
            rows: 4,
            value: 0.24395832419395447,
            grad: &[
                -0.01666666567325592,
                0.0416666679084301,
                0.0416666679084301,
                -0.00833333469927311,
                0.03750000149011612,
                -0.0416666679084301,
                -0.0416666679084301,
                0.008333335630595684,
                0.02499999850988388,
                0.0416666679084301,
                0.0416666679084301,
                -0.004166662693023682,
            ],
        },
        Case {
            loss: "log_cosh",
            args: "",
            y: &REG_Y,
            p: &REG_P,
            rows: 4,
            value: 0.32900717854499817,
            grad: &[
                -0.01644795387983322,
                0.04475413262844086,
                0.04475412517786026,
                -0.008305661380290985,
                0.03515825420618057,
                -0.07890050858259201,
                -0.08033562451601028,
                0.008305676281452179,
                0.024276047945022583,
                0.03850976377725601,
                0.0754290223121643,
                -0.004163198173046112,
            ],
        },
        Case {
            loss: "kl_divergence",
            args: "",
            y: &SOFT,
            p: &PROBS,
            rows: 4,
            value: 0.09818016737699509,
            grad: &[
                -0.1249999925494194,
                -0.2142857164144516,
                -0.7500000596046448,
                -0.15000000596046448,
                -0.2499999850988388,
                -0.4999999701976776,
                -0.2499999850988388,
                -0.0833333432674408,
                -0.28125,
                -0.3125,
                -0.15625,
                -0.3125,
            ],
        },
        Case {
            loss: "poisson",
            args: "",
            y: &POS_Y,
            p: &POS_P,
            rows: 4,
            value: 0.4745389521121979,
            grad: &[
                -0.020833320915699005,
                0.0833333358168602,
                0.016666673123836517,
                0.013888902962207794,
                -0.041666656732559204,
                0.023809533566236496,
                -0.027777783572673798,
                -0.08333318680524826,
                0.0833333358168602,
                -0.020833313465118408,
                0.007575765252113342,
                -0.0208333358168602,
            ],
        },
        Case {
            loss: "hinge",
            args: "",
            y: &BINARY,
            p: &HINGE_P,
            rows: 4,
            value: 0.5333333611488342,
            grad: &[
                -0.0833333358168602,
                0.0833333358168602,
                -0.0,
                0.0833333358168602,
                0.0833333358168602,
                -0.0833333358168602,
                -0.0,
                -0.0833333358168602,
                0.0,
                0.0833333358168602,
                -0.0833333358168602,
                0.0833333358168602,
            ],
        },
        Case {
            loss: "hinge",
            args: "",
            y: &SIGNS,
            p: &HINGE_P,
            rows: 4,
            value: 0.5333333611488342,
            grad: &[
                -0.0833333358168602,
                0.0833333358168602,
                -0.0,
                0.0833333358168602,
                0.0833333358168602,
                -0.0833333358168602,
                -0.0,
                -0.0833333358168602,
                0.0,
                0.0833333358168602,
                -0.0833333358168602,
                0.0833333358168602,
            ],
        },
        Case {
            loss: "squared_hinge",
            args: "",
            y: &BINARY,
            p: &HINGE_P,
            rows: 4,
            value: 0.5179166793823242,
            grad: &[
                -0.11666666716337204,
                0.03333333134651184,
                -0.0,
                0.10000000894069672,
                0.2666666805744171,
                -0.13333334028720856,
                -0.0,
                -0.09166666865348816,
                0.0,
                0.11666666716337204,
                -0.016666671261191368,
                0.19166666269302368,
            ],
        },
        Case {
            loss: "categorical_hinge",
            args: "",
            y: &ONEHOT,
            p: &HINGE_P,
            rows: 4,
            value: 2.4625000953674316,
            grad: &[
                0.0, -0.25, 0.25, -0.25, 0.25, 0.0, 0.25, 0.0, -0.25, 0.0, -0.25, 0.25,
            ],
        },
        Case {
            loss: "cosine_similarity",
            args: "",
            y: &REG_Y,
            p: &REG_P,
            rows: 4,
            value: -0.8668361902236938,
            grad: &[
                -0.014334380626678467,
                0.023259559646248817,
                0.003515973687171936,
                -0.014620762318372726,
                0.009828006848692894,
                0.00066327303647995,
                -0.12006846070289612,
                0.0318046435713768,
                0.035784441977739334,
                0.027694452553987503,
                0.021667879074811935,
                -0.03204415738582611,
            ],
        },
        Case {
            loss: "categorical_crossentropy",
            args: "from_logits = true, label_smoothing = 0.1",
            y: &ONEHOT,
            p: &LOGITS,
            rows: 4,
            value: 2.0275261402130127,
            grad: &[
                0.18806591629981995,
                -0.22355519235134125,
                0.035489264875650406,
                -0.15818093717098236,
                0.07472290843725204,
                0.08345801383256912,
                -0.005715500563383102,
                0.22731651365756989,
                -0.22160102427005768,
                0.11363055557012558,
                -0.11136944591999054,
                -0.0022611096501350403,
            ],
        },
        Case {
            loss: "categorical_crossentropy",
            args: "label_smoothing = 0.2",
            y: &ONEHOT,
            p: &PROBS,
            rows: 4,
            value: 0.7100725173950195,
            grad: &[
                0.1666666567325592,
                -0.059523820877075195,
                0.0833333283662796,
                -0.18333332240581512,
                0.1944444328546524,
                0.1666666567325592,
                -0.08333331346511841,
                0.13888892531394958,
                -0.020833313465118408,
                0.208333358168602,
                -0.2916666567325592,
                0.1666666865348816,
            ],
        },
        Case {
            loss: "binary_crossentropy",
            args: "label_smoothing = 0.2",
            y: &BINARY,
            p: &PROBS,
            rows: 4,
            value: 1.2469100952148438,
            grad: &[
                -0.3645833432674408,
                0.2380952388048172,
                -0.7407407164573669,
                0.13333332538604736,
                0.0793650895357132,
                -0.3645833432674408,
                -1.4912281036376953,
                -0.4901960790157318,
                0.36458340287208557,
                0.1041666641831398,
                -0.173611119389534,
                0.0520833320915699,
            ],
        },
        Case {
            loss: "binary_crossentropy",
            args: "from_logits = true, label_smoothing = 0.1",
            y: &BINARY,
            p: &LOGITS,
            rows: 4,
            value: 0.6298130750656128,
            grad: &[
                -0.005766905844211578,
                0.018245119601488113,
                -0.027295053005218506,
                0.03958159685134888,
                0.04165283218026161,
                -0.03129645437002182,
                -0.06396453827619553,
                0.0002145133912563324,
                0.03749999776482582,
                0.05675487965345383,
                -0.018245115876197815,
                0.0057669091038405895,
            ],
        },
        Case {
            loss: "binary_focal_crossentropy",
            args: "",
            y: &BINARY,
            p: &PROBS,
            rows: 4,
            value: 0.8537824153900146,
            grad: &[
                -0.48125842213630676,
                0.27657458186149597,
                -1.0203877687454224,
                0.0994289293885231,
                0.02854803577065468,
                -0.48125842213630676,
                -1.9784910678863525,
                -0.6701475381851196,
                0.48125845193862915,
                0.05627725273370743,
                -0.16662907600402832,
                0.011604784056544304,
            ],
        },
        Case {
            loss: "binary_focal_crossentropy",
            args: "apply_class_balancing = true, alpha = 0.4, gamma = 1.5, from_logits = true, label_smoothing = 0.1",
            y: &BINARY,
            p: &LOGITS,
            rows: 4,
            value: 0.1329106092453003,
            grad: &[
                -0.0005833255127072334,
                0.004260832443833351,
                -0.006100854836404324,
                0.01766616478562355,
                0.01944117620587349,
                -0.007880504243075848,
                -0.028186988085508347,
                -0.00012349877215456218,
                0.015955448150634766,
                0.03381732851266861,
                -0.002960917539894581,
                0.0008394195465371013,
            ],
        },
        Case {
            loss: "categorical_focal_crossentropy",
            args: "",
            y: &ONEHOT,
            p: &PROBS,
            rows: 4,
            value: 0.0340111218392849,
            grad: &[
                0.014987719245254993,
                -0.00642330851405859,
                0.014987719245254993,
                -0.03728584945201874,
                0.03728584945201874,
                0.03728584945201874,
                0.006962870247662067,
                0.006962870247662067,
                -0.0017407173290848732,
                0.049988724291324615,
                -0.07498308271169662,
                0.049988724291324615,
            ],
        },
        Case {
            loss: "categorical_focal_crossentropy",
            args: "alpha = 0.5, gamma = 3.0, from_logits = true, label_smoothing = 0.1",
            y: &ONEHOT,
            p: &LOGITS,
            rows: 4,
            value: 0.7433874607086182,
            grad: &[
                0.11734111607074738,
                -0.13862469792366028,
                0.021283576264977455,
                -0.0693194791674614,
                0.03258196637034416,
                0.03673751279711723,
                -0.003037502057850361,
                0.14258016645908356,
                -0.13954266905784607,
                0.02486543543636799,
                -0.021243484690785408,
                -0.0036219502799212933,
            ],
        },
        Case {
            loss: "kl_divergence",
            args: "",
            y: &SOFT,
            p: &PROBS,
            rows: 6,
            value: 0.06545344740152359,
            grad: &[
                -0.0833333283662796,
                -0.1428571492433548,
                -0.5000000596046448,
                -0.10000000894069672,
                -0.1666666716337204,
                -0.3333333134651184,
                -0.1666666567325592,
                -0.055555559694767,
                -0.1875000149011612,
                -0.2083333432674408,
                -0.1041666716337204,
                -0.2083333432674408,
            ],
        },
        Case {
            loss: "cosine_similarity",
            args: "",
            y: &REG_Y,
            p: &REG_P,
            rows: 6,
            value: -0.8572506904602051,
            grad: &[
                -0.014223054051399231,
                0.11378466337919235,
                0.0003532096743583679,
                -0.0045917765237390995,
                0.0066590458154678345,
                0.001109842211008072,
                -0.0868411660194397,
                0.03947325050830841,
                0.04393315315246582,
                0.1537659615278244,
                0.014381296932697296,
                -0.023803504183888435,
            ],
        },
        Case {
            loss: "categorical_focal_crossentropy",
            args: "",
            y: &SOFT,
            p: &PROBS,
            rows: 6,
            value: 0.04531683400273323,
            grad: &[
                -0.014442088082432747,
                0.004126312211155891,
                -0.12254905700683594,
                0.024509811773896217,
                0.019907386973500252,
                -0.029861077666282654,
                -0.03204895928502083,
                0.010682987049221992,
                0.011641154997050762,
                -0.023282311856746674,
                0.013664194382727146,
                -0.02732839435338974,
            ],
        },
        // `reduction` (tests/reference/losses_reference.py, "Reduction cases").
        Case {
            loss: "categorical_crossentropy",
            args: "reduction = \"sum\"",
            y: &ONEHOT,
            p: &PROBS,
            rows: 4,
            value: 2.189256429672241,
            grad: &[
                1.0,
                -0.4285714626312256,
                1.0,
                -0.9999999403953552,
                0.9999999403953552,
                0.9999999403953552,
                1.0,
                1.0,
                -0.25,
                1.0,
                -1.5,
                1.0,
            ],
        },
        Case {
            loss: "mse",
            args: "reduction = \"sum\"",
            y: &REG_Y,
            p: &REG_P,
            rows: 6,
            value: 5.407500267028809,
            grad: &[
                -0.19999998807907104,
                0.6000000238418579,
                0.5999999046325684,
                -0.10000000894069672,
                0.44999998807907104,
                -1.7999999523162842,
                -2.0,
                0.10000002384185791,
                0.29999998211860657,
                0.5,
                1.5000001192092896,
                -0.04999995231628418,
            ],
        },
        Case {
            loss: "huber",
            args: "delta = 0.5, reduction = \"mean\"",
            y: &REG_Y,
            p: &REG_P,
            rows: 4,
            value: 0.24395832419395447,
            grad: &[
                -0.01666666567325592,
                0.0416666679084301,
                0.0416666679084301,
                -0.00833333469927311,
                0.03750000149011612,
                -0.0416666679084301,
                -0.0416666679084301,
                0.008333335630595684,
                0.02499999850988388,
                0.0416666679084301,
                0.0416666679084301,
                -0.004166662693023682,
            ],
        },
        Case {
            loss: "binary_focal_crossentropy",
            args: "from_logits = true, reduction = \"sum\"",
            y: &BINARY,
            p: &LOGITS,
            rows: 4,
            value: 0.8919587731361389,
            grad: &[
                -0.001623646356165409,
                0.01752704195678234,
                -0.04597899690270424,
                0.11319820582866669,
                0.12782222032546997,
                -0.06413616240024567,
                -0.32047492265701294,
                -0.00010495726019144058,
                0.0994289368391037,
                0.25607824325561523,
                -0.01752704195678234,
                0.0016236465889960527,
            ],
        },
        Case {
            loss: "kl_divergence",
            args: "reduction = \"sum_over_batch_size\"",
            y: &SOFT,
            p: &PROBS,
            rows: 6,
            value: 0.06545344740152359,
            grad: &[
                -0.0833333283662796,
                -0.1428571492433548,
                -0.5000000596046448,
                -0.10000000894069672,
                -0.1666666716337204,
                -0.3333333134651184,
                -0.1666666567325592,
                -0.055555559694767,
                -0.1875000149011612,
                -0.2083333432674408,
                -0.1041666716337204,
                -0.2083333432674408,
            ],
        },
    ];
}

fn spec(case: &keras::Case) -> LossSpec {
    let args = if case.args.is_empty() {
        String::new()
    } else {
        format!(", {}", case.args)
    };
    let text = format!("loss = {{ type = \"{}\"{args} }}", case.loss);
    let t: toml::Table = toml::from_str(&text).unwrap();
    LossSpec::from_toml(&t["loss"]).unwrap()
}

/// The loss value and its gradient w.r.t. the predictions `[rows, 12 / rows]`.
fn value_and_grad(case: &keras::Case) -> (f64, Vec<f32>) {
    let d = Device::flex().autodiff();
    let shape = [case.rows, 12 / case.rows];
    let p = Tensor::<2>::from_data(TensorData::new(case.p.to_vec(), shape), &d).require_grad();
    let y = Labels::Dense(Tensor::from_data(
        TensorData::new(case.y.to_vec(), shape),
        &d,
    ));
    let loss = spec(case).compute(p.clone(), None, &y);
    let value = loss.clone().into_scalar::<f32>() as f64;
    let grads = loss.backward();
    let grad = p.grad(&grads).expect("a gradient for the predictions");
    (value, grad.into_data().try_to_vec::<f32>().unwrap())
}

#[test]
fn every_loss_and_its_gradient_equals_keras() {
    for case in keras::CASES {
        let what = format!("{} {{{}}} rows {}", case.loss, case.args, case.rows);
        let (value, grad) = value_and_grad(case);
        let tol = 1e-5 * case.value.abs().max(1.0);
        assert!(
            (value - case.value).abs() <= tol,
            "{what}: {value} vs Keras {}",
            case.value
        );
        for (i, (g, k)) in grad.iter().zip(case.grad).enumerate() {
            let tol = 2e-5 * k.abs().max(1.0);
            assert!((g - k).abs() <= tol, "{what}: d/dp[{i}] {g} vs Keras {k}");
        }
    }
    // Every built-in loss has a case (sparse_categorical_crossentropy, with class-index labels,
    // in `super::tests` and the model's Keras parity tests), the rank-3 outputs ([2, 3, 2] as 6
    // rows) at least two.
    for def in LOSSES {
        assert!(
            keras::CASES
                .iter()
                .any(|c| table::find(c.loss).is_some_and(|d| d.name == def.name))
                || def.labels == LabelKind::Sparse,
            "{} has no Keras case",
            def.name
        );
    }
    assert!(keras::CASES.iter().filter(|c| c.rows == 6).count() >= 2);
}

#[test]
fn aliases_and_arguments_read_back_the_same_loss() {
    let read = |text: &str| {
        let t: toml::Table = toml::from_str(text).unwrap();
        LossSpec::from_toml(&t["loss"]).unwrap()
    };
    assert_eq!(
        read("loss = \"mae\""),
        read("loss = \"mean_absolute_error\"")
    );
    assert_eq!(read("loss = \"kld\"").name(), "kl_divergence");
    assert_eq!(read("loss = \"mse\"").kind, LossKind::MeanSquaredError);
    let huber = read("loss = { type = \"huber\", delta = 0.5 }");
    assert_ne!(huber, read("loss = \"huber\""));
    // The run directory's config reads back the same loss, arguments included.
    assert_eq!(LossSpec::from_toml(&huber.to_toml()).unwrap(), huber);
    let focal = read(
        "loss = { type = \"binary_focal_crossentropy\", from_logits = true, gamma = 1.5, \
         apply_class_balancing = true }",
    );
    assert_eq!(LossSpec::from_toml(&focal.to_toml()).unwrap(), focal);
    assert!(focal.from_logits && focal.family() == Family::Sigmoid);
}

#[test]
fn bad_losses_name_the_key() {
    let err = |text: &str| {
        let t: toml::Table = toml::from_str(text).unwrap();
        LossSpec::from_toml(&t["loss"]).unwrap_err().to_string()
    };
    let e = err("loss = \"hubber\"");
    assert!(
        e.starts_with("compile.loss.type: unknown loss \"hubber\"; allowed: "),
        "{e}"
    );
    for def in LOSSES {
        assert!(e.contains(def.name), "{e} lists {}", def.name);
    }
    assert!(e.contains("mean_absolute_error (alias mae)"), "{e}");
    let e = err("loss = { type = \"huber\", delta = -1.0 }");
    assert_eq!(e, "compile.loss.delta: huber needs delta >= 0, got -1");
    let e = err("loss = { type = \"categorical_crossentropy\", label_smoothing = 1.5 }");
    assert_eq!(
        e,
        "compile.loss.label_smoothing: categorical_crossentropy needs label_smoothing in [0, 1], \
         got 1.5"
    );
    let e = err("loss = { type = \"binary_focal_crossentropy\", alpha = -0.1 }");
    assert!(
        e.starts_with("compile.loss.alpha: binary_focal_crossentropy needs alpha in [0, 1]"),
        "{e}"
    );
    let e = err("loss = { type = \"sparse_categorical_crossentropy\", label_smoothing = 0.1 }");
    assert_eq!(
        e,
        "compile.loss.label_smoothing: sparse_categorical_crossentropy has no argument \
         \"label_smoothing\"; it takes only reduction"
    );
    let e = err("loss = { type = \"huber\", from_logits = true }");
    assert!(
        e.starts_with("compile.loss.from_logits: huber compares values"),
        "{e}"
    );
    let e = err("loss = { type = \"huber\", delta = \"big\" }");
    assert!(e.starts_with("compile.loss: "), "{e}");
    for e in [e.clone(), err("loss = 3")] {
        assert!(!e.contains('\n'), "one line: {e}");
    }
}
