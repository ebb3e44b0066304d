//! Issue 18's config reproducers, run through the real binary: values that cannot work are
//! config errors (exit 2) naming the key, never a hang (D1), an abort (D2), a thread storm
//! (D17) or a file written outside the run directory (D3); messages are never empty (D11) and
//! never carry terminal control characters (D12).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{require_data, scratch, text};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/fashion-mnist/cnn-pipeline.toml"
);

/// Runs `cmd`, failing the test if it is still running after 60 s (a hang).
fn run_bounded(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running after 60 s: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// The example pipeline config with `from` replaced by `to`, written to `dir`.
fn example_with(dir: &Path, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    assert!(text.contains(from), "the example no longer holds {from:?}");
    let path = dir.join("config.toml");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    path
}

fn data_bench(config: &Path) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.args(["data", "bench"]).arg(config).args(["--steps", "1"]);
    run_bounded(c)
}

/// Exit 2 and one `kiln: error:` line holding every one of `needles`.
fn assert_config_error(out: &Output, needles: &[&str]) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in: {err}");
    }
}

#[test]
fn huge_thread_counts_are_config_errors_not_hangs() {
    require_data();
    let dir = scratch("hostile-threads");
    let max = (8 * std::thread::available_parallelism().unwrap().get()).max(64);
    for n in ["4611686018427387904", "100000"] {
        let config = example_with(
            &dir,
            "num_parallel_calls = \"AUTOTUNE\"",
            &format!("num_parallel_calls = {n}"),
        );
        let out = data_bench(&config);
        let limit = format!("at most {max}");
        assert_config_error(&out, &["data.train.num_parallel_calls", n, &limit]);
    }
}

#[test]
fn impossible_buffers_are_config_errors_not_aborts() {
    require_data();
    let dir = scratch("hostile-buffers");
    let rescale =
        "map = [{ op = \"rescale\", scale = 0.00392156862745098, component = \"image\" }]";
    for (to, key) in [
        (
            "map = [{ op = \"one_hot\", depth = 1099511627776, component = \"label\" }]",
            "data.train.map[0].depth",
        ),
        (
            "map = [{ op = \"resize\", height = 100000, width = 100000, component = \"image\" }]",
            "data.train.map[0].height",
        ),
    ] {
        let out = data_bench(&example_with(&dir, rescale, to));
        assert_config_error(&out, &[key, "of memory available"]);
    }
    let prefetch = example_with(
        &dir,
        "prefetch = \"AUTOTUNE\"",
        "prefetch = 4611686018427387904",
    );
    assert_config_error(
        &data_bench(&prefetch),
        &["data.train.prefetch", "4611686018427387904", "can address"],
    );
}

#[test]
fn a_run_name_of_dot_dot_writes_nothing_outside_runs() {
    let dir = scratch("hostile-name");
    let config = example_with(
        &dir,
        "name = \"fashion-mnist-cnn-pipeline\"",
        "name = \"..\"",
    );
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.current_dir(&dir).arg("train").arg(&config);
    let before = std::fs::read(&config).unwrap();
    assert_config_error(
        &run_bounded(c),
        &["name", "\"..\"", "one plain directory name"],
    );
    assert_eq!(
        std::fs::read(&config).unwrap(),
        before,
        "config.toml was replaced"
    );
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["config.toml"], "files written next to the config");
}

#[test]
fn callback_paths_that_leave_the_run_dir_are_refused() {
    let dir = scratch("hostile-csvlogger");
    let config = example_with(
        &dir,
        "[model]",
        "[[callbacks]]\ntype = \"CSVLogger\"\nfilename = \"../../../escape.csv\"\n\n[model]",
    );
    let mut c = common::train_command(&config, &dir.join("run"), &[]);
    c.current_dir(&dir);
    assert_config_error(
        &run_bounded(c),
        &[
            "callbacks[0].filename",
            "../../../escape.csv",
            "leaves the run directory",
        ],
    );
    assert!(!dir.join("run").exists(), "the run directory was created");
}

