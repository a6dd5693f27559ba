//! `mgbench reuse`: featherlight reuse distance (RDX) over a recorded trace (`--rdx TRACE`),
//! or live while a program runs under QEMU (`mgbench reuse -- PROGRAM ARGS`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use mgbench_capture::symbols::short_source;
use mgbench_replay::results::write_atomically;
use mgbench_synth::locality::rdx::{
    distinct_from_last_uses, phases_allowed, Attribution, RdxConfig,
};
use mgbench_synth::rdx::{reuse, reuse_live, Bin, GranularityReport, ReuseConfig, ReuseReport};

use super::progress::{Display, Style};
use super::replay::non_negative;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// Where a live run measures (`--backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LiveBackend {
    /// `pmu` where the CPU has address sampling, else `qemu`.
    Auto,
    /// Under QEMU: an inline access counter and the machine's debug registers.
    Qemu,
    /// Natively, as RDX: PMU address sampling (Intel PEBS, AMD IBS) and debug registers.
    Pmu,
    /// Natively, sampling the kernel's page-fault event instead of the PMU: times in page
    /// faults, not accesses. A self-test of the native path on machines without a PMU.
    PageFaults,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum AttributionArg {
    IpInterval,
    IpArmed,
    All,
    One,
    Ht,
    Km,
}

#[derive(Debug, Args)]
pub struct ReuseArgs {
    /// Run RDX over this full trace (from `mgbench capture --full`) as if it were live.
    #[arg(long, value_name = "TRACE")]
    rdx: Option<PathBuf>,
    /// Accesses between samples on average (RDX used 500K to 10M). Default over a trace:
    /// its accesses / 1000, within 64..1M (about 1000 samples whatever its length: RDX
    /// needs periods near the reuse times it measures, many more samples only replace each
    /// other in the few registers). Default live: adaptive, from 4096, doubled every 128
    /// samples and lengthened so that samples that make QEMU retranslate cost about 5% of
    /// the run; each sample stands for its period's accesses.
    #[arg(long, value_parser = non_negative)]
    period: Option<usize>,
    /// Sample gaps are drawn from PERIOD x [1 - J, 1 + J].
    #[arg(long, default_value_t = 0.5, value_name = "J")]
    jitter: f64,
    /// Locations watched at once (x86: 4 debug registers, the most a live run can arm; a
    /// trace-driven run simulates up to 64).
    #[arg(long, default_value_t = 4, value_parser = non_negative)]
    watchpoints: usize,
    /// Seed of the sampling jitter and the reservoir's choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// What a trap stands for: the samples at the use's instruction since the register was
    /// last empty (ip-interval), or since its last replacement (ip-armed), every sample since
    /// it was last empty (all), or just itself (one).
    /// `ht` weighs each trap by the inverse of the probability that its sample was kept
    /// (Horvitz-Thompson), which is unbiased whatever the instruction mix. `km` (the
    /// default) counts every watched sample (Kaplan-Meier): one whose watch a replacement
    /// ended says its reuse is later, and its weight goes to the watches that lasted longer.
    #[arg(long, value_enum, default_value_t = AttributionArg::Km)]
    attribution: AttributionArg,
    /// Skip the exact histograms and the accuracy (a full pass of Olken's method).
    #[arg(long)]
    no_exact: bool,
    /// Use/reuse instruction pairs listed.
    #[arg(long, default_value_t = 20, value_parser = non_negative)]
    top: usize,
    /// Output on stdout; a live run prints it on stderr, as the program's own output keeps
    /// stdout (use -o FILE for the JSON).
    #[arg(short = 'f', long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also write the JSON report to FILE (atomically).
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Threads decoding the trace (default: one per CPU).
    #[arg(long = "decode-threads", value_parser = non_negative)]
    decode_threads: Option<usize>,
    /// Run over the readable part of a damaged trace (a capture killed mid-write) instead of
    /// refusing it.
    #[arg(long)]
    allow_damaged: bool,
    /// Live runs: natively with the PMU's address sampling where the CPU has it (as RDX),
    /// else under QEMU.
    #[arg(long, value_enum, default_value_t = LiveBackend::Auto)]
    backend: LiveBackend,
    /// Live runs under QEMU: leave the first touch of the program's large new memory to the
    /// program. By default a helper thread touches it first, 16 MiB ahead of where the
    /// program writes (anonymous mappings of 1 MiB and more, and the heap's growth), so that
    /// the kernel clears those pages away from the armed debug registers, which slow that
    /// clearing about 20x on some CPUs; the program's resident memory may then run up to a
    /// window ahead of its use.
    #[arg(long)]
    no_prefault: bool,
    /// A program to measure live: one sample every PERIOD accesses (default adaptive, see
    /// --period) and the machine's debug registers as watchpoints; no trace is written. Under
    /// QEMU every thread is sampled with its own access count and registers (each counts
    /// inline with a counter of its own where QEMU 7.2 switches in place, else in callbacks
    /// once a second thread starts); natively only the main thread is sampled.
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
                AttributionArg::Km => Attribution::Km,
            },
            ..RdxConfig::default()
        }
    }
}

