//! mgbench-report: every mgbench result as a figure, in one self-contained HTML page, and the
//! comparison of machines. It reads records (replay, STREAM, MPI sweeps, GPU sweeps),
//! pattern files and analyses; it never measures.
//!
//! - [`inputs`]: finds and recognises input files (and their sha256).
//! - [`compare`]: machine-to-machine comparison (`mgbench compare`, and figure 2).
//! - [`figures`]: the figures, one module per family; [`svg`]: the plotting primitives.
//! - [`html`]: the page.
//!
//! ```no_run
//! use mgbench_report::{build, ReportConfig};
//!
//! let cfg = ReportConfig::new(vec!["results".into()], "mgbench report results".into());
//! let report = build(&cfg).unwrap();
//! std::fs::write("report.html", &report.html).unwrap();
//! println!("{} figures", report.figures.len());
//! ```

pub mod compare;
pub mod figures;
pub mod html;
pub mod inputs;
pub mod svg;
mod sys;

use std::path::PathBuf;

use figures::{Ids, Section};
use inputs::Inputs;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("no inputs given: pass results files or directories (e.g. results/), pattern files, analyses or traces")]
    NoInputs,
    #[error("cannot read {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path}: {why}")]
    Unreadable { path: PathBuf, why: String },
    #[error("no replay records to compare: give results files (results/replay-*.json) of two or more machines")]
    NothingToCompare,
    #[error("--baseline {given} names no machine in the results (machines: {machines})")]
    NoSuchBaseline { given: String, machines: String },
    #[error("the inputs hold nothing to draw ({0}): give replay results, STREAM results, MPI sweeps, pattern files, analyses or traces")]
    NothingToReport(String),
    #[error("cannot encode the output: {0}")]
    Encode(String),
}

/// What to report on.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportConfig {
    pub inputs: Vec<PathBuf>,
    /// The machine the comparison figures are relative to (default: the first).
    pub baseline: Option<String>,
    /// Shown in the header (the command that made the report).
    pub command_line: String,
    /// Threads for analysing traces given as inputs.
    pub threads: usize,
    /// Analyse a damaged trace's accesses before the damage instead of refusing it.
    pub allow_damaged: bool,
}

impl ReportConfig {
    pub fn new(inputs: Vec<PathBuf>, command_line: String) -> ReportConfig {
        ReportConfig {
            inputs,
            baseline: None,
            command_line,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            allow_damaged: false,
        }
    }
}

/// One figure of a built report: its id and how many data marks it drew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FigureSummary {
    pub id: String,
    pub marks: usize,
}

/// A built report.
pub struct Report {
    pub html: String,
    pub figures: Vec<FigureSummary>,
    pub notes: Vec<String>,
}

/// Reads the inputs and builds the page.
pub fn build(cfg: &ReportConfig) -> Result<Report, ReportError> {
    let inputs = inputs::load(
        &cfg.inputs,
        inputs::TraceOptions {
            threads: cfg.threads,
            allow_damaged: cfg.allow_damaged,
        },
    )?;
    render(&inputs, cfg)
}

