//! `kiln-steps`: the `kiln` command with this crate's train steps registered (`dcgan`,
//! `vae`), chosen in a config by `compile.train_step`.
//!
//!     cargo run --release -p kiln-custom-train-step -- train examples/custom-train-step/dcgan.toml

use std::process::ExitCode;

fn main() -> ExitCode {
    if let Err(e) = kiln_custom_train_step::register() {
        eprintln!("kiln: error: {e}");
        return ExitCode::from(2);
    }
    kiln_cli::main()
}