/// The first period of a live run's adaptive default: the run's length is unknown, so it
/// starts dense (short runs get samples; gaps under 2^17 stay in memory callbacks, which
/// cost no switch of instrumentation) and the plugin doubles it every 128 samples and
/// lengthens it to keep the samples' cost near 5% (each costs two switches: 50-300 us where
/// QEMU 7.2 switches in place, 0.4-5 ms where every switch flushes its translations).
const LIVE_FIRST_PERIOD: u64 = 1 << 12;

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
        (None, None) => LIVE_FIRST_PERIOD,
    };
    let rdx = args.rdx_config(period);
    let valid = if args.program.is_empty() {
        rdx.validate()
    } else {
        rdx.validate_live()
    };
    if let Err(e) = valid {
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
        return live(&args, rdx);
    }
    if args.backend != LiveBackend::Auto {
        bail!("--backend chooses where a live run measures: give a program (mgbench reuse --backend ... -- PROGRAM), not --rdx");
    }
    let report = match &args.rdx {
        None => bail!(
            "nothing to measure: give a full trace with --rdx TRACE (record one with mgbench capture --full -o TRACE -- PROGRAM), or a program to measure live: mgbench reuse -- PROGRAM ARGS"
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
                allow_damaged: args.allow_damaged,
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
    emit(
        &report,
        args.format,
        args.output.as_ref(),
        &mut std::io::stdout().lock(),
    )?;
    Ok(0)
}

/// `mgbench reuse -- PROGRAM`: RDX while the program runs under QEMU.
fn live(args: &ReuseArgs, rdx: RdxConfig) -> Result<i32> {
    use mgbench_capture::backend::qemu::{rdx_live, rdx_native, LiveRdxConfig, NativeSampler};
    use mgbench_capture::backend::{signal_name, ProgramExit};
    // Removed on every way out, errors included.
    let events = super::TempFile::new("mgbench-rdx-events", "txt");
    let pmu = NativeSampler::detect();
    let native = match (args.backend, pmu) {
        (LiveBackend::Auto, p) => p,
        (LiveBackend::Qemu, _) => None,
        (LiveBackend::Pmu, Some(p)) => Some(p),
        (LiveBackend::Pmu, None) => bail!(
            "--backend pmu: this machine has no PMU address sampling (no ibs_op or cpu/events/mem-loads under /sys/bus/event_source/devices; virtual machines rarely pass the PMU through); use --backend qemu"
        ),
        (LiveBackend::PageFaults, _) => Some(NativeSampler::PageFaults),
    };
    let live_cfg = LiveRdxConfig {
        program: PathBuf::from(&args.program[0]),
        args: args.program[1..].iter().map(Into::into).collect(),
        events: events.path.clone(),
        period: rdx.period,
        adaptive: args.period.is_none(),
        jitter: rdx.jitter,
        watchpoints: rdx.watchpoints,
        seed: rdx.seed,
        prefault: !args.no_prefault,
    };
    // The program's files (libc's debug information among them: ~45 ms) load while it runs,
    // for the instruction pairs of the report.
    let program = live_cfg.program.clone();
    let symbols = mgbench_capture::symbols::Preloaded::start(move || {
        mgbench_capture::symbols::program_objects(&program)
    });
    let run = match native {
        Some(s) => {
            eprintln!(
                "mgbench: live RDX natively with {} (the main thread only)",
                s.describe()
            );
            rdx_native(&live_cfg, s)
        }
        None => rdx_live(&live_cfg),
    }
    .map_err(|e| match e {
        mgbench_capture::backend::CaptureError::QemuMissing if pmu.is_none() => anyhow::anyhow!(
            "live RDX needs qemu-x86_64 (not found: install qemu-user, or set MGBENCH_QEMU), and this machine has no PMU address sampling (no ibs_op or cpu/events/mem-loads under /sys/bus/event_source/devices) for a native run; record a trace instead: mgbench capture --backend ptrace --full -o reuse.mgbt -- PROGRAM, then mgbench reuse --rdx reuse.mgbt"
        ),
        e => e.into(),
    })?;
    let cfg = ReuseConfig {
        rdx,
        exact: false,
        top_pairs: args.top,
        ..ReuseConfig::default()
    };
    let mut report = reuse_live(&events.path, &run.command, &cfg, Some(symbols))?;
    let code = match run.exit {
        ProgramExit::Code(c) => c,
        ProgramExit::Signal(s) => {
            // SIGILL under QEMU: most likely AVX-512, which TCG lacks; natively the CPU
            // refused the instruction itself.
            let why = match (s, native.is_some()) {
                (4, false) if mgbench_capture::backend::host_has_avx512() => {
                    " (QEMU's TCG lacks AVX-512: live RDX needs QEMU here; record with mgbench capture --backend ptrace --full and run reuse --rdx)"
                }
                (4, false) => {
                    " (QEMU's TCG lacks AVX-512, most likely the cause, and so does this CPU (no avx512f in /proc/cpuinfo): neither live RDX nor a ptrace capture runs such code here; on a machine with AVX-512, mgbench capture --backend ptrace --full, then reuse --rdx)"
                }
                _ => "",
            };
            report
                .notes
                .push(format!("the program was killed by {}{why}", signal_name(s)));
            128 + s
        }
        ProgramExit::Detached => 0,
    };
    if let Some(s) = run.interrupted {
        report
            .notes
            .push(format!("interrupted by {}", signal_name(s)));
    }
    // The helper's pages (under QEMU) were cleared without the registers.
    let clearing = run.page_clearing_note(report.prefaulted_pages.unwrap_or(0));
    report.notes.extend(run.notes);
    report.notes.extend(clearing);
    report.notes.push(match native {
        Some(NativeSampler::PageFaults) => format!(
            "measured natively in {:.2} s with the page-fault event as sampler and clock: a self-test of the native path, whose times are in page faults, not accesses (no trace written)",
            run.elapsed_s
        ),
        Some(s) => format!(
            "measured natively in {:.2} s with {} (no trace written; untested on real PMUs by mgbench's authors)",
            run.elapsed_s,
            s.describe()
        ),
        None => format!(
            "measured live under QEMU in {:.2} s (no trace written)",
            run.elapsed_s
        ),
    });
    // The program's output owns stdout (`mgbench reuse -- gzip -c f > f.gz` must leave a
    // valid archive), so the report goes where `perf stat` and `time` put theirs (buffered:
    // stderr is not, and the table was a write per field, 1255 of them for one report).
    emit(
        &report,
        args.format,
        args.output.as_ref(),
        &mut std::io::BufWriter::new(std::io::stderr().lock()),
    )?;
    Ok(code)
}

/// Prints the report on `out` and writes its JSON to `output`.
fn emit(
    report: &ReuseReport,
    format: Format,
    output: Option<&PathBuf>,
    out: &mut impl Write,
) -> Result<()> {
    if let Some(path) = output {
        let mut json = serde_json::to_vec_pretty(report)?;
        json.push(b'\n');
        write_atomically(path, &json)?;
        eprintln!("mgbench: reuse report -> {}", path.display());
    }
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, report)?;
            writeln!(out)?;
        }
        Format::Table => table(report, out)?,
    }
    out.flush()?;
    Ok(())
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{:.2}", 100.0 * x))
}

