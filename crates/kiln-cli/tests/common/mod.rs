//! What the `kiln` binary's integration tests share: the Fashion-MNIST location, scratch
//! directories and the `kiln train` command line.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `scripts/setup.sh` installs Fashion-MNIST (Debian's dataset-fashion-mnist).
pub const DATA: &str = "/usr/share/datasets/fashion-mnist";

/// Fails the test with the fix when the dataset is missing.
pub fn require_data() {
    assert!(
        Path::new(DATA).join("t10k-labels-idx1-ubyte.gz").is_file(),
        "Fashion-MNIST is missing: run scripts/setup.sh"
    );
}

/// An empty directory `kiln-cli-<name>-<pid>` under the system's temporary directory.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `kiln train CONFIG --run-dir RUN EXTRA...`, not yet run.
pub fn train_command(config: &Path, run: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.arg("train")
        .arg(config)
        .arg("--run-dir")
        .arg(run)
        .args(extra);
    c
}
