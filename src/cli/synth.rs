//! `mgbench synth` and `mgbench profile` (capture + synth + replay).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser};
use mgbench_capture::symbols::{short_path, without_parameters};
use mgbench_synth::analyze::{analyze, AnalyzeConfig};
use mgbench_synth::{apex_entry, pattern_file, synthesize, SynthConfig, SynthReport, Verdict};

use super::progress::{Display, Style};
use super::replay::non_negative;
use super::TempFile;
use mgbench_replay::results::write_atomically;

#[derive(Debug, Args)]
pub struct SynthArgs {
    /// The trace to mine (from `mgbench capture` or `mgbench import`).
    trace: PathBuf,
    #[command(flatten)]
    opts: SynthOptions,
    /// Pattern file to write (default: patterns/PROGRAM.json).
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Print every candidate and the filter that kept or dropped it.
    #[arg(long)]
    explain: bool,
    /// Also fit an Apex-MAP proxy (mgbench analyze) and add it as an "apex" entry.
    #[arg(long)]
    apex: bool,
}

/// Thresholds (GS Patterns' Table 1), shared by `synth` and `profile`.
#[derive(Debug, Args)]
pub struct SynthOptions {
    /// Keep the top N, by flagged windows, of the candidates the other filters keep.
    #[arg(long, default_value_t = 10, value_parser = non_negative)]
    top: usize,
    /// Rows (instruction addresses) per window.
    #[arg(long, default_value_t = 1024, value_parser = non_negative)]
    window_rows: usize,
    /// Bytes of indices that fill a row (8 x 8-byte or 16 x 4-byte accesses).
    #[arg(long, default_value_t = 64, value_parser = non_negative)]
    row_bytes: usize,
    /// Drop candidates executed fewer times.
    #[arg(long, default_value_t = 1024, value_parser = non_negative)]
    min_instances: usize,
    /// Drop candidates with fewer unique index distances...
    #[arg(long, default_value_t = 6, value_parser = non_negative)]
    min_unique_distances: usize,
    /// ...unless half their distances are at least this far (in elements).
    #[arg(long, default_value_t = 513, value_parser = non_negative)]
    oob_distance: usize,
    /// Keep candidates whose instruction has no symbol.
    #[arg(long)]
    keep_unsymbolized: bool,
    /// Keep candidates whose every access is in the stack of the thread that made it
    /// (pushes, pops and locals at varying call depths).
    #[arg(long)]
    keep_stack: bool,
    /// Keep candidates in the dynamic loader's code (ld-linux: relocations and symbol lookups
    /// at start-up, which a debug file names)
    #[arg(long)]
    keep_loader: bool,
    /// Only this thread's accesses (thread ids as in `trace info`).
    #[arg(long, value_parser = non_negative)]
    thread: Option<usize>,
    /// Longest pattern written; longer non-repeating streams are truncated (and say so).
    #[arg(long, default_value_t = 1 << 20, value_parser = non_negative)]
    max_pattern: usize,
    /// Mine the readable part of a damaged trace instead of refusing it.
    #[arg(long)]
    allow_damaged: bool,
    /// Threads decoding the trace (default: one per CPU).
    #[arg(long = "decode-threads", value_parser = non_negative)]
    decode_threads: Option<usize>,
}

impl SynthOptions {
    fn config(&self) -> SynthConfig {
        SynthConfig {
            window_rows: self.window_rows,
            row_bytes: self.row_bytes,
            top: self.top,
            min_instances: self.min_instances as u64,
            min_unique_distances: self.min_unique_distances,
            oob_distance: self.oob_distance as u64,
            keep_unsymbolized: self.keep_unsymbolized,
            keep_stack: self.keep_stack,
            keep_loader: self.keep_loader,
            thread: self.thread.map(|t| t as u32),
            max_pattern: self.max_pattern,
            allow_damaged: self.allow_damaged,
            threads: self
                .decode_threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
            progress: Default::default(),
        }
    }
}