fn bins(g: &GranularityReport, list: &[Bin], out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<12} {:>9} {:>9} {:>9} {:>13} {:>9} {:>9}   (% of reuses)",
        format!("{} bin", g.granularity.unit()),
        "RDX time",
        "exact",
        "RDX stack",
        "(80% range)",
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
            "{:<12} {:>9} {:>9} {:>9} {:>13} {:>9} {:>9}",
            b.label,
            pct(Some(b.time)),
            pct(b.exact_time),
            pct(Some(b.stack)),
            b.stack_range.map_or("-".into(), |[lo, hi]| format!(
                "{:.1}-{:.1}",
                100.0 * lo,
                100.0 * hi
            )),
            pct(b.exact_stack),
            pct(b.converted_exact_time)
        )?;
    }
    Ok(())
}

/// Below this many effective uses without reuse the distinct estimate (accesses x their
/// share) is a count of a few events (Debian's bzip2, 1-8 of them: 0.01-67 times the
/// exact count over runs).
const ROUGH_DISTINCT: f64 = 10.0;

/// What the distinct estimate rests on, where the reader should know: the model's floor
/// (the locations the window of the longest reuse holds; not the true count's floor, as the
/// sampled histogram's tail weighs a long reuse by the share of samples that saw it) or a
/// handful of uses without reuse.
fn distinct_basis(g: &GranularityReport, accesses: u64) -> String {
    let from_last_uses = distinct_from_last_uses(g.attributed_reuses, g.no_reuse, accesses);
    match g.no_reuse_effective {
        Some(k) if k <= 0.0 => {
            " (every sampled use saw a reuse: the locations the window of the longest sampled reuse holds, by the model; one sample of a rare long reuse can put it above the true count)".into()
        }
        Some(k) if g.distinct_estimate > from_last_uses + 0.5 => format!(
            " (the locations the window of the longest reuse holds; the {k:.1} effective uses without reuse say {from_last_uses:.0})"
        ),
        Some(k) if k < ROUGH_DISTINCT => format!(
            " (rough: it rests on {k:.1} effective uses without reuse; it can be off many times over)"
        ),
        _ => String::new(),
    }
}

