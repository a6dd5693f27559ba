//! `mgbench analyze`: locality scores, reuse curves, footprints and the Apex-MAP proxy of a
//! trace.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};
use mgbench_synth::analyze::{analyze as run_analysis, AnalyzeConfig, Locality, LocalityReport};
use mgbench_synth::apex;
use mgbench_synth::locality::ReuseMethod;

use super::progress::{Display, Style};
use super::replay::non_negative;
use mgbench_replay::results::write_atomically;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GroupBy {
    /// One row per function (symbolized from the trace's mappings).
    Function,
}

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// The trace to analyse (from `mgbench capture` or `mgbench import`).
    trace: PathBuf,
    /// Output format (both go to stdout).
    #[arg(short = 'f', long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also break the analysis down per function (top 32 by references, then "(other)").
    #[arg(long, value_enum)]
    by: Option<GroupBy>,
    /// Estimate reuse distances by SHARDS at this sampling rate (0 < RATE <= 1) instead of
    /// exactly: less memory and time on very long traces, with an error the output states.
    #[arg(long, value_name = "RATE", value_parser = rate)]
    shards: Option<f64>,
    /// Only this thread's accesses (thread ids as in `trace info`).
    #[arg(long, value_parser = non_negative)]
    thread: Option<usize>,
    /// Analyse the readable part of a damaged trace instead of refusing it.
    #[arg(long)]
    allow_damaged: bool,
    /// Skip the Apex-MAP fit (it scores 110 synthetic streams: about a second).
    #[arg(long)]
    no_apex: bool,
    /// Apex-MAP memory size M in 8-byte words for the fit (default 2^24 = 128 MiB).
    #[arg(long, value_name = "WORDS", default_value_t = apex::DEFAULT_M, value_parser = apex_m)]
    apex_m: u64,
    /// Threads decoding the trace and scoring the Apex-MAP grid (default: one per CPU).
    #[arg(long = "decode-threads", value_parser = non_negative)]
    decode_threads: Option<usize>,
    /// Also write the report as JSON to FILE (atomically: a temporary file, then a rename).
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Refuses an output path whose directory does not exist or cannot be written.
pub(crate) fn check_writable(path: &std::path::Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let meta = std::fs::metadata(&dir).map_err(|e| {
        anyhow::anyhow!(
            "cannot write {}: its directory {} is not usable ({e})",
            path.display(),
            dir.display()
        )
    })?;
    if !meta.is_dir() {
        anyhow::bail!(
            "cannot write {}: {} is not a directory",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

fn rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err(format!(
            "{s:?} is not a sampling rate: give a number in (0, 1], e.g. 0.01 to track 1% of addresses"
        )),
    }
}

fn apex_m(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(m) if (1024..=1 << 34).contains(&m) => Ok(m),
        _ => Err(format!(
            "{s:?} is not a memory size in words: give an integer from 1024 to 2^34 (17179869184)"
        )),
    }
}

impl AnalyzeArgs {
    fn config(&self) -> AnalyzeConfig {
        AnalyzeConfig {
            method: match self.shards {
                Some(rate) => ReuseMethod::Shards { rate },
                None => ReuseMethod::Exact,
            },
            by_function: self.by.is_some(),
            thread: self.thread.map(|t| t as u32),
            allow_damaged: self.allow_damaged,
            threads: self
                .decode_threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
                .max(1),
            apex: !self.no_apex,
            apex_m: self.apex_m,
            progress: Default::default(),
        }
    }
}

pub fn analyze(args: AnalyzeArgs) -> Result<i32> {
    if let Some(out) = &args.output {
        // Fail before minutes of analysis, not after.
        check_writable(out)?;
    }
    let cfg = args.config();
    announce(&args.trace, &cfg);
    let report = {
        let _bar = Display::start(&cfg.progress, Style::Bytes);
        run_analysis(&args.trace, &cfg)?
    };
    if let Some(path) = &args.output {
        let mut json = serde_json::to_vec_pretty(&report)?;
        json.push(b'\n');
        write_atomically(path, &json)?;
        eprintln!("mgbench: analysis -> {}", path.display());
    }
    let mut out = std::io::stdout().lock();
    match args.format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, &report)?;
            writeln!(out)?;
        }
        Format::Table => table(&report, &mut out)?,
    }
    Ok(0)
}

