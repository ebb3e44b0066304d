//! `return_state` and `initial_state` against Keras 3
//! (`tests/reference/recurrent_state_reference.py`, numbers in
//! `tests/data/recurrent_state_reference.json`): an encoder LSTM hands its final `h` and `c` to
//! a decoder LSTM as its initial state, a backwards GRU's state starts a SimpleRNN, a
//! Bidirectional GRU returns both directions' states, and the carry `c`, the GRU's output and
//! the Bidirectional's tensors join the head. Output, input gradient and every recurrent
//! weight's gradient match; so do the states, read where they are concatenated. Bad uses of a
//! layer with states are one-line errors.

use burn::prelude::*;
use serde_json::Value;

use super::recurrent_tests::weight_grad;
use super::shape_tests::to_vec;
use crate::error::KilnError;
use crate::model::shared_tests::floats;
use crate::model::weights::load_with;
use crate::model::{Act, ModelSpec};

fn reference() -> Value {
    serde_json::from_str(include_str!(
        "../../../tests/data/recurrent_state_reference.json"
    ))
    .unwrap()
}

fn parse(layers: &str) -> crate::Result<ModelSpec> {
    let text =
        format!("layers = [\n{{ type = \"Input\", name = \"x\", shape = [5, 3] }},\n{layers}\n]");
    ModelSpec::from_toml(&toml::from_str(&text).unwrap())
}

/// Keras' model of the reference script.
const MODEL: &str = r#"
    { type = "LSTM", name = "enc", units = 3, return_sequences = true, return_state = true },
    { type = "LSTM", name = "dec", units = 3, inputs = ["enc:0", "enc:1", "enc:2"] },
    { type = "GRU", name = "g", units = 3, return_state = true, go_backwards = true, inputs = ["x"] },
    { type = "SimpleRNN", name = "s", units = 3, inputs = ["enc:0", "g:1"] },
    { type = "Bidirectional", name = "bi", merge_mode = "sum", layer = { type = "GRU", units = 2, return_state = true }, inputs = ["x"] },
    { type = "Concatenate", name = "joined", inputs = ["dec", "s", "enc:2", "g:0", "bi:0", "bi:1", "bi:2"] },
    { type = "Dense", name = "out", units = 2 },
"#;

fn close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 2e-5 + 2e-5 * w.abs(),
            "{what}[{k}]: kiln {g}, Keras {w}"
        );
    }
}

#[test]
fn states_returned_and_given_match_keras_values_and_gradients() {
    let r = reference();
    let spec = parse(MODEL).unwrap();
    let device = Device::flex().autodiff();
    let net = load_with(&spec, &device, &|name: &str, _: &[usize]| {
        Ok(floats(&r["weights"][name]))
    })
    .unwrap();
    let x = Tensor::<3>::from_data(TensorData::new(floats(&r["input"]), [2, 5, 3]), &device)
        .require_grad();
    let joined = spec
        .layers()
        .iter()
        .position(|l| l.name == "joined")
        .unwrap();
    let mut seen = Vec::new();
    let out = net.forward_graph(&spec, vec![Act::Seq(x.clone())], false, &mut |i, _, y| {
        if i == joined {
            seen = to_vec(y.clone().into_flat());
        }
    });
    close(&to_vec(out.output.clone()), &floats(&r["output"]), "output");
    // `joined` is, per row: dec (3), s (3), enc's carry c (3), g's output = its state (3),
    // bi's summed output (2), bi's forward state (2), bi's backward state (2).
    for (state, at, n) in [
        ("enc:2", 6, 3),
        ("g:1", 9, 3),
        ("bi:1", 14, 2),
        ("bi:2", 16, 2),
    ] {
        let got: Vec<f32> = seen
            .chunks(18)
            .flat_map(|row| row[at..at + n].to_vec())
            .collect();
        close(&got, &floats(&r["states"][state]), state);
    }
    let n = out.output.dims()[0] * out.output.dims()[1];
    let weights: Vec<f32> = (0..n)
        .map(|i| (0.5 * i as f64 + 0.2).cos() as f32)
        .collect();
    let rw = Tensor::<2>::from_data(TensorData::new(weights, out.output.dims()), &device);
    let grads = (out.output * rw).sum().backward();
    close(
        &to_vec(x.grad(&grads).unwrap()),
        &floats(&r["input_grad"]),
        "input gradient",
    );
    for (i, layer) in spec.layers().iter().enumerate() {
        if layer.name == "out" || layer.name == "joined" {
            continue;
        }
        for (w, slot) in spec.own_weights(i) {
            let name = format!("{}/{}", layer.name, w.name);
            let got = weight_grad(&net.layers[i], slot, &grads);
            close(&got, &floats(&r["weight_grads"][name.as_str()]), &name);
        }
    }
}

