//! Fuzz target for the TOML config parser (issue 18): mutations of the example configs through
//! `RunConfig::from_toml_str` and the checks `kiln train` runs before it touches a file. Every
//! input must give a config or an error — no panic, no hang (kiln-fuzz fails the test on
//! either). `KILN_FUZZ_CASES=100000 cargo test --release --workspace --test fuzz_config` for
//! the long run.

use std::path::Path;

use kiln::RunConfig;
use kiln_fuzz::{Limits, fuzz};

fn seeds() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut files: Vec<_> = ["bert-large.toml", "resnet50.toml"]
        .iter()
        .map(|f| root.join(f))
        .collect();
    for entry in std::fs::read_dir(root.join("fashion-mnist")).unwrap() {
        files.push(entry.unwrap().path());
    }
    files.sort();
    let seeds: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(
        seeds.len() >= 8,
        "the example configs are missing: {files:?}"
    );
    seeds
}

#[test]
fn fuzz_config() {
    let report = fuzz("config", seeds(), Limits::new(20_000), |bytes: &[u8]| {
        let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
        let cfg = RunConfig::from_toml_str(text).map_err(|e| e.to_string())?;
        // What `kiln train` resolves next, before it writes anything.
        let _ = cfg.default_run_dir();
        let _ = cfg.to_toml();
        Ok::<_, String>(())
    });
    // The unchanged examples parse; most mutations are refused.
    assert!(report.accepted >= 8, "{report:?}");
    assert!(report.refused > report.cases / 4, "{report:?}");
}