fn program_stem(report: &SynthReport) -> String {
    report
        .program
        .as_deref()
        .and_then(|p| Path::new(p).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".into())
}

fn default_output(report: &SynthReport) -> PathBuf {
    PathBuf::from("patterns").join(format!("{}.json", program_stem(report)))
}

fn explain(report: &SynthReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{} accesses; {} instruction/kind pairs were regular (-1/0/+1 only); {} candidate(s):",
        report.accesses,
        report.regular,
        report.candidates.len()
    )?;
    writeln!(
        out,
        "{:<14} {:<8} {:>9} {:>12}  {:<40} verdict",
        "instruction", "kind", "windows", "instances", "source"
    )?;
    for c in &report.candidates {
        let verdict = match &c.verdict {
            Verdict::Kept => "kept".to_string(),
            Verdict::Regular => "dropped: regular".to_string(),
            Verdict::Unsymbolized => "dropped: no symbol".to_string(),
            Verdict::Stack => "dropped: in the stack only".to_string(),
            Verdict::Loader => "dropped: in the dynamic loader".to_string(),
            Verdict::NotInTop { rank, top } => {
                format!("dropped: rank {rank}, not in the top {top}")
            }
            Verdict::FewInstances { instances, min } => {
                format!("dropped: {instances} instances < {min}")
            }
            Verdict::FewDistances {
                unique_distances,
                min,
                oob_fraction,
            } => format!(
                "dropped: {unique_distances} unique distances < {min} and {:.0}% far jumps < 50%",
                100.0 * oob_fraction
            ),
        };
        writeln!(
            out,
            "{:<14} {:<8} {:>9} {:>12}  {:<40} {verdict}",
            c.ip,
            c.kind.as_str(),
            c.flagged_windows,
            c.instances,
            c.source.describe_instruction()
        )?;
    }
    Ok(())
}