fn granularity(
    g: &GranularityReport,
    accesses: u64,
    threads: usize,
    out: &mut impl Write,
) -> std::io::Result<()> {
    // With no sample there is nothing to estimate the distinct locations from.
    let estimate = if g.samples == 0 {
        "not estimated (no sample)".to_string()
    } else {
        format!(
            "{:.0} estimated{}",
            g.distinct_estimate,
            distinct_basis(g, accesses)
        )
    };
    writeln!(
        out,
        "{}: {} samples ({} dropped with every register busy{}), {} traps standing for {:.0} reuses, {:.0} uses without reuse; distinct {}: {estimate}{}",
        g.granularity.unit(),
        g.samples,
        g.dropped,
        g.effective_samples
            .map(|e| format!("; {e:.0} effective"))
            .unwrap_or_default(),
        g.traps,
        g.attributed_reuses,
        g.no_reuse,
        g.granularity.unit(),
        g.distinct_exact
            .map(|n| format!(", {n} exact"))
            .unwrap_or_default()
    )?;
    bins(g, &g.rdx_bins, out)?;
    writeln!(
        out,
        "stack distances: the time distances converted {}{}",
        if g.phases > 1 {
            format!(
                "phase by phase ({} phases of the run, each with its own reuse times)",
                g.phases
            )
        } else if threads > 1 {
            // README, RDX: "Threads that differ".
            match g.thread_groups {
                Some(k) if k > 1 => format!("in {k} groups of the {threads} threads, each group's reuse times as one phase (the threads' reuse times differ between groups, by a Kolmogorov-Smirnov test at 1%; no thread has phases told apart: too few effective samples, or phases alike)"),
                _ => format!("with the {threads} threads' reuse times together as one phase (a Kolmogorov-Smirnov test at 1% tells none apart, and no thread has phases told apart: threads that differ, as a main thread that fills the data alone, can go unnoticed on few samples and put long reuses a bin off)"),
            }
        } else if g.effective_samples.is_some_and(|e| phases_allowed(e) > 1) {
            "with the run as one phase (none of its phases differs from the rest of the run by a Kolmogorov-Smirnov test at 1%: cut apart, a steady run only gets each phase's sampling noise)".into()
        } else {
            "with the run as one phase (too few effective samples to tell phases apart)".into()
        },
        g.exact_phases
            .map(|p| format!("; the exact times over {p} phase(s)"))
            .unwrap_or_default()
    )?;
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
    if let Some(sp) = &g.spread {
        writeln!(
            out,
            "the samples' own spread ({} bootstrap replicates of the sampled uses; the range column holds 80% of them): time S about {:.3}, stack S about {:.3} over RDX's 20 bins ({:.3} and {:.3} over log2 bins); it sees sampling noise, not a model's bias",
            sp.replicates, sp.time_s, sp.stack_s, sp.fine_time_s, sp.fine_stack_s
        )?;
    }
    writeln!(out)
}

