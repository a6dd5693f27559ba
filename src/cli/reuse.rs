//! `mgbench reuse`: featherlight reuse distance (RDX) over a recorded trace (`--rdx TRACE`).
//! Live measurement (`mgbench reuse -- PROGRAM ARGS`) is refused with what to run instead.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use mgbench_replay::results::write_atomically;
use mgbench_synth::locality::rdx::{Attribution, RdxConfig};
use mgbench_synth::rdx::{reuse, Bin, GranularityReport, ReuseConfig, ReuseReport};

use super::progress::{Display, Style};
use super::replay::non_negative;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum AttributionArg {
    IpInterval,
    IpArmed,
    All,
    One,
    Ht,
}

#[derive(Debug, Args)]
pub struct ReuseArgs {
    /// Run RDX over this full trace (from `mgbench capture --full`) as if it were live.
    #[arg(long, value_name = "TRACE")]
    rdx: Option<PathBuf>,
    /// Accesses between samples on average (RDX used 500K to 10M). Default over a trace:
    /// its accesses / 1000, within 64..1M (about 1000 samples whatever its length: RDX
    /// needs periods near the reuse times it measures, many more samples only replace each
    /// other in the few registers).
    #[arg(long, value_parser = non_negative)]
    period: Option<usize>,
    /// Sample gaps are drawn from PERIOD x [1 - J, 1 + J].
    #[arg(long, default_value_t = 0.5, value_name = "J")]
    jitter: f64,
    /// Locations watched at once (x86: 4 debug registers).
    #[arg(long, default_value_t = 4, value_parser = non_negative)]
    watchpoints: usize,
    /// Seed of the sampling jitter and the reservoir's choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// What a trap stands for: the samples at the use's instruction since the register was
    /// last empty (ip-interval), or since its last replacement (ip-armed), every sample since
    /// it was last empty (all), or just itself (one).
    /// `ht` (the default) weighs each trap by the inverse of the probability that its sample
    /// was kept (Horvitz-Thompson), which is unbiased whatever the instruction mix.
    #[arg(long, value_enum, default_value_t = AttributionArg::Ht)]
    attribution: AttributionArg,
    /// Skip the exact histograms and the accuracy (a full pass of Olken's method).
    #[arg(long)]
    no_exact: bool,
    /// Use/reuse instruction pairs listed.
    #[arg(long, default_value_t = 20, value_parser = non_negative)]
    top: usize,
    /// Output on stdout.
    #[arg(short = 'f', long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also write the JSON report to FILE (atomically).
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Threads decoding the trace (default: one per CPU).
    #[arg(long = "decode-threads", value_parser = non_negative)]
    decode_threads: Option<usize>,
    /// A program to measure live (not available yet: see the error it gives).
    #[arg(trailing_var_arg = true, value_name = "PROGRAM")]
    program: Vec<String>,
}

impl ReuseArgs {
    fn rdx_config(&self, period: u64) -> RdxConfig {
        RdxConfig {
            period,
            jitter: self.jitter,
            watchpoints: self.watchpoints,
            seed: self.seed,
            attribution: match self.attribution {
                AttributionArg::IpInterval => Attribution::IpInterval,
                AttributionArg::IpArmed => Attribution::IpArmed,
                AttributionArg::All => Attribution::All,
                AttributionArg::One => Attribution::One,
                AttributionArg::Ht => Attribution::Ht,
            },
            ..RdxConfig::default()
        }
    }
}

/// Samples a trace-driven run aims for when no `--period` is given.
const AUTO_SAMPLES: u64 = 1_000;

/// The default period over a trace of `accesses`: about [`AUTO_SAMPLES`] samples.
fn auto_period(accesses: u64) -> u64 {
    (accesses / AUTO_SAMPLES).clamp(64, 1 << 20)
}