/// Builds the page from inputs already read.
pub fn render(inputs: &Inputs, cfg: &ReportConfig) -> Result<Report, ReportError> {
    let mut ids = Ids::default();
    let mut sections: Vec<Section> = Vec::new();
    let mut notes = inputs.notes.clone();
    // MPI runs and GPU sweeps have figures of their own; machines compare on single runs.
    let single = compare::single_runs(&inputs.records);
    let cmp = if single.is_empty() {
        None
    } else {
        Some(compare::compare(
            &single,
            &inputs.streams,
            &inputs.gpu_streams,
            cfg.baseline.as_deref(),
        )?)
    };
    if let Some(c) = &cmp {
        if let Some(s) = figures::machines::section(c, &mut ids) {
            sections.push(s);
        }
    }
    if !single.is_empty() {
        sections.extend(figures::machine::sections(&single, cmp.as_ref(), &mut ids));
    }
    if let Some(s) = figures::mpi::section(&inputs.mpi_sweeps, &inputs.records, &mut ids) {
        sections.push(s);
    }
    if let Some(s) = figures::gpu::section(&inputs.records, &inputs.gpu_streams, &mut ids) {
        sections.push(s);
    }
    sections.extend(figures::pattern::sections(&inputs.patterns, &mut ids));
    sections.extend(figures::locality::sections(&inputs.analyses, &mut ids));
    sections.extend(figures::rdx::sections(&inputs.reuses, &mut ids));
    sections.extend(figures::affinity::sections(&inputs.affinities, &mut ids));
    sections.extend(figures::affinity::comparison_sections(
        &inputs.affinity_comparisons,
        &mut ids,
    ));
    sections.extend(figures::affinity::zoom_sections(&inputs.zooms, &mut ids));
    if sections.is_empty() && inputs.streams.is_empty() && inputs.gpu_streams.is_empty() {
        return Err(ReportError::NothingToReport(format!(
            "{} file(s) read",
            inputs.files.len()
        )));
    }
    if !inputs.streams.is_empty() || !inputs.gpu_streams.is_empty() {
        sections.push(stream_section(inputs, &mut ids));
    }
    if let Some(c) = &cmp {
        notes.extend(c.warnings.iter().cloned());
    }
    let mut hosts: Vec<String> = Vec::new();
    let mut add_host = |h: &mgbench_replay::record::Host| {
        let s = format!("{} ({}, {} CPUs)", h.hostname, h.cpu_model, h.cores);
        if !hosts.contains(&s) {
            hosts.push(s);
        }
    };
    for r in &inputs.records {
        add_host(&r.host);
    }
    for s in &inputs.streams {
        add_host(&s.host);
    }
    for g in &inputs.gpu_streams {
        add_host(&g.host);
    }
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let header = html::Header {
        version: env!("CARGO_PKG_VERSION"),
        command_line: &cfg.command_line,
        date: &date,
        hosts,
        inputs: &inputs.files,
        notes: &notes,
    };
    let html = html::page(&header, &sections);
    let figures = sections
        .iter()
        .flat_map(|s| s.figures.iter())
        .map(|f| FigureSummary {
            id: f.id.clone(),
            marks: f.svg.marks,
        })
        .collect();
    Ok(Report {
        html,
        figures,
        notes,
    })
}

/// STREAM results as a table (they are the reference lines of the other figures).
fn stream_section(inputs: &Inputs, ids: &mut Ids) -> Section {
    use figures::{num, Table};
    let mut t = Table::new(&[
        "host",
        "threads",
        "ranks",
        "elements",
        "copy_mbs",
        "scale_mbs",
        "add_mbs",
        "triad_mbs",
        "validated",
        "time",
    ]);
    for s in &inputs.streams {
        t.push(vec![
            s.host.hostname.clone(),
            s.threads.to_string(),
            s.ranks.to_string(),
            s.elements.to_string(),
            num(s.copy_mbs),
            num(s.scale_mbs),
            num(s.add_mbs),
            num(s.triad_mbs),
            s.validated.to_string(),
            s.time.clone(),
        ]);
    }
    let mut tables = vec![("STREAM (CPU)".to_string(), t)];
    if !inputs.gpu_streams.is_empty() {
        let mut g = Table::new(&[
            "host",
            "device",
            "elements",
            "copy_mbs",
            "mul_mbs",
            "add_mbs",
            "triad_mbs",
            "dot_mbs",
            "validated",
        ]);
        for s in &inputs.gpu_streams {
            g.push(vec![
                s.host.hostname.clone(),
                s.device.name.clone(),
                s.elements.to_string(),
                num(s.copy_mbs),
                num(s.mul_mbs),
                num(s.add_mbs),
                num(s.triad_mbs),
                num(s.dot_mbs),
                s.validated.to_string(),
            ]);
        }
        tables.push(("STREAM (GPU, BabelStream)".to_string(), g));
    }
    Section {
        id: ids.make("stream"),
        title: "STREAM baselines".into(),
        intro: "McCalpin's STREAM (CPU) and BabelStream (GPU) results given as inputs; MB = 10^6 bytes.".into(),
        figures: Vec::new(),
        tables,
    }
}