#[test]
fn a_gpu_in_distribute_devices_without_a_gpu_backend_is_refused_and_writes_nothing() {
    require_data();
    let dir = scratch("hostile-gpu-devices");
    let config = example_with(
        &dir,
        "[model]",
        "[distribute]\nstrategy = \"mirrored\"\ndevices = [\"cpu\", \"gpu\"]\n\n[model]",
    );
    let mut c = common::train_command(&config, &dir.join("runs").join("run"), &[]);
    c.current_dir(&dir);
    // The tests' kiln has no GPU backend: the device's own reason, under the config key.
    assert_config_error(
        &run_bounded(c),
        &[
            "distribute.devices[1]",
            "\"gpu\": this kiln was built without a GPU backend",
            "\"cpu\" in [distribute] devices",
        ],
    );
    assert!(
        !dir.join("runs").exists(),
        "the run directory was left behind"
    );
}

#[test]
fn a_config_cut_after_an_equals_sign_says_what_is_missing() {
    let dir = scratch("hostile-cut");
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    let cut = &text[..text.find("batch_size = 128").unwrap() + "batch_size = ".len()];
    let config = dir.join("cut.toml");
    std::fs::write(&config, cut).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.args(["data", "bench"]).arg(&config);
    let out = run_bounded(c);
    let line = cut.matches('\n').count() + 1;
    assert_config_error(&out, &[&format!("line {line}: "), "needs a value"]);
}

#[test]
fn keys_with_bidi_overrides_are_escaped_in_messages() {
    let dir = scratch("hostile-bidi");
    // A quoted key holding U+202E (right-to-left override) and ESC, as TOML escapes.
    let config = example_with(&dir, "seed = 42", "\"se\\u202Eed\\u001B[2J\" = 42");
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.args(["data", "bench"]).arg(&config);
    let out = run_bounded(c);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("se\\u{202e}ed\\u{1b}[2J"), "{err}");
    assert!(
        !err.contains('\u{202e}') && !err.contains('\u{1b}'),
        "{err:?}"
    );
}

#[test]
fn batch_size_auto_is_not_taken_for_a_huge_batch() {
    require_data();
    let dir = scratch("hostile-auto");
    let fit = "epochs = 10\nbatch_size = 128";
    let auto = example_with(&dir, fit, "epochs = 10\nbatch_size = \"auto\"");
    let out = data_bench(&auto);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let huge = example_with(&dir, fit, "epochs = 10\nbatch_size = 4611686018427387904");
    assert_config_error(
        &data_bench(&huge),
        &["fit.batch_size", "4611686018427387904"],
    );
}

#[test]
fn a_shuffle_buffer_of_mapped_elements_is_counted_at_load() {
    require_data();
    let dir = scratch("hostile-shuffle");
    let rescale =
        "map = [{ op = \"rescale\", scale = 0.00392156862745098, component = \"image\" }]";
    let one_hot = "map = [{ op = \"one_hot\", depth = 2000000, component = \"label\" }]";
    let out = data_bench(&example_with(&dir, rescale, one_hot));
    assert_config_error(
        &out,
        &["data.train.shuffle.buffer_size", "54000", "2000000 values"],
    );
}

#[test]
fn checkpoint_names_no_file_system_takes_are_refused_at_load() {
    let dir = scratch("hostile-filepath");
    for filepath in [
        "x{val_loss:.100000000f}.safetensors",
        "x{epoch:99999999999d}.safetensors",
    ] {
        let entry = format!(
            "[[callbacks]]\ntype = \"ModelCheckpoint\"\nfilepath = \"{filepath}\"\n\n[model]"
        );
        let config = example_with(&dir, "[model]", &entry);
        let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
        c.args(["data", "bench"]).arg(&config);
        assert_config_error(&run_bounded(c), &["callbacks[0]", "above 255"]);
    }
}
