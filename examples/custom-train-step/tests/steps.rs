//! The custom-train-step example as a user runs it: `kiln-steps train` on real Fashion-MNIST
//! with the DCGAN and the VAE configs (shrunk to 512 images), each killed with SIGKILL inside
//! its second epoch and resumed to the weights (the compiled model's and the part's, byte for
//! byte) of a run that was never interrupted; their logs reach history.json and TensorBoard's
//! event files; bad configs are refused naming the key.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const DATA: &str = "/usr/share/datasets/fashion-mnist";

fn require_data() {
    assert!(
        Path::new(DATA).join("train-images-idx3-ubyte.gz").is_file(),
        "Fashion-MNIST is missing: run scripts/setup.sh"
    );
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-steps-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The example's config `name` (dcgan or vae), shrunk: 512 training images in batches of 64
/// (8 steps an epoch), 3 epochs, a TensorBoard point every batch.
fn config(dir: &Path, name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(format!("{name}.toml"))).unwrap();
    let text = text
        .replace("take = 6400", "take = 512")
        .replace("buffer_size = 6400", "buffer_size = 512")
        .replace("take = 1024", "take = 256")
        .replace("batch_size = 128", "batch_size = 64")
        .replace(
            "type = \"TensorBoard\"",
            "type = \"TensorBoard\"\nupdate_freq = 1",
        );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn command(config: &Path, run: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln-steps"));
    c.arg("train")
        .arg(config)
        .arg("--run-dir")
        .arg(run)
        .args(extra);
    // One thread: summation orders then do not depend on how work is split.
    c.env("RAYON_NUM_THREADS", "1");
    c
}

fn train(config: &Path, run: &Path, extra: &[&str]) -> Output {
    command(config, run, extra).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn history(run: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(run.join("history.json")).unwrap();
    let h: serde_json::Value = serde_json::from_str(&text).unwrap();
    h["history"].clone()
}

fn series(h: &serde_json::Value, key: &str) -> Vec<f64> {
    let values = h[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {h}"));
    values.iter().map(|v| v.as_f64().unwrap()).collect()
}

/// Waits until `ready` holds, panicking after two minutes.
fn wait_for(what: &str, child: &mut Child, ready: impl Fn() -> bool) {
    let start = Instant::now();
    while !ready() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) before {what}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Trains `name` straight through, then again killed with SIGKILL once its epoch-1
/// checkpoint exists and resumed: both runs' weight files must be equal. Returns the straight
/// run's directory.
fn killed_and_resumed(name: &str, part: &str) -> (PathBuf, PathBuf) {
    require_data();
    let dir = scratch(name);
    let cfg = config(&dir, name);
    let straight = dir.join("straight");
    let o = train(&cfg, &straight, &[]);
    assert!(o.status.success(), "{}", text(&o));

    let run = dir.join("killed");
    let mut child = command(&cfg, &run, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let epoch_one = run.join("checkpoints").join("ckpt-000000000008");
    wait_for("the epoch-1 checkpoint", &mut child, || epoch_one.is_dir());
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!run.join("model.safetensors").exists(), "killed too late");
    let o = train(&cfg, &run, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("Resuming from"), "{}", text(&o));
    for file in [
        "model.safetensors".to_string(),
        format!("part-{part}.safetensors"),
    ] {
        let (a, b) = (
            std::fs::read(straight.join(&file)).unwrap(),
            std::fs::read(run.join(&file)).unwrap(),
        );
        assert!(a == b, "{file} differs after the resume");
    }
    (straight, dir)
}

/// The scalar tags of the event files under `dir` (by a plain scan of the record payloads
/// for the tag strings: the real TensorBoard reads them in tests/interop).
fn event_text(dir: &Path) -> String {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        all.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    String::from_utf8_lossy(&all).into_owned()
}

#[test]
fn the_dcgan_trains_both_models_and_resumes_after_sigkill_bit_for_bit() {
    let (straight, dir) = killed_and_resumed("dcgan", "generator");
    let h = history(&straight);
    for key in ["loss", "d_loss", "g_loss"] {
        let v = series(&h, key);
        assert_eq!(v.len(), 3, "{key}: {v:?}");
        assert!(v.iter().all(|x| x.is_finite() && *x > 0.0), "{key}: {v:?}");
    }
    // loss = d_loss + g_loss in every epoch (each an epoch mean of the step values).
    let (l, d, g) = (
        series(&h, "loss"),
        series(&h, "d_loss"),
        series(&h, "g_loss"),
    );
    for i in 0..3 {
        assert!((l[i] - d[i] - g[i]).abs() < 1e-4, "{l:?} {d:?} {g:?}");
    }
    // Binary cross-entropy of a fresh discriminator is near ln 2 for both.
    assert!(
        (d[0] - 0.69).abs() < 0.25 && (g[0] - 0.69).abs() < 0.4,
        "{d:?} {g:?}"
    );
    let events = event_text(&straight.join("logs").join("train"));
    for tag in ["epoch_d_loss", "epoch_g_loss", "batch_g_loss"] {
        assert!(events.contains(tag), "no {tag} in the TensorBoard files");
    }
    let ckpt = straight.join("checkpoints").join("ckpt-000000000024");
    assert!(ckpt.join("part-generator.model.bpk").is_file());
    assert!(ckpt.join("part-generator.optimizer.bpk").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_vae_trains_encoder_and_decoder_together_and_resumes_after_sigkill_bit_for_bit() {
    let (straight, dir) = killed_and_resumed("vae", "decoder");
    let h = history(&straight);
    let (loss, rec, kl) = (
        series(&h, "loss"),
        series(&h, "reconstruction_loss"),
        series(&h, "kl_loss"),
    );
    for i in 0..3 {
        assert!(
            (loss[i] - rec[i] - kl[i]).abs() < 1e-2,
            "{loss:?} {rec:?} {kl:?}"
        );
        assert!(kl[i] >= 0.0, "a KL divergence is not negative: {kl:?}");
    }
    // 784 pixels of binary cross-entropy: about 784 x ln 2 = 543 for a blank decoder.
    assert!(rec[0] < 560.0 && loss[2] < loss[0], "{loss:?}");
    // Validation through the step's test_step.
    let val = series(&h, "val_reconstruction_loss");
    assert_eq!(val.len(), 3);
    assert!(val[2] < val[0], "{val:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `kiln-steps train` on `text` (a config with `DATA` for the data directory): exit code 2
/// and the message.
fn refused(text: &str) -> String {
    exits_with(text, 2)
}

/// `kiln-steps train` on `text` (with `DATA` for the data directory), asserting exit `code`:
/// the message.
fn exits_with(text: &str, code: i32) -> String {
    let dir = scratch(&format!("exit-{code}"));
    let path = dir.join("bad.toml");
    std::fs::write(&path, text.replace("DATA", DATA)).unwrap();
    let o = train(&path, &dir.join("run"), &[]);
    assert_eq!(o.status.code(), Some(code), "{}", self::text(&o));
    std::fs::remove_dir_all(&dir).unwrap();
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const SMALL: &str = r#"
name = "bad"
[data]
data_dir = "DATA"
[data.train]
source = "idx"
files = ["train-images-idx3-ubyte.gz"]
components = ["image"]
x = "image"
take = 64
batch_size = 32
[model]
layers = [{ type = "Input", shape = [28, 28, 1] }, { type = "Flatten" }, { type = "Dense", units = 4 }]
[compile]
optimizer = "adam"
loss = "mse"
"#;

/// `kiln-steps train` on `text`: exit code 1 (refused when training starts) and the message.
fn failed(text: &str) -> String {
    exits_with(text, 1)
}

#[test]
fn parts_that_do_not_fit_the_step_stop_it_with_a_message_not_a_panic() {
    require_data();
    let vae = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("vae.toml"))
        .unwrap()
        .replace("/usr/share/datasets/fashion-mnist", "DATA")
        .replace("take = 6400", "take = 128");
    let missing = failed(&vae.replace("[parts.decoder]", "[parts.other]"));
    assert!(
        missing.contains("train step \"vae\": parts.decoder: the step needs this part"),
        "{missing}"
    );
    let wrong_input = failed(&vae.replace(
        "{ type = \"Input\", shape = [2] }",
        "{ type = \"Input\", shape = [3] }",
    ));
    assert!(
        wrong_input.contains(
            "train step \"vae\": step: part \"decoder\" takes inputs of shape (None, 3), was \
             called on (None, 2)"
        ),
        "{wrong_input}"
    );
    let big = vae.replace(
        "{ type = \"Conv2DTranspose\", filters = 1, kernel_size = 3, padding = \"same\"",
        "{ type = \"Conv2DTranspose\", filters = 1, kernel_size = 3, strides = 2, padding = \"same\"",
    );
    let big = failed(&big);
    assert!(
        big.contains("the decoder must output images shaped as the input"),
        "{big}"
    );
    assert!(!big.contains("panicked"), "{big}");
}

#[test]
fn the_vae_trains_under_mixed_float16_with_a_loss_scale() {
    require_data();
    let dir = scratch("float16");
    let cfg = config(&dir, "vae");
    let toml = std::fs::read_to_string(&cfg).unwrap();
    let toml = toml.replace("seed = 11", "seed = 11\nprecision = \"mixed_float16\"");
    std::fs::write(&cfg, toml).unwrap();
    let run = dir.join("run");
    let o = train(&cfg, &run, &["--epochs", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    let h = history(&run);
    let (loss, scale) = (series(&h, "loss"), series(&h, "loss_scale"));
    assert!(
        loss.iter().all(|l| l.is_finite()) && loss[1] < loss[0],
        "{loss:?}"
    );
    // Keras' initial scale 32768, halved on overflows, doubled after 2000 finite steps.
    assert!(scale.iter().all(|s| *s > 0.0 && *s <= 32768.0), "{scale:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_custom_step_configs_are_refused_naming_the_key() {
    require_data();
    let unknown = refused(&SMALL.replace(
        "optimizer = \"adam\"",
        "optimizer = \"adam\"\ntrain_step = \"gan\"",
    ));
    assert!(
        unknown.contains("compile.train_step: no train step named \"gan\""),
        "{unknown}"
    );
    assert!(unknown.contains("registered: dcgan, vae"), "{unknown}");
    let stray = format!("{SMALL}\n[parts.decoder]\noptimizer = \"adam\"\nlayers = []\n");
    let stray = refused(&stray);
    assert!(
        stray.contains("parts.decoder: parts are the extra networks"),
        "{stray}"
    );
    let vae = SMALL.replace(
        "optimizer = \"adam\"",
        "optimizer = \"adam\"\ntrain_step = \"vae\"",
    );
    let no_optimizer = refused(&format!(
        "{vae}\n[parts.decoder]\nlayers = [{{ type = \"Input\", shape = [2] }}]\n"
    ));
    assert!(
        no_optimizer.contains("parts.decoder.optimizer: missing"),
        "{no_optimizer}"
    );
    let bad_layer = refused(&format!(
        "{vae}\n[parts.decoder]\noptimizer = \"adam\"\nlayers = [{{ type = \"Input\", shape = [2] }}, {{ type = \"Dense\", units = 0 }}]\n"
    ));
    assert!(bad_layer.contains("parts.decoder.layers[1]"), "{bad_layer}");
    let accumulating = refused(&format!(
        "{vae}\n[parts.decoder]\noptimizer = {{ type = \"adam\", gradient_accumulation_steps = 2 }}\nlayers = [{{ type = \"Input\", shape = [2] }}, {{ type = \"Dense\", units = 4 }}]\n"
    ));
    assert!(
        accumulating.contains("parts.decoder.optimizer.gradient_accumulation_steps"),
        "{accumulating}"
    );
    let stray_key = refused(&format!(
        "{vae}\n[parts.decoder]\noptimizer = \"adam\"\nlearning_rate = 0.1\nlayers = []\n"
    ));
    assert!(
        stray_key.contains("parts.decoder.learning_rate: unknown key; a part takes optimizer"),
        "{stray_key}"
    );
    for name in ["\"a/b\"", "\"../up\"", "\"dé\""] {
        let path_like = refused(&format!(
            "{vae}\n[parts.{name}]\noptimizer = \"adam\"\nlayers = [{{ type = \"Input\", shape = [2] }}]\n"
        ));
        assert!(
            path_like.contains("a part's name becomes part of file names"),
            "{path_like}"
        );
    }
    let no_loss = refused(&SMALL.replace("loss = \"mse\"\n", ""));
    assert!(no_loss.contains("compile.loss: missing"), "{no_loss}");
}

/// The f32 tensors of a safetensors file, by name.
fn tensors(path: &Path) -> Vec<(String, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut all: Vec<(String, Vec<f32>)> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let values = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            (name, values)
        })
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// `mpirun -np 2 kiln-steps train CONFIG --run-dir RUN --strategy multi_worker_mirrored`
/// (as root too, more processes than cores allowed), one thread per worker.
fn mpirun(config: &Path, run: &Path) -> Output {
    let found = Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "mpirun is not installed: run scripts/setup.sh (it installs Debian's openmpi-bin)"
    );
    Command::new("mpirun")
        .args(["-np", "2", "--oversubscribe", "-x", "RAYON_NUM_THREADS"])
        .arg(env!("CARGO_BIN_EXE_kiln-steps"))
        .arg("train")
        .arg(config)
        .arg("--run-dir")
        .arg(run)
        .args(["--strategy", "multi_worker_mirrored"])
        .env("RAYON_NUM_THREADS", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Trains example `name` on 128 images (2 steps an epoch) for 2 epochs, with 64 validation
/// images, on two MPI workers (one thread each) and on two mirrored replicas in one process,
/// and checks that `files` (the weights) and the history's `keys` agree.
fn mpi_trains_what_mirrored_trains(name: &str, files: &[&str], keys: &[&str]) {
    require_data();
    let dir = scratch(&format!("{name}-mpi"));
    let cfg = config(&dir, name);
    let shrunk = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("epochs = 3", "epochs = 2")
        .replace("take = 512", "take = 128")
        .replace("buffer_size = 512", "buffer_size = 128")
        .replace("take = 256", "take = 64");
    std::fs::write(&cfg, shrunk).unwrap();
    let (workers, replicas) = (dir.join("workers"), dir.join("replicas"));
    let o = mpirun(&cfg, &workers);
    assert!(o.status.success(), "{}", text(&o));
    let o = train(&cfg, &replicas, &["--num-replicas", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    // Each worker draws its noise as the in-process replica of its index does (seeded from
    // the step, the replica and the apply_gradients calls so far); only the order of float
    // sums differs.
    for file in files {
        let (a, b) = (tensors(&workers.join(file)), tensors(&replicas.join(file)));
        assert_eq!(a.len(), b.len());
        for ((name, x), (_, y)) in a.iter().zip(&b) {
            for (u, v) in x.iter().zip(y) {
                assert!(
                    (u - v).abs() <= 1e-4 * v.abs().max(1.0),
                    "{file} {name}: {u} vs {v}"
                );
            }
        }
    }
    let (hw, hr) = (history(&workers), history(&replicas));
    for key in keys {
        let (a, b) = (series(&hw, key), series(&hr, key));
        assert_eq!(a.len(), 2);
        for (u, v) in a.iter().zip(&b) {
            assert!((u - v).abs() <= 1e-4 * v.abs(), "{key}: {a:?} vs {b:?}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_vae_on_two_mpi_workers_trains_what_two_mirrored_replicas_train_in_one_process() {
    mpi_trains_what_mirrored_trains(
        "vae",
        &["model.safetensors", "part-decoder.safetensors"],
        &["loss", "kl_loss", "val_loss"],
    );
}

/// The generator's noise is drawn after the discriminator's update: replicas reseed there.
#[test]
fn the_dcgan_on_two_mpi_workers_trains_what_two_mirrored_replicas_train_in_one_process() {
    mpi_trains_what_mirrored_trains(
        "dcgan",
        &["model.safetensors", "part-generator.safetensors"],
        &["d_loss", "g_loss"],
    );
}