/// Says up front what the analysis will read and the memory its reuse engines need.
fn announce(trace: &std::path::Path, cfg: &AnalyzeConfig) {
    let Some(end) = mgbench_capture::trace::read_end_info(trace) else {
        return;
    };
    let bytes = std::fs::metadata(trace).map_or(0, |m| m.len());
    let (per, bound) = mgbench_synth::analyze::memory_bound(end.recorded, cfg.method);
    let available = mgbench_replay::available_memory_bytes();
    let mut line = format!(
        "mgbench: analysing {} accesses ({}); the reuse engines keep about {per} bytes per \
         distinct word and line in densely used memory, {} if every access touched new memory",
        end.recorded,
        human(bytes),
        human(bound)
    );
    if let Some(avail) = available.filter(|&a| bound > a) {
        line.push_str(&format!(
            " (more than the {} available: a trace touching that much distinct memory would \
             need --shards RATE, which scales it by RATE)",
            human(avail)
        ));
    }
    eprintln!("{line}");
}

fn human(bytes: u64) -> String {
    mgbench_replay::plan::human_bytes(u128::from(bytes))
}

/// Characters of the table's name column.
const NAME_WIDTH: usize = 28;

/// A C++ function's name without its parameters and return type where it would not fit the
/// column (`LAMMPS_NS::PairLJCut::compute`, not `LAMMPS_NS::~ompute(int, int)`), and a Python
/// module's without its ABI tag (`[_multiarray_umath.so]`, not `[_multiarra~64-linux-gnu.so]`);
/// the JSON keeps it whole.
fn short_name(name: &str) -> String {
    use mgbench_capture::symbols::{without_abi_tag, without_parameters};
    let name = without_abi_tag(name);
    if name.chars().count() <= NAME_WIDTH {
        return name;
    }
    // Unnamed code, "sub_24fe00 [libruby-3.1.so.3.1.2]", keeps its file (without the
    // library's version: "sub_24fe00 [libruby-3.1.so]").
    match name.strip_suffix(']').and_then(|n| n.rsplit_once(" [")) {
        Some((function, file)) => {
            let file = match file.split_once(".so.") {
                Some((stem, _)) => format!("{stem}.so"),
                None => file.to_string(),
            };
            format!("{} [{file}]", without_parameters(function))
        }
        None => without_parameters(&name).to_string(),
    }
}

fn row(name: &str, l: &Locality, out: &mut impl Write) -> std::io::Result<()> {
    let f = &l.footprint;
    let apex = match &l.apex {
        Some(a) => format!("{:>5} {:>7} {:>8.3}", a.l, a.k, a.residual),
        None => format!("{:>5} {:>7} {:>8}", "-", "-", "-"),
    };
    writeln!(
        out,
        "{:<w$} {:>12} {:>7.3} {:>8.3} {:>9.1} {:>6.3} {:>6.1} {:>6.1}  {apex}",
        mgbench_replay::export::truncate(&short_name(name), NAME_WIDTH),
        l.references,
        l.spatial_score,
        l.temporal_score,
        f.mean_blocks,
        f.growth,
        f.strided_pct,
        f.irregular_pct,
        w = NAME_WIDTH,
    )
}