/// Mines a trace and writes the pattern file; returns its path (None when nothing survived).
fn mine(
    trace: &Path,
    opts: &SynthOptions,
    output: Option<PathBuf>,
    show: bool,
    with_apex: bool,
    keep_unnamed_in_top: bool,
) -> Result<(SynthReport, Option<PathBuf>)> {
    let mine_with = |cfg: &SynthConfig| {
        let _bar = Display::start(&cfg.progress, Style::Bytes);
        synthesize(trace, cfg)
    };
    let mut cfg = opts.config();
    let mut report = mine_with(&cfg)?;
    let unnamed = report
        .candidates
        .iter()
        .filter(|c| c.verdict == Verdict::Unsymbolized)
        .count();
    // Why profile mines again keeping the candidates without a symbol, if it does.
    let again = if !keep_unnamed_in_top {
        None
    } else if report.patterns.is_empty() && unnamed > 0 {
        // A stripped program names none of its own code, so the paper's filter leaves nothing
        // to replay; profile keeps what it dropped rather than stopping there.
        Some(format!(
            "no named pattern survived the filters ({}); mining again with \
             --keep-unsymbolized, so that the {unnamed} candidate(s) without a symbol are \
             named by their file and address there",
            report.filter_summary()
        ))
    } else if report.unnamed_in_top > 0 {
        // Nor does it where the C library's debug file names malloc's internals: Debian's
        // `bc` spent its gathers in its own (stripped) code, and profile replayed malloc's.
        let mut files: Vec<String> = Vec::new();
        for c in report
            .candidates
            .iter()
            .filter(|c| c.verdict == Verdict::Unsymbolized)
        {
            let f = c
                .source
                .object
                .as_deref()
                .map_or("no file".to_string(), |o| short_path(o).to_string());
            if !files.contains(&f) {
                files.push(f);
            }
        }
        Some(format!(
            "{} candidate(s) without a symbol rank among the top {} (code in {}, which no \
             symbol or debug file names); mining again with --keep-unsymbolized, so that \
             profile replays the busiest patterns, those named by their file and address there",
            report.unnamed_in_top,
            cfg.top,
            super::list_names(&files, 3)
        ))
    } else {
        None
    };
    if let Some(why) = again {
        eprintln!("mgbench: {why}");
        cfg.keep_unsymbolized = true;
        report = mine_with(&cfg)?;
    }
    let apex = if with_apex {
        let _bar = Display::start(&cfg.progress, Style::Bytes);
        let locality = analyze(
            trace,
            &AnalyzeConfig {
                thread: cfg.thread,
                allow_damaged: cfg.allow_damaged,
                threads: cfg.threads.max(1),
                progress: cfg.progress.clone(),
                ..AnalyzeConfig::default()
            },
        )?;
        let fit = locality.program_locality.apex.clone().ok_or_else(|| {
            anyhow::anyhow!(
                "internal: the Apex-MAP fit of {} gave no result",
                trace.display()
            )
        })?;
        eprintln!(
            "mgbench: Apex-MAP proxy: L = {}, K = {} (spatial {:.3}, temporal {:.3}; residual {:.3})",
            fit.l,
            fit.k,
            locality.program_locality.spatial_score,
            locality.program_locality.temporal_score,
            fit.residual
        );
        Some(apex_entry(&program_stem(&report), &locality, &fit))
    } else {
        None
    };
    if show {
        // Buffered (stderr is not), and flushed before the notes that follow.
        let mut err = std::io::BufWriter::new(std::io::stderr().lock());
        explain(&report, &mut err)?;
        err.flush()?;
    }
    for n in &report.notes {
        eprintln!("mgbench: note: {n}");
    }
    if report.patterns.is_empty() && apex.is_none() {
        eprintln!(
            "mgbench: no gather/scatter pattern survived the filters in {} ({}); nothing written. \
             Run with --explain to see every candidate, or relax the thresholds.",
            trace.display(),
            report.filter_summary()
        );
        return Ok((report, None));
    }
    let out = output.unwrap_or_else(|| default_output(&report));
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    if report.patterns.is_empty() {
        eprintln!(
            "mgbench: no gather/scatter pattern survived the filters ({}); writing the Apex-MAP entry alone",
            report.filter_summary()
        );
    }
    let json = pattern_file(&report.patterns, apex.as_ref())?;
    write_atomically(&out, json.as_bytes())?;
    eprintln!(
        "mgbench: {} pattern(s){} from {} accesses -> {}",
        report.patterns.len(),
        if apex.is_some() {
            " and an Apex-MAP entry"
        } else {
            ""
        },
        report.accesses,
        out.display()
    );
    for p in &report.patterns {
        eprintln!(
            "mgbench:   {:<32} {:<8} {:>8} indices x {:<6} delta {:<6} {}",
            p.name,
            p.kernel.as_str(),
            p.pattern.len(),
            p.count,
            p.delta,
            p.compression
        );
    }
    Ok((report, Some(out)))
}

pub fn synth(args: SynthArgs) -> Result<i32> {
    mine(
        &args.trace,
        &args.opts,
        args.output,
        args.explain,
        args.apex,
        false,
    )?;
    Ok(0)
}

#[derive(Debug, Args)]
#[command(trailing_var_arg = true)]
pub struct ProfileArgs {
    /// Record every access (default: sampled).
    #[arg(long)]
    full: bool,
    /// Capture backend (as `mgbench capture --backend`; default auto).
    #[arg(short = 'b', long, value_enum, default_value_t = super::capture::Backend::Auto)]
    backend: super::capture::Backend,
    /// Record only while FUNCTION runs (repeatable).
    #[arg(long, value_name = "FUNCTION")]
    roi: Vec<String>,
    /// Keep the trace here (default: a temporary file, removed afterwards).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Pattern file to write (default: patterns/PROGRAM.json).
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    #[command(flatten)]
    opts: SynthOptions,
    /// Also fit an Apex-MAP proxy and replay it next to the patterns.
    #[arg(long)]
    apex: bool,
    /// Replay threads (default: one per CPU).
    #[arg(short = 't', long, value_parser = non_negative)]
    threads: Option<usize>,
    /// Timed replay runs per pattern.
    #[arg(short = 'R', long, value_parser = non_negative)]
    runs: Option<usize>,
    /// Compact every pattern's long distances (as `mgbench replay --compact-gaps`). Without
    /// it, only the patterns that would not fit in memory as they are (a program's accesses
    /// can span its whole address space) are compacted, with a bound of 2MiB, and the
    /// replay says so.
    #[arg(long, value_name = "BYTES", num_args = 0..=1, default_missing_value = "2MiB", value_parser = super::replay::size)]
    compact_gaps: Option<u64>,
    /// Program to profile, and its arguments.
    #[arg(
        value_name = "PROGRAM [ARGS]...",
        trailing_var_arg = true,
        required = true
    )]
    command: Vec<OsString>,
}

