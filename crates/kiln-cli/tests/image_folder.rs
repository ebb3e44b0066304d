//! `kiln train` on an image folder holding a corrupt JPEG and a macOS `._x.jpg` companion
//! file: strict by default, `ignore_errors = true` to skip, hidden files never read.

use std::path::Path;
use std::process::Output;

mod common;
use common::{scratch, train_command};

/// The folder: `cats/x.jpg` (a 4x4 JPEG), `cats/._x.jpg` (AppleDouble bytes, what macOS writes
/// beside `x.jpg` on a non-Apple disk: not an image) and `dogs/broken.jpg` (a JPEG header,
/// then garbage).
fn image_folder(root: &Path) {
    let cats = root.join("cats");
    let dogs = root.join("dogs");
    std::fs::create_dir_all(&cats).unwrap();
    std::fs::create_dir_all(&dogs).unwrap();
    let pixels =
        image::RgbImage::from_fn(4, 4, |x, y| image::Rgb([40 * x as u8, 40 * y as u8, 90]));
    image::DynamicImage::ImageRgb8(pixels)
        .save_with_format(cats.join("x.jpg"), image::ImageFormat::Jpeg)
        .unwrap();
    let mut apple_double = vec![0x00, 0x05, 0x16, 0x07, 0x00, 0x02, 0x00, 0x00];
    apple_double.extend_from_slice(b"Mac OS X        ");
    apple_double.resize(82, 0);
    std::fs::write(cats.join("._x.jpg"), apple_double).unwrap();
    std::fs::write(
        dogs.join("broken.jpg"),
        b"\xff\xd8\xff\xe0 this is not the rest of a JPEG",
    )
    .unwrap();
}

/// A run config on `dir/data` with `extra` in its `[data.train]` table.
fn config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let text = format!(
        r#"name = "folder"
seed = 5
[data]
data_dir = {dir:?}
[data.train]
source = "image_folder"
files = "data"
image_size = [4, 4]
map = [{{ op = "rescale", scale = 0.00392156862745098 }}]
batch_size = 2
{extra}
[model]
layers = [{{ type = "Input", shape = [4, 4, 3] }}, {{ type = "Flatten" }}, {{ type = "Dense", units = 2 }}]
[compile]
optimizer = "sgd"
loss = {{ type = "sparse_categorical_crossentropy", from_logits = true }}
metrics = ["accuracy"]
[fit]
epochs = 2
"#,
        dir = dir.display().to_string()
    );
    let path = dir.join(format!("folder-{}.toml", extra.len()));
    std::fs::write(&path, text).unwrap();
    path
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn train(config: &Path, run: &Path) -> Output {
    train_command(config, run, &[]).output().unwrap()
}

#[test]
fn a_corrupt_jpeg_stops_a_strict_run_and_is_skipped_with_ignore_errors() {
    let dir = scratch("image-folder");
    image_folder(&dir.join("data"));

    // Strict (the default): the run fails naming the corrupt file and the key that skips it.
    // Had the hidden `cats/._x.jpg` been read, it would have failed first (it sorts first).
    let out = train(&config(&dir, ""), &dir.join("strict"));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot decode {}",
            dir.join("data/dogs/broken.jpg").display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("set ignore_errors = true"), "{stderr}");
    assert!(!stderr.contains("._x.jpg"), "{stderr}");

    // ignore_errors = true: trains on the one good image, each epoch reports the skip.
    let run = dir.join("skipping");
    let out = train(&config(&dir, "ignore_errors = true"), &run);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}\n{stdout}");
    let broken = dir.join("data/dogs/broken.jpg");
    let report = format!(
        "  ignore_errors: skipped 1 training record:\n    record 1: cannot decode {}: ",
        broken.display()
    );
    assert_eq!(
        stdout.matches(&report).count(),
        2,
        "one report per epoch:\n{stdout}"
    );
    assert_eq!(
        stdout.matches("\n1/1 - ").count(),
        2,
        "one batch (of 1 image) per epoch:\n{stdout}"
    );
    assert!(
        !stdout.contains("._x.jpg") && !stderr.contains("._x.jpg"),
        "{stdout}{stderr}"
    );
    let history: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("history.json")).unwrap()).unwrap();
    assert_eq!(
        history["history"]["skipped_records"],
        serde_json::json!([1.0, 1.0]),
        "{history}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
