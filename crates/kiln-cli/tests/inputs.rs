//! `kiln predict` and `kiln data inspect` on inputs a user pipes in or names wrongly:
//! process substitution, `-`, `/dev/stdin`, files whose name claims another format, bad values.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::{mlp_config, require_data, scratch, text, train_command};
use kiln_data::{Array, Buffer};

fn kiln() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
}

fn run_with_stdin(mut c: Command, stdin: &Path) -> Output {
    c.stdin(Stdio::from(std::fs::File::open(stdin).unwrap()))
        .output()
        .unwrap()
}

/// Exit `code`, one error line on stderr containing every needle.
fn assert_fails(o: &Output, code: i32, needles: &[&str]) {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err}");
    }
}

/// The number of prediction rows in `predict`'s JSON output.
fn predictions(o: &Output) -> usize {
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["predictions"].as_array().unwrap().len()
}

/// A run trained for one epoch on 64 examples.
fn trained(dir: &Path) -> PathBuf {
    let run = dir.join("run");
    let o = train_command(&mlp_config(dir, 64, 1, 1000, ""), &run, &[])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    run
}

fn images(n: usize, value: impl Fn(usize) -> f32) -> Array {
    Array::new(
        vec![n, 28, 28],
        Buffer::F32((0..n * 784).map(value).collect()),
    )
    .unwrap()
}

