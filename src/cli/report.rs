//! `mgbench report` (one self-contained HTML page of figures) and `mgbench compare` (machines
//! side by side in the terminal, JSON or CSV).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use mgbench_replay::results::write_atomically;
use mgbench_report::{build, ReportConfig};

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Results files or directories (results/), MPI sweep CSVs, pattern files, analyses
    /// (`mgbench analyze -o`) and traces (analysed here), in any mix.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(short = 'o', long, default_value = "report.html")]
    output: PathBuf,
    /// The machine the comparison figures are relative to (a hostname, or part of one).
    #[arg(long, value_name = "MACHINE")]
    baseline: Option<String>,
    /// Analyse a damaged trace (a capture that was killed mid-write) up to the damage
    /// instead of refusing it; its analysis says so.
    #[arg(long)]
    allow_damaged: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CompareFormat {
    Table,
    Json,
    Csv,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Replay results (files or directories) from two or more machines, with their STREAM
    /// results if replay ran with --no-stream.
    #[arg(required = true)]
    results: Vec<PathBuf>,
    /// The machine ratios are relative to (a hostname, or part of one; default: the first).
    #[arg(long, value_name = "MACHINE")]
    baseline: Option<String>,
    /// Output on stdout.
    #[arg(short = 'f', long, value_enum, default_value_t = CompareFormat::Table)]
    format: CompareFormat,
}

fn command_line() -> String {
    std::env::args_os()
        .map(|a| {
            let s = a.to_string_lossy().into_owned();
            if s.contains(' ') {
                format!("'{s}'")
            } else {
                s
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn report(args: ReportArgs) -> Result<i32> {
    super::analyze::check_writable(&args.output)?;
    let mut cfg = ReportConfig::new(args.inputs, command_line());
    cfg.baseline = args.baseline;
    cfg.allow_damaged = args.allow_damaged;
    let report = build(&cfg)?;
    write_atomically(&args.output, report.html.as_bytes())?;
    let marks: usize = report.figures.iter().map(|f| f.marks).sum();
    eprintln!(
        "mgbench: report -> {} ({} figure(s), {} data marks, {} bytes)",
        args.output.display(),
        report.figures.len(),
        marks,
        report.html.len()
    );
    for n in &report.notes {
        eprintln!("mgbench: note: {n}");
    }
    Ok(0)
}

pub fn compare(args: CompareArgs) -> Result<i32> {
    let inputs = mgbench_report::inputs::load(&args.results, Default::default())?;
    for n in &inputs.notes {
        eprintln!("mgbench: note: {n}");
    }
    let single = mgbench_report::compare::single_runs(&inputs.records);
    if single.len() < inputs.records.len() {
        eprintln!(
            "mgbench: note: {} MPI or GPU-sweep record(s) left out (mgbench report draws them)",
            inputs.records.len() - single.len()
        );
    }
    let cmp = mgbench_report::compare::compare(
        &single,
        &inputs.streams,
        &inputs.gpu_streams,
        args.baseline.as_deref(),
    )?;
    if cmp.machines.len() < 2 {
        eprintln!(
            "mgbench: warning: the results come from one machine ({}): nothing to compare it with",
            cmp.machines[0].name
        );
    }
    let text = match args.format {
        CompareFormat::Table => cmp.table(),
        CompareFormat::Csv => cmp.csv()?,
        CompareFormat::Json => {
            let mut s = serde_json::to_string_pretty(&cmp)?;
            s.push('\n');
            s
        }
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    Ok(0)
}