fn table(r: &ReuseReport, out: &mut impl Write) -> std::io::Result<()> {
    let (every, how) = match r.adaptive_period {
        Some(a) => (
            format!("every {} to {} accesses", a.min, a.max),
            "adaptive, ",
        ),
        None => (format!("every {} accesses", r.config.period), ""),
    };
    writeln!(
        out,
        "{}: {} accesses in {} thread(s); RDX sampling {every} ({how}jitter {}), {} watchpoint(s), seed {}",
        r.trace, r.accesses, r.threads, r.config.jitter, r.config.watchpoints, r.config.seed
    )?;
    writeln!(out)?;
    granularity(&r.words, r.accesses, r.threads, out)?;
    if let Some(lines) = &r.lines {
        granularity(lines, r.accesses, r.threads, out)?;
    }
    writeln!(
        out,
        "use -> reuse instruction pairs (by the reuses, or uses without reuse, they stand for):"
    )?;
    for p in &r.pairs {
        // A pair without reuse counts uses that saw none (and the samples that watched
        // them to the end), not reuses and traps.
        let (what, counted, time) = match p.mean_time {
            Some(t) => ("reuses,", "traps,  ", format!("mean time {t:>12.0}")),
            None => ("uses,  ", "samples,", format!("{:<22}", "no reuse")),
        };
        writeln!(
            out,
            "  {:>10.0} {what} {:>5} {counted} {time}  {} {} -> {}",
            p.weight,
            p.traps,
            p.use_ip,
            short_source(&p.use_source),
            match (&p.reuse_ip, &p.reuse_source) {
                (Some(ip), Some(src)) => format!("{ip} {}", short_source(src)),
                _ if p.mean_time.is_some() => "(reused; the instruction is not known live)".into(),
                _ => "(no reuse before the end)".into(),
            }
        )?;
    }
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}