#[test]
fn predict_reads_pipes_stdin_and_sniffs_the_format() {
    require_data();
    let dir = scratch("predict-inputs");
    let run = trained(&dir);
    let idx = dir.join("three.idx");
    kiln_data::idx::write_idx(&idx, &images(3, |i| (i % 255) as f32)).unwrap();
    let npy = dir.join("two.npy");
    kiln_data::npy::write_npy(&npy, &images(2, |i| (i % 7) as f32)).unwrap();

    // Process substitution: a pipe whose size is unknown, read once.
    let o = Command::new("bash")
        .args(["-c", "\"$0\" predict \"$1\" <(cat \"$2\")"])
        .args([
            env!("CARGO_BIN_EXE_kiln"),
            run.to_str().unwrap(),
            idx.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(predictions(&o), 3);
    for name in ["-", "/dev/stdin"] {
        let mut c = kiln();
        c.args(["predict", run.to_str().unwrap(), name]);
        assert_eq!(predictions(&run_with_stdin(c, &npy)), 2, "{name}");
    }

    // Text named .npy: called what it is, not "not an IDX file".
    let csv = dir.join("rows.npy");
    std::fs::write(&csv, "a,b\n1,2\n").unwrap();
    let o = kiln()
        .args(["predict", run.to_str().unwrap(), csv.to_str().unwrap()])
        .output()
        .unwrap();
    assert_fails(
        &o,
        1,
        &["rows.npy: not a .npy file", "it looks like text (CSV?)"],
    );
    assert!(!text(&o.stderr).contains("IDX"), "{}", text(&o.stderr));

    // A NaN in record 2 and a wrong example shape: both name the file (and the record).
    let nan = dir.join("nan.npy");
    kiln_data::npy::write_npy(
        &nan,
        &images(3, |i| if i == 2 * 784 + 5 { f32::NAN } else { 0.5 }),
    )
    .unwrap();
    let o = kiln()
        .args(["predict", run.to_str().unwrap(), nan.to_str().unwrap()])
        .output()
        .unwrap();
    assert_fails(&o, 1, &["check_numerics: record 2 of ", "nan.npy has NaN"]);
    let small = dir.join("small.npy");
    let five = Array::new(vec![2, 5, 5], Buffer::F32(vec![0.0; 50])).unwrap();
    kiln_data::npy::write_npy(&small, &five).unwrap();
    let o = kiln()
        .args(["predict", run.to_str().unwrap(), small.to_str().unwrap()])
        .output()
        .unwrap();
    assert_fails(&o, 1, &["small.npy: "]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn data_inspect_reads_stdin_and_unknown_formats_are_usage_errors() {
    let dir = scratch("inspect-inputs");
    let csv = dir.join("rows.txt");
    std::fs::write(&csv, "x,y\n1,2\n3,4\n").unwrap();
    for name in ["-", "/dev/stdin"] {
        let mut c = kiln();
        c.args(["data", "inspect", name]);
        let o = run_with_stdin(c, &csv);
        assert!(o.status.success(), "{name}: {}", text(&o.stderr));
        assert!(text(&o.stdout).contains("2 rows"), "{}", text(&o.stdout));
    }
    let blob = dir.join("blob.bin");
    std::fs::write(&blob, [0xde, 0xad, 0xbe, 0xef]).unwrap();
    let o = kiln()
        .args(["data", "inspect", blob.to_str().unwrap()])
        .output()
        .unwrap();
    assert_fails(&o, 2, &["cannot tell the format of", "--format"]);
    let o = kiln()
        .args([
            "data",
            "inspect",
            blob.to_str().unwrap(),
            "--format",
            "parquet",
        ])
        .output()
        .unwrap();
    assert_fails(&o, 2, &["unknown file format \"parquet\""]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Seeded values in `[-0.5, 0.5)` (a linear congruential generator: the same data on every
/// machine).
fn uniform(seed: u32) -> impl FnMut() -> f32 {
    let mut state = seed;
    move || {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (state >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    }
}

fn write_npy(dir: &Path, name: &str, shape: Vec<usize>, buf: Buffer) {
    kiln_data::npy::write_npy(&dir.join(name), &Array::new(shape, buf).unwrap()).unwrap();
}

/// `n` examples of two inputs `a` (`[n, wa]`) and `b` (`[n, wb]`) with a binary label
/// `label(a, b)`, written as `a.npy`, `b.npy` and `y.npy` in `dir`.
fn write_pairs(
    dir: &Path,
    n: usize,
    seed: u32,
    (wa, wb): (usize, usize),
    label: fn(&[f32], &[f32]) -> bool,
) {
    let mut next = uniform(seed);
    let (mut a, mut b, mut y) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let ra: Vec<f32> = (0..wa).map(|_| next()).collect();
        let rb: Vec<f32> = (0..wb).map(|_| next()).collect();
        y.push(label(&ra, &rb) as i64);
        a.extend(ra);
        b.extend(rb);
    }
    write_npy(dir, "a.npy", vec![n, wa], Buffer::F32(a));
    write_npy(dir, "b.npy", vec![n, wb], Buffer::F32(b));
    write_npy(dir, "y.npy", vec![n], Buffer::I64(y));
}

/// A model with two Inputs trains from an NPY pipeline whose components are named like them
/// (Keras' dict inputs), and learns; an Input that matches no component is a clear error.
#[test]
fn a_two_input_model_trains_from_components_named_like_its_inputs() {
    let dir = scratch("two-inputs");
    // Label: whether a's first value plus b's first value is positive.
    let n = 256;
    write_pairs(&dir, n, 7, (4, 3), |a, b| a[0] + b[0] > 0.0);
    let config = |input_b: &str| {
        format!(
            r#"name = "two"
seed = 3
[data]
data_dir = "{}"
[data.train]
source = "npy"
files = ["a.npy", "b.npy", "y.npy"]
components = ["a", "b", "label"]
y = "label"
batch_size = 32
[model]
layers = [
  {{ type = "Input", name = "a", shape = [4] }},
  {{ type = "Input", name = "{input_b}", shape = [3] }},
  {{ type = "Concatenate", name = "ab", inputs = ["a", "{input_b}"] }},
  {{ type = "Dense", units = 16, activation = "relu" }},
  {{ type = "Dense", units = 2 }},
]
[compile]
optimizer = {{ type = "adamw", learning_rate = 0.01 }}
loss = {{ type = "sparse_categorical_crossentropy", from_logits = true }}
metrics = ["accuracy"]
[fit]
epochs = 8
"#,
            dir.display()
        )
    };
    let good = dir.join("two.toml");
    std::fs::write(&good, config("b")).unwrap();
    let run = dir.join("run");
    let o = train_command(&good, &run, &[]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let h: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("history.json")).unwrap()).unwrap();
    let acc = h["history"]["accuracy"].as_array().unwrap();
    assert!(acc.last().unwrap().as_f64().unwrap() > 0.85, "{acc:?}");
    // predict reads one file: a two-input model is refused with what to do instead.
    let o = kiln()
        .args([
            "predict",
            run.to_str().unwrap(),
            dir.join("a.npy").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_fails(&o, 2, &["kiln predict reads one file", "2 Inputs (a, b)"]);

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, config("c")).unwrap();
    // An Input named after no component: a config error naming the file and the split,
    // exit 2, and not even the run directory's parent is left behind.
    let o = train_command(&bad, &dir.join("runs").join("bad-run"), &[])
        .output()
        .unwrap();
    assert_fails(&o, 2, &["bad.toml: data.train: the model's Input \"c\""]);
    assert!(!dir.join("runs").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A model with a classification and a regression head trains from an NPY pipeline whose
/// label components are named like the outputs (Keras' dict labels), with per-output losses,
/// `loss_weights` and metrics; its history has Keras' per-output keys. Misspelt output names
/// are refused with exit 2 before anything is written.
#[test]
fn a_two_output_model_trains_with_per_output_losses_and_metrics() {
    let dir = scratch("two-outputs");
    let n = 256;
    let (mut x, mut class, mut value) = (Vec::new(), Vec::new(), Vec::new());
    let mut next = uniform(11);
    for _ in 0..n {
        let r: Vec<f32> = (0..4).map(|_| next()).collect();
        class.push((r[0] + r[1] > 0.0) as i64);
        value.push(2.0 * r[2] - r[3]);
        x.extend(r);
    }
    let write = |name: &str, shape: Vec<usize>, buf: Buffer| write_npy(&dir, name, shape, buf);
    write("x.npy", vec![n, 4], Buffer::F32(x));
    write("class.npy", vec![n], Buffer::I64(class));
    write(
        "value2.npy",
        vec![n, 2],
        Buffer::F32([value.clone(), value.clone()].concat()),
    );
    write("value.npy", vec![n, 1], Buffer::F32(value));
    let config = |outputs: &str, loss_key: &str, value: &str| {
        format!(
            r#"name = "heads"
seed = 3
[data]
data_dir = "{}"
[data.train]
source = "npy"
files = ["x.npy", "class.npy", "{value}"]
components = ["x", "class", "value"]
batch_size = 32
[data.test]
source = "npy"
files = ["x.npy", "class.npy", "{value}"]
components = ["x", "class", "value"]
[model]
layers = [
  {{ type = "Input", shape = [4] }},
  {{ type = "Dense", name = "trunk", units = 32, activation = "relu" }},
  {{ type = "Dense", name = "class", units = 2, activation = "softmax", inputs = ["trunk"] }},
  {{ type = "Dense", name = "value", units = 1, inputs = ["trunk"] }},
]
outputs = {outputs}
[compile]
optimizer = {{ type = "adamw", learning_rate = 0.01 }}
loss = {{ class = "sparse_categorical_crossentropy", {loss_key} = "mse" }}
loss_weights = {{ class = 1.0, value = 0.5 }}
metrics = {{ class = ["accuracy"], value = ["mae"] }}
[fit]
epochs = 10
"#,
            dir.display()
        )
    };
    let good = dir.join("heads.toml");
    std::fs::write(&good, config(r#"["class", "value"]"#, "value", "value.npy")).unwrap();
    let run = dir.join("run");
    let o = train_command(&good, &run, &[]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let h: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("history.json")).unwrap()).unwrap();
    let series = |key: &str| -> Vec<f64> {
        let v = h["history"][key].as_array();
        let v = v.unwrap_or_else(|| panic!("no {key} in {h}"));
        v.iter().map(|x| x.as_f64().unwrap()).collect()
    };
    let (loss, class_loss, value_loss) =
        (series("loss"), series("class_loss"), series("value_loss"));
    // Each epoch's loss is the weighted sum of the outputs' epoch means.
    for e in 0..loss.len() {
        let sum = class_loss[e] + 0.5 * value_loss[e];
        assert!(
            (loss[e] - sum).abs() < 1e-4,
            "epoch {e}: {} vs {sum}",
            loss[e]
        );
    }
    assert!(*series("class_accuracy").last().unwrap() > 0.85, "{h}");
    let mae = series("value_mae");
    assert!(mae.last().unwrap() < &(mae[0] / 2.0), "{mae:?}");

    // The run directory keeps the per-output compile: evaluate reports every output.
    let o = kiln()
        .args(["evaluate", run.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let logs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let at = |k: &str| {
        logs[k]
            .as_f64()
            .unwrap_or_else(|| panic!("no {k} in {logs}"))
    };
    assert!(
        (at("loss") - at("class_loss") - 0.5 * at("value_loss")).abs() < 1e-4,
        "{logs}"
    );
    assert!(
        at("class_accuracy") > 0.85 && at("value_mae") < mae[0],
        "{logs}"
    );
    // predict: each output's columns, named after it.
    let o = kiln()
        .args([
            "predict",
            run.to_str().unwrap(),
            dir.join("x.npy").to_str().unwrap(),
            "--format",
            "csv",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let csv = text(&o.stdout);
    assert_eq!(csv.lines().next(), Some("class_0,class_1,value_0"), "{csv}");
    assert_eq!(csv.lines().count(), n + 1);

    let both = r#"["class", "value"]"#;
    for (outputs, loss_key, value, code, needle) in [
        (
            r#"["class", "valu"]"#,
            "value",
            "value.npy",
            2,
            "model.outputs: \"valu\" is not the name",
        ),
        (
            both,
            "valu",
            "value.npy",
            2,
            "compile.loss.valu: the model has no output",
        ),
        // Labels of another shape than the output: refused before the run directory exists.
        (
            both,
            "value",
            "value2.npy",
            2,
            "bad.toml: data.train: the first example does not fit the model: labels \"value\" have 2 values per example but the model's output (None, 1) has 1",
        ),
    ] {
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, config(outputs, loss_key, value)).unwrap();
        let bad_run = dir.join("bad-run");
        let o = train_command(&bad, &bad_run, &[]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{err}");
        assert!(err.contains(needle), "{needle:?} not in {err}");
        assert!(!bad_run.exists(), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A Siamese model (one Dense tower called on two inputs with `shares`) trains from NPY
/// components and keeps the sharing in its run directory; a `shares` naming no earlier layer
/// is a config error (exit 2) that writes nothing.
#[test]
fn a_shared_tower_trains_and_a_bad_shares_writes_nothing() {
    let dir = scratch("shared-tower");
    // Label: whether a's first value exceeds b's (a symmetric task for a shared tower).
    let n = 256;
    write_pairs(&dir, n, 11, (3, 3), |a, b| a[0] > b[0]);
    let config = |shares: &str| {
        format!(
            r#"name = "siamese"
seed = 3
[data]
data_dir = "{}"
[data.train]
source = "npy"
files = ["a.npy", "b.npy", "y.npy"]
components = ["a", "b", "label"]
y = "label"
batch_size = 32
[model]
layers = [
  {{ type = "Input", name = "a", shape = [3] }},
  {{ type = "Input", name = "b", shape = [3] }},
  {{ type = "Dense", name = "tower", units = 8, activation = "tanh", inputs = ["a"] }},
  {{ name = "tower_b", shares = "{shares}", inputs = ["b"] }},
  {{ type = "Concatenate", inputs = ["tower", "tower_b"] }},
  {{ type = "Dense", units = 2 }},
]
[compile]
optimizer = {{ type = "adamw", learning_rate = 0.02 }}
loss = {{ type = "sparse_categorical_crossentropy", from_logits = true }}
metrics = ["accuracy"]
[fit]
epochs = 8
"#,
            dir.display()
        )
    };
    let good = dir.join("siamese.toml");
    std::fs::write(&good, config("tower")).unwrap();
    let run = dir.join("run");
    let o = train_command(&good, &run, &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let h: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("history.json")).unwrap()).unwrap();
    let acc = h["history"]["accuracy"].as_array().unwrap();
    assert!(acc.last().unwrap().as_f64().unwrap() > 0.85, "{acc:?}");
    let resolved = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert!(resolved.contains("shares = \"tower\""), "{resolved}");

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, config("towr")).unwrap();
    let bad_run = dir.join("bad-run");
    let o = train_command(&bad, &bad_run, &[]).output().unwrap();
    assert_fails(
        &o,
        2,
        &[
            "model.layers[3].shares",
            "\"towr\" is not the name of an earlier layer",
        ],
    );
    assert!(
        !bad_run.exists(),
        "a config error wrote {}",
        bad_run.display()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