pub fn profile(args: ProfileArgs) -> Result<i32> {
    let temp;
    let trace = match &args.trace {
        Some(t) => t.clone(),
        None => {
            temp = TempFile::new("mgbench-profile", "mgbt");
            temp.path.clone()
        }
    };
    let mut capture = vec![OsString::from("capture"), "-o".into(), trace.clone().into()];
    if args.full {
        capture.push("--full".into());
    }
    capture.push("--backend".into());
    capture.push(
        match args.backend {
            super::capture::Backend::Auto => "auto",
            super::capture::Backend::Qemu => "qemu",
            super::capture::Backend::Ptrace => "ptrace",
            super::capture::Backend::Pt => "pt",
        }
        .into(),
    );
    for r in &args.roi {
        capture.push("--roi".into());
        capture.push(r.into());
    }
    capture.push("--".into());
    capture.extend(args.command.iter().cloned());
    let cli = super::Cli::try_parse_from(std::iter::once(OsString::from("mgbench")).chain(capture))
        .context("internal: capture arguments")?;
    eprintln!("mgbench: [1/3] capture");
    let status = super::run(cli)?;
    if status != 0 {
        eprintln!("mgbench: the program exited with status {status}; mining what was recorded");
    }
    eprintln!("mgbench: [2/3] synth");
    let (report, file) = mine(&trace, &args.opts, args.output, false, args.apex, true)?;
    let Some(file) = file else {
        bail!("nothing to replay: {} has no irregular gather/scatter pattern that passes the filters ({})", args.command[0].to_string_lossy(), report.filter_summary());
    };
    eprintln!("mgbench: [3/3] replay (with STREAM)");
    let mut replay = vec![OsString::from("replay"), file.into()];
    if let Some(t) = args.threads {
        replay.push("--threads".into());
        replay.push(t.to_string().into());
    }
    if let Some(r) = args.runs {
        replay.push("--runs".into());
        replay.push(r.to_string().into());
    }
    match args.compact_gaps {
        Some(bytes) => replay.push(format!("--compact-gaps={bytes}").into()),
        None => replay.push("--compact-gaps-if-needed".into()),
    }
    let cli = super::Cli::try_parse_from(std::iter::once(OsString::from("mgbench")).chain(replay))
        .context("internal: replay arguments")?;
    let super::Command::Replay(replay) = cli.command else {
        bail!("internal: replay arguments parsed as another command");
    };
    // The profiled program owned stdout; its output stays its own (`profile -- gzip -c F > F.gz`).
    super::replay::replay_to(*replay, super::replay::Sink::Stderr)?;
    eprintln!();
    eprintln!("Where the patterns come from:");
    for p in &report.patterns {
        eprintln!(
            "  {:<32} {} ({}), {} dynamic instances, element size {} B",
            p.name,
            {
                // Names without their parameters, as in the patterns' names (GROMACS's
                // kernels' signatures made each line 250 characters).
                let short = without_parameters;
                match (&p.source.inlined, &p.source.function) {
                    (Some(i), Some(f)) => format!("{}, inlined in {}", short(i), short(f)),
                    (Some(i), None) => short(i).to_string(),
                    (None, Some(f)) => short(f).to_string(),
                    (None, None) => match &p.source.unnamed_function {
                        Some(f) => format!("no symbol, in {f}"),
                        None => "no symbol".to_string(),
                    },
                }
            },
            match (&p.source.file, p.source.line, &p.source.place) {
                (Some(f), Some(l), _) => format!("{f}:{l}"),
                (_, _, Some(place)) => place.clone(),
                _ => p.source.ip.clone(),
            },
            p.instances,
            p.element_size
        );
    }
    Ok(status)
}
