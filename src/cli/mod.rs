//! Argument definitions (clap) and their translation into library configs; one module per
//! stage. Each command returns the process exit status.

mod affinity;
mod analyze;
mod capture;
mod progress;
mod replay;
mod report;
mod reuse;
mod synth;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "mgbench",
    version,
    about = "Turn the memory behaviour of real programs into portable benchmarks",
    long_about = None
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Draw no progress bars (they are drawn on stderr only when it is a terminal).
    #[arg(short = 'q', long, global = true)]
    quiet: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Record a memory-access trace of an unmodified x86-64 program.
    Capture(Box<capture::CaptureArgs>),
    /// Inspect a trace: `trace info FILE`, `trace dump FILE`.
    #[command(subcommand)]
    Trace(capture::TraceCommand),
    /// Convert a trace from another tool (gs_patterns, Valgrind lackey, MemGaze).
    Import(capture::ImportArgs),
    /// Mine a trace for gather/scatter patterns and write them as Spatter JSON.
    Synth(Box<synth::SynthArgs>),
    /// Locality of a trace: spatial/temporal scores, reuse distances, footprint, and the
    /// Apex-MAP (L, K) that stands in for it.
    Analyze(Box<analyze::AnalyzeArgs>),
    /// Capture + synth + replay in one go: where a program's irregular accesses are and what
    /// bandwidth they get on this machine (report on stderr: the program keeps stdout).
    Profile(Box<synth::ProfileArgs>),
    /// Run gather/scatter patterns (Spatter JSON) next to a STREAM baseline.
    Replay(Box<replay::ReplayArgs>),
    /// Run the STREAM benchmark (Copy, Scale, Add, Triad).
    Stream(replay::StreamArgs),
    /// Turn results, pattern files and analyses into one self-contained HTML page of figures.
    Report(report::ReportArgs),
    /// Featherlight reuse distance (RDX): sampled use/reuse pairs and their time and stack
    /// distance histograms, over a full trace (--rdx TRACE) or live (-- PROGRAM).
    Reuse(Box<reuse::ReuseArgs>),
    /// Location zoom: hot regions of heap, stack and data (with the code that touches
    /// them), and the execution-interval tree of footprint and reuse.
    Zoom(Box<affinity::ZoomArgs>),
    /// Spatial-temporal affinity (MemFriend) inside the hottest regions: which blocks
    /// anticipate which, how soon; --compare A.json B.json sets two variants side by side.
    Affinity(Box<affinity::AffinityArgs>),
    /// Compare machines: per pattern, bandwidth, ratio to a baseline, % of STREAM, and what
    /// STREAM alone would predict.
    Compare(report::CompareArgs),
}

/// The QEMU plugin, built and embedded by build.rs (empty where the build skipped it), and
/// the hash of its bytes that names its cached copy.
static PLUGIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libmgbench_qemu_plugin.so"));
const PLUGIN_HASH: &str = env!("MGBENCH_PLUGIN_HASH");

/// Runs the command; returns the exit status for the process.
pub fn run(cli: Cli) -> Result<i32> {
    // Every command that starts QEMU (capture, `profile`, live `reuse`) finds the plugin
    // built into this executable, wherever it was installed.
    mgbench_capture::backend::qemu::embed_plugin(PLUGIN, PLUGIN_HASH);
    // Sticky: `profile` runs capture and replay through here again without the flag.
    if cli.quiet {
        progress::set_quiet(true);
    }
    match cli.command {
        Command::Capture(args) => capture::capture(*args),
        Command::Trace(cmd) => capture::trace(cmd),
        Command::Import(args) => capture::import(args),
        Command::Synth(args) => synth::synth(*args),
        Command::Analyze(args) => analyze::analyze(*args),
        Command::Profile(args) => synth::profile(*args),
        Command::Replay(args) => replay::replay(*args),
        Command::Stream(args) => replay::stream(args).map(|()| 0),
        Command::Report(args) => report::report(args),
        Command::Compare(args) => report::compare(args),
        Command::Reuse(args) => reuse::run(*args),
        Command::Zoom(args) => affinity::run_zoom(*args),
        Command::Affinity(args) => affinity::run_affinity(*args),
    }
}

/// "a, b, c and 2 more": the first `shown` of `names`, and how many more there are.
pub(crate) fn list_names(names: &[impl AsRef<str>], shown: usize) -> String {
    let k = names.len();
    let first: Vec<&str> = names[..k.min(shown)].iter().map(AsRef::as_ref).collect();
    let first = first.join(", ");
    if k > shown {
        format!("{first} and {} more", k - shown)
    } else {
        first
    }
}

/// A path in the temporary directory, removed on drop.
pub(crate) struct TempFile {
    pub(crate) path: PathBuf,
}

impl TempFile {
    pub(crate) fn new(prefix: &str, ext: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!(
            "{prefix}-{}-{}.{ext}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        TempFile { path }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn names_are_listed_with_how_many_more() {
        assert_eq!(list_names(&["a"], 3), "a");
        assert_eq!(list_names(&["a", "b", "c"], 3), "a, b, c");
        assert_eq!(
            list_names(&["a", "b", "c", "d", "e"], 3),
            "a, b, c and 2 more"
        );
        assert_eq!(list_names(&[] as &[&str], 3), "");
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