fn table(r: &LocalityReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: {} trace of {}, {} accesses, sample ratio {}, reuse distances {}",
        r.trace,
        r.mode,
        r.program.as_deref().unwrap_or("?"),
        r.accesses,
        r.sample_ratio_text(),
        match r.reuse_method {
            ReuseMethod::Exact => "exact".to_string(),
            ReuseMethod::Shards { rate } => format!("SHARDS at rate {rate}"),
        }
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<w$} {:>12} {:>7} {:>8} {:>9} {:>6} {:>6} {:>6}  {:>5} {:>7} {:>8}",
        "",
        "references",
        "spatial",
        "temporal",
        "F/window",
        "dF",
        "F_str%",
        "F_irr%",
        "L",
        "K",
        "residual",
        w = NAME_WIDTH,
    )?;
    row("(program)", &r.program_locality, out)?;
    for f in &r.functions {
        row(&f.function, &f.locality, out)?;
    }
    let l = &r.program_locality;
    writeln!(out)?;
    writeln!(
        out,
        "reuse distance CDF of the program (fraction of references reused below d):"
    )?;
    writeln!(out, "{:>8} {:>8} {:>8}", "d", "words", "lines")?;
    for (i, p) in l.reuse_histogram.below.iter().enumerate() {
        let lines = l
            .reuse_histogram_lines
            .as_ref()
            .and_then(|c| c.below.get(i))
            .map_or("-".to_string(), |q| format!("{:.4}", q.fraction));
        writeln!(out, "{:>8} {:>8.4} {:>8}", p.distance, p.fraction, lines)?;
    }
    let lines_tail = |f: fn(&mgbench_synth::locality::ReuseCurve) -> f64| {
        l.reuse_histogram_lines
            .as_ref()
            .map_or("-".to_string(), |c| format!("{:.4}", f(c)))
    };
    writeln!(
        out,
        "{:>8} {:>8.4} {:>8}",
        ">=N",
        l.reuse_histogram.beyond,
        lines_tail(|c| c.beyond)
    )?;
    writeln!(
        out,
        "{:>8} {:>8.4} {:>8}",
        "cold",
        l.reuse_histogram.cold,
        lines_tail(|c| c.cold)
    )?;
    let f = &l.footprint;
    writeln!(out)?;
    writeln!(
        out,
        "footprint: {} windows, {:.1} blocks (64 B) per window, growth {:.3} blocks/access",
        f.windows, f.mean_blocks, f.growth
    )?;
    writeln!(out, "  {}", f.total_summary())?;
    if let Some(a) = &l.apex {
        writeln!(
            out,
            "Apex-MAP proxy: L = {} words, K = {}, M = {} words ({}); its stream scores spatial {:.3}, temporal {:.3}: residual {:.3}. Run it: mgbench replay --kernel apex --apex-l {} --apex-k {}",
            a.l, a.k, a.m, a.method, a.spatial, a.temporal, a.residual, a.l, a.k
        )?;
    }
    writeln!(
        out,
        "memory: the reuse engines held {} for {} distinct words and {} distinct lines",
        human(r.memory.reuse_engine_bytes),
        r.memory.distinct_words,
        r.memory.distinct_lines
    )?;
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::short_name;

    #[test]
    fn a_long_cpp_name_drops_its_parameters_in_the_table() {
        assert_eq!(short_name("main"), "main");
        assert_eq!(
            short_name("LAMMPS_NS::PairLJCut::compute(int, int)"),
            "LAMMPS_NS::PairLJCut::compute"
        );
        // Short enough: kept whole, parameters and all.
        assert_eq!(short_name("k::f(int)"), "k::f(int)");
        // A long name that is no C++ signature stays as it is (the table cuts its middle).
        let c = "a_very_long_c_function_name_without_parameters";
        assert_eq!(short_name(c), c);
        // NumPy's unnamed code: the module without its ABI tag.
        assert_eq!(
            short_name("[_multiarray_umath.cpython-311-x86_64-linux-gnu.so]"),
            "[_multiarray_umath.so]"
        );
        // A stripped library's unnamed function keeps its file, without the version.
        assert_eq!(
            short_name("sub_24ebd0 [libruby-3.1.so.3.1.2]"),
            "sub_24ebd0 [libruby-3.1.so]"
        );
        assert_eq!(
            short_name("sub_4415e0 [a_long_program_name_here]"),
            "sub_4415e0 [a_long_program_name_here]"
        );
    }
}