#[test]
fn states_have_their_shapes_and_round_trip_through_toml() {
    let spec = parse(MODEL).unwrap();
    let enc = spec.layers().iter().position(|l| l.name == "enc").unwrap();
    assert_eq!(spec.state_count(enc), 2);
    assert_eq!(spec.shape_after(enc), &[5, 3]);
    let s = spec.layers().iter().position(|l| l.name == "s").unwrap();
    assert_eq!(spec.shapes_before(s), vec![&[5, 3][..], &[3][..]]);
    let again = ModelSpec::from_toml(&spec.to_toml()).unwrap();
    assert_eq!(again, spec);
    // A stack whose layers take the previous one's output, one of them returning states, is
    // written with its `inputs` ("enc:0"), which it needs.
    let stack = parse(
        r#"{ type = "LSTM", name = "enc", units = 3, return_sequences = true, return_state = true },
        { type = "GRU", units = 2, inputs = ["enc:0"] }"#,
    )
    .unwrap();
    assert!(!stack.is_sequential());
    // "x:0" names the Input itself.
    let input_zero = parse(r#"{ type = "LSTM", units = 2, inputs = ["x:0"] }"#).unwrap();
    assert_eq!(
        input_zero.layers()[0].inputs,
        [crate::model::NodeRef::Input(0)]
    );
    assert_eq!(ModelSpec::from_toml(&stack.to_toml()).unwrap(), stack);
}

fn error(layers: &str) -> String {
    match parse(layers) {
        Err(e @ KilnError::Config { .. }) => {
            let e = e.to_string();
            assert!(!e.contains('\n'), "one line: {e}");
            e
        }
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn bad_uses_of_states_are_one_line_errors() {
    const ENC: &str = r#"{ type = "LSTM", name = "enc", units = 3, return_state = true },"#;
    for (layers, want) in [
        // A layer with states feeding a layer as one tensor (Keras: a list into Dense).
        (
            format!(r#"{ENC} {{ type = "Dense", units = 2 }}"#),
            "model.layers[2]: layer \"enc\" returns 3 tensors (return_state = true), so it \
             cannot feed a layer as one tensor; name one in `inputs`: \"enc:0\" (its output) or \
             \"enc:1\", \"enc:2\" (its states)",
        ),
        (
            format!(r#"{ENC} {{ type = "Dense", units = 2, inputs = ["enc"] }}"#),
            "model.layers[2].inputs: layer \"enc\" returns 3 tensors",
        ),
        (
            format!(r#"{ENC} {{ type = "Dense", units = 2, inputs = ["enc:3"] }}"#),
            "\"enc:3\": \"enc\" returns 3 tensor(s), so its indices are 0..=2",
        ),
        (
            format!(r#"{ENC} {{ type = "Dense", units = 2, inputs = ["enc:h"] }}"#),
            "\"enc:h\": the part after ':' must be a tensor index 0..=2",
        ),
        (
            r#"{ type = "LSTM", name = "enc", units = 3 }, { type = "Dense", units = 2, inputs = ["enc:1"] }"#.into(),
            "\"enc:1\": \"enc\" returns 1 tensor(s), so its indices are 0..=0",
        ),
        (ENC.into(), "model.outputs: layer \"enc\" returns its states too"),
        // Initial states of the wrong number or size.
        (
            format!(r#"{ENC} {{ type = "LSTM", units = 4, inputs = ["x", "enc:1", "enc:2"] }}"#),
            "its inputs after the sequence are its initial state (2 tensor(s) of shape (None, 4)), got (None, 3)",
        ),
        (
            format!(r#"{ENC} {{ type = "LSTM", units = 3, inputs = ["x", "enc:1"] }}"#),
            "LSTM takes its sequence, or its sequence and 2 initial state tensor(s), got 2 inputs",
        ),
        (
            r#"{ type = "Bidirectional", layer = { type = "LSTM", units = 2, return_state = true } }, { type = "Dense", units = 1 }"#.into(),
            "layer \"bidirectional\" returns 5 tensors (return_state = true)",
        ),
        // An Input's only tensor is its index 0.
        (
            r#"{ type = "Dense", units = 2, inputs = ["x:1"] }"#.into(),
            "\"x:1\": \"x\" returns 1 tensor(s), so its indices are 0..=0",
        ),
        // An unknown enum value names its argument.
        (
            r#"{ type = "LSTM", units = 2, recurrent_activation = "sigmoidd" }"#.into(),
            "model.layers[1].recurrent_activation: LSTM: unknown variant `sigmoidd`",
        ),
        (
            r#"{ type = "Dense", name = "a:b", units = 2 }"#.into(),
            "nor ':', which picks one of a layer's tensors",
        ),
    ] {
        let e = error(&layers);
        assert!(e.contains(want), "{layers}\n got: {e}\nwant: {want}");
    }
}
