//! The `mgbench` command line: parses arguments into the library crates' configs, runs them,
//! prints results and picks the exit code. All logic lives in the library crates.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli::run(cli) {
        Ok(status) => ExitCode::from(u8::try_from(status.clamp(0, 255)).unwrap_or(1)),
        // A closed pipe (`mgbench trace dump ... | head`) ends output quietly, as in other
        // Unix tools.
        Err(err)
            if err.chain().any(|e| {
                e.downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("mgbench: {err:#}");
            ExitCode::FAILURE
        }
    }
}