pub fn run(args: ReuseArgs) -> Result<i32> {
    let period = match (args.period, &args.rdx) {
        (Some(p), _) => p as u64,
        (None, Some(trace)) => mgbench_capture::trace::read_end_info(trace)
            .map_or(1 << 16, |e| auto_period(e.recorded)),
        (None, None) => 1 << 20,
    };
    let rdx = args.rdx_config(period);
    if let Err(e) = rdx.validate() {
        bail!("{e}");
    }
    if let Some(out) = &args.output {
        super::analyze::check_writable(out)?;
    }
    if !args.program.is_empty() {
        let prog = args.program.join(" ");
        if args.rdx.is_some() {
            bail!("give either --rdx TRACE or a program, not both (program: {prog})");
        }
        bail!(
            "live RDX is not available in this build: it needs PMU address sampling (PEBS or IBS, absent here) or QEMU with debug-register watchpoints, which mgbench does not drive yet; record the program once and run RDX over the trace instead:\n  mgbench capture --full -o reuse.mgbt -- {prog}\n  mgbench reuse --rdx reuse.mgbt"
        );
    }
    let report = match &args.rdx {
        None => bail!(
            "nothing to measure: give a full trace with --rdx TRACE (record one with mgbench capture --full -o TRACE -- PROGRAM)"
        ),
        Some(trace) => {
            let cfg = ReuseConfig {
                rdx,
                exact: !args.no_exact,
                top_pairs: args.top,
                threads: args
                    .decode_threads
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
                    .max(1),
                ..ReuseConfig::default()
            };
            let _bar = Display::start(&cfg.progress, Style::Bytes);
            reuse(trace, &cfg)?
        }
    };
    let mut report = report;
    if args.period.is_none() {
        report.notes.push(format!(
            "period {period} chosen for about {AUTO_SAMPLES} samples over {} accesses; --period sets it",
            report.accesses
        ));
    }
    emit(&report, args.format, args.output.as_ref())?;
    Ok(0)
}

/// Prints the report and writes its JSON.
pub(crate) fn emit(report: &ReuseReport, format: Format, output: Option<&PathBuf>) -> Result<()> {
    if let Some(path) = output {
        let mut json = serde_json::to_vec_pretty(report)?;
        json.push(b'\n');
        write_atomically(path, &json)?;
        eprintln!("mgbench: reuse report -> {}", path.display());
    }
    let mut out = std::io::stdout().lock();
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, report)?;
            writeln!(out)?;
        }
        Format::Table => table(report, &mut out)?,
    }
    Ok(())
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{:.2}", 100.0 * x))
}

fn bins(g: &GranularityReport, list: &[Bin], out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<12} {:>9} {:>9} {:>9} {:>9} {:>9}   (% of reuses)",
        format!("{} bin", g.granularity.unit()),
        "RDX time",
        "exact",
        "RDX stack",
        "exact",
        "model"
    )?;
    for b in list {
        let any = [Some(b.time), b.exact_time, Some(b.stack), b.exact_stack]
            .iter()
            .any(|v| v.is_some_and(|x| x > 0.00005));
        if !any {
            continue;
        }
        writeln!(
            out,
            "{:<12} {:>9} {:>9} {:>9} {:>9} {:>9}",
            b.label,
            pct(Some(b.time)),
            pct(b.exact_time),
            pct(Some(b.stack)),
            pct(b.exact_stack),
            pct(b.converted_exact_time)
        )?;
    }
    Ok(())
}

fn granularity(g: &GranularityReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: {} samples ({} dropped with every register busy), {} traps standing for {:.0} reuses, {:.0} uses without reuse; distinct {}: {:.0} estimated{}",
        g.granularity.unit(),
        g.samples,
        g.dropped,
        g.traps,
        g.attributed_reuses,
        g.no_reuse,
        g.granularity.unit(),
        g.distinct_estimate,
        g.distinct_exact
            .map(|n| format!(", {n} exact"))
            .unwrap_or_default()
    )?;
    bins(g, &g.rdx_bins, out)?;
    for (name, a) in [
        ("RDX's 20 bins", &g.accuracy_rdx_bins),
        ("log2 bins", &g.accuracy_fine_bins),
    ] {
        if let Some(a) = a {
            writeln!(
                out,
                "accuracy over {name}: time S {:.3} S^ {:.3}; stack S {:.3} S^ {:.3}; model alone (exact times converted) S {:.3} S^ {:.3}",
                a.time.s, a.time.s_hat, a.stack.s, a.stack.s_hat, a.conversion.s, a.conversion.s_hat
            )?;
        }
    }
    writeln!(out)
}

fn table(r: &ReuseReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: {} accesses in {} thread(s); RDX sampling every {} accesses (jitter {}), {} watchpoint(s), seed {}",
        r.trace, r.accesses, r.threads, r.config.period, r.config.jitter, r.config.watchpoints, r.config.seed
    )?;
    writeln!(out)?;
    granularity(&r.words, out)?;
    granularity(&r.lines, out)?;
    writeln!(
        out,
        "use -> reuse instruction pairs (by reuses they stand for):"
    )?;
    for p in &r.pairs {
        writeln!(
            out,
            "  {:>10.0} reuses, {:>5} traps, mean time {:>12}  {} {} -> {}",
            p.weight,
            p.traps,
            p.mean_time.map_or("none".into(), |t| format!("{t:.0}")),
            p.use_ip,
            p.use_source,
            match (&p.reuse_ip, &p.reuse_source) {
                (Some(ip), Some(src)) => format!("{ip} {src}"),
                _ => "(no reuse before the end)".into(),
            }
        )?;
    }
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}
