//! `kiln-custom`: the `kiln` command with this crate's layers registered.
//!
//!     cargo run --release -p kiln-custom-layer -- train examples/custom-layer/antirectifier.toml

use std::process::ExitCode;

fn main() -> ExitCode {
    if let Err(e) = kiln_custom_layer::register() {
        eprintln!("kiln: error: {e}");
        return ExitCode::from(2);
    }
    kiln_cli::main()
}
