//! The `mgbench` command line: parses arguments into the library crates' configs, runs them,
//! prints results and picks the exit code. All logic lives in the library crates.

/// `eprintln!` that never panics: std's panics when stderr is closed (`mgbench capture ...
/// 2>&1 | head -1`), which stopped a capture after its trace was written, with exit 101 and
/// no word; messages to a closed stderr are dropped, as other Unix tools drop them.
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

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
