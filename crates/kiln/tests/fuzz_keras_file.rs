//! Fuzz target for the `.keras` reader (issue 24): mutations of Keras-written files
//! (tests/data/keras, from tests/reference/keras_files_reference.py) through
//! `kiln::keras_file::read_bytes`: the whole archive (and the legacy `.h5` files), its `config.json` and its
//! `model.weights.h5` (each mutated alone, repacked with the other entries intact). Every
//! input must give a model or an error, never a panic or a hang.
//! `KILN_FUZZ_CASES=100000 cargo test --release -p kiln --test fuzz_keras_file` for the long run.

use std::path::Path;

use kiln::keras_file::{CONFIG_ENTRY, WEIGHTS_ENTRY, read_bytes, zip_stored};
use kiln_fuzz::{Limits, fuzz};

const MODELS: [&str; 3] = ["cnn", "mixed", "text"];

fn file(name: &str) -> Vec<u8> {
    let file = if name.contains('.') {
        name.to_string()
    } else {
        format!("{name}.keras")
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/keras/{file}"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// An entry of a reference file, found by scanning the stored zip's local headers.
fn entry(name: &str, wanted: &str) -> Vec<u8> {
    let bytes = file(name);
    let mut at = 0;
    while at + 30 <= bytes.len() && bytes[at..at + 4] == [0x50, 0x4b, 0x03, 0x04] {
        let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
        let u32_at = |o: usize| {
            u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]) as usize
        };
        let (size, name_len, extra) = (u32_at(at + 18), u16_at(at + 26), u16_at(at + 28));
        let entry_name = String::from_utf8_lossy(&bytes[at + 30..at + 30 + name_len]).to_string();
        let start = at + 30 + name_len + extra;
        if entry_name == wanted {
            return bytes[start..start + size].to_vec();
        }
        at = start + size;
    }
    panic!("{name}.keras has no stored entry {wanted}")
}

fn check(bytes: Vec<u8>) -> Result<(), String> {
    read_bytes(Path::new("fuzz.keras"), bytes)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn fuzz_keras_archive() {
    // The legacy HDF5 files too (read_bytes tells them by their signature).
    let seeds = MODELS
        .iter()
        .map(|m| file(m))
        .chain(["cnn.h5", "mixed.h5"].map(file))
        .collect();
    let report = fuzz("keras-archive", seeds, Limits::new(3_000), |b: &[u8]| {
        check(b.to_vec())
    });
    assert!(report.accepted >= 5 && report.refused > 0, "{report:?}");
}

#[test]
fn fuzz_keras_config() {
    let seeds = MODELS.iter().map(|m| entry(m, CONFIG_ENTRY)).collect();
    let report = fuzz(
        "keras-config",
        seeds,
        Limits::new(3_000),
        |config: &[u8]| {
            let weights = entry("cnn", WEIGHTS_ENTRY);
            check(zip_stored(&[(CONFIG_ENTRY, config.to_vec()), (WEIGHTS_ENTRY, weights)]).unwrap())
        },
    );
    assert!(report.accepted >= 1 && report.refused > 0, "{report:?}");
}

#[test]
fn fuzz_keras_weights() {
    let seeds = MODELS.iter().map(|m| entry(m, WEIGHTS_ENTRY)).collect();
    let report = fuzz("keras-weights", seeds, Limits::new(3_000), |h5: &[u8]| {
        let config = entry("cnn", CONFIG_ENTRY);
        check(zip_stored(&[(CONFIG_ENTRY, config), (WEIGHTS_ENTRY, h5.to_vec())]).unwrap())
    });
    assert!(report.accepted >= 1 && report.refused > 0, "{report:?}");
}
