//! The `kiln` binary: the command lives in the library (`kiln_cli::main`), so that a program
//! with its own layers can be the same command.

fn main() -> std::process::ExitCode {
    kiln_cli::main()
}
